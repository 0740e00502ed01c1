// File: gpushare/simulate.h
// -----------------------------------------------------------------------------
// Trace-driven simulation: the experiment of the FGD paper (Weng et al.,
// USENIX ATC 2023) on any nodes and requests, and a time-driven replay in
// which tasks also leave.
//
//   auto nodes = gpushare::LoadOpenbNodes(".../openb_node_list_gpu_node.csv");
//   auto tasks = gpushare::LoadOpenbTasks(".../openb_pod_list_default.csv");
//   gpushare::SimulationOptions options;
//   options.policy = "fgd";
//   options.seed = 42;
//   options.inflate = 1.3;
//   auto run = gpushare::Simulate(*nodes, gpushare::ToRequests(*tasks), options);
//   if (run.ok()) std::cout << run->UnallocatedAt(100) << "% unallocated\n";
//
// The experiment: the requests are shuffled with the seed; requests sampled
// uniformly with replacement from them are appended until the total GPU
// request (sum of compute * GPUs, exclusive GPUs counting 1000 each) reaches
// `inflate` times the GPU capacity (1000 per GPU); each request then gets one
// attempt, in order, under the policy: placed, or dropped when no node can
// host it. Nodes win ties in the order of ClusterOptions::tie_break_seed =
// seed. After every request the arrived GPU request, the allocated GPU
// compute and the fragmentation against the target workload are recorded,
// and read in bins of 1% of capacity.
//
// Simulation works on GPU compute: shared requests must give `compute` and no
// `gpu_memory`, nodes must have one GPU model each and healthy GPUs, and
// requests carry no node selector. The built-in FGD-paper policies run on a
// specialised engine that places exactly as Cluster::Place() would with the
// same policy object (SimulationOptions::through_cluster checks this); any
// other policy name, any run in which a node has a GPU topology (the
// specialised engine is topology-blind) and any run with a migration budget
// runs through a Cluster.
//
// Thread safety: the functions are reentrant. SimulateSeeds() runs seeds on
// several threads.

#ifndef GPUSHARE_SIMULATE_H_
#define GPUSHARE_SIMULATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/fragmentation.h"
#include "gpushare/types.h"

namespace gpushare {

struct SimulationOptions {
  std::string policy = "fgd";  // Any name of PolicyNames().
  uint64_t seed = 42;          // Shuffle, inflation, tie-break order and "random".
  double inflate = 1.3;        // Total GPU request, as a multiple of GPU capacity.
  bool shuffle = true;         // False: the requests in the given order.
  // Fragmentation target (also the target of "fgd"); null = TypicalTasks() of
  // the requests on compute.
  std::shared_ptr<const TargetWorkload> target;
  // Place through a gpushare::Cluster with Cluster::Place() (slow; a check of
  // the specialised engine, or for policies it does not know).
  bool through_cluster = false;

  // Migrations (Simulate() only; Replay() refuses them). When a request finds
  // no node, the simulator may move placed requests so that it fits: it asks
  // Cluster::PlanMigrations() for the fewest moves (at most
  // max_moves_per_request, and never more than the budget left), applies
  // them and places the request with the policy. Budget, in moves per 100
  // requests attempted, accumulated: after the k-th request (counting from
  // 1) at most floor(k * migration_budget / 100) moves have been made in
  // all. 0 (the default): no migrations, results as without these options.
  // A budget > 0 runs through a Cluster (slow). 0..10000.
  int migration_budget = 0;
  int max_moves_per_request = 2;  // 1..3.
  // Which requests may move: among the nodes that could take the request,
  // the 4 * migration_nodes that miss the least of it (GPU compute, then
  // CPU, host memory; then input order) are searched for the fewest placed
  // requests (at most max_moves_per_request) whose leaving would let it fit
  // there; the migration_nodes nodes needing the fewest give the requests of
  // those smallest sets that fit on some node as they are, and the planner
  // may move them to any node. So plans that first move other requests out
  // of the way (chains) are not searched. 1..1000000.
  int migration_nodes = 8;
  // Candidate moves the planner may try per request (its search_budget):
  // bounds the time per request; a search cut short finds no plan or not the
  // shortest. 1..2^40.
  int64_t migration_search_budget = 2000;
};

// Requests that found no node, by kind.
struct FailureCounts {
  int64_t cpu_only = 0;   // No GPU.
  int64_t shared = 0;     // A share of one GPU.
  int64_t one_gpu = 0;    // One whole GPU.
  int64_t multi_gpu = 0;  // Several whole GPUs.
  int64_t total() const { return cpu_only + shared + one_gpu + multi_gpu; }
};

struct SimulationResult {
  std::string policy;
  uint64_t seed = 0;
  int64_t gpu_capacity = 0;  // Thousandths of a GPU (1000 per GPU).
  int64_t requests = 0;      // Attempted, after inflation.
  int64_t placed = 0;
  FailureCounts failed;
  double seconds = 0;        // Wall time of the run.

