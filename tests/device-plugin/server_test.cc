// DevicePluginServer (device-plugin/server.h) over real gRPC on Unix sockets,
// driven by a client of the kubelet's own v1beta1 API. The kubelet's
// Registration service is a stand-in here (a unit test); the real kubelet
// drives the same server in the node stage of `make test`.

#include "device-plugin/server.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "deviceplugin/v1beta1/api.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The kubelet's Registration service: records who registered.
class Registrar final : public v1beta1::Registration::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request,
                        v1beta1::Empty*) override {
    std::lock_guard lock(mu_);
    requests_.push_back(*request);
    return grpc::Status::OK;
  }
  std::vector<v1beta1::RegisterRequest> requests() {
    std::lock_guard lock(mu_);
    return requests_;
  }

 private:
  std::mutex mu_;
  std::vector<v1beta1::RegisterRequest> requests_;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/gpushare-dp-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    StartKubelet();
    std::vector<GpuInfo> gpus;
    for (int i = 0; i < 2; ++i) {
      GpuInfo g;
      g.index = i;
      g.uuid = "GPU-" + std::to_string(i);
      g.memory_bytes = 4ull << 30;
      g.numa_node = i;
      gpus.push_back(g);
    }
    absl::StatusOr<Inventory> inv = MakeInventory(gpus, MemoryUnit::kGiB);
    ASSERT_TRUE(inv.ok());
    DevicePluginServer::Options options;
    options.plugin_dir = dir_;
    auto lister = [this](std::vector<std::string>* skipped) -> absl::StatusOr<std::vector<NodePod>> {
      std::lock_guard lock(mu_);
      return ParseNodePods(pods_.dump(), skipped);
    };
    auto marker = [this](const NodePod& pod) {
      std::lock_guard lock(mu_);
      marked_.push_back(pod.id());
      return absl::OkStatus();
    };
    absl::StatusOr<std::unique_ptr<DevicePluginServer>> server =
        DevicePluginServer::Start(*inv, options, lister, marker);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  void TearDown() override {
    server_.reset();
    if (kubelet_) kubelet_->Shutdown();
    std::filesystem::remove_all(dir_);
  }

  void StartKubelet() {
    registrar_ = std::make_unique<Registrar>();
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + dir_ + "/kubelet.sock", grpc::InsecureServerCredentials());
    builder.RegisterService(registrar_.get());
    kubelet_ = builder.BuildAndStart();
    ASSERT_NE(kubelet_, nullptr);
  }

  void AddPod(const std::string& name, int units, const std::string& idx) {
    std::lock_guard lock(mu_);
    pods_["items"].push_back(
        {{"metadata",
          {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name},
           {"annotations", {{"ALIYUN_COM_GPU_MEM_IDX", idx}, {"ALIYUN_COM_GPU_MEM_ASSIGNED", "false"}}}}},
         {"spec",
          {{"containers",
            {{{"name", "main"},
              {"resources", {{"limits", {{"aliyun.com/gpu-mem", std::to_string(units)}}}}}}}}}},
         {"status", {{"phase", "Pending"}}}});
  }

  std::unique_ptr<v1beta1::DevicePlugin::Stub> Client(const std::string& resource) {
    return v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
        "unix:" + server_->SocketPath(resource), grpc::InsecureChannelCredentials()));
  }

  std::string dir_;
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<grpc::Server> kubelet_;
  std::unique_ptr<DevicePluginServer> server_;
  std::mutex mu_;
  nlohmann::json pods_ = {{"items", nlohmann::json::array()}};
  std::vector<std::string> marked_;
};

TEST_F(ServerTest, RegistersEveryResourceWithTheKubelet) {
  ASSERT_TRUE(server_->Register().ok());
  std::vector<v1beta1::RegisterRequest> got = registrar_->requests();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].resource_name(), "aliyun.com/gpu-mem");
  EXPECT_EQ(got[1].resource_name(), "aliyun.com/gpu-count");
  EXPECT_EQ(got[2].resource_name(), "nvidia.com/gpu");
  for (const auto& r : got) {
    EXPECT_EQ(r.version(), "v1beta1");
    EXPECT_TRUE(r.options().get_preferred_allocation_available());
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/" + r.endpoint())) << r.endpoint();
  }
}

