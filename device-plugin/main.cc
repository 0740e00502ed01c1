// gpushare-device-plugin: the node half of gpushare. Reads the node's GPUs
// through NVML, advertises them to the kubelet (aliyun.com/gpu-mem units,
// aliyun.com/gpu-count, nvidia.com/gpu) and gives each container the GPUs a
// gpushare scheduler chose for its pod. Runs as a DaemonSet (deploy/).
//
// main() only wires tested parts together: the flags (config.h), NVML
// (nvml.h), the devices (inventory.h), the gRPC server (server.h), health
// (health.h) and the API requests (kube.h) sent through the extender's
// ApiClient.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "device-plugin/config.h"
#include "device-plugin/health.h"
#include "device-plugin/inventory.h"
#include "device-plugin/kube.h"
#include "device-plugin/nvml.h"
#include "device-plugin/pod_resources.h"
#include "device-plugin/server.h"
#include "extender/api_client.h"
#include "extender/kubeconfig.h"

namespace {

using gpushare::deviceplugin::DevicePluginConfig;
using gpushare::deviceplugin::DevicePluginServer;
using gpushare::extender::ApiClient;

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop.store(true); }

int Fail(const std::string& what, const absl::Status& status) {
  std::cerr << "gpushare-device-plugin: " << what << ": " << status.message() << std::endl;
  return 1;
}

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<DevicePluginConfig> parsed =
      gpushare::deviceplugin::ParseDevicePluginFlags(argc, argv, std::getenv("NODE_NAME"));
  if (!parsed.ok()) {
    std::cerr << "gpushare-device-plugin: " << parsed.status().message()
              << "\n(gpushare-device-plugin --help lists the flags)" << std::endl;
    return 2;
  }
  const DevicePluginConfig& c = *parsed;
  if (c.help) {
    std::cout << gpushare::deviceplugin::DevicePluginHelp();
    return 0;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  // The GPUs.
  auto nvml = gpushare::deviceplugin::Nvml::Load(c.nvml_library);
  if (!nvml.ok()) return Fail("NVML", nvml.status());
  auto gpus = (*nvml)->Devices();
  if (!gpus.ok()) return Fail("reading the GPUs", gpus.status());
  auto inventory = gpushare::deviceplugin::MakeInventory(*gpus, c.memory_unit);
  if (!inventory.ok()) return Fail("this node's GPUs", inventory.status());
  std::ostream& log = c.discover ? std::cerr : std::cout;  // --discover: stdout is JSON.
  for (const auto& g : inventory->gpus()) {
    log << "gpushare-device-plugin: GPU " << g.index << " " << g.uuid << " " << g.name
              << ", " << inventory->units(g.index) << " "
              << gpushare::deviceplugin::MemoryUnitName(c.memory_unit) << std::endl;
  }

  // How the GPUs are linked, for topology-aware placement.
  std::string topology_json;
  if (auto topo = (*nvml)->Topology(inventory->gpus()); topo.ok()) {
    topology_json = (*topo)->ToJson();
    log << "gpushare-device-plugin: topology " << topology_json << std::endl;
  } else {
    std::cerr << "gpushare-device-plugin: no GPU topology published: " << topo.status().message()
              << std::endl;
  }

  if (c.discover) {
    auto driver = (*nvml)->DriverVersion();
    std::cout << gpushare::deviceplugin::InventoryJson(*inventory, driver.ok() ? *driver : "",
                                                       topology_json)
              << std::endl;
    return 0;
  }

  std::vector<int64_t> gpu_units;
  for (int g = 0; g < inventory->gpu_count(); ++g) gpu_units.push_back(inventory->units(g));

  // The API server.
  auto rest = gpushare::extender::ResolveRestConfig({c.apiserver, c.kubeconfig, c.context});
  if (!rest.ok()) return Fail("the Kubernetes API", rest.status());
  gpushare::extender::ClientOptions client_options;
  client_options.user_agent = "gpushare-device-plugin";
  client_options.qps = 20;
  client_options.burst = 40;
  client_options.timeout = std::chrono::milliseconds(10'000);
  auto api = ApiClient::Create(*rest, client_options);
  if (!api.ok()) return Fail("the Kubernetes API", api.status());
  const ApiClient& client = **api;

  auto list_pods = [&](std::vector<std::string>* skipped)
      -> absl::StatusOr<std::vector<gpushare::deviceplugin::NodePod>> {
    absl::StatusOr<std::string> body = client.Get(gpushare::deviceplugin::NodePodsPath(c.node_name));
    if (!body.ok()) return body.status();
    return gpushare::deviceplugin::ParseNodePods(*body, skipped);
  };
  auto mark_assigned = [&](const gpushare::deviceplugin::NodePod& pod) -> absl::Status {
    return client
        .Call(boost::beast::http::verb::patch,
              gpushare::extender::PodPath(pod.namespace_name, pod.name),
              gpushare::deviceplugin::AssignedPatch(NowNs()), gpushare::deviceplugin::kMergePatch)
        .status();
  };
  // True when the Node carries the annotations (or none are written).
  auto annotate_node = [&](const std::map<int, std::string>& unhealthy) -> bool {
    if (!c.annotate_node) return true;
    absl::StatusOr<std::string> r =
        client.Call(boost::beast::http::verb::patch, gpushare::deviceplugin::NodePath(c.node_name),
                    gpushare::deviceplugin::NodeAnnotationsPatch(topology_json, gpu_units, unhealthy),
                    gpushare::deviceplugin::kMergePatch);
    if (!r.ok()) {
      std::cerr << "gpushare-device-plugin: annotating node " << c.node_name << ": "
                << r.status().message() << " (tried again in 10 s)" << std::endl;
    }
    return r.ok();
  };

  // The kubelet.
  DevicePluginServer::Options options;
  options.plugin_dir = c.plugin_dir;
  options.exclusive_resource = c.exclusive_resource;
  options.allocation.hami_limits = c.hami_limits;
  auto server = DevicePluginServer::Start(*inventory, options, list_pods, mark_assigned);
  if (!server.ok()) return Fail("serving the device plugin API", server.status());
  bool node_annotated = annotate_node({});
  auto next_annotate = std::chrono::steady_clock::now() + std::chrono::seconds(10);

  // What the kubelet allocated: at start (a restart: those are served
  // already), after Allocate calls whose pod disagreed with its devices or
  // could not be told (then annotations are corrected to the GPUs the
  // kubelet recorded, and the ledger follows), and every 30 s.
  auto reconcile = [&](bool at_start) {
    auto served = gpushare::deviceplugin::ListServed(c.pod_resources_socket);
    if (!served.ok()) {
      if (at_start) {
        std::cerr << "gpushare-device-plugin: " << served.status().message()
                  << " (a fresh node has nothing allocated yet)" << std::endl;
      }
      return;
    }
    auto pods = list_pods(nullptr);
    if (!pods.ok()) {
      std::cerr << "gpushare-device-plugin: listing this node's pods: " << pods.status().message()
                << std::endl;
      return;
    }
    const auto keys = gpushare::deviceplugin::ServedKeys(*served, *pods);
    const auto put_back = (*server)->ReconcileLedger(
        keys, gpushare::deviceplugin::HeldDevices(*served, *pods, *inventory));
    if (at_start) {
      std::cout << "gpushare-device-plugin: " << keys.size()
                << " containers already served, from the kubelet's pod-resources API" << std::endl;
    }
    for (const auto& k : put_back) {
      std::cout << "gpushare-device-plugin: pod " << k.pod_uid << " container " << k.container
                << " was not the one admitted; it waits again" << std::endl;
    }
    for (const auto& fix : gpushare::deviceplugin::CorrectionsFrom(*served, *pods, *inventory)) {
      absl::StatusOr<std::string> r =
          client.Call(boost::beast::http::verb::patch,
                      gpushare::extender::PodPath(fix.pod_namespace, fix.pod_name), fix.patch,
                      gpushare::deviceplugin::kMergePatch);
      std::cout << "gpushare-device-plugin: pod " << fix.pod
                << " runs on other GPUs than its annotations named; corrected"
                << (r.ok() ? "" : ": " + std::string(r.status().message())) << std::endl;
    }
  };
  reconcile(/*at_start=*/true);

  // Registration is kept up by the loop below (a missing kubelet socket is
  // waited for, a restarted kubelet is registered with again). It looks every
  // 100 ms (four stat calls): a restarted kubelet admits the pods it finds
  // bound about a second after its registration socket appears, and rejects
  // those asking for a resource no plugin has re-registered yet
  // (UnexpectedAdmissionError, kubernetes/kubernetes#133382), so the sooner
  // the plugin is back the fewer pods fail.
  bool registered = false;
  gpushare::deviceplugin::HealthTracker health(inventory->gpu_count());
  const absl::Status events = (*nvml)->WatchEvents();
  if (!events.ok()) {
    std::cerr << "gpushare-device-plugin: no NVML events (" << events.message()
              << "); health from probes only" << std::endl;
  }
  std::map<int, std::string> unhealthy;
  auto next_probe = std::chrono::steady_clock::now();
  auto next_reconcile = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  int64_t unsettled_seen = 0;
  auto next_register = std::chrono::steady_clock::now();
  while (!g_stop.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_register) {
      next_register = now + std::chrono::milliseconds(100);
      bool acted = false;
      absl::Status s = registered ? (*server)->KeepRegistered(&acted) : (*server)->Register();
      if (!s.ok()) {
        if (registered) std::cerr << "gpushare-device-plugin: " << s.message() << std::endl;
        registered = registered && s.code() == absl::StatusCode::kUnavailable;
      } else if (!registered || acted) {
        registered = true;
        std::cout << "gpushare-device-plugin: registered with the kubelet" << std::endl;
      }
    }
    if (events.ok()) {
      auto got = (*nvml)->WaitEvents(100);
      if (got.ok()) {
        for (const auto& e : *got) health.OnEvent(e);
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // After an Allocate whose pod disagreed with its devices or could not be
    // told, once the kubelet has recorded it (it lists a container when its
    // admission completes): the annotations follow the devices.
    const gpushare::deviceplugin::ServerStats stats = (*server)->Stats();
    if (const int64_t unsettled = stats.unidentified + stats.disagreements;
        unsettled != unsettled_seen) {
      unsettled_seen = unsettled;
      next_reconcile = std::min(next_reconcile,
                                std::chrono::steady_clock::now() + std::chrono::seconds(6));
    }
    if (std::chrono::steady_clock::now() >= next_reconcile) {
      reconcile(/*at_start=*/false);
      next_reconcile = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    }
    if (std::chrono::steady_clock::now() >= next_probe) {
      next_probe = std::chrono::steady_clock::now() + std::chrono::milliseconds(c.health_interval_ms);
      for (int g = 0; g < inventory->gpu_count(); ++g) health.OnProbe(g, (*nvml)->Probe(g));
    }
    std::map<int, std::string> now_unhealthy = health.Unhealthy();
    if (now_unhealthy != unhealthy) {
      for (int g = 0; g < inventory->gpu_count(); ++g) {
        auto it = now_unhealthy.find(g);
        (*server)->SetHealth(g, it == now_unhealthy.end(), it == now_unhealthy.end() ? "" : it->second);
        if ((it == now_unhealthy.end()) != (unhealthy.count(g) == 0)) {
          std::cout << "gpushare-device-plugin: GPU " << g << " "
                    << (it == now_unhealthy.end() ? "healthy again" : "unhealthy: " + it->second)
                    << std::endl;
        }
      }
      unhealthy = now_unhealthy;
      node_annotated = false;
      next_annotate = std::chrono::steady_clock::now();
    }
    if (!node_annotated && std::chrono::steady_clock::now() >= next_annotate) {
      node_annotated = annotate_node(unhealthy);
      next_annotate = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    }
  }
  std::cout << "gpushare-device-plugin: stopping" << std::endl;
  (*server)->Stop();
  return 0;
}
