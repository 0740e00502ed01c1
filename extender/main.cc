// gpushare-extender: a Kubernetes scheduler extender over HTTP, a drop-in for
// gpushare-scheduler-extender, built on gpushare::k8s::Extender and Boost.Beast.
//
//   gpushare-extender [--kubeconfig FILE] [--context NAME] [--apiserver URL]
//                     [--kube-api-qps 100] [--kube-api-burst 200]
//                     [--resync-ms 300000] [--startup-timeout-ms 120000]
//                     [--requeue-pending true]
//                     [--address 127.0.0.1] [--port 32766] [--policy binpack]
//                     [--ttl-ms 60000] [--port-file FILE]
//                     [serving flags: TLS, access log, limits; see --help]
//   gpushare-extender --nodes nodes.json --pods pods.json [...]
//
// With the Kubernetes API (the default), the API server is found as client-go
// finds it (extender/kubeconfig.h): --kubeconfig, else $KUBECONFIG, else the
// pod's service account; --context picks a kubeconfig context; --apiserver
// overrides the server URL, and without --kubeconfig is used alone
// (http://127.0.0.1:8001: plain HTTP to `kubectl proxy`). HTTPS verifies the
// server's certificate and name.
// At start it lists nodes and pods (retrying for up to --startup-timeout-ms),
// rebuilds the state from the bind annotations of assigned pods, then serves;
// two threads then watch nodes and pods (extender/reflector.h) and apply each
// event (Extender::ApplyNodeEvent / ApplyPodEvent); a full list every
// --resync-ms is only a safety net. It binds: at /bind it reserves the GPUs,
// patches the pod's annotations (merge patch), posts the Binding and
// confirms; on an API error it replies with the error, so kube-scheduler
// retries, and forgets the reservation unless the pod may be bound (409
// Conflict, 429, 5xx, timeout): then it reads the pod, keeps the GPUs if it is
// bound to the node (and replies success), and forgets them if not; if the
// pod cannot be read, the reservation waits for the watch or its
// time-to-live. Concurrent binds of one pod wait for the first one's outcome;
// a retried bind of a bound pod writes nothing again. When a deletion frees
// GPUs, pending GPU pods that now fit are touched so that kube-scheduler
// retries them at once (extender/requeue.h; --requeue-pending false turns it
// off).
//
// With --nodes and --pods (`kubectl get nodes -o json`, `kubectl get pods -A
// -o json`) it only reserves at /bind; whoever binds the pod posts /confirm,
// or the reservation expires after --ttl-ms. --port 0 picks a free port;
// --port-file then receives it (for scripts).
//
// Routes (JSON in and out, the Go field names of the extender protocol):
//   POST /gpushare-scheduler/filter      ExtenderArgs -> ExtenderFilterResult
//   POST /gpushare-scheduler/prioritize  ExtenderArgs -> HostPriorityList
//   POST /gpushare-scheduler/bind        ExtenderBindingArgs -> ExtenderBindingResult
//   POST /gpushare-scheduler/preempt     ExtenderPreemptionArgs -> ...Result
//   POST /gpushare-scheduler/{confirm,forget,release}  {"PodNamespace","PodName"|"PodUID"}
//   GET  /gpushare-scheduler/inspect[/<node>]
//   GET  /version, /healthz, /readyz (503 until nodes and pods are listed)
// A malformed body gets HTTP 400 with {"Error": ..., "Code": ...} and changes
// nothing. One thread per connection (at most ServerLimits::max_connections;
// an idle one is closed after ServerLimits::idle_timeout); the library does the
// locking.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "extender/api_client.h"
#include "extender/kubeconfig.h"
#include "extender/reflector.h"
#include "extender/requeue.h"
#include "extender/server.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

using gpushare::extender::ApiClient;
using gpushare::extender::Reflector;

