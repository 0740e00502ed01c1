// Extender::BindPod under duplicate and concurrent binds, against a fake API
// server that behaves like the real one: the first Binding of a pod wins
// (slowly), every later one is 409 Conflict (AlreadyExists). Also Sync
// restoring bound pods, and pods deleted and recreated under the same name.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gpushare/kubernetes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::k8s {
namespace {

using ::gpushare::testing::StatusIs;
using ::nlohmann::json;
using ::testing::HasSubstr;

json Node1(const std::string& name, int gpus, int per_gpu) {
  return json{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", name}, {"labels", {{"gpushare", "true"}}}}},
              {"status",
               {{"capacity",
                 {{"aliyun.com/gpu-mem", std::to_string(gpus * per_gpu)},
                  {"aliyun.com/gpu-count", std::to_string(gpus)}}}}}};
}

json Pod1(const std::string& name, int units, const std::string& uid = "") {
  const json limits{{"aliyun.com/gpu-mem", std::to_string(units)}};
  const json container{{"name", "main"}, {"resources", {{"limits", limits}}}};
  return json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", "default"},
                {"uid", uid.empty() ? "uid-" + name : uid}}},
              {"spec", {{"containers", json::array({container})}}},
              {"status", {{"phase", "Pending"}}}};
}

std::string List(const char* kind, const std::vector<json>& items) {
  return json{{"kind", kind}, {"items", items}}.dump();
}

std::string Args(const json& pod, const std::string& node) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", {node}}}.dump();
}

BindTarget Target(const std::string& name, const std::string& node, const std::string& uid = "") {
  return BindTarget{"default", name, uid.empty() ? "uid-" + name : uid, node};
}

std::unique_ptr<Scheduler> MakeScheduler(const std::vector<json>& nodes,
                                         SchedulerOptions options = {}) {
  auto cluster = RebuildCluster(List("NodeList", nodes), List("PodList", {}));
  EXPECT_OK(cluster);
  auto s = Scheduler::Create(*std::move(cluster), options);
  EXPECT_OK(s);
  return *std::move(s);
}

// The binds an API server has seen: PATCHes of annotations and Bindings; the
// first Binding of a pod wins, the later ones are 409 Conflict. The winner's
// reply is delayed by `slow`, after the API has already bound the pod.
class FakeApi {
 public:
  explicit FakeApi(std::chrono::milliseconds slow) : slow_(slow) {}

  absl::Status Bind(const BindTarget& t, const BindResult& r) {
    {
      std::lock_guard lock(mu_);
      ++patches_;
      json& pod = pods_[t.pod_name];
      pod["metadata"]["annotations"] = json::parse(r.patch)["metadata"]["annotations"];
      pod["metadata"]["uid"] = t.pod_uid;
      ++bindings_;
      if (pod["spec"].contains("nodeName")) {
        return absl::AlreadyExistsError(absl::StrCat(
            "POST binding: HTTP 409 pod ", t.pod_name, " is already assigned to node ",
            pod["spec"]["nodeName"].get<std::string>()));
      }
      pod["spec"]["nodeName"] = t.node;
    }
    std::this_thread::sleep_for(slow_);
    return absl::OkStatus();
  }

  int patches() const {
    std::lock_guard lock(mu_);
    return patches_;
  }
  int bindings() const {
    std::lock_guard lock(mu_);
    return bindings_;
  }

 private:
  const std::chrono::milliseconds slow_;
  mutable std::mutex mu_;
  std::map<std::string, json> pods_;
  int patches_ = 0, bindings_ = 0;
};

