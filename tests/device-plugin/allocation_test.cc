// Inventory (device-plugin/inventory.h) and the Ledger's matching of kubelet
// Allocate calls to containers (device-plugin/allocation.h).

#include "device-plugin/allocation.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kGiB = 1ull << 30;

std::vector<GpuInfo> Gpus(std::vector<uint64_t> gib) {
  std::vector<GpuInfo> gpus;
  for (size_t i = 0; i < gib.size(); ++i) {
    GpuInfo g;
    g.index = static_cast<int>(i);
    g.uuid = "GPU-" + std::to_string(i);
    g.memory_bytes = gib[i] * kGiB + 100 * (1 << 20);  // A little over: rounded down.
    gpus.push_back(g);
  }
  return gpus;
}

Inventory MakeInv(std::vector<uint64_t> gib, MemoryUnit unit = MemoryUnit::kGiB) {
  absl::StatusOr<Inventory> inv = MakeInventory(Gpus(gib), unit);
  EXPECT_TRUE(inv.ok()) << inv.status();
  return *inv;
}

TEST(InventoryTest, MixedSizesSumRightInEitherUnit) {
  Inventory inv = MakeInv({10, 20});
  EXPECT_EQ(inv.units(0), 10);
  EXPECT_EQ(inv.units(1), 20);
  EXPECT_EQ(inv.total_units(), 30);
  Inventory mib = MakeInv({10, 20}, MemoryUnit::kMiB);
  EXPECT_EQ(mib.units(0), 10 * 1024 + 100);
  EXPECT_EQ(mib.total_units(), 30 * 1024 + 200);
}

TEST(InventoryTest, DeviceIdsMapBackToTheirGpu) {
  Inventory inv = MakeInv({2, 3});
  EXPECT_EQ(inv.MemDeviceId(1, 2), "GPU-1-mem-2");
  EXPECT_EQ(inv.GpuOfDevice("GPU-1-mem-2"), 1);
  EXPECT_EQ(inv.GpuOfDevice("GPU-0"), 0);
  EXPECT_EQ(inv.GpuOfDevice("GPU-1-mem-3"), std::nullopt);  // GPU 1 has units 0..2.
  EXPECT_EQ(inv.GpuOfDevice("GPU-9-mem-0"), std::nullopt);
  EXPECT_EQ(inv.GpuOfDevice("nonsense"), std::nullopt);
}

TEST(InventoryTest, DiscoveryJsonSaysWhatIsAdvertised) {
  Inventory inv = MakeInv({10, 20});
  nlohmann::json j = nlohmann::json::parse(InventoryJson(inv, "550.1", R"({"gpus":2,"links":["PIX"]})"));
  EXPECT_EQ(j["driver_version"], "550.1");
  EXPECT_EQ(j["memory_unit"], "GiB");
  ASSERT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][1]["uuid"], "GPU-1");
  EXPECT_EQ(j["gpus"][1]["units"], 20);
  EXPECT_EQ(j["gpus"][1]["memory_bytes"], 20 * kGiB + 100 * (1 << 20));
  EXPECT_EQ(j["topology"]["links"][0], "PIX");
  EXPECT_FALSE(nlohmann::json::parse(InventoryJson(inv, "1", "")).contains("topology"));
}

TEST(InventoryTest, RefusesWhatCannotBeAdvertised) {
  EXPECT_THAT(MakeInventory({}, MemoryUnit::kGiB).status().message(), HasSubstr("no GPU"));
  std::vector<GpuInfo> same = Gpus({1, 1});
  same[1].uuid = same[0].uuid;
  EXPECT_THAT(MakeInventory(same, MemoryUnit::kGiB).status().message(),
              HasSubstr("UUID GPU-0 of another GPU"));
  std::vector<GpuInfo> tiny = Gpus({1});
  tiny[0].memory_bytes = 1000;
  EXPECT_THAT(MakeInventory(tiny, MemoryUnit::kGiB).status().message(),
              HasSubstr("less than one GiB"));
  EXPECT_THAT(ParseMemoryUnit("GB").status().message(), HasSubstr("\"GB\""));
  EXPECT_EQ(*ParseMemoryUnit("mib"), MemoryUnit::kMiB);
}

