// gpushare-device-plugin: the node half of gpushare. Reads the node's GPUs
// through NVML, advertises them to the kubelet (aliyun.com/gpu-mem units,
// aliyun.com/gpu-count, nvidia.com/gpu) and gives each container the GPUs a
// gpushare scheduler chose for its pod. Runs as a DaemonSet (deploy/).
//
// main() only wires tested parts together: the flags (config.h), NVML
// (nvml.h), the devices (inventory.h), the gRPC server (server.h), health
// (health.h), the node's pods from a watch (pod_cache.h over the Reflector
// of kubeclient/), and the API writes (kube.h) sent off the kubelet's path
// (patcher.h) through kubeclient's ApiClient.
//
// Threads: gRPC's, serving the kubelet from memory; one keeping the
// registration with the kubelet (no API server or NVML call on it); one
// watching the node's pods; the Patcher's writer; and this one, for NVML
// health, the kubelet's pod-resources records and the Node's annotations.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "device-plugin/config.h"
#include "tools/flags/flags.h"
#include "device-plugin/health.h"
#include "device-plugin/inventory.h"
#include "device-plugin/kube.h"
#include "device-plugin/metrics.h"
#include "device-plugin/nvml.h"
#include "device-plugin/patcher.h"
#include "device-plugin/pod_cache.h"
#include "device-plugin/pod_resources.h"
#include "device-plugin/server.h"
#include "kubeclient/api_client.h"
#include "kubeclient/kubeconfig.h"
#include "kubeclient/reflector.h"
#include "nlohmann/json.hpp"

namespace {

using gpushare::deviceplugin::DevicePluginConfig;
using gpushare::deviceplugin::DevicePluginServer;
using gpushare::kubeclient::ApiClient;

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
  if (c.version) {
    std::cout << gpushare::flags::VersionLine("gpushare-device-plugin");
    return 0;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  // The GPUs.
  auto nvml = gpushare::deviceplugin::Nvml::Load(c.nvml_library);
  if (!nvml.ok()) return Fail("NVML", nvml.status());
  auto all_gpus = (*nvml)->Devices();
  if (!all_gpus.ok()) return Fail("reading the GPUs", all_gpus.status());
  std::vector<std::string> left_out;
  auto gpus = gpushare::deviceplugin::SharableGpus(*all_gpus, &left_out);
  for (const std::string& why : left_out) std::cerr << "gpushare-device-plugin: " << why << std::endl;
  auto inventory = gpushare::deviceplugin::MakeInventory(gpus, c.memory_unit);
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
    const std::string json = gpushare::deviceplugin::InventoryJson(
        *inventory, driver.ok() ? *driver : "", topology_json);
    if (!c.watch_health) {
      std::cout << json << std::endl;
      return 0;
    }
    // The stream gpushare-dra-driver reads: the inventory on one line, then
    // the GPUs' health now and at each change.
    std::cout << nlohmann::json::parse(json).dump() << std::endl;
    gpushare::deviceplugin::HealthMonitor::Options health_options;
    health_options.checks = c.health_checks;
    health_options.probe_interval = std::chrono::milliseconds(c.health_interval_ms);
    health_options.out = &std::cerr;  // stdout carries only the stream.
    gpushare::deviceplugin::HealthMonitor health(nvml->get(), &*inventory, health_options);
    health.Start();
    std::cout << gpushare::deviceplugin::HealthLineJson(*inventory, health.unhealthy())
              << std::endl;
    while (!g_stop.load()) {
      const auto step = health.Step();
      if (step == gpushare::deviceplugin::HealthMonitor::Result::kGpusChanged) return 1;
      if (step == gpushare::deviceplugin::HealthMonitor::Result::kChanged) {
        std::cout << gpushare::deviceplugin::HealthLineJson(*inventory, health.unhealthy())
                  << std::endl;
      }
      if (!std::cout) return 1;  // The reader is gone.
    }
    return 0;
  }

  std::vector<int64_t> gpu_units;
  for (int g = 0; g < inventory->gpu_count(); ++g) gpu_units.push_back(inventory->units(g));

