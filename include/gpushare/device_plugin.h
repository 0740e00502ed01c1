// File: gpushare/device_plugin.h
// -----------------------------------------------------------------------------
// The device-plugin view of a placement: the pod annotations a scheduler
// writes at bind time and the container environment the GPU-sharing device
// plugin then hands to the container, with the names of the Alibaba
// gpushare device plugin (see the README's "Names" section).
//
//   absl::StatusOr<gpushare::DeviceView> view =
//       gpushare::MakeDeviceView(cluster, placement);
//   view->env["ALIYUN_COM_GPU_MEM_CONTAINER"];   // "2"
//   view->env["NVIDIA_VISIBLE_DEVICES"];         // "GPU-a,GPU-b,..." or "0,1"

#ifndef GPUSHARE_DEVICE_PLUGIN_H_
#define GPUSHARE_DEVICE_PLUGIN_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "gpushare/cluster.h"
#include "gpushare/types.h"

namespace gpushare {

struct DeviceView {
  // Pod annotations:
  //  ALIYUN_COM_GPU_MEM_IDX         GPU indices joined by '-' ("1", "0-1-2-3")
  //  ALIYUN_COM_GPU_MEM_POD         the pod's total units
  //  ALIYUN_COM_GPU_MEM_DEV         units per GPU of the node (first GPU used)
  //  ALIYUN_COM_GPU_MEM_ASSIGNED    "false" (until the device plugin takes it)
  //  ALIYUN_COM_GPU_MEM_ASSUME_TIME Unix time of the bind, nanoseconds
  //  scheduler.framework.gpushare.allocation  {"0":{"<gpu>":units,...}}
  std::map<std::string, std::string> annotations;
  // Container environment:
  //  NVIDIA_VISIBLE_DEVICES         UUIDs if every chosen GPU has one, else
  //                                 indices, comma-separated
  //  ALIYUN_COM_GPU_MEM_CONTAINER   this container's units on each GPU
  //  ALIYUN_COM_GPU_MEM_DEV, ALIYUN_COM_GPU_MEM_IDX, ALIYUN_COM_GPU_MEM_POD
  std::map<std::string, std::string> env;
};

// The annotations and environment of `placement` on `cluster`'s node (the
// cluster supplies GPU sizes and UUIDs). The whole request is one container.
// Exclusive placements report each GPU's whole memory. `assume_time_ns` is
// written as ALIYUN_COM_GPU_MEM_ASSUME_TIME; 0 means "now".
// Errors: NotFound if the node is unknown; InvalidArgument if a GPU index is
// out of range.
absl::StatusOr<DeviceView> MakeDeviceView(const Cluster& cluster,
                                          const Placement& placement,
                                          int64_t assume_time_ns = 0);

}  // namespace gpushare

#endif  // GPUSHARE_DEVICE_PLUGIN_H_
