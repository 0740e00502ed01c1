// File: device-plugin/metrics.h
// -----------------------------------------------------------------------------
// gpushare-device-plugin's metrics, served at GET /metrics on
// --metrics-bind-address (Prometheus text format 0.0.4) by the extender's
// hardened HTTP server (extender/server.h, with a handler of its own), and
// GET /healthz.
//
//   DevicePluginSample s = ...;             // Read from the running parts.
//   std::string text = RenderDevicePluginMetrics(s);
//   Reply r = DevicePluginRoute(verb::get, "/metrics", [&] { return s; });
//
// Families (each series labelled as shown):
//   gpushare_device_plugin_registered                   1 while registered with the kubelet
//   gpushare_device_plugin_gpu_memory_units{gpu,uuid,model}  units advertised per GPU
//   gpushare_device_plugin_gpu_healthy{gpu,uuid,model}  1, or 0 while the GPU is unhealthy
//   gpushare_device_plugin_allocations_total{result}    containers served (served) and
//                                                       Allocate calls refused (failed)
//   gpushare_device_plugin_unsettled_allocations_total{reason}
//                                                       served without telling the pod
//                                                       (unidentified) or on other GPUs than
//                                                       its annotations (disagreement)
//   gpushare_device_plugin_api_writes_total{result}     annotation writes: sent, dropped,
//                                                       given_up
//   gpushare_device_plugin_api_write_retries_total
//   gpushare_device_plugin_watch_restarts_total{reason} the watch of the node's pods
// Nothing here takes a lock of the plugin: the sample is taken by the caller.

#ifndef GPUSHARE_DEVICE_PLUGIN_METRICS_H_
#define GPUSHARE_DEVICE_PLUGIN_METRICS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "extender/server.h"

namespace gpushare::deviceplugin {

// What the metrics show, copied from the plugin's parts at scrape time.
struct DevicePluginSample {
  struct Gpu {
    int index = 0;
    std::string uuid, model;
    int64_t units = 0;
    bool healthy = true;
  };
  std::vector<Gpu> gpus;
  bool registered = false;
  // The gRPC server's counters (server.h's ServerStats).
  int64_t allocations = 0, failed_allocations = 0, unidentified = 0, disagreements = 0;
  // The Patcher's (patcher.h).
  int64_t writes_sent = 0, writes_dropped = 0, writes_given_up = 0, write_retries = 0;
  // The pod watch's ends (kubeclient's Reflector::watch_ends).
  int64_t watch_closed = 0, watch_expired = 0, watch_error = 0;
};

// The exposition of `s` (every family, in the order above).
std::string RenderDevicePluginMetrics(const DevicePluginSample& s);

// The routes: GET /metrics (the sample `sample` takes, rendered), GET
// /healthz ({"status":"ok"}); 405 for another method on them, 404 for any
// other path. A query string is ignored.
extender::Reply DevicePluginRoute(boost::beast::http::verb method, std::string_view target,
                                  const std::function<DevicePluginSample()>& sample);

}  // namespace gpushare::deviceplugin

#endif  // GPUSHARE_DEVICE_PLUGIN_METRICS_H_
