// Placement at cluster scale: place + release pairs at steady state (about 70%
// of GPU memory used, a fixed number of requests in flight), for the indexed
// built-in policies, the library's generic scan (a wrapper policy hides the
// built-in) and the plain reference scan of tests/testing/reference.h, in one
// binary. Each benchmark is registered once per policy, with the policy in
// its name:
//
//   BM_PlaceRelease/binpack/nodes:10000
//   BM_MultiGpuPlaceRelease/spread/gpus:4/nodes:10000
//
//   build-bench/bench/placement_benchmark --benchmark_filter=BM_PlaceRelease/
//
// Nodes have 8 GPUs x 32 units; `gpus` is GPUs per request (multi-card) or
// whole GPUs (exclusive). In the "minority" clusters one node in
// kMinorityEvery has another GPU model and label, and the requests ask for it
// by model or by node selector. items_per_second counts place + release pairs.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_cluster.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"
#include "tests/testing/reference.h"
#include "tests/testing/scanned_policy.h"

namespace gpushare::bench {
namespace {

constexpr size_t kInFlight = 256;
// Fewer in flight when only the minority nodes can take the requests.
constexpr size_t kMinorityInFlight = 64;

constexpr const char* kPolicies[] = {"binpack", "spread"};

// What the timed requests look like.
struct Workload {
  enum class Kind { kShared, kExclusive } kind = Kind::kShared;
  int64_t gpus = 1;       // GPUs per request (shared) or whole GPUs (exclusive).
  int64_t lo = 1, hi = 8;  // Memory units per GPU (shared), drawn uniformly.
  bool minority = false;  // Minority cluster; the request names its model or label.
  bool by_selector = false;  // With `minority`: node selector instead of model.
  bool add_node = false;  // A new node joins before each request.
  uint64_t tie_break_seed = 0;
};

// One steady-state cluster per benchmark, kept between its repetitions (the
// background set-up of 100,000 nodes takes seconds) and rebuilt for the next
// benchmark, so that a result does not depend on which benchmarks ran before.
struct Fixture {
  std::string key;
  Cluster cluster;
  Window window{kInFlight};
  int next_node = 0;
};

Fixture& GetFixture(const std::string& key, int nodes, const Workload& w) {
  static std::unique_ptr<Fixture> fixture;
  if (fixture == nullptr || fixture->key != key) {
    fixture.reset();
    fixture = std::make_unique<Fixture>();
    fixture->key = key;
    fixture->cluster = BackgroundCluster(nodes, w.minority, w.tie_break_seed);
    fixture->next_node = nodes;
    if (w.minority) fixture->window = Window(kMinorityInFlight);
  }
  return *fixture;
}

void RunPlaceRelease(benchmark::State& state, Policy& policy, Fixture& fx, const Workload& w) {
  const std::vector<int64_t> sizes = Sizes(w.lo, w.hi);
  size_t i = 0;
  Request r;
  if (w.minority && w.by_selector) r.node_selector = {{kMinorityLabel, kMinorityValue}};
  if (w.minority && !w.by_selector) r.gpu_models = {kMinorityModel};
  for (auto _ : state) {
    if (w.add_node && !fx.cluster.AddNode(BenchNode(fx.next_node++, w.minority)).ok()) {
      state.SkipWithError("adding a node failed");
      break;
    }
    r.id = fx.window.Next();
    if (w.kind == Workload::Kind::kShared) {
      r.gpu_count = w.gpus;
      r.gpu_memory = w.gpus * sizes[i++ % sizes.size()];
    } else {
      r.whole_gpus = w.gpus;
    }
    absl::StatusOr<Placement> p = fx.cluster.Place(r, policy);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    const std::string* old = fx.window.Placed();
    if (old != nullptr && !fx.cluster.Release(*old).ok()) {
      state.SkipWithError("release failed");
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = static_cast<double>(fx.cluster.num_nodes());
}

// Indexed (the built-in policy) or scanned (the same policy behind a wrapper).
void PlaceRelease(benchmark::State& state, const std::string& name, const char* policy,
                  bool scanned, int nodes, const Workload& w) {
  std::unique_ptr<Policy> builtin = *MakePolicy(policy);
  std::unique_ptr<Policy> run =
      scanned ? std::make_unique<testing::ScannedPolicy>(std::move(builtin)) : std::move(builtin);
  Fixture& fx = GetFixture(absl::StrCat(name, "/", nodes), nodes, w);
  RunPlaceRelease(state, *run, fx, w);
}

// The same single-GPU requests through the reference scan
// (tests/testing/reference.h).
struct ReferenceFixture {
  std::string key;
  testing::ReferenceCluster ref;
  Window window{kInFlight};
};

void ReferencePlaceRelease(benchmark::State& state, const std::string& name,
                           const char* policy, int nodes) {
  static std::unique_ptr<ReferenceFixture> fx;
  const std::string key = absl::StrCat(name, "/", nodes);
  if (fx == nullptr || fx->key != key) {
    fx.reset();
    fx = std::make_unique<ReferenceFixture>();
    fx->key = key;
    for (int i = 0; i < nodes; ++i) fx->ref.AddNode(BenchNode(i));
    ApplyBackground(nodes, [&](const Placement& p) { fx->ref.Commit(p); });
  }
  const std::vector<int64_t> sizes = Sizes(1, 8);
  size_t i = 0;
  Request r;
  for (auto _ : state) {
    r.id = fx->window.Next();
    r.gpu_memory = sizes[i++ % sizes.size()];
    std::optional<Placement> p = fx->ref.Plan(r, policy);
    if (!p.has_value()) {
      state.SkipWithError("nothing fits");
      break;
    }
    fx->ref.Commit(*p);
    if (const std::string* old = fx->window.Placed()) fx->ref.Release(*old);
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["nodes"] = nodes;
}

// Registers BM_<what>/<policy> for both policies; `body` gets the policy name
// and the benchmark's arguments. `iterations`: a fixed count per repetition
// (0: the library decides).
template <typename Body>
void PerPolicy(const std::string& what, const std::vector<std::string>& arg_names,
               const std::vector<std::vector<int64_t>>& args, Body body,
               int64_t iterations = 0) {
  for (const char* policy : kPolicies) {
    const std::string name = absl::StrCat("BM_", what, "/", policy);
    auto* b = benchmark::RegisterBenchmark(
        name.c_str(), [=](benchmark::State& state) { body(state, name, policy); });
    b->ArgNames(arg_names)->ArgsProduct(args)->Unit(benchmark::kMicrosecond);
    if (iterations > 0) b->Iterations(iterations);
  }
}

int Nodes(const benchmark::State& state, int arg) {
  return static_cast<int>(state.range(arg));
}

const bool kRegistered = [] {
  // Single-GPU shared requests of 1..8 units, indexed.
  PerPolicy("PlaceRelease", {"nodes"}, {{1000, 10000, 100000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              PlaceRelease(state, name, policy, false, Nodes(state, 0), Workload{});
            });
  // The same requests through the library's generic scan.
  PerPolicy("ScanPlaceRelease", {"nodes"}, {{1000, 10000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              PlaceRelease(state, name, policy, true, Nodes(state, 0), Workload{});
            });
  // The same requests through the reference scan.
  PerPolicy("ReferencePlaceRelease", {"nodes"}, {{1000, 10000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              ReferencePlaceRelease(state, name, policy, Nodes(state, 0));
            });
  // Shared requests spread over M = gpus GPUs of one node, 1..4 units on each.
  PerPolicy("MultiGpuPlaceRelease", {"gpus", "nodes"}, {{2, 4, 8}, {10000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              Workload w;
              w.gpus = state.range(0);
              w.hi = 4;
              PlaceRelease(state, absl::StrCat(name, "/", w.gpus), policy, false,
                           Nodes(state, 1), w);
            });
  // Exclusive requests for `gpus` whole idle GPUs.
  PerPolicy("ExclusivePlaceRelease", {"gpus", "nodes"}, {{1, 2}, {10000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              Workload w;
              w.kind = Workload::Kind::kExclusive;
              w.gpus = state.range(0);
              PlaceRelease(state, absl::StrCat(name, "/", w.gpus), policy, false,
                           Nodes(state, 1), w);
            });
  // Single-GPU shared requests that only the minority nodes can take, named
  // by GPU model or by node selector.
  PerPolicy("ModelPlaceRelease", {"nodes"}, {{1000, 10000, 100000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              Workload w;
              w.minority = true;
              PlaceRelease(state, name, policy, false, Nodes(state, 0), w);
            });
  PerPolicy("SelectorPlaceRelease", {"nodes"}, {{1000, 10000, 100000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              Workload w;
              w.minority = true;
              w.by_selector = true;
              PlaceRelease(state, name, policy, false, Nodes(state, 0), w);
            });
  // A new empty node joins before each single-GPU request: the indexes
  // take it in (binpack's GPU index gives it a key at its place in the
  // tie-break order: first with the default tie keys, anywhere with a seed).
  // 2,000 nodes join per repetition.
  PerPolicy("AddNodePlaceRelease", {"seed", "nodes"}, {{0, 42}, {10000}},
            [](benchmark::State& state, const std::string& name, const char* policy) {
              Workload w;
              w.add_node = true;
              w.tie_break_seed = static_cast<uint64_t>(state.range(0));
              PlaceRelease(state, absl::StrCat(name, "/", w.tie_break_seed), policy, false,
                           Nodes(state, 1), w);
            },
            /*iterations=*/2000);
  return true;
}();

}  // namespace
}  // namespace gpushare::bench