// The issue's burst: eight binds of one 14-unit pod to one 14-unit GPU at
// once. Exactly one placement survives, confirmed; a second 14-unit pod is
// refused; the API saw one PATCH and one Binding.
TEST(BindRaceTest, EightConcurrentBindsOfOnePodPromiseItsGpuOnce) {
  for (int round = 0; round < 25; ++round) {
    SCOPED_TRACE(round);
    auto scheduler = MakeScheduler({Node1("n1", 1, 14)});
    FakeApi api(std::chrono::milliseconds(5));
    ExtenderOptions options;
    options.binder = [&](const BindTarget& t, const BindResult& r) { return api.Bind(t, r); };
    Extender ext(scheduler.get(), options);
    ASSERT_OK(ext.Filter(Args(Pod1("big", 14), "n1")).status());
    std::atomic<int> ready{0}, ok{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        ++ready;
        while (ready.load() < 8) std::this_thread::yield();
        if (ext.BindPod(Target("big", "n1")).ok()) ++ok;
      });
    }
    for (std::thread& t : threads) t.join();
    // The pod is bound in the API, so every reply says so.
    EXPECT_EQ(ok.load(), 8);
    EXPECT_EQ(api.bindings(), 1);
    EXPECT_EQ(api.patches(), 1);
    EXPECT_FALSE(scheduler->IsReserved("default/big"));
    scheduler->Read([](const Cluster& c) {
      ASSERT_NE(c.FindPlacement("default/big"), nullptr);
      EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 14);
    });
    EXPECT_OK(scheduler->CheckInvariants());
    // The GPU is full: another 14-unit pod is refused.
    ASSERT_OK(ext.Filter(Args(Pod1("second", 14), "n1")).status());
    EXPECT_THAT(ext.BindPod(Target("second", "n1")),
                StatusIs(absl::StatusCode::kResourceExhausted));
    // A retry long after the burst neither binds again nor moves anything.
    ASSERT_OK(ext.BindPod(Target("big", "n1")).status());
    EXPECT_EQ(api.bindings(), 1);
    EXPECT_EQ(api.patches(), 1);
  }
}

// A pod as the API server returns it, bound to `node` (empty: pending) with
// the annotations of `patch` (a BindResult::patch), if any.
std::string ApiPod(const std::string& name, int units, const std::string& node,
                   const std::string& patch = "", const std::string& uid = "") {
  json pod = Pod1(name, units, uid);
  if (!node.empty()) {
    pod["spec"]["nodeName"] = node;
    pod["status"]["phase"] = "Running";
  }
  if (!patch.empty()) {
    pod["metadata"]["annotations"] = json::parse(patch)["metadata"]["annotations"];
  }
  return pod.dump();
}