// A v1.Pod as the API server returns it.
nlohmann::json PodJson(const std::string& name, std::vector<std::pair<std::string, int>> mem,
                       std::map<std::string, std::string> annotations,
                       std::vector<std::pair<std::string, int>> init = {}) {
  nlohmann::json pod = {
      {"metadata",
       {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name},
        {"creationTimestamp", "2026-11-28T10:00:00Z"}, {"annotations", annotations}}},
      {"spec", {{"nodeName", "n1"}, {"containers", nlohmann::json::array()}}},
      {"status", {{"phase", "Pending"}}}};
  auto add = [](nlohmann::json& list, const std::string& c, int units) {
    nlohmann::json limits = nlohmann::json::object();
    if (units > 0) limits["aliyun.com/gpu-mem"] = std::to_string(units);
    list.push_back({{"name", c}, {"resources", {{"limits", limits}}}});
  };
  for (const auto& [c, units] : mem) add(pod["spec"]["containers"], c, units);
  if (!init.empty()) {
    pod["spec"]["initContainers"] = nlohmann::json::array();
    for (const auto& [c, units] : init) add(pod["spec"]["initContainers"], c, units);
  }
  return pod;
}

std::vector<NodePod> Parse(const std::vector<nlohmann::json>& pods) {
  nlohmann::json list = {{"kind", "PodList"}, {"items", pods}};
  absl::StatusOr<std::vector<NodePod>> parsed = ParseNodePods(list.dump());
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : std::vector<NodePod>();
}

std::map<std::string, std::string> Bound(const std::string& idx, int64_t assume_time = 1) {
  return {{"ALIYUN_COM_GPU_MEM_IDX", idx},
          {"ALIYUN_COM_GPU_MEM_ASSIGNED", "false"},
          {"ALIYUN_COM_GPU_MEM_ASSUME_TIME", std::to_string(assume_time)}};
}

TEST(LedgerTest, AThreeUnitPodGetsTheGpuItWasBoundTo) {
  Inventory inv = MakeInv({16, 16, 16, 16});
  std::vector<NodePod> pods = Parse({PodJson("a", {{"main", 3}}, Bound("2"))});
  Ledger ledger;
  absl::StatusOr<Grant> g = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->pod, "default/a");
  EXPECT_EQ(g->container, "main");
  EXPECT_THAT(g->gpus, ElementsAre(2));
  EXPECT_THAT(g->units, ElementsAre(3));
  EXPECT_TRUE(g->completes_pod);
  EXPECT_FALSE(g->ambiguous);
  EXPECT_EQ(g->env["NVIDIA_VISIBLE_DEVICES"], "GPU-2");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "3");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_DEV"], "16");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_IDX"], "2");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_POD"], "3");
  ledger.Record(*g);
  // Served: a second Allocate of 3 finds nothing, and says why.
  absl::StatusOr<Grant> again = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(again.status().message(), HasSubstr("default/a: no container left asking 3"));
}

TEST(LedgerTest, TwoGpuContainersEachGetTheirOwnUnits) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("two", {{"a", 2}, {"b", 3}}, Bound("1"))});
  Ledger ledger;
  absl::StatusOr<Grant> b = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->container, "b");
  EXPECT_EQ(b->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "3");
  EXPECT_EQ(b->env["ALIYUN_COM_GPU_MEM_POD"], "5");
  EXPECT_EQ(b->env["NVIDIA_VISIBLE_DEVICES"], "GPU-1");
  EXPECT_FALSE(b->completes_pod);  // "a" is still to come.
  ledger.Record(*b);
  absl::StatusOr<Grant> a = ledger.Match(Resource::kGpuMem, 2, pods, inv);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->container, "a");
  EXPECT_EQ(a->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "2");
  EXPECT_TRUE(a->completes_pod);
}