  // The API server.
  auto rest = gpushare::kubeclient::ResolveRestConfig({c.apiserver, c.kubeconfig, c.context});
  if (!rest.ok()) return Fail("the Kubernetes API", rest.status());
  gpushare::kubeclient::ClientOptions client_options;
  client_options.user_agent = "gpushare-device-plugin";
  client_options.qps = 20;
  client_options.burst = 40;
  client_options.timeout = std::chrono::milliseconds(10'000);
  client_options.max_attempts = 1;  // The Patcher retries, the Reflector relists.
  // One node's pods: a few MiB at most; the container's limit is 128 MiB.
  client_options.max_reply_bytes = 32ull << 20;
  auto api = ApiClient::Create(*rest, client_options);
  if (!api.ok()) return Fail("the Kubernetes API", api.status());
  const ApiClient& client = **api;

  // The node's pods, from a watch: the kubelet's calls read this cache.
  gpushare::deviceplugin::NodePodCache pod_cache;
  gpushare::kubeclient::Reflector pod_reflector(
      gpushare::deviceplugin::NodePodsWatchPath(c.node_name),
      [&](const std::string& type, const std::string& pod) { pod_cache.Apply(type, pod); });
  gpushare::kubeclient::ApiWatchTransport transport(&client, std::chrono::seconds(60));
  std::atomic<bool> stop_threads{false};
  std::thread watcher([&] {
    gpushare::kubeclient::RunReflector(pod_reflector, transport, {}, stop_threads);
  });
  auto list_pods = [&](std::vector<std::string>* skipped)
      -> absl::StatusOr<std::vector<gpushare::deviceplugin::NodePod>> {
    if (!pod_reflector.synced()) {
      return absl::UnavailableError("this node's pods are not listed yet: " +
                                    pod_reflector.status());
    }
    return pod_cache.Pods(skipped);
  };

  // Writes, off the kubelet's path.
  gpushare::deviceplugin::Patcher::Options patch_options;
  patch_options.max_attempts = 30;  // About 5 minutes at the longest backoff.
  gpushare::deviceplugin::Patcher patcher(
      [&](const gpushare::deviceplugin::Patcher::Write& w) {
        return client
            .Call(boost::beast::http::verb::patch, w.path, w.body,
                  gpushare::deviceplugin::kMergePatch)
            .status();
      },
      patch_options);
  auto mark_assigned = [&](const gpushare::deviceplugin::NodePod& pod) -> absl::Status {
    patcher.Enqueue({"assigned/" + pod.uid, "marking " + pod.id() + " assigned",
                     gpushare::kubeclient::PodPath(pod.namespace_name, pod.name),
                     gpushare::deviceplugin::AssignedPatch(NowNs())});
    return absl::OkStatus();
  };
  auto annotate_node = [&](const std::map<int, std::string>& unhealthy) {
    if (!c.annotate_node) return;
    patcher.Enqueue({"node", "annotating node " + c.node_name,
                     gpushare::deviceplugin::NodePath(c.node_name),
                     gpushare::deviceplugin::NodeAnnotationsPatch(topology_json, gpu_units,
                                                                  unhealthy)});
  };

  // The kubelet.
  DevicePluginServer::Options options;
  options.plugin_dir = c.plugin_dir;
  options.exclusive_resource = c.exclusive_resource;
  options.allocation.hami_limits = c.hami_limits;
  options.device_list = c.device_list;
  options.identify_wait = std::chrono::milliseconds(2'000);
  auto server = DevicePluginServer::Start(*inventory, options, list_pods, mark_assigned);
  if (!server.ok()) {
    stop_threads.store(true);
    watcher.join();
    return Fail("serving the device plugin API", server.status());
  }
  annotate_node({});

  // Metrics: a sample of the running parts per scrape; the GPUs' health is
  // the one this loop last published (health_mu).
  std::atomic<bool> registered_now{false};
  std::mutex health_mu;
  std::map<int, std::string> unhealthy_now;
  std::unique_ptr<gpushare::extender::Server> metrics_server;
  std::thread metrics_thread;
  if (!c.metrics_bind_address.empty()) {
    gpushare::extender::ServerOptions mo;
    mo.io_threads = 1;
    mo.worker_threads = 1;
    mo.limits.max_connections = 64;
    mo.limits.max_body_bytes = mo.limits.body_budget_bytes = 64 << 10;
    mo.handler = [&](boost::beast::http::verb method, std::string_view target, std::string_view) {
      return gpushare::deviceplugin::DevicePluginRoute(method, target, [&] {
        gpushare::deviceplugin::DevicePluginSample s;
        {
          std::lock_guard lock(health_mu);
          for (const auto& g : inventory->gpus()) {
            s.gpus.push_back({g.index, g.uuid, g.name, inventory->units(g.index),
                              unhealthy_now.count(g.index) == 0});
          }
        }
        s.registered = registered_now.load();
        const gpushare::deviceplugin::ServerStats st = (*server)->Stats();
        s.allocations = st.allocations;
        s.failed_allocations = st.failed_allocations;
        s.unidentified = st.unidentified;
        s.disagreements = st.disagreements;
        const auto ps = patcher.stats();
        s.writes_sent = ps.sent;
        s.writes_dropped = ps.dropped;
        s.writes_given_up = ps.given_up;
        s.write_retries = ps.retries;
        using V = gpushare::kubeclient::Reflector::Verdict;
        s.watch_closed = pod_reflector.watch_ends(V::kContinue);
        s.watch_expired = pod_reflector.watch_ends(V::kRelist);
        s.watch_error = pod_reflector.watch_ends(V::kRewatch);
        return s;
      });
    };
    auto created = gpushare::extender::Server::Create(nullptr, mo);
    if (!created.ok()) std::_Exit(Fail("the metrics server", created.status()));
    metrics_server = *std::move(created);
    const std::string& a = c.metrics_bind_address;
    const size_t colon = a.rfind(':');
    std::string host = a.substr(0, colon);
    if (host.size() > 1 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);  // [::1]:9402
    }
    auto port = metrics_server->Listen(host, std::stoi(a.substr(colon + 1)));
    if (!port.ok()) std::_Exit(Fail("the metrics server on " + a, port.status()));
    std::cout << "gpushare-device-plugin: metrics on http://" << a << "/metrics" << std::endl;
    metrics_thread = std::thread([&] { metrics_server->Run(); });
  }

  // What the kubelet allocated: at start (a restart: those are served
  // already), after Allocate calls whose pod disagreed with its devices or
  // could not be told (then annotations are corrected to the GPUs the
  // kubelet recorded and admitted pods are marked assigned, and the ledger
  // follows), and every 30 s.
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
      // Not listed yet: at start, the devices in use are still taken from
      // the kubelet's records; which pods they belong to follows at the
      // first reconcile after the watch has listed them.
      if (!at_start) return;
      pods = std::vector<gpushare::deviceplugin::NodePod>();
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
    for (const auto& fix :
         gpushare::deviceplugin::CorrectionsFrom(*served, *pods, *inventory, NowNs())) {
      patcher.Enqueue({"correct/" + fix.pod, "correcting the annotations of " + fix.pod,
                       gpushare::kubeclient::PodPath(fix.pod_namespace, fix.pod_name), fix.patch});
      std::cout << "gpushare-device-plugin: pod " << fix.pod
                << (fix.moved ? " runs on other GPUs than its annotations named"
                              : " was admitted but not marked assigned")
                << "; correcting its annotations" << std::endl;
    }
  };

