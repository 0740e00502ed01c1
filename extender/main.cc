// gpushare-extender: a Kubernetes scheduler extender over HTTP, a drop-in for
// gpushare-scheduler-extender, built on gpushare::k8s::Extender and Boost.Beast.
//
//   gpushare-extender [--kubeconfig FILE] [--context NAME] [--apiserver URL]
//                     [--kube-api-qps 100] [--kube-api-burst 200]
//                     [--resync-ms 300000] [--startup-timeout-ms 120000]
//                     [--requeue-pending true]
//                     [--leader-elect false] [--leader-elect-namespace NS]
//                     [--leader-elect-name gpushare-extender] [--leader-elect-identity ID]
//                     [--leader-elect-lease-duration-ms 15000]
//                     [--leader-elect-renew-deadline-ms 10000]
//                     [--leader-elect-retry-period-ms 2000]
//                     [--leader-elect-url URL] [--leader-forward-ca FILE]
//                     [--address 127.0.0.1] [--port 32766] [--policy binpack]
//                     [--target-workload target.json]
//                     [--ttl-ms 60000] [--port-file FILE]
//                     [serving flags: TLS, access log, limits; see --help]
//   gpushare-extender --nodes nodes.json --pods pods.json [...]
//
// With the Kubernetes API (the default), the API server is found as client-go
// finds it (kubeclient/kubeconfig.h): --kubeconfig, else $KUBECONFIG, else the
// pod's service account; --context picks a kubeconfig context; --apiserver
// overrides the server URL, and without --kubeconfig is used alone
// (http://127.0.0.1:8001: plain HTTP to `kubectl proxy`). HTTPS verifies the
// server's certificate and name.
// At start it lists nodes and pods (retrying for up to --startup-timeout-ms),
// rebuilds the state from the bind annotations of assigned pods, then serves;
// two threads then watch nodes and pods (kubeclient/reflector.h) and apply each
// event (Extender::ApplyNodeEvent / ApplyPodEvent); a full list every
// --resync-ms is only a safety net. It binds: at /bind it reserves the GPUs,
// posts the Binding with the pod's annotations on it (one write: the API
// server merges them into the pod as it binds it) and confirms; on an API error it replies with the error, so kube-scheduler
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
// With --leader-elect true, several replicas share a coordination.k8s.io/v1
// Lease (kubeclient/leader.h): only the holder binds and requeues; the others
// follow the watches like the leader and serve filter, prioritize and the
// other calls from the same state; a /bind reaching a follower is forwarded
// to the leader (the URL it wrote on the Lease, --leader-elect-url), or
// refused with 503 when there is none (kube-scheduler retries the pod). A new
// leader first lists nodes and pods again (consistent reads) and applies
// them (Extender::Sync) before it binds, so it binds from a state at least as
// new as the last binding of its predecessor. On SIGTERM it releases the
// Lease.
//
// GET /metrics serves Prometheus metrics (extender/metrics.h).
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
//   GET  /version, /healthz, /readyz (503 until nodes and pods are listed), /metrics
// A malformed body gets HTTP 400 with {"Error": ..., "Code": ...} and changes
// nothing. One thread per connection (at most ServerLimits::max_connections;
// an idle one is closed after ServerLimits::idle_timeout); the library does the
// locking.

#include <malloc.h>

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
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "kubeclient/api_client.h"
#include "extender/config.h"
#include "extender/follow.h"
#include "extender/forward.h"
#include "kubeclient/kubeconfig.h"
#include "kubeclient/leader.h"
#include "extender/metrics.h"
#include "kubeclient/reflector.h"
#include "extender/token_review.h"
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

using gpushare::kubeclient::ApiClient;
using gpushare::extender::ExtenderConfig;
using gpushare::kubeclient::Reflector;

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

int Usage(const std::string& why) {
  std::cerr << "gpushare-extender: " << why << "\n" << gpushare::extender::ExtenderHelp();
  return 2;
}

// --target-workload, read and checked; null without it.
absl::StatusOr<std::shared_ptr<const gpushare::TargetWorkload>> LoadTargetWorkload(
    const std::string& path) {
  if (path.empty()) return nullptr;
  std::string text;
  if (!ReadFile(path, &text)) {
    return absl::InvalidArgumentError("--target-workload: cannot read " + path);
  }
  absl::StatusOr<gpushare::TargetWorkload> parsed = gpushare::TargetWorkloadFromJson(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError("--target-workload " + path + ": " +
                                      std::string(parsed.status().message()));
  }
  return std::make_shared<const gpushare::TargetWorkload>(*std::move(parsed));
}

