// The kubelet's pod-resources API (see pod_resources.h).

#include "device-plugin/pod_resources.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "grpcpp/grpcpp.h"
#include "podresources/v1/api.grpc.pb.h"

namespace gpushare::deviceplugin {

absl::StatusOr<std::vector<ServedContainer>> ListServed(const std::string& socket,
                                                        std::chrono::milliseconds timeout) {
  auto stub = ::v1::PodResourcesLister::NewStub(
      grpc::CreateChannel("unix:" + socket, grpc::InsecureChannelCredentials()));
  ::v1::ListPodResourcesRequest request;
  ::v1::ListPodResourcesResponse reply;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Status s = stub->List(&context, request, &reply);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the kubelet's pod-resources API at ", socket, ": ", s.error_message()));
  }
  std::vector<ServedContainer> served;
  for (const auto& pod : reply.pod_resources()) {
    for (const auto& container : pod.containers()) {
      for (const auto& devices : container.devices()) {
        ServedContainer c;
        if (devices.resource_name() == ResourceName(Resource::kGpuMem)) {
          c.resource = Resource::kGpuMem;
        } else if (devices.resource_name() == ResourceName(Resource::kWholeGpu)) {
          c.resource = Resource::kWholeGpu;
        } else {
          continue;
        }
        c.pod_namespace = pod.namespace_();
        c.pod_name = pod.name();
        c.container = container.name();
        c.device_ids.assign(devices.device_ids().begin(), devices.device_ids().end());
        served.push_back(std::move(c));
      }
    }
  }
  return served;
}

std::vector<Ledger::Key> ServedKeys(const std::vector<ServedContainer>& served,
                                    const std::vector<NodePod>& pods) {
  std::map<std::pair<std::string, std::string>, std::string> uid_of;
  for (const NodePod& p : pods) uid_of[{p.namespace_name, p.name}] = p.uid;
  std::vector<Ledger::Key> keys;
  for (const ServedContainer& c : served) {
    auto it = uid_of.find({c.pod_namespace, c.pod_name});
    if (it == uid_of.end()) continue;
    keys.push_back(Ledger::Key{it->second, c.container, c.resource});
  }
  return keys;
}

std::vector<HeldDevice> HeldDevices(const std::vector<ServedContainer>& served,
                                    const std::vector<NodePod>& pods, const Inventory& inventory) {
  std::map<std::pair<std::string, std::string>, const NodePod*> by_name;
  for (const NodePod& p : pods) by_name[{p.namespace_name, p.name}] = &p;
  std::vector<HeldDevice> out;
  for (const ServedContainer& c : served) {
    auto pod = by_name.find({c.pod_namespace, c.pod_name});
    for (const std::string& id : c.device_ids) {
      std::optional<int> g = inventory.GpuOfDevice(id);
      if (!g.has_value()) continue;
      HeldDevice d;
      d.device_id = id;
      d.resource = c.resource;
      d.gpu = *g;
      d.pod = c.pod_namespace + "/" + c.pod_name;
      if (pod != by_name.end()) d.pod_uid = pod->second->uid;
      out.push_back(std::move(d));
    }
  }
  return out;
}

std::vector<Correction> CorrectionsFrom(const std::vector<ServedContainer>& served,
                                        const std::vector<NodePod>& pods,
                                        const Inventory& inventory, int64_t now_ns) {
  std::map<std::pair<std::string, std::string>, std::vector<const ServedContainer*>> by_pod;
  for (const ServedContainer& c : served) by_pod[{c.pod_namespace, c.pod_name}].push_back(&c);
  std::vector<Correction> out;
  for (const NodePod& pod : pods) {
    auto listed = by_pod.find({pod.namespace_name, pod.name});
    if (listed == by_pod.end()) continue;
    if (pod.terminating || pod.phase == "Succeeded" || pod.phase == "Failed") continue;
    absl::StatusOr<std::vector<int>> annotated = RecordedGpus(pod, inventory);
    if (!annotated.ok() || annotated->empty()) continue;
    Correction c;
    bool complete = true, known = true, any = false;
    for (const ContainerDemand& d : pod.containers) {
      if (d.init || (d.gpu_mem == 0 && d.whole_gpus == 0)) continue;
      any = true;
      const ServedContainer* seen = nullptr;
      for (const ServedContainer* s : listed->second) {
        if (s->container == d.name &&
            s->resource == (d.gpu_mem > 0 ? Resource::kGpuMem : Resource::kWholeGpu)) {
          seen = s;
        }
      }
      if (seen == nullptr) {
        complete = false;
        break;
      }
      for (const std::string& id : seen->device_ids) {
        std::optional<int> g = inventory.GpuOfDevice(id);
        if (!g.has_value()) {
          known = false;
          continue;
        }
        c.actual[*g] += seen->resource == Resource::kGpuMem ? 1 : inventory.units(*g);
      }
    }
    if (!any || !complete || !known || c.actual.empty()) continue;
    std::vector<int> actual_gpus;
    for (const auto& [g, units] : c.actual) actual_gpus.push_back(g);
    auto assigned = pod.annotations.find("ALIYUN_COM_GPU_MEM_ASSIGNED");
    c.moved = actual_gpus != *annotated;
    c.unmarked = assigned == pod.annotations.end() || assigned->second != "true";
    if (!c.moved && !c.unmarked) continue;
    c.pod = pod.id();
    c.pod_namespace = pod.namespace_name;
    c.pod_name = pod.name;
    c.annotated = *annotated;
    nlohmann::json annotations = nlohmann::json::object();
    if (c.moved) {
      nlohmann::json per_gpu = nlohmann::json::object();
      for (const auto& [g, units] : c.actual) per_gpu[absl::StrCat(g)] = units;
      annotations["ALIYUN_COM_GPU_MEM_IDX"] = absl::StrJoin(actual_gpus, "-");
      annotations["scheduler.framework.gpushare.allocation"] =
          nlohmann::json({{"0", per_gpu}}).dump();
    }
    if (c.unmarked) {
      annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] = "true";
      annotations["ALIYUN_COM_GPU_MEM_ASSIGN_TIME"] = absl::StrCat(now_ns);
    }
    nlohmann::json patch = {{"metadata", {{"annotations", annotations}}}};
    c.patch = patch.dump();
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace gpushare::deviceplugin
