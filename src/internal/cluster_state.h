// Internal: the state behind gpushare::Cluster, and the per-node rules
// (feasibility, applying and undoing a placement) that every path shares.

#ifndef GPUSHARE_INTERNAL_CLUSTER_STATE_H_
#define GPUSHARE_INTERNAL_CLUSTER_STATE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gpushare/cluster.h"
#include "gpushare/types.h"
#include "src/internal/placement_index.h"
#include "src/internal/placement_store.h"

namespace gpushare::internal {

// A number no other node set of this process has had: a fresh one when a
// node is added or removed (positions move then) and when a state is copied
// (the copy's future changes are its own), so that a node's position and
// its NodeStatus::version name one state of one node.
class NodeSetGeneration {
 public:
  NodeSetGeneration() : value_(Next()) {}
  NodeSetGeneration(const NodeSetGeneration&) : value_(Next()) {}
  NodeSetGeneration& operator=(const NodeSetGeneration&) {
    value_ = Next();
    return *this;
  }
  void Bump() { value_ = Next(); }
  uint64_t value() const { return value_; }

 private:
  static uint64_t Next();
  uint64_t value_;
};

struct ClusterState {
  ClusterOptions options;
  std::vector<NodeStatus> nodes;             // In the order they were added.
  NodeSetGeneration generation;              // Bumped when `nodes` gains or loses one.
  std::vector<uint64_t> tie_keys;            // Parallel to nodes; larger wins.
  absl::flat_hash_map<std::string, uint32_t> node_index;  // name -> position.
  PlacementStore placements;                 // id -> placement.
  uint64_t next_sequence = 0;                // Insertion counter for tie keys.
  // Every non-empty GPU UUID in the cluster -> the name of its node. A UUID
  // identifies one physical GPU, so it appears at most once.
  absl::flat_hash_map<std::string, std::string> gpu_uuids;
  int max_gpus_per_node = 0;
  // The ids of the latest options.remembered_releases releases, oldest
  // first; released[k] is release number released_base + k. Release() only
  // appends here; the lookup below is brought up to date when a Release()
  // of an id that is not placed asks whether it was released (the rare error
  // path), so that successful calls pay no hashing for it.
  std::deque<std::string> released;
  uint64_t released_base = 0;
  // id -> number of its latest release, covering releases below
  // released_synced; entries below released_base are forgotten ones.
  absl::flat_hash_map<std::string, uint64_t> released_lookup;
  uint64_t released_synced = 0;

  // Records the release of `id`, forgetting the oldest beyond the limit.
  void RememberRelease(std::string id);
  // Whether `id` is among the remembered releases.
  bool WasReleased(std::string_view id);
  // Ordered views of `nodes` for the built-in policies; every change to a
  // node goes through index.Unlink() before and index.Link() after.
  PlacementIndex index;
};

// What the library's loaders (the snapshot, Kubernetes lists) may do to a
// Cluster beyond its API.
struct ClusterAccess {
  // Makes room for `nodes` nodes, `gpus` GPUs (with UUIDs at most) and
  // `placements` placements, so that adding them does not rehash the maps
  // (which moves every entry). Changes nothing else.
  static void Reserve(Cluster& cluster, size_t nodes, size_t gpus, size_t placements);
  // Cluster::Commit() that moves the placement into the store instead of
  // copying it (what a loader no longer needs). The same checks and errors;
  // on an error `placement` is left as it was.
  static absl::Status CommitMoved(Cluster& cluster, Placement&& placement);
  // Commit() of a placement that already runs (a bound pod's annotations):
  // the node may be unschedulable, not take shared work, or its GPUs
  // unhealthy (see CheckCommit()); the GPUs' capacity is checked all the same.
  static absl::Status CommitRunning(Cluster& cluster, const Placement& placement);
  static absl::Status CommitRunning(Cluster& cluster, Placement&& placement);
  // Cluster::AddNode() that moves the node's strings, labels and GPUs into
  // its status. The same checks and errors; on an error `node` is left as
  // it was.
  static absl::Status AddNodeMoved(Cluster& cluster, Node&& node);
  // The nodes by position (the order they were added), and the generation
  // of that order (NodeSetGeneration): a position names the same node while
  // the generation stays, and the node's state while its version stays.
  static const std::vector<NodeStatus>& Nodes(const Cluster& cluster);
  static uint64_t NodeSetGenerationOf(const Cluster& cluster);
};

// The tie key of a node added as the `sequence`-th node: with seed 0 the
// sequence itself (newest wins), otherwise a seeded hash of the name.
uint64_t TieKey(uint64_t seed, const std::string& name, uint64_t sequence);

// Validates `request` for a cluster whose largest node has `max_gpus` GPUs.
absl::StatusOr<Demand> ValidateRequest(const Request& request, int max_gpus);

// Validates a node description (sizes, names) for AddNode().
absl::Status ValidateNode(const Node& node);

// The status of a freshly added node; the second takes the node's strings,
// labels and GPU models instead of copying them.
NodeStatus MakeNodeStatus(const Node& node);
NodeStatus MakeNodeStatus(Node&& node);

// Whether `node` can host `demand` (with the request's selector and models)
// now. On success fills `fitting` with the GPUs that can take one share each
// and returns nullopt; otherwise returns the reason.
std::optional<std::string> CheckNode(const NodeStatus& node, const Demand& demand,
                                     const Request& request,
                                     std::vector<int>* fitting);

// CheckNode() without the reason, for the paths that do not report it: the
// same answer and `fitting` when it fits.
bool NodeFits(const NodeStatus& node, const Demand& demand, const Request& request,
              std::vector<int>* fitting);

// Whether the request's GPU models (none: any) include `gpu`'s.
inline bool ModelAllowed(const Request& request, const GpuStatus& gpu) {
  return request.gpu_models.empty() ||
         std::find(request.gpu_models.begin(), request.gpu_models.end(), gpu.model) !=
             request.gpu_models.end();
}

// The node-wide part of NodeFits(): schedulable, node selector, shared work,
// CPU and host memory. NodeFits() is NodeAdmits() and then the GPUs.
bool NodeAdmits(const NodeStatus& node, const Demand& demand, const Request& request);

// Fetches `node`'s status (four cache lines) into cache ahead of its use:
// the score memo calls it for the nodes it offers as the winner, which a
// place commits to next, and in a large cluster finds out of cache.
inline void PrefetchNode(const NodeStatus& node) {
  const char* p = reinterpret_cast<const char*>(&node);
  for (size_t b = 0; b < sizeof(NodeStatus); b += 64) __builtin_prefetch(p + b);
}

// Applies / undoes a placement on its node. Apply assumes the placement fits.
void ApplyToNode(NodeStatus& node, const Placement& placement);
void UndoOnNode(NodeStatus& node, const Placement& placement);

// Checks that `placement` can be applied to `node` now (for Commit()).
// `running`: the placement already runs (being restored), so a cordon,
// sharing turned off and unhealthy GPUs do not refuse it; capacity does.
absl::Status CheckCommit(const NodeStatus& node, const Placement& placement,
                         bool running = false);

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_CLUSTER_STATE_H_
