// Shared by tests and fuzz targets: every field of a parsed k8s::Pod or Node
// as one line of text, so that two readers' results compare with ==.

#ifndef GPUSHARE_TESTS_TESTING_K8S_TEXT_H_
#define GPUSHARE_TESTS_TESTING_K8S_TEXT_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gpushare/kubernetes.h"
#include "gpushare/topology.h"
#include "gpushare/types.h"

namespace gpushare::testing {

inline std::string MapText(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [k, v] : m) absl::StrAppend(&out, "[", k, "=", v, "]");
  return out;
}

inline std::string PodText(const k8s::Pod& p) {
  const Request& r = p.request;
  std::string out = absl::StrCat(
      p.name, "|", p.namespace_name, "|", p.uid, "|", p.node_name, "|", p.phase, "|",
      p.terminating, "|", MapText(p.labels), "|", MapText(p.annotations), "|", r.id, "|",
      r.gpu_memory, "|", r.gpu_count, "|", r.compute, "|", r.whole_gpus, "|", r.cpu, "|",
      r.host_memory, "|", absl::StrJoin(r.gpu_models, ","), "|", MapText(r.node_selector), "|",
      static_cast<int>(r.topology.mode), "|", static_cast<int>(r.topology.min_link.kind), "|",
      r.topology.min_link.nvlinks, "|");
  for (const k8s::NodeSelectorTerm& t : p.required_node_affinity) {
    for (const auto* list : {&t.match_expressions, &t.match_fields}) {
      for (const k8s::NodeSelectorRequirement& q : *list) {
        absl::StrAppend(&out, "(", q.key, " ", q.op, " ", absl::StrJoin(q.values, ","), ")");
      }
      out += ";";
    }
    out += "/";
  }
  return out;
}

inline std::string NodeText(const Node& n) {
  std::string out = absl::StrCat(n.name, "|", n.address, "|", MapText(n.labels), "|", n.cpu, "|",
                                 n.host_memory, "|", n.schedulable, "|",
                                 n.gpu_sharing.has_value() ? (*n.gpu_sharing ? "1" : "0") : "-",
                                 "|", n.topology ? n.topology->ToJson() : "", "|");
  for (const Gpu& g : n.gpus) {
    absl::StrAppend(&out, "(", g.memory, " ", g.model, " ", g.uuid, " ", g.healthy, ")");
  }
  return out;
}

template <typename T, typename TextFn>
std::string ListText(const std::vector<T>& items, TextFn text) {
  std::string out;
  for (const T& item : items) absl::StrAppend(&out, text(item), "\n");
  return out;
}

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_K8S_TEXT_H_
