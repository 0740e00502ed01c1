// File: device-plugin/kube.h
// -----------------------------------------------------------------------------
// What gpushare-device-plugin asks of and writes to the Kubernetes API, as
// request paths and bodies (pure, so tested without a server); the program
// sends them through the Kubernetes client (kubeclient/api_client.h).
//
//   api->Get(NodePodsPath("gpu-7"));                       // ParseNodePods()
//   api->Call(PATCH, PodPath(ns, name), AssignedPatch(now), kMergePatch);
//   api->Call(PATCH, "/api/v1/nodes/gpu-7", NodeAnnotationsPatch(...), kMergePatch);

#ifndef GPUSHARE_DEVICE_PLUGIN_KUBE_H_
#define GPUSHARE_DEVICE_PLUGIN_KUBE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpushare::deviceplugin {

inline constexpr char kMergePatch[] = "application/merge-patch+json";

// GET path of the pods bound to `node` (a field selector on spec.nodeName).
std::string NodePodsPath(std::string_view node);
// "/api/v1/nodes/<node>", escaped.
std::string NodePath(std::string_view node);
// A merge patch marking a pod assigned, as the original device plugin does:
// ALIYUN_COM_GPU_MEM_ASSIGNED "true", ALIYUN_COM_GPU_MEM_ASSIGN_TIME (ns).
std::string AssignedPatch(int64_t now_ns);
// A merge patch of the Node's annotations, which the extender reads
// (gpushare/kubernetes.h): gpushare.io/gpu-topology set to `topology_json`
// (removed when empty: NVML could not tell, and a stale one would mislead), gpushare.io/gpu-memory to each GPU's units
// ("10,20": the capacity alone cannot tell a 10 and a 20 GiB GPU from two
// of 15), and gpushare.io/unhealthy-gpus to the unhealthy GPUs' indices, or
// removed when there are none.
std::string NodeAnnotationsPatch(const std::string& topology_json,
                                 const std::vector<int64_t>& gpu_units,
                                 const std::map<int, std::string>& unhealthy);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_KUBE_H_
