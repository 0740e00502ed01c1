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

// Finding: MIG-enabled GPUs were advertised and their parent UUID handed out.
TEST(InventoryTest, MigGpusAreLeftOutAndNvmlIndicesMapToWhatIsAdvertised) {
  std::vector<GpuInfo> gpus = Gpus({40, 40, 40});
  gpus[1].mig_enabled = true;
  std::vector<std::string> left_out;
  std::vector<GpuInfo> sharable = SharableGpus(gpus, &left_out);
  ASSERT_EQ(sharable.size(), 2u);
  ASSERT_EQ(left_out.size(), 1u);
  EXPECT_THAT(left_out[0], HasSubstr("GPU 1 (GPU-1) is in MIG mode: not advertised"));
  absl::StatusOr<Inventory> inv = MakeInventory(sharable, MemoryUnit::kGiB);
  ASSERT_TRUE(inv.ok());
  EXPECT_EQ(inv->GpuOfNvmlIndex(0), 0);
  EXPECT_EQ(inv->GpuOfNvmlIndex(1), std::nullopt);
  EXPECT_EQ(inv->GpuOfNvmlIndex(2), 1);
  EXPECT_EQ(inv->gpus()[1].uuid, "GPU-2");
}

TEST(InventoryTest, SameGpusComparesWhatWouldBeAdvertised) {
  Inventory inv = MakeInv({40, 40});
  std::vector<GpuInfo> now = Gpus({40, 40});
  EXPECT_TRUE(SameGpus(inv, now));
  now[1].mig_enabled = true;  // MIG turned on while NVML was away.
  EXPECT_FALSE(SameGpus(inv, now));
  now = Gpus({40, 40, 40});
  EXPECT_FALSE(SameGpus(inv, now));
  now = Gpus({40, 40});
  now[0].uuid = "GPU-new";
  EXPECT_FALSE(SameGpus(inv, now));
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

TEST(ParseNodePodsTest, AnUnreadablePodIsLeftOutAndNamed) {
  nlohmann::json bad = PodJson("bad", {{"c", 1}}, {});
  bad["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "1.5";
  nlohmann::json huge = PodJson("huge", {{"main", 1}}, {});
  huge["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "5G";
  nlohmann::json good = PodJson("good", {{"c", 3}}, Bound("0"));
  nlohmann::json list = {{"items", {bad, huge, good}}};
  std::vector<std::string> skipped;
  absl::StatusOr<std::vector<NodePod>> parsed = ParseNodePods(list.dump(), &skipped);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 1u);
  EXPECT_EQ((*parsed)[0].name, "good");
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_THAT(skipped[0], HasSubstr("pod default/bad container c"));
  EXPECT_THAT(skipped[0], HasSubstr("aliyun.com/gpu-mem"));
  EXPECT_THAT(skipped[1], HasSubstr("pod default/huge container main"));
  EXPECT_TRUE(ParseNodePods(list.dump()).ok());  // Without a list of the skipped.
  EXPECT_FALSE(ParseNodePods("{").ok());
  EXPECT_FALSE(ParseNodePods(R"({"items":3})").ok());
  EXPECT_TRUE(ParseNodePods(R"({"items":null})").ok());
}

std::vector<std::string> MemIds(int gpu, int first, int count) {
  std::vector<std::string> ids;
  for (int k = first; k < first + count; ++k) {
    ids.push_back("GPU-" + std::to_string(gpu) + "-mem-" + std::to_string(k));
  }
  return ids;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(DevicesOfTest, IdsNameTheirGpusAndUnits) {
  Inventory inv = MakeInv({16, 16, 16});
  absl::StatusOr<DeviceSet> set =
      DevicesOf(Resource::kGpuMem, Concat(MemIds(2, 0, 3), MemIds(0, 5, 1)), inv);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_THAT(set->gpus, ElementsAre(0, 2));
  EXPECT_THAT(set->units, ElementsAre(1, 3));
  absl::StatusOr<DeviceSet> whole = DevicesOf(Resource::kWholeGpu, {"GPU-1"}, inv);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_THAT(whole->units, ElementsAre(16));
}

TEST(DevicesOfTest, RefusesIdsThatAreNotThisNodesOrRepeated) {
  Inventory inv = MakeInv({16});
  EXPECT_THAT(DevicesOf(Resource::kGpuMem, {"GPU-0-mem-1", "GPU-0-mem-1"}, inv).status().message(),
              HasSubstr("\"GPU-0-mem-1\" is named twice"));
  EXPECT_THAT(DevicesOf(Resource::kGpuMem, {"GPU-0-mem-16"}, inv).status().message(),
              HasSubstr("\"GPU-0-mem-16\" is not one of this node's aliyun.com/gpu-mem"));
  EXPECT_THAT(DevicesOf(Resource::kGpuMem, {"GPU-0"}, inv).status().message(),
              HasSubstr("\"GPU-0\" is not one of"));
  EXPECT_THAT(DevicesOf(Resource::kWholeGpu, {"GPU-0-mem-0"}, inv).status().message(),
              HasSubstr("nvidia.com/gpu devices"));
  EXPECT_EQ(DevicesOf(Resource::kGpuMem, {}, inv).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// Finding: a pod with forged annotations naming GPU 0 got GPU 0 although
// the kubelet's ids were units of GPU 1 (80 units on a 40-unit GPU).
TEST(LedgerAllocateTest, ForgedAnnotationsGetOnlyTheKubeletsDevices) {
  Inventory inv = MakeInv({40, 40});
  std::vector<NodePod> pods = Parse({PodJson("forged", {{"main", 40}}, Bound("0", 1))});
  Ledger ledger;
  absl::StatusOr<Grant> g = ledger.Allocate(Resource::kGpuMem, MemIds(1, 0, 40), pods, inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->gpus, ElementsAre(1));
  EXPECT_THAT(g->units, ElementsAre(40));
  EXPECT_EQ(g->env["NVIDIA_VISIBLE_DEVICES"], "GPU-1");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_IDX"], "1");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "40");
  EXPECT_TRUE(g->identified);
  EXPECT_EQ(g->pod, "default/forged");
  EXPECT_TRUE(g->disagrees);  // So its annotations are corrected to GPU 1.
}

// Two pods of one size, bound in one order, admitted in the other: each is
// told by the GPU its ids name, not by the order.
TEST(LedgerAllocateTest, ThePodWhosePlanTheIdsAreIsTold) {
  Inventory inv = MakeInv({16, 16});
  std::vector<NodePod> pods = Parse({PodJson("first", {{"c", 3}}, Bound("0", 100)),
                                     PodJson("second", {{"c", 3}}, Bound("1", 200))});
  Ledger ledger;
  absl::StatusOr<Grant> g = ledger.Allocate(Resource::kGpuMem, MemIds(1, 4, 3), pods, inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->pod, "default/second");
  EXPECT_FALSE(g->disagrees);
  ledger.Record(*g, 1);
  absl::StatusOr<Grant> f = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 3), pods, inv);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->pod, "default/first");
  EXPECT_TRUE(f->completes_pod);
}

TEST(LedgerAllocateTest, MultiCardAndTwoContainersFollowTheirIds) {
  Inventory inv = MakeInv({15, 15, 15, 15});
  std::vector<NodePod> pods = Parse({PodJson("mc", {{"x", 2}, {"y", 6}}, Bound("0-1-2-3"))});
  Ledger ledger;
  // x: 2 units, on GPUs 0 and 1 as planned.
  absl::StatusOr<Grant> x =
      ledger.Allocate(Resource::kGpuMem, Concat(MemIds(0, 0, 1), MemIds(1, 0, 1)), pods, inv);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->container, "x");
  EXPECT_FALSE(x->disagrees);
  EXPECT_EQ(x->env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
  ledger.Record(*x, 1);
  // y: 6 units as the kubelet chose them, 3 + 3 on GPUs 2 and 3.
  absl::StatusOr<Grant> y =
      ledger.Allocate(Resource::kGpuMem, Concat(MemIds(3, 0, 3), MemIds(2, 0, 3)), pods, inv);
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_EQ(y->container, "y");
  EXPECT_TRUE(y->disagrees);  // The plan was 1 + 1 + 2 + 2.
  EXPECT_EQ(y->env["NVIDIA_VISIBLE_DEVICES"], "GPU-2,GPU-3");
  EXPECT_EQ(y->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "3");
  EXPECT_EQ(y->env["ALIYUN_COM_GPU_MEM_POD"], "8");
  EXPECT_TRUE(y->completes_pod);
}

TEST(LedgerAllocateTest, InitContainersReuseTheirUnits) {
  Inventory inv = MakeInv({16});
  std::vector<NodePod> pods =
      Parse({PodJson("i", {{"main", 4}}, Bound("0"), /*init=*/{{"setup", 4}})});
  Ledger ledger;
  absl::StatusOr<Grant> setup = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 4), pods, inv);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->container, "setup");
  ledger.Record(*setup, 1);
  // The kubelet hands the init container's devices to the next container.
  absl::StatusOr<Grant> main = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 4), pods, inv);
  ASSERT_TRUE(main.ok()) << main.status();
  EXPECT_EQ(main->container, "main");
  EXPECT_TRUE(main->completes_pod);
}