TEST_F(ServerTest, ListAndWatchSendsUnitsAndHealthChanges) {
  auto client = Client("aliyun.com/gpu-mem");
  grpc::ClientContext context;
  v1beta1::Empty empty;
  std::unique_ptr<grpc::ClientReader<v1beta1::ListAndWatchResponse>> stream =
      client->ListAndWatch(&context, empty);
  v1beta1::ListAndWatchResponse reply;
  ASSERT_TRUE(stream->Read(&reply));
  ASSERT_EQ(reply.devices_size(), 8);  // 4 GiB on each of 2 GPUs.
  EXPECT_EQ(reply.devices(5).id(), "GPU-1-mem-1");
  EXPECT_EQ(reply.devices(5).health(), "Healthy");
  EXPECT_EQ(reply.devices(5).topology().nodes(0).id(), 1);

  server_->SetHealth(1, false, "XID 79");
  ASSERT_TRUE(stream->Read(&reply));
  int unhealthy = 0;
  for (const auto& d : reply.devices()) {
    if (d.health() == "Unhealthy") {
      ++unhealthy;
      EXPECT_THAT(d.id(), HasSubstr("GPU-1-"));
    }
  }
  EXPECT_EQ(unhealthy, 4);
  EXPECT_EQ(server_->Unhealthy().at(1), "XID 79");
  server_->SetHealth(1, true, "");
  ASSERT_TRUE(stream->Read(&reply));
  for (const auto& d : reply.devices()) EXPECT_EQ(d.health(), "Healthy");
  context.TryCancel();
}

v1beta1::AllocateRequest UnitsOf(int gpu, int first, int count) {
  v1beta1::AllocateRequest request;
  auto* c = request.add_container_requests();
  for (int k = first; k < first + count; ++k) {
    c->add_devices_ids("GPU-" + std::to_string(gpu) + "-mem-" + std::to_string(k));
  }
  return request;
}

TEST_F(ServerTest, AllocateAnswersTheEnvironmentOfTheBoundPod) {
  AddPod("p", 3, "1");
  auto client = Client("aliyun.com/gpu-mem");
  v1beta1::AllocateResponse reply;
  grpc::ClientContext context;
  grpc::Status s = client->Allocate(&context, UnitsOf(1, 0, 3), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(reply.container_responses_size(), 1);
  const auto& envs = reply.container_responses(0).envs();
  EXPECT_EQ(envs.at("NVIDIA_VISIBLE_DEVICES"), "GPU-1");
  EXPECT_EQ(envs.at("ALIYUN_COM_GPU_MEM_CONTAINER"), "3");
  EXPECT_THAT(marked_, ElementsAre("default/p"));
  EXPECT_EQ(server_->Stats().allocations, 1);
  EXPECT_EQ(server_->Stats().disagreements, 0);
  EXPECT_EQ(server_->Held().size(), 3u);

  // Devices of another resource or another node are refused by name.
  v1beta1::AllocateResponse again;
  v1beta1::AllocateRequest wrong;
  wrong.add_container_requests()->add_devices_ids("GPU-7-mem-0");
  grpc::ClientContext context3;
  s = client->Allocate(&context3, wrong, &again);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("\"GPU-7-mem-0\""));
  EXPECT_EQ(server_->Stats().failed_allocations, 1);
}

