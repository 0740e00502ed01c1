// Kubernetes in and out: quantities, v1.Pod / v1.Node parsing, node affinity,
// state rebuilt from kubectl output, and the extender protocol (S1 and S3 as
// kube-scheduler conversations, preemption, malformed bodies).

#include "gpushare/kubernetes.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::k8s {
namespace {

using ::gpushare::testing::StatusIs;
using ::nlohmann::json;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::UnorderedElementsAre;

// ---- Builders: objects shaped like kube-scheduler and kubectl print them ----

json GpuNode(const std::string& name, const std::string& ip, int gpus, int per_gpu,
             std::map<std::string, std::string> labels = {{"gpushare", "true"}}) {
  return json{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", name}, {"labels", labels}}},
              {"spec", json::object()},
              {"status",
               {{"capacity",
                 {{"aliyun.com/gpu-mem", std::to_string(gpus * per_gpu)},
                  {"aliyun.com/gpu-count", std::to_string(gpus)},
                  {"cpu", "32"},
                  {"memory", "128Gi"}}},
                {"addresses",
                 json::array({{{"type", "Hostname"}, {"address", name}},
                              {{"type", "InternalIP"}, {"address", ip}}})}}}};
}

json GpuPod(const std::string& name, int units, int count = 0,
            const std::string& uid = "") {
  json labels = json::object();
  if (count > 0) labels["aliyun.com/gpu-count"] = std::to_string(count);
  return json{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", name},
        {"namespace", "default"},
        {"uid", uid.empty() ? "uid-" + name : uid},
        {"labels", labels}}},
      {"spec",
       {{"containers",
         json::array({{{"name", "main"},
                       {"image", "cheyang/gpu-player:v2"},
                       {"resources",
                        {{"limits", {{"aliyun.com/gpu-mem", std::to_string(units)}}}}}}})}}},
      {"status", {{"phase", "Pending"}}}};
}

std::string Args(const json& pod, const std::vector<std::string>& names) {
  return json{{"Pod", pod}, {"Nodes", nullptr}, {"NodeNames", names}}.dump();
}

std::string Binding(const std::string& name, const std::string& node) {
  return json{{"PodName", name}, {"PodNamespace", "default"}, {"PodUID", "uid-" + name},
              {"Node", node}}
      .dump();
}

std::unique_ptr<Scheduler> MakeScheduler(const std::vector<json>& nodes,
                                         const std::vector<json>& pods = {}) {
  json node_list{{"kind", "NodeList"}, {"items", nodes}};
  json pod_list{{"kind", "PodList"}, {"items", pods}};
  auto cluster = RebuildCluster(node_list.dump(), pod_list.dump());
  EXPECT_OK(cluster);
  auto s = Scheduler::Create(*std::move(cluster));
  EXPECT_OK(s);
  return *std::move(s);
}

// ---- Quantities ---------------------------------------------------------------------

TEST(QuantityTest, ParsesKubernetesSyntax) {
  EXPECT_EQ(*QuantityMilli("500m"), 500);
  EXPECT_EQ(*QuantityMilli("2"), 2000);
  EXPECT_EQ(*QuantityMilli("1.5"), 1500);
  EXPECT_EQ(*QuantityMilli(".5"), 500);
  EXPECT_EQ(*QuantityMilli("1e3"), 1'000'000);
  EXPECT_EQ(*QuantityMilli("100u"), 1);  // Rounded up.
  EXPECT_EQ(*QuantityMiB("8Gi"), 8192);
  EXPECT_EQ(*QuantityMiB("512Mi"), 512);
  EXPECT_EQ(*QuantityMiB("1e9"), 954);
  EXPECT_EQ(*QuantityMiB("1G"), 954);
  EXPECT_EQ(*QuantityMiB("1"), 1);
  EXPECT_EQ(*QuantityMiB("0"), 0);
  EXPECT_EQ(*QuantityInteger("2"), 2);
  EXPECT_EQ(*QuantityInteger("+14"), 14);
  EXPECT_EQ(*QuantityInteger("1e3"), 1000);
  EXPECT_EQ(*QuantityInteger("1k"), 1000);
  EXPECT_EQ(*QuantityInteger("2000m"), 2);
  EXPECT_EQ(*QuantityInteger("1Ki"), 1024);
}

