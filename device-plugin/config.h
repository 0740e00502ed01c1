// File: device-plugin/config.h
// -----------------------------------------------------------------------------
// gpushare-device-plugin's flags (tools/flags/flags.h), parsed and checked
// apart from the program so that each rule is tested
// (tests/device-plugin/config_test.cc).

#ifndef GPUSHARE_DEVICE_PLUGIN_CONFIG_H_
#define GPUSHARE_DEVICE_PLUGIN_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "device-plugin/device_list.h"
#include "device-plugin/inventory.h"

namespace gpushare::deviceplugin {

struct DevicePluginConfig {
  bool help = false;  // --help: print DevicePluginHelp() and exit 0.
  bool version = false;  // --version: print the version line and exit 0.
  // --discover: print what NVML reports and would be advertised (JSON),
  // then exit; needs no node name, kubelet or API server.
  bool discover = false;
  // --discover --watch-health: print the inventory as one JSON line, then
  // one line {"unhealthy":{"<index>":"<why>",...}} now and at each change of
  // the GPUs' health, until stopped; exit 1 when NVML comes back with other
  // GPUs. gpushare-dra-driver reads this stream: one NVML discovery and one
  // health check for both programs.
  bool watch_health = false;
  // This node's name (--node-name, else $NODE_NAME, which the DaemonSet sets
  // from spec.nodeName). Required.
  std::string node_name;
  // The Kubernetes API, found as client-go finds it.
  std::string kubeconfig, context, apiserver;
  // The kubelet.
  std::string plugin_dir = "/var/lib/kubelet/device-plugins";
  // The kubelet's pod-resources API: what it allocated before a restart.
  std::string pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  // HOST:PORT of GET /metrics and /healthz (device-plugin/metrics.h); "" for none.
  std::string metrics_bind_address;
  // NVML.
  std::string nvml_library = "libnvidia-ml.so.1";
  int64_t health_interval_ms = 5'000;
  // NVML events and probes; false keeps every GPU healthy (for drivers whose
  // events misfire, as NVIDIA's DP_DISABLE_HEALTHCHECKS=all).
  bool health_checks = true;
  // What is advertised and handed out.
  MemoryUnit memory_unit = MemoryUnit::kGiB;
  std::string exclusive_resource = "nvidia.com/gpu";
  bool hami_limits = false;
  // How containers are given their GPUs (device_list.h).
  DeviceListOptions device_list;
  // Write the node's GPU topology and unhealthy GPUs as annotations.
  bool annotate_node = true;
};

// Parses gpushare-device-plugin's command line (argv[0] is the program);
// `node_name_env` is $NODE_NAME. InvalidArgument naming the flag and the bad
// value, or saying that no node name was given.
absl::StatusOr<DevicePluginConfig> ParseDevicePluginFlags(int argc, const char* const* argv,
                                                          const char* node_name_env);
// The --help text, generated from the same definitions.
std::string DevicePluginHelp();

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_CONFIG_H_
