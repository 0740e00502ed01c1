// File: gpushare/cluster.h
// -----------------------------------------------------------------------------
// The cluster: nodes, their GPUs and everything placed on them, with the
// operations a scheduler needs — fit, place, plan/commit, release, replicas,
// capacity — and a JSON snapshot of the whole state.
//
//   gpushare::Cluster cluster;                       // memory unit: GiB
//   gpushare::Node node;
//   node.name = "sd-cluster-04";
//   node.gpus = {gpushare::Gpu{14, "T4"}};
//   node.labels = {{"gpushare", "true"}};
//   if (auto s = cluster.AddNode(node); !s.ok()) return s;
//
//   gpushare::Request pod;
//   pod.id = "binpack-1";
//   pod.gpu_memory = 2;
//   absl::StatusOr<gpushare::Placement> p = cluster.Place(pod, "binpack");
//   if (p.ok()) std::cout << *p << "\n";   // Placement(request_id='binpack-1',
//                                          //   node='sd-cluster-04', ...)
//   cluster.Release("binpack-1").IgnoreError();
//
// Guarantees:
//  - No GPU ever has more memory or compute allocated than it has, and no
//    node more host CPU or memory than it has, under any sequence of calls.
//  - A call that fails changes nothing (validate first, then mutate).
//  - Errors name the offending value. Codes: InvalidArgument for malformed
//    input, AlreadyExists for a duplicate node name or request id, NotFound
//    for an unknown node or request id, ResourceExhausted when nothing fits
//    now, FailedPrecondition for a stale plan or a double release.
//
// Thread safety: const methods may run concurrently with each other; anything
// else needs external synchronisation. The library does not throw.

#ifndef GPUSHARE_CLUSTER_H_
#define GPUSHARE_CLUSTER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/batch.h"
#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare {

namespace internal {
struct ClusterState;
struct ClusterAccess;  // The library's own loaders (not part of the API).
}  // namespace internal

struct ClusterOptions {
  // Display name of the GPU memory unit.
  MemoryUnit memory_unit = MemoryUnit::kGiB;

  // Order in which nodes win ties between equal scores.
  // 0: the most recently added node first (so a new node is filled first).
  // Any other value: a fixed pseudo-random permutation of the nodes drawn
  // from this seed (what a trace-driven simulator wants: no bias by name or
  // order in the input). Saved in the JSON snapshot.
  uint64_t tie_break_seed = 0;

  // How many of the latest releases are remembered, so that releasing one of
  // their ids again (while it is not placed) is FailedPrecondition ("already
  // released") rather than NotFound. The oldest are forgotten first; an id
  // released twice takes two entries; 0 remembers none. A successful
  // Release() only appends the id to a queue: the lookup is built, amortized,
  // by the failing calls that need it.
  int remembered_releases = 65536;
};

// Totals over the cluster or a node.
struct Usage {
  int64_t gpu_memory = 0;        // Capacity, memory units (all GPUs).
  int64_t gpu_memory_used = 0;   // Allocated, memory units.
  int64_t gpus = 0;              // Number of GPUs.
  int64_t idle_gpus = 0;         // GPUs holding nothing (healthy or not).
  int64_t compute_used = 0;      // Thousandths, summed over GPUs.
  int64_t cpu = 0, cpu_used = 0;                  // Thousandths of a core.
  int64_t host_memory = 0, host_memory_used = 0;  // MiB.
  int64_t placements = 0;        // Requests placed.
};

// How Cluster::PlaceReplicas() treats a shortfall.
enum class ReplicaMode {
  kAllOrNothing,  // Place all copies or none (ResourceExhausted).
  kAsManyAsFit,   // Place copies until one does not fit; may place zero.
};

class Cluster {
 public:
  explicit Cluster(ClusterOptions options = {});
  ~Cluster();
  Cluster(const Cluster& other);
  Cluster& operator=(const Cluster& other);
  Cluster(Cluster&& other) noexcept;
  Cluster& operator=(Cluster&& other) noexcept;

  const ClusterOptions& options() const;

