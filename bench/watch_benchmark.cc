// The cost of following the cluster by watch events: a recorded pod watch
// stream (each pod ADDED pending, MODIFIED when bound with its bind
// annotations -- restored as a placement --, then DELETED -- released --) fed
// in 64 KiB chunks through the Kubernetes client's Reflector (kubeclient/) into
// Extender::ApplyPodEvent, over 1,000 nodes x 8 GPUs. items_per_second are
// watch events applied.
//
//   build/bench/watch_benchmark --benchmark_min_time=0.5

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "kubeclient/reflector.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"

namespace {

using nlohmann::json;

json BenchPod(int64_t i, int nodes) {
  return json{{"metadata",
               {{"name", absl::StrCat("pod-", i)},
                {"namespace", "bench"},
                {"uid", absl::StrCat("uid-", i)},
                {"resourceVersion", std::to_string(1000 + i)}}},
              {"spec",
               {{"containers",
                 json::array({{{"name", "main"},
                               {"resources", {{"limits", {{"aliyun.com/gpu-mem", "1"}}}}}}})}}},
              {"status", {{"phase", "Pending"}}},
              {"__node", absl::StrCat("node-", i % nodes)},
              {"__gpu", std::to_string((i / nodes) % 8)}};
}

std::string Stream(int pods, int nodes) {
  std::string out;
  auto event = [&](const char* type, const json& pod) {
    out += json{{"type", type}, {"object", pod}}.dump();
    out += "\n";
  };
  for (int64_t i = 0; i < pods; ++i) {
    json pod = BenchPod(i, nodes);
    const std::string node = pod["__node"], gpu = pod["__gpu"];
    pod.erase("__node");
    pod.erase("__gpu");
    event("ADDED", pod);
    pod["spec"]["nodeName"] = node;
    pod["status"]["phase"] = "Running";
    pod["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", gpu},
                                      {"ALIYUN_COM_GPU_MEM_POD", "1"},
                                      {"ALIYUN_COM_GPU_MEM_ASSIGNED", "true"}};
    event("MODIFIED", pod);
    event("DELETED", pod);
  }
  return out;
}

void BM_WatchPodEvents(benchmark::State& state) {
  const int nodes = 1000;
  const int pods = static_cast<int>(state.range(0));
  gpushare::Cluster cluster;
  for (int i = 0; i < nodes; ++i) {
    gpushare::Node n;
    n.name = absl::StrCat("node-", i);
    n.labels = {{"gpushare", "true"}};
    n.gpus.assign(8, gpushare::Gpu{16, "T4", "", true});
    (void)cluster.AddNode(n);
  }
  auto scheduler = gpushare::Scheduler::Create(std::move(cluster));
  if (!scheduler.ok()) return state.SkipWithError("scheduler");
  gpushare::k8s::Extender ext(scheduler->get());
  const std::string stream = Stream(pods, nodes);
  int64_t restored = 0, released = 0, failed = 0;
  for (auto _ : state) {
    gpushare::kubeclient::Reflector reflector(
        "/api/v1/pods", [&](const std::string& type, const std::string& pod) {
          auto r = ext.ApplyPodEvent(type, pod);
          if (!r.ok()) {
            ++failed;
            return;
          }
          restored += r->restored;
          released += r->released;
        });
    (void)reflector.ApplyList("{\"metadata\":{\"resourceVersion\":\"1\"},\"items\":[]}");
    reflector.StartWatch();
    for (size_t at = 0; at < stream.size(); at += 64 << 10) {
      if (reflector.OnWatchData(std::string_view(stream).substr(at, 64 << 10)) !=
          gpushare::kubeclient::Reflector::Verdict::kContinue) {
        return state.SkipWithError(reflector.status().c_str());
      }
    }
  }
  if (failed > 0 || restored != released || restored != pods * state.iterations()) {
    state.SkipWithError(absl::StrCat("events were not applied as recorded: ", failed,
                                     " failed, ", restored, " restored, ", released, " released")
                            .c_str());
  }
  state.SetItemsProcessed(state.iterations() * pods * 3);
}
BENCHMARK(BM_WatchPodEvents)->ArgName("pods")->Arg(10'000)->Unit(benchmark::kMillisecond);

}  // namespace
