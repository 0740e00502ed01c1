// In-process cost of the extender protocol and the scheduler core, without
// HTTP: one filter + bind + release conversation per iteration, on one thread
// and on several at once (the shared_mutex at work). The HTTP numbers come from
// bench/extender_load.py.
//
//   build/bench/extender_benchmark --benchmark_min_time=0.5

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

struct World {
  std::unique_ptr<gpushare::Scheduler> scheduler;
  std::unique_ptr<gpushare::k8s::Extender> extender;
  std::vector<std::string> names;
};

World* MakeWorld(int nodes) {
  auto* w = new World;
  gpushare::Cluster cluster;
  for (int i = 0; i < nodes; ++i) {
    gpushare::Node n;
    n.name = absl::StrCat("node-", i);
    n.labels = {{"gpushare", "true"}};
    n.gpus.assign(8, gpushare::Gpu{16, "T4", "", true});
    (void)cluster.AddNode(n);
    w->names.push_back(n.name);
  }
  w->scheduler = *gpushare::Scheduler::Create(std::move(cluster));
  w->extender = std::make_unique<gpushare::k8s::Extender>(w->scheduler.get());
  return w;
}

std::string PodArgs(const std::string& name, int units, const std::vector<std::string>& names) {
  json pod{{"metadata", {{"name", name}, {"namespace", "bench"}, {"uid", "uid-" + name}}},
           {"spec",
            {{"containers",
              json::array({{{"name", "main"},
                            {"resources",
                             {{"limits", {{"aliyun.com/gpu-mem", std::to_string(units)}}}}}}})}}}};
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}

void BM_ExtenderFilterBindRelease(benchmark::State& state) {
  static World* world = MakeWorld(100);
  const int t = state.thread_index();
  int64_t i = 0;
  for (auto _ : state) {
    const std::string name = absl::StrCat("t", t, "-", i++);
    auto filtered = world->extender->Filter(PodArgs(name, 1 + i % 8, world->names));
    json f = json::parse(*filtered);
    const auto& fit = f["NodeNames"];
    if (fit.empty()) {
      state.SkipWithError("nothing fits");
      break;
    }
    const std::string node = fit[static_cast<size_t>(i) % fit.size()];
    auto bound = world->extender->Bind(
        json{{"PodName", name}, {"PodNamespace", "bench"}, {"PodUID", "uid-" + name},
             {"Node", node}}
            .dump());
    benchmark::DoNotOptimize(bound);
    (void)world->scheduler->Release(absl::StrCat("bench/", name));
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ExtenderFilterBindRelease)->Threads(1)->Threads(2)->Threads(8)->UseRealTime();

void BM_SchedulerReserveRelease(benchmark::State& state) {
  static World* world = MakeWorld(100);
  const int t = state.thread_index();
  gpushare::Request r;
  int64_t i = 0;
  for (auto _ : state) {
    r.id = absl::StrCat("r", t, "-", i++);
    r.gpu_memory = 1 + i % 8;
    auto p = world->scheduler->Reserve(r, world->names[static_cast<size_t>(i) % 100]);
    if (!p.ok()) {
      state.SkipWithError(std::string(p.status().message()).c_str());
      break;
    }
    (void)world->scheduler->Release(r.id);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_SchedulerReserveRelease)->Threads(1)->Threads(8)->UseRealTime();

}  // namespace
