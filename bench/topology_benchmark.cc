// Topology-aware placement at cluster scale: multi-GPU place + release pairs
// on 10,000 8-GPU nodes at steady state (bench/bench_cluster.h), with every
// node topology-blind, a DGX-1 hybrid cube-mesh or a 2-socket PCIe server
// (one shared topology object for all nodes); and the chooser alone on
// 16-GPU nodes, and on 40 and 64, with a cold memo (a fresh free pattern
// each call).
//
//   build/bench/topology_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one command line)
//
// BM_TopologyPlaceRelease/<policy>/<kind>/gpus:<k>/topology:<t>: kind shared
// (k GPUs x 4 units) or exclusive (k whole GPUs); t = 0 blind, 1 DGX-1,
// 2 PCIe. items_per_second counts place + release pairs.

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"

namespace gpushare::bench {
namespace {

constexpr int kNodes = 10000;
constexpr size_t kInFlight = 256;

// The compact JSON forms of tests/data/topology/dgx1_v100.txt and
// pcie_2socket_8gpu.txt.
constexpr const char* kDgx1 =
    R"({"gpus":8,"links":["NV1 NV1 NV2 NV2 SYS SYS SYS","NV2 NV1 SYS NV2 SYS SYS",)"
    R"("NV2 SYS SYS NV1 SYS","SYS SYS SYS NV1","NV1 NV1 NV2","NV2 NV1","NV2"]})";
constexpr const char* kPcie =
    R"({"gpus":8,"links":["PIX PXB PXB SYS SYS SYS SYS","PXB PXB SYS SYS SYS SYS",)"
    R"("PIX SYS SYS SYS SYS","SYS SYS SYS SYS","PIX NODE NODE","NODE NODE","PIX"]})";

TopologyPtr TopologyOf(int which) {
  if (which == 0) return nullptr;
  return *Topology::FromJson(which == 1 ? kDgx1 : kPcie);
}

struct Fixture {
  std::string key;
  Cluster cluster;
  Window window{kInFlight, "t"};
};

Fixture& GetFixture(int topology) {
  static std::unique_ptr<Fixture> fixture;
  const std::string key = absl::StrCat(topology);
  if (fixture == nullptr || fixture->key != key) {
    fixture.reset();
    fixture = std::make_unique<Fixture>();
    fixture->key = key;
    const TopologyPtr t = TopologyOf(topology);
    for (int i = 0; i < kNodes; ++i) {
      Node n = BenchNode(i);
      n.topology = t;
      (void)fixture->cluster.AddNode(n);
    }
    ApplyBackground(kNodes, [&](const Placement& p) { (void)fixture->cluster.Commit(p); });
  }
  return *fixture;
}

void BM_TopologyPlaceRelease(benchmark::State& state, const std::string& policy_name,
                             bool exclusive) {
  const int k = static_cast<int>(state.range(0));
  Fixture& fx = GetFixture(static_cast<int>(state.range(1)));
  std::unique_ptr<Policy> policy = *MakePolicy(policy_name);
  Request r;
  for (auto _ : state) {
    r.id = fx.window.Next();
    if (exclusive) {
      r.whole_gpus = k;
    } else {
      r.gpu_count = k;
      r.gpu_memory = 4 * k;
    }
    absl::StatusOr<Placement> p = fx.cluster.Place(r, *policy);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    if (const std::string* old = fx.window.Placed()) (void)fx.cluster.Release(*old);
  }
  state.SetItemsProcessed(state.iterations());
}

// The chooser alone on a 16-GPU node: `kind` 0 = two DGX-1 meshes joined over
// SYS (no twins: the worst case), 1 = DGX-2 (all NV6: one class). Each call
// sees a free pattern not seen before (memo cold), k = 8 of 10..16 free GPUs.
void BM_Choose16(benchmark::State& state) {
  const int kind = static_cast<int>(state.range(0));
  TopologyPtr dgx1 = *Topology::FromJson(kDgx1);
  std::vector<std::vector<Link>> links(16, std::vector<Link>(16, *ParseLink("SYS")));
  for (int a = 0; a < 16; ++a) {
    for (int b = 0; b < 16; ++b) {
      if (a == b) continue;
      links[a][b] = kind == 1 ? *ParseLink("NV6")
                    : a / 8 == b / 8 ? dgx1->link(a % 8, b % 8)
                                     : *ParseLink("SYS");
    }
  }
  TopologyPtr t = *Topology::Make(links);
  std::mt19937_64 rng(kSeed);
  int64_t calls = 0;
  for (auto _ : state) {
    // A fresh preference order makes every call miss the memo.
    std::vector<int> free, preference;
    for (int g = 0; g < 16; ++g) {
      if (rng() % 8 != 0) free.push_back(g);
    }
    if (free.size() < 8) continue;
    preference = {static_cast<int>(calls % 16), static_cast<int>((calls / 16) % 16),
                  static_cast<int>((calls / 256) % 16)};
    ++calls;
    benchmark::DoNotOptimize(
        t->Choose(free, free, 8, TopologyObjective::kWeakestLink, 0, preference));
  }
  state.SetItemsProcessed(calls);
}

// The chooser alone on a large node of NVLinked pairs over PCIe (`gpus` of
// them), k = 16 of the free ones, memo cold: the many tied sets of whole
// pairs make it the bounded search's worst case (kMaxChooseSteps).
void BM_ChooseLarge(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<std::vector<Link>> links(n, std::vector<Link>(n));
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) links[a][b] = *ParseLink(a / 2 == b / 2 ? "NV2" : "PXB");
  }
  TopologyPtr t = *Topology::Make(links);
  std::mt19937_64 rng(kSeed);
  int64_t calls = 0;
  for (auto _ : state) {
    std::vector<int> free, preference;
    for (int g = 0; g < n; ++g) {
      if (rng() % 8 != 0) free.push_back(g);
    }
    preference = {static_cast<int>(calls % n), static_cast<int>((calls / n) % n)};
    ++calls;
    benchmark::DoNotOptimize(t->Choose(free, free, 16, TopologyObjective::kTotal, 0, preference));
  }
  state.SetItemsProcessed(calls);
}

const bool kRegistered = [] {
  for (const char* policy : {"binpack", "spread"}) {
    for (bool exclusive : {false, true}) {
      const std::string name = absl::StrCat("BM_TopologyPlaceRelease/", policy, "/",
                                            exclusive ? "exclusive" : "shared");
      benchmark::RegisterBenchmark(name.c_str(),
                                   [=](benchmark::State& s) {
                                     BM_TopologyPlaceRelease(s, policy, exclusive);
                                   })
          ->ArgNames({"gpus", "topology"})
          ->ArgsProduct({{2, 4}, {0, 1, 2}})
          ->Unit(benchmark::kMicrosecond);
    }
  }
  benchmark::RegisterBenchmark("BM_Choose16", BM_Choose16)
      ->ArgName("kind")
      ->Arg(0)
      ->Arg(1)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_ChooseLarge", BM_ChooseLarge)
      ->ArgName("gpus")
      ->Arg(40)
      ->Arg(64)
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace gpushare::bench