TEST(QuantityTest, RejectsMalformedNegativeAndHugeValues) {
  for (const char* bad : {"", "-1", "abc", "1Zi", "1.2.3", "1e", "e3", "1 Gi", "."}) {
    EXPECT_THAT(QuantityMilli(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
  EXPECT_THAT(QuantityInteger("1.5"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'1.5' is invalid: not a whole"));
  EXPECT_THAT(QuantityInteger("500m"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(QuantityInteger("1e40"),
              StatusIs(absl::StatusCode::kInvalidArgument, "out of range"));
  EXPECT_THAT(QuantityMiB("1Ei"), StatusIs(absl::StatusCode::kInvalidArgument, "out of range"));
}

// ---- Objects ------------------------------------------------------------------------

TEST(PodTest, SumsContainerLimitsAndSkipsInitContainers) {
  json pod = GpuPod("train", 0, 4);
  pod["spec"]["containers"] = json::array(
      {{{"name", "a"},
        {"resources",
         {{"limits", {{"aliyun.com/gpu-mem", "2"}}},
          {"requests", {{"cpu", "500m"}, {"memory", "1Gi"}}}}}},
       {{"name", "b"},
        {"resources",
         {{"limits", {{"aliyun.com/gpu-mem", "6"}, {"cpu", "1.5"}, {"memory", "512Mi"}}}}}}});
  pod["spec"]["initContainers"] =
      json::array({{{"name", "init"}, {"resources", {{"limits", {{"aliyun.com/gpu-mem", "5"}}}}}}});
  pod["spec"]["nodeSelector"] = {{"inference", "tensorflow"}};
  ASSERT_OK_AND_ASSIGN(Pod p, ParsePod(pod.dump()));
  EXPECT_EQ(p.request.id, "default/train");
  EXPECT_EQ(p.uid, "uid-train");
  EXPECT_EQ(p.request.gpu_memory, 8);
  EXPECT_EQ(p.request.gpu_count, 4);
  EXPECT_EQ(p.request.cpu, 2000);
  EXPECT_EQ(p.request.host_memory, 1536);
  EXPECT_EQ(p.request.node_selector.at("inference"), "tensorflow");
  EXPECT_TRUE(p.uses_gpus());
}

TEST(PodTest, ReadsWholeGpusAndNodeAffinity) {
  json pod = GpuPod("serve", 0);
  pod["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", 1}};
  pod["spec"]["affinity"] = {
      {"nodeAffinity",
       {{"requiredDuringSchedulingIgnoredDuringExecution",
         {{"nodeSelectorTerms",
           json::array({{{"matchExpressions",
                          json::array({{{"key", "pool"},
                                        {"operator", "In"},
                                        {"values", {"spot", "on-demand"}}}})}}})}}}}}};
  ASSERT_OK_AND_ASSIGN(Pod p, ParsePod(pod.dump()));
  EXPECT_EQ(p.request.whole_gpus, 1);
  EXPECT_EQ(p.request.gpu_memory, 0);
  EXPECT_TRUE(MatchesNodeAffinity(p, "n1", {{"pool", "spot"}}));
  EXPECT_FALSE(MatchesNodeAffinity(p, "n1", {{"pool", "gpu"}}));
  EXPECT_FALSE(MatchesNodeAffinity(p, "n1", {}));
}

TEST(PodTest, RejectsMalformedPodsNamingTheValue) {
  json pod = GpuPod("bad", 0);
  pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "2.5";
  EXPECT_THAT(ParsePod(pod.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument, "container main"));
  json count = GpuPod("bad", 8);
  count["metadata"]["labels"]["aliyun.com/gpu-count"] = "zero";
  EXPECT_THAT(ParsePod(count.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument, "gpu-count=\"zero\""));
  json op = GpuPod("bad", 1);
  op["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {"nodeSelectorTerms",
       json::array({{{"matchExpressions", json::array({{{"key", "a"}, {"operator", "Near"}}})}}})}};
  EXPECT_THAT(ParsePod(op.dump()), StatusIs(absl::StatusCode::kInvalidArgument, "'Near'"));
  EXPECT_THAT(ParsePod("{\"metadata\":"), StatusIs(absl::StatusCode::kInvalidArgument, "JSON"));
  EXPECT_THAT(ParsePod("{\"metadata\":{}}"),
              StatusIs(absl::StatusCode::kInvalidArgument, "metadata.name"));
}

TEST(NodeTest, GpuMemCapacityTakesSharedWorkUnlessALabelOptsOut) {
  // As gpushare-scheduler-extender: the device plugin's capacity is enough.
  ASSERT_OK_AND_ASSIGN(Node plain, ParseNode(GpuNode("a", "10.0.0.1", 1, 14, {}).dump()));
  EXPECT_TRUE(TakesSharedGpuWork(plain));
  for (const char* key : {"gpushare", "cgpu"}) {
    ASSERT_OK_AND_ASSIGN(Node out,
                         ParseNode(GpuNode("b", "10.0.0.2", 1, 14, {{key, "false"}}).dump()));
    EXPECT_FALSE(TakesSharedGpuWork(out)) << key;
  }
  // Whole GPUs only (nvidia.com/gpu): the labels decide, as before.
  json whole = GpuNode("c", "10.0.0.3", 2, 1, {});
  whole["status"]["capacity"].erase("aliyun.com/gpu-mem");
  whole["status"]["capacity"].erase("aliyun.com/gpu-count");
  whole["status"]["capacity"]["nvidia.com/gpu"] = "2";
  ASSERT_OK_AND_ASSIGN(Node w, ParseNode(whole.dump()));
  EXPECT_EQ(w.gpus.size(), 2u);
  EXPECT_FALSE(TakesSharedGpuWork(w));
  whole["metadata"]["labels"]["gpushare"] = "true";
  ASSERT_OK_AND_ASSIGN(Node labelled, ParseNode(whole.dump()));
  EXPECT_TRUE(TakesSharedGpuWork(labelled));
}

TEST(NodeTest, SplitsGpuMemoryOverTheGpuCount) {
  json node = GpuNode("v100", "10.0.0.7", 4, 15, {{"gpushare", "true"},
                                                 {"nvidia.com/gpu.product", "V100"}});
  node["spec"]["unschedulable"] = true;
  ASSERT_OK_AND_ASSIGN(Node n, ParseNode(node.dump()));
  EXPECT_EQ(n.name, "v100");
  EXPECT_EQ(n.address, "10.0.0.7");
  ASSERT_EQ(n.gpus.size(), 4u);
  EXPECT_EQ(n.gpus[3].memory, 15);
  EXPECT_EQ(n.gpus[0].model, "V100");
  EXPECT_FALSE(n.schedulable);
  EXPECT_TRUE(TakesSharedGpuWork(n));
  EXPECT_EQ(n.cpu, 0);  // Host resources are left to kube-scheduler.

  json bad = GpuNode("x", "1.2.3.4", 1, 14);
  bad["status"]["capacity"]["aliyun.com/gpu-mem"] = "lots";
  EXPECT_THAT(ParseNode(bad.dump()), StatusIs(absl::StatusCode::kInvalidArgument, "'lots'"));
}

TEST(NodeTest, DevicePluginAnnotationsGiveEachGpuItsSizeAndHealth) {
  // A 10 GiB and a 20 GiB GPU: 30 units over 2 GPUs are not 15 + 15.
  json mixed = GpuNode("m", "10.0.0.11", 2, 15);
  mixed["metadata"]["annotations"] = {{"gpushare.io/gpu-memory", "10,20"},
                                      {"gpushare.io/unhealthy-gpus", "1"}};
  ASSERT_OK_AND_ASSIGN(Node n, ParseNode(mixed.dump()));
  ASSERT_EQ(n.gpus.size(), 2u);
  EXPECT_EQ(n.gpus[0].memory, 10);
  EXPECT_EQ(n.gpus[1].memory, 20);
  EXPECT_TRUE(n.gpus[0].healthy);
  EXPECT_FALSE(n.gpus[1].healthy);
  // Another sum, another count, another GPU's index: a node in transition
  // (the plugin found other GPUs than the kubelet reports yet) takes no new
  // work until they agree.
  auto all_unhealthy = [](const Node& node) {
    for (const Gpu& g : node.gpus) {
      if (g.healthy) return false;
    }
    return !node.gpus.empty();
  };
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"gpushare.io/gpu-memory", "10,21"}, {"gpushare.io/gpu-memory", "30"},
           {"gpushare.io/unhealthy-gpus", "2"}}) {
    json changed = mixed;
    changed["metadata"]["annotations"]["gpushare.io/unhealthy-gpus"] = "";
    changed["metadata"]["annotations"][key] = value;
    ASSERT_OK_AND_ASSIGN(Node t, ParseNode(changed.dump()));
    EXPECT_TRUE(all_unhealthy(t)) << key << "=" << value;
  }
  // Malformed values are errors.
  mixed["metadata"]["annotations"]["gpushare.io/gpu-memory"] = "10,x";
  EXPECT_THAT(ParseNode(mixed.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "node m: annotation gpushare.io/gpu-memory=\"10,x\" is not a list of positive "
                       "unit counts"));
  mixed["metadata"]["annotations"]["gpushare.io/gpu-memory"] = "10,20";
  mixed["metadata"]["annotations"]["gpushare.io/unhealthy-gpus"] = "one";
  EXPECT_THAT(ParseNode(mixed.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gpushare.io/unhealthy-gpus=\"one\" is not a list of GPU indices"));
  // Before the kubelet reports the devices, the annotations wait.
  json early = mixed;
  early["metadata"]["annotations"]["gpushare.io/unhealthy-gpus"] = "1";
  early["status"]["capacity"] = json::object();
  ASSERT_OK_AND_ASSIGN(Node none, ParseNode(early.dump()));
  EXPECT_TRUE(none.gpus.empty());
}

TEST(NodeTest, GpuMemOverAnExplicitZeroGpuCountIsRefused) {
  // The device plugin says there are no GPUs to share: its gpu-mem is not
  // one GPU's worth, it is a contradiction, named.
  json zero = GpuNode("z", "10.0.0.9", 1, 16);
  zero["status"]["capacity"]["aliyun.com/gpu-count"] = "0";
  EXPECT_THAT(ParseNode(zero.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "node z: capacity aliyun.com/gpu-mem is 16 units but "
                       "aliyun.com/gpu-count is 0"));
  // Without gpu-count, gpu-mem alone is one GPU, as before.
  zero["status"]["capacity"].erase("aliyun.com/gpu-count");
  ASSERT_OK_AND_ASSIGN(Node one, ParseNode(zero.dump()));
  ASSERT_EQ(one.gpus.size(), 1u);
  EXPECT_EQ(one.gpus[0].memory, 16);
  // gpu-count 0 and no gpu-mem: a node without shared GPUs.
  json none = GpuNode("n", "10.0.0.10", 1, 16);
  none["status"]["capacity"]["aliyun.com/gpu-count"] = "0";
  none["status"]["capacity"]["aliyun.com/gpu-mem"] = "0";
  ASSERT_OK_AND_ASSIGN(Node n, ParseNode(none.dump()));
  EXPECT_TRUE(n.gpus.empty());
}

// ---- Rebuild --------------------------------------------------------------------------

json BoundPod(const std::string& name, int units, const std::string& node, const std::string& idx,
              const std::string& phase = "Running") {
  json pod = GpuPod(name, units);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = phase;
  if (!idx.empty()) {
    pod["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", idx},
                                      {"ALIYUN_COM_GPU_MEM_POD", std::to_string(units)},
                                      {"ALIYUN_COM_GPU_MEM_ASSIGNED", "true"}};
  }
  return pod;
}

TEST(RebuildTest, RestoresBoundPodsAndFreesCompletedOnes) {
  json nodes{{"items", {GpuNode("sd-cluster-04", "192.168.1.214", 1, 14),
                        GpuNode("sd-cluster-05", "192.168.1.215", 1, 14)}}};
  json pods{{"items",
             {BoundPod("binpack-1", 2, "sd-cluster-05", "0"),
              BoundPod("binpack-2-0", 8, "sd-cluster-05", "0"),
              BoundPod("binpack-2-1", 8, "sd-cluster-04", "0"),
              BoundPod("done", 4, "sd-cluster-04", "0", "Succeeded"),
              BoundPod("legacy", 1, "sd-cluster-04", ""),
              BoundPod("lost", 1, "gone-node", "0"),
              GpuPod("pending", 3)}}};
  RebuildReport report;
  ASSERT_OK_AND_ASSIGN(Cluster c, RebuildCluster(nodes.dump(), pods.dump(), {}, &report));
  EXPECT_EQ(report.nodes, 2);
  EXPECT_EQ(report.placed, 3);
  EXPECT_EQ(report.skipped, 2);
  EXPECT_THAT(report.warnings, ::testing::Contains(HasSubstr("default/legacy")));
  EXPECT_EQ(c.FindNode("sd-cluster-04")->gpu_memory_used(), 8);
  EXPECT_EQ(c.FindNode("sd-cluster-05")->gpu_memory_used(), 10);
  EXPECT_EQ(c.FindNode("sd-cluster-05")->address, "192.168.1.215");
  EXPECT_OK(c.CheckInvariants());
}

TEST(RebuildTest, ReadsTheAllocationAnnotationAndSkipsConflicts) {
  json nodes = json::array({GpuNode("v", "10.0.0.1", 4, 15)});
  json multi = GpuPod("multi", 8, 4);
  multi["spec"]["nodeName"] = "v";
  multi["metadata"]["annotations"] = {
      {"scheduler.framework.gpushare.allocation", R"({"0":{"0":2,"1":2},"1":{"2":2,"3":2}})"}};
  json full = BoundPod("full", 13, "v", "2");  // Fills GPU 2 with multi.
  json clash = BoundPod("clash", 14, "v", "2");  // GPU 2 is full by then.
  RebuildReport report;
  ASSERT_OK_AND_ASSIGN(Cluster c,
                       RebuildCluster(nodes.dump(), json::array({multi, full, clash}).dump(), {},
                                      &report));
  ASSERT_OK_AND_ASSIGN(Placement p, c.GetPlacement("default/multi"));
  EXPECT_THAT(p.gpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(p.memory_per_gpu, 2);
  EXPECT_EQ(report.placed, 2);
  EXPECT_EQ(report.skipped, 1);
  EXPECT_THAT(RebuildCluster("[", "[]"), StatusIs(absl::StatusCode::kInvalidArgument));
  // Units beyond kMaxQuantity are malformed, not summed (two such terms on
  // one GPU would overflow).
  json huge = GpuPod("huge", 8, 2);
  huge["spec"]["nodeName"] = "v";
  huge["metadata"]["annotations"] = {
      {"scheduler.framework.gpushare.allocation",
       R"({"0":{"0":9223372036854775000},"1":{"0":9223372036854775000,"1":4}})"}};
  RebuildReport huge_report;
  ASSERT_OK_AND_ASSIGN(Cluster h, RebuildCluster(nodes.dump(), json::array({huge}).dump(), {},
                                                 &huge_report));
  EXPECT_EQ(huge_report.skipped, 1);
  EXPECT_THAT(huge_report.warnings, ::testing::Contains(HasSubstr("malformed")));
  EXPECT_EQ(h.FindPlacement("default/huge"), nullptr);
  EXPECT_THAT(RebuildCluster("{\"items\": 3}", "[]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "items"));
}

// ---- Extender protocol ---------------------------------------------------------------

// kube-scheduler: filter, prioritize, pick the best score (first on ties), bind.
std::string ScheduleLikeKubeScheduler(Extender& ext, const json& pod,
                                      const std::vector<std::string>& names) {
  absl::StatusOr<std::string> filtered = ext.Filter(Args(pod, names));
  EXPECT_OK(filtered);
  json f = json::parse(*filtered);
  EXPECT_EQ(f["Error"], "");
  std::vector<std::string> ok = f["NodeNames"].get<std::vector<std::string>>();
  if (ok.empty()) return "";
  json scores = json::parse(*ext.Prioritize(Args(pod, ok)));
  std::string best;
  int64_t best_score = -1;
  for (const json& s : scores) {
    if (s["Score"].get<int64_t>() > best_score) {
      best_score = s["Score"].get<int64_t>();
      best = s["Host"].get<std::string>();
    }
  }
  json bound = json::parse(*ext.Bind(Binding(pod["metadata"]["name"], best)));
  EXPECT_EQ(bound["Error"], "") << bound.dump();
  return best;
}

TEST(ExtenderTest, ScenarioS1AsAKubeSchedulerConversation) {
  auto scheduler = MakeScheduler({GpuNode("sd-cluster-04", "192.168.1.214", 1, 14),
                                  GpuNode("sd-cluster-05", "192.168.1.215", 1, 14)});
  Extender ext(scheduler.get());
  const std::vector<std::string> names = {"sd-cluster-04", "sd-cluster-05"};
  const std::string a = ScheduleLikeKubeScheduler(ext, GpuPod("binpack-1", 2), names);
  ASSERT_FALSE(a.empty());
  const std::string b = a == "sd-cluster-04" ? "sd-cluster-05" : "sd-cluster-04";
  EXPECT_EQ(ScheduleLikeKubeScheduler(ext, GpuPod("binpack-2-0", 8), names), a);
  EXPECT_EQ(ScheduleLikeKubeScheduler(ext, GpuPod("binpack-2-1", 8), names), b);
  EXPECT_EQ(ScheduleLikeKubeScheduler(ext, GpuPod("binpack-3", 2), names), a);
  // 8 units are free, but no single GPU has 7.
  json f = json::parse(*ext.Filter(Args(GpuPod("big", 7), names)));
  EXPECT_THAT(f["NodeNames"], IsEmpty());
  EXPECT_THAT(f["FailedNodes"][b].get<std::string>(), HasSubstr("largest free 6"));
  EXPECT_EQ(ScheduleLikeKubeScheduler(ext, GpuPod("binpack-4", 5), names), b);
  json inspect = json::parse(*ext.Inspect());
  std::map<std::string, int64_t> used;
  for (const json& n : inspect["nodes"]) used[n["name"]] = n["usedGPU"];
  EXPECT_EQ(used[a], 12);
  EXPECT_EQ(used[b], 13);
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(ExtenderTest, ScenarioS3SplitsOverFourGpusAndAnnotatesThePod) {
  auto scheduler = MakeScheduler({GpuNode("v100-node", "10.0.0.9", 4, 15)});
  Extender ext(scheduler.get());
  json pod = GpuPod("sts-0", 8, 4);
  json f = json::parse(*ext.Filter(Args(pod, {"v100-node"})));
  EXPECT_THAT(f["NodeNames"], ElementsAre("v100-node"));
  json bound = json::parse(*ext.Bind(Binding("sts-0", "v100-node")));
  ASSERT_EQ(bound["Error"], "");
  EXPECT_THAT(bound["Placement"]["gpus"], ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(bound["Placement"]["memoryPerGpu"], 2);
  EXPECT_EQ(bound["Annotations"]["ALIYUN_COM_GPU_MEM_IDX"], "0-1-2-3");
  EXPECT_EQ(bound["Annotations"]["ALIYUN_COM_GPU_MEM_POD"], "8");
  EXPECT_EQ(bound["Annotations"]["ALIYUN_COM_GPU_MEM_DEV"], "15");
  EXPECT_EQ(bound["Annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"], "false");
  ASSERT_OK_AND_ASSIGN(BindResult again, ext.BindPod(BindTarget{"default", "sts-0", "uid-sts-0",
                                                                "v100-node"}));
  EXPECT_THAT(json::parse(again.patch)["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"],
              "0-1-2-3");
  EXPECT_TRUE(scheduler->IsReserved("default/sts-0"));
  EXPECT_EQ(json::parse(*ext.Confirm(R"({"PodUID":"uid-sts-0"})"))["Error"], "");
  EXPECT_FALSE(scheduler->IsReserved("default/sts-0"));
  // 8 over 3 GPUs is rejected for every node, with the reason.
  json odd = json::parse(*ext.Filter(Args(GpuPod("odd", 8, 3), {"v100-node"})));
  EXPECT_THAT(odd["FailedNodes"]["v100-node"].get<std::string>(), HasSubstr("divisible"));
}

TEST(ExtenderTest, FilterWithNodeObjectsLearnsNodesAndHonoursAffinity) {
  auto scheduler = MakeScheduler({});
  Extender ext(scheduler.get());
  json pod = GpuPod("p", 2);
  pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
      {"nodeSelectorTerms",
       json::array({{{"matchExpressions",
                      json::array({{{"key", "pool"}, {"operator", "In"}, {"values", {"a"}}}})}}})}};
  json args{{"Pod", pod},
            {"Nodes",
             {{"items",
               {GpuNode("n1", "10.0.0.1", 1, 14, {{"gpushare", "true"}, {"pool", "a"}}),
                GpuNode("n2", "10.0.0.2", 1, 14, {{"gpushare", "true"}, {"pool", "b"}}),
                GpuNode("n3", "10.0.0.3", 1, 14, {{"gpushare", "false"}, {"pool", "a"}})}}}},
            {"NodeNames", nullptr}};
  json f = json::parse(*ext.Filter(args.dump()));
  ASSERT_EQ(f["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(f["Nodes"]["items"][0]["metadata"]["name"], "n1");
  EXPECT_THAT(f["FailedNodes"]["n2"].get<std::string>(), HasSubstr("affinity"));
  EXPECT_THAT(f["FailedNodes"]["n3"].get<std::string>(), HasSubstr("shared GPU work"));
  int nodes = 0;
  scheduler->Read([&](const Cluster& c) { nodes = c.num_nodes(); });
  EXPECT_EQ(nodes, 3);
  // When the affinity rules out every node, none passes (not "all").
  json nowhere = pod;
  nowhere["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
         ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = {"zzz"};
  json none = json::parse(*ext.Filter(Args(nowhere, {"n1", "n2"})));
  EXPECT_THAT(none["NodeNames"], IsEmpty());
  EXPECT_EQ(none["FailedNodes"].size(), 2u);
  json scores = json::parse(*ext.Prioritize(Args(nowhere, {"n1"})));
  EXPECT_EQ(scores[0]["Score"], 0);
}

// The DGX-1 hybrid cube-mesh (NV1/NV2 inside each quad of GPUs, NV2 or SYS
// between the quads) as the gpushare.io/gpu-topology annotation carries it.
json Dgx1Node(const std::string& name) {
  json node = GpuNode(name, "10.0.1.1", 8, 32);
  node["metadata"]["annotations"][Topology::kKubernetesAnnotation] =
      R"({"gpus":8,"links":["NV1 NV1 NV2 NV2 SYS SYS SYS","NV2 NV1 SYS NV2 SYS SYS",)"
      R"("NV2 SYS SYS NV1 SYS","SYS SYS SYS NV1","NV1 NV1 NV2","NV2 NV1","NV2"]})";
  return node;
}

TEST(ExtenderTest, ReadsTheTopologyAnnotationOfNodesAndPods) {
  ASSERT_OK_AND_ASSIGN(Node n, ParseNode(Dgx1Node("dgx").dump()));
  ASSERT_NE(n.topology, nullptr);
  EXPECT_EQ(LinkName(n.topology->link(0, 3)), "NV2");
  ASSERT_OK_AND_ASSIGN(Node blind, ParseNode(GpuNode("plain", "10.0.0.1", 2, 16).dump()));
  EXPECT_EQ(blind.topology, nullptr);
  json bad = Dgx1Node("bad");
  // Another number of GPUs: a node in transition, blind and taking no new work.
  bad["metadata"]["annotations"][Topology::kKubernetesAnnotation] = R"({"gpus":2,"links":["NV1"]})";
  ASSERT_OK_AND_ASSIGN(Node transition, ParseNode(bad.dump()));
  EXPECT_EQ(transition.topology, nullptr);
  EXPECT_FALSE(transition.gpus[0].healthy);
  bad["metadata"]["annotations"][Topology::kKubernetesAnnotation] = R"({"gpus":2,"links":["NVZ"]})";
  EXPECT_THAT(ParseNode(bad.dump()), StatusIs(absl::StatusCode::kInvalidArgument, "'NVZ'"));

  auto scheduler = MakeScheduler({Dgx1Node("dgx")});
  Extender ext(scheduler.get());
  // 4 x 8 units: a fully NVLinked quad.
  json pod = GpuPod("quad", 32, 4);
  ASSERT_OK(ext.Filter(Args(pod, {"dgx"})).status());
  json bound = json::parse(*ext.Bind(Binding("quad", "dgx")));
  EXPECT_EQ(bound["Error"], "");
  scheduler->Read([&](const Cluster& c) {
    const Placement* p = c.FindPlacement("default/quad");
    ASSERT_NE(p, nullptr);
    EXPECT_THAT(p->gpus, ElementsAre(0, 1, 2, 3));
    EXPECT_EQ(p->weakest_link, "NV1");
  });
  // Every pair over NV2 for 3 GPUs: no such triple; the reason names the best.
  json strict = GpuPod("strict", 24, 3);
  strict["metadata"]["annotations"][Topology::kKubernetesAnnotation] = "NV2";
  ASSERT_OK_AND_ASSIGN(Pod parsed, ParsePod(strict.dump()));
  EXPECT_EQ(parsed.request.topology.mode, TopologyNeed::Mode::kRequire);
  json f = json::parse(*ext.Filter(Args(strict, {"dgx"})));
  EXPECT_THAT(f["FailedNodes"]["dgx"].get<std::string>(), HasSubstr("has weakest link NV1"));
  strict["metadata"]["annotations"][Topology::kKubernetesAnnotation] = "fast";
  EXPECT_THAT(ParsePod(strict.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument, "gpushare.io/gpu-topology=\"fast\""));
}

TEST(ExtenderTest, MalformedBodiesAreInvalidArgumentAndChangeNothing) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  const std::string before = *ext.Inspect();
  for (const char* body :
       {"", "{", "[]", "{\"Pod\": 3, \"NodeNames\": []}", "{\"NodeNames\": [\"n1\"]}",
        "{\"Pod\": {\"metadata\": {\"name\": \"x\"}}, \"NodeNames\": [1]}",
        "{\"Pod\": {\"metadata\": {\"name\": \"x\"}}}"}) {
    EXPECT_THAT(ext.Filter(body), StatusIs(absl::StatusCode::kInvalidArgument)) << body;
    EXPECT_THAT(ext.Prioritize(body), StatusIs(absl::StatusCode::kInvalidArgument)) << body;
  }
  EXPECT_THAT(ext.Bind("{\"PodName\": \"x\"}"),
              StatusIs(absl::StatusCode::kInvalidArgument, "Node"));
  EXPECT_THAT(ext.Bind("{\"PodName\": 7, \"Node\": \"n1\"}"),
              StatusIs(absl::StatusCode::kInvalidArgument, "PodName"));
  EXPECT_THAT(ext.Preempt("{\"Pod\": {\"metadata\": {\"name\": \"x\"}}, "
                          "\"NodeNameToMetaVictims\": {\"n1\": {\"Pods\": [{}]}}}"),
              StatusIs(absl::StatusCode::kInvalidArgument, "UID"));
  EXPECT_THAT(ext.Confirm("{}"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ext.Inspect("ghost"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(*ext.Inspect(), before);
  const std::string err = ErrorJson(absl::InvalidArgumentError("bad"));
  EXPECT_EQ(json::parse(err)["Error"], "bad");
}

TEST(ExtenderTest, BindOfAnUnseenPodOrAFullNodeReportsAnError) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  json r = json::parse(*ext.Bind(Binding("never-filtered", "n1")));
  EXPECT_THAT(r["Error"].get<std::string>(), HasSubstr("not seen by filter"));
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 10), {"n1"})).status());
  ASSERT_OK(ext.Filter(Args(GpuPod("b", 10), {"n1"})).status());
  EXPECT_EQ(json::parse(*ext.Bind(Binding("a", "n1")))["Error"], "");
  // b passed filter before a was bound; its bind must not oversubscribe.
  EXPECT_THAT(json::parse(*ext.Bind(Binding("b", "n1")))["Error"].get<std::string>(),
              HasSubstr("largest free 4"));
  EXPECT_EQ(json::parse(*ext.Forget(R"({"PodName":"a","PodNamespace":"default"})"))["Error"], "");
  EXPECT_EQ(json::parse(*ext.Bind(Binding("b", "n1")))["Error"], "");
  EXPECT_EQ(json::parse(*ext.Release(R"({"PodName":"b"})"))["Error"], "");
  EXPECT_THAT(json::parse(*ext.Release(R"({"PodName":"b"})"))["Error"].get<std::string>(),
              HasSubstr("already released"));
}

TEST(ExtenderTest, PreemptKeepsTheFewestVictimsThatLetThePodFit) {
  json nodes = json::array({GpuNode("n1", "10.0.0.1", 1, 14), GpuNode("n2", "10.0.0.2", 1, 14)});
  std::vector<json> pods = {BoundPod("a", 4, "n1", "0"), BoundPod("b", 6, "n1", "0"),
                            BoundPod("c", 2, "n1", "0"), BoundPod("d", 3, "n2", "0")};
  auto scheduler = MakeScheduler({nodes[0], nodes[1]}, pods);
  Extender ext(scheduler.get());
  ASSERT_OK(ext.RememberPods(json{{"items", pods}}.dump()));
  auto meta = [](std::vector<std::string> uids) {
    json list = json::array();
    for (const auto& u : uids) list.push_back(json{{"UID", u}});
    return json{{"Pods", list}, {"NumPDBViolations", 0}};
  };
  json args{{"Pod", GpuPod("urgent", 8)},
            {"NodeNameToMetaVictims",
             {{"n1", meta({"uid-a", "uid-b", "uid-c"})},
              {"n2", meta({"uid-d", "uid-not-ours"})}}}};
  ASSERT_OK_AND_ASSIGN(std::string reply, ext.Preempt(args.dump()));
  json r = json::parse(reply)["NodeNameToMetaVictims"];
  std::vector<std::string> n1;
  for (const json& p : r["n1"]["Pods"]) n1.push_back(p["UID"]);
  EXPECT_THAT(n1, ElementsAre("uid-b"));
  // On n2, 11 units are free: the pod fits without evicting its GPU pod; the
  // victim unknown to gpushare is kept as kube-scheduler proposed it.
  std::vector<std::string> n2;
  for (const json& p : r["n2"]["Pods"]) n2.push_back(p["UID"]);
  EXPECT_THAT(n2, UnorderedElementsAre("uid-not-ours"));
  // Nothing was changed by the simulation.
  EXPECT_EQ(json::parse(*ext.Inspect("n1"))["nodes"][0]["usedGPU"], 12);

  json hopeless{{"Pod", GpuPod("huge", 14)}, {"NodeNameToMetaVictims", {{"n1", meta({"uid-c"})}}}};
  EXPECT_THAT(json::parse(*ext.Preempt(hopeless.dump()))["NodeNameToMetaVictims"], IsEmpty());
}

// ---- Binding through the API server, and Sync ------------------------------------------

TEST(ExtenderTest, BindingJsonIsAV1Binding) {
  json b = json::parse(BindingJson(BindTarget{"team-a", "nb-1", "uid-nb-1", "n1"}));
  EXPECT_EQ(b["kind"], "Binding");
  EXPECT_EQ(b["metadata"]["name"], "nb-1");
  EXPECT_EQ(b["metadata"]["namespace"], "team-a");
  EXPECT_EQ(b["metadata"]["uid"], "uid-nb-1");
  EXPECT_EQ(b["target"]["kind"], "Node");
  EXPECT_EQ(b["target"]["name"], "n1");
  EXPECT_FALSE(b["metadata"].contains("annotations"));
  json annotated = json::parse(BindingJson(BindTarget{"team-a", "nb-1", "uid-nb-1", "n1"},
                                           {{"ALIYUN_COM_GPU_MEM_IDX", "0"}}));
  EXPECT_EQ(annotated["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"], "0");
}

TEST(ExtenderTest, ABinderConfirmsOnSuccessAndForgetsOnFailure) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  std::vector<std::string> calls;
  ExtenderOptions options;
  options.binder = [&](const BindTarget& t, const BindResult& r) {
    calls.push_back(t.pod_name + "@" + t.node + ":" +
                    json::parse(r.patch)["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"]
                        .get<std::string>());
    if (t.pod_name == "refused") return absl::PermissionDeniedError("apiserver said 403");
    return absl::OkStatus();
  };
  Extender ext(scheduler.get(), options);
  ASSERT_OK(ext.Filter(Args(GpuPod("ok", 6), {"n1"})).status());
  EXPECT_EQ(json::parse(*ext.Bind(Binding("ok", "n1")))["Error"], "");
  EXPECT_FALSE(scheduler->IsReserved("default/ok"));  // Confirmed: no TTL.
  ASSERT_OK(ext.Filter(Args(GpuPod("refused", 8), {"n1"})).status());
  EXPECT_THAT(json::parse(*ext.Bind(Binding("refused", "n1")))["Error"].get<std::string>(),
              HasSubstr("403"));
  EXPECT_THAT(calls, ElementsAre("ok@n1:0", "refused@n1:0"));
  // The refused pod's units are free again; the bound one keeps its six.
  EXPECT_EQ(json::parse(*ext.Inspect("n1"))["nodes"][0]["usedGPU"], 6);
  EXPECT_OK(scheduler->CheckInvariants());
}

json PodList(const std::vector<json>& pods) { return json{{"kind", "PodList"}, {"items", pods}}; }
json NodeList(const std::vector<json>& nodes) {
  return json{{"kind", "NodeList"}, {"items", nodes}};
}

TEST(SyncTest, ConfirmsBoundPodsReleasesGoneOnesAndLearnsNodes) {
  const json n1 = GpuNode("n1", "10.0.0.1", 1, 14);
  auto scheduler = MakeScheduler({n1});
  Extender ext(scheduler.get());
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_OK(ext.Filter(Args(GpuPod(name, 4), {"n1"})).status());
    ASSERT_EQ(json::parse(*ext.Bind(Binding(name, "n1")))["Error"], "");
  }
  const uint64_t mark = ext.SyncMark();
  // The lists: a is bound to n1, b was deleted, c is still pending; a new
  // node n2 appeared, and n1 got cordoned.
  json a = BoundPod("a", 4, "n1", "0");
  json c = GpuPod("c", 4);
  json cordoned = n1;
  cordoned["spec"]["unschedulable"] = true;
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.Sync(NodeList({cordoned, GpuNode("n2", "10.0.0.2", 2, 16)}).dump(),
                                PodList({a, c}).dump(), mark));
  EXPECT_EQ(r.confirmed, 1);
  EXPECT_EQ(r.released, 1);
  EXPECT_EQ(r.nodes_added, 1);
  EXPECT_EQ(r.nodes_updated, 1);
  EXPECT_FALSE(scheduler->IsReserved("default/a"));
  EXPECT_TRUE(scheduler->IsReserved("default/c"));  // Binding still in flight.
  json view = json::parse(*ext.Inspect());
  ASSERT_EQ(view["nodes"].size(), 2u);
  EXPECT_EQ(view["nodes"][0]["usedGPU"], 8);
  EXPECT_EQ(view["nodes"][1]["name"], "n2");
  scheduler->Read([](const Cluster& cl) { EXPECT_FALSE(cl.FindNode("n1")->schedulable); });
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(SyncTest, ABindAfterTheMarkIsNotJudgedByOlderLists) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  const uint64_t mark = ext.SyncMark();  // Lists fetched now miss the pod below.
  ASSERT_OK(ext.Filter(Args(GpuPod("late", 5), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("late", "n1")))["Error"], "");
  ASSERT_OK(scheduler->Confirm("default/late"));
  const std::string nodes = NodeList({GpuNode("n1", "10.0.0.1", 1, 14)}).dump();
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.Sync(nodes, PodList({}).dump(), mark));
  EXPECT_EQ(r.released, 0);
  // A later list that still lacks it means the pod is gone.
  ASSERT_OK_AND_ASSIGN(r, ext.Sync(nodes, PodList({}).dump(), ext.SyncMark()));
  EXPECT_EQ(r.released, 1);
  EXPECT_EQ(json::parse(*ext.Inspect("n1"))["nodes"][0]["usedGPU"], 0);
}

TEST(SyncTest, RestoresPodsBoundElsewhereAndReplacesIdleChangedNodes) {
  const json n1 = GpuNode("n1", "10.0.0.1", 1, 14);
  auto scheduler = MakeScheduler({n1, GpuNode("n2", "10.0.0.2", 1, 14)});
  Extender ext(scheduler.get());
  // Another scheduler replica bound "other" to n1 (bind annotations present);
  // "stranger" was bound without them; n2's device plugin now reports two
  // GPUs, and n2 is idle, so it is replaced.
  const std::string pods = PodList({BoundPod("other", 9, "n1", "0"),
                                    BoundPod("stranger", 3, "n1", "")})
                               .dump();
  std::string nodes = NodeList({n1, GpuNode("n2", "10.0.0.2", 2, 14)}).dump();
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.Sync(nodes, pods, ext.SyncMark()));
  EXPECT_EQ(r.restored, 1);
  EXPECT_EQ(r.nodes_updated, 2);  // n2 replaced; n1 held by "stranger".
  EXPECT_THAT(r.warnings, ::testing::Contains(HasSubstr("default/stranger")));
  EXPECT_THAT(ext.NodeHold("n1"), Optional(HasSubstr("default/stranger: no bind annotations")));
  json view = json::parse(*ext.Inspect());
  EXPECT_EQ(view["nodes"][0]["usedGPU"], 9);
  EXPECT_EQ(view["nodes"][1]["devs"].size(), 2u);
  EXPECT_OK(scheduler->CheckInvariants());
  // n1 gets a new label while it holds "other": the change waits.
  json relabelled = n1;
  relabelled["metadata"]["labels"]["zone"] = "b";
  nodes = NodeList({relabelled, GpuNode("n2", "10.0.0.2", 2, 14)}).dump();
  ASSERT_OK_AND_ASSIGN(r, ext.Sync(nodes, pods, ext.SyncMark()));
  EXPECT_EQ(r.nodes_updated, 0);
  EXPECT_THAT(r.warnings, ::testing::Contains(HasSubstr("node n1 changed")));
  // Once "other" ends, n1 is replaced with its new labels; a node gone from
  // the list is removed.
  const std::string done = PodList({BoundPod("other", 9, "n1", "0", "Succeeded")}).dump();
  ASSERT_OK_AND_ASSIGN(r, ext.Sync(nodes, done, ext.SyncMark()));
  EXPECT_EQ(r.released, 1);
  ASSERT_OK_AND_ASSIGN(r, ext.Sync(NodeList({relabelled}).dump(), done, ext.SyncMark()));
  EXPECT_EQ(r.nodes_updated, 1);
  EXPECT_EQ(r.nodes_removed, 1);
  scheduler->Read([](const Cluster& cl) {
    ASSERT_EQ(cl.num_nodes(), 1);
    EXPECT_EQ(cl.FindNode("n1")->labels.at("zone"), "b");
  });
}

