// Ledger: which container an Allocate is for (see allocation.h).

#include "device-plugin/allocation.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gpushare/kubernetes.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {

namespace {

using json = nlohmann::json;

constexpr char kIdxAnnotation[] = "ALIYUN_COM_GPU_MEM_IDX";
constexpr char kAssignedAnnotation[] = "ALIYUN_COM_GPU_MEM_ASSIGNED";
constexpr char kAssumeTimeAnnotation[] = "ALIYUN_COM_GPU_MEM_ASSUME_TIME";
constexpr char kAllocationAnnotation[] = "scheduler.framework.gpushare.allocation";

std::string StringAt(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// limits (else requests) `resource` of a container, 0 when absent.
absl::StatusOr<int64_t> ContainerQuantity(const json& container, const char* resource,
                                          const std::string& where) {
  auto resources = container.find("resources");
  if (resources == container.end() || !resources->is_object()) return 0;
  for (const char* part : {"limits", "requests"}) {
    auto list = resources->find(part);
    if (list == resources->end() || !list->is_object()) continue;
    auto q = list->find(resource);
    if (q == list->end()) continue;
    std::string text = q->is_string() ? q->get<std::string>() : q->dump();
    absl::StatusOr<int64_t> n = k8s::QuantityInteger(text);
    if (!n.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", part, " ", resource, ": ", n.status().message()));
    }
    return *n;
  }
  return 0;
}

absl::StatusOr<NodePod> ParseOne(const json& item) {
  if (!item.is_object()) return absl::InvalidArgumentError("a pod is not an object");
  NodePod pod;
  const json empty = json::object();
  const json& meta = item.contains("metadata") ? item["metadata"] : empty;
  const json& spec = item.contains("spec") ? item["spec"] : empty;
  const json& status = item.contains("status") ? item["status"] : empty;
  if (!meta.is_object() || !spec.is_object() || !status.is_object()) {
    return absl::InvalidArgumentError("a pod's metadata, spec or status is not an object");
  }
  pod.name = StringAt(meta, "name");
  pod.namespace_name = StringAt(meta, "namespace");
  if (pod.namespace_name.empty()) pod.namespace_name = "default";
  pod.uid = StringAt(meta, "uid");
  pod.creation_timestamp = StringAt(meta, "creationTimestamp");
  pod.terminating = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  pod.phase = StringAt(status, "phase");
  if (pod.name.empty()) return absl::InvalidArgumentError("a pod has no metadata.name");
  if (auto a = meta.find("annotations"); a != meta.end() && a->is_object()) {
    for (const auto& [k, v] : a->items()) {
      if (v.is_string()) pod.annotations[k] = v.get<std::string>();
    }
  }
  for (const char* list : {"initContainers", "containers"}) {
    auto cs = spec.find(list);
    if (cs == spec.end() || !cs->is_array()) continue;
    for (const json& c : *cs) {
      if (!c.is_object()) return absl::InvalidArgumentError("a container is not an object");
      ContainerDemand d;
      d.name = StringAt(c, "name");
      d.init = std::string_view(list) == "initContainers";
      const std::string where = absl::StrCat("pod ", pod.id(), " container ", d.name);
      absl::StatusOr<int64_t> mem = ContainerQuantity(c, k8s::kGpuMemResource, where);
      if (!mem.ok()) return mem.status();
      absl::StatusOr<int64_t> whole = ContainerQuantity(c, k8s::kWholeGpuResource, where);
      if (!whole.ok()) return whole.status();
      d.gpu_mem = *mem;
      d.whole_gpus = *whole;
      pod.containers.push_back(std::move(d));
    }
  }
  return pod;
}

int64_t Demand(const ContainerDemand& c, Resource r) {
  switch (r) {
    case Resource::kGpuMem: return c.gpu_mem;
    case Resource::kWholeGpu: return c.whole_gpus;
    case Resource::kGpuCount: return 0;
  }
  return 0;
}

int64_t AssumeTime(const NodePod& pod) {
  auto it = pod.annotations.find(kAssumeTimeAnnotation);
  int64_t t = 0;
  if (it != pod.annotations.end() && absl::SimpleAtoi(it->second, &t)) return t;
  return std::numeric_limits<int64_t>::max();
}

// GPUs recorded on the pod (ascending), from ALIYUN_COM_GPU_MEM_IDX, else
// the allocation annotation; empty when neither is present.
absl::StatusOr<std::vector<int>> GpusOf(const NodePod& pod, const Inventory& inv) {
  std::set<int> gpus;
  auto bad_gpu = [&](std::string_view annotation, std::string_view value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pod ", pod.id(), ": ", std::string(annotation), " \"", std::string(value), "\" does not name GPUs of this node (it has ",
        inv.gpu_count(), ")"));
  };
  auto idx = pod.annotations.find(kIdxAnnotation);
  if (idx != pod.annotations.end() && !idx->second.empty() && idx->second != "-1") {
    for (absl::string_view part : absl::StrSplit(idx->second, absl::ByAnyChar("-,"))) {
      int g = 0;
      if (!absl::SimpleAtoi(part, &g) || g < 0 || g >= inv.gpu_count()) {
        return bad_gpu(kIdxAnnotation, idx->second);
      }
      gpus.insert(g);
    }
    return std::vector<int>(gpus.begin(), gpus.end());
  }
  auto alloc = pod.annotations.find(kAllocationAnnotation);
  if (alloc == pod.annotations.end()) return std::vector<int>();
  json j = json::parse(alloc->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad_gpu(kAllocationAnnotation, alloc->second);
  for (const auto& [container, per_gpu] : j.items()) {
    if (!per_gpu.is_object()) return bad_gpu(kAllocationAnnotation, alloc->second);
    for (const auto& [gpu, units] : per_gpu.items()) {
      int g = 0;
      if (!absl::SimpleAtoi(gpu, &g) || g < 0 || g >= inv.gpu_count()) {
        return bad_gpu(kAllocationAnnotation, alloc->second);
      }
      gpus.insert(g);
    }
  }
  return std::vector<int>(gpus.begin(), gpus.end());
}

// Per-container units from an allocation annotation that has one entry per
// GPU container ({"<index among spec.containers>":{"<gpu>":units}}), each
// summing to that container's request; nullopt otherwise.
std::optional<std::map<int, int64_t>> AnnotatedShare(const NodePod& pod, size_t container) {
  auto alloc = pod.annotations.find(kAllocationAnnotation);
  if (alloc == pod.annotations.end()) return std::nullopt;
  json j = json::parse(alloc->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  size_t gpu_containers = 0;
  int app_index = -1, wanted = -1;
  for (size_t i = 0; i < pod.containers.size(); ++i) {
    if (pod.containers[i].init) continue;
    ++app_index;
    if (i == container) wanted = app_index;
    if (pod.containers[i].gpu_mem > 0) ++gpu_containers;
  }
  if (wanted < 0 || j.size() != gpu_containers || gpu_containers < 2) return std::nullopt;
  auto entry = j.find(absl::StrCat(wanted));
  if (entry == j.end() || !entry->is_object()) return std::nullopt;
  std::map<int, int64_t> share;
  int64_t sum = 0;
  for (const auto& [gpu, units] : entry->items()) {
    int g = 0;
    if (!absl::SimpleAtoi(gpu, &g) || !units.is_number_integer() || units.get<int64_t>() < 0) {
      return std::nullopt;
    }
    share[g] = units.get<int64_t>();
    sum += units.get<int64_t>();
  }
  if (sum != pod.containers[container].gpu_mem) return std::nullopt;
  return share;
}

// Fills grant->gpus and grant->units for container `c` of `pod`.
absl::Status Plan(const NodePod& pod, size_t c, const Inventory& inv, Grant* grant) {
  absl::StatusOr<std::vector<int>> gpus = GpusOf(pod, inv);
  if (!gpus.ok()) return gpus.status();
  const ContainerDemand& want = pod.containers[c];
  if (grant->resource == Resource::kWholeGpu) {
    // Each container takes the next of the pod's GPUs; init containers
    // start again at the first.
    size_t start = 0;
    for (size_t i = 0; i < c; ++i) {
      if (pod.containers[i].init == want.init) start += pod.containers[i].whole_gpus;
    }
    if (start + want.whole_gpus > gpus->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pod ", pod.id(), ": its containers ask ", start + want.whole_gpus,
          " whole GPUs, its annotations record ", gpus->size()));
    }
    for (size_t k = start; k < start + want.whole_gpus; ++k) {
      grant->gpus.push_back((*gpus)[k]);
      grant->units.push_back(inv.units((*gpus)[k]));
    }
    return absl::OkStatus();
  }
  if (std::optional<std::map<int, int64_t>> share = AnnotatedShare(pod, c)) {
    for (const auto& [g, units] : *share) {
      if (units == 0) continue;
      if (g < 0 || g >= inv.gpu_count()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pod ", pod.id(), ": its allocation names GPU ", g, ", absent here"));
      }
      grant->gpus.push_back(g);
      grant->units.push_back(units);
    }
    return absl::OkStatus();
  }
  if (gpus->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("pod ", pod.id(), ": no GPU recorded"));
  }
  // Round-robin over the pod's GPUs, continuing after the previous
  // containers of the same kind (init or not).
  size_t cursor = 0;
  for (size_t i = 0; i < c; ++i) {
    if (pod.containers[i].init == want.init) cursor += pod.containers[i].gpu_mem;
  }
  std::vector<int64_t> per(gpus->size(), 0);
  for (int64_t u = 0; u < want.gpu_mem; ++u) ++per[(cursor + u) % gpus->size()];
  for (size_t k = 0; k < gpus->size(); ++k) {
    if (per[k] == 0) continue;
    grant->gpus.push_back((*gpus)[k]);
    grant->units.push_back(per[k]);
  }
  return absl::OkStatus();
}

}  // namespace

