// k8s::ParsePod, ParseNode and RebuildCluster on arbitrary bytes. The whole
// input goes to ParsePod and ParseNode; RebuildCluster gets the text before
// the first form feed (\f) as the node list and the rest as the pod list
// (an empty list without one). Properties (kubernetes.h):
//  - errors are InvalidArgument;
//  - a parsed pod has a name, the id "<namespace>/<name>", non-negative
//    amounts, gpu_count >= 1 and only the supported affinity operators;
//  - a parsed node has a name, at most kMaxGpusPerNode GPUs of one size
//    (>= 1 unit) and one model, and a Cluster accepts it;
//  - a rebuilt cluster passes CheckInvariants(), its report adds up, and its
//    snapshot loads back to the same text;
//  - differential: the whole input read as a pod list and as a node list by
//    the fast readers (simdjson) gives the reference's items or error.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/cluster.h"
#include "gpushare/kubernetes.h"
#include "gpushare/types.h"
#include "nlohmann/json.hpp"
#include "src/k8s/json_util.h"
#include "tests/testing/k8s_text.h"

namespace {

namespace k8s = gpushare::k8s;

void CheckPod(std::string_view text) {
  absl::StatusOr<k8s::Pod> pod = k8s::ParsePod(text);
  if (!pod.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(pod.status()), pod.status().ToString());
    return;
  }
  const gpushare::Request& r = pod->request;
  FUZZ_CHECK(!pod->name.empty() && !pod->namespace_name.empty(), r.id);
  FUZZ_CHECK(r.id == pod->namespace_name + "/" + pod->name, r.id);
  FUZZ_CHECK(r.gpu_memory >= 0 && r.whole_gpus >= 0 && r.cpu >= 0 && r.host_memory >= 0,
             absl::StrCat(r.id, " ", r.gpu_memory, " ", r.whole_gpus, " ", r.cpu, " ",
                          r.host_memory));
  FUZZ_CHECK(r.gpu_count >= 1, absl::StrCat(r.id, " gpu_count ", r.gpu_count));
  static const std::set<std::string> kOps = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
  for (const k8s::NodeSelectorTerm& term : pod->required_node_affinity) {
    for (const auto* list : {&term.match_expressions, &term.match_fields}) {
      for (const k8s::NodeSelectorRequirement& req : *list) {
        FUZZ_CHECK(kOps.count(req.op), req.op);
      }
    }
  }
  // Exercised for crashes only: any answer is possible.
  (void)k8s::MatchesNodeAffinity(*pod, "n1", pod->labels);
}

void CheckNode(std::string_view text) {
  absl::StatusOr<gpushare::Node> node = k8s::ParseNode(text);
  if (!node.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(node.status()), node.status().ToString());
    return;
  }
  FUZZ_CHECK(!node->name.empty(), "node without a name");
  FUZZ_CHECK(node->gpus.size() <= static_cast<size_t>(gpushare::kMaxGpusPerNode), node->name);
  for (const gpushare::Gpu& g : node->gpus) {
    FUZZ_CHECK(g.memory >= 1 && g.memory == node->gpus[0].memory, node->name);
    FUZZ_CHECK(g.model == node->gpus[0].model, node->name);
  }
  gpushare::Cluster cluster;
  FUZZ_CHECK_OK(cluster.AddNode(*node), "a parsed node is refused by the cluster");
}

void CheckRebuild(std::string_view text) {
  const size_t cut = text.find('\f');
  const std::string_view nodes = text.substr(0, cut);
  const std::string_view pods = cut == std::string_view::npos ? "[]" : text.substr(cut + 1);
  k8s::RebuildReport report;
  absl::StatusOr<gpushare::Cluster> cluster =
      k8s::RebuildCluster(nodes, pods, gpushare::ClusterOptions{}, &report);
  if (!cluster.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(cluster.status()), cluster.status().ToString());
    return;
  }
  FUZZ_CHECK_OK(cluster->CheckInvariants(), "a rebuilt cluster breaks the invariants");
  FUZZ_CHECK(report.nodes == static_cast<int>(cluster->node_names().size()),
             absl::StrCat(report.nodes, " nodes reported"));
  FUZZ_CHECK(report.placed == static_cast<int>(cluster->placements().size()),
             absl::StrCat(report.placed, " placed reported"));
  FUZZ_CHECK(report.skipped == static_cast<int>(report.warnings.size()),
             absl::StrCat(report.skipped, " skipped, ", report.warnings.size(), " warnings"));
  const std::string dump = cluster->ToJson();
  absl::StatusOr<gpushare::Cluster> again = gpushare::Cluster::FromJson(dump);
  FUZZ_CHECK_OK(again.status(), "the snapshot of a rebuilt cluster does not load: " + dump);
  FUZZ_CHECK(again->ToJson() == dump, "snapshot round trip changed " + dump);
}

void CheckListReaders(std::string_view text) {
  namespace internal = k8s::internal;
  using gpushare::testing::ListText;
  absl::StatusOr<std::vector<k8s::Pod>> pods = internal::ReadPodList(text);
  absl::StatusOr<std::vector<k8s::Pod>> pods_ref = internal::ReadPodListReference(text);
  FUZZ_CHECK(pods.ok() == pods_ref.ok(), pods.ok() ? pods_ref.status().ToString()
                                                   : pods.status().ToString());
  if (pods.ok()) {
    FUZZ_CHECK(ListText(*pods, gpushare::testing::PodText) ==
                   ListText(*pods_ref, gpushare::testing::PodText),
               "pod lists differ");
  } else {
    FUZZ_CHECK(pods.status() == pods_ref.status(), pods.status().ToString());
  }
  absl::StatusOr<std::vector<gpushare::Node>> nodes = internal::ReadNodeList(text);
  absl::StatusOr<std::vector<gpushare::Node>> nodes_ref = internal::ReadNodeListReference(text);
  FUZZ_CHECK(nodes.ok() == nodes_ref.ok(), nodes.ok() ? nodes_ref.status().ToString()
                                                      : nodes.status().ToString());
  if (nodes.ok()) {
    FUZZ_CHECK(ListText(*nodes, gpushare::testing::NodeText) ==
                   ListText(*nodes_ref, gpushare::testing::NodeText),
               "node lists differ");
  } else {
    FUZZ_CHECK(nodes.status() == nodes_ref.status(), nodes.status().ToString());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckPod(text);
  CheckNode(text);
  CheckRebuild(text);
  CheckListReaders(text);
  return 0;
}
