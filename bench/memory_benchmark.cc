// Memory of the cluster state: heap bytes per GPU, counted by replacing the
// global allocation functions in this program, for clusters of 8-GPU nodes
// (a) as added, with nothing placed, after the indexes of single-GPU binpack,
// single-GPU spread and exclusive requests have been built by one plan each,
// (b) at steady state, about 70% of GPU memory used by one background pod
// per busy GPU (placements and their bookkeeping included), and (c) after
// that, with the indexes of many more request kinds built as well.
//
//   build-bench/bench/memory_benchmark
//
// Counters: bytes_per_gpu (empty cluster), bytes_per_gpu_placed (loaded
// cluster, placements and their bookkeeping included), bytes_per_gpu_indexed
// (loaded, plus the indexes of multi-GPU binpack for M = 2, 4, 8 with 1..4
// units per GPU (12 request shapes), multi-GPU spread for M = 2, 4, 8, and one
// view for requests restricted by a node selector).

#include <atomic>
#include <cstdlib>
#include <new>

#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"

namespace {

// Live heap bytes; each block carries its size in a 16-byte header.
std::atomic<int64_t> g_live_bytes{0};
constexpr size_t kHeader = 16;

void* CountedAlloc(size_t size) {
  void* raw = std::malloc(size + kHeader);
  if (raw == nullptr) throw std::bad_alloc();
  *static_cast<size_t*>(raw) = size;
  g_live_bytes.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
  return static_cast<char*>(raw) + kHeader;
}

void CountedFree(void* p) {
  if (p == nullptr) return;
  void* raw = static_cast<char*>(p) - kHeader;
  g_live_bytes.fetch_sub(static_cast<int64_t>(*static_cast<size_t*>(raw)),
                         std::memory_order_relaxed);
  std::free(raw);
}

}  // namespace

void* operator new(size_t size) { return CountedAlloc(size); }
void* operator new[](size_t size) { return CountedAlloc(size); }
void operator delete(void* p) noexcept { CountedFree(p); }
void operator delete[](void* p) noexcept { CountedFree(p); }
void operator delete(void* p, size_t) noexcept { CountedFree(p); }
void operator delete[](void* p, size_t) noexcept { CountedFree(p); }

namespace gpushare::bench {
namespace {

void BM_StateBytesPerGpu(benchmark::State& state) {
  const int nodes = static_cast<int>(state.range(0));
  const double gpus = static_cast<double>(nodes) * kGpusPerNode;
  double empty = 0, placed = 0, indexed = 0;
  for (auto _ : state) {
    const int64_t before = g_live_bytes.load();
    {
      Cluster cluster;
      for (int i = 0; i < nodes; ++i) (void)cluster.AddNode(BenchNode(i));
      Request shared;
      shared.id = "probe";
      shared.gpu_memory = 4;
      Request whole;
      whole.id = "probe";
      whole.whole_gpus = 1;
      for (const char* policy : {"binpack", "spread"}) {
        benchmark::DoNotOptimize(cluster.Plan(shared, policy));
        benchmark::DoNotOptimize(cluster.Plan(whole, policy));
      }
      empty = static_cast<double>(g_live_bytes.load() - before) / gpus;
      ApplyBackground(nodes, [&](const Placement& p) { (void)cluster.Commit(p); });
      placed = static_cast<double>(g_live_bytes.load() - before) / gpus;
      for (const int count : {2, 4, 8}) {
        Request multi;
        multi.id = "probe";
        multi.gpu_count = count;
        for (int64_t m = 1; m <= 4; ++m) {
          multi.gpu_memory = count * m;
          benchmark::DoNotOptimize(cluster.Plan(multi, "binpack"));
        }
        benchmark::DoNotOptimize(cluster.Plan(multi, "spread"));
      }
      Request zone = shared;
      zone.node_selector = {{"zone", "a"}};
      benchmark::DoNotOptimize(cluster.Plan(zone, "spread"));
      indexed = static_cast<double>(g_live_bytes.load() - before) / gpus;
    }
  }
  state.counters["bytes_per_gpu"] = empty;
  state.counters["bytes_per_gpu_placed"] = placed;
  state.counters["bytes_per_gpu_indexed"] = indexed;
  state.counters["gpus"] = gpus;
}
BENCHMARK(BM_StateBytesPerGpu)
    ->ArgNames({"nodes"})
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpushare::bench