struct Flags {
  std::string nodes, pods, apiserver, kubeconfig, context, address = "127.0.0.1",
      policy = "binpack", port_file;
  int port = 32766;
  int64_t ttl_ms = 60'000;
  int64_t resync_ms = 300'000;
  int64_t startup_timeout_ms = 120'000;
  double qps = gpushare::extender::ClientOptions{}.qps;
  int burst = gpushare::extender::ClientOptions{}.burst;
  bool requeue = true;
  gpushare::extender::ServerOptions serving;  // Serving flags (ParseServingFlag).
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

void Help(std::ostream& out) {
  out << "usage: gpushare-extender [flags]\n"
         "The Kubernetes API (default): found as client-go finds it.\n"
         "  --kubeconfig FILE        kubeconfig to use (default: $KUBECONFIG, first file;\n"
         "                           else the in-cluster service account)\n"
         "  --context NAME           kubeconfig context (default: its current-context)\n"
         "  --apiserver URL          API server URL; overrides the kubeconfig's server. Without\n"
         "                           --kubeconfig it is used alone (no credentials, $KUBECONFIG\n"
         "                           ignored); http://HOST:PORT is plain HTTP, e.g. kubectl proxy\n"
         "  --kube-api-qps N         client-side request rate limit, 0 = none (default 100/s)\n"
         "  --kube-api-burst N       requests allowed in a burst (default 200)\n"
         "  --resync-ms MS           full list of nodes and pods this often, a safety net\n"
         "                           beside the watches (default 300000, at least 100)\n"
         "  --startup-timeout-ms MS  keep trying the first list this long (default 120000)\n"
         "  --requeue-pending BOOL   touch pending GPU pods that fit after GPUs are freed,\n"
         "                           so kube-scheduler retries them (default true)\n"
         "Files instead of the API (reserve only; no binding):\n"
         "  --nodes FILE --pods FILE `kubectl get nodes -o json`, `kubectl get pods -A -o json`\n"
         "Serving:\n"
         "  --address A              listen address (default 127.0.0.1)\n"
         "  --port P                 listen port, 0 = any free one (default 32766)\n"
         "  --port-file FILE         write the port there once listening\n"
         "  --policy NAME            placement policy (default binpack)\n"
         "  --ttl-ms MS              reservation time-to-live (default 60000)\n"
         "  --help                   this text\n"
      << gpushare::extender::ServingFlagsHelp();
}

int Usage(const std::string& why) {
  std::cerr << "gpushare-extender: " << why << "\n";
  Help(std::cerr);
  return 2;
}

// Logs each distinct warning once (bounded memory).
class WarningLog {
 public:
  void Log(const std::vector<std::string>& warnings) {
    std::lock_guard lock(mu_);
    for (const std::string& w : warnings) {
      if (logged_.size() > 10'000) logged_.clear();
      if (logged_.insert(w).second) std::cerr << "warning: " << w << "\n";
    }
  }

 private:
  std::mutex mu_;
  std::set<std::string> logged_;
};

void LogReport(const char* what, const gpushare::k8s::SyncReport& r) {
  if (r.nodes_added + r.nodes_updated + r.nodes_removed + r.confirmed + r.released +
          r.restored ==
      0) {
    return;
  }
  std::cout << "gpushare-extender: " << what << ": " << r.nodes_added << " nodes added, "
            << r.nodes_updated << " updated, " << r.nodes_removed << " removed; "
            << r.confirmed << " confirmed, " << r.released << " released, " << r.restored
            << " restored" << std::endl;
}

// The reflectors' transport: the API client, a real clock.
class ApiTransport : public gpushare::extender::WatchTransport {
 public:
  ApiTransport(const ApiClient* api, std::chrono::milliseconds idle) : api_(api), idle_(idle) {}
  absl::StatusOr<std::string> List(const std::string& path) override { return api_->Get(path); }
  absl::Status Watch(const std::string& path,
                     const std::function<bool(std::string_view)>& on_data) override {
    return api_->Stream(path, on_data, idle_);
  }
  void Sleep(std::chrono::milliseconds d) override { std::this_thread::sleep_for(d); }
  Clock::time_point Now() override { return Clock::now(); }