const char* ResourceName(Resource resource) {
  switch (resource) {
    case Resource::kGpuMem: return k8s::kGpuMemResource;
    case Resource::kGpuCount: return k8s::kGpuCountResource;
    case Resource::kWholeGpu: return k8s::kWholeGpuResource;
  }
  return "?";
}

absl::StatusOr<NodePod> ParseNodePod(const nlohmann::json& pod) { return ParseOne(pod); }

absl::StatusOr<std::vector<NodePod>> ParseNodePods(std::string_view pod_list_json,
                                                   std::vector<std::string>* skipped) {
  json j = json::parse(pod_list_json, nullptr, false);
  if (j.is_discarded()) return absl::InvalidArgumentError("the pod list is not JSON");
  const json* items = &j;
  if (j.is_object()) {
    auto it = j.find("items");
    if (it == j.end()) return absl::InvalidArgumentError("the pod list has no items");
    items = &*it;
  }
  std::vector<NodePod> pods;
  if (items->is_null()) return pods;
  if (!items->is_array()) return absl::InvalidArgumentError("the pod list's items are not a list");
  pods.reserve(items->size());
  for (const json& item : *items) {
    absl::StatusOr<NodePod> pod = ParseOne(item);
    if (pod.ok()) {
      pods.push_back(*std::move(pod));
    } else if (skipped != nullptr) {
      skipped->emplace_back(pod.status().message());
    }
  }
  return pods;
}

