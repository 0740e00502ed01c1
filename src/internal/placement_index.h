// Internal: ordered indexes over the cluster state that let Cluster::Plan()
// find the winner of the built-in "binpack" and "spread" policies without
// scanning every node. Not part of the public API.
//
// The indexes only choose which nodes to evaluate and in what order, and
// prove when no unvisited node can beat the best one found; every candidate
// is still judged by the scan's rules (NodeFits()) and the policy's own
// Evaluate(), and compared with the same tie-break rule as the generic scan,
// so the result is the scan's by construction. Two exceptions, for
// single-GPU shared requests on nodes whose topology cannot move the
// choice: the GPU index walks GPUs in binpack's own order (free memory,
// free compute, index), so the first GPU met on a node is the policy's
// choice there; and spread takes the node's loosest healthy GPU of an
// allowed model when it fits, which is the first fitting one in spread's
// order. Both check only the node-wide rules (NodeAdmits()) besides, and
// score with the policy's own helper.
//
//   state.index.Unlink(state, slot, &placement.gpus);   // before a change
//   ApplyToNode(state.nodes[slot], placement);
//   state.index.Link(state, slot, &placement.gpus);     // after it
//
// Indexes (slot = position in ClusterState::nodes, tie = the node's tie key):
//  - per GPU model, the healthy GPUs of schedulable nodes that take shared
//    work, by (free memory, free compute, tie desc, slot, GPU index), held as
//    bit sets of positions in the tie-break order per (free memory, free
//    compute) (GpuBuckets, gpu_buckets.h): binpack of single-GPU shared
//    requests walks it from the request's size upwards;
//  - per request shape (M >= 2 GPUs of m units; up to kShapeSlots shapes),
//    schedulable sharing nodes with M healthy GPUs of m free, by (free memory
//    and free compute of the M tightest such GPUs, tie desc, slot): binpack
//    of multi-GPU shared requests takes the first feasible node;
//  - per GPU count M >= 2, for shapes beyond those slots, the same nodes by
//    (M-th largest free memory, sum of the M smallest free memories, sum of
//    the M smallest free computes, tie desc, slot): binpack visits each
//    threshold that is large enough and stops within it at the first node
//    that cannot win;
//  - per GPU count M, schedulable sharing nodes with at least M healthy GPUs,
//    by (GPU memory used / GPU memory, compute used / compute, sum of the M
//    largest free memories desc, tie desc, slot): spread of shared requests
//    walks it from the least used node (a SpreadOrder, spread_order.h: on a
//    pool of nodes with equal GPU memory and count, one small sorted bucket
//    per amount of memory used);
//  - schedulable nodes by (idle healthy GPUs, free GPU memory, tie desc,
//    slot): exclusive requests, binpack from the smallest idle count that
//    suffices, spread from the largest.
// Each index is built on the first Plan() that needs it and kept exact from
// then on, so a workload pays upkeep only for the kinds of request it makes
// (the GPU index, whose positions follow the tie-break order, is dropped
// when a node added finds no room at its place in it, and built again when
// next needed).
// Every other policy uses the generic scan, except the fragmentation-aware
// built-in policies, whose node scores are remembered per request shape in a
// ScoreMemo (see score_memo.h) kept here as well; so are those of binpack and
// spread for CPU-only requests.
//
// Requests with a node selector or GPU models (other than single-GPU binpack
// by model alone, which the per-model GPU trees already serve) are answered
// from a view: the same indexes over only the nodes whose labels match the
// selector and that have a GPU of an allowed model, so that a request for a
// rare model or label does not walk past every other node. A view is made on
// the first request with its (selector, models) and kept exact like the rest;
// past kViewSlots of them, further restrictions walk the unrestricted indexes.

#ifndef GPUSHARE_INTERNAL_PLACEMENT_INDEX_H_
#define GPUSHARE_INTERNAL_PLACEMENT_INDEX_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "gpushare/policy.h"
#include "gpushare/types.h"
#include "src/internal/gpu_buckets.h"
#include "src/internal/score_memo.h"
#include "src/internal/spread_order.h"

namespace gpushare {
class Cluster;
}  // namespace gpushare

namespace gpushare::internal {

struct ClusterState;

// Which built-in policy, if any, `policy` is (by its dynamic type).
enum class IndexedPolicy { kNone, kBinpack, kSpread };
IndexedPolicy ClassifyPolicy(const Policy& policy);

class PlacementIndex {
 public:
  PlacementIndex();
  ~PlacementIndex();
  PlacementIndex(const PlacementIndex& other);
  PlacementIndex& operator=(const PlacementIndex& other);
  PlacementIndex(PlacementIndex&& other) noexcept;
  PlacementIndex& operator=(PlacementIndex&& other) noexcept;

