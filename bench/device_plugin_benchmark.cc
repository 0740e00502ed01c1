// gpushare-device-plugin's serving path, wired as the program wires it:
//  - BM_Allocate: Allocate over the kubelet's gRPC API on a Unix socket, the
//    node's pods read from the watch cache (NodePodCache), each served pod
//    marked assigned through the Patcher, whose API server answers after
//    `api_ms` (0, or 15,000: a stalled API server);
//  - BM_Reregistration: a kubelet restart (its socket removed and made
//    again) until the plugin's Register reaches the new kubelet, with the
//    program's 100 ms registration loop, while the API server is stalled;
//  - BM_StartUp8Gpus: start-up on an 8-GPU node (NVML through the stand-in
//    library, the GPU topology, the inventory and the three gRPC servers).
//
//   build-bench/bench/device_plugin_benchmark --benchmark_filter=Allocate
//
// BM_Allocate reports p50_us and p99_us of single calls beside the mean.

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "device-plugin/allocation.h"
#include "device-plugin/inventory.h"
#include "device-plugin/nvml.h"
#include "device-plugin/patcher.h"
#include "device-plugin/pod_cache.h"
#include "device-plugin/server.h"
#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

constexpr int kGpus = 8;
constexpr int kUnitsPerGpu = 80;

std::string TempDir() {
  std::string tmpl = "/tmp/gpushare-dpb-XXXXXX";
  return mkdtemp(tmpl.data());
}

// `pods` pods bound to the node, all assigned but the last, which asks 3
// units on GPU (pods % 8); "UID" is replaced per call.
std::string PodList(int pods) {
  nlohmann::json items = nlohmann::json::array();
  for (int i = 0; i < pods; ++i) {
    const bool last = i == pods - 1;
    items.push_back(
        {{"metadata",
          {{"name", "p" + std::to_string(i)}, {"namespace", "default"},
           {"uid", last ? "UID" : "u" + std::to_string(i)},
           {"creationTimestamp", "2026-11-28T10:00:00Z"},
           {"annotations",
            {{"ALIYUN_COM_GPU_MEM_IDX", std::to_string(i % kGpus)},
             {"ALIYUN_COM_GPU_MEM_ASSIGNED", last ? "false" : "true"},
             {"ALIYUN_COM_GPU_MEM_ASSUME_TIME", std::to_string(1000 + i)}}}}},
         {"spec",
          {{"nodeName", "n1"},
           {"containers",
            {{{"name", "main"}, {"resources", {{"limits", {{"aliyun.com/gpu-mem", "3"}}}}}}}}}},
         {"status", {{"phase", "Pending"}}}});
  }
  return nlohmann::json({{"kind", "PodList"}, {"items", items}}).dump();
}

Inventory EightGpus() {
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < kGpus; ++i) {
    GpuInfo g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_bytes = static_cast<uint64_t>(kUnitsPerGpu) << 30;
    gpus.push_back(g);
  }
  return *MakeInventory(gpus, MemoryUnit::kGiB);
}

// An API server that answers each write after `ms` (interrupted by Stop).
class SlowApi {
 public:
  explicit SlowApi(int64_t ms) : ms_(ms) {}
  absl::Status Write() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::milliseconds(ms_), [&] { return stop_; });
    return absl::OkStatus();
  }
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
  }

 private:
  const int64_t ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

