// gpushare-extender's start-up on a large cluster: rebuilding its state from
// the lists it fetched (GET /api/v1/nodes, GET /api/v1/pods), as
// extender/main.cc does it — ParseNodeList(), ParsePodList(), RebuildCluster(),
// Scheduler::Create(), the Extender, RememberPods() — without the HTTP (and
// without the watch mode's reflectors, which keep their own copy of each
// list).
//
//   build-rel/bench/extender_startup_benchmark
//
// The lists look like the API server's: nodes with the usual labels,
// conditions, capacity and allocatable (8 GPUs of 16 units, gpu-count and
// gpu-mem), addresses and images; pods with owner references, labels, one or
// two containers with resources, tolerations, volumes, conditions and
// container statuses. Of 10 pods per node: 6 shared-GPU pods bound with the
// bind annotations, 2 DaemonSet pods without GPUs, 1 completed GPU pod, 1
// pending GPU pod. managedFields are left out (kubectl hides them).
// BM_ExtenderStartup/nodes:N/pods:P; bytes_per_second counts both lists. What
// start-up leaves (the lists, the scheduler, the extender) is freed with the
// clock stopped: a started extender keeps it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"
#include "src/k8s/json_util.h"

namespace {

using nlohmann::json;

constexpr int kGpusPerNode = 8;
constexpr int kUnitsPerGpu = 16;

std::string NodeName(int i) { return absl::StrCat("gpu-node-", 100000 + i); }

json NodeJson(int i) {
  const std::string name = NodeName(i);
  json capacity = {{"aliyun.com/gpu-count", std::to_string(kGpusPerNode)},
                   {"aliyun.com/gpu-mem", std::to_string(kGpusPerNode * kUnitsPerGpu)},
                   {"cpu", "96"},
                   {"ephemeral-storage", "206292644Ki"},
                   {"hugepages-1Gi", "0"},
                   {"hugepages-2Mi", "0"},
                   {"memory", "394873232Ki"},
                   {"pods", "110"}};
  json allocatable = capacity;
  allocatable["cpu"] = "95800m";
  allocatable["memory"] = "392671120Ki";
  json conditions = json::array();
  for (const char* type : {"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"}) {
    conditions.push_back({{"type", type},
                          {"status", std::string(type) == "Ready" ? "True" : "False"},
                          {"lastHeartbeatTime", "2024-05-01T10:00:00Z"},
                          {"lastTransitionTime", "2024-03-01T08:00:00Z"},
                          {"reason", absl::StrCat("Kubelet", type)},
                          {"message", "kubelet has sufficient resources"}});
  }
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", name},
            {"uid", absl::StrCat("6f1c2d3e-0000-4000-8000-", 100000000000 + i)},
            {"resourceVersion", std::to_string(5000000 + i)},
            {"creationTimestamp", "2024-03-01T08:00:00Z"},
            {"labels",
             {{"beta.kubernetes.io/arch", "amd64"},
              {"beta.kubernetes.io/os", "linux"},
              {"kubernetes.io/arch", "amd64"},
              {"kubernetes.io/hostname", name},
              {"kubernetes.io/os", "linux"},
              {"node.kubernetes.io/instance-type", "ecs.gn6i-c24g1.24xlarge"},
              {"topology.kubernetes.io/region", "cn-hangzhou"},
              {"topology.kubernetes.io/zone", std::string("cn-hangzhou-") + static_cast<char>('a' + i % 8)},
              {"nvidia.com/gpu.product", "Tesla-T4"},
              {"gpushare", "true"}}},
            {"annotations",
             {{"node.alpha.kubernetes.io/ttl", "0"},
              {"volumes.kubernetes.io/controller-managed-attach-detach", "true"}}}}},
          {"spec",
           {{"podCIDR", absl::StrCat("10.", 64 + i / 256, ".", i % 256, ".0/24")},
            {"providerID", absl::StrCat("alicloud://cn-hangzhou.i-", 100000 + i)}}},
          {"status",
           {{"capacity", capacity},
            {"allocatable", allocatable},
            {"addresses",
             {{{"type", "InternalIP"}, {"address", absl::StrCat("10.1.", i / 256, ".", i % 256)}},
              {{"type", "Hostname"}, {"address", name}}}},
            {"conditions", conditions},
            {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
            {"nodeInfo",
             {{"architecture", "amd64"},
              {"containerRuntimeVersion", "containerd://1.6.28"},
              {"kernelVersion", "5.10.134-16.al8.x86_64"},
              {"kubeProxyVersion", "v1.28.3"},
              {"kubeletVersion", "v1.28.3"},
              {"operatingSystem", "linux"},
              {"osImage", "Alibaba Cloud Linux 3"}}},
            {"images",
             {{{"names", {"registry.example.com/ml/train@sha256:0123", "registry.example.com/ml/train:v2"}},
               {"sizeBytes", 5123456789}},
              {{"names", {"registry.example.com/infra/node-exporter:v1.7.0"}},
               {"sizeBytes", 12345678}}}}}}};
}

