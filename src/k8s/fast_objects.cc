// Whole v1.PodList / v1.NodeList texts read with simdjson (see json_util.h):
// FastPod() and FastNode() follow PodFromJson() and NodeFromJson() in
// objects.cc rule for rule, for the fields and forms they handle, and refuse
// (return false) the rest, which the nlohmann readers then judge.

#include <array>
#include <cctype>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/kubernetes.h"
#include "src/internal/fast_json.h"
#include "src/internal/status_macros.h"
#include "src/k8s/json_util.h"

namespace gpushare::k8s::internal {
namespace {

namespace sj = ::gpushare::internal::sj;
using Kind = sj::element_type;
using ::gpushare::internal::ArrayOf;
using ::gpushare::internal::ObjectOf;

bool EqualIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// The members named in `names` as Member() finds them: a null value is
// absent; a duplicate key gives its last value. False (refused) when `obj`
// is not an object, or when a key matches a name only ignoring case (Member()
// would then look further).
template <size_t N>
bool KubeMembers(sj::element obj, const std::array<std::string_view, N>& names,
                 std::array<sj::element, N>* values, std::array<bool, N>* present) {
  if (obj.type() != Kind::OBJECT) return false;
  present->fill(false);
  for (sj::key_value_pair kv : ObjectOf(obj)) {
    size_t i = 0;
    while (i < N && kv.key != names[i]) ++i;
    if (i < N) {
      (*values)[i] = kv.value;
      (*present)[i] = kv.value.type() != Kind::NULL_VALUE;
      continue;
    }
    for (const std::string_view name : names) {
      if (EqualIgnoringCase(kv.key, name)) return false;
    }
  }
  return true;
}

// StringMember(): absent is "", present must be a string.
bool KubeString(bool present, sj::element v, std::string* out) {
  out->clear();
  if (!present) return true;
  std::string_view s;
  if (!::gpushare::internal::FastString(v, &s)) return false;
  out->assign(s.data(), s.size());
  return true;
}

// StringMap(): absent is empty; an object of strings.
bool KubeStringMap(bool present, sj::element v, std::map<std::string, std::string>* out) {
  out->clear();
  if (!present) return true;
  if (v.type() != Kind::OBJECT) return false;
  for (sj::key_value_pair kv : ObjectOf(v)) {
    std::string_view s;
    if (!::gpushare::internal::FastString(kv.value, &s)) return false;
    out->insert_or_assign(std::string(kv.key), std::string(s));
  }
  return true;
}

// QuantityText() then `parse`: strings and integers (floats are refused:
// the reference prints them as nlohmann does).
template <typename ParseFn>
bool KubeQuantity(sj::element v, ParseFn parse, int64_t* out) {
  std::string text;
  switch (v.type()) {
    case Kind::STRING:
      text = std::string(v.get_string().value_unsafe());
      break;
    case Kind::INT64:
      text = absl::StrCat(v.get_int64().value_unsafe());
      break;
    case Kind::UINT64:
      text = absl::StrCat(v.get_uint64().value_unsafe());
      break;
    default:
      return false;
  }
  absl::StatusOr<int64_t> value = parse(text);
  if (!value.ok()) return false;
  *out = *value;
  return true;
}

// The resources a pod or node sums, in one pass over a section (exact keys,
// as json::find() matches them; null is absent).
constexpr std::array<std::string_view, 4> kResources = {kGpuMemResource, kWholeGpuResource,
                                                        "cpu", "memory"};

bool ContainerResources(sj::element resources, int64_t* mem, int64_t* whole, int64_t* cpu,
                        int64_t* host) {
  constexpr std::array<std::string_view, 2> kSections = {"limits", "requests"};
  std::array<sj::element, 2> section;
  std::array<bool, 2> has;
  if (!KubeMembers(resources, kSections, &section, &has)) return false;
  // Per resource, the section read first: limits for GPUs, requests for
  // cpu and memory; the other one when the first lacks it.
  std::array<std::array<sj::element, 4>, 2> value;
  std::array<std::array<bool, 4>, 2> found;
  for (int s = 0; s < 2; ++s) {
    found[s].fill(false);
    if (!has[s]) continue;
    if (section[s].type() != Kind::OBJECT) return false;
    ::gpushare::internal::Members(ObjectOf(section[s]), kResources, &value[s],
                                  &found[s]);
    for (int r = 0; r < 4; ++r) {
      if (found[s][r] && value[s][r].type() == Kind::NULL_VALUE) found[s][r] = false;
    }
  }
  int64_t* out[4] = {mem, whole, cpu, host};
  for (int r = 0; r < 4; ++r) {
    const int first = r < 2 ? 0 : 1;
    const int s = found[first][r] ? first : found[1 - first][r] ? 1 - first : -1;
    *out[r] = 0;
    if (s < 0) continue;
    const bool ok = r < 2   ? KubeQuantity(value[s][r], QuantityInteger, out[r])
                    : r == 2 ? KubeQuantity(value[s][r], QuantityMilli, out[r])
                             : KubeQuantity(value[s][r], QuantityMiB, out[r]);
    if (!ok) return false;
  }
  return true;
}

bool FastPod(sj::element j, Pod* pod) {
  constexpr std::array<std::string_view, 3> kPod = {"metadata", "status", "spec"};
  constexpr std::array<std::string_view, 6> kMetadata = {
      "name", "namespace", "uid", "labels", "annotations", "deletionTimestamp"};
  constexpr std::array<std::string_view, 4> kSpec = {"nodeName", "nodeSelector", "containers",
                                                     "affinity"};
  constexpr std::array<std::string_view, 2> kContainer = {"name", "resources"};
  std::array<sj::element, 6> f;
  std::array<bool, 6> has;
  std::array<sj::element, 3> top;
  std::array<bool, 3> top_has;
  if (!KubeMembers(j, kPod, &top, &top_has) || !top_has[0]) return false;
  if (!KubeMembers(top[0], kMetadata, &f, &has)) return false;
  if (!KubeString(has[0], f[0], &pod->name) || pod->name.empty()) return false;
  std::string ns;
  if (!KubeString(has[1], f[1], &ns)) return false;
  if (!ns.empty()) pod->namespace_name = std::move(ns);
  if (!KubeString(has[2], f[2], &pod->uid)) return false;
  if (!KubeStringMap(has[3], f[3], &pod->labels)) return false;
  if (!KubeStringMap(has[4], f[4], &pod->annotations)) return false;
  pod->terminating = has[5];
  pod->request.id = absl::StrCat(pod->namespace_name, "/", pod->name);
  if (top_has[1]) {
    std::array<sj::element, 1> phase;
    std::array<bool, 1> phase_has;
    if (!KubeMembers(top[1], std::array<std::string_view, 1>{"phase"}, &phase, &phase_has) ||
        !KubeString(phase_has[0], phase[0], &pod->phase)) {
      return false;
    }
  }
  if (!top_has[2]) return true;
  std::array<sj::element, 4> spec;
  std::array<bool, 4> spec_has;
  if (!KubeMembers(top[2], kSpec, &spec, &spec_has)) return false;
  if (!KubeString(spec_has[0], spec[0], &pod->node_name)) return false;
  if (!KubeStringMap(spec_has[1], spec[1], &pod->request.node_selector)) return false;
  if (spec_has[2]) {
    if (spec[2].type() != Kind::ARRAY) return false;
    std::array<sj::element, 2> c;
    std::array<bool, 2> c_has;
    for (sj::element container : ArrayOf(spec[2])) {
      if (!KubeMembers(container, kContainer, &c, &c_has)) return false;
      // The name is only read to be checked (it names errors).
      if (c_has[0] && c[0].type() != Kind::STRING) return false;
      if (!c_has[1]) continue;
      int64_t mem = 0, whole = 0, cpu = 0, host = 0;
      if (!ContainerResources(c[1], &mem, &whole, &cpu, &host)) return false;
      pod->request.gpu_memory += mem;
      pod->request.whole_gpus += whole;
      pod->request.cpu += cpu;
      pod->request.host_memory += host;
    }
  }
  if (!PodRequestFromMetadata(pod).ok()) return false;
  if (spec_has[3]) {
    // Required node affinity is left to PodFromJson(); other affinities
    // (pod affinity, preferences) mean nothing here.
    std::array<sj::element, 1> node_affinity;
    std::array<bool, 1> node_affinity_has;
    if (!KubeMembers(spec[3], std::array<std::string_view, 1>{"nodeAffinity"}, &node_affinity,
                     &node_affinity_has)) {
      return false;
    }
    if (node_affinity_has[0]) {
      std::array<sj::element, 1> required;
      std::array<bool, 1> required_has;
      if (!KubeMembers(node_affinity[0],
                       std::array<std::string_view, 1>{
                           "requiredDuringSchedulingIgnoredDuringExecution"},
                       &required, &required_has) ||
          required_has[0]) {
        return false;
      }
    }
  }
  return true;
}

bool FastNode(sj::element j, Node* node) {
  constexpr std::array<std::string_view, 3> kNode = {"metadata", "spec", "status"};
  constexpr std::array<std::string_view, 3> kMetadata = {"name", "labels", "annotations"};
  constexpr std::array<std::string_view, 3> kStatus = {"capacity", "allocatable", "addresses"};
  constexpr std::array<std::string_view, 3> kCapacity = {kGpuMemResource, kGpuCountResource,
                                                         kWholeGpuResource};
  std::array<sj::element, 3> top, m, st;
  std::array<bool, 3> top_has, m_has, st_has;
  if (!KubeMembers(j, kNode, &top, &top_has) || !top_has[0]) return false;
  if (!KubeMembers(top[0], kMetadata, &m, &m_has)) return false;
  if (!KubeString(m_has[0], m[0], &node->name) || node->name.empty()) return false;
  if (!KubeStringMap(m_has[1], m[1], &node->labels)) return false;
  if (top_has[1]) {
    std::array<sj::element, 1> u;
    std::array<bool, 1> u_has;
    if (!KubeMembers(top[1], std::array<std::string_view, 1>{"unschedulable"}, &u, &u_has)) {
      return false;
    }
    if (u_has[0]) {
      bool unschedulable = false;
      if (!::gpushare::internal::FastBool(u[0], &unschedulable)) return false;
      node->schedulable = !unschedulable;
    }
  }
  int64_t memory = 0, count = 0, whole = 0;
  bool has_count = false;
  if (top_has[2]) {
    if (!KubeMembers(top[2], kStatus, &st, &st_has)) return false;
    const int c = st_has[0] ? 0 : st_has[1] ? 1 : -1;
    if (c >= 0) {
      if (st[c].type() != Kind::OBJECT) return false;
      std::array<sj::element, 3> v;
      std::array<bool, 3> v_has;
      ::gpushare::internal::Members(ObjectOf(st[c]), kCapacity, &v, &v_has);
      int64_t* out[3] = {&memory, &count, &whole};
      for (int r = 0; r < 3; ++r) {
        if (!v_has[r] || v[r].type() == Kind::NULL_VALUE) continue;
        if (!KubeQuantity(v[r], QuantityInteger, out[r])) return false;
        if (r == 1) has_count = true;
      }
    }
    if (st_has[2] && st[2].type() == Kind::ARRAY) {
      constexpr std::array<std::string_view, 2> kAddress = {"type", "address"};
      std::array<sj::element, 2> a;
      std::array<bool, 2> a_has;
      std::string type, address;
      for (sj::element entry : ArrayOf(st[2])) {
        if (!KubeMembers(entry, kAddress, &a, &a_has) || !KubeString(a_has[0], a[0], &type) ||
            !KubeString(a_has[1], a[1], &address)) {
          return false;
        }
        if (node->address.empty() || type == "InternalIP") node->address = address;
        if (type == "InternalIP") break;
      }
    }
  }
  if (!NodeGpus(memory, has_count ? std::optional<int64_t>(count) : std::nullopt, whole, node)
           .ok()) {
    return false;
  }
  std::map<std::string, std::string> annotations;
  if (!KubeStringMap(m_has[2], m[2], &annotations)) return false;
  return NodeTopologyAndSharing(annotations, memory, node).ok();
}

// ListItems(): the array itself, or the "items" of a list object (none when
// absent or null). nullopt when the reference must judge.
std::optional<std::optional<sj::array>> FastItems(sj::element root) {
  if (root.type() == Kind::ARRAY) return std::optional<sj::array>(ArrayOf(root));
  std::array<sj::element, 1> items;
  std::array<bool, 1> has;
  if (!KubeMembers(root, std::array<std::string_view, 1>{"items"}, &items, &has)) {
    return std::nullopt;
  }
  if (!has[0]) return std::optional<sj::array>();
  if (items[0].type() != Kind::ARRAY) return std::nullopt;
  return std::optional<sj::array>(ArrayOf(items[0]));
}

thread_local int fast_items = 0;

// The name of a list item the readers refused, if it has one: metadata.name,
// after "<metadata.namespace>/" when there is one.
std::string NameOf(const json& item) {
  const json* metadata = Member(item, "metadata");
  const json* name = metadata == nullptr ? nullptr : Member(*metadata, "name");
  if (name == nullptr || !name->is_string()) return "";
  const json* ns = Member(*metadata, "namespace");
  if (ns != nullptr && ns->is_string() && !ns->get_ref<const std::string&>().empty()) {
    return absl::StrCat(ns->get_ref<const std::string&>(), "/", name->get_ref<const std::string&>());
  }
  return name->get<std::string>();
}

// Reads every item with `fast`, else with `reference` on the item's own text;
// nullopt when the whole text must go to the reference reader.
template <typename T, typename FastFn, typename ReferenceFn>
std::optional<absl::StatusOr<std::vector<T>>> ReadList(std::string_view text, FastFn fast,
                                                       ReferenceFn reference,
                                                       std::vector<SkippedItem>* skipped) {
  fast_items = 0;
  sj::parser parser;
  sj::element root;
  if (parser.parse(text.data(), text.size()).get(root) != simdjson::SUCCESS) return std::nullopt;
  std::optional<std::optional<sj::array>> items = FastItems(root);
  if (!items.has_value()) return std::nullopt;
  std::vector<T> out;
  if (!items->has_value()) return absl::StatusOr<std::vector<T>>(std::move(out));
  out.reserve((*items)->size());
  for (sj::element item : **items) {
    T value;
    if (!fast(item, &value)) {
      const json j = json::parse(simdjson::minify(item), nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) return std::nullopt;
      absl::StatusOr<T> slow = reference(j);
      if (!slow.ok() && skipped != nullptr) {
        skipped->push_back({NameOf(j), std::string(slow.status().message())});
        continue;
      }
      if (!slow.ok()) return absl::StatusOr<std::vector<T>>(slow.status());
      value = *std::move(slow);
    } else {
      ++fast_items;
    }
    out.push_back(std::move(value));
  }
  return absl::StatusOr<std::vector<T>>(std::move(out));
}

}  // namespace

int FastItemsOfLastRead() { return fast_items; }

namespace {

// The reference reader of a whole list: nlohmann/json, `from_json` per item.
template <typename T>
absl::StatusOr<std::vector<T>> ReadListReference(std::string_view text, const char* what,
                                                 absl::StatusOr<T> (*from_json)(const json&),
                                                 std::vector<SkippedItem>* skipped = nullptr) {
  GPUSHARE_ASSIGN_OR_RETURN(json list, ParseJson(text, what));
  GPUSHARE_ASSIGN_OR_RETURN(const json* items, ListItems(list, what));
  std::vector<T> out;
  out.reserve(items->size());
  for (const json& item : *items) {
    absl::StatusOr<T> value = from_json(item);
    if (!value.ok() && skipped != nullptr) {
      skipped->push_back({NameOf(item), std::string(value.status().message())});
      continue;
    }
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<Pod>> ReadPodListReference(std::string_view text) {
  return ReadListReference<Pod>(text, "pod list", PodFromJson);
}

absl::StatusOr<std::vector<Node>> ReadNodeListReference(std::string_view text) {
  return ReadListReference<Node>(text, "node list", NodeFromJson);
}

absl::StatusOr<std::vector<Pod>> ReadPodList(std::string_view text,
                                             std::vector<SkippedItem>* skipped) {
  const size_t before = skipped == nullptr ? 0 : skipped->size();
  auto read = ReadList<Pod>(text, FastPod, PodFromJson, skipped);
  if (read.has_value()) return *std::move(read);
  if (skipped != nullptr) skipped->resize(before);  // The reference reads it all again.
  return ReadListReference<Pod>(text, "pod list", PodFromJson, skipped);
}

absl::StatusOr<std::vector<Node>> ReadNodeList(std::string_view text,
                                               std::vector<SkippedItem>* skipped) {
  const size_t before = skipped == nullptr ? 0 : skipped->size();
  auto read = ReadList<Node>(text, FastNode, NodeFromJson, skipped);
  if (read.has_value()) return *std::move(read);
  if (skipped != nullptr) skipped->resize(before);
  return ReadListReference<Node>(text, "node list", NodeFromJson, skipped);
}

absl::Status ReadLists(std::string_view nodes_json, std::string_view pods_json,
                       std::vector<Node>* nodes, std::vector<Pod>* pods,
                       std::vector<SkippedItem>* skipped_nodes,
                       std::vector<SkippedItem>* skipped_pods) {
  absl::StatusOr<std::vector<Node>> n = ReadNodeList(nodes_json, skipped_nodes);
  absl::StatusOr<std::vector<Pod>> p =
      n.ok() ? ReadPodList(pods_json, skipped_pods) : absl::StatusOr<std::vector<Pod>>(n.status());
  if (n.ok() && p.ok()) {
    *nodes = *std::move(n);
    *pods = *std::move(p);
    return absl::OkStatus();
  }
  // The first error in the reference's order: both texts, both lists, the
  // nodes, the pods.
  GPUSHARE_ASSIGN_OR_RETURN(json node_list, ParseJson(nodes_json, "node list"));
  GPUSHARE_ASSIGN_OR_RETURN(json pod_list, ParseJson(pods_json, "pod list"));
  GPUSHARE_RETURN_IF_ERROR(ListItems(node_list, "node list").status());
  GPUSHARE_RETURN_IF_ERROR(ListItems(pod_list, "pod list").status());
  GPUSHARE_RETURN_IF_ERROR(n.status());
  return p.status();
}

}  // namespace gpushare::k8s::internal