void BM_Allocate(benchmark::State& state) {
  const std::string dir = TempDir();
  const int pods = static_cast<int>(state.range(0));
  // The node's pods as the watch delivers them; the last one is replaced by
  // a new waiting pod before each call.
  NodePodCache cache;
  const nlohmann::json list = nlohmann::json::parse(PodList(pods));
  for (const nlohmann::json& pod : list["items"]) cache.Apply("ADDED", pod.dump());
  nlohmann::json waiting = list["items"].back();
  SlowApi api(state.range(1));
  Patcher patcher([&](const Patcher::Write&) { return api.Write(); });
  auto lister = [&](std::vector<std::string>* skipped) -> absl::StatusOr<std::vector<NodePod>> {
    return cache.Pods(skipped);
  };
  auto mark = [&](const NodePod& pod) {
    patcher.Enqueue({"assigned/" + pod.uid, "mark", "/api/v1/pods", "{}"});
    return absl::OkStatus();
  };
  DevicePluginServer::Options options;
  options.plugin_dir = dir;
  auto server = DevicePluginServer::Start(EightGpus(), options, lister, mark);
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  auto stub = v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
      "unix:" + (*server)->SocketPath("aliyun.com/gpu-mem"), grpc::InsecureChannelCredentials()));
  const int gpu = (pods - 1) % kGpus;
  v1beta1::AllocateRequest request;
  auto* c = request.add_container_requests();
  for (int k = 0; k < 3; ++k) {
    c->add_devices_ids("GPU-" + std::to_string(gpu) + "-mem-" + std::to_string(k));
  }
  std::vector<double> us;
  int64_t call = 0;
  for (auto _ : state) {
    state.PauseTiming();
    cache.Apply("DELETED", waiting.dump());
    waiting["metadata"]["name"] = "waiting-" + std::to_string(call);
    waiting["metadata"]["uid"] = "uid-" + std::to_string(call++);
    cache.Apply("ADDED", waiting.dump());
    state.ResumeTiming();
    v1beta1::AllocateResponse reply;
    grpc::ClientContext context;
    const auto t0 = std::chrono::steady_clock::now();
    grpc::Status s = stub->Allocate(&context, request, &reply);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                     .count());
    if (!s.ok()) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
  }
  std::sort(us.begin(), us.end());
  if (!us.empty()) {
    state.counters["p50_us"] = us[us.size() / 2];
    state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  }
  if ((*server)->Stats().unidentified > 0) state.SkipWithError("a call was not told its pod");
  api.Stop();
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Allocate)
    ->ArgNames({"pods", "api_ms"})
    ->Args({10, 0})
    ->Args({100, 0})
    ->Args({1000, 0})
    ->Args({100, 15000})
    ->UseRealTime();

// The kubelet's Registration service: notes when a Register arrives.
class Kubelet final : public v1beta1::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest*,
                        v1beta1::Empty*) override {
    std::lock_guard lock(mu_);
    if (!at_) at_ = std::chrono::steady_clock::now();
    cv_.notify_all();
    return grpc::Status::OK;
  }
  std::optional<std::chrono::steady_clock::time_point> WaitRegistered(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return at_.has_value(); });
    return at_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::chrono::steady_clock::time_point> at_;
};

std::unique_ptr<grpc::Server> Serve(const std::string& socket, Kubelet* kubelet) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(kubelet);
  return builder.BuildAndStart();
}

