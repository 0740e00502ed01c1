// The C++ side of bench/python_overhead.py: the same calls on the same
// clusters as the Python script makes, so that its report shows what the
// Python layer adds.
//
//   BM_PlanCpp        Cluster::Plan(request, "binpack") on a 16-node cluster
//   BM_PlaceReleaseCpp Place(request, "binpack") + Release(id), same cluster
//   BM_BulkPlaceCpp   100,000 requests placed one after the other with one
//                     policy object (what Cluster.place_many does in Python)
//
// The cluster shapes and request streams must match python_overhead.py.

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"

namespace {

// `nodes` nodes of `gpus` GPUs with `memory` units each, labelled for sharing.
gpushare::Cluster MakeCluster(int nodes, int gpus, int64_t memory) {
  gpushare::Cluster c;
  for (int i = 0; i < nodes; ++i) {
    gpushare::Node n;
    n.name = absl::StrCat("node-", i);
    n.labels = {{"gpushare", "true"}};
    for (int g = 0; g < gpus; ++g) n.gpus.push_back(gpushare::Gpu{memory, "T4", "", true});
    if (!c.AddNode(n).ok()) std::abort();
  }
  return c;
}

// Request i of the bulk stream: 1, 2, 3 or 4 units.
std::vector<gpushare::Request> BulkRequests(int count) {
  std::vector<gpushare::Request> out(count);
  for (int i = 0; i < count; ++i) {
    out[i].id = absl::StrCat("req-", i);
    out[i].gpu_memory = 1 + i % 4;
  }
  return out;
}

void BM_PlanCpp(benchmark::State& state) {
  gpushare::Cluster c = MakeCluster(16, 4, 16);
  gpushare::Request r;
  r.id = "probe";
  r.gpu_memory = 2;
  for (auto _ : state) {
    auto p = c.Plan(r, "binpack");
    if (!p.ok()) state.SkipWithError("plan failed");
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlanCpp);

void BM_PlaceReleaseCpp(benchmark::State& state) {
  gpushare::Cluster c = MakeCluster(16, 4, 16);
  gpushare::Request r;
  r.id = "probe";
  r.gpu_memory = 2;
  for (auto _ : state) {
    auto p = c.Place(r, "binpack");
    if (!p.ok() || !c.Release(r.id).ok()) state.SkipWithError("place/release failed");
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PlaceReleaseCpp);

void BM_BulkPlaceCpp(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const int count = static_cast<int>(state.range(1));
  const gpushare::Cluster empty = MakeCluster(nodes, 8, 32);
  const std::vector<gpushare::Request> requests = BulkRequests(count);
  int64_t placed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    gpushare::Cluster c = empty;
    auto policy = gpushare::MakePolicy("binpack");
    if (!policy.ok()) state.SkipWithError("no binpack policy");
    state.ResumeTiming();
    placed = 0;
    for (const gpushare::Request& r : requests) {
      auto p = c.Place(r, **policy);
      placed += p.ok() ? 1 : 0;
    }
    benchmark::DoNotOptimize(placed);
  }
  state.counters["placed"] = static_cast<double>(placed);
  state.SetItemsProcessed(state.iterations() * count);
}
BENCHMARK(BM_BulkPlaceCpp)
    ->ArgNames({"nodes", "requests"})
    ->Args({1000, 100000})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