absl::StatusOr<DeviceSet> DevicesOf(Resource resource, const std::vector<std::string>& ids,
                                    const Inventory& inv) {
  if (resource == Resource::kGpuCount) {
    return absl::FailedPreconditionError(absl::StrCat(
        ResourceName(resource), " is advertised to count this node's GPUs, not to be asked for: ask ",
        k8s::kGpuMemResource, " units, with the pod label ", k8s::kGpuCountResource,
        ": \"M\" to spread them over M GPUs"));
  }
  if (ids.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", ResourceName(resource), " device ids to allocate"));
  }
  std::map<int, int64_t> per_gpu;
  std::set<std::string_view> seen;
  for (const std::string& id : ids) {
    std::optional<int> gpu = inv.GpuOfDevice(id);
    const bool mem_id = id.find("-mem-") != std::string::npos;
    if (!gpu.has_value() || mem_id != (resource == Resource::kGpuMem)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device \"", id, "\" is not one of this node's ", ResourceName(resource), " devices"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrCat("device \"", id, "\" is named twice"));
    }
    per_gpu[*gpu] += resource == Resource::kGpuMem ? 1 : inv.units(*gpu);
  }
  DeviceSet set;
  for (const auto& [g, units] : per_gpu) {
    set.gpus.push_back(g);
    set.units.push_back(units);
  }
  return set;
}

