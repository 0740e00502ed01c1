// Internal: where a node's topology enters the per-node placement rules (the
// only hooks the cluster needs). Not part of the public API.

#ifndef GPUSHARE_TOPOLOGY_NODE_GPUS_H_
#define GPUSHARE_TOPOLOGY_NODE_GPUS_H_

#include <optional>
#include <string>
#include <vector>

#include "gpushare/types.h"

namespace gpushare::internal {

// The GPUs `request` gets on `node`, given the policy's choice `chosen` among
// `fitting`. Unchanged on a topology-blind node, for mode kNone and for CPU-
// only demands. Otherwise Topology::Choose() over the fitting GPUs, with the
// policy's choice first in the preference order (so among equally connected
// sets the policy's own wins). A single GPU is moved only among idle GPUs,
// and only when the policy took an idle one: the topology then picks the
// idle GPU that breaks the fewest well-connected groups.
std::vector<int> TopologyGpus(const NodeStatus& node, const Demand& demand,
                              const Request& request, const std::vector<int>& fitting,
                              std::vector<int> chosen);

// Whether `node` can meet the request's required minimum link with the
// `fitting` GPUs (true also when nothing is required, or for one GPU): the
// reason-free form of CheckTopologyNeed, for the paths that never report why.
bool MeetsTopologyNeed(const NodeStatus& node, const Demand& demand, const Request& request,
                       const std::vector<int>& fitting);

// Why `node` cannot meet the request's required minimum link with the
// `fitting` GPUs, or nullopt (also when nothing is required, or for one GPU).
std::optional<std::string> CheckTopologyNeed(const NodeStatus& node, const Demand& demand,
                                             const Request& request,
                                             const std::vector<int>& fitting);

// The weakest link among `gpus` on `node` ("NV2"), or "" for fewer than two
// GPUs or a topology-blind node.
std::string WeakestLinkOf(const NodeStatus& node, const std::vector<int>& gpus);

// The GPUs of `node` that are healthy and hold nothing.
std::vector<int> IdleGpus(const NodeStatus& node);

}  // namespace gpushare::internal

#endif  // GPUSHARE_TOPOLOGY_NODE_GPUS_H_
