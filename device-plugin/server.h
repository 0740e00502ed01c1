// File: device-plugin/server.h
// -----------------------------------------------------------------------------
// gpushare-device-plugin's side of the kubelet's device plugin API (v1beta1,
// generated from the api.proto of the k8s.io/kubelet module): one gRPC server
// per advertised resource, each on its own Unix socket in the kubelet's
// device plugin folder, registered with the kubelet's Registration service.
//
//   DevicePluginServer::Options options{.plugin_dir = dir, .node_name = "n1"};
//   auto server = DevicePluginServer::Start(*inventory, options, list_pods, mark_assigned);
//   absl::Status registered = (*server)->Register();   // with <dir>/kubelet.sock
//   (*server)->SetHealth(0, false, "XID 79");          // ListAndWatch sends it
//   while (...) (*server)->KeepRegistered();           // every 100 ms or so
//
// ListAndWatch sends the devices of inventory.h, each Healthy or Unhealthy
// (its GPU's health), with the GPU's NUMA node when known, and again on every
// change. GetPreferredAllocation prefers the devices of the GPUs that the
// container the kubelet is about to admit will get (the same match as
// Allocate, see allocation.h), so the kubelet's own records (its checkpoint,
// the pod-resources API) name the right GPUs. Allocate lists the pods bound
// to the node (`list_pods`: the API server in the program), matches each
// container request (in the kubelet's order of admission, which depends on
// when it started: its socket's modification time, see allocation.h),
// records it in the ledger and answers the container's
// environment; when a pod's last GPU container is served, `mark_assigned`
// is called (the program sets ALIYUN_COM_GPU_MEM_ASSIGNED=true on the pod).
// An Allocate that cannot be matched fails with the ledger's message, which
// the kubelet shows on the pod.
//
// Restarts: a restarted kubelet deletes every socket in its folder; call
// KeepRegistered() periodically: it serves and registers again whenever a
// socket is gone or the kubelet's socket was replaced.
//
// Thread safety: every method may be called from any thread; gRPC handlers
// run on gRPC's threads and share the ledger under one mutex.

#ifndef GPUSHARE_DEVICE_PLUGIN_SERVER_H_
#define GPUSHARE_DEVICE_PLUGIN_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device-plugin/allocation.h"
#include "device-plugin/device_list.h"
#include "device-plugin/inventory.h"

namespace gpushare::deviceplugin {

// The pods bound to this node, fresh (the program lists them from the API
// server with fieldSelector spec.nodeName=<node>); each pod that cannot be
// read is left out, with a line naming it in `skipped` (ParseNodePods).
using PodLister =
    std::function<absl::StatusOr<std::vector<NodePod>>(std::vector<std::string>* skipped)>;
// Called once all of a pod's GPU containers are served.
using AssignedHook = std::function<absl::Status(const NodePod& pod)>;

struct ServerStats {
  int64_t allocations = 0;        // Containers served.
  int64_t failed_allocations = 0;  // Allocate calls answered with an error.
  // Served without telling the pod (annotations missing, pods not listed).
  int64_t unidentified = 0;
  // Served where the pod's annotations name other GPUs than its ids.
  int64_t disagreements = 0;
  int64_t skipped_pods = 0;        // Unreadable pods at the last listing.
};

class DevicePluginServer {
 public:
  struct Options {
    std::string plugin_dir = "/var/lib/kubelet/device-plugins";
    std::string kubelet_socket_name = "kubelet.sock";
    // The resource for exclusive GPUs; "" leaves nvidia.com/gpu to another plugin.
    std::string exclusive_resource = "nvidia.com/gpu";
    AllocationOptions allocation;
    // How each container is given its GPUs (NVIDIA_VISIBLE_DEVICES, mounts,
    // CDI names, device specs).
    DeviceListOptions device_list;
    // How long GetPreferredAllocation and Allocate list the pods again
    // (every 50 ms) while a container has no plan or cannot be told: the
    // program's pods come from a watch, which may not have delivered a pod
    // bound a moment ago. 0: once.
    std::chrono::milliseconds identify_wait{0};
  };

  // Serves every resource on <plugin_dir>/gpushare-<name>.sock (removing a
  // stale socket file first). Does not register. Errors: FailedPrecondition
  // when a socket cannot be served (naming it); InvalidArgument for an
  // exclusive resource other than "" or nvidia.com/gpu.
  static absl::StatusOr<std::unique_ptr<DevicePluginServer>> Start(Inventory inventory,
                                                                  Options options,
                                                                  PodLister list_pods,
                                                                  AssignedHook mark_assigned);
  ~DevicePluginServer();  // Stop().
  DevicePluginServer(const DevicePluginServer&) = delete;
  DevicePluginServer& operator=(const DevicePluginServer&) = delete;

  // Registers every resource with the kubelet. Errors: Unavailable when the
  // kubelet's socket does not answer; the kubelet's refusal otherwise.
  absl::Status Register();
  // Serves again and registers where a socket file is gone or the kubelet's
  // socket is a new one (a restarted kubelet). OK when nothing was needed
  // or the registration succeeded; `*reregistered` says whether it acted.
  absl::Status KeepRegistered(bool* reregistered = nullptr);

  // Marks GPU `gpu` (an index into the inventory) healthy or not, and sends
  // the change to every ListAndWatch stream. `reason` is kept for Unhealthy().
  void SetHealth(int gpu, bool healthy, const std::string& reason);
  // Unhealthy GPUs and why, by GPU index.
  std::map<int, std::string> Unhealthy() const;

  // Ledger::Reconcile() with what the kubelet allocated (ServedKeys() and
  // HeldDevices() of its pod-resources API), recent records (`grace_ns`) kept.
  std::vector<Ledger::Key> ReconcileLedger(const std::vector<Ledger::Key>& kubelet,
                                           const std::vector<HeldDevice>& in_use,
                                           int64_t grace_ns = 5'000'000'000);
  // The devices in use, as the ledger knows them.
  std::vector<HeldDevice> Held() const;

  // The resources served, in order: gpu-mem, gpu-count, then the exclusive
  // one when enabled.
  std::vector<std::string> ResourceNames() const;
  // The socket path serving `resource_name`.
  std::string SocketPath(const std::string& resource_name) const;
  ServerStats Stats() const;
  const Inventory& inventory() const;

  // Ends every stream and server and removes the socket files. Idempotent.
  void Stop();

 private:
  friend class ResourceService;
  struct Impl;
  explicit DevicePluginServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_SERVER_H_
