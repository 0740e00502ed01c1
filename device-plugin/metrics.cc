// gpushare-device-plugin's metrics (see metrics.h).

#include "device-plugin/metrics.h"

#include <string>
#include <utility>
#include <vector>

#include "extender/metrics.h"
#include "gpushare/kubernetes.h"

namespace gpushare::deviceplugin {

using extender::GaugeFamily;
using extender::Labels;
using extender::Metrics;

std::string RenderDevicePluginMetrics(const DevicePluginSample& s) {
  const auto counter = Metrics::Type::kCounter;
  std::string out = GaugeFamily("gpushare_device_plugin_registered",
                                "1 while the plugin is registered with the kubelet.",
                                {{{}, s.registered ? 1.0 : 0.0}});
  std::vector<std::pair<Labels, double>> units, healthy;
  for (const DevicePluginSample::Gpu& g : s.gpus) {
    Labels l = {{"gpu", std::to_string(g.index)}, {"uuid", g.uuid}, {"model", g.model}};
    units.emplace_back(l, static_cast<double>(g.units));
    healthy.emplace_back(std::move(l), g.healthy ? 1.0 : 0.0);
  }
  out += GaugeFamily("gpushare_device_plugin_gpu_memory_units",
                     "aliyun.com/gpu-mem units advertised for each GPU.", units);
  out += GaugeFamily("gpushare_device_plugin_gpu_healthy",
                     "1, or 0 while NVML reports the GPU unhealthy (its units are then "
                     "advertised unhealthy).",
                     healthy);
  out += GaugeFamily("gpushare_device_plugin_allocations_total",
                     "Containers served by Allocate (served), and Allocate calls refused (failed).",
                     {{{{"result", "served"}}, static_cast<double>(s.allocations)},
                      {{{"result", "failed"}}, static_cast<double>(s.failed_allocations)}},
                     counter);
  out += GaugeFamily(
      "gpushare_device_plugin_unsettled_allocations_total",
      "Containers served without telling their pod (unidentified), or on other GPUs than its "
      "annotations named (disagreement); the annotations are corrected from the kubelet's "
      "records.",
      {{{{"reason", "unidentified"}}, static_cast<double>(s.unidentified)},
       {{{"reason", "disagreement"}}, static_cast<double>(s.disagreements)}},
      counter);
  out += GaugeFamily("gpushare_device_plugin_api_writes_total",
                     "Annotation writes to the API server: sent, dropped (the object is gone, "
                     "or a full queue), given_up (every attempt failed).",
                     {{{{"result", "sent"}}, static_cast<double>(s.writes_sent)},
                      {{{"result", "dropped"}}, static_cast<double>(s.writes_dropped)},
                      {{{"result", "given_up"}}, static_cast<double>(s.writes_given_up)}},
                     counter);
  out += GaugeFamily("gpushare_device_plugin_api_write_retries_total",
                     "Attempts of annotation writes after a failure.",
                     {{{}, static_cast<double>(s.write_retries)}}, counter);
  out += GaugeFamily("gpushare_device_plugin_watch_restarts_total",
                     "Ends of the watch of this node's pods: closed by the server, expired "
                     "(410 Gone), error.",
                     {{{{"reason", "closed"}}, static_cast<double>(s.watch_closed)},
                      {{{"reason", "expired"}}, static_cast<double>(s.watch_expired)},
                      {{{"reason", "error"}}, static_cast<double>(s.watch_error)}},
                     counter);
  return out;
}

extender::Reply DevicePluginRoute(boost::beast::http::verb method, std::string_view target,
                                  const std::function<DevicePluginSample()>& sample) {
  using boost::beast::http::status;
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != "/metrics" && path != "/healthz") {
    return {status::not_found,
            k8s::ErrorJson(absl::NotFoundError("no route " + std::string(path)))};
  }
  if (method != boost::beast::http::verb::get) {
    return {status::method_not_allowed,
            k8s::ErrorJson(absl::InvalidArgumentError(std::string(path.substr(1)) +
                                                      " takes GET"))};
  }
  if (path == "/healthz") return {status::ok, "{\"status\":\"ok\"}"};
  return {status::ok, RenderDevicePluginMetrics(sample()), extender::kMetricsContentType};
}

}  // namespace gpushare::deviceplugin