  // ---- Nodes -------------------------------------------------------------

  // Adds a node with nothing allocated.
  // Errors: InvalidArgument for an empty name, a GPU memory outside
  // 1..kMaxQuantity, more than kMaxGpusPerNode GPUs, negative or too large
  // cpu / host_memory, two GPUs with the same non-empty UUID; AlreadyExists
  // for a name already in the cluster or a GPU UUID that a GPU of another
  // node has (a UUID names one physical GPU; empty UUIDs may repeat).
  // Complexity: O(GPUs of the node x log GPUs of the cluster).
  [[nodiscard]] absl::Status AddNode(const Node& node);

  // Removes a node that holds no placements. O(n G log(nG)): the indexes
  // are rebuilt, except the score memo's verdicts of the other nodes, which
  // are kept (O(n) for each request shape it holds).
  // Errors: NotFound; FailedPrecondition if requests are still placed on it.
  [[nodiscard]] absl::Status RemoveNode(std::string_view name);

  // Marks GPU `gpu` of `node` healthy or not. Unhealthy GPUs take no new work;
  // what they hold stays until released. Errors: NotFound for the node,
  // InvalidArgument for an index out of range.
  [[nodiscard]] absl::Status SetGpuHealthy(std::string_view node, int gpu,
                                           bool healthy);

  // Cordons (false) or uncordons (true) a node. Errors: NotFound.
  [[nodiscard]] absl::Status SetNodeSchedulable(std::string_view node,
                                                bool schedulable);

  int num_nodes() const;
  // Names in the order the nodes were added.
  std::vector<std::string> node_names() const;
  // A copy of one node's state. Errors: NotFound.
  absl::StatusOr<NodeStatus> GetNode(std::string_view name) const;
  // Read-only access for hosts that walk the cluster; nullptr if unknown.
  // The pointer is valid until the next non-const call.
  const NodeStatus* FindNode(std::string_view name) const;

  // ---- Requests ----------------------------------------------------------

  // Checks a request against the rules of types.h and returns its per-GPU
  // shape. Errors: InvalidArgument naming the bad value, e.g.
  // "gpu memory 8 is not divisible by gpu count 3". Only the request itself
  // is judged: whether some node is large enough depends on the cluster's
  // state, so more GPUs than the largest node has (or an empty cluster) is
  // not an error here but ResourceExhausted in Plan(), Place() and
  // PlaceReplicas(), infeasible nodes in Fit() and 0 in Capacity().
  absl::StatusOr<Demand> Validate(const Request& request) const;

  // Every node, in the order they were added, with whether it can host
  // `request` now and, if not, one reason, e.g.
  // "insufficient GPU memory on any single GPU: largest free 4, need 5".
  // Errors: those of Validate().
  absl::StatusOr<std::vector<FitResult>> Fit(const Request& request) const;

