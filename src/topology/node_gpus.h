// Internal: where a node's topology enters the per-node placement rules (the
// only hooks the cluster needs). Not part of the public API.

#ifndef GPUSHARE_TOPOLOGY_NODE_GPUS_H_
#define GPUSHARE_TOPOLOGY_NODE_GPUS_H_

#include <optional>
#include <string>
#include <vector>

#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare::internal {

// Applies `node`'s topology to the policy's verdict `choice` (its GPUs among
// `fitting`), as every path that scores nodes does right after Evaluate():
//  - the GPUs: unchanged on a topology-blind node, for mode kNone and for
//    CPU-only demands; otherwise Topology::Choose() over the fitting GPUs,
//    with the policy's choice first in the preference order (so among
//    equally connected sets the policy's own wins). A single GPU is moved
//    only among idle GPUs, and only when the policy took an idle one: the
//    topology then picks the idle GPU that breaks the fewest well-connected
//    groups;
//  - choice->score.topology (gpushare/policy.h): for two or more GPUs and a
//    mode other than kNone, the chosen set's measure over
//    Topology::IdealMeasure(), or 1 on a node without a topology or with a
//    uniform one; 0 otherwise.
// A function of the node and the request only, so memoised scores stay valid
// until the node changes.
void ApplyTopology(const NodeStatus& node, const Demand& demand, const Request& request,
                   const std::vector<int>& fitting, NodeChoice* choice);

// The largest Score::topology any node can get for the request: 1 when
// ApplyTopology() sets the key, else 0 (for the bounds of the indexes).
inline double TopologyKeyCap(const Demand& demand, const Request& request) {
  return demand.gpu_count >= 2 && request.topology.mode != TopologyNeed::Mode::kNone ? 1 : 0;
}

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