std::map<std::string, std::string> MakeEnv(const Grant& grant, const NodePod* pod,
                                           const Inventory& inv,
                                           const AllocationOptions& options) {
  std::map<std::string, std::string> env;
  std::vector<std::string> uuids;
  for (int g : grant.gpus) uuids.push_back(inv.gpus()[g].uuid);
  env["NVIDIA_VISIBLE_DEVICES"] = uuids.empty() ? "void" : absl::StrJoin(uuids, ",");
  if (grant.resource != Resource::kGpuMem) return env;
  const bool equal = std::all_of(grant.units.begin(), grant.units.end(),
                                 [&](int64_t u) { return u == grant.units.front(); });
  env["ALIYUN_COM_GPU_MEM_CONTAINER"] =
      grant.units.empty() ? "0"
      : equal             ? absl::StrCat(grant.units.front())
                          : absl::StrJoin(grant.units, ",");
  env["ALIYUN_COM_GPU_MEM_DEV"] =
      grant.gpus.empty() ? "0" : absl::StrCat(inv.units(grant.gpus.front()));
  env["ALIYUN_COM_GPU_MEM_IDX"] = absl::StrJoin(grant.gpus, "-");
  int64_t pod_units = 0;
  if (pod != nullptr) {
    for (const ContainerDemand& c : pod->containers) {
      if (!c.init) pod_units += c.gpu_mem;
    }
  } else {
    for (int64_t u : grant.units) pod_units += u;
  }
  env["ALIYUN_COM_GPU_MEM_POD"] = absl::StrCat(pod_units);
  if (options.hami_limits) {
    for (size_t k = 0; k < grant.units.size(); ++k) {
      env[absl::StrCat("CUDA_DEVICE_MEMORY_LIMIT_", k)] =
          absl::StrCat(grant.units[k] * MibPerUnit(inv.unit()), "m");
    }
  }
  return env;
}

std::vector<Ledger::Candidate> Ledger::Candidates(Resource resource, int64_t count,
                                                 const std::vector<NodePod>& pods,
                                                 std::vector<std::string>* why_not) const {
  std::vector<Candidate> candidates;
  for (const NodePod& pod : pods) {
    bool asks = false;
    for (const ContainerDemand& c : pod.containers) asks = asks || Demand(c, resource) > 0;
    if (!asks) continue;
    auto reject = [&](std::string_view why) {
      why_not->push_back(absl::StrCat(pod.id(), ": ", std::string(why)));
    };
    if (pod.phase == "Succeeded" || pod.phase == "Failed") { reject("finished"); continue; }
    if (pod.terminating) { reject("being deleted"); continue; }
    auto assigned = pod.annotations.find(kAssignedAnnotation);
    if (assigned != pod.annotations.end() && assigned->second == "true") {
      reject("already assigned");
      continue;
    }
    if (pod.annotations.count(kIdxAnnotation) == 0 &&
        pod.annotations.count(kAllocationAnnotation) == 0) {
      reject("not placed by a gpushare scheduler (no ALIYUN_COM_GPU_MEM_IDX annotation)");
      continue;
    }
    std::optional<size_t> found;
    for (size_t i = 0; i < pod.containers.size() && !found; ++i) {
      if (Demand(pod.containers[i], resource) == count &&
          !Served(pod.uid, pod.containers[i].name, resource)) {
        found = i;
      }
    }
    if (!found) {
      reject(absl::StrCat("no container left asking ", count));
      continue;
    }
    candidates.push_back({&pod, *found});
  }
  // The kubelet's order of admission (see allocation.h): first the pods it
  // found bound at its start, by creation time; then the others as bound.
  auto order = [&](const Candidate& c) {
    const int64_t bound = AssumeTime(*c.pod);
    const bool at_start = kubelet_start_ns_ > 0 && bound < kubelet_start_ns_;
    return std::make_tuple(!at_start, at_start ? c.pod->creation_timestamp : std::string(), bound,
                           c.pod->creation_timestamp, c.pod->id());
  };
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](const Candidate& a, const Candidate& b) { return order(a) < order(b); });
  return candidates;
}