TEST(SyncTest, MalformedListsChangeNothingAndBadObjectsAreSkipped) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  const std::string before = json::parse(*ext.Inspect()).dump();
  EXPECT_THAT(ext.Sync("{", PodList({}).dump(), 0), StatusIs(absl::StatusCode::kInvalidArgument));
  json bad_pod = GpuPod("bad", 1);
  bad_pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "lots";
  EXPECT_THAT(ext.Sync(NodeList({}).dump(), "{\"items\":7}", 0),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(json::parse(*ext.Inspect()).dump(), before);
  // One unreadable object is left out with a warning, not a failed Sync.
  ASSERT_OK_AND_ASSIGN(
      SyncReport r,
      ext.Sync(NodeList({GpuNode("n1", "10.0.0.1", 1, 14)}).dump(), PodList({bad_pod}).dump(), 0));
  EXPECT_THAT(r.warnings, ElementsAre(AllOf(HasSubstr("pod default/bad skipped"), HasSubstr("lots"))));
  EXPECT_EQ(json::parse(*ext.Inspect()).dump(), before);
}

// ---- Watch events -------------------------------------------------------------------

int UsedOn(const Extender& ext, const std::string& node) {
  return json::parse(*ext.Inspect(node))["nodes"][0]["usedGPU"].get<int>();
}