// The API server's clients: `api` for lists, watches and requeues; with
// leader election, `lease_api` (its own connections and rate limit) and
// `bind_api` (binds' short-lived writes).
struct ApiClients {
  std::unique_ptr<ApiClient> api, lease_api, bind_api;
};

absl::StatusOr<ApiClients> ConnectApi(const ExtenderConfig& c,
                                      gpushare::extender::Metrics& metrics) {
  absl::StatusOr<gpushare::kubeclient::RestConfig> config =
      gpushare::kubeclient::ResolveRestConfig({c.apiserver, c.kubeconfig, c.context});
  if (!config.ok()) return config.status();
  for (const std::string& w : config->warnings) std::cerr << "warning: " << w << "\n";
  gpushare::kubeclient::ClientOptions client_options;
  client_options.qps = c.qps;
  client_options.burst = c.burst;
  client_options.on_reply = [&metrics](http::verb method, int status) {
    const std::string m(http::to_string(method));
    metrics.Add("gpushare_extender_api_requests_total",
                {{"method", m}, {"code", status == 0 ? "none" : std::to_string(status)}});
    if (status == 0 || status >= 400) {
      metrics.Add("gpushare_extender_api_errors_total", {{"method", m}});
    }
  };
  ApiClients clients;
  if (c.leader_elect) {
    // One try per round, well within the renew deadline.
    gpushare::kubeclient::ClientOptions lease_options = client_options;
    lease_options.max_attempts = 1;
    lease_options.timeout = c.lease.renew_deadline / 2;
    lease_options.qps = 0;
    absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(*config, lease_options);
    if (!client.ok()) return client.status();
    clients.lease_api = *std::move(client);
    gpushare::kubeclient::ClientOptions bind_options = client_options;
    bind_options.max_attempts = 1;
    bind_options.timeout = (c.lease.lease_duration - c.lease.renew_deadline) / 2;
    client = ApiClient::Create(*config, bind_options);
    if (!client.ok()) return client.status();
    clients.bind_api = *std::move(client);
  }
  absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(*config, client_options);
  if (!client.ok()) return client.status();
  clients.api = *std::move(client);
  std::cout << "gpushare-extender: API server " << config->server << " (" << config->source
            << ")" << std::endl;
  return clients;
}

