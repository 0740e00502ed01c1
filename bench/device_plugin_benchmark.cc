// gpushare-device-plugin's serving path: Allocate over the kubelet's gRPC API
// on a Unix socket (the pod list parsed each call, as the program does; the
// API server's GET itself is not included), and start-up on an 8-GPU node
// (NVML through the stand-in library, the GPU topology, the inventory and
// the three gRPC servers).
//
//   build-bench/bench/device_plugin_benchmark --benchmark_filter=Allocate
//
// BM_Allocate reports p50_us and p99_us of single calls beside the mean.

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "device-plugin/allocation.h"
#include "device-plugin/inventory.h"
#include "device-plugin/nvml.h"
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

void BM_Allocate(benchmark::State& state) {
  const std::string dir = TempDir();
  const std::string list = PodList(static_cast<int>(state.range(0)));
  int64_t call = 0;
  auto lister = [&](std::vector<std::string>* skipped) -> absl::StatusOr<std::vector<NodePod>> {
    std::string text = list;
    text.replace(text.find("\"UID\""), 5, "\"uid-" + std::to_string(call) + "\"");
    return ParseNodePods(text, skipped);
  };
  DevicePluginServer::Options options;
  options.plugin_dir = dir;
  auto server = DevicePluginServer::Start(EightGpus(), options, lister, nullptr);
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  auto stub = v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
      "unix:" + (*server)->SocketPath("aliyun.com/gpu-mem"), grpc::InsecureChannelCredentials()));
  v1beta1::AllocateRequest request;
  auto* c = request.add_container_requests();
  for (int k = 0; k < 3; ++k) c->add_devices_ids("GPU-0-mem-" + std::to_string(k));
  std::vector<double> us;
  for (auto _ : state) {
    ++call;
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
  (*server)->Stop();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Allocate)->ArgName("pods")->Arg(10)->Arg(100)->Arg(1000)->UseRealTime();

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
