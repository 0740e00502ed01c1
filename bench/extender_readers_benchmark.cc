// How long gpushare-extender's readers hold the scheduler's lock, at 10,000
// nodes of 8 GPUs, each GPU holding one 6-unit pod (as
// bench/extender_contention.py builds): a /metrics scrape takes a sample
// under the lock (SampleCluster) and renders it after (RenderClusterSample);
// a /plan copies the cluster under the lock (CopyCluster) and searches the
// copy. Binds wait for the parts under the lock.
//
//   build-bench/bench/extender_readers_benchmark

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "extender/metrics.h"
#include "gpushare/gpushare.h"

namespace {

const gpushare::Cluster& TenThousandNodes() {
  static const gpushare::Cluster* cluster = [] {
    auto* c = new gpushare::Cluster;
    for (int i = 0; i < 10'000; ++i) {
      gpushare::Node n;
      n.name = absl::StrCat("node-", i);
      n.labels = {{"gpushare", "true"}};
      n.gpus.assign(8, gpushare::Gpu{16, "T4", "", true});
      (void)c->AddNode(n);
      for (int g = 0; g < 8; ++g) {
        gpushare::Placement p;
        p.request_id = absl::StrCat("held-", i, "-", g);
        p.node = n.name;
        p.gpus = {g};
        p.memory_per_gpu = 6;
        if (absl::Status s = c->Commit(p); !s.ok()) {
          std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
          std::abort();
        }
      }
    }
    return c;
  }();
  return *cluster;
}

void BM_SampleCluster(benchmark::State& state) {
  const gpushare::Cluster& c = TenThousandNodes();
  for (auto _ : state) benchmark::DoNotOptimize(gpushare::extender::SampleCluster(c));
  state.counters["placements"] = static_cast<double>(c.placements().size());
}
BENCHMARK(BM_SampleCluster)->Unit(benchmark::kMillisecond);

void BM_RenderClusterSample(benchmark::State& state) {
  const gpushare::extender::ClusterSample sample =
      gpushare::extender::SampleCluster(TenThousandNodes());
  for (auto _ : state) benchmark::DoNotOptimize(gpushare::extender::RenderClusterSample(sample));
}
BENCHMARK(BM_RenderClusterSample)->Unit(benchmark::kMillisecond);

void BM_CopyCluster(benchmark::State& state) {
  const gpushare::Cluster& c = TenThousandNodes();
  for (auto _ : state) {
    gpushare::Cluster copy(c);
    benchmark::DoNotOptimize(copy);
  }
}
BENCHMARK(BM_CopyCluster)->Unit(benchmark::kMillisecond);

}  // namespace
