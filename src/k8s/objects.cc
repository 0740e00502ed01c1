// v1.Pod and v1.Node JSON into gpushare's model, node affinity, and the state
// of a cluster rebuilt from kubectl output.

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpushare/kubernetes.h"
#include "src/internal/cluster_state.h"
#include "src/internal/json_text.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"
#include "src/k8s/json_util.h"

namespace gpushare::k8s {
namespace internal {

using ::gpushare::internal::Sv;

absl::StatusOr<json> ParseJson(std::string_view text, const char* what) {
  return ::gpushare::internal::ParseJsonText(text, absl::StrCat(what, " is not valid JSON"));
}

const json* Member(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it != obj.end()) return it->is_null() ? nullptr : &*it;
  for (auto i = obj.begin(); i != obj.end(); ++i) {
    const std::string& k = i.key();
    if (k.size() == key.size() &&
        std::equal(k.begin(), k.end(), key.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return i->is_null() ? nullptr : &*i;
    }
  }
  return nullptr;
}

absl::StatusOr<std::string> StringMember(const json& obj, std::string_view key,
                                         std::string_view where) {
  const json* v = Member(obj, key);
  if (v == nullptr) return std::string();
  if (!v->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(where), ".", Sv(key), " must be a string"));
  }
  return v->get<std::string>();
}

absl::StatusOr<std::map<std::string, std::string>> StringMap(const json& obj,
                                                            std::string_view key,
                                                            std::string_view where) {
  std::map<std::string, std::string> out;
  const json* v = Member(obj, key);
  if (v == nullptr) return out;
  if (!v->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Sv(where), ".", Sv(key), " must be an object of strings"));
  }
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(Sv(where), ".", Sv(key), "[\"", it.key(),
                                                     "\"] must be a string"));
    }
    out.emplace(it.key(), it->get<std::string>());
  }
  return out;
}

absl::StatusOr<const json*> ListItems(const json& list, const char* what) {
  if (list.is_array()) return &list;
  const json* items = Member(list, "items");
  if (items == nullptr && list.is_object()) {
    static const json kEmpty = json::array();
    return &kEmpty;
  }
  if (items == nullptr || !items->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a list object with \"items\" or an array"));
  }
  return items;
}

namespace {

// A quantity given as a string ("8Gi") or, in hand-written JSON, a number.
absl::StatusOr<std::string> QuantityText(const json& v, const std::string& where) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_unsigned()) return absl::StrCat(v.get<uint64_t>());
  if (v.is_number_integer()) return absl::StrCat(v.get<int64_t>());
  if (v.is_number_float()) return v.dump();
  return absl::InvalidArgumentError(absl::StrCat(where, " must be a quantity string"));
}

// Reads resource `name` of a container's resources (limits first, then
// requests, or the reverse) with `parse`; 0 when absent.
template <typename ParseFn>
absl::StatusOr<int64_t> ContainerResource(const json& container, const std::string& where,
                                          const char* name, bool limits_first,
                                          ParseFn parse) {
  const json* resources = Member(container, "resources");
  if (resources == nullptr) return 0;
  for (const char* section : limits_first ? std::vector<const char*>{"limits", "requests"}
                                          : std::vector<const char*>{"requests", "limits"}) {
    const json* s = Member(*resources, section);
    if (s == nullptr) continue;
    if (!s->is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".resources.", section, " must be an object"));
    }
    auto it = s->find(name);
    if (it == s->end() || it->is_null()) continue;
    const std::string at = absl::StrCat(where, ".resources.", section, "[\"", name, "\"]");
    GPUSHARE_ASSIGN_OR_RETURN(std::string text, QuantityText(*it, at));
    absl::StatusOr<int64_t> value = parse(text);
    if (!value.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ": ", value.status().message()));
    }
    return *value;
  }
  return 0;
}