// Pod `p` of node `n`; kind 0-5 shared GPU pods bound (GPU `g`), 6-7
// DaemonSet pods, 8 a completed GPU pod, 9 a pending one.
json PodJson(int n, int kind, int64_t serial, int gpu, int units) {
  const bool daemon = kind == 6 || kind == 7;
  const std::string app = daemon ? (kind == 6 ? "node-exporter" : "log-agent") : "inference";
  const std::string name = absl::StrCat(app, "-", serial, "-x7k2p");
  json limits = daemon ? json{{"cpu", "200m"}, {"memory", "256Mi"}}
                       : json{{"aliyun.com/gpu-mem", std::to_string(units)},
                              {"cpu", "4"},
                              {"memory", "16Gi"}};
  json requests = daemon ? json{{"cpu", "100m"}, {"memory", "128Mi"}}
                         : json{{"aliyun.com/gpu-mem", std::to_string(units)},
                                {"cpu", "2"},
                                {"memory", "8Gi"}};
  json containers = json::array();
  containers.push_back(
      {{"name", app},
       {"image", absl::StrCat("registry.example.com/ml/", app, ":v2.3.1")},
       {"imagePullPolicy", "IfNotPresent"},
       {"args", {"--port=8080", "--model=/models/resnet50"}},
       {"ports", {{{"containerPort", 8080}, {"name", "http"}, {"protocol", "TCP"}}}},
       {"env", {{{"name", "MODEL_NAME"}, {"value", "resnet50"}}}},
       {"resources", {{"limits", limits}, {"requests", requests}}},
       {"volumeMounts",
        {{{"mountPath", "/var/run/secrets/kubernetes.io/serviceaccount"},
          {"name", "kube-api-access-abcde"},
          {"readOnly", true}}}},
       {"terminationMessagePath", "/dev/termination-log"},
       {"terminationMessagePolicy", "File"}});
  json annotations = {{"kubernetes.io/psp", "ack.privileged"}};
  if (!daemon && kind != 9) {
    annotations["ALIYUN_COM_GPU_MEM_IDX"] = std::to_string(gpu);
    annotations["ALIYUN_COM_GPU_MEM_POD"] = std::to_string(units);
    annotations["ALIYUN_COM_GPU_MEM_DEV"] = std::to_string(kUnitsPerGpu);
    annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true";
    annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"] = std::to_string(1714550000000000000 + serial);
  }
  json spec = {{"containers", containers},
               {"dnsPolicy", "ClusterFirst"},
               {"enableServiceLinks", true},
               {"preemptionPolicy", "PreemptLowerPriority"},
               {"priority", 0},
               {"restartPolicy", kind == 8 ? "Never" : "Always"},
               {"schedulerName", "default-scheduler"},
               {"securityContext", json::object()},
               {"serviceAccountName", "default"},
               {"terminationGracePeriodSeconds", 30},
               {"tolerations",
                {{{"effect", "NoExecute"},
                  {"key", "node.kubernetes.io/not-ready"},
                  {"operator", "Exists"},
                  {"tolerationSeconds", 300}},
                 {{"effect", "NoExecute"},
                  {"key", "node.kubernetes.io/unreachable"},
                  {"operator", "Exists"},
                  {"tolerationSeconds", 300}}}},
               {"volumes",
                {{{"name", "kube-api-access-abcde"},
                  {"projected",
                   {{"defaultMode", 420},
                    {"sources", {{{"serviceAccountToken", {{"expirationSeconds", 3607},
                                                          {"path", "token"}}}}}}}}}}}};
  if (kind != 9) spec["nodeName"] = NodeName(n);
  const char* phase = kind == 9 ? "Pending" : kind == 8 ? "Succeeded" : "Running";
  json status = {{"phase", phase}, {"qosClass", "Burstable"}};
  if (kind != 9) {
    status["hostIP"] = absl::StrCat("10.1.", n / 256, ".", n % 256);
    status["podIP"] = absl::StrCat("10.", 64 + n / 256, ".", n % 256, ".", 2 + kind);
    status["startTime"] = "2024-05-01T09:00:00Z";
    json conds = json::array();
    for (const char* type : {"Initialized", "Ready", "ContainersReady", "PodScheduled"}) {
      conds.push_back({{"type", type},
                       {"status", "True"},
                       {"lastProbeTime", nullptr},
                       {"lastTransitionTime", "2024-05-01T09:00:05Z"}});
    }
    status["conditions"] = conds;
    status["containerStatuses"] = {
        {{"name", app},
         {"ready", kind != 8},
         {"restartCount", 0},
         {"image", absl::StrCat("registry.example.com/ml/", app, ":v2.3.1")},
         {"imageID", "registry.example.com/ml/app@sha256:4f1e2d3c4b5a69788796a5b4c3d2e1f0"},
         {"containerID", absl::StrCat("containerd://", serial, "abcdef0123456789")},
         {"started", kind != 8},
         {"state", {{"running", {{"startedAt", "2024-05-01T09:00:04Z"}}}}}}};
  }
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"generateName", absl::StrCat(app, "-", serial, "-")},
            {"namespace", daemon ? "kube-system" : absl::StrCat("team-", n % 50)},
            {"uid", absl::StrCat("0a1b2c3d-0000-4000-8000-", 100000000000 + serial)},
            {"resourceVersion", std::to_string(9000000 + serial)},
            {"creationTimestamp", "2024-05-01T09:00:00Z"},
            {"labels", {{"app", app}, {"pod-template-hash", "5d8f7c9b6"}}},
            {"annotations", annotations},
            {"ownerReferences",
             {{{"apiVersion", "apps/v1"},
               {"kind", daemon ? "DaemonSet" : "ReplicaSet"},
               {"name", daemon ? app : absl::StrCat(app, "-5d8f7c9b6")},
               {"uid", "7e8f9a0b-1111-4000-8000-000000000001"},
               {"controller", true},
               {"blockOwnerDeletion", true}}}}}},
          {"spec", spec},
          {"status", status}};
}