TEST(WatchEventTest, GpuHealthFollowsTheDevicePluginEvenOnABusyNode) {
  const json n1 = GpuNode("n1", "10.0.0.1", 2, 16);
  auto scheduler = MakeScheduler({n1});
  Extender ext(scheduler.get());
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 4), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("a", "n1")))["Error"], "");
  int held = -1;
  scheduler->Read([&](const Cluster& c) { held = c.FindPlacement("default/a")->gpus[0]; });
  json sick = n1;
  sick["metadata"]["annotations"] = {{"gpushare.io/unhealthy-gpus", std::to_string(1 - held)}};
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyNodeEvent("MODIFIED", sick.dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  EXPECT_THAT(r.warnings, IsEmpty());  // No replacement needed: the pod stays.
  scheduler->Read([&](const Cluster& c) {
    EXPECT_FALSE(c.FindNode("n1")->gpus[1 - held].healthy);
    EXPECT_NE(c.FindPlacement("default/a"), nullptr);
  });
  // A 16-unit pod needs the whole other GPU, which is unhealthy now.
  ASSERT_OK_AND_ASSIGN(std::string reply, ext.Filter(Args(GpuPod("b", 16), {"n1"})));
  EXPECT_THAT(json::parse(reply)["NodeNames"], IsEmpty());
  // Healthy again (the annotation removed): the pod fits.
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("MODIFIED", n1.dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  ASSERT_OK_AND_ASSIGN(reply, ext.Filter(Args(GpuPod("b", 16), {"n1"})));
  EXPECT_THAT(json::parse(reply)["NodeNames"], ElementsAre("n1"));
  // Sync (the periodic full list) follows health too.
  ASSERT_OK_AND_ASSIGN(r, ext.Sync(NodeList({sick}).dump(), PodList({}).dump(), 0));
  scheduler->Read([&](const Cluster& c) { EXPECT_FALSE(c.FindNode("n1")->gpus[1 - held].healthy); });
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(WatchEventTest, ABoundPodWhoseGpusAreCorrectedIsMovedAtOnce) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 2, 16)});
  Extender ext(scheduler.get());
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 4), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("a", "n1")))["Error"], "");
  int held = -1;
  scheduler->Read([&](const Cluster& c) { held = c.FindPlacement("default/a")->gpus[0]; });
  json bound = GpuPod("a", 4);
  bound["spec"]["nodeName"] = "n1";
  bound["status"]["phase"] = "Running";
  bound["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", std::to_string(held)}};
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyPodEvent("MODIFIED", bound.dump()));  // Confirms.
  // The device plugin found the pod on the other GPU.
  bound["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] = std::to_string(1 - held);
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", bound.dump()));
  EXPECT_EQ(r.restored, 1);
  scheduler->Read([&](const Cluster& c) {
    EXPECT_THAT(c.FindPlacement("default/a")->gpus, ElementsAre(1 - held));
    EXPECT_EQ(c.FindNode("n1")->gpus[held].memory_used, 0);
  });
  // A correction that cannot fit is not followed, and says so.
  ASSERT_OK(ext.Filter(Args(GpuPod("b", 14), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("b", "n1")))["Error"], "");
  int b_gpu = -1;
  scheduler->Read([&](const Cluster& c) { b_gpu = c.FindPlacement("default/b")->gpus[0]; });
  ASSERT_EQ(b_gpu, held);
  json b = GpuPod("b", 14);
  b["spec"]["nodeName"] = "n1";
  b["metadata"]["annotations"] = {{"ALIYUN_COM_GPU_MEM_IDX", std::to_string(b_gpu)}};
  ASSERT_OK(ext.ApplyPodEvent("MODIFIED", b.dump()).status());
  b["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"] = std::to_string(1 - held);
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", b.dump()));
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("not followed")));
  scheduler->Read([&](const Cluster& c) {
    EXPECT_THAT(c.FindPlacement("default/b")->gpus, ElementsAre(b_gpu));
  });
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(WatchEventTest, NodeEventsAddReplaceCordonAndRemoveIdleNodes) {
  const json n1 = GpuNode("n1", "10.0.0.1", 1, 14);
  auto scheduler = MakeScheduler({n1});
  Extender ext(scheduler.get());
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyNodeEvent("ADDED", GpuNode("n2", "10.0.0.2", 2, 16).dump()));
  EXPECT_EQ(r.nodes_added, 1);
  json cordoned = n1;
  cordoned["spec"]["unschedulable"] = true;
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("MODIFIED", cordoned.dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  scheduler->Read([](const Cluster& c) { EXPECT_FALSE(c.FindNode("n1")->schedulable); });
  // The same object again changes nothing.
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("MODIFIED", cordoned.dump()));
  EXPECT_EQ(r.nodes_updated, 0);
  // n2 holds a pod: a relabel waits, a delete cordons it; idle, it goes.
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 4), {"n2"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("a", "n2")))["Error"], "");
  json relabelled = GpuNode("n2", "10.0.0.2", 2, 16, {{"zone", "b"}});
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("MODIFIED", relabelled.dump()));
  EXPECT_EQ(r.nodes_updated, 0);
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("node n2 changed")));
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("DELETED", relabelled.dump()));
  EXPECT_EQ(r.nodes_removed, 0);
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("cordoned")));
  ASSERT_OK(scheduler->Release("default/a"));
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("DELETED", relabelled.dump()));
  EXPECT_EQ(r.nodes_removed, 1);
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("MODIFIED", relabelled.dump()));
  EXPECT_EQ(r.nodes_added, 1);  // Back with its new labels.
  scheduler->Read([](const Cluster& c) { EXPECT_EQ(c.FindNode("n2")->labels.at("zone"), "b"); });
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(WatchEventTest, IdleChangedNodeIsReplaced) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyNodeEvent("MODIFIED", GpuNode("n1", "10.0.0.1", 2, 14).dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  EXPECT_EQ(json::parse(*ext.Inspect("n1"))["nodes"][0]["devs"].size(), 2u);
}

