// File: device-plugin/pod_resources.h
// -----------------------------------------------------------------------------
// What the kubelet has already allocated of gpushare's resources, from its
// pod-resources API (k8s.io/kubelet podresources/v1 List, over gRPC on
// <kubelet root>/pod-resources/kubelet.sock). A restarted plugin starts with
// an empty ledger; without this, a container served before the restart
// would look like one still waiting, and could be matched to another pod's
// Allocate. The program makes its ledger match what is listed here
// (DevicePluginServer::ReconcileLedger) before it registers, and again after
// an Allocate that could have meant another pod.
//
//   absl::StatusOr<std::vector<ServedContainer>> served = ListServed(socket);
//   server->ReconcileLedger(ServedKeys(*served, pods), HeldDevices(*served, pods, inventory));
//   for (const Correction& c : CorrectionsFrom(*served, pods, inventory, now)) PATCH c.patch;

#ifndef GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_
#define GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_

#include <chrono>
#include <map>
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

// The ledger keys of `served`: each container's pod found by namespace and
// name among `pods` (the pods bound to this node); containers of pods not
// there any more are dropped.
std::vector<Ledger::Key> ServedKeys(const std::vector<ServedContainer>& served,
                                    const std::vector<NodePod>& pods);

// Every device of `served` that is one of this inventory's, as held (its
// pod's uid from `pods` by namespace and name, "" when not listed there):
// what Ledger::Reconcile takes as in use.
std::vector<HeldDevice> HeldDevices(const std::vector<ServedContainer>& served,
                                    const std::vector<NodePod>& pods, const Inventory& inventory);

// A pod whose annotations do not say what the kubelet recorded: its devices
// sit on other GPUs than its annotations name (see allocation.h: a swap
// between pods of the same size created in the same second), or every one
// of its containers was admitted but the pod is not marked
// ALIYUN_COM_GPU_MEM_ASSIGNED=true (its Allocate came before the plugin's
// watch had the pod, or the plugin restarted before marking it). Left
// unmarked, the extender would count such a pod as an assumption that
// expires.
struct Correction {
  std::string pod;                 // "<namespace>/<name>"
  std::string pod_namespace, pod_name;
  std::vector<int> annotated;      // The GPUs its annotations named.
  std::map<int, int64_t> actual;   // Units (whole GPUs: the GPU's units) by GPU.
  bool moved = false;              // `actual` is not `annotated`.
  bool unmarked = false;           // Not marked assigned yet.
  // A merge patch: when moved, ALIYUN_COM_GPU_MEM_IDX and
  // scheduler.framework.gpushare.allocation set to `actual`; when unmarked,
  // ALIYUN_COM_GPU_MEM_ASSIGNED "true" and ALIYUN_COM_GPU_MEM_ASSIGN_TIME.
  std::string patch;
};

// The corrections `served` calls for: for each pod of `pods` placed by a
// gpushare scheduler, not finished or being deleted, whose every GPU
// container (init containers aside: the kubelet gives their devices to the
// others) is listed, the GPUs of its devices against those of its
// annotations, and its assigned mark. Devices of other nodes' GPUs (ids this
// inventory does not know) make no correction. `now_ns`: the wall clock in
// nanoseconds, for ALIYUN_COM_GPU_MEM_ASSIGN_TIME.
std::vector<Correction> CorrectionsFrom(const std::vector<ServedContainer>& served,
                                        const std::vector<NodePod>& pods,
                                        const Inventory& inventory, int64_t now_ns);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_POD_RESOURCES_H_