absl::StatusOr<std::vector<NodeSelectorRequirement>> Requirements(const json& term,
                                                                  const char* key,
                                                                  const std::string& where) {
  std::vector<NodeSelectorRequirement> out;
  const json* list = Member(term, key);
  if (list == nullptr) return out;
  if (!list->is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " must be an array"));
  }
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = absl::StrCat(where, ".", key, "[", i, "]");
    const json& r = (*list)[i];
    NodeSelectorRequirement req;
    GPUSHARE_ASSIGN_OR_RETURN(req.key, StringMember(r, "key", at));
    GPUSHARE_ASSIGN_OR_RETURN(req.op, StringMember(r, "operator", at));
    static const char* kOps[] = {"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"};
    if (std::none_of(std::begin(kOps), std::end(kOps),
                     [&](const char* op) { return req.op == op; })) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": unsupported operator '", ::gpushare::internal::Echo(req.op), "'"));
    }
    if (const json* values = Member(r, "values")) {
      if (!values->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(at, ".values must be an array"));
      }
      for (const json& v : *values) {
        if (!v.is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(at, ".values must hold strings"));
        }
        req.values.push_back(v.get<std::string>());
      }
    }
    out.push_back(std::move(req));
  }
  return out;
}

bool RequirementMatches(const NodeSelectorRequirement& r, const std::string* value) {
  auto listed = [&] {
    return value != nullptr &&
           std::find(r.values.begin(), r.values.end(), *value) != r.values.end();
  };
  auto compare = [&](bool greater) {
    int64_t have = 0, want = 0;
    if (value == nullptr || r.values.size() != 1 || !absl::SimpleAtoi(*value, &have) ||
        !absl::SimpleAtoi(r.values[0], &want)) {
      return false;
    }
    return greater ? have > want : have < want;
  };
  if (r.op == "In") return listed();
  if (r.op == "NotIn") return !listed();
  if (r.op == "Exists") return value != nullptr;
  if (r.op == "DoesNotExist") return value == nullptr;
  if (r.op == "Gt") return compare(true);
  if (r.op == "Lt") return compare(false);
  return false;
}

}  // namespace

std::string Who(const Pod& pod) { return absl::StrCat("pod ", pod.namespace_name, "/", pod.name); }
std::string Who(const Node& node) { return absl::StrCat("node ", node.name); }