  // Chooses where `request` goes under `policy` without changing anything.
  // Errors: those of Validate(); AlreadyExists if the id is placed;
  // ResourceExhausted if no node can host it now (the message gives reasons),
  // including a request for more GPUs than the largest node has and any GPU
  // request on a cluster without nodes.
  //
  // Complexity (n nodes, G GPUs per node). The built-in "binpack" and
  // "spread" policies (the objects MakePolicy() returns) are served from
  // ordered indexes kept inside the cluster and give exactly the placement of
  // the full scan, ties included:
  //  - shared, 1 GPU, binpack: best fit over all GPUs of the allowed models,
  //    O(log(nG)) — an ordered set of GPUs by (free memory, free compute,
  //    tie order) walked from the request's size;
  //  - shared, M GPUs, binpack: an ordered set of nodes per request shape
  //    (M, memory per GPU) by the free memory and compute the M tightest
  //    fitting GPUs would keep, O(log n + G log G); after 24 distinct shapes,
  //    a set per M by M-th largest free memory, visited once per distinct
  //    free-memory value;
  //  - shared, spread: an ordered set of nodes per M by (memory used ratio,
  //    compute used ratio, sum of the M largest free memories, tie order),
  //    O(log n) from the least used node, plus one step for each less used
  //    node whose M-th largest free GPU is too small;
  //  - exclusive: an ordered set of nodes by (idle healthy GPUs, free GPU
  //    memory, tie order), O(log n) from the smallest (binpack) or largest
  //    (spread) idle count that suffices.
  // Each index is built on the first Plan() that needs it (O(nG log(nG)))
  // and kept exact by every later change. Nodes or GPUs the key cannot rule
  // out (a node selector, CPU or host memory limits, a GPU model list,
  // compute shares) are checked one by one as the walk meets them, so those
  // requests cost up to O(nG) in the worst case; so does a request that fits
  // nowhere (the full scan then gives the reasons).
  // The built-in "fgd", "bestfit", "dotprod", "gpupacking" and
  // "gpuclustering" policies, and "binpack" and "spread" for CPU-only
  // requests, are served from remembered scores: per request shape (demand,
  // GPU models, node selector), every node's verdict and the feasible nodes
  // in the scan's order, again the scan's winner, ties included. A shape's
  // first Plan() scores every node; later ones re-score only the nodes that
  // changed since its last Plan(), O(changed x (policy's cost + log n)).
  // At most 2^22 (node, shape) verdicts are kept; the least recently used
  // shapes are dropped first. Every other policy (user policies, "random")
  // scans all nodes: O(n G log G) plus the policy's cost.
  absl::StatusOr<Placement> Plan(const Request& request, Policy& policy) const;
  absl::StatusOr<Placement> Plan(const Request& request,
                                 std::string_view policy = "binpack") const;

  // Applies a placement from Plan(), possibly after other changes.
  // Complexity: O(G log G + log n) per index in use (see Plan()).
  // Errors: AlreadyExists if its id is placed; NotFound if its node is gone;
  // InvalidArgument if it is malformed (GPU index out of range, repeated
  // GPU, negative sizes); FailedPrecondition if it no longer fits (GPUs
  // unhealthy or too full, node unschedulable, host resources short).
  [[nodiscard]] absl::Status Commit(const Placement& placement);

  // Plan() then Commit(): chooses and applies. Errors: those of Plan().
  absl::StatusOr<Placement> Place(const Request& request, Policy& policy);
  absl::StatusOr<Placement> Place(const Request& request,
                                  std::string_view policy = "binpack");

  // Frees everything request `id` holds. Complexity: as Commit().
  // Errors: FailedPrecondition if `id` was released recently (see
  // ClusterOptions::remembered_releases); NotFound if it is unknown.
  [[nodiscard]] absl::Status Release(std::string_view id);

  // The placement of request `id`, or NotFound.
  absl::StatusOr<Placement> GetPlacement(std::string_view id) const;
  // Read-only access; nullptr if unknown. Valid until the next non-const call.
  const Placement* FindPlacement(std::string_view id) const;
  // Every placement, sorted by request id.
  std::vector<Placement> placements() const;
  int num_placements() const;

  // ---- Replicas and capacity ---------------------------------------------

  // Places `count` copies of `request`, with ids "<id>-0" .. "<id>-<count-1>",
  // one after the other under `policy`.
  // Errors: those of Validate(); InvalidArgument for count < 0; AlreadyExists
  // if any copy's id is placed; ResourceExhausted in kAllOrNothing mode when
  // not all fit (then nothing is placed).
  absl::StatusOr<std::vector<Placement>> PlaceReplicas(
      const Request& request, int count, Policy& policy,
      ReplicaMode mode = ReplicaMode::kAllOrNothing);
  absl::StatusOr<std::vector<Placement>> PlaceReplicas(
      const Request& request, int count, std::string_view policy = "binpack",
      ReplicaMode mode = ReplicaMode::kAllOrNothing);

  // How many more copies of `request` fit now, placed one after the other
  // under `policy`; changes nothing. Stops counting at `limit`.
  // Errors: those of Validate().
  absl::StatusOr<int64_t> Capacity(const Request& request,
                                   std::string_view policy = "binpack",
                                   int64_t limit = int64_t{1} << 40) const;

