// File: device-plugin/pod_cache.h
// -----------------------------------------------------------------------------
// The pods bound to this node, kept up to date by a watch, so that the
// kubelet's calls (GetPreferredAllocation, Allocate) never wait on the API
// server: they read this cache. The program drives it with the Kubernetes
// client's Reflector (kubeclient/reflector.h) over NodePodsWatchPath(node),
// whose field selector leaves out other nodes' pods and finished ones:
//
//   NodePodCache cache;
//   Reflector pods(NodePodsWatchPath(node), [&](const std::string& type,
//                                               const std::string& pod) {
//     cache.Apply(type, pod);
//   });
//   std::thread([&] { RunReflector(pods, transport, {}, stop); });
//   cache.Pods(&skipped);   // the parsed pods, at once
//
// Each pod is parsed once, when it changes. A pod that cannot be parsed
// (ParseNodePod) is kept out and remembered with its reason, so that one bad
// pod affects only itself.
//
// Thread safety: every method may be called from any thread.

#ifndef GPUSHARE_DEVICE_PLUGIN_POD_CACHE_H_
#define GPUSHARE_DEVICE_PLUGIN_POD_CACHE_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "device-plugin/allocation.h"

namespace gpushare::deviceplugin {

// The watch path of the pods bound to `node` that have not finished:
// fieldSelector spec.nodeName=<node>,status.phase!=Succeeded,status.phase!=Failed.
std::string NodePodsWatchPath(std::string_view node);

class NodePodCache {
 public:
  // A Reflector event: "ADDED" or "MODIFIED" (the pod is parsed and kept, or
  // remembered as unreadable) or "DELETED" (forgotten), with the pod's JSON.
  void Apply(const std::string& type, const std::string& pod_json);

  // The readable pods, in namespace/name order; each unreadable one gets a
  // line in `skipped` (when given) naming it and why.
  std::vector<NodePod> Pods(std::vector<std::string>* skipped = nullptr) const;
  size_t size() const;
  // Bumped by every Apply(): what WaitForChange() waits on.
  uint64_t generation() const;
  // Waits until generation() differs from `seen`, or `timeout` passes;
  // returns whether it changed.
  bool WaitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::map<std::string, NodePod> pods_;          // By namespace/name.
  std::map<std::string, std::string> skipped_;   // namespace/name -> why.
  uint64_t generation_ = 0;
};

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_POD_CACHE_H_
