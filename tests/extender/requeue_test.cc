// The requeue nudge: after a release, pending GPU pods that now fit are
// touched (and only those), once per interval; a kick wakes the runner.

#include "extender/requeue.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::extender {
namespace {

using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

json Node(const std::string& name, int units) {
  return json{{"metadata", {{"name", name}, {"labels", {{"gpushare", "true"}}}}},
              {"spec", json::object()},
              {"status",
               {{"capacity",
                 {{"aliyun.com/gpu-mem", std::to_string(units)}, {"aliyun.com/gpu-count", "1"}}}}}};
}

json Pod(const std::string& name, int units, const std::string& node = "") {
  json pod{{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
           {"spec",
            {{"containers",
              json::array({{{"name", "main"},
                            {"resources",
                             {{"limits", units > 0 ? json{{"aliyun.com/gpu-mem",
                                                            std::to_string(units)}}
                                                   : json::object()}}}}})}}},
           {"status", {{"phase", node.empty() ? "Pending" : "Running"}}}};
  if (!node.empty()) {
    pod["spec"]["nodeName"] = node;
    pod["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", "0"},
                                      {"ALIYUN_COM_GPU_MEM_POD", std::to_string(units)}};
  }
  return pod;
}

class RequeueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const json nodes{{"items", {Node("n1", 14)}}};
    const json pods{{"items", {big_}}};
    auto cluster = k8s::RebuildCluster(nodes.dump(), pods.dump());
    ASSERT_OK(cluster);
    auto scheduler = Scheduler::Create(*std::move(cluster));
    ASSERT_OK(scheduler);
    scheduler_ = *std::move(scheduler);
    ext_ = std::make_unique<k8s::Extender>(scheduler_.get());
    ASSERT_OK(ext_->RememberPods(pods.dump()));
  }

  RequeueOptions Options() {
    RequeueOptions o;
    o.pods = [this] {
      std::vector<std::string> out;
      for (const json& p : pending_) out.push_back(p.dump());
      return out;
    };
    o.node_names = [] { return std::vector<std::string>{"n1"}; };
    o.patch = [this](const std::string& ns, const std::string& name, const std::string& patch) {
      std::lock_guard lock(mu_);
      patched_.push_back(ns + "/" + name);
      EXPECT_TRUE(json::parse(patch)["metadata"]["annotations"].contains(kRequeueAnnotation));
      return absl::OkStatus();
    };
    return o;
  }

  std::vector<std::string> Patched() {
    std::lock_guard lock(mu_);
    return patched_;
  }

  const json big_ = Pod("big", 10, "n1");
  // Waits for big's units; can never fit; has no GPUs; is terminating.
  std::vector<json> pending_ = {Pod("waiting", 8), Pod("huge", 20), Pod("cpu-only", 0),
                                [] {
                                  json p = Pod("leaving", 1);
                                  p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
                                  return p;
                                }()};
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<k8s::Extender> ext_;
  std::mutex mu_;
  std::vector<std::string> patched_;
};

TEST_F(RequeueTest, TouchesOnlyPendingGpuPodsThatNowFit) {
  Requeuer requeuer(ext_.get(), Options());
  EXPECT_THAT(requeuer.RunOnce(), IsEmpty());  // Nothing fits while big holds 10 of 14.
  ASSERT_OK_AND_ASSIGN(k8s::SyncReport r, ext_->ApplyPodEvent("DELETED", big_.dump()));
  ASSERT_EQ(r.released, 1);
  EXPECT_THAT(requeuer.RunOnce(), ElementsAre("default/waiting"));
  EXPECT_THAT(Patched(), ElementsAre("default/waiting"));
  // Not again within the interval.
  EXPECT_THAT(requeuer.RunOnce(), IsEmpty());
}

TEST_F(RequeueTest, AKickRunsARoundOnTheRunnerThread) {
  RequeueOptions o = Options();
  o.coalesce = std::chrono::milliseconds(1);
  Requeuer requeuer(ext_.get(), o);
  std::atomic<bool> stop{false};
  std::thread runner([&] { requeuer.Run(stop); });
  ASSERT_OK(ext_->ApplyPodEvent("DELETED", big_.dump()).status());
  requeuer.Kick();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Patched().empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  runner.join();
  EXPECT_THAT(Patched(), ElementsAre("default/waiting"));
}

}  // namespace
}  // namespace gpushare::extender