  // How many nodes shaped like `shape` must be added so that `count` more
  // copies of `request` fit (0 if they fit now). The new nodes get names
  // "<shape.name>-0", "<shape.name>-1", ...; nothing is changed.
  // Errors: those of Validate() and AddNode(); ResourceExhausted if even an
  // empty node of that shape cannot host one copy.
  absl::StatusOr<int64_t> NodesNeeded(const Request& request, int64_t count,
                                      const Node& shape,
                                      std::string_view policy = "binpack") const;

  // ---- Totals and invariants -----------------------------------------------

  Usage TotalUsage() const;

  // Recomputes every counter from the placements and checks that no GPU or
  // node is over capacity and that every index is consistent. OK in every
  // reachable state; Internal otherwise. O(size of the state).
  absl::Status CheckInvariants() const;

  // ---- Snapshot --------------------------------------------------------------

  // The whole state (options, nodes in order, health, placements) as JSON.
  // Text that is not valid UTF-8 (names, labels, models) is written with
  // U+FFFD in place of each invalid byte sequence, as JSON requires; such a
  // snapshot does not load back byte for byte, and two names that differ
  // only in invalid bytes become one (FromJson then refuses the duplicate).
  std::string ToJson(int indent = -1) const;

  // Rebuilds a cluster from ToJson() output. Errors: InvalidArgument for
  // malformed or truncated JSON, a missing or mistyped field (the message
  // names it), or a state that would violate the guarantees (duplicate
  // names or ids, over-full GPUs). Reads with simdjson and keeps its buffers
  // (a few bytes per byte of text) on the calling thread for the next call,
  // for texts up to 64 MB.
  static absl::StatusOr<Cluster> FromJson(std::string_view json);

  // ---- Batches and defragmentation (src/batch/) ----------------------------

  // Places a set of requests at once, maximising the number placed. Never
  // places fewer than Place() of each request in the given order (skipping
  // those that do not fit) would: that one-by-one result is computed first
  // and kept unless a method below places strictly more.
  //  - identical single-GPU shared requests (same memory, compute, cpu, host
  //    memory, models and selector): a maximum flow of least cost on
  //    Boost.Graph (successive shortest paths), source -> request class ->
  //    GPU (capacity: how many copies its free memory and compute hold, 1
  //    with gang_anti_sharing) -> node (capacity: copies its free host CPU and
  //    memory hold) -> sink, edge costs preferring the GPUs with the least
  //    free memory. Exact for the count: proven_optimal is true.
  //    O(F * E log V) for F placed, E = eligible GPUs + nodes.
  //  - any other set (mixed sizes: bin packing, NP-hard; multi-GPU, exclusive,
  //    CPU-only, mixed): a depth-first branch and bound over every request
  //    (largest first) and every distinct candidate (node, GPU set) plus
  //    "not placed", on a scratch copy, with the fit rules of Plan(); nodes
  //    and GPUs whose state (and labels, models, host resources) are equal
  //    are tried once (they are interchangeable). Bound: placed so far +
  //    requests left <= best known. Exact when it finishes within
  //    options.search_budget candidates (proven_optimal), otherwise the best
  //    found. Exponential in the worst case; budget-bound.
  // Only the count is optimised; among results with equal counts the
  // one-by-one result is kept, then the first found. Placements are then
  // committed in the order given (Policy::OnCommitted is called for each).
  // A failed call changes nothing. Errors: those of Validate() with the
  // request's index; InvalidArgument for an id repeated in the batch or a
  // budget out of range; AlreadyExists for an id already placed;
  // ResourceExhausted when all_or_nothing and not all could be placed.
  absl::StatusOr<BatchResult> PlaceBatch(const std::vector<Request>& requests,
                                         Policy& policy,
                                         const BatchOptions& options = {});
  absl::StatusOr<BatchResult> PlaceBatch(const std::vector<Request>& requests,
                                         std::string_view policy = "binpack",
                                         const BatchOptions& options = {});