  // Drops everything and indexes every node of `state` again. O(GPUs log GPUs).
  void Rebuild(const ClusterState& state);
  // The node in `slot` of `state` is about to leave it: the caller erases it
  // next, and the slots after it move down by one. Its keys go, every other
  // node's keys stay, renumbered, and so does what the score memo knows of
  // the others (ScoreMemo::NodeRemoved()). O(nodes + keys), without a key
  // computed or a tree searched for the others.
  void RemoveNode(const ClusterState& state, uint32_t slot);

  // Remove / insert the entries of node `slot` as it is now. `gpus` names the
  // GPUs whose counters change (a placement's GPUs); nullptr means all of
  // them and any node-wide change (health, cordon, a new node). Every
  // Unlink() must be followed by the Link() of the same slot, with nothing
  // in between but the change itself.
  void Unlink(const ClusterState& state, uint32_t slot, const std::vector<int>* gpus);
  void Link(const ClusterState& state, uint32_t slot, const std::vector<int>* gpus);
  // Fetches ahead what Link(state, slot, ...) writes of the score memo (only
  // where Link() may be called).
  void PrefetchLink(uint32_t slot) const { memo_.PrefetchTouch(slot); }

  // The node and choice that the generic scan in Cluster::Plan() would pick
  // for `demand` under `policy` (from the score memo for the policies it
  // serves), or false when the indexes do not serve this
  // policy or demand kind, or no node is feasible (the caller then scans, which
  // also gives the reasons).
  // `*none_feasible` is set when false because no node is feasible (known
  // for the memo's policies only).
  bool Plan(const ClusterState& state, const Cluster& cluster, const Request& request,
            const Demand& demand, Policy& policy, int* best_slot, NodeChoice* best_choice,
            bool* none_feasible = nullptr) const;

  // True when the indexes equal freshly built ones (for CheckInvariants()).
  bool Consistent(const ClusterState& state) const;

  // The nodes a view covers: labels that match `selector`, and a GPU (healthy
  // or not) of one of `models` unless that is empty.
  struct Filter {
    std::map<std::string, std::string> selector;
    std::vector<std::string> models;  // Sorted, without repeats.

    bool Admits(const NodeStatus& node) const;
    bool operator==(const Filter& other) const {
      return selector == other.selector && models == other.models;
    }
  };

  // A GPU's free memory and compute packed so that comparing them compares
  // (free memory, free compute).
  static uint64_t GpuShape(int64_t free_memory, int64_t free_compute) {
    return static_cast<uint64_t>(free_memory) << 11 | static_cast<uint64_t>(free_compute);
  }
  static int64_t ShapeMemory(uint64_t shape) { return static_cast<int64_t>(shape >> 11); }
  static int64_t ShapeCompute(uint64_t shape) { return static_cast<int64_t>(shape & 2047); }
  struct PackKey {
    int64_t threshold;     // M-th largest free memory of a healthy GPU, units.
    int64_t low_memory;    // Sum of the M smallest healthy free memories.
    int64_t low_compute;   // Sum of the M smallest healthy free computes.
    uint64_t inv_tie;
    uint32_t slot;
  };
  // For one request shape (M GPUs of m units): the M GPUs binpack takes with
  // no compute or model constraint, i.e. the M tightest of those with m free.
  struct ShapeKey {
    int64_t memory;    // Sum of their free memories, units.
    int64_t compute;   // Sum of their free computes, thousandths.
    uint64_t inv_tie;
    uint32_t slot;
  };
  struct ExclusiveKey {
    int64_t free_memory;   // Free GPU memory of the node, units.
    uint64_t inv_tie;
    uint32_t slot;
    int32_t idle;          // Idle healthy GPUs.
  };
  struct PackLess {
    bool operator()(const PackKey& a, const PackKey& b) const {
      if (a.threshold != b.threshold) return a.threshold < b.threshold;
      if (a.low_memory != b.low_memory) return a.low_memory < b.low_memory;
      if (a.low_compute != b.low_compute) return a.low_compute < b.low_compute;
      if (a.inv_tie != b.inv_tie) return a.inv_tie < b.inv_tie;
      return a.slot < b.slot;
    }
  };
  struct ShapeLess {
    bool operator()(const ShapeKey& a, const ShapeKey& b) const {
      if (a.memory != b.memory) return a.memory < b.memory;
      if (a.compute != b.compute) return a.compute < b.compute;
      if (a.inv_tie != b.inv_tie) return a.inv_tie < b.inv_tie;
      return a.slot < b.slot;
    }
  };
  struct ExclusiveLess {
    bool operator()(const ExclusiveKey& a, const ExclusiveKey& b) const {
      if (a.idle != b.idle) return a.idle < b.idle;
      if (a.free_memory != b.free_memory) return a.free_memory < b.free_memory;
      if (a.inv_tie != b.inv_tie) return a.inv_tie < b.inv_tie;
      return a.slot < b.slot;
    }
  };
  using PackTree = absl::btree_set<PackKey, PackLess>;
  struct ShapeTree {
    int count = 0;           // M.
    int64_t memory = 0;      // m, units.
    absl::btree_set<ShapeKey, ShapeLess> keys;
  };
  using ExclusiveTree = absl::btree_set<ExclusiveKey, ExclusiveLess>;