absl::Status PodRequestFromMetadata(Pod* pod) {
  // The label splits gpu-mem over M GPUs. On a pod that asks for GPUs (of
  // either kind) it must be a positive integer: "0" or "-1" is a mistake, not
  // "no GPUs". On a pod that asks for none it means nothing and is ignored.
  auto count = pod->labels.find(kGpuCountResource);
  if (count != pod->labels.end() &&
      (pod->request.gpu_memory > 0 || pod->request.whole_gpus > 0)) {
    absl::StatusOr<int64_t> m = QuantityInteger(count->second);
    if (!m.ok() || *m < 1) {
      return absl::InvalidArgumentError(absl::StrCat(Who(*pod), ": label ", kGpuCountResource, "=\"",
                                                     ::gpushare::internal::Echo(count->second),
                                                     "\" is not a positive integer"));
    }
    if (pod->request.gpu_memory > 0) pod->request.gpu_count = *m;
  }
  // How much GPU topology matters: "none", "prefer" or a required minimum link.
  if (auto need = pod->annotations.find(Topology::kKubernetesAnnotation);
      need != pod->annotations.end()) {
    if (need->second == "none") {
      pod->request.topology.mode = TopologyNeed::Mode::kNone;
    } else if (need->second != "prefer") {
      absl::StatusOr<Link> link = ParseLink(need->second);
      if (!link.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            Who(*pod), ": annotation ", Topology::kKubernetesAnnotation, "=\"",
            ::gpushare::internal::Echo(need->second),
            "\" is not none, prefer or a link kind such as NV1 or PIX"));
      }
      pod->request.topology.mode = TopologyNeed::Mode::kRequire;
      pod->request.topology.min_link = *link;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Pod> PodFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("pod must be a JSON object");
  Pod pod;
  const json* metadata = Member(j, "metadata");
  if (metadata == nullptr) return absl::InvalidArgumentError("pod has no metadata");
  GPUSHARE_ASSIGN_OR_RETURN(pod.name, StringMember(*metadata, "name", "pod.metadata"));
  if (pod.name.empty()) return absl::InvalidArgumentError("pod has no metadata.name");
  GPUSHARE_ASSIGN_OR_RETURN(std::string ns,
                            StringMember(*metadata, "namespace", "pod.metadata"));
  if (!ns.empty()) pod.namespace_name = ns;
  GPUSHARE_ASSIGN_OR_RETURN(pod.uid, StringMember(*metadata, "uid", "pod.metadata"));
  GPUSHARE_ASSIGN_OR_RETURN(pod.labels, StringMap(*metadata, "labels", "pod.metadata"));
  GPUSHARE_ASSIGN_OR_RETURN(pod.annotations,
                            StringMap(*metadata, "annotations", "pod.metadata"));
  pod.terminating = Member(*metadata, "deletionTimestamp") != nullptr;
  const std::string who = absl::StrCat("pod ", pod.namespace_name, "/", pod.name);
  pod.request.id = absl::StrCat(pod.namespace_name, "/", pod.name);

  if (const json* status = Member(j, "status")) {
    GPUSHARE_ASSIGN_OR_RETURN(pod.phase, StringMember(*status, "phase", who + " status"));
  }
  const json* spec = Member(j, "spec");
  if (spec == nullptr) return pod;
  GPUSHARE_ASSIGN_OR_RETURN(pod.node_name, StringMember(*spec, "nodeName", who + " spec"));
  GPUSHARE_ASSIGN_OR_RETURN(pod.request.node_selector,
                            StringMap(*spec, "nodeSelector", who + " spec"));
  if (const json* containers = Member(*spec, "containers")) {
    if (!containers->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": spec.containers must be an array"));
    }
    for (size_t i = 0; i < containers->size(); ++i) {
      const json& c = (*containers)[i];
      GPUSHARE_ASSIGN_OR_RETURN(std::string cname, StringMember(c, "name", who));
      const std::string where =
          absl::StrCat(who, " container ", cname.empty() ? absl::StrCat("#", i) : cname);
      GPUSHARE_ASSIGN_OR_RETURN(int64_t mem, ContainerResource(c, where, kGpuMemResource, true,
                                                               QuantityInteger));
      GPUSHARE_ASSIGN_OR_RETURN(int64_t whole, ContainerResource(c, where, kWholeGpuResource,
                                                                 true, QuantityInteger));
      GPUSHARE_ASSIGN_OR_RETURN(int64_t cpu,
                                ContainerResource(c, where, "cpu", false, QuantityMilli));
      GPUSHARE_ASSIGN_OR_RETURN(int64_t host,
                                ContainerResource(c, where, "memory", false, QuantityMiB));
      pod.request.gpu_memory += mem;
      pod.request.whole_gpus += whole;
      pod.request.cpu += cpu;
      pod.request.host_memory += host;
    }
  }
  GPUSHARE_RETURN_IF_ERROR(PodRequestFromMetadata(&pod));
  const json* affinity = Member(*spec, "affinity");
  const json* node_affinity = affinity ? Member(*affinity, "nodeAffinity") : nullptr;
  const json* required =
      node_affinity ? Member(*node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
                    : nullptr;
  if (required != nullptr) {
    const json* terms = Member(*required, "nodeSelectorTerms");
    if (terms != nullptr) {
      if (!terms->is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, ": nodeSelectorTerms must be an array"));
      }
      for (size_t t = 0; t < terms->size(); ++t) {
        const std::string at = absl::StrCat(who, " nodeSelectorTerms[", t, "]");
        NodeSelectorTerm term;
        GPUSHARE_ASSIGN_OR_RETURN(term.match_expressions,
                                  Requirements((*terms)[t], "matchExpressions", at));
        GPUSHARE_ASSIGN_OR_RETURN(term.match_fields,
                                  Requirements((*terms)[t], "matchFields", at));
        pod.required_node_affinity.push_back(std::move(term));
      }
    }
  }
  return pod;
}

absl::Status NodeGpus(int64_t memory, std::optional<int64_t> gpu_count, int64_t whole,
                      Node* node) {
  // gpu-count, when the device plugin publishes it, is the number of shared
  // GPUs, even when it is 0. Without it, nvidia.com/gpu counts them, and a
  // node that offers only gpu-mem has one GPU.
  if (gpu_count.has_value() && *gpu_count == 0 && memory > 0) {
    return absl::InvalidArgumentError(absl::StrCat(Who(*node), ": capacity ", kGpuMemResource,
                                                   " is ", memory, " units but ",
                                                   kGpuCountResource, " is 0"));
  }
  int64_t count = gpu_count.value_or(0);
  if (count == 0) count = whole;
  if (count > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrCat(Who(*node), ": ", count, " GPUs exceed the limit of ",
                                                   kMaxGpusPerNode));
  }
  if (memory > 0 && count == 0) count = 1;
  std::string model;
  for (const char* key : {"nvidia.com/gpu.product", "aliyun.accelerator/nvidia_name"}) {
    auto it = node->labels.find(key);
    if (it != node->labels.end()) {
      model = it->second;
      break;
    }
  }
  const int64_t per_gpu = memory > 0 ? memory / count : 1;
  if (count > 0 && per_gpu < 1) {
    return absl::InvalidArgumentError(absl::StrCat(Who(*node), ": ", memory, " units of ",
                                                   kGpuMemResource, " over ", count, " GPUs"));
  }
  for (int64_t i = 0; i < count; ++i) node->gpus.push_back(Gpu{per_gpu, model, "", true});
  return absl::OkStatus();
}

