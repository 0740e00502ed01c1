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
// GPU topologies: trace nodes carry none; SimulationOptions::topologies
// attaches fixtures by GPU count or model (LoadTopologyRule("8=dgx1.txt"),
// AttachTopologies()), and SimulationResult reports the connectivity
// multi-GPU tasks got (topology_tasks, topology_best, topology_weakest).
//
// Thread safety: the functions are reentrant. SimulateSeeds() runs seeds on
// several threads.

#ifndef GPUSHARE_SIMULATE_H_
#define GPUSHARE_SIMULATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gpushare/fragmentation.h"
#include "gpushare/topology.h"
#include "gpushare/types.h"

namespace gpushare {

// Attaches a GPU topology (gpushare/topology.h) to trace nodes, which carry
// none: every node with topology->num_gpus() GPUs, all of model `model`
// when that is not empty, gets `topology` (SimulationOptions::topologies).
struct TopologyRule {
  std::string model;     // GPU model, e.g. "V100M32"; empty: any model.
  TopologyPtr topology;  // Shared by every node it goes to.
};

// Reads a rule from "N=FILE" (every N-GPU node; N must be the topology's
// GPU count) or "MODEL=FILE" (every node of that GPU model with the
// topology's GPU count). FILE holds the text of `nvidia-smi topo -m` or the
// JSON form (when its first non-blank character is '{').
// Errors: InvalidArgument naming the spec (no '=', empty key, N not the
// file's GPU count) or the file's error; NotFound for a file that cannot be
// read.
absl::StatusOr<TopologyRule> LoadTopologyRule(std::string_view spec);

// Copies of `nodes` where every node without a topology gets that of the
// first rule it matches.
std::vector<Node> AttachTopologies(const std::vector<Node>& nodes,
                                   const std::vector<TopologyRule>& rules);

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
  // Topologies attached to the nodes before the run (AttachTopologies()).
  std::vector<TopologyRule> topologies;

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

// The GPU compute left unallocated at the end of a run, each idle share of a
// GPU (thousandths of a GPU) attributed to the first cause below that holds
// for it. "The workload" is the set of distinct requests given to the run
// (inflation draws from it, so these are the requests that could still
// arrive); only requests that ask for GPUs are considered. For an idle share
// on GPU g of node N:
//   gpu_model    N is unschedulable, or no request of the workload may use
//                N's GPU model (shared requests count only if N takes shared
//                GPU work).
//   cpu          some request may use the model, but every such request asks
//                for more CPU than N has free.
//   host_memory  some of those fit N's free CPU, but every one of them asks
//                for more host memory than N has free.
//   gpu_shape    CPU and host memory fit some request, but none of those can
//                use GPU g: its idle share is smaller than every such shared
//                request's compute, and g is partly used or N has fewer idle
//                GPUs than every such whole-GPU request needs (stranded by
//                the GPU compute shape).
//   placeable    a request of the workload could still be placed on N using
//                g; the compute is idle for lack of demand, not stranded.
// The five add up to gpu_capacity minus the allocated compute.
struct UnallocatedBreakdown {
  int64_t gpu_model = 0;    // Thousandths of a GPU.
  int64_t cpu = 0;
  int64_t host_memory = 0;
  int64_t gpu_shape = 0;
  int64_t placeable = 0;
  int64_t total() const { return gpu_model + cpu + host_memory + gpu_shape + placeable; }
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
  // The same tasks by the weakest link among their GPUs ("NV2", "SYS"...),
  // best link first: (link name, tasks).
  std::vector<std::pair<std::string, int64_t>> topology_weakest;
  // Why the GPU compute still idle after the last request is idle.
  UnallocatedBreakdown unallocated;
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