// The first list of nodes and pods, until the API answers or
// --startup-timeout-ms is over.
absl::Status FirstList(const ApiClient& api, int64_t startup_timeout_ms, std::string* nodes_json,
                       std::string* pods_json) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(startup_timeout_ms);
  std::chrono::milliseconds pause(500);
  for (;;) {
    absl::StatusOr<std::string> nodes = api.Get("/api/v1/nodes");
    absl::StatusOr<std::string> pods =
        nodes.ok() ? api.Get("/api/v1/pods") : absl::StatusOr<std::string>(nodes.status());
    if (pods.ok()) {
      *nodes_json = *std::move(nodes);
      *pods_json = *std::move(pods);
      return absl::OkStatus();
    }
    std::cerr << "gpushare-extender: cannot list nodes and pods: " << pods.status() << "\n";
    if (Clock::now() + pause > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("giving up after --startup-timeout-ms ", startup_timeout_ms));
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::seconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Fixed thresholds: glibc otherwise raises both after the first large
  // block is freed (up to 32 and 64 MiB), so list bodies and the objects a
  // relist replaced stay in a thread's arena instead of returning to the
  // system (20,000 nodes relisted away kept 55-121 MiB; with these, 19-29).
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 4 << 20);
  absl::StatusOr<ExtenderConfig> parsed = gpushare::extender::ParseExtenderFlags(argc, argv);
  if (!parsed.ok()) return Usage(std::string(parsed.status().message()));
  ExtenderConfig& flags = *parsed;
  if (flags.help) {
    std::cout << gpushare::extender::ExtenderHelp();
    return 0;
  }
  if (flags.version) {
    std::cout << gpushare::flags::VersionLine("gpushare-extender");
    return 0;
  }
  if (absl::Status s = gpushare::extender::CompleteLeaderElection(&flags); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (absl::Status s = gpushare::extender::ValidateServerOptions(flags.serving); !s.ok()) {
    std::cerr << "gpushare-extender: " << s.message() << "\n";  // Bad TLS files, limits.
    return 2;
  }
  const bool files = flags.files();
  absl::StatusOr<std::shared_ptr<const gpushare::TargetWorkload>> loaded =
      LoadTargetWorkload(flags.target_workload);
  if (!loaded.ok()) {
    std::cerr << "gpushare-extender: " << loaded.status().message() << "\n";
    return 2;
  }
  const std::shared_ptr<const gpushare::TargetWorkload> target = *std::move(loaded);

  using gpushare::extender::Metrics;
  Metrics metrics;
  gpushare::extender::DeclareExtenderMetrics(metrics);

  std::unique_ptr<ApiClient> api;
  std::unique_ptr<ApiClient> lease_api;  // Its own connections and rate limit.
  std::unique_ptr<ApiClient> bind_api;   // Leader election: binds' short-lived writes.
  std::string nodes_json, pods_json;
  if (files) {
    if (!ReadFile(flags.nodes, &nodes_json)) return Usage("cannot read " + flags.nodes);
    if (!ReadFile(flags.pods, &pods_json)) return Usage("cannot read " + flags.pods);
  } else {
    absl::StatusOr<ApiClients> clients = ConnectApi(flags, metrics);
    if (!clients.ok()) {
      std::cerr << "gpushare-extender: " << clients.status().message() << "\n";
      return 1;
    }
    api = std::move(clients->api);
    lease_api = std::move(clients->lease_api);
    bind_api = std::move(clients->bind_api);
    if (absl::Status s = FirstList(*api, flags.startup_timeout_ms, &nodes_json, &pods_json);
        !s.ok()) {
      std::cerr << "gpushare-extender: " << s.message() << "\n";
      return 1;
    }
  }

  gpushare::SchedulerOptions options;
  options.policy = flags.policy;
  options.policy_options.fgd_target = target;
  options.reservation_ttl_ms = flags.ttl_ms;
  absl::StatusOr<gpushare::extender::StartState> start =
      gpushare::extender::StartFromLists(nodes_json, pods_json, options, &metrics);
  if (!start.ok()) {
    std::cerr << "gpushare-extender: " << start.status().message() << "\n";
    return 1;
  }
  const gpushare::k8s::RebuildReport& report = start->report;
  std::unique_ptr<gpushare::Scheduler>& scheduler = start->scheduler;
  gpushare::k8s::ExtenderOptions ext_options;
  ext_options.version = std::string("gpushare-extender ") + gpushare::Version();
  ext_options.plan_deadline_ms = flags.plan_deadline_ms;
  std::unique_ptr<gpushare::kubeclient::LeaderElector> elector;
  if (lease_api) {
    elector = std::make_unique<gpushare::kubeclient::LeaderElector>(
        flags.lease, [&lease_api](http::verb m, const std::string& path, const std::string& body) {
          return lease_api->Call(m, path, body);
        });
  }
  if (api) {
    ext_options.binder = [&](const gpushare::k8s::BindTarget& t,
                             const gpushare::k8s::BindResult& r) {
      absl::Status s;
      if (elector) {
        // Leadership is checked right before each write, and each write
        // gets one try of at most (lease - renew deadline) / 2 (bind_api),
        // so a write sent before the renew deadline has landed or failed
        // before any successor can hold the Lease.
        s = bind_api->Bind(t, r, [&]() -> absl::Status {
          if (elector->may_bind()) return absl::OkStatus();
          return absl::FailedPreconditionError("not the leader any more: " + elector->Describe());
        });
      } else {
        s = api->Bind(t, r);
      }
      metrics.Add("gpushare_extender_bind_api_results_total",
                  {{"code", absl::StatusCodeToString(s.code())}});
      return s;
    };
    ext_options.pod_reader = [&api](const gpushare::k8s::BindTarget& t) {
      return api->GetPod(t);
    };
  }
  gpushare::k8s::Extender ext(scheduler.get(), ext_options);
  ext.RememberPods(start->pods);
  start->pods = {};  // Remembered: the copy is not needed.

  // Watches: one thread per kind, their events applied by the follower
  // (extender/follow.h).
  std::atomic<bool> stop{false};
  std::unique_ptr<Reflector> node_reflector, pod_reflector;
  std::unique_ptr<gpushare::extender::Requeuer> requeuer;
  gpushare::extender::FollowerOptions follow;
  follow.pods_on_node = [&](const std::string& node) { return pod_reflector->SnapshotOnNode(node); };
  follow.kick = [&] {
    if (requeuer) requeuer->Kick();
  };
  gpushare::extender::Follower follower(&ext, std::move(follow));
  std::vector<std::thread> threads;
  gpushare::extender::ReadinessCheck ready;
  if (api) {
    pod_reflector = std::make_unique<Reflector>(
        "/api/v1/pods",
        [&](const std::string& type, const std::string& pod) { follower.OnPodEvent(type, pod); });
    node_reflector = std::make_unique<Reflector>(
        "/api/v1/nodes",
        [&](const std::string& type, const std::string& node) { follower.OnNodeEvent(type, node); });
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
      // Only the leader touches pods.
      ro.pods = [&] {
        return elector && !elector->may_bind() ? std::vector<std::string>()
                                               : pod_reflector->SnapshotOnNode("");
      };
      ro.node_names = [&] {
        std::vector<std::string> names;
        scheduler->Read([&](const gpushare::Cluster& c) { names = c.node_names(); });
        return names;
      };
      ro.patch = [&](const std::string& ns, const std::string& name, const std::string& patch) {
        return api->Call(http::verb::patch, gpushare::kubeclient::PodPath(ns, name), patch,
                         "application/merge-patch+json")
            .status();
      };
      requeuer = std::make_unique<gpushare::extender::Requeuer>(&ext, std::move(ro));
    }
  }

  flags.serving.ready = ready;
  // The API's watch is the truth: nobody may end a placement by HTTP.
  flags.serving.lifecycle_routes = files;
  // Binds reaching a follower go to the leader (extender/forward.h).
  std::unique_ptr<gpushare::extender::BindForwarder> forwarder;
  if (elector) {
    gpushare::extender::LeaderView view;
    view.may_bind = [&] { return elector->may_bind(); };
    view.holder = [&] { return elector->holder(); };
    view.holder_url = [&] { return elector->holder_url(); };
    view.describe = [&] { return elector->Describe(); };
    view.identity = flags.lease.identity;
    gpushare::extender::ForwardOptions fo;
    if (!flags.forward_ca.empty() && !ReadFile(flags.forward_ca, &fo.ca_pem)) {
      return Usage("cannot read --leader-forward-ca " + flags.forward_ca);
    }
    // A replica that serves TLS forwards over TLS only, presenting its own
    // certificate (or --leader-forward-cert) to the leader's listener.
    fo.require_https = !flags.serving.tls_cert_file.empty();
    const std::string cert = !flags.forward_cert.empty() ? flags.forward_cert
                                                         : flags.serving.tls_cert_file;
    const std::string key = !flags.forward_key.empty() ? flags.forward_key
                                                       : flags.serving.tls_private_key_file;
    if (!cert.empty() && (!ReadFile(cert, &fo.client_cert_pem) || !ReadFile(key, &fo.client_key_pem))) {
      return Usage("cannot read the forwarding certificate " + cert + " or its key " + key);
    }
    fo.count = [&metrics](const char* result) {
      metrics.Add("gpushare_extender_binds_total", {{"result", result}});
    };
    forwarder = std::make_unique<gpushare::extender::BindForwarder>(std::move(view), fo);
    flags.serving.role = [&] { return elector->Describe(); };
    flags.serving.before_bind = [&](std::string_view target, std::string_view body) {
      return forwarder->BeforeBind(target, body);
    };
  }
  flags.serving.on_request = [&metrics](const std::string& route,
                                        const gpushare::extender::Reply& reply,
                                        double seconds) {
    gpushare::extender::CountRequest(metrics, route, static_cast<int>(reply.status), reply.body,
                                     reply.forwarded, seconds);
  };
  // The cluster's gauges: only the sample is taken under the scheduler's
  // lock (binds wait for that, not for the text), and overlapping scrapes
  // share one render.
  gpushare::extender::SharedRender cluster_metrics([&] {
    gpushare::extender::ClusterSample sample;
    scheduler->Read(
        [&](const gpushare::Cluster& c) { sample = gpushare::extender::SampleCluster(c); });
    return gpushare::extender::RenderClusterSample(sample);
  });
  flags.serving.metrics = [&]() {
    std::vector<gpushare::extender::WatchEnds> watches;
    for (const Reflector* r : {node_reflector.get(), pod_reflector.get()}) {
      if (r == nullptr) continue;
      watches.push_back({r->path().substr(r->path().rfind('/') + 1),
                         r->watch_ends(Reflector::Verdict::kContinue),
                         r->watch_ends(Reflector::Verdict::kRelist),
                         r->watch_ends(Reflector::Verdict::kRewatch)});
    }
    gpushare::extender::LeaderSample leader;
    leader.leading = elector ? elector->may_bind() : api != nullptr;
    if (elector) {
      leader.identity = flags.lease.identity;
      leader.transitions = elector->transitions();
    }
    return metrics.Render() + gpushare::extender::RenderProcessGauges(watches, leader) +
           cluster_metrics.Get();
  };
  // Prometheus' service account token, reviewed by the API server.
  std::unique_ptr<gpushare::extender::TokenReviewer> reviewer;
  if (api != nullptr && flags.metrics_token_review && !flags.serving.client_ca_file.empty()) {
    reviewer = std::make_unique<gpushare::extender::TokenReviewer>(
        [&api](const std::string& path, const std::string& body) {
          return api->Call(boost::beast::http::verb::post, path, body);
        });
    flags.serving.authorize_token = [&reviewer](const std::string& token,
                                                const std::string& path) {
      return reviewer->Review(token, "get", path);
    };
  }
  flags.serving.on_tls_reload = [](const absl::Status& s) {
    if (s.ok()) {
      std::cerr << "gpushare-extender: the TLS files changed; new connections use them\n";
    } else {
      std::cerr << "gpushare-extender: warning: the TLS files changed but cannot be used yet ("
                << s.message() << "); still serving the previous ones\n";
    }
  };
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
            << " placements restored; policy " << flags.policy
            << (target == nullptr ? std::string()
                                  : " against a target workload of " +
                                        std::to_string(target->tasks.size()) + " task types")
            << "; "
            << (api ? "binding through " + api->config().server : std::string("reserving only"))
            << "; listening on " << (flags.serving.tls_cert_file.empty() ? "http://" : "https://")
            << flags.address << ":" << port << std::endl;

  // Expired reservations are forgotten by every mutating call; this timer
  // also frees them while no bind arrives (and the freed GPUs may let a
  // pending pod fit).
  threads.emplace_back([&] {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (scheduler->ExpireReservations() > 0 && requeuer) requeuer->Kick();
    }
  });
  std::unique_ptr<gpushare::kubeclient::ApiWatchTransport> transport;
  if (api) {
    gpushare::kubeclient::ReflectorOptions ro;
    ro.resync = std::chrono::milliseconds(flags.resync_ms);
    ro.trim_bytes = flags.serving.limits.trim_bytes;
    // The server ends a watch after timeoutSeconds and sends bookmarks about
    // every minute; silence beyond that means the connection is dead.
    transport = std::make_unique<gpushare::kubeclient::ApiWatchTransport>(
        api.get(), std::chrono::duration_cast<std::chrono::milliseconds>(ro.watch_timeout) +
                       std::chrono::seconds(30));
    for (Reflector* r : {node_reflector.get(), pod_reflector.get()}) {
      threads.emplace_back([&, r, ro] {
        gpushare::kubeclient::RunReflector(*r, *transport, ro, stop);
      });
    }
    if (requeuer) threads.emplace_back([&] { requeuer->Run(stop); });
  }
  // The elector: joined at shutdown so that the Lease is released.
  std::thread elector_thread;
  if (elector) {
    std::cout << "gpushare-extender: leader election on Lease " << flags.lease.namespace_name
              << "/" << flags.lease.name << " as " << flags.lease.identity << std::endl;
    elector_thread = std::thread([&] {
      elector->Run(
          stop,
          [&]() -> absl::Status {
            // A new tenure: bring the state up to the API server's before
            // binding (consistent lists; binds of the previous leader all
            // happened before the Lease changed hands).
            const uint64_t mark = ext.SyncMark();
            absl::StatusOr<std::string> nodes = api->Get("/api/v1/nodes");
            absl::StatusOr<std::string> pods =
                nodes.ok() ? api->Get("/api/v1/pods") : absl::StatusOr<std::string>(nodes.status());
            if (!pods.ok()) {
              std::cerr << "gpushare-extender: leader resync failed: " << pods.status() << "\n";
              return pods.status();
            }
            absl::StatusOr<gpushare::k8s::SyncReport> r = follower.Resync(*nodes, *pods, mark);
            if (!r.ok()) {
              std::cerr << "gpushare-extender: leader resync failed: " << r.status() << "\n";
              return r.status();
            }
            std::cout << "gpushare-extender: leading as " << flags.lease.identity
                      << " (lease transitions " << elector->transitions() << ")" << std::endl;
            return absl::OkStatus();
          },
          [&] {
            std::cout << "gpushare-extender: lost the lease; following" << std::endl;
          });
    });
  }

  // SIGINT and SIGTERM stop the server; Run() then returns.
  asio::io_context signal_io;
  asio::signal_set signals(signal_io, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) { (*server)->Stop(); });
  std::thread([&signal_io] { signal_io.run(); }).detach();
  (*server)->Run();
  stop.store(true);
  if (elector_thread.joinable()) elector_thread.join();  // Releases the Lease.
  // Watch threads may be blocked in a read: leave without joining them.
  std::cout << "gpushare-extender: stopped" << std::endl;
  // Workers may still be handling requests: leave without destructors.
  std::fflush(stdout);
  std::_Exit(0);
}