// Fills the pod, container and completes_pod of `grant` from `c`.
void Ledger::Label(const Candidate& c, Grant* grant) const {
  grant->pod_uid = c.pod->uid;
  grant->pod = c.pod->id();
  grant->container = c.pod->containers[c.container].name;
  grant->completes_pod = true;
  for (size_t i = 0; i < c.pod->containers.size(); ++i) {
    const ContainerDemand& d = c.pod->containers[i];
    for (Resource r : {Resource::kGpuMem, Resource::kWholeGpu}) {
      if (Demand(d, r) > 0 && !(i == c.container && r == grant->resource) &&
          !Served(c.pod->uid, d.name, r)) {
        grant->completes_pod = false;
      }
    }
  }
}

absl::StatusOr<Grant> Ledger::Match(Resource resource, int64_t count,
                                    const std::vector<NodePod>& pods, const Inventory& inv,
                                    const AllocationOptions& options) const {
  if (resource == Resource::kGpuCount) return DevicesOf(resource, {}, inv).status();
  std::vector<std::string> why_not;
  std::vector<Candidate> candidates = Candidates(resource, count, pods, &why_not);
  if (candidates.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no pod bound to this node has a container waiting for ", count, " ",
        ResourceName(resource), why_not.empty() ? "" : " (", absl::StrJoin(why_not, "; "),
        why_not.empty() ? "" : ")"));
  }
  Grant best;
  best.resource = resource;
  const Candidate& first = candidates.front();
  absl::Status planned = Plan(*first.pod, first.container, inv, &best);
  if (!planned.ok()) return planned;
  Label(first, &best);
  best.env = MakeEnv(best, first.pod, inv, options);
  for (size_t k = 1; k < candidates.size() && !best.ambiguous; ++k) {
    Grant other;
    other.resource = resource;
    if (!Plan(*candidates[k].pod, candidates[k].container, inv, &other).ok()) continue;
    best.ambiguous = other.gpus != best.gpus || other.units != best.units;
  }
  return best;
}

absl::StatusOr<Grant> Ledger::Allocate(Resource resource, const std::vector<std::string>& ids,
                                       const std::vector<NodePod>& pods, const Inventory& inv,
                                       const AllocationOptions& options) const {
  absl::StatusOr<DeviceSet> devices = DevicesOf(resource, ids, inv);
  if (!devices.ok()) return devices.status();
  Grant grant;
  grant.resource = resource;
  grant.gpus = devices->gpus;
  grant.units = devices->units;
  grant.device_ids = ids;
  // The candidate whose plan is what the ids name, else the one predicted.
  std::vector<std::string> why_not;
  std::vector<Candidate> candidates =
      Candidates(resource, static_cast<int64_t>(ids.size()), pods, &why_not);
  const Candidate* chosen = nullptr;
  for (const Candidate& c : candidates) {
    Grant plan;
    plan.resource = resource;
    if (Plan(*c.pod, c.container, inv, &plan).ok() && plan.gpus == grant.gpus &&
        plan.units == grant.units) {
      chosen = &c;
      break;
    }
  }
  if (chosen == nullptr && !candidates.empty()) {
    chosen = &candidates.front();
    grant.disagrees = true;
  }
  if (chosen != nullptr) {
    Label(*chosen, &grant);
    grant.identified = true;
  }
  // The other resource must not hold any of these GPUs (another pod's).
  const Resource other =
      resource == Resource::kGpuMem ? Resource::kWholeGpu : Resource::kGpuMem;
  for (const auto& [id, h] : held_) {
    const HeldDevice& d = h.device;
    if (d.resource != other || (grant.identified && d.pod_uid == grant.pod_uid)) continue;
    if (std::find(grant.gpus.begin(), grant.gpus.end(), d.gpu) == grant.gpus.end()) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", d.gpu, " (", inv.gpus()[d.gpu].uuid, ") is in use through ", ResourceName(other),
        d.pod.empty() ? "" : " by pod ", d.pod, ": it cannot also be allocated as ",
        ResourceName(resource), grant.identified ? " to pod " : "", grant.pod));
  }
  for (const std::string& id : ids) {
    grant.devices.push_back(
        HeldDevice{id, resource, *inv.GpuOfDevice(id), grant.pod_uid, grant.pod});
  }
  grant.env = MakeEnv(grant, chosen != nullptr ? chosen->pod : nullptr, inv, options);
  return grant;
}