void BM_Reregistration(benchmark::State& state) {
  const std::string dir = TempDir();
  const std::string socket = dir + "/kubelet.sock";
  // The API server is stalled: every write the plugin queues waits 15 s.
  SlowApi api(15'000);
  Patcher patcher([&](const Patcher::Write&) { return api.Write(); });
  auto mark = [&](const NodePod& pod) {
    patcher.Enqueue({"assigned/" + pod.uid, "mark", "/", "{}"});
    return absl::OkStatus();
  };
  auto lister = [](std::vector<std::string>*) -> absl::StatusOr<std::vector<NodePod>> {
    return absl::UnavailableError("this node's pods are not listed yet");
  };
  for (int i = 0; i < 100; ++i) patcher.Enqueue({"", "stalled", "/", "{}"});
  DevicePluginServer::Options options;
  options.plugin_dir = dir;
  auto server = DevicePluginServer::Start(EightGpus(), options, lister, mark);
  auto first = std::make_unique<Kubelet>();
  std::unique_ptr<grpc::Server> kubelet = Serve(socket, first.get());
  if (!server.ok() || kubelet == nullptr || !(*server)->Register().ok()) {
    state.SkipWithError("cannot start");
    return;
  }
  // The program's registration loop.
  std::atomic<bool> stop{false};
  std::thread registrar([&] {
    while (!stop.load()) {
      (void)(*server)->KeepRegistered();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::vector<double> ms;
  int round = 0;
  for (auto _ : state) {
    // At another point of the plugin's 100 ms loop each time.
    std::this_thread::sleep_for(std::chrono::milliseconds(37 * round++ % 100));
    // The kubelet restarts: it removes every socket of its folder (the
    // plugin's too) and serves a new one.
    kubelet->Shutdown();
    kubelet.reset();
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::filesystem::remove(entry.path());
    }
    auto next = std::make_unique<Kubelet>();
    const auto t0 = std::chrono::steady_clock::now();
    kubelet = Serve(socket, next.get());
    std::optional<std::chrono::steady_clock::time_point> at = next->WaitRegistered(std::chrono::seconds(30));
    if (!at) {
      state.SkipWithError("not registered again within 30 s");
      break;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(*at - t0).count());
    state.SetIterationTime(ms.back() / 1000);
    first = std::move(next);
  }
  stop.store(true);
  registrar.join();
  std::sort(ms.begin(), ms.end());
  if (!ms.empty()) {
    state.counters["p50_ms"] = ms[ms.size() / 2];
    state.counters["max_ms"] = ms.back();
  }
  api.Stop();
  (*server)->Stop();
  if (kubelet) kubelet->Shutdown();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Reregistration)->Iterations(20)->UseManualTime()->Unit(benchmark::kMillisecond);

#ifdef GPUSHARE_NVML_STUB
// A DGX H100-like node: 8 GPUs of 80 GiB on NVSwitches (18 links each).
std::string EightGpuFixture() {
  nlohmann::json devices = nlohmann::json::array();
  for (int i = 0; i < kGpus; ++i) {
    nlohmann::json nvlink = nlohmann::json::array();
    for (int l = 0; l < 18; ++l) nvlink.push_back({{"state", 1}, {"remote_bus_id", "0000:FF:00.0"}});
    char bus[32];
    std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x18 + i);
    devices.push_back({{"index", i}, {"uuid", "GPU-" + std::to_string(i)}, {"name", "NVIDIA H100"},
                       {"memory", {{"total", static_cast<uint64_t>(kUnitsPerGpu) << 30}}},
                       {"pci", {{"busId", bus}}}, {"compute_capability", {9, 0}},
                       {"numa_node", i / 4}, {"nvlink", nvlink},
                       {"common_ancestor", std::vector<int>(kGpus, 50)}});
  }
  return nlohmann::json({{"driver_version", "550.0"}, {"devices", devices}}).dump();
}

void BM_StartUp8Gpus(benchmark::State& state) {
  const std::string dir = TempDir();
  const std::string fixture = dir + "/fixture.json";
  std::ofstream(fixture) << EightGpuFixture();
  setenv("GPUSHARE_NVML_FIXTURE", fixture.c_str(), 1);
  for (auto _ : state) {
    auto nvml = Nvml::Load(GPUSHARE_NVML_STUB);
    auto gpus = (*nvml)->Devices();
    auto topo = (*nvml)->Topology(*gpus);
    auto inv = MakeInventory(*gpus, MemoryUnit::kGiB);
    if (!topo.ok() || !inv.ok()) {
      state.SkipWithError("discovery failed");
      break;
    }
    DevicePluginServer::Options options;
    options.plugin_dir = dir;
    auto server = DevicePluginServer::Start(*inv, options, nullptr, nullptr);
    benchmark::DoNotOptimize(server);
    (*server)->Stop();
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_StartUp8Gpus)->Unit(benchmark::kMillisecond)->UseRealTime();
#endif

}  // namespace
}  // namespace gpushare::deviceplugin