TEST(LedgerTest, MultiCardGetsEveryGpuAndTheSharesSumToThePlacement) {
  Inventory inv = MakeInv({15, 15, 15, 15});
  std::vector<NodePod> one = Parse({PodJson("mc", {{"main", 8}}, Bound("0-1-2-3"))});
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuMem, 8, one, inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1,GPU-2,GPU-3");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "2");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_DEV"], "15");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_IDX"], "0-1-2-3");

  // 2 + 6 units over 4 GPUs (2 per GPU): the second container continues
  // where the first stopped, so every GPU carries exactly 2.
  std::vector<NodePod> split = Parse({PodJson("mc2", {{"x", 2}, {"y", 6}}, Bound("0-1-2-3"))});
  Ledger ledger;
  std::map<int, int64_t> per_gpu;
  for (int want : {2, 6}) {
    absl::StatusOr<Grant> c = ledger.Match(Resource::kGpuMem, want, split, inv);
    ASSERT_TRUE(c.ok()) << c.status();
    for (size_t k = 0; k < c->gpus.size(); ++k) per_gpu[c->gpus[k]] += c->units[k];
    ledger.Record(*c);
  }
  EXPECT_EQ(per_gpu, (std::map<int, int64_t>{{0, 2}, {1, 2}, {2, 2}, {3, 2}}));
}

TEST(LedgerTest, APerContainerAllocationAnnotationIsFollowed) {
  Inventory inv = MakeInv({8, 8});
  std::vector<NodePod> pods = Parse({PodJson(
      "ack", {{"a", 1}, {"b", 7}},
      {{"scheduler.framework.gpushare.allocation", R"({"0":{"1":1},"1":{"0":3,"1":4}})"}})});
  absl::StatusOr<Grant> b = Ledger().Match(Resource::kGpuMem, 7, pods, inv);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_THAT(b->gpus, ElementsAre(0, 1));
  EXPECT_THAT(b->units, ElementsAre(3, 4));
  EXPECT_EQ(b->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "3,4");
}

TEST(LedgerTest, InitContainersComeFirstAndShareThePodsGpu) {
  Inventory inv = MakeInv({16});
  std::vector<NodePod> pods =
      Parse({PodJson("i", {{"main", 4}}, Bound("0"), /*init=*/{{"setup", 4}})});
  Ledger ledger;
  absl::StatusOr<Grant> setup = ledger.Match(Resource::kGpuMem, 4, pods, inv);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->container, "setup");
  ledger.Record(*setup);
  absl::StatusOr<Grant> main = ledger.Match(Resource::kGpuMem, 4, pods, inv);
  ASSERT_TRUE(main.ok()) << main.status();
  EXPECT_EQ(main->container, "main");
  EXPECT_EQ(main->env["ALIYUN_COM_GPU_MEM_POD"], "4");  // Init containers are not summed.
  EXPECT_TRUE(main->completes_pod);
}

TEST(LedgerTest, ThePodBoundFirstIsTakenAndADifferentChoiceIsFlagged) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("late", {{"c", 3}}, Bound("1", 200)),
                                     PodJson("early", {{"c", 3}}, Bound("0", 100))});
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->pod, "default/early");
  EXPECT_TRUE(g->ambiguous);
  // The same GPU for both: whichever is taken, the container gets the same.
  std::vector<NodePod> same = Parse({PodJson("p", {{"c", 3}}, Bound("1", 200)),
                                     PodJson("q", {{"c", 3}}, Bound("1", 100))});
  absl::StatusOr<Grant> s = Ledger().Match(Resource::kGpuMem, 3, same, inv);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->ambiguous);
}