absl::Status NodeTopologyAndSharing(const std::map<std::string, std::string>& annotations,
                                    int64_t memory, Node* node) {
  // The annotations gpushare-device-plugin writes describe the GPUs it found:
  // each GPU's units (a node's GPUs may differ), the unhealthy ones, and the
  // topology. A malformed value is an error. A well-formed one that disagrees
  // with the capacity is a node in transition (the plugin restarted on other
  // GPUs and the kubelet has not reported them yet, or the capacity still
  // lacks them): its GPUs then take no new work and its topology is left
  // out, until both agree. Nothing to describe while the capacity offers no
  // GPUs.
  const int gpus = static_cast<int>(node->gpus.size());
  bool disagrees = false;
  if (auto m = annotations.find(kGpuMemoryAnnotation); m != annotations.end() && gpus > 0) {
    std::vector<int64_t> sizes;
    int64_t sum = 0;
    for (absl::string_view part : absl::StrSplit(m->second, ',')) {
      int64_t units = 0;
      if (!absl::SimpleAtoi(part, &units) || units < 1 || units > kMaxQuantity) {
        return absl::InvalidArgumentError(absl::StrCat(
            Who(*node), ": annotation ", kGpuMemoryAnnotation, "=\"",
            ::gpushare::internal::Echo(m->second), "\" is not a list of positive unit counts"));
      }
      sizes.push_back(units);
      sum += units;
    }
    if (static_cast<int>(sizes.size()) != gpus || sum != memory) {
      disagrees = true;
    } else {
      for (int g = 0; g < gpus; ++g) node->gpus[g].memory = sizes[g];
    }
  }
  if (auto u = annotations.find(kUnhealthyGpusAnnotation);
      u != annotations.end() && !u->second.empty() && gpus > 0) {
    for (absl::string_view part : absl::StrSplit(u->second, ',')) {
      int g = 0;
      if (!absl::SimpleAtoi(part, &g) || g < 0 || g >= kMaxGpusPerNode) {
        return absl::InvalidArgumentError(absl::StrCat(
            Who(*node), ": annotation ", kUnhealthyGpusAnnotation, "=\"",
            ::gpushare::internal::Echo(u->second), "\" is not a list of GPU indices"));
      }
      if (g >= gpus) {
        disagrees = true;
      } else {
        node->gpus[g].healthy = false;
      }
    }
  }
  if (auto t = annotations.find(Topology::kKubernetesAnnotation); t != annotations.end()) {
    absl::StatusOr<TopologyPtr> topology = Topology::FromJson(t->second);
    if (!topology.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(Who(*node), ": annotation ",
                                                     Topology::kKubernetesAnnotation, ": ",
                                                     topology.status().message()));
    }
    if ((*topology)->num_gpus() != gpus) {
      disagrees = disagrees || gpus > 0;
    } else {
      node->topology = *std::move(topology);
    }
  }
  if (disagrees) {
    node->topology = nullptr;
    for (Gpu& g : node->gpus) g.healthy = false;
  }
  // As gpushare-scheduler-extender does, a node whose capacity offers
  // aliyun.com/gpu-mem (its device plugin runs) takes shared GPU work, unless
  // a label opts it out; without that capacity the labels decide.
  if (memory > 0) {
    auto opted_out = [&](const char* key) {
      auto it = node->labels.find(key);
      return it != node->labels.end() && it->second == "false";
    };
    node->gpu_sharing = !opted_out("gpushare") && !opted_out("cgpu");
  }
  return absl::OkStatus();
}