 private:
  const ApiClient* api_;
  const std::chrono::milliseconds idle_;
};

bool ParseBool(const std::string& v, bool* out) {
  if (v == "true" || v == "1") return *out = true, true;
  if (v == "false" || v == "0") return *out = false, true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    std::string error;
    if (arg == "--help" || arg == "-h") {
      Help(std::cout);
      return 0;
    } else if (gpushare::extender::ParseServingFlag(arg, value, &flags.serving, &error)) {
      if (!error.empty()) return Usage(error);
    } else if (arg == "--nodes" && (v = value())) {
      flags.nodes = v;
    } else if (arg == "--pods" && (v = value())) {
      flags.pods = v;
    } else if (arg == "--address" && (v = value())) {
      flags.address = v;
    } else if (arg == "--port" && (v = value())) {
      flags.port = std::atoi(v);
    } else if (arg == "--policy" && (v = value())) {
      flags.policy = v;
    } else if (arg == "--ttl-ms" && (v = value())) {
      flags.ttl_ms = std::atoll(v);
    } else if (arg == "--port-file" && (v = value())) {
      flags.port_file = v;
    } else if (arg == "--apiserver" && (v = value())) {
      flags.apiserver = v;
    } else if (arg == "--kubeconfig" && (v = value())) {
      flags.kubeconfig = v;
    } else if (arg == "--context" && (v = value())) {
      flags.context = v;
    } else if (arg == "--kube-api-qps" && (v = value())) {
      char* end = nullptr;
      flags.qps = std::strtod(v, &end);
      if (end == v || *end != '\0' || !(flags.qps >= 0) || flags.qps > 1e6) {
        return Usage(std::string("--kube-api-qps takes requests per second in 0..1e6, not ") + v);
      }
    } else if (arg == "--kube-api-burst" && (v = value())) {
      char* end = nullptr;
      const long burst = std::strtol(v, &end, 10);
      if (end == v || *end != '\0' || burst < 1 || burst > 1'000'000) {
        return Usage(std::string("--kube-api-burst takes a count in 1..1000000, not ") + v);
      }
      flags.burst = static_cast<int>(burst);
    } else if (arg == "--resync-ms" && (v = value())) {
      flags.resync_ms = std::atoll(v);
    } else if (arg == "--startup-timeout-ms" && (v = value())) {
      flags.startup_timeout_ms = std::atoll(v);
    } else if (arg == "--requeue-pending" && (v = value())) {
      if (!ParseBool(v, &flags.requeue)) return Usage("--requeue-pending takes true or false");
    } else {
      return Usage("unknown or incomplete flag " + arg);
    }
  }
  const bool files = !flags.nodes.empty() || !flags.pods.empty();
  if (files && (flags.nodes.empty() || flags.pods.empty())) {
    return Usage("--nodes and --pods go together");
  }
  if (files && (!flags.apiserver.empty() || !flags.kubeconfig.empty())) {
    return Usage("--nodes/--pods and --apiserver/--kubeconfig exclude each other");
  }
  if (flags.port < 0 || flags.port > 65535) return Usage("--port must be in 0..65535");
  if (flags.resync_ms < 100) return Usage("--resync-ms must be at least 100");
  if (flags.burst < 1) return Usage("--kube-api-burst must be at least 1");
  if (flags.startup_timeout_ms < 0) return Usage("--startup-timeout-ms must not be negative");
  if (absl::Status s = gpushare::extender::ValidateServerOptions(flags.serving); !s.ok()) {
    std::cerr << "gpushare-extender: " << s.message() << "\n";  // Bad TLS files, limits.
    return 2;
  }

  std::unique_ptr<ApiClient> api;
  std::string nodes_json, pods_json;
  if (files) {
    if (!ReadFile(flags.nodes, &nodes_json)) return Usage("cannot read " + flags.nodes);
    if (!ReadFile(flags.pods, &pods_json)) return Usage("cannot read " + flags.pods);
  } else {
    absl::StatusOr<gpushare::extender::RestConfig> config = gpushare::extender::ResolveRestConfig(
        {flags.apiserver, flags.kubeconfig, flags.context});
    if (!config.ok()) {
      std::cerr << "gpushare-extender: " << config.status().message() << "\n";
      return 1;
    }
    for (const std::string& w : config->warnings) std::cerr << "warning: " << w << "\n";
    gpushare::extender::ClientOptions client_options;
    client_options.qps = flags.qps;
    client_options.burst = flags.burst;
    absl::StatusOr<std::unique_ptr<ApiClient>> client =
        ApiClient::Create(*config, client_options);
    if (!client.ok()) {
      std::cerr << "gpushare-extender: " << client.status().message() << "\n";
      return 1;
    }
    api = *std::move(client);
    std::cout << "gpushare-extender: API server " << config->server << " (" << config->source
              << ")" << std::endl;
    // The first list, until the API answers or the start-up time is over.
    const Clock::time_point deadline =
        Clock::now() + std::chrono::milliseconds(flags.startup_timeout_ms);
    std::chrono::milliseconds pause(500);
    for (;;) {
      absl::StatusOr<std::string> nodes = api->Get("/api/v1/nodes");
      absl::StatusOr<std::string> pods =
          nodes.ok() ? api->Get("/api/v1/pods") : absl::StatusOr<std::string>(nodes.status());
      if (pods.ok()) {
        nodes_json = *std::move(nodes);
        pods_json = *std::move(pods);
        break;
      }
      std::cerr << "gpushare-extender: cannot list nodes and pods: " << pods.status() << "\n";
      if (Clock::now() + pause > deadline) {
        std::cerr << "gpushare-extender: giving up after --startup-timeout-ms "
                  << flags.startup_timeout_ms << "\n";
        return 1;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(10));
    }
  }