  // The fewest moves of placed requests after which `request` fits (Plan()
  // with "binpack" succeeds), without changing anything. Moves are searched
  // by iterative deepening (0, 1, ..., max_moves moves): a move takes one
  // movable placed request to any other node and GPU set where the fit rules
  // of Plan() accept it (for its models, selector, sharing, exclusivity,
  // compute, cpu and host memory) after the earlier moves (equal nodes and
  // GPUs once, at the last move only). Exact (plan.proven) when the search
  // ends within `search_budget` candidate moves: then no shorter plan exists,
  // or none within max_moves. Cost O((P x C)^k) for P movable requests,
  // C candidate destinations, k moves.
  // `movable`: the requests that may move, as they were submitted (their
  // models and selector are constraints the cluster does not store); each
  // must be placed with this shape. Empty: every placed request may move,
  // kept to the GPU models it runs on and to nodes carrying every label of
  // the node it is on (so any selector it had still holds).
  // `deadline`: the search also stops at this time (checked every few
  // hundred candidates), as when the budget runs out: the plan is then not
  // proven, and says so in its reason. A host serving requests sets one.
  // Errors: those of Validate(); AlreadyExists if `request` is placed;
  // InvalidArgument for max_moves outside 0..16, a budget out of range, or a
  // movable request that is not placed with that shape (named).
  absl::StatusOr<MigrationPlan> PlanMigrations(
      const Request& request, int max_moves,
      const std::vector<Request>& movable = {},
      int64_t search_budget = 200000,
      std::chrono::steady_clock::time_point deadline =
          std::chrono::steady_clock::time_point::max()) const;

  // The cluster-goal form of PlanMigrations(): the fewest moves after which
  // at least `gpus` healthy GPUs on schedulable nodes hold nothing (free to be
  // taken whole). Same search, exactness and cost; `movable` as there.
  // Errors: InvalidArgument for gpus < 1 and those of PlanMigrations().
  absl::StatusOr<MigrationPlan> PlanMigrationsToFreeGpus(
      int64_t gpus, int max_moves, const std::vector<Request>& movable = {},
      int64_t search_budget = 200000,
      std::chrono::steady_clock::time_point deadline =
          std::chrono::steady_clock::time_point::max()) const;

  // The cluster-goal form that lowers the fragmentation measure against
  // `target` (fragmentation.h: Fragmentation(cluster, target).amount) by the
  // most: among every plan of at most `max_moves` moves, one whose end state
  // has the least amount, and among those the fewest moves. Found when that
  // amount is strictly below the amount now (plan.fragmentation_before and
  // _after say both). Depth-first over every sequence of moves (the
  // destinations of PlanMigrations()), each move scored from the two nodes it
  // changes: exact (plan.proven) when the search ends within `search_budget`
  // candidate moves; otherwise the best plan seen. Cost O((P x C)^k).
  // `movable` as in PlanMigrations().
  // Errors: InvalidArgument for a target with no task (or a task with a
  // negative share or weight, named) and those of PlanMigrations().
  absl::StatusOr<MigrationPlan> PlanMigrationsToLowerFragmentation(
      const TargetWorkload& target, int max_moves, const std::vector<Request>& movable = {},
      int64_t search_budget = 200000) const;

  // Applies the moves of a found plan in order (each a Release() and a
  // Commit()), after checking on a copy that every move still holds: the
  // pod is placed exactly at `from`, `to` passes the pod's fit rules, and the
  // plan's request fits afterwards (goal forms: enough GPUs are free; the
  // fragmentation amount ends below the amount now). It does not place the
  // request.
  // Errors: FailedPrecondition naming the first move that no longer holds
  // (then nothing changes); InvalidArgument for a plan that was not found.
  [[nodiscard]] absl::Status ApplyMigrations(const MigrationPlan& plan);

 private:
  friend struct internal::ClusterAccess;
  std::unique_ptr<internal::ClusterState> state_;
};

}  // namespace gpushare

#endif  // GPUSHARE_CLUSTER_H_