absl::StatusOr<Node> NodeFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("node must be a JSON object");
  Node node;
  const json* metadata = Member(j, "metadata");
  if (metadata == nullptr) return absl::InvalidArgumentError("node has no metadata");
  GPUSHARE_ASSIGN_OR_RETURN(node.name, StringMember(*metadata, "name", "node.metadata"));
  if (node.name.empty()) return absl::InvalidArgumentError("node has no metadata.name");
  const std::string who = absl::StrCat("node ", node.name);
  GPUSHARE_ASSIGN_OR_RETURN(node.labels, StringMap(*metadata, "labels", who + " metadata"));
  if (const json* spec = Member(j, "spec")) {
    if (const json* u = Member(*spec, "unschedulable")) {
      if (!u->is_boolean()) {
        return absl::InvalidArgumentError(absl::StrCat(who, ": spec.unschedulable must be a bool"));
      }
      node.schedulable = !u->get<bool>();
    }
  }
  int64_t memory = 0, whole = 0;
  std::optional<int64_t> count;
  if (const json* status = Member(j, "status")) {
    const json* capacity = Member(*status, "capacity");
    if (capacity == nullptr) capacity = Member(*status, "allocatable");
    if (capacity != nullptr) {
      auto read = [&](const char* name, auto* out) -> absl::Status {
        auto it = capacity->find(name);
        if (it == capacity->end() || it->is_null()) return absl::OkStatus();
        const std::string at = absl::StrCat(who, " capacity[\"", name, "\"]");
        GPUSHARE_ASSIGN_OR_RETURN(std::string text, QuantityText(*it, at));
        absl::StatusOr<int64_t> v = QuantityInteger(text);
        if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(at, ": ", v.status().message()));
        *out = *v;
        return absl::OkStatus();
      };
      if (capacity->is_object()) {
        GPUSHARE_RETURN_IF_ERROR(read(kGpuMemResource, &memory));
        GPUSHARE_RETURN_IF_ERROR(read(kGpuCountResource, &count));
        GPUSHARE_RETURN_IF_ERROR(read(kWholeGpuResource, &whole));
      }
    }
    if (const json* addresses = Member(*status, "addresses"); addresses && addresses->is_array()) {
      for (const json& a : *addresses) {
        GPUSHARE_ASSIGN_OR_RETURN(std::string type, StringMember(a, "type", who + " address"));
        GPUSHARE_ASSIGN_OR_RETURN(std::string addr,
                                  StringMember(a, "address", who + " address"));
        if (node.address.empty() || type == "InternalIP") node.address = addr;
        if (type == "InternalIP") break;
      }
    }
  }
  GPUSHARE_RETURN_IF_ERROR(NodeGpus(memory, count, whole, &node));
  // The GPU topology, in the compact JSON form of gpushare/topology.h.
  GPUSHARE_ASSIGN_OR_RETURN(const auto annotations,
                            StringMap(*metadata, "annotations", who + " metadata"));
  GPUSHARE_RETURN_IF_ERROR(NodeTopologyAndSharing(annotations, memory, &node));
  return node;
}

}  // namespace internal

absl::StatusOr<Pod> ParsePod(std::string_view text) {
  GPUSHARE_ASSIGN_OR_RETURN(internal::json j, internal::ParseJson(text, "pod"));
  return internal::PodFromJson(j);
}

absl::StatusOr<Node> ParseNode(std::string_view text) {
  GPUSHARE_ASSIGN_OR_RETURN(internal::json j, internal::ParseJson(text, "node"));
  return internal::NodeFromJson(j);
}

bool MatchesNodeAffinity(const Pod& pod, const std::string& node_name,
                         const std::map<std::string, std::string>& labels) {
  if (pod.required_node_affinity.empty()) return true;
  for (const NodeSelectorTerm& term : pod.required_node_affinity) {
    if (term.match_expressions.empty() && term.match_fields.empty()) continue;
    bool all = true;
    for (const NodeSelectorRequirement& r : term.match_expressions) {
      auto it = labels.find(r.key);
      all = all && internal::RequirementMatches(r, it == labels.end() ? nullptr : &it->second);
    }
    for (const NodeSelectorRequirement& r : term.match_fields) {
      all = all && r.key == "metadata.name" && internal::RequirementMatches(r, &node_name);
    }
    if (all) return true;
  }
  return false;
}

// ---- Rebuild -------------------------------------------------------------------