TEST(WatchEventTest, APodBoundToItsNodeConfirmsTheReservation) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 4), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("a", "n1")))["Error"], "");
  ASSERT_TRUE(scheduler->IsReserved("default/a"));
  // Still pending in this event (it predates the binding): nothing changes.
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyPodEvent("MODIFIED", GpuPod("a", 4).dump()));
  EXPECT_EQ(r.confirmed + r.released, 0);
  EXPECT_TRUE(scheduler->IsReserved("default/a"));
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", BoundPod("a", 4, "n1", "0").dump()));
  EXPECT_EQ(r.confirmed, 1);
  EXPECT_FALSE(scheduler->IsReserved("default/a"));
  EXPECT_EQ(UsedOn(ext, "n1"), 4);
}

TEST(WatchEventTest, DeletedCompletedOrBoundElsewherePodsReleaseTheirPlacement) {
  auto scheduler =
      MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14), GpuNode("n2", "10.0.0.2", 1, 14)});
  Extender ext(scheduler.get());
  for (const char* name : {"gone", "done", "moved"}) {
    ASSERT_OK(ext.Filter(Args(GpuPod(name, 4), {"n1"})).status());
    ASSERT_EQ(json::parse(*ext.Bind(Binding(name, "n1")))["Error"], "");
  }
  ASSERT_EQ(UsedOn(ext, "n1"), 12);
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyPodEvent("DELETED", BoundPod("gone", 4, "n1", "0").dump()));
  EXPECT_EQ(r.released, 1);
  ASSERT_OK_AND_ASSIGN(
      r, ext.ApplyPodEvent("MODIFIED", BoundPod("done", 4, "n1", "0", "Succeeded").dump()));
  EXPECT_EQ(r.released, 1);
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", BoundPod("moved", 4, "n2", "").dump()));
  EXPECT_EQ(r.released, 1);
  EXPECT_EQ(UsedOn(ext, "n1"), 0);
  // A terminating pod still holds its GPUs until it is deleted.
  ASSERT_OK(ext.Filter(Args(GpuPod("slow", 4), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("slow", "n1")))["Error"], "");
  json slow = BoundPod("slow", 4, "n1", "0");
  slow["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", slow.dump()));
  EXPECT_EQ(r.released, 0);
  EXPECT_EQ(UsedOn(ext, "n1"), 4);
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(WatchEventTest, ALateDeleteOfAnOlderPodKeepsTheNewerPodsPlacement) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  // "web" was recreated: the extender bound the new one (uid-new) before the
  // watch delivered the old one's (uid-old) last events.
  ASSERT_OK(ext.Filter(Args(GpuPod("web", 6, 0, "uid-new"), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(json{{"PodName", "web"}, {"PodUID", "uid-new"},
                                       {"Node", "n1"}}.dump()))["Error"], "");
  json old_pod = BoundPod("web", 6, "n1", "0");
  old_pod["metadata"]["uid"] = "uid-old";
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyPodEvent("MODIFIED", old_pod.dump()));
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("DELETED", old_pod.dump()));
  EXPECT_EQ(r.released, 0);
  EXPECT_EQ(UsedOn(ext, "n1"), 6);
  // The new pod's own delete does release it.
  json new_pod = BoundPod("web", 6, "n1", "0");
  new_pod["metadata"]["uid"] = "uid-new";
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("DELETED", new_pod.dump()));
  EXPECT_EQ(r.released, 1);
  EXPECT_EQ(UsedOn(ext, "n1"), 0);
}