// The kubelet's ids decide: a pod whose annotations name GPU 1 but whose
// ids are units of GPU 0 sees GPU 0, whatever its annotations say.
TEST_F(ServerTest, TheKubeletsIdsDecideNotTheAnnotations) {
  AddPod("forged", 3, "1");
  auto client = Client("aliyun.com/gpu-mem");
  v1beta1::AllocateResponse reply;
  grpc::ClientContext context;
  grpc::Status s = client->Allocate(&context, UnitsOf(0, 0, 3), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(reply.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-0");
  EXPECT_EQ(reply.container_responses(0).envs().at("ALIYUN_COM_GPU_MEM_IDX"), "0");
  EXPECT_EQ(server_->Stats().disagreements, 1);

  // No pod waits for 3 units any more: the container still gets exactly its ids.
  v1beta1::AllocateResponse unknown;
  grpc::ClientContext context2;
  s = client->Allocate(&context2, UnitsOf(1, 0, 3), &unknown);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(unknown.container_responses(0).envs().at("NVIDIA_VISIBLE_DEVICES"), "GPU-1");
  EXPECT_EQ(unknown.container_responses(0).envs().at("ALIYUN_COM_GPU_MEM_POD"), "3");
  EXPECT_EQ(server_->Stats().unidentified, 1);
}

TEST_F(ServerTest, AllocateAnswersMountsAndCdiNamesAsConfigured) {
  // A second server, on its own folder, with other strategies.
  const std::string dir = dir_ + "/cdi";
  std::filesystem::create_directories(dir);
  DevicePluginServer::Options options;
  options.plugin_dir = dir;
  options.device_list.strategies = {DeviceListStrategy::kVolumeMounts, DeviceListStrategy::kCdiCri};
  absl::StatusOr<std::unique_ptr<DevicePluginServer>> server = DevicePluginServer::Start(
      server_->inventory(), options,
      [](std::vector<std::string>*) -> absl::StatusOr<std::vector<NodePod>> {
        return std::vector<NodePod>();
      },
      nullptr);
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = v1beta1::DevicePlugin::NewStub(grpc::CreateChannel(
      "unix:" + (*server)->SocketPath("aliyun.com/gpu-mem"), grpc::InsecureChannelCredentials()));
  v1beta1::AllocateResponse reply;
  grpc::ClientContext context;
  grpc::Status s = client->Allocate(&context, UnitsOf(1, 0, 2), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const auto& c = reply.container_responses(0);
  EXPECT_EQ(c.envs().at("NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
  EXPECT_EQ(c.envs().at("ALIYUN_COM_GPU_MEM_CONTAINER"), "2");
  ASSERT_EQ(c.mounts_size(), 1);
  EXPECT_EQ(c.mounts(0).container_path(), "/var/run/nvidia-container-devices/GPU-1");
  ASSERT_EQ(c.cdi_devices_size(), 1);
  EXPECT_EQ(c.cdi_devices(0).name(), "nvidia.com/gpu=GPU-1");
  (*server)->Stop();
}

TEST_F(ServerTest, UnhealthyGpusAreNeverHandedOut) {
  AddPod("p", 2, "0");
  server_->SetHealth(0, false, "XID 79");
  auto client = Client("aliyun.com/gpu-mem");
  v1beta1::AllocateResponse reply;
  grpc::ClientContext context;
  grpc::Status s = client->Allocate(&context, UnitsOf(0, 0, 2), &reply);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("GPU 0 (GPU-0) is unhealthy: XID 79"));
  EXPECT_TRUE(server_->Held().empty());

  // Preferred: the healthy GPU, though the scheduler chose GPU 0.
  v1beta1::PreferredAllocationRequest request;
  auto* c = request.add_container_requests();
  for (int g = 0; g < 2; ++g) {
    for (int k = 0; k < 4; ++k) {
      c->add_available_deviceids("GPU-" + std::to_string(g) + "-mem-" + std::to_string(k));
    }
  }
  c->set_allocation_size(2);
  v1beta1::PreferredAllocationResponse preferred;
  grpc::ClientContext context2;
  ASSERT_TRUE(client->GetPreferredAllocation(&context2, request, &preferred).ok());
  EXPECT_THAT(preferred.container_responses(0).deviceids(),
              ElementsAre("GPU-1-mem-0", "GPU-1-mem-1"));
}

// One pod that cannot be read leaves the others served.
TEST_F(ServerTest, AnUnreadablePodAffectsOnlyItself) {
  {
    std::lock_guard lock(mu_);
    pods_["items"].push_back(
        {{"metadata", {{"name", "huge"}, {"namespace", "default"}, {"uid", "uid-huge"}}},
         {"spec",
          {{"containers",
            {{{"name", "main"}, {"resources", {{"limits", {{"aliyun.com/gpu-mem", "5G"}}}}}}}}}},
         {"status", {{"phase", "Failed"}}}});
  }
  AddPod("p", 3, "1");
  auto client = Client("aliyun.com/gpu-mem");
  v1beta1::AllocateResponse reply;
  grpc::ClientContext context;
  grpc::Status s = client->Allocate(&context, UnitsOf(1, 0, 3), &reply);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_THAT(marked_, ElementsAre("default/p"));
  EXPECT_EQ(server_->Stats().skipped_pods, 1);
  EXPECT_EQ(server_->Stats().unidentified, 0);
}

TEST_F(ServerTest, PreferredAllocationPicksUnitsOfTheChosenGpu) {
  AddPod("p", 2, "1");
  auto client = Client("aliyun.com/gpu-mem");
  v1beta1::PreferredAllocationRequest request;
  auto* c = request.add_container_requests();
  for (int g = 0; g < 2; ++g) {
    for (int k = 0; k < 4; ++k) {
      c->add_available_deviceids("GPU-" + std::to_string(g) + "-mem-" + std::to_string(k));
    }
  }
  c->set_allocation_size(2);
  v1beta1::PreferredAllocationResponse reply;
  grpc::ClientContext context;
  ASSERT_TRUE(client->GetPreferredAllocation(&context, request, &reply).ok());
  ASSERT_EQ(reply.container_responses_size(), 1);
  EXPECT_THAT(reply.container_responses(0).deviceids(), ElementsAre("GPU-1-mem-0", "GPU-1-mem-1"));
}

TEST_F(ServerTest, AKubeletRestartIsNoticedAndRegisteredAgain) {
  ASSERT_TRUE(server_->Register().ok());
  bool again = true;
  ASSERT_TRUE(server_->KeepRegistered(&again).ok());
  EXPECT_FALSE(again);
  // A restarting kubelet empties its folder and serves a new socket.
  kubelet_->Shutdown();
  kubelet_.reset();
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    std::filesystem::remove(entry.path());
  }
  absl::Status waiting = server_->KeepRegistered(&again);
  EXPECT_EQ(waiting.code(), absl::StatusCode::kUnavailable);
  StartKubelet();
  absl::Status s = server_->KeepRegistered(&again);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(again);
  EXPECT_EQ(registrar_->requests().size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(server_->SocketPath("aliyun.com/gpu-mem")));
  // And it serves on the new socket.
  auto client = Client("aliyun.com/gpu-count");
  v1beta1::DevicePluginOptions options;
  grpc::ClientContext context;
  EXPECT_TRUE(client->GetDevicePluginOptions(&context, v1beta1::Empty(), &options).ok());
}

}  // namespace
}  // namespace gpushare::deviceplugin