namespace {

using GpuUnits = std::optional<std::map<int, int64_t>>;

// The GPUs and units per GPU recorded on a bound pod, from
// ALIYUN_COM_GPU_MEM_IDX ("1", "0-1-2-3", or "0,1") or else the allocation
// annotation {"<container>":{"<gpu>":units}}. nullopt if neither is present.
absl::StatusOr<std::optional<std::map<int, int64_t>>> RecordedGpus(const Pod& pod) {
  std::map<int, int64_t> per_gpu;
  auto idx = pod.annotations.find("ALIYUN_COM_GPU_MEM_IDX");
  if (idx != pod.annotations.end() && !idx->second.empty() && idx->second != "-1") {
    for (absl::string_view part : absl::StrSplit(idx->second, absl::ByAnyChar("-,"))) {
      int g = 0;
      if (!absl::SimpleAtoi(part, &g) || g < 0 || g >= kMaxGpusPerNode) {
        return absl::InvalidArgumentError(absl::StrCat(
            "pod ", pod.request.id, ": ALIYUN_COM_GPU_MEM_IDX \"", ::gpushare::internal::Echo(idx->second),
            "\" is not a list of GPU indices"));
      }
      per_gpu[g] = 0;
    }
    return std::optional<std::map<int, int64_t>>(per_gpu);
  }
  auto alloc = pod.annotations.find("scheduler.framework.gpushare.allocation");
  if (alloc == pod.annotations.end()) return std::optional<std::map<int, int64_t>>();
  internal::json j = internal::json::parse(alloc->second, nullptr, false);
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat(
        "pod ", pod.request.id, ": allocation annotation \"",
        ::gpushare::internal::Echo(alloc->second), "\" is malformed"));
  };
  if (j.is_discarded() || !j.is_object()) return bad();
  for (const auto& [container, gpus] : j.items()) {
    if (!gpus.is_object()) return bad();
    for (const auto& [gpu, units] : gpus.items()) {
      int g = 0;
      if (!absl::SimpleAtoi(gpu, &g) || g < 0 || g >= kMaxGpusPerNode ||
          !units.is_number_integer() || units.get<int64_t>() < 0 ||
          units.get<int64_t>() > kMaxQuantity) {
        return bad();
      }
      // Each term is at most kMaxQuantity (2^32), so the sum cannot overflow.
      per_gpu[g] += units.get<int64_t>();
    }
  }
  return std::optional<std::map<int, int64_t>>(per_gpu);
}

}  // namespace

namespace internal {

absl::StatusOr<std::optional<Placement>> RecordedPlacement(const Cluster& cluster,
                                                           const Pod& pod) {
  if (!pod.uses_gpus() || pod.node_name.empty() || pod.completed()) return std::nullopt;
  if (cluster.FindNode(pod.node_name) == nullptr) {
    return absl::NotFoundError(absl::StrCat("node ", pod.node_name, " unknown"));
  }
  GPUSHARE_ASSIGN_OR_RETURN(const Demand demand, cluster.Validate(pod.request));
  GPUSHARE_ASSIGN_OR_RETURN(GpuUnits recorded, RecordedGpus(pod));
  if (!recorded.has_value()) {
    return absl::FailedPreconditionError(
        "no GPU index annotation (not bound by a gpushare scheduler)");
  }
  Placement p;
  p.request_id = pod.request.id;
  p.node = pod.node_name;
  for (const auto& [g, units] : *recorded) p.gpus.push_back(g);
  p.exclusive = demand.kind == Demand::Kind::kExclusive;
  p.memory_per_gpu = demand.memory_per_gpu;
  p.compute_per_gpu = demand.compute_per_gpu;
  p.cpu = demand.cpu;
  p.host_memory = demand.host_memory;
  if (static_cast<int>(p.gpus.size()) != demand.gpu_count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "annotations list ", p.gpus.size(), " GPUs, the pod needs ", demand.gpu_count));
  }
  return std::optional<Placement>(std::move(p));
}

int64_t AssumeTime(const Pod& pod) {
  auto it = pod.annotations.find("ALIYUN_COM_GPU_MEM_ASSUME_TIME");
  int64_t t = 0;
  if (it != pod.annotations.end() && absl::SimpleAtoi(it->second, &t)) return t;
  return 0;
}

}  // namespace internal