TEST(WatchEventTest, WithoutUidsABindSinceTheLastSyncIsKept) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK(ext.Filter(Args(GpuPod("a", 5), {"n1"})).status());
  ASSERT_EQ(json::parse(*ext.Bind(Binding("a", "n1")))["Error"], "");
  json no_uid = BoundPod("a", 5, "n1", "0");
  no_uid["metadata"].erase("uid");
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyPodEvent("DELETED", no_uid.dump()));
  EXPECT_EQ(r.released, 0);
  // After a full list that has the pod, the bind is no longer recent.
  const std::string nodes = NodeList({GpuNode("n1", "10.0.0.1", 1, 14)}).dump();
  ASSERT_OK(ext.Sync(nodes, PodList({BoundPod("a", 5, "n1", "0")}).dump(), ext.SyncMark())
                .status());
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("DELETED", no_uid.dump()));
  EXPECT_EQ(r.released, 1);
}

TEST(WatchEventTest, RestoresABoundPodWithBindAnnotations) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 2, 8)});
  Extender ext(scheduler.get());
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyPodEvent("ADDED", BoundPod("other", 5, "n1", "1").dump()));
  EXPECT_EQ(r.restored, 1);
  json view = json::parse(*ext.Inspect("n1"));
  EXPECT_EQ(view["nodes"][0]["devs"][1]["usedGPU"], 5);
  // Seen again: nothing more.
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", BoundPod("other", 5, "n1", "1").dump()));
  EXPECT_EQ(r.restored, 0);
  // No room: a warning, nothing promised twice.
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("ADDED", BoundPod("clash", 5, "n1", "1").dump()));
  EXPECT_EQ(r.restored, 0);
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("default/clash")));
  // On a node gpushare does not know: a warning too.
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("ADDED", BoundPod("far", 1, "n9", "0").dump()));
  EXPECT_THAT(r.warnings, ElementsAre(HasSubstr("n9")));
  EXPECT_OK(scheduler->CheckInvariants());
}