// What the binder's error means depends on where the API has the pod, which
// Bind() reads when the outcome is "already bound" (409) or unknown.
TEST(BindOutcomeTest, AConflictOrAnUnknownOutcomeIsSettledByReadingThePod) {
  auto scheduler = MakeScheduler({Node1("n1", 1, 14), Node1("n2", 1, 14)});
  absl::Status binder_says = absl::OkStatus();
  std::string api_node;  // Where the API has the pod bound ("" = pending).
  absl::Status reader_says = absl::OkStatus();
  int binds = 0, reads = 0;
  std::string last_patch;
  ExtenderOptions options;
  options.binder = [&](const BindTarget&, const BindResult& r) {
    ++binds;
    last_patch = r.patch;
    return binder_says;
  };
  options.pod_reader = [&](const BindTarget& t) -> absl::StatusOr<std::string> {
    ++reads;
    if (!reader_says.ok()) return reader_says;
    return ApiPod(t.pod_name, 6, api_node, last_patch);
  };
  Extender ext(scheduler.get(), options);
  auto used = [&](const std::string& node) {
    int64_t u = 0;
    scheduler->Read([&](const Cluster& c) { u = c.FindNode(node)->gpu_memory_used(); });
    return u;
  };
  ASSERT_OK(ext.Filter(Args(Pod1("p", 6), "n1")).status());

  // 409, and the API has it on this node (an earlier try won): success, kept.
  binder_says = absl::AlreadyExistsError("POST binding: HTTP 409");
  api_node = "n1";
  ASSERT_OK_AND_ASSIGN(BindResult r, ext.BindPod(Target("p", "n1")));
  EXPECT_EQ(r.placement.node, "n1");
  EXPECT_FALSE(scheduler->IsReserved("default/p"));
  EXPECT_EQ(used("n1"), 6);
  EXPECT_EQ(reads, 1);
  ASSERT_OK(scheduler->Release("default/p"));

  // 409, bound elsewhere (another replica): forgotten here, AlreadyExists.
  api_node = "n2";
  EXPECT_THAT(ext.BindPod(Target("p", "n1")),
              StatusIs(absl::StatusCode::kAlreadyExists, "bound to node n2"));
  EXPECT_EQ(used("n1"), 0);

  // A timeout whose Binding was applied all the same: success, kept.
  binder_says = absl::UnavailableError("POST binding: timed out");
  api_node = "n1";
  ASSERT_OK(ext.BindPod(Target("p", "n1")).status());
  EXPECT_EQ(used("n1"), 6);
  EXPECT_FALSE(scheduler->IsReserved("default/p"));
  ASSERT_OK(scheduler->Release("default/p"));

  // A timeout, and the pod is still pending: not bound, forgotten.
  api_node = "";
  EXPECT_THAT(ext.BindPod(Target("p", "n1")), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(used("n1"), 0);

  // A timeout and the pod cannot be read either: the GPUs stay reserved, so
  // that they are never promised to another pod while it may be bound.
  reader_says = absl::UnavailableError("GET pod: connection reset");
  EXPECT_THAT(ext.BindPod(Target("p", "n1")),
              StatusIs(absl::StatusCode::kUnavailable, "stay reserved"));
  EXPECT_TRUE(scheduler->IsReserved("default/p"));
  ASSERT_OK(ext.Filter(Args(Pod1("q", 14), "n1")).status());
  EXPECT_THAT(ext.BindPod(Target("q", "n1")), StatusIs(absl::StatusCode::kResourceExhausted));
  // kube-scheduler retries on the same node: the API says it is bound there.
  reader_says = absl::OkStatus();
  binder_says = absl::AlreadyExistsError("POST binding: HTTP 409");
  api_node = "n1";
  ASSERT_OK(ext.BindPod(Target("p", "n1")).status());
  EXPECT_FALSE(scheduler->IsReserved("default/p"));
  EXPECT_EQ(used("n1"), 6);

  // A plain refusal (e.g. 403, or a failed PATCH) forgets at once, unread.
  ASSERT_OK(scheduler->Release("default/p"));
  const int reads_before = reads;
  binder_says = absl::PermissionDeniedError("POST binding: HTTP 403");
  EXPECT_THAT(ext.BindPod(Target("p", "n1")), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(used("n1"), 0);
  EXPECT_EQ(reads, reads_before);
  EXPECT_OK(scheduler->CheckInvariants());
}

// Without a way to read the pod, "already bound" keeps the reservation for
// Sync() to settle: Sync confirms it once the list shows the pod bound there.
TEST(BindOutcomeTest, WithoutAReaderAConflictKeepsTheGpusUntilSyncSettlesIt) {
  auto scheduler = MakeScheduler({Node1("n1", 1, 14)});
  std::string patch;
  ExtenderOptions options;
  options.binder = [&](const BindTarget&, const BindResult& r) {
    patch = r.patch;
    return absl::AlreadyExistsError("POST binding: HTTP 409");
  };
  Extender ext(scheduler.get(), options);
  ASSERT_OK(ext.Filter(Args(Pod1("p", 14), "n1")).status());
  EXPECT_THAT(ext.BindPod(Target("p", "n1")), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_TRUE(scheduler->IsReserved("default/p"));
  const uint64_t mark = ext.SyncMark();
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.Sync(List("NodeList", {Node1("n1", 1, 14)}),
                                              "[" + ApiPod("p", 14, "n1", patch) + "]", mark));
  EXPECT_EQ(r.confirmed, 1);
  EXPECT_FALSE(scheduler->IsReserved("default/p"));
}

// The binder took longer than the reservation's time-to-live, but the pod is
// bound: its GPUs are held again rather than lost.
TEST(BindOutcomeTest, ABindOutlivingItsReservationStillHoldsTheGpus) {
  std::atomic<int64_t> now{0};
  SchedulerOptions so;
  so.reservation_ttl_ms = 1000;
  so.clock = [&] { return now.load(); };
  auto scheduler = MakeScheduler({Node1("n1", 1, 14)}, so);
  ExtenderOptions options;
  options.binder = [&](const BindTarget&, const BindResult&) {
    now += 5'000'000'000;  // 5 s.
    scheduler->ExpireReservations();
    return absl::OkStatus();
  };
  Extender ext(scheduler.get(), options);
  ASSERT_OK(ext.Filter(Args(Pod1("slow", 10), "n1")).status());
  ASSERT_OK(ext.BindPod(Target("slow", "n1")).status());
  scheduler->Read([](const Cluster& c) { EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 10); });
  EXPECT_FALSE(scheduler->IsReserved("default/slow"));
}

// A pod bound in the API whose reservation gpushare lost (forgotten, expired)
// is restored by the next Sync.
TEST(SyncRestoreTest, ABoundPodWhoseReservationWasLostIsRestored) {
  auto scheduler = MakeScheduler({Node1("n1", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK(ext.Filter(Args(Pod1("lost", 14), "n1")).status());
  ASSERT_OK_AND_ASSIGN(BindResult r, ext.BindPod(Target("lost", "n1")));
  const uint64_t mark = ext.SyncMark();
  ASSERT_OK(scheduler->Forget("default/lost"));
  ASSERT_OK_AND_ASSIGN(SyncReport report,
                       ext.Sync(List("NodeList", {Node1("n1", 1, 14)}),
                                "[" + ApiPod("lost", 14, "n1", r.patch) + "]", mark));
  EXPECT_EQ(report.restored, 1);
  EXPECT_THAT(report.warnings, ::testing::IsEmpty());
  scheduler->Read([](const Cluster& c) { EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 14); });
  // Now a 14-unit pod cannot have that GPU.
  ASSERT_OK(ext.Filter(Args(Pod1("second", 14), "n1")).status());
  EXPECT_THAT(ext.BindPod(Target("second", "n1")), StatusIs(absl::StatusCode::kResourceExhausted));
}

// A pod deleted and recreated under the same name (a StatefulSet's): news
// about the old pod cannot release the new one's GPUs, and the old pod's
// placement does not outlive it.
TEST(RecreatedPodTest, ThePlacementBelongsToTheUidItWasBoundFor) {
  auto scheduler = MakeScheduler({Node1("n1", 1, 14)});
  Extender ext(scheduler.get());
  const std::string nodes = List("NodeList", {Node1("n1", 1, 14)});
  ASSERT_OK(ext.Filter(Args(Pod1("sts-0", 10, "uid-old"), "n1")).status());
  ASSERT_OK_AND_ASSIGN(BindResult old_bind, ext.BindPod(Target("sts-0", "n1", "uid-old")));
  ASSERT_OK(scheduler->Confirm("default/sts-0"));
  // The old pod is deleted; the list shows its successor, pending: the old
  // placement goes.
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.Sync(nodes, "[" + ApiPod("sts-0", 10, "", "", "uid-new") + "]",
                                ext.SyncMark()));
  EXPECT_EQ(r.released, 1);
  // The successor is bound.
  ASSERT_OK(ext.Filter(Args(Pod1("sts-0", 10, "uid-new"), "n1")).status());
  ASSERT_OK_AND_ASSIGN(BindResult new_bind, ext.BindPod(Target("sts-0", "n1", "uid-new")));
  // A late release about the old pod changes nothing ...
  json reply = json::parse(*ext.Release(
      R"({"PodNamespace":"default","PodName":"sts-0","PodUID":"uid-old"})"));
  EXPECT_THAT(reply["Error"].get<std::string>(), HasSubstr("uid-new"));
  EXPECT_TRUE(scheduler->IsReserved("default/sts-0"));
  // ... and neither does a list fetched before the new bind (its mark), still
  // showing the old pod bound ...
  const uint64_t before_new = 0;
  ASSERT_OK_AND_ASSIGN(
      r, ext.Sync(nodes, "[" + ApiPod("sts-0", 10, "n1", old_bind.patch, "uid-old") + "]",
                  before_new));
  EXPECT_EQ(r.released, 0);
  scheduler->Read([](const Cluster& c) { EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 10); });
  // ... while a release naming the new pod does release it.
  reply = json::parse(*ext.Release(
      R"({"PodNamespace":"default","PodName":"sts-0","PodUID":"uid-new"})"));
  EXPECT_EQ(reply["Error"], "");
  scheduler->Read([](const Cluster& c) { EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 0); });
}