namespace {

// Restores the placements recorded on `pods` (the rules of RebuildCluster()).
void RestorePlacements(const std::vector<Pod>& parsed, Cluster* cluster, RebuildReport* r) {
  // Oldest binds first: on a conflict the pod bound later is the one skipped.
  std::vector<std::pair<int64_t, size_t>> order(parsed.size());
  for (size_t i = 0; i < parsed.size(); ++i) order[i] = {internal::AssumeTime(parsed[i]), i};
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [time, i] : order) {
    const Pod& pod = parsed[i];
    absl::StatusOr<std::optional<Placement>> p = internal::RecordedPlacement(*cluster, pod);
    if (p.ok() && !p->has_value()) continue;  // Pending, completed or without GPUs.
    // It runs there: a cordon or an unhealthy GPU does not make it hold less.
    absl::Status s = p.ok() ? ::gpushare::internal::ClusterAccess::CommitRunning(*cluster,
                                                                                std::move(**p))
                            : p.status();
    if (!s.ok()) {
      ++r->skipped;
      r->warnings.push_back(absl::StrCat("pod ", pod.request.id, " on node ", pod.node_name,
                                         " skipped: ", s.message()));
      continue;
    }
    ++r->placed;
  }
}

// The reference: everything through nlohmann::json, in the order that gives
// RebuildCluster()'s errors.
absl::StatusOr<Cluster> RebuildClusterReference(std::string_view nodes_json,
                                                std::string_view pods_json,
                                                ClusterOptions options, RebuildReport* r) {
  GPUSHARE_ASSIGN_OR_RETURN(internal::json nodes, internal::ParseJson(nodes_json, "node list"));
  GPUSHARE_ASSIGN_OR_RETURN(internal::json pods, internal::ParseJson(pods_json, "pod list"));
  GPUSHARE_ASSIGN_OR_RETURN(const internal::json* node_items,
                            internal::ListItems(nodes, "node list"));
  GPUSHARE_ASSIGN_OR_RETURN(const internal::json* pod_items,
                            internal::ListItems(pods, "pod list"));
  Cluster cluster(options);
  for (const internal::json& item : *node_items) {
    GPUSHARE_ASSIGN_OR_RETURN(Node node, internal::NodeFromJson(item));
    // A node listed twice is a malformed list (InvalidArgument, as documented),
    // not the cluster's AlreadyExists.
    if (absl::Status s = cluster.AddNode(node); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("node list: ", s.message()));
    }
    ++r->nodes;
  }
  std::vector<Pod> parsed;
  for (const internal::json& item : *pod_items) {
    GPUSHARE_ASSIGN_OR_RETURN(Pod pod, internal::PodFromJson(item));
    parsed.push_back(std::move(pod));
  }
  RestorePlacements(parsed, &cluster, r);
  return cluster;
}

}  // namespace

absl::StatusOr<Cluster> RebuildCluster(std::string_view nodes_json, std::string_view pods_json,
                                       ClusterOptions options, RebuildReport* report) {
  RebuildReport local;
  RebuildReport& r = report ? *report : local;
  r = RebuildReport{};
  std::vector<Node> nodes;
  std::vector<Pod> pods;
  if (!internal::ReadLists(nodes_json, pods_json, &nodes, &pods).ok()) {
    // The reference finds the same first error (a node listed twice comes
    // before a malformed pod there).
    return RebuildClusterReference(nodes_json, pods_json, options, &r);
  }
  return RebuildCluster(nodes, pods, options, &r);
}

absl::StatusOr<Cluster> RebuildCluster(const std::vector<Node>& nodes,
                                       const std::vector<Pod>& pods, ClusterOptions options,
                                       RebuildReport* report) {
  RebuildReport local;
  RebuildReport& r = report ? *report : local;
  r = RebuildReport{};
  Cluster cluster(options);
  ::gpushare::internal::ClusterAccess::Reserve(cluster, nodes.size(), 0, pods.size());
  for (const Node& node : nodes) {
    if (absl::Status s = cluster.AddNode(node); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("node list: ", s.message()));
    }
    ++r.nodes;
  }
  RestorePlacements(pods, &cluster, &r);
  return cluster;
}

absl::StatusOr<std::vector<Pod>> ParsePodList(std::string_view pods_json) {
  return internal::ReadPodList(pods_json);
}

absl::StatusOr<std::vector<Node>> ParseNodeList(std::string_view nodes_json) {
  return internal::ReadNodeList(nodes_json);
}

absl::StatusOr<std::vector<Pod>> ParsePodList(std::string_view pods_json,
                                              std::vector<SkippedItem>* skipped) {
  return internal::ReadPodList(pods_json, skipped);
}

absl::StatusOr<std::vector<Node>> ParseNodeList(std::string_view nodes_json,
                                                std::vector<SkippedItem>* skipped) {
  return internal::ReadNodeList(nodes_json, skipped);
}

}  // namespace gpushare::k8s