  gpushare::k8s::RebuildReport report;
  absl::StatusOr<gpushare::Cluster> cluster =
      gpushare::k8s::RebuildCluster(nodes_json, pods_json, {}, &report);
  if (!cluster.ok()) {
    std::cerr << "gpushare-extender: cannot rebuild the state: " << cluster.status() << "\n";
    return 1;
  }
  for (const std::string& w : report.warnings) std::cerr << "warning: " << w << "\n";
  gpushare::SchedulerOptions options;
  options.policy = flags.policy;
  options.reservation_ttl_ms = flags.ttl_ms;
  auto scheduler = gpushare::Scheduler::Create(*std::move(cluster), options);
  if (!scheduler.ok()) {
    std::cerr << "gpushare-extender: " << scheduler.status() << "\n";
    return 1;
  }
  gpushare::k8s::ExtenderOptions ext_options;
  ext_options.version = std::string("gpushare-extender ") + gpushare::Version();
  if (api) {
    ext_options.binder = [&api](const gpushare::k8s::BindTarget& t,
                                const gpushare::k8s::BindResult& r) { return api->Bind(t, r); };
    ext_options.pod_reader = [&api](const gpushare::k8s::BindTarget& t) {
      return api->GetPod(t);
    };
  }
  gpushare::k8s::Extender ext(scheduler->get(), ext_options);
  if (absl::Status s = ext.RememberPods(pods_json); !s.ok()) {
    std::cerr << "gpushare-extender: " << s << "\n";
    return 1;
  }

  // Watches: one thread per kind. Pod events and the replay of a node's pods
  // are applied under one mutex, so a replay never applies an older state of
  // a pod after a newer one. A deleted node that still held placements stays
  // (cordoned) in `doomed`; no further event names it, so each release
  // tries to remove it again.
  std::atomic<bool> stop{false};
  WarningLog warnings;
  std::mutex pod_apply_mu;
  std::map<std::string, std::string> doomed;  // Guarded by pod_apply_mu.
  std::unique_ptr<Reflector> node_reflector, pod_reflector;
  std::unique_ptr<gpushare::extender::Requeuer> requeuer;
  std::vector<std::thread> threads;
  gpushare::extender::ReadinessCheck ready;
  if (api) {
    pod_reflector = std::make_unique<Reflector>(
        "/api/v1/pods", [&](const std::string& type, const std::string& pod) {
          std::lock_guard lock(pod_apply_mu);
          absl::StatusOr<gpushare::k8s::SyncReport> r = ext.ApplyPodEvent(type, pod);
          if (!r.ok()) {
            warnings.Log(
                {"pod event " + type + " not applied: " + std::string(r.status().message())});
            return;
          }
          LogReport("pod event", *r);
          warnings.Log(r->warnings);
          if (r->released == 0) return;
          for (auto it = doomed.begin(); it != doomed.end();) {
            absl::StatusOr<gpushare::k8s::SyncReport> d = ext.ApplyNodeEvent("DELETED", it->second);
            if (d.ok() && (d->nodes_removed > 0 || d->warnings.empty())) {  // Gone.
              LogReport("node removed", *d);
              it = doomed.erase(it);
            } else {
              ++it;
            }
          }
          if (requeuer) requeuer->Kick();
        });
    node_reflector = std::make_unique<Reflector>(
        "/api/v1/nodes", [&](const std::string& type, const std::string& node) {
          absl::StatusOr<gpushare::k8s::SyncReport> r = ext.ApplyNodeEvent(type, node);
          if (!r.ok()) {
            warnings.Log(
                {"node event " + type + " not applied: " + std::string(r.status().message())});
            return;
          }
          LogReport("node event", *r);
          warnings.Log(r->warnings);
          const std::string name =
              nlohmann::json::parse(node, nullptr, false)["metadata"].value("name", "");
          std::lock_guard lock(pod_apply_mu);
          if (type == "DELETED") {
            if (r->nodes_removed == 0 && !r->warnings.empty()) doomed[name] = node;
            return;
          }
          doomed.erase(name);
          if (r->nodes_added + r->nodes_updated == 0) return;
          // A node (re)appeared: restore the placements of the pods bound to it.
          for (const std::string& pod : pod_reflector->SnapshotOnNode(name)) {
            absl::StatusOr<gpushare::k8s::SyncReport> p = ext.ApplyPodEvent("MODIFIED", pod);
            if (p.ok()) warnings.Log(p->warnings);
          }
          if (requeuer) requeuer->Kick();
        });
    // The state was built from these lists; the watches start where they end.
    if (absl::Status s = node_reflector->ApplyList(nodes_json, /*notify=*/false); !s.ok()) {
      std::cerr << "gpushare-extender: " << s << "\n";
      return 1;
    }
    if (absl::Status s = pod_reflector->ApplyList(pods_json, /*notify=*/false); !s.ok()) {
      std::cerr << "gpushare-extender: " << s << "\n";
      return 1;
    }
    ready = [&]() -> absl::Status {
      for (const Reflector* r : {node_reflector.get(), pod_reflector.get()}) {
        if (!r->synced()) {
          return absl::UnavailableError("waiting for the first list of " + r->path() +
                                        (r->status().empty() ? "" : ": " + r->status()));
        }
      }
      return absl::OkStatus();
    };
    if (flags.requeue) {
      gpushare::extender::RequeueOptions ro;
      ro.pods = [&] { return pod_reflector->SnapshotOnNode(""); };
      ro.node_names = [&] {
        std::vector<std::string> names;
        (*scheduler)->Read([&](const gpushare::Cluster& c) { names = c.node_names(); });
        return names;
      };
      ro.patch = [&](const std::string& ns, const std::string& name, const std::string& patch) {
        return api->Call(http::verb::patch, "/api/v1/namespaces/" + ns + "/pods/" + name, patch,
                         "application/merge-patch+json")
            .status();
      };
      requeuer = std::make_unique<gpushare::extender::Requeuer>(&ext, std::move(ro));
    }
  }