 private:
  static constexpr int kSpreadSlots = kMaxGpusPerNode + 1;
  static_assert(kMaxGpusPerNode <= 64, "node_counts_ has a bit per GPU count");
  // At most this many request shapes get a tree of their own; further
  // multi-GPU binpack shapes walk the PackTree.
  static constexpr int kShapeSlots = 24;
  // At most this many views (distinct selector and model restrictions).
  static constexpr int kViewSlots = 16;

  // The GPU index, one ordered set per model name, of (shape, position)
  // pairs: a GPU's position is its node's key shifted left by `shift`, plus
  // its index, where node keys increase along the tie-break order (tie key
  // desc, slot) with room left between them and at both ends. A node added
  // later takes a free key between its neighbours (AddSlot()), and a node
  // that leaves frees its own (RemoveSlot()); when no key is free, the index
  // is dropped and the next Plan() that needs it builds it again.
  struct GpuTrees {
    static constexpr uint32_t kNoSlot = ~uint32_t{0};
    absl::flat_hash_map<std::string, int> ids;
    std::vector<std::string> names;  // In order of first appearance.
    std::vector<GpuBuckets> trees;
    std::vector<uint32_t> key;         // By slot.
    std::vector<uint32_t> slot_of;     // By key; kNoSlot where free.
    std::vector<uint32_t> order;       // Slots in the tie-break order.
    int shift = 0;                     // Positions per node: 1 << shift.
    // Keys for the nodes of `state`, in its tie-break order.
    explicit GpuTrees(const ClusterState& state);
    // Gives the node just added at `slot` (the last) a key; false when no
    // key is free at its place in the order, or it has too many GPUs.
    bool AddSlot(const ClusterState& state, uint32_t slot);
    // Frees the key of the node in `slot`, whose GPUs were erased, as it
    // leaves: the later slots move down by one, and every other key, so
    // every position in the sets, stays. False when `slot` has no key.
    bool RemoveSlot(uint32_t slot);
    // The set of `model`, made on first use.
    GpuBuckets& For(const std::string& model);
    // The id of `model`'s set, or -1. A few models (the usual cluster) are
    // compared by name, which costs less than hashing it on every update.
    int IdOf(std::string_view model) const;
    uint32_t PositionOf(uint32_t slot, int gpu) const {
      return key[slot] << shift | static_cast<uint32_t>(gpu);
    }
    uint32_t SlotAt(uint32_t pos) const { return slot_of[pos >> shift]; }
  };