TEST(LedgerAllocateTest, APodNotToldStillGetsExactlyItsIds) {
  Inventory inv = MakeInv({16, 16});
  nlohmann::json plain = PodJson("plain", {{"c", 5}}, {});  // No gpushare annotations.
  absl::StatusOr<Grant> g =
      Ledger().Allocate(Resource::kGpuMem, Concat(MemIds(0, 0, 2), MemIds(1, 0, 3)),
                        Parse({plain}), inv);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->identified);
  EXPECT_EQ(g->env["NVIDIA_VISIBLE_DEVICES"], "GPU-0,GPU-1");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_CONTAINER"], "2,3");
  EXPECT_EQ(g->env["ALIYUN_COM_GPU_MEM_POD"], "5");
}

// One GPU, two resources: the kubelet counts them apart; the ledger does not
// let one pod have a GPU whole while another uses units of it.
TEST(LedgerAllocateTest, AGpuHeldThroughOneResourceIsRefusedThroughTheOther) {
  Inventory inv = MakeInv({80, 80});
  nlohmann::json ex = PodJson("ex", {{"a", 0}}, Bound("0"));
  ex["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1";
  nlohmann::json shared = PodJson("shared", {{"c", 10}}, Bound("0"));
  std::vector<NodePod> pods = Parse({ex, shared});
  Ledger ledger;
  absl::StatusOr<Grant> whole = ledger.Allocate(Resource::kWholeGpu, {"GPU-0"}, pods, inv);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->pod, "default/ex");
  ledger.Record(*whole, 1);
  absl::StatusOr<Grant> units = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 10), pods, inv);
  EXPECT_EQ(units.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(units.status().message(),
              HasSubstr("GPU 0 (GPU-0) is in use through nvidia.com/gpu by pod default/ex"));
  // Units of the other GPU are fine.
  EXPECT_TRUE(ledger.Allocate(Resource::kGpuMem, MemIds(1, 0, 10), pods, inv).ok());
  // Once "ex" is gone, GPU 0 is free again.
  ledger.Prune(Parse({shared}));
  EXPECT_TRUE(ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 10), pods, inv).ok());

  // And the other way round.
  Ledger other;
  absl::StatusOr<Grant> unit = other.Allocate(Resource::kGpuMem, MemIds(1, 7, 1), pods, inv);
  ASSERT_TRUE(unit.ok());
  other.Record(*unit, 1);
  EXPECT_THAT(other.Allocate(Resource::kWholeGpu, {"GPU-1"}, pods, inv).status().message(),
              HasSubstr("GPU 1 (GPU-1) is in use through aliyun.com/gpu-mem"));
}

