// Internal: the scores of the fragmentation-aware built-in policies ("fgd",
// "bestfit", "dotprod", "gpupacking", "gpuclustering"), and of "binpack" and
// "spread" for CPU-only requests (which their ordered indexes do not serve),
// remembered per node and request shape, and ordered, so that
// Cluster::Plan() finds their winner without scoring every node. Not part of
// the public API.
//
// These policies score a node from the node alone (its GPUs, CPU, the tags
// of what it holds) and the request, so a node's score for a given request
// shape stays valid until that node changes. For each (policy, shape) that
// Plan() meets, the memo keeps every node's verdict — infeasible, or its
// score and chosen GPUs — and the feasible nodes in a tree ordered as the
// generic scan ranks them (score desc, tie key desc, slot asc), so the
// first entry that still matches its node's verdict is the scan's winner,
// ties included (a changed verdict leaves its old key behind, to be dropped
// when met at the front or swept once such keys outnumber the feasible
// ones: a change then costs one tree descent, not two). The kernel
// policies' shapes keep that order as one bit set per distinct score
// instead (ScoreSets, by each node's rank in the tie order) while they have
// at most ScoreSets::kMaxScores scores, as the whole-number ones do (bestfit,
// dotprod, gpupacking, gpuclustering): a change then sets a bit. Changes
// are recorded by Touch() (called by PlacementIndex::Link() for every change
// to a node) and applied lazily: a shape re-scores, on its next Plan(), only the nodes that
// changed since its last one. Most re-scores are refusals (at openb x8, nine
// in ten: the node no longer has the CPU, memory or GPUs), so a walk first
// asks each node's FitSummary, one cache line kept by Touch(), and a shape
// marks its feasible nodes in a bit set: a refusal then reads neither the
// node's status nor the shape's verdict. Each verdict comes from the
// scan's feasibility rules (NodeFits()) and the policy's own Evaluate() —
// for the kernel policies its non-allocating form,
// KernelPolicy::EvaluateInto(), which computes the same score — exactly as
// the scan gets it. What the kernel derives from a node alone (its F_N(T)
// for fgd, the target types its GPU models allow) is derived once per change
// of the node and shared by every shape that re-scores it.
//
// binpack's and spread's CPU-only requests share one order instead: their
// score is the node's own (its CPU and host-memory use), the same for every
// such request, so the nodes ordered once, kept up to date from the same
// change log, serve them all. A request walks the order from the front to
// the first node that fits (past at most kCpuOrderWalk that do not; then its
// own shape answers). For binpack, which ranks the fullest nodes first, the
// order is one tree per node CPU capacity, and a request starts each at the
// first node with enough free CPU. A change then costs one re-score, not one
// per CPU-only shape.
//
// A shape is everything of a request that feasibility and score depend on:
// the Demand, the GPU models, the node selector and the topology need.
// Plan() finds a request's shape by a hash of those fields, which it then
// compares with the shape's, without building the shape's key (a string)
// unless the request lists its GPU models out of order or the shape is new.
//
// The memory is bounded: at most kMaxPolicies policy keys and kMaxEntries
// (node, shape) verdicts (the kernel policies' evaluations shared by shapes
// that differ only in host memory or node selector counted among them; a
// shape's score sets take at most as much again, a bit per node and score);
// the least recently used shape is dropped to make room (and rebuilt, by a
// full scan, when it is asked for again).

#ifndef GPUSHARE_INTERNAL_SCORE_MEMO_H_
#define GPUSHARE_INTERNAL_SCORE_MEMO_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare {
class Cluster;
}  // namespace gpushare

namespace gpushare::internal {

struct ClusterState;

class ScoreMemo {
 public:
  ScoreMemo();
  ~ScoreMemo();
  ScoreMemo(const ScoreMemo& other);
  ScoreMemo& operator=(const ScoreMemo& other);
  ScoreMemo(ScoreMemo&& other) noexcept;
  ScoreMemo& operator=(ScoreMemo&& other) noexcept;

  // Node `slot` changed (or was added as `slot`) and is now `node`.
  void Touch(uint32_t slot, const NodeStatus& node);
  // Fetches ahead what Touch(slot, ...) writes. Like Touch(), only where no
  // Plan() may run at the same time.
  void PrefetchTouch(uint32_t slot) const;
  // Forgets everything.
  void Clear();
  // The node in `slot` was removed, and the slots after it moved down by
  // one: every verdict, change and rank of the others is kept, renumbered.
  // (The other nodes did not change: a policy the memo serves scores a node
  // from the node alone.)
  void NodeRemoved(uint32_t slot);

  // Whether `policy` is one whose scores the memo may keep.
  static bool Serves(const Policy& policy);

  // The node and choice that the generic scan in Cluster::Plan() would pick,
  // or false when the memo does not serve `policy`, no node is feasible, or
  // the policy chose GPUs the scan would reject (the caller then scans,
  // which gives the reasons or the error). Sets `*none_feasible` when false
  // because no node is feasible, so that the scan may stop once it has the
  // reasons it reports.
  bool Plan(const ClusterState& state, const Cluster& cluster, const Request& request,
            const Demand& demand, Policy& policy, int* best_slot, NodeChoice* best_choice,
            bool* none_feasible) const;

  // Structural self-check (for CheckInvariants()): every tree holds the key
  // of each feasible verdict of its shape, and boundedly many stale keys;
  // each node's fit summary is the one `state` gives.
  bool Consistent(const ClusterState& state) const;

  // For tests: the hash by which Plan() finds a request's shape without
  // building its key is `hash` from now on (nullptr: the real one again),
  // e.g. one under which every shape collides. Set it while no cluster has
  // a memo (Consistent() checks each shape's hash with the current one).
  using ShapeHash = uint64_t (*)(const Request& request, const Demand& demand);
  static void SetShapeHashForTesting(ShapeHash hash);

  // At most this many policy keys, and (node, shape) verdicts in all.
  static constexpr int kMaxPolicies = 8;
  static constexpr int64_t kMaxEntries = int64_t{1} << 22;
  // A CPU-only request of binpack or spread walks the shared order of nodes
  // past at most this many that do not fit; then its own shape answers, as
  // it does for binpack when the nodes have more than kMaxCpuOrderTrees
  // distinct CPU capacities.
  static constexpr int kCpuOrderWalk = 64;
  static constexpr size_t kMaxCpuOrderTrees = 16;

 private:
  struct Memo;
  struct Data;
  enum class CpuOrderAnswer { kFound, kNoneFits, kTooFar };
  void CopyFrom(const ScoreMemo& other);
  // Plan() for a CPU-only request of binpack or spread from the shared order
  // of nodes (Memo::CpuOrder). Called with mu_ held.
  CpuOrderAnswer PlanFromCpuOrder(const ClusterState& state, const Cluster& cluster,
                                  const Request& request, const Demand& demand, Policy& policy,
                                  Memo* memo, int* best_slot, NodeChoice* best_choice) const;

  mutable std::unique_ptr<Data> data_;
  mutable std::mutex mu_;
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_SCORE_MEMO_H_