  const GpuTrees& GpuTreesFor(const ClusterState& state) const;
  // The GPU index of the nodes this index admits, as `state` is now.
  std::unique_ptr<GpuTrees> MakeGpuTrees(const ClusterState& state) const;
  const ExclusiveTree& ExclusiveTreeFor(const ClusterState& state) const;
  const SpreadOrder& SpreadOrderFor(const ClusterState& state, int count) const;
  const PackTree& PackTreeFor(const ClusterState& state, int count) const;
  // The tree of shape (count, memory), or null when all slots are taken.
  const ShapeTree* ShapeTreeFor(const ClusterState& state, int count, int64_t memory) const;
  // The view for the restriction of `request`, made on first use; null when
  // all slots are taken.
  const PlacementIndex* ViewFor(const Request& request) const;
  bool Admits(const NodeStatus& node) const { return filter_ == nullptr || filter_->Admits(node); }
  // Inserts the node's shape keys as they are now and removes those that
  // Unlink() noted (`after_unlink`) and that changed. `in_trees`: the node
  // belongs in the shape trees now.
  void LinkShapes(const NodeStatus& node, uint32_t slot, uint64_t tie, bool in_trees,
                  bool after_unlink);
  // Inserts (`insert`) or erases the node's keys as they are now in the GPU
  // trees (only `gpus` when not null) and in the spread and pack trees.
  // `after_unlink`: this is the Link() after the Unlink() of the same node.
  void UpdateKeys(const NodeStatus& node, uint32_t slot, uint64_t tie,
                  const std::vector<int>* gpus, bool insert, bool after_unlink);
  // UpdateKeys() of the spread order of single GPUs, when it is the only
  // order and the changed GPUs are known (a place or a release): Unlink()
  // erases the node's key as the order remembers it and notes the changed
  // GPUs' use; Link() derives the new key from the old one and the changes:
  // the pool from the changed GPUs' use, the loosest GPU from the changed
  // GPUs (a release) or, when the loosest became tighter (a place), from
  // all of the node's GPUs. False when it did not (no healthy GPU is left):
  // the caller computes the key from all of them.
  bool UpdateFirstSpreadKey(const NodeStatus& node, uint32_t slot, uint64_t tie,
                            const std::vector<int>& gpus, bool insert, bool after_unlink);
  // Unlink() of this index alone, not its views.
  void UnlinkOwn(const ClusterState& state, uint32_t slot, const std::vector<int>* gpus);
  // RemoveNode() of this index alone, not its views.
  void RemoveOwn(const ClusterState& state, uint32_t slot);
  void CopyFrom(const PlacementIndex& other);
  void Clear();
  void ClearTrees();  // Empties every tree, keeping which ones exist.

  bool PlanBinpackShared(const ClusterState& state, const Cluster& cluster,
                         const Request& request, const Demand& demand, Policy& policy,
                         int* best_slot, NodeChoice* best_choice) const;
  bool PlanBinpackMulti(const ClusterState& state, const Cluster& cluster,
                        const Request& request, const Demand& demand, Policy& policy,
                        int* best_slot, NodeChoice* best_choice) const;
  bool PlanSpreadShared(const ClusterState& state, const Cluster& cluster,
                        const Request& request, const Demand& demand, Policy& policy,
                        int* best_slot, NodeChoice* best_choice) const;
  bool PlanExclusive(const ClusterState& state, const Cluster& cluster,
                     const Request& request, const Demand& demand, Policy& policy,
                     bool spread, int* best_slot, NodeChoice* best_choice) const;

  // Every tree is owned here, null until made by a const Plan(); creation is
  // serialised by `mu_`, and the trees are only modified by non-const calls,
  // which the Cluster's contract makes exclusive.
  mutable std::atomic<GpuTrees*> gpu_{nullptr};
  mutable std::atomic<ExclusiveTree*> exclusive_{nullptr};
  mutable std::array<std::atomic<SpreadOrder*>, kSpreadSlots> spread_{};  // By GPU count.
  mutable std::array<std::atomic<PackTree*>, kSpreadSlots> pack_{};      // By GPU count.
  mutable std::array<std::atomic<ShapeTree*>, kShapeSlots> shape_{};  // Filled in order.
  // Bit m - 1: spread_[m] or pack_[m] is not null; a change re-keys only
  // the counts that have a tree.
  mutable std::atomic<uint64_t> node_counts_{0};
  // The shape keys of node `slot` as Unlink() found them, for the Link()
  // that follows: a place or release changes one or a few GPUs, and the
  // shape keys that do not involve them stay in their trees untouched.
  static constexpr uint32_t kNoSlot = ~uint32_t{0};
  struct PendingShapes {
    uint32_t slot = kNoSlot;
    std::array<ShapeKey, kShapeSlots> keys;
    std::array<bool, kShapeSlots> valid{};  // keys[i] is in shape tree i.
  };
  PendingShapes pending_;
  // The key of node pending_.slot that UpdateFirstSpreadKey() erased, and
  // the memory and compute used on each changed GPU then.
  struct PendingSpread {
    bool valid = false;
    SpreadKey key;
    SpreadOrder::Pool pool;
    std::array<std::pair<int64_t, int64_t>, kMaxGpusPerNode> used;
  };
  PendingSpread pending_spread_;
  // Null for the index of the whole cluster; a view's restriction otherwise.
  std::unique_ptr<const Filter> filter_;
  mutable std::array<std::atomic<PlacementIndex*>, kViewSlots> views_{};  // Filled in order.
  mutable std::mutex mu_;
  // Only in the index of the whole cluster: told of every Link().
  ScoreMemo memo_;
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_PLACEMENT_INDEX_H_
