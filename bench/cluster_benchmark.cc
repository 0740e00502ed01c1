// Whole-cluster operations on a steady-state cluster (about 70% of GPU memory
// used, nodes of 8 GPUs x 32 units): Fit() over every node, Capacity() of a
// request under each policy, and the JSON snapshot both ways.
//
//   build-bench/bench/cluster_benchmark --benchmark_filter=BM_Fit
//
// items_per_second counts nodes visited (fit, capacity) or nodes written /
// read (snapshot); bytes_per_second is the JSON text.

#include <memory>
#include <string>

#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"
#include "src/formats/snapshot_reader.h"

namespace gpushare::bench {
namespace {

const Cluster& CachedCluster(int nodes) {
  static std::unique_ptr<Cluster> cluster;
  static int cached_nodes = -1;
  if (cluster == nullptr || cached_nodes != nodes) {
    cluster.reset();
    cluster = std::make_unique<Cluster>(BackgroundCluster(nodes));
    cached_nodes = nodes;
  }
  return *cluster;
}

Request FourUnits() {
  Request r;
  r.id = "probe";
  r.gpu_memory = 4;
  return r;
}

void BM_Fit(benchmark::State& state) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  const Request r = FourUnits();
  for (auto _ : state) {
    absl::StatusOr<std::vector<FitResult>> fit = cluster.Fit(r);
    benchmark::DoNotOptimize(fit);
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
}
BENCHMARK(BM_Fit)->ArgNames({"nodes"})->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

void Capacity(benchmark::State& state, const char* policy) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  const Request r = FourUnits();
  int64_t copies = 0;
  for (auto _ : state) {
    absl::StatusOr<int64_t> n = cluster.Capacity(r, policy);
    if (!n.ok()) {
      state.SkipWithError("capacity failed");
      break;
    }
    copies = *n;
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
  state.counters["copies"] = static_cast<double>(copies);
}
void BM_Capacity_binpack(benchmark::State& state) { Capacity(state, "binpack"); }
void BM_Capacity_spread(benchmark::State& state) { Capacity(state, "spread"); }
// Named BM_Capacity/<policy>/nodes:N.
BENCHMARK(BM_Capacity_binpack)
    ->Name("BM_Capacity/binpack")
    ->ArgNames({"nodes"})
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Capacity_spread)
    ->Name("BM_Capacity/spread")
    ->ArgNames({"nodes"})
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

void BM_SnapshotToJson(benchmark::State& state) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json = cluster.ToJson();
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_SnapshotToJson)
    ->ArgNames({"nodes"})
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

// The load alone: each loaded cluster is freed with the timer paused (the
// free of 10,000 nodes and 64,000 placements costs about a tenth of the
// load; BM_SnapshotFromJsonAndFree keeps it in).
void BM_SnapshotFromJson(benchmark::State& state) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  const std::string json = cluster.ToJson();
  for (auto _ : state) {
    auto loaded = std::make_unique<absl::StatusOr<Cluster>>(Cluster::FromJson(json));
    if (!loaded->ok()) {
      state.SkipWithError("load failed");
      break;
    }
    benchmark::DoNotOptimize(*loaded);
    state.PauseTiming();
    loaded.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(json.size()));
}
BENCHMARK(BM_SnapshotFromJson)
    ->ArgNames({"nodes"})
    ->Arg(1000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

void BM_SnapshotFromJsonAndFree(benchmark::State& state) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  const std::string json = cluster.ToJson();
  for (auto _ : state) {
    absl::StatusOr<Cluster> loaded = Cluster::FromJson(json);
    if (!loaded.ok()) {
      state.SkipWithError("load failed");
      break;
    }
    benchmark::DoNotOptimize(loaded);
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(json.size()));
}
BENCHMARK(BM_SnapshotFromJsonAndFree)
    ->ArgNames({"nodes"})
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

// The reference reader alone (nlohmann::json), the baseline of the fast one
// that FromJson() runs first.
void BM_SnapshotFromJsonReference(benchmark::State& state) {
  const Cluster& cluster = CachedCluster(static_cast<int>(state.range(0)));
  const std::string json = cluster.ToJson();
  for (auto _ : state) {
    absl::StatusOr<Cluster> loaded = internal::SnapshotFromJsonReference(json);
    if (!loaded.ok()) {
      state.SkipWithError("load failed");
      break;
    }
    benchmark::DoNotOptimize(loaded);
  }
  state.SetItemsProcessed(state.iterations() * cluster.num_nodes());
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(json.size()));
}
BENCHMARK(BM_SnapshotFromJsonReference)
    ->ArgNames({"nodes"})
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpushare::bench
