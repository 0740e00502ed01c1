// File: device-plugin/device_list.h
// -----------------------------------------------------------------------------
// How a container is given its GPUs: the strategies of NVIDIA's own device
// plugin (--device-list-strategy), one or several at once, and the device
// nodes (--pass-device-specs).
//
//   envvar          NVIDIA_VISIBLE_DEVICES=<uuid>,<uuid> (the default, and
//                   the original gpushare plugin's way): the NVIDIA container
//                   toolkit reads it. Any pod that sets the variable itself
//                   sees every GPU unless the toolkit's
//                   accept-nvidia-visible-devices-envvar-when-unprivileged is
//                   false, and then this strategy stops working too;
//   volume-mounts   NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices
//                   and one mount of /dev/null at
//                   /var/run/nvidia-container-devices/<uuid> per GPU, which
//                   the toolkit reads with
//                   accept-nvidia-visible-devices-as-volume-mounts = true:
//                   a pod spec cannot forge a mount;
//   cdi-annotations the container annotation
//                   cdi.k8s.io/gpushare-device-plugin_<resource>:
//                   "<kind>=<uuid>,...", for runtimes that read CDI
//                   annotations;
//   cdi-cri         the CDI device names in the Allocate reply's cdi_devices
//                   field, which the kubelet passes to a CRI runtime with CDI
//                   on (containerd 1.7+, CRI-O).
// CDI names are "<kind>=<uuid>" (kind nvidia.com/gpu by default), as
// `nvidia-ctk cdi generate` names the GPUs.
//
//   ContainerDevices d = DeviceListFor({&gpu0}, options);
//
// Pure: thread-safe.

#ifndef GPUSHARE_DEVICE_PLUGIN_DEVICE_LIST_H_
#define GPUSHARE_DEVICE_PLUGIN_DEVICE_LIST_H_

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "device-plugin/nvml.h"

namespace gpushare::deviceplugin {

enum class DeviceListStrategy { kEnvvar, kVolumeMounts, kCdiAnnotations, kCdiCri };

// "envvar", "volume-mounts", "cdi-annotations", "cdi-cri".
const char* DeviceListStrategyName(DeviceListStrategy s);
// A comma-separated list of strategies, each once. Errors: InvalidArgument
// naming an unknown or repeated one, or an empty list.
absl::StatusOr<std::vector<DeviceListStrategy>> ParseDeviceListStrategies(std::string_view text);

inline constexpr char kVolumeMountsRoot[] = "/var/run/nvidia-container-devices";

struct DeviceListOptions {
  std::vector<DeviceListStrategy> strategies = {DeviceListStrategy::kEnvvar};
  std::string cdi_kind = "nvidia.com/gpu";
  // Also pass /dev/nvidia<minor> of each GPU and the driver's control
  // devices (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) as
  // device specs, for runtimes without the NVIDIA toolkit.
  bool pass_device_specs = false;
  // Where the host's /dev is, as the plugin sees it ("/" in the DaemonSet
  // with /dev mounted; a folder of stand-ins in tests).
  std::string dev_root = "/";
};

struct ContainerDevices {
  std::map<std::string, std::string> envs;  // NVIDIA_VISIBLE_DEVICES, when a strategy sets it.
  struct Mount {
    std::string container_path, host_path;
    bool read_only = true;
  };
  std::vector<Mount> mounts;
  struct Device {
    std::string container_path, host_path, permissions;
  };
  std::vector<Device> devices;
  std::map<std::string, std::string> annotations;
  std::vector<std::string> cdi_devices;
};

// What a container given `gpus` gets under `options`; `resource`
// ("aliyun.com/gpu-mem") names the CDI annotation. Device specs are made
// for GPUs whose minor number NVML told and for control devices that exist
// under dev_root.
ContainerDevices DeviceListFor(const std::vector<const GpuInfo*>& gpus, std::string_view resource,
                               const DeviceListOptions& options);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_DEVICE_LIST_H_
