// The kubelet's pod-resources API as a restarted plugin reads it
// (device-plugin/pod_resources.h), from a PodResourcesLister served here
// over real gRPC (the real kubelet serves it in the node stage).

#include "device-plugin/pod_resources.h"

#include <stdlib.h>

#include <filesystem>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "podresources/v1/api.grpc.pb.h"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Lister final : public ::v1::PodResourcesLister::Service {
 public:
  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* reply) override {
    auto* pod = reply->add_pod_resources();
    pod->set_name("p");
    pod->set_namespace_("default");
    auto* c = pod->add_containers();
    c->set_name("main");
    auto* mem = c->add_devices();
    mem->set_resource_name("aliyun.com/gpu-mem");
    mem->add_device_ids("GPU-1-mem-0");
    mem->add_device_ids("GPU-1-mem-1");
    auto* other = c->add_devices();
    other->set_resource_name("example.com/fpga");
    other->add_device_ids("f0");
    auto* gone = reply->add_pod_resources();
    gone->set_name("deleted");
    gone->set_namespace_("default");
    auto* g = gone->add_containers();
    g->set_name("c");
    auto* whole = g->add_devices();
    whole->set_resource_name("nvidia.com/gpu");
    whole->add_device_ids("GPU-0");
    return grpc::Status::OK;
  }
};

TEST(PodResourcesTest, ServedContainersOfGpushareResourcesAreRestored) {
  char tmpl[] = "/tmp/gpushare-pr-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string socket = std::string(tmpl) + "/kubelet.sock";
  Lister lister;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&lister);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);

  absl::StatusOr<std::vector<ServedContainer>> served = ListServed(socket);
  ASSERT_TRUE(served.ok()) << served.status();
  ASSERT_EQ(served->size(), 2u);  // The FPGA is not ours.
  EXPECT_EQ((*served)[0].container, "main");
  EXPECT_EQ((*served)[0].resource, Resource::kGpuMem);
  EXPECT_THAT((*served)[0].device_ids, ElementsAre("GPU-1-mem-0", "GPU-1-mem-1"));
  EXPECT_EQ((*served)[1].resource, Resource::kWholeGpu);

  NodePod p;
  p.uid = "uid-p";
  p.namespace_name = "default";
  p.name = "p";
  std::vector<Ledger::Key> keys = ServedKeys(*served, {p});
  ASSERT_EQ(keys.size(), 1u);  // The deleted pod's container is dropped.
  EXPECT_EQ(keys[0].pod_uid, "uid-p");
  EXPECT_EQ(keys[0].container, "main");
  server->Shutdown();
  std::filesystem::remove_all(tmpl);
}

NodePod BoundPod(const std::string& name, const std::string& idx,
                 std::vector<std::pair<std::string, int64_t>> containers) {
  NodePod p;
  p.uid = "uid-" + name;
  p.namespace_name = "default";
  p.name = name;
  p.annotations["ALIYUN_COM_GPU_MEM_IDX"] = idx;
  for (const auto& [c, units] : containers) {
    ContainerDemand d;
    d.name = c;
    d.gpu_mem = units;
    p.containers.push_back(d);
  }
  return p;
}

ServedContainer Served(const std::string& pod, const std::string& container,
                       std::vector<std::string> ids) {
  ServedContainer s;
  s.pod_namespace = "default";
  s.pod_name = pod;
  s.container = container;
  s.device_ids = std::move(ids);
  return s;
}

TEST(PodResourcesTest, PodsWhoseDevicesSitElsewhereAreCorrected) {
  std::vector<GpuInfo> gpus(2);
  for (int i = 0; i < 2; ++i) {
    gpus[i].index = i;
    gpus[i].uuid = "GPU-" + std::to_string(i);
    gpus[i].memory_bytes = 8ull << 30;
  }
  absl::StatusOr<Inventory> inv = MakeInventory(gpus, MemoryUnit::kGiB);
  ASSERT_TRUE(inv.ok());
  // "a" was annotated GPU 0 but the kubelet gave it units of GPU 1 (it
  // admitted "a" while the plugin took it for "b"); "b" is right and marked
  // assigned; "c" is half admitted (its second container is not listed yet);
  // "d" was admitted but never marked (its Allocate could not tell it); "e"
  // is right but finished: only "a" and "d" are corrected.
  std::vector<NodePod> pods = {BoundPod("a", "0", {{"m", 2}}), BoundPod("b", "1", {{"m", 2}}),
                               BoundPod("c", "0", {{"x", 1}, {"y", 1}}),
                               BoundPod("d", "0", {{"m", 1}}), BoundPod("e", "0", {{"m", 1}})};
  pods[1].annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true";
  pods[4].phase = "Succeeded";
  std::vector<ServedContainer> served = {
      Served("a", "m", {"GPU-1-mem-0", "GPU-1-mem-1"}),
      Served("b", "m", {"GPU-1-mem-2", "GPU-1-mem-3"}),
      Served("c", "x", {"GPU-1-mem-4"}), Served("d", "m", {"GPU-0-mem-0"}),
      Served("e", "m", {"GPU-0-mem-1"})};
  std::vector<Correction> fixes = CorrectionsFrom(served, pods, *inv, 1234);
  ASSERT_EQ(fixes.size(), 2u);
  EXPECT_EQ(fixes[0].pod, "default/a");
  EXPECT_TRUE(fixes[0].moved);
  EXPECT_THAT(fixes[0].annotated, ElementsAre(0));
  EXPECT_EQ(fixes[0].actual, (std::map<int, int64_t>{{1, 2}}));
  nlohmann::json patch = nlohmann::json::parse(fixes[0].patch);
  EXPECT_EQ(patch["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"], "1");
  EXPECT_EQ(patch["metadata"]["annotations"]["scheduler.framework.gpushare.allocation"],
            R"({"0":{"1":2}})");
  EXPECT_EQ(patch["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"], "true");
  // "d": only marked, its placement kept.
  EXPECT_EQ(fixes[1].pod, "default/d");
  EXPECT_FALSE(fixes[1].moved);
  EXPECT_TRUE(fixes[1].unmarked);
  patch = nlohmann::json::parse(fixes[1].patch);
  EXPECT_EQ(patch["metadata"]["annotations"].size(), 2u) << patch;
  EXPECT_EQ(patch["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"], "true");
  EXPECT_EQ(patch["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGN_TIME"], "1234");
  // Unknown device ids (another node's) correct nothing.
  for (ServedContainer& s : served) {
    for (std::string& id : s.device_ids) id.replace(4, 1, "9");
  }
  EXPECT_TRUE(CorrectionsFrom(served, pods, *inv, 1234).empty());
}

TEST(PodResourcesTest, ASilentKubeletIsNamed) {
  absl::StatusOr<std::vector<ServedContainer>> served =
      ListServed("/tmp/gpushare-no-such-kubelet.sock", std::chrono::milliseconds(200));
  EXPECT_EQ(served.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(served.status().message()),
              HasSubstr("/tmp/gpushare-no-such-kubelet.sock"));
}

}  // namespace
}  // namespace gpushare::deviceplugin