// A bind of a recreated pod whose name still holds the old pod's placement
// (no Sync in between) takes the GPUs over instead of failing.
TEST(RecreatedPodTest, ABindOfTheSuccessorReplacesTheOldPlacement) {
  auto scheduler = MakeScheduler({Node1("n1", 1, 14), Node1("n2", 1, 14)});
  int binds = 0;
  ExtenderOptions options;
  options.binder = [&](const BindTarget&, const BindResult&) {
    ++binds;
    return absl::OkStatus();
  };
  Extender ext(scheduler.get(), options);
  ASSERT_OK(ext.Filter(Args(Pod1("sts-0", 10, "uid-old"), "n1")).status());
  ASSERT_OK(ext.BindPod(Target("sts-0", "n1", "uid-old")).status());
  ASSERT_OK(ext.Filter(Args(Pod1("sts-0", 10, "uid-new"), "n2")).status());
  ASSERT_OK_AND_ASSIGN(BindResult r, ext.BindPod(Target("sts-0", "n2", "uid-new")));
  EXPECT_EQ(r.placement.node, "n2");
  EXPECT_EQ(binds, 2);
  scheduler->Read([](const Cluster& c) {
    EXPECT_EQ(c.FindNode("n1")->gpu_memory_used(), 0);
    EXPECT_EQ(c.FindNode("n2")->gpu_memory_used(), 10);
  });
  EXPECT_OK(scheduler->CheckInvariants());
}