  flags.serving.ready = ready;
  absl::StatusOr<std::unique_ptr<gpushare::extender::Server>> server =
      gpushare::extender::Server::Create(&ext, flags.serving);
  if (!server.ok()) {
    std::cerr << "gpushare-extender: " << server.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<int> listening = (*server)->Listen(flags.address, flags.port);
  if (!listening.ok()) {
    std::cerr << "gpushare-extender: " << listening.status().message() << "\n";
    return 1;
  }
  const int port = *listening;
  if (!flags.port_file.empty()) {
    std::ofstream(flags.port_file + ".tmp") << port << "\n";
    std::rename((flags.port_file + ".tmp").c_str(), flags.port_file.c_str());
  }
  std::cout << "gpushare-extender: " << report.nodes << " nodes, " << report.placed
            << " placements restored; policy " << flags.policy << "; "
            << (api ? "binding through " + api->config().server : std::string("reserving only"))
            << "; listening on " << (flags.serving.tls_cert_file.empty() ? "http://" : "https://")
            << flags.address << ":" << port << std::endl;

  // Expired reservations are forgotten by every mutating call; this timer
  // also frees them while no bind arrives (and the freed GPUs may let a
  // pending pod fit).
  threads.emplace_back([&] {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if ((*scheduler)->ExpireReservations() > 0 && requeuer) requeuer->Kick();
    }
  });
  std::unique_ptr<ApiTransport> transport;
  if (api) {
    gpushare::extender::ReflectorOptions ro;
    ro.resync = std::chrono::milliseconds(flags.resync_ms);
    // The server ends a watch after timeoutSeconds and sends bookmarks about
    // every minute; silence beyond that means the connection is dead.
    transport = std::make_unique<ApiTransport>(
        api.get(), std::chrono::duration_cast<std::chrono::milliseconds>(ro.watch_timeout) +
                       std::chrono::seconds(30));
    for (Reflector* r : {node_reflector.get(), pod_reflector.get()}) {
      threads.emplace_back([&, r, ro] {
        gpushare::extender::RunReflector(*r, *transport, ro, stop);
      });
    }
    if (requeuer) threads.emplace_back([&] { requeuer->Run(stop); });
  }

  // SIGINT and SIGTERM stop the server; Run() then returns.
  asio::io_context signal_io;
  asio::signal_set signals(signal_io, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) { (*server)->Stop(); });
  std::thread([&signal_io] { signal_io.run(); }).detach();
  (*server)->Run();
  stop.store(true);
  // Watch threads may be blocked in a read: leave without joining them.
  std::cout << "gpushare-extender: stopped" << std::endl;
  // Workers may still be handling requests: leave without destructors.
  std::fflush(stdout);
  std::_Exit(0);
}
