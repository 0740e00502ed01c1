// The kubelet's pod-resources API (see pod_resources.h).

#include "device-plugin/pod_resources.h"

#include <map>

#include "absl/strings/str_cat.h"
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

std::vector<ServedKey> ServedKeys(const std::vector<ServedContainer>& served,
                                  const std::vector<NodePod>& pods) {
  std::map<std::pair<std::string, std::string>, std::string> uid_of;
  for (const NodePod& p : pods) uid_of[{p.namespace_name, p.name}] = p.uid;
  std::vector<ServedKey> keys;
  for (const ServedContainer& c : served) {
    auto it = uid_of.find({c.pod_namespace, c.pod_name});
    if (it == uid_of.end()) continue;
    keys.push_back(ServedKey{it->second, c.container, c.resource});
  }
  return keys;
}

}  // namespace gpushare::deviceplugin