std::vector<std::string> Fitting(Extender& ext, const json& pod,
                                 const std::vector<std::string>& nodes,
                                 json* failed = nullptr) {
  absl::StatusOr<std::string> reply = ext.Filter(Args(pod, nodes));
  EXPECT_OK(reply.status());
  if (!reply.ok()) return {};
  json j = json::parse(*reply);
  if (failed != nullptr) *failed = j["FailedNodes"];
  if (!j["NodeNames"].is_array()) return {};
  return j["NodeNames"].get<std::vector<std::string>>();
}

TEST(WatchEventTest, PodsOnACordonedNodeOrAnUnhealthyGpuStillHoldTheirGpus) {
  // Restored while the node is cordoned (a drain, a restart of the
  // scheduler meanwhile): the pods run, so their GPUs are not free when the
  // node is uncordoned.
  json cordoned = GpuNode("n1", "10.0.0.1", 2, 14);
  cordoned["spec"]["unschedulable"] = true;
  cordoned["metadata"]["annotations"] = {{"gpushare.io/unhealthy-gpus", "1"}};
  auto scheduler = MakeScheduler({cordoned}, {BoundPod("a", 10, "n1", "0")});
  Extender ext(scheduler.get());
  ASSERT_OK_AND_ASSIGN(SyncReport r, ext.ApplyPodEvent("ADDED", BoundPod("b", 12, "n1", "1").dump()));
  EXPECT_EQ(r.restored, 1);
  EXPECT_EQ(ext.NodeHold("n1"), std::nullopt);
  ASSERT_OK(ext.ApplyNodeEvent("MODIFIED", GpuNode("n1", "10.0.0.1", 2, 14).dump()).status());
  EXPECT_EQ(UsedOn(ext, "n1"), 22);
  EXPECT_THAT(Fitting(ext, GpuPod("c", 5), {"n1"}), IsEmpty());
  EXPECT_THAT(Fitting(ext, GpuPod("c", 4), {"n1"}), ElementsAre("n1"));
  EXPECT_OK(scheduler->CheckInvariants());
}

// ---- Node holds: GPU pods gpushare did not place ------------------------------------

