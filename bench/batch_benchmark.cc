// Batch placement and the defragmentation planner at the sizes of issue 18:
// a batch of 1,000 single-GPU requests on 1,000 nodes, and plans on a
// 10,000-node cluster (nodes of 8 GPUs x 32 units).
//
//   build-rel/bench/batch_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true     (one line)
//
// Counters: placed (batch), moves / found / proven (plans).

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"

namespace gpushare::bench {
namespace {

// 1,000 requests on one GPU each: `mixed` cycles 4..16 units (the
// branch-and-bound search), otherwise all are 8 units (the flow). `short_cpu`:
// each also asks for 60 of a node's 96 cores, so a node takes one and nodes
// without a GPU that fits leave some unplaced (the methods must then prove
// that no assignment places more).
std::vector<Request> BatchRequests(bool mixed, bool short_cpu) {
  std::vector<Request> requests(1000);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].id = absl::StrCat("batch-", i);
    requests[i].gpu_memory = mixed ? 4 + static_cast<int64_t>(i % 13) : (short_cpu ? 24 : 8);
    if (short_cpu) requests[i].cpu = 60000;
  }
  return requests;
}

void PlaceBatch(benchmark::State& state, bool mixed, bool short_cpu = false) {
  const Cluster base = BackgroundCluster(1000);
  const std::vector<Request> requests = BatchRequests(mixed, short_cpu);
  int placed = 0;
  bool proven = false;
  std::string method;
  for (auto _ : state) {
    state.PauseTiming();
    Cluster cluster = base;
    state.ResumeTiming();
    absl::StatusOr<BatchResult> r = cluster.PlaceBatch(requests, "binpack");
    if (!r.ok()) {
      state.SkipWithError("batch failed");
      break;
    }
    placed = r->placed;
    proven = r->proven_optimal;
    method = r->method;
  }
  state.counters["placed"] = placed;
  state.counters["proven"] = proven;
  state.SetLabel(method);
}
void BM_PlaceBatch_Identical(benchmark::State& state) { PlaceBatch(state, false); }
void BM_PlaceBatch_Mixed(benchmark::State& state) { PlaceBatch(state, true); }
void BM_PlaceBatch_IdenticalShort(benchmark::State& state) { PlaceBatch(state, false, true); }
void BM_PlaceBatch_MixedShort(benchmark::State& state) { PlaceBatch(state, true, true); }
BENCHMARK(BM_PlaceBatch_Identical)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlaceBatch_Mixed)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlaceBatch_IdenticalShort)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlaceBatch_MixedShort)->Unit(benchmark::kMillisecond)->UseRealTime();

// 10,000 nodes whose every GPU holds a pod of 20 units (12 free), except one
// GPU on node 7777 holding a pod of 10: a request of 30 units fits nowhere,
// and one move (that pod to any other GPU) makes it fit. 80,000 movable pods.
const Cluster& FragmentedCluster() {
  static const Cluster* cluster = [] {
    auto* c = new Cluster;
    constexpr int kNodes = 10000;
    for (int i = 0; i < kNodes; ++i) (void)c->AddNode(BenchNode(i));
    Placement p;
    for (int i = 0; i < kNodes; ++i) {
      p.node = absl::StrCat("node-", i);
      for (int g = 0; g < kGpusPerNode; ++g) {
        p.request_id = absl::StrCat("pod-", i, "-", g);
        p.gpus = {g};
        p.memory_per_gpu = i == 7777 && g == 3 ? 10 : 20;
        (void)c->Commit(p);
      }
    }
    return c;
  }();
  return *cluster;
}

void Plan(benchmark::State& state, int64_t gpus, int64_t units_per_gpu) {
  const Cluster& cluster = FragmentedCluster();
  Request request;
  request.id = "pending";
  request.gpu_count = gpus;
  request.gpu_memory = gpus * units_per_gpu;
  size_t moves = 0;
  bool found = false, proven = false;
  for (auto _ : state) {
    absl::StatusOr<MigrationPlan> plan = cluster.PlanMigrations(request, 1);
    if (!plan.ok()) {
      state.SkipWithError("plan failed");
      break;
    }
    moves = plan->moves.size();
    found = plan->found;
    proven = plan->proven;
  }
  state.counters["moves"] = static_cast<double>(moves);
  state.counters["found"] = found;
  state.counters["proven"] = proven;
}
// The one-move plan exists.
void BM_PlanOneMove_10000Nodes(benchmark::State& state) { Plan(state, 1, 30); }
// No plan of one move exists (two GPUs of 30 units need two moves): every
// pod is examined.
void BM_PlanNoneWithinOneMove_10000Nodes(benchmark::State& state) { Plan(state, 2, 30); }
BENCHMARK(BM_PlanOneMove_10000Nodes)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_PlanNoneWithinOneMove_10000Nodes)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace gpushare::bench