TEST(LedgerTest, PodsBoundBeforeTheKubeletStartedAreTakenByCreationTime) {
  // A restarted kubelet lists the pods bound to it and admits them by
  // creationTimestamp, whatever order they were bound in.
  Inventory inv = MakeInv({16, 16});
  nlohmann::json older = PodJson("older", {{"c", 3}}, Bound("1", 200));
  older["metadata"]["creationTimestamp"] = "2026-11-28T09:59:59Z";
  nlohmann::json newer = PodJson("newer", {{"c", 3}}, Bound("0", 100));
  std::vector<NodePod> pods = Parse({newer, older});
  Ledger ledger;
  absl::StatusOr<Grant> unknown = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->pod, "default/newer");  // No start known: the one bound first.
  ledger.set_kubelet_start_ns(300);          // Both bound before the kubelet started.
  absl::StatusOr<Grant> at_start = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(at_start.ok()) << at_start.status();
  EXPECT_EQ(at_start->pod, "default/older");
  EXPECT_THAT(at_start->gpus, ElementsAre(1));
  EXPECT_TRUE(at_start->ambiguous);
  ledger.set_kubelet_start_ns(50);  // Both bound after it: as they were bound.
  absl::StatusOr<Grant> after = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->pod, "default/newer");
}

TEST(LedgerTest, PodsThatCannotBeMeantAreSkippedWithReasons) {
  Inventory inv = MakeInv({16});
  nlohmann::json done = PodJson("done", {{"c", 3}}, Bound("0"));
  done["status"]["phase"] = "Succeeded";
  nlohmann::json going = PodJson("going", {{"c", 3}}, Bound("0"));
  going["metadata"]["deletionTimestamp"] = "2026-11-28T10:01:00Z";
  nlohmann::json assigned = PodJson("assigned", {{"c", 3}}, Bound("0"));
  assigned["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true";
  nlohmann::json foreign = PodJson("foreign", {{"c", 3}}, {});
  nlohmann::json cpu = PodJson("cpu", {{"c", 0}}, {});
  std::vector<NodePod> pods = Parse({done, going, assigned, foreign, cpu});
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(g.status().message(), HasSubstr("waiting for 3 aliyun.com/gpu-mem"));
  EXPECT_THAT(g.status().message(), HasSubstr("default/done: finished"));
  EXPECT_THAT(g.status().message(), HasSubstr("default/going: being deleted"));
  EXPECT_THAT(g.status().message(), HasSubstr("default/assigned: already assigned"));
  EXPECT_THAT(g.status().message(), HasSubstr("default/foreign: not placed by a gpushare"));
  EXPECT_THAT(g.status().message(), ::testing::Not(HasSubstr("default/cpu")));
}

TEST(LedgerTest, AnIndexThisNodeLacksIsAnError) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("far", {{"c", 3}}, Bound("5"))});
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuMem, 3, pods, inv);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("ALIYUN_COM_GPU_MEM_IDX \"5\""));
}

TEST(LedgerTest, WholeGpusGoToEachContainerInTurn) {
  Inventory inv = MakeInv({80, 80, 80, 80});
  nlohmann::json pod = PodJson("ex", {{"a", 0}, {"b", 0}}, Bound("1-3"));
  pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  pod["spec"]["containers"][1]["resources"]["limits"]["nvidia.com/gpu"] = 1;
  std::vector<NodePod> pods = Parse({pod});
  Ledger ledger;
  absl::StatusOr<Grant> a = ledger.Match(Resource::kWholeGpu, 1, pods, inv);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->container, "a");
  EXPECT_EQ(a->env["NVIDIA_VISIBLE_DEVICES"], "GPU-1");
  EXPECT_EQ(a->env.count("ALIYUN_COM_GPU_MEM_CONTAINER"), 0u);
  ledger.Record(*a);
  absl::StatusOr<Grant> b = ledger.Match(Resource::kWholeGpu, 1, pods, inv);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->env["NVIDIA_VISIBLE_DEVICES"], "GPU-3");
  EXPECT_TRUE(b->completes_pod);
}