// An nvidia.com/gpu pod that kube-scheduler's default profile bound: no bind
// annotations.
json WholeGpuPodBoundBySomeoneElse(const std::string& name, const std::string& node,
                                   const std::string& uid = "") {
  json pod = GpuPod(name, 0, 0, uid);
  pod["spec"]["containers"][0]["resources"]["limits"] = {{"nvidia.com/gpu", "1"}};
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

TEST(NodeHoldTest, AGpuPodBoundWithoutAnnotationsHoldsItsNodeUntilItEnds) {
  // One 14-unit GPU each. Without the hold, a 14-unit pod would be sent to
  // n1 while another scheduler's pod uses its only GPU whole.
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14), GpuNode("n2", "10.0.0.2", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyPodEvent("ADDED", WholeGpuPodBoundBySomeoneElse("train", "n1").dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  json failed;
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1", "n2"}, &failed), ElementsAre("n2"));
  EXPECT_THAT(failed["n1"].get<std::string>(),
              AllOf(HasSubstr("node 'n1' runs GPU pods that gpushare did not place"),
                    HasSubstr("default/train: no bind annotations")));
  // The inspect view says so, for the held node only.
  ASSERT_OK_AND_ASSIGN(std::string inspect, ext.Inspect());
  const json view = json::parse(inspect);
  ASSERT_EQ(view["nodes"].size(), 2u);
  for (const json& node : view["nodes"]) {
    if (node["name"] == "n1") {
      EXPECT_THAT(node.value("held", ""), HasSubstr("default/train: no bind annotations"));
    } else {
      EXPECT_FALSE(node.contains("held")) << node.dump();
    }
  }
  // What gpushare placed on n1 stays; n1's own cordon is followed beneath the
  // hold, and does not lift it.
  json cordoned = GpuNode("n1", "10.0.0.1", 1, 14);
  cordoned["spec"]["unschedulable"] = true;
  ASSERT_OK(ext.ApplyNodeEvent("MODIFIED", cordoned.dump()).status());
  ASSERT_OK(ext.ApplyNodeEvent("MODIFIED", GpuNode("n1", "10.0.0.1", 1, 14).dump()).status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1"}), IsEmpty());
  // The pod ends: the node takes GPU work again.
  json done = WholeGpuPodBoundBySomeoneElse("train", "n1");
  done["status"]["phase"] = "Succeeded";
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyPodEvent("MODIFIED", done.dump()));
  EXPECT_EQ(r.nodes_updated, 1);
  EXPECT_EQ(ext.NodeHold("n1"), std::nullopt);
  ASSERT_OK_AND_ASSIGN(inspect, ext.Inspect("n1"));
  EXPECT_FALSE(json::parse(inspect)["nodes"][0].contains("held")) << inspect;
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1"}), ElementsAre("n1"));
  // Held again, then the pod is deleted; a cordon set meanwhile stays.
  ASSERT_OK(ext.ApplyPodEvent("ADDED", WholeGpuPodBoundBySomeoneElse("t2", "n1").dump()).status());
  ASSERT_OK(ext.ApplyNodeEvent("MODIFIED", cordoned.dump()).status());
  ASSERT_OK(ext.ApplyPodEvent("DELETED", WholeGpuPodBoundBySomeoneElse("t2", "n1").dump()).status());
  EXPECT_EQ(ext.NodeHold("n1"), std::nullopt);
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1"}), IsEmpty());
  scheduler->Read([](const Cluster& c) { EXPECT_FALSE(c.FindNode("n1")->schedulable); });
  ASSERT_OK(ext.ApplyNodeEvent("MODIFIED", GpuNode("n1", "10.0.0.1", 1, 14).dump()).status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1"}), ElementsAre("n1"));
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(NodeHoldTest, AnnotationsThatRestoreLiftTheHoldAndOnesThatConflictKeepIt) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 2, 14)});
  Extender ext(scheduler.get());
  // Bound by hand with 10 units and no annotations: held.
  ASSERT_OK(ext.ApplyPodEvent("ADDED", BoundPod("hand", 10, "n1", "").dump()).status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 2), {"n1"}), IsEmpty());
  // The device plugin writes the GPU the kubelet gave it: restored, counted,
  // and the node is free for what still fits.
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyPodEvent("MODIFIED", BoundPod("hand", 10, "n1", "1").dump()));
  EXPECT_EQ(r.restored, 1);
  EXPECT_EQ(ext.NodeHold("n1"), std::nullopt);
  EXPECT_EQ(UsedOn(ext, "n1"), 10);
  EXPECT_THAT(Fitting(ext, GpuPod("a", 14), {"n1"}), ElementsAre("n1"));
  // A pod whose annotations name a GPU already full cannot be restored: held.
  ASSERT_OK(ext.ApplyPodEvent("ADDED", BoundPod("full", 14, "n1", "1").dump()).status());
  EXPECT_THAT(ext.NodeHold("n1"),
              Optional(HasSubstr("default/full: its bind annotations name GPUs gpushare cannot give it")));
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1"}), IsEmpty());
  ASSERT_OK(ext.ApplyPodEvent("DELETED", BoundPod("full", 14, "n1", "1").dump()).status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1"}), ElementsAre("n1"));
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(NodeHoldTest, ALateDeleteOfAnOlderPodKeepsTheNewerPodsHold) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  ASSERT_OK(
      ext.ApplyPodEvent("ADDED", WholeGpuPodBoundBySomeoneElse("t", "n1", "uid-new").dump()).status());
  ASSERT_OK(ext.ApplyPodEvent("DELETED", WholeGpuPodBoundBySomeoneElse("t", "n1", "uid-old").dump())
                .status());
  EXPECT_NE(ext.NodeHold("n1"), std::nullopt);
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1"}), IsEmpty());
}

TEST(NodeHoldTest, APodBoundBeforeItsNodeIsKnownHoldsOrIsRestoredWhenTheNodeArrives) {
  auto scheduler = MakeScheduler({});
  Extender ext(scheduler.get());
  // The pod informer delivered the pods before the node informer the node.
  ASSERT_OK(ext.ApplyPodEvent("ADDED", WholeGpuPodBoundBySomeoneElse("t", "n1").dump()).status());
  ASSERT_OK(ext.ApplyPodEvent("ADDED", BoundPod("ours", 4, "n2", "0").dump()).status());
  ASSERT_OK_AND_ASSIGN(SyncReport r,
                       ext.ApplyNodeEvent("ADDED", GpuNode("n1", "10.0.0.1", 1, 14).dump()));
  EXPECT_EQ(r.nodes_added, 1);
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1"}), IsEmpty());
  ASSERT_OK_AND_ASSIGN(r, ext.ApplyNodeEvent("ADDED", GpuNode("n2", "10.0.0.2", 1, 14).dump()));
  EXPECT_EQ(r.restored, 1);
  EXPECT_EQ(UsedOn(ext, "n2"), 4);
  EXPECT_EQ(ext.NodeHold("n2"), std::nullopt);
  EXPECT_THAT(Fitting(ext, GpuPod("a", 10), {"n2"}), ElementsAre("n2"));
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(NodeHoldTest, StartUpListsAndSyncHoldAndReleaseNodes) {
  const json n1 = GpuNode("n1", "10.0.0.1", 1, 14), n2 = GpuNode("n2", "10.0.0.2", 1, 14);
  const std::vector<json> pods = {WholeGpuPodBoundBySomeoneElse("t", "n1")};
  auto scheduler = MakeScheduler({n1, n2}, pods);
  Extender ext(scheduler.get());
  ext.RememberPods(*ParsePodList(PodList(pods).dump()));  // As gpushare-extender starts.
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1", "n2"}), ElementsAre("n2"));
  // A full list without the pod (its DELETED event was missed) lifts the hold;
  // one with it on n2 holds n2.
  ASSERT_OK(ext.Sync(NodeList({n1, n2}).dump(), PodList({}).dump(), ext.SyncMark()).status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1", "n2"}), ElementsAre("n1", "n2"));
  ASSERT_OK(ext.Sync(NodeList({n1, n2}).dump(),
                     PodList({WholeGpuPodBoundBySomeoneElse("t", "n2")}).dump(), ext.SyncMark())
                .status());
  EXPECT_THAT(Fitting(ext, GpuPod("a", 1), {"n1", "n2"}), ElementsAre("n1"));
  EXPECT_OK(scheduler->CheckInvariants());
}

TEST(WatchEventTest, UnknownTypesAndMalformedObjectsChangeNothing) {
  auto scheduler = MakeScheduler({GpuNode("n1", "10.0.0.1", 1, 14)});
  Extender ext(scheduler.get());
  const std::string before = *ext.Inspect();
  EXPECT_THAT(ext.ApplyPodEvent("BOOKMARK", GpuPod("a", 1).dump()),
              StatusIs(absl::StatusCode::kInvalidArgument, "BOOKMARK"));
  EXPECT_THAT(ext.ApplyNodeEvent("ADDED", "{"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ext.ApplyPodEvent("DELETED", "{\"metadata\":{}}"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(*ext.Inspect(), before);
}

}  // namespace
}  // namespace gpushare::k8s