// gpu-count "0" or negative on a pod that asks for GPUs is a mistake, named
// in the error; on a pod that asks for none it is ignored.
TEST(GpuCountLabelTest, ZeroOrNegativeIsRejectedOnPodsThatAskForGpus) {
  for (const char* bad : {"0", "-1", "00"}) {
    SCOPED_TRACE(bad);
    json shared = Pod1("p", 8);
    shared["metadata"]["labels"]["aliyun.com/gpu-count"] = bad;
    EXPECT_THAT(ParsePod(shared.dump()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("aliyun.com/gpu-count=\"", bad, "\"")));
    json whole = Pod1("w", 0);
    whole["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", "1"}};
    whole["metadata"]["labels"]["aliyun.com/gpu-count"] = bad;
    EXPECT_THAT(ParsePod(whole.dump()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         absl::StrCat("aliyun.com/gpu-count=\"", bad, "\"")));
    json cpu_only = Pod1("c", 0);
    cpu_only["spec"]["containers"][0]["resources"]["limits"] = json::object();
    cpu_only["metadata"]["labels"]["aliyun.com/gpu-count"] = bad;
    ASSERT_OK_AND_ASSIGN(Pod pod, ParsePod(cpu_only.dump()));
    EXPECT_FALSE(pod.uses_gpus());
  }
}

}  // namespace
}  // namespace gpushare::k8s