  // Registration is kept up by a thread of its own, which calls neither
  // the API server nor NVML (a missing kubelet socket is waited for, a
  // restarted kubelet is registered with again). It looks every 100 ms
  // (four stat calls): a restarted kubelet admits the pods it finds bound
  // about a second after its registration socket appears, and rejects those
  // asking for a resource no plugin has re-registered yet
  // (UnexpectedAdmissionError, kubernetes/kubernetes#133382), so the sooner
  // the plugin is back the fewer pods fail.
  std::thread registrar([&] {
    bool registered = false;
    while (!g_stop.load()) {
      bool acted = false;
      absl::Status s = registered ? (*server)->KeepRegistered(&acted) : (*server)->Register();
      if (!s.ok()) {
        if (registered) std::cerr << "gpushare-device-plugin: " << s.message() << std::endl;
        registered = registered && s.code() == absl::StatusCode::kUnavailable;
      } else if (!registered || acted) {
        registered = true;
        std::cout << "gpushare-device-plugin: registered with the kubelet" << std::endl;
      }
      registered_now.store(registered);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  // The kubelet's records, once the watch has listed the node's pods (a few
  // seconds at most; without the API server the devices in use are
  // restored all the same).
  for (int i = 0; i < 100 && !pod_reflector.synced() && !g_stop.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  reconcile(/*at_start=*/true);

  // Health: NVML events of each GPU that reports them, and probes.
  gpushare::deviceplugin::HealthMonitor::Options health_options;
  health_options.checks = c.health_checks;
  health_options.probe_interval = std::chrono::milliseconds(c.health_interval_ms);
  gpushare::deviceplugin::HealthMonitor health(nvml->get(), &*inventory, health_options);
  health.Start();

  auto next_reconcile = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  int64_t unsettled_seen = 0;
  int exit_code = 0;
  std::string watch_status;
  while (!g_stop.load()) {
    // The watch's trouble, once each time it changes.
    if (std::string st = pod_reflector.status(); st != watch_status) {
      watch_status = st;
      std::cerr << "gpushare-device-plugin: watching this node's pods: "
                << (st.empty() ? "ok" : st) << std::endl;
    }
    const gpushare::deviceplugin::HealthMonitor::Result step = health.Step();
    if (step == gpushare::deviceplugin::HealthMonitor::Result::kGpusChanged) {
      exit_code = 1;  // The DaemonSet starts it again, advertising the GPUs there are.
      break;
    }
    if (step == gpushare::deviceplugin::HealthMonitor::Result::kChanged) {
      const std::map<int, std::string>& unhealthy = health.unhealthy();
      for (int g = 0; g < inventory->gpu_count(); ++g) {
        auto it = unhealthy.find(g);
        (*server)->SetHealth(g, it == unhealthy.end(), it == unhealthy.end() ? "" : it->second);
      }
      annotate_node(unhealthy);
      std::lock_guard lock(health_mu);
      unhealthy_now = unhealthy;
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
  }
  std::cout << "gpushare-device-plugin: stopping" << std::endl;
  g_stop.store(true);
  registrar.join();
  if (metrics_server) {
    metrics_server->Stop();
    metrics_thread.join();
  }
  (*server)->Stop();  // The sockets are gone: the kubelet sees the plugin leave.
  // The watch and the writer may be waiting on the API server (up to a
  // minute for a quiet watch): the process ends without waiting for them.
  stop_threads.store(true);
  std::cout.flush();
  std::_Exit(exit_code);
}
