// Placement at cluster scale: place + release pairs at steady state (about 70%
// of GPU memory used, 256 requests in flight), for the indexed built-in
// policies, the library's generic scan (a wrapper policy hides the built-in)
// and the plain reference scan of tests/testing/reference.h, in one binary.
//
//   build-bench/bench/placement_benchmark --benchmark_filter=BM_PlaceRelease
//
// Arguments: policy 0 = binpack, 1 = spread; nodes of 8 GPUs x 32 units;
// gpus = GPUs per request (multi-card) or whole GPUs (exclusive).
// items_per_second counts place + release pairs.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"
#include "tests/testing/reference.h"

namespace gpushare::bench {
namespace {

constexpr size_t kInFlight = 256;

const char* PolicyName(int64_t arg) { return arg == 0 ? "binpack" : "spread"; }

// Forwards to a built-in policy; its own type sends Plan() down the scan.
class ScannedPolicy : public Policy {
 public:
  explicit ScannedPolicy(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}
  std::string Name() const override { return inner_->Name(); }
  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster) override {
    return inner_->Evaluate(demand, node, fitting, cluster);
  }

 private:
  std::unique_ptr<Policy> inner_;
};

enum class Kind { kShared, kExclusive };

// One steady-state cluster, kept between the runs of one benchmark (the
// background set-up of 100,000 nodes takes seconds) and rebuilt when the
// arguments change.
struct Fixture {
  std::tuple<int, int> key;
  Cluster cluster;
  Window window{kInFlight};
  int64_t next = 0;
};

Fixture& GetFixture(int nodes, int policy) {
  static std::unique_ptr<Fixture> fixture;
  if (fixture == nullptr || fixture->key != std::make_tuple(nodes, policy)) {
    fixture.reset();
    fixture = std::make_unique<Fixture>();
    fixture->key = {nodes, policy};
    fixture->cluster = BackgroundCluster(nodes);
  }
  return *fixture;
}

void RunPlaceRelease(benchmark::State& state, Policy& policy, Fixture& fx, Kind kind,
                     int64_t gpus, int64_t lo, int64_t hi) {
  const std::vector<int64_t> sizes = Sizes(lo, hi);
  size_t i = 0;
  Request r;
  for (auto _ : state) {
    r.id = absl::StrCat("p", fx.next++);
    if (kind == Kind::kShared) {
      r.gpu_count = gpus;
      r.gpu_memory = gpus * sizes[i++ % sizes.size()];
    } else {
      r.whole_gpus = gpus;
    }
    absl::StatusOr<Placement> p = fx.cluster.Place(r, policy);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    std::string old = fx.window.Push(r.id);
    if (!old.empty() && !fx.cluster.Release(old).ok()) {
      state.SkipWithError("release failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = static_cast<double>(fx.cluster.num_nodes());
}

// Single-GPU shared requests of 1..8 units, indexed.
void BM_PlaceRelease(benchmark::State& state) {
  auto policy = *MakePolicy(PolicyName(state.range(0)));
  Fixture& fx = GetFixture(static_cast<int>(state.range(1)), static_cast<int>(state.range(0)));
  RunPlaceRelease(state, *policy, fx, Kind::kShared, 1, 1, 8);
}
BENCHMARK(BM_PlaceRelease)
    ->ArgNames({"policy", "nodes"})
    ->ArgsProduct({{0, 1}, {1000, 10000, 100000}})
    ->Unit(benchmark::kMicrosecond);

// The same requests through the library's generic scan.
void BM_ScanPlaceRelease(benchmark::State& state) {
  ScannedPolicy policy(*MakePolicy(PolicyName(state.range(0))));
  Fixture& fx = GetFixture(static_cast<int>(state.range(1)), static_cast<int>(state.range(0)));
  RunPlaceRelease(state, policy, fx, Kind::kShared, 1, 1, 8);
}
BENCHMARK(BM_ScanPlaceRelease)
    ->ArgNames({"policy", "nodes"})
    ->ArgsProduct({{0, 1}, {1000, 10000}})
    ->Unit(benchmark::kMicrosecond);

// The same requests through the reference scan (tests/testing/reference.h).
struct ReferenceFixture {
  std::tuple<int, int> key;
  testing::ReferenceCluster ref;
  Window window{kInFlight};
  int64_t next = 0;
};

void BM_ReferencePlaceRelease(benchmark::State& state) {
  const std::string policy = PolicyName(state.range(0));
  const int nodes = static_cast<int>(state.range(1));
  static std::unique_ptr<ReferenceFixture> fx;
  if (fx == nullptr || fx->key != std::make_tuple(nodes, static_cast<int>(state.range(0)))) {
    fx.reset();
    fx = std::make_unique<ReferenceFixture>();
    fx->key = {nodes, static_cast<int>(state.range(0))};
    for (int i = 0; i < nodes; ++i) fx->ref.AddNode(BenchNode(i));
    ApplyBackground(nodes, [&](const Placement& p) { fx->ref.Commit(p); });
  }
  const std::vector<int64_t> sizes = Sizes(1, 8);
  size_t i = 0;
  Request r;
  for (auto _ : state) {
    r.id = absl::StrCat("p", fx->next++);
    r.gpu_memory = sizes[i++ % sizes.size()];
    std::optional<Placement> p = fx->ref.Plan(r, policy);
    if (!p.has_value()) {
      state.SkipWithError("nothing fits");
      break;
    }
    fx->ref.Commit(*p);
    std::string old = fx->window.Push(r.id);
    if (!old.empty()) fx->ref.Release(old);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = nodes;
}
BENCHMARK(BM_ReferencePlaceRelease)
    ->ArgNames({"policy", "nodes"})
    ->ArgsProduct({{0, 1}, {1000, 10000}})
    ->Unit(benchmark::kMicrosecond);

// Shared requests spread over M = gpus GPUs of one node, 1..4 units on each.
void BM_MultiGpuPlaceRelease(benchmark::State& state) {
  auto policy = *MakePolicy(PolicyName(state.range(0)));
  Fixture& fx = GetFixture(static_cast<int>(state.range(2)), static_cast<int>(state.range(0)));
  RunPlaceRelease(state, *policy, fx, Kind::kShared, state.range(1), 1, 4);
}
BENCHMARK(BM_MultiGpuPlaceRelease)
    ->ArgNames({"policy", "gpus", "nodes"})
    ->ArgsProduct({{0, 1}, {2, 4, 8}, {10000}})
    ->Unit(benchmark::kMicrosecond);

// Exclusive requests for `gpus` whole idle GPUs.
void BM_ExclusivePlaceRelease(benchmark::State& state) {
  auto policy = *MakePolicy(PolicyName(state.range(0)));
  Fixture& fx = GetFixture(static_cast<int>(state.range(2)), static_cast<int>(state.range(0)));
  RunPlaceRelease(state, *policy, fx, Kind::kExclusive, state.range(1), 0, 0);
}
BENCHMARK(BM_ExclusivePlaceRelease)
    ->ArgNames({"policy", "gpus", "nodes"})
    ->ArgsProduct({{0, 1}, {1, 2}, {10000}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gpushare::bench