TEST(LedgerAllocateTest, TheKubeletsRecordsSayWhichDevicesAreInUse) {
  Inventory inv = MakeInv({80});
  std::vector<NodePod> pods = Parse({PodJson("s", {{"c", 4}}, Bound("0"))});
  Ledger ledger;
  // After a restart: the kubelet lists GPU 0 whole for a pod.
  std::vector<HeldDevice> in_use = {{"GPU-0", Resource::kWholeGpu, 0, "uid-x", "default/x"}};
  ledger.Reconcile({}, 1000, 100, &in_use);
  EXPECT_EQ(ledger.Held().size(), 1u);
  EXPECT_FALSE(ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 4), pods, inv).ok());
  // Later it lists nothing: free again.
  std::vector<HeldDevice> none;
  ledger.Reconcile({}, 2000, 100, &none);
  EXPECT_TRUE(ledger.Held().empty());
  // A grant just made stays until the kubelet had time to list it.
  absl::StatusOr<Grant> g = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 4), pods, inv);
  ASSERT_TRUE(g.ok());
  ledger.Record(*g, 3000);
  ledger.Reconcile({}, 3050, 100, &none);
  EXPECT_EQ(ledger.Held().size(), 4u);
  ledger.Reconcile({}, 3200, 100, &none);
  EXPECT_TRUE(ledger.Held().empty());
}

// Finding: a call holding an older list of pods pruned what another call
// had just served for a pod too new for that list.
TEST(LedgerTest, PruneKeepsWhatWasServedAfterTheListWasRead) {
  Inventory inv = MakeInv({16});
  std::vector<NodePod> old_list = Parse({PodJson("a", {{"c", 3}}, Bound("0"))});
  std::vector<NodePod> new_list = Parse({PodJson("a", {{"c", 3}}, Bound("0")),
                                         PodJson("b", {{"c", 2}}, Bound("0"))});
  Ledger ledger;
  absl::StatusOr<Grant> b = ledger.Allocate(Resource::kGpuMem, MemIds(0, 0, 2), new_list, inv);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->pod, "default/b");
  ledger.Record(*b, /*now_ns=*/2000);
  ledger.Prune(old_list, /*listed_at_ns=*/1000);  // Read before "b" was served.
  EXPECT_TRUE(ledger.Served("uid-b", "c", Resource::kGpuMem));
  EXPECT_EQ(ledger.Held().size(), 2u);
  ledger.Prune(old_list, /*listed_at_ns=*/3000);  // Read after: "b" is gone.
  EXPECT_FALSE(ledger.Served("uid-b", "c", Resource::kGpuMem));
  EXPECT_TRUE(ledger.Held().empty());
}

}  // namespace
}  // namespace gpushare::deviceplugin