  // The curve, one entry per 1% of arrived GPU request: entry i is the state
  // after the last request with arrived GPU request <= i% of capacity.
  std::vector<int> arrived_pct;          // 0, 1, 2, ... (percent of capacity).
  std::vector<double> unallocated_pct;   // 100 - 100 * allocated / capacity.
  std::vector<double> frag_amount;       // Thousandths of a GPU.
  std::vector<double> frag_rate;         // Fragmentation / idle compute, 0..1.

  // Per request, in the order attempted: index of the node in the input (-1:
  // dropped) and the GPUs taken (bit i = GPU i); where it is at the end of
  // the run when migrations moved it.
  std::vector<int32_t> node_of_request;
  std::vector<uint64_t> gpus_of_request;
  // Per request, in the order attempted, the state right after its attempt
  // (the records the 1% bins above are read from).
  std::vector<int64_t> arrived_after;      // GPU request of the requests so far,
                                           // placed or not; thousandths of a GPU.
  std::vector<int64_t> allocated_after;    // Allocated GPU compute, thousandths.
  std::vector<double> frag_amount_after;   // Fragmentation amount, thousandths.
  std::vector<double> frag_rate_after;     // Fragmentation / idle compute, 0..1.
  // Tasks placed on several GPUs of a node with a topology (Node::topology),
  // and how many of them got the best connectivity available there at that
  // moment: a weakest pair as good as the best set of that many of the
  // node's GPUs that held nothing yet (Topology::Choose, kWeakestLink).
  int64_t topology_tasks = 0;
  int64_t topology_best = 0;
  // Migrations (SimulationOptions::migration_budget): requests moved (one
  // per move), requests that fitted only after moves, and requests for which
  // the planner was asked (found no node, budget left).
  int64_t migrations = 0;
  int64_t rescued = 0;
  int64_t migration_plans = 0;

  // Unallocated GPU % at `arrived_pct` percent of capacity, read from the
  // curve (linear between bins, the last bin beyond it). NaN if empty.
  double UnallocatedAt(double arrived_pct) const;
  // Fragmentation rate at `arrived_pct`, read the same way.
  double FragRateAt(double arrived_pct) const;
};

// Runs the experiment once. Errors: InvalidArgument for an unknown policy
// name, inflate outside [0, 100], a migration option out of range (named),
// no nodes or no requests, nodes or requests the simulation does not support
// (named), or those of Cluster::AddNode().
absl::StatusOr<SimulationResult> Simulate(const std::vector<Node>& nodes,
                                          const std::vector<Request>& requests,
                                          const SimulationOptions& options);

// Runs the experiment for each seed (options.seed is ignored) on up to
// `threads` threads (0: all cores). Results in the order of `seeds`.
// Errors: those of Simulate(); InvalidArgument for no seeds.
absl::StatusOr<std::vector<SimulationResult>> SimulateSeeds(
    const std::vector<Node>& nodes, const std::vector<Request>& requests,
    const SimulationOptions& options, const std::vector<uint64_t>& seeds, int threads = 0);

// A request with its lifetime, for Replay().
struct TimedRequest {
  Request request;
  int64_t start = 0;  // Arrival time, seconds.
  int64_t end = -1;   // Departure time, seconds; < 0 = never leaves.
};

struct ReplayResult {
  std::string policy;
  int64_t gpu_capacity = 0;  // Thousandths of a GPU.
  int64_t requests = 0;
  int64_t placed = 0;
  FailureCounts failed;
  double seconds = 0;        // Wall time of the run.
  // Sampled after every arrival, in time order.
  std::vector<int64_t> time;             // Seconds.
  std::vector<double> requested_pct;     // GPU request of the present requests
                                         // (placed or not), % of capacity.
  std::vector<double> allocated_pct;     // Allocated compute, % of capacity.
  std::vector<double> frag_rate;         // 0..1.
  double peak_allocated_pct = 0;
};

// Replays requests by time: arrivals in start order (ties: input order),
// departures at `end` (before arrivals at the same time; a request with
// end == start is attempted and leaves right after); one attempt per
// arrival; dropped requests never come back. The samples are taken after
// each arrival (and a zero-length request's departure). The tie-break order
// uses options.seed; shuffle and inflate are ignored.
// Errors: those of Simulate(); InvalidArgument for an end before a start or
// a migration budget > 0.
absl::StatusOr<ReplayResult> Replay(const std::vector<Node>& nodes,
                                    const std::vector<TimedRequest>& requests,
                                    const SimulationOptions& options);

}  // namespace gpushare

#endif  // GPUSHARE_SIMULATE_H_