struct Lists {
  std::string nodes, pods;
};

const Lists& CachedLists(int nodes, int pods) {
  static Lists lists;
  static int cached = -1;
  if (cached != nodes * 1000003 + pods) {
    json items = json::array();
    for (int i = 0; i < nodes; ++i) items.push_back(NodeJson(i));
    lists.nodes = json{{"apiVersion", "v1"}, {"kind", "NodeList"},
                       {"metadata", {{"resourceVersion", "9999999"}}}, {"items", items}}
                      .dump();
    items = json::array();
    // Pod p: node p % nodes; its kind from the pod's rank on that node; the
    // shared ones fill the node's GPUs round robin with 1..4 units.
    for (int64_t p = 0; p < pods; ++p) {
      const int n = static_cast<int>(p % nodes);
      const int rank = static_cast<int>(p / nodes);
      const int kind = rank % 10;
      items.push_back(PodJson(n, kind, p, rank % kGpusPerNode, 1 + rank % 4));
    }
    lists.pods = json{{"apiVersion", "v1"}, {"kind", "PodList"},
                      {"metadata", {{"resourceVersion", "9999999"}}}, {"items", items}}
                     .dump();
    cached = nodes * 1000003 + pods;
  }
  return lists;
}

// What extender/main.cc does with the two lists: parse each once, rebuild,
// start the scheduler and the extender, remember the pods.
template <bool kReference>
void Startup(benchmark::State& state) {
  namespace k8s = gpushare::k8s;
  const Lists& lists =
      CachedLists(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  int placed = 0;
  // What start-up leaves running; freed with the clock stopped (a started
  // extender keeps it).
  struct Running {
    std::vector<k8s::Pod> pods;
    std::unique_ptr<gpushare::Scheduler> scheduler;
    std::unique_ptr<k8s::Extender> extender;
  };
  auto running = std::make_unique<Running>();
  for (auto _ : state) {
    state.PauseTiming();
    running.reset();
    running = std::make_unique<Running>();
    state.ResumeTiming();
    absl::StatusOr<std::vector<gpushare::Node>> nodes =
        kReference ? k8s::internal::ReadNodeListReference(lists.nodes)
                   : k8s::ParseNodeList(lists.nodes);
    absl::StatusOr<std::vector<k8s::Pod>> pods =
        kReference ? k8s::internal::ReadPodListReference(lists.pods)
                   : k8s::ParsePodList(lists.pods);
    if (!nodes.ok() || !pods.ok()) {
      state.SkipWithError("lists do not parse");
      break;
    }
    k8s::RebuildReport report;
    absl::StatusOr<gpushare::Cluster> cluster = k8s::RebuildCluster(*nodes, *pods, {}, &report);
    if (!cluster.ok() || report.skipped != 0) {
      state.SkipWithError(cluster.ok() ? report.warnings[0].c_str() : "rebuild failed");
      break;
    }
    auto scheduler = gpushare::Scheduler::Create(*std::move(cluster));
    if (!scheduler.ok()) {
      state.SkipWithError("scheduler");
      break;
    }
    running->scheduler = *std::move(scheduler);
    running->extender = std::make_unique<k8s::Extender>(running->scheduler.get());
    running->extender->RememberPods(*pods);
    running->pods = *std::move(pods);
    placed = report.placed;
  }
  running.reset();  // After the loop: not timed.
  state.counters["placed"] = placed;
  state.counters["pod_bytes"] =
      static_cast<double>(lists.pods.size()) / static_cast<double>(state.range(1));
  state.SetBytesProcessed(state.iterations() *
                          static_cast<int64_t>(lists.nodes.size() + lists.pods.size()));
}

void BM_ExtenderStartup(benchmark::State& state) { Startup<false>(state); }
BENCHMARK(BM_ExtenderStartup)
    ->ArgNames({"nodes", "pods"})
    ->Args({1000, 10000})
    ->Args({10000, 100000})
    ->Unit(benchmark::kMillisecond);

// The same with the lists read by nlohmann::json (the readers' reference),
// the baseline.
void BM_ExtenderStartupReference(benchmark::State& state) { Startup<true>(state); }
BENCHMARK(BM_ExtenderStartupReference)
    ->ArgNames({"nodes", "pods"})
    ->Args({1000, 10000})
    ->Args({10000, 100000})
    ->Unit(benchmark::kMillisecond);

}  // namespace