absl::StatusOr<std::vector<int>> RecordedGpus(const NodePod& pod, const Inventory& inventory) {
  return GpusOf(pod, inventory);
}

void Ledger::Record(const Grant& grant, int64_t now_ns) {
  if (grant.identified || grant.device_ids.empty()) {
    served_[{grant.pod_uid, grant.container, grant.resource}] = now_ns;
  }
  for (const HeldDevice& d : grant.devices) held_[d.device_id] = Holding{d, now_ns};
}

void Ledger::RecordServed(const std::string& pod_uid, const std::string& container,
                          Resource resource) {
  served_[{pod_uid, container, resource}] = 0;
}

bool Ledger::Served(const std::string& pod_uid, const std::string& container,
                    Resource resource) const {
  return served_.count({pod_uid, container, resource}) > 0;
}

std::vector<Ledger::Key> Ledger::Reconcile(const std::vector<Key>& kubelet, int64_t now_ns,
                                           int64_t grace_ns,
                                           const std::vector<HeldDevice>* in_use) {
  std::set<std::tuple<std::string, std::string, Resource>> listed;
  for (const Key& k : kubelet) {
    listed.emplace(k.pod_uid, k.container, k.resource);
    served_[{k.pod_uid, k.container, k.resource}] = 0;
  }
  std::vector<Key> put_back;
  for (auto it = served_.begin(); it != served_.end();) {
    const int64_t at = it->second;
    if (at != 0 && now_ns - at >= grace_ns && listed.count(it->first) == 0) {
      put_back.push_back(Key{std::get<0>(it->first), std::get<1>(it->first), std::get<2>(it->first)});
      it = served_.erase(it);
    } else {
      ++it;
    }
  }
  if (in_use != nullptr) {
    std::map<std::string, Holding> held;
    for (const HeldDevice& d : *in_use) held[d.device_id] = Holding{d, 0};
    // Recent grants the kubelet may not list yet stay.
    for (const auto& [id, h] : held_) {
      if (h.at_ns != 0 && now_ns - h.at_ns < grace_ns) held.emplace(id, h);
    }
    held_ = std::move(held);
  }
  return put_back;
}

void Ledger::Prune(const std::vector<NodePod>& pods, int64_t listed_at_ns) {
  std::set<std::string> live, running;
  for (const NodePod& p : pods) {
    live.insert(p.uid);
    if (p.phase != "Succeeded" && p.phase != "Failed") running.insert(p.uid);
  }
  for (auto it = served_.begin(); it != served_.end();) {
    const bool keep = live.count(std::get<0>(it->first)) > 0 || it->second > listed_at_ns;
    it = keep ? std::next(it) : served_.erase(it);
  }
  // Devices of an unknown pod stay until the kubelet's records settle them.
  for (auto it = held_.begin(); it != held_.end();) {
    const std::string& uid = it->second.device.pod_uid;
    const bool keep = uid.empty() || running.count(uid) > 0 || it->second.at_ns > listed_at_ns;
    it = keep ? std::next(it) : held_.erase(it);
  }
}

std::vector<HeldDevice> Ledger::Held() const {
  std::vector<HeldDevice> out;
  out.reserve(held_.size());
  for (const auto& [id, h] : held_) out.push_back(h.device);
  return out;
}

}  // namespace gpushare::deviceplugin
