// File: device-plugin/pod_resources.h
// -----------------------------------------------------------------------------
// What the kubelet has already allocated of gpushare's resources, from its
// pod-resources API (k8s.io/kubelet podresources/v1 List, over gRPC on
// <kubelet root>/pod-resources/kubelet.sock). A restarted plugin starts with
// an empty ledger; without this, a container served before the restart
// would look like one still waiting, and could be matched to another pod's
// Allocate. The program records every container listed here as served
// (DevicePluginServer::RecordServed) before it registers.
//
//   absl::StatusOr<std::vector<ServedContainer>> served = ListServed(socket);
//   for (const ServedKey& k : ServedKeys(*served, pods)) server->RecordServed(...);

#ifndef GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_
#define GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device-plugin/allocation.h"

namespace gpushare::deviceplugin {

inline constexpr char kPodResourcesSocket[] = "/var/lib/kubelet/pod-resources/kubelet.sock";

// One container's devices of one of gpushare's resources.
struct ServedContainer {
  std::string pod_namespace;
  std::string pod_name;
  std::string container;
  Resource resource = Resource::kGpuMem;
  std::vector<std::string> device_ids;
};

// The kubelet's List, keeping gpushare's resources (aliyun.com/gpu-mem,
// nvidia.com/gpu). Errors: Unavailable when the socket does not answer
// within `timeout`, naming it.
absl::StatusOr<std::vector<ServedContainer>> ListServed(
    const std::string& socket = kPodResourcesSocket,
    std::chrono::milliseconds timeout = std::chrono::seconds(5));

struct ServedKey {
  std::string pod_uid;
  std::string container;
  Resource resource;
};

// The ledger keys of `served`: each container's pod found by namespace and
// name among `pods` (the pods bound to this node); containers of pods not
// there any more are dropped.
std::vector<ServedKey> ServedKeys(const std::vector<ServedContainer>& served,
                                  const std::vector<NodePod>& pods);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_