TEST(LedgerTest, GpuCountIsNotForAsking) {
  Inventory inv = MakeInv({16});
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuCount, 1, {}, inv);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(g.status().message(), HasSubstr("pod label aliyun.com/gpu-count"));
}

TEST(LedgerTest, HamiLimitsAreInMib) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("h", {{"c", 4}}, Bound("0-1"))});
  AllocationOptions hami;
  hami.hami_limits = true;
  absl::StatusOr<Grant> g = Ledger().Match(Resource::kGpuMem, 4, pods, inv, hami);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->env["CUDA_DEVICE_MEMORY_LIMIT_0"], "2048m");
  EXPECT_EQ(g->env["CUDA_DEVICE_MEMORY_LIMIT_1"], "2048m");
}

TEST(LedgerTest, PruneForgetsDeletedPods) {
  Inventory inv = MakeInv({16});
  std::vector<NodePod> pods = Parse({PodJson("a", {{"c", 3}}, Bound("0"))});
  Ledger ledger;
  ledger.RecordServed("uid-a", "c", Resource::kGpuMem);
  ledger.RecordServed("uid-gone", "c", Resource::kGpuMem);
  ledger.Prune(pods);
  EXPECT_EQ(ledger.size(), 1u);
  EXPECT_TRUE(ledger.Served("uid-a", "c", Resource::kGpuMem));
}

TEST(LedgerTest, ReconcileFollowsTheKubeletsRecords) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("a", {{"c", 3}}, Bound("0", 100)),
                                     PodJson("b", {{"c", 3}}, Bound("1", 200))});
  Ledger ledger;
  // The kubelet admits "b" first; the ledger takes the call for "a".
  absl::StatusOr<Grant> g = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->pod, "default/a");
  ledger.Record(*g, /*now_ns=*/1000);
  // Too soon to judge: the kubelet may not list it yet.
  EXPECT_TRUE(ledger.Reconcile({{"uid-b", "c", Resource::kGpuMem}}, 1500, 1000).empty());
  EXPECT_TRUE(ledger.Served("uid-a", "c", Resource::kGpuMem));
  // Later: the kubelet lists "b", not "a": "a" waits again, "b" is served.
  std::vector<Ledger::Key> back = ledger.Reconcile({{"uid-b", "c", Resource::kGpuMem}}, 5000, 1000);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].pod_uid, "uid-a");
  EXPECT_TRUE(ledger.Served("uid-b", "c", Resource::kGpuMem));
  EXPECT_FALSE(ledger.Served("uid-a", "c", Resource::kGpuMem));
  // So "a", admitted next, gets its own GPU.
  absl::StatusOr<Grant> a = ledger.Match(Resource::kGpuMem, 3, pods, inv);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->pod, "default/a");
  EXPECT_THAT(a->gpus, ElementsAre(0));
  // Records made without a time (restarts) are never put back.
  ledger.RecordServed("uid-x", "c", Resource::kGpuMem);
  EXPECT_TRUE(ledger.Reconcile({}, 1'000'000, 1).empty() ||
              ledger.Served("uid-x", "c", Resource::kGpuMem));
  EXPECT_TRUE(ledger.Served("uid-x", "c", Resource::kGpuMem));
}

TEST(ParseNodePodsTest, NamesTheBadQuantity) {
  nlohmann::json pod = PodJson("bad", {{"c", 1}}, {});
  pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "1.5";
  nlohmann::json list = {{"items", {pod}}};
  absl::StatusOr<std::vector<NodePod>> parsed = ParseNodePods(list.dump());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("pod default/bad container c"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("aliyun.com/gpu-mem"));
  EXPECT_FALSE(ParseNodePods("{").ok());
  EXPECT_TRUE(ParseNodePods(R"({"items":null})").ok());
}

}  // namespace
}  // namespace gpushare::deviceplugin
