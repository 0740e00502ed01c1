// gpushare-extender: a Kubernetes scheduler extender over HTTP, a drop-in for
// gpushare-scheduler-extender, built on gpushare::k8s::Extender and Boost.Beast.
//
//   gpushare-extender (--apiserver URL | --nodes nodes.json --pods pods.json)
//                     [--address 127.0.0.1] [--port 32766] [--policy binpack]
//                     [--ttl-ms 60000] [--resync-ms 5000] [--port-file FILE]
//
// The state is rebuilt from the bind annotations of assigned pods, listed
// from --apiserver or read from files (`kubectl get nodes -o json`,
// `kubectl get pods -A -o json`). --port 0 picks a free port; --port-file
// then receives it (for scripts).
//
// --apiserver http://HOST:PORT is the Kubernetes API over plain HTTP, for
// example `kubectl proxy` in the same pod. With it the extender binds: at
// /bind it reserves the GPUs, patches the pod's annotations
// (PATCH /api/v1/namespaces/NS/pods/NAME, merge patch), posts the Binding
// (.../binding) and confirms; on an API error it replies with the error, so
// kube-scheduler retries, and forgets the reservation unless the pod may be
// bound (409 Conflict, 429, 5xx, timeout): then it reads the pod, keeps the
// GPUs if it is bound to the node (and replies success), and forgets them if
// not; if the pod cannot be read, the reservation waits for the resync or its
// time-to-live. Concurrent binds of one pod wait for the first one's outcome;
// a retried bind of a bound pod writes nothing again. Every --resync-ms it lists
// nodes and pods and reconciles (Extender::Sync): new nodes, cordons, pods
// that ended or were deleted, pods bound by another replica.
// Without --apiserver it only reserves at /bind; whoever binds the pod posts
// /confirm, or the reservation expires after --ttl-ms.
//
// Routes (JSON in and out, the Go field names of the extender protocol):
//   POST /gpushare-scheduler/filter      ExtenderArgs -> ExtenderFilterResult
//   POST /gpushare-scheduler/prioritize  ExtenderArgs -> HostPriorityList
//   POST /gpushare-scheduler/bind        ExtenderBindingArgs -> ExtenderBindingResult
//   POST /gpushare-scheduler/preempt     ExtenderPreemptionArgs -> ...Result
//   POST /gpushare-scheduler/{confirm,forget,release}  {"PodNamespace","PodName"|"PodUID"}
//   GET  /gpushare-scheduler/inspect[/<node>]
//   GET  /version, /healthz
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
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <functional>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "extender/api_client.h"
#include "extender/server.h"
#include "gpushare/gpushare.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using gpushare::extender::ApiClient;

struct Flags {
  std::string nodes, pods, apiserver, address = "127.0.0.1", policy = "binpack", port_file;
  int port = 32766;
  int64_t ttl_ms = 60'000;
  int64_t resync_ms = 5'000;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

int Usage(const char* why) {
  std::cerr << "gpushare-extender: " << why << "\n"
            << "usage: gpushare-extender (--apiserver http://HOST:PORT | --nodes FILE --pods FILE)\n"
            << "                         [--address A] [--port P] [--policy NAME] [--ttl-ms MS]\n"
            << "                         [--resync-ms MS] [--port-file FILE]\n";
  return 2;
}

// Lists nodes and pods from the API server and reconciles the extender.
absl::Status Resync(const ApiClient& api, gpushare::k8s::Extender& ext,
                    std::set<std::string>& logged) {
  const uint64_t mark = ext.SyncMark();
  absl::StatusOr<std::string> nodes = api.Get("/api/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<std::string> pods = api.Get("/api/v1/pods");
  if (!pods.ok()) return pods.status();
  absl::StatusOr<gpushare::k8s::SyncReport> r = ext.Sync(*nodes, *pods, mark);
  if (!r.ok()) return r.status();
  if (r->nodes_added + r->nodes_updated + r->nodes_removed + r->confirmed + r->released +
          r->restored > 0) {
    std::cout << "gpushare-extender: resync: " << r->nodes_added << " nodes added, "
              << r->nodes_updated << " updated, " << r->nodes_removed << " removed; "
              << r->confirmed << " confirmed, " << r->released << " released, " << r->restored
              << " restored" << std::endl;
  }
  for (const std::string& w : r->warnings) {
    if (logged.size() > 10'000) logged.clear();
    if (logged.insert(w).second) std::cerr << "warning: " << w << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--nodes" && (v = value())) {
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
    } else if (arg == "--resync-ms" && (v = value())) {
      flags.resync_ms = std::atoll(v);
    } else {
      return Usage(("unknown or incomplete flag " + arg).c_str());
    }
  }
  if (flags.apiserver.empty() && (flags.nodes.empty() || flags.pods.empty())) {
    return Usage("--apiserver, or --nodes and --pods, are required");
  }
  if (flags.port < 0 || flags.port > 65535) return Usage("--port must be in 0..65535");
  if (flags.resync_ms < 100) return Usage("--resync-ms must be at least 100");
  std::optional<ApiClient> api;
  if (!flags.apiserver.empty()) {
    absl::StatusOr<ApiClient> client = ApiClient::Create(flags.apiserver);
    if (!client.ok()) return Usage(std::string(client.status().message()).c_str());
    api = *std::move(client);
  }
  std::string nodes_json, pods_json;
  if (!flags.nodes.empty() && !ReadFile(flags.nodes, &nodes_json)) {
    return Usage(("cannot read " + flags.nodes).c_str());
  }
  if (!flags.pods.empty() && !ReadFile(flags.pods, &pods_json)) {
    return Usage(("cannot read " + flags.pods).c_str());
  }
  for (auto [json, path] : {std::pair{&nodes_json, "/api/v1/nodes"},
                            std::pair{&pods_json, "/api/v1/pods"}}) {
    if (!json->empty()) continue;
    absl::StatusOr<std::string> listed = api->Get(path);
    if (!listed.ok()) {
      std::cerr << "gpushare-extender: cannot list " << path << ": " << listed.status() << "\n";
      return 1;
    }
    *json = *std::move(listed);
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

  asio::io_context io;
  beast::error_code ec;
  tcp::endpoint endpoint(asio::ip::make_address(flags.address, ec),
                         static_cast<unsigned short>(flags.port));
  if (ec) return Usage(("bad --address " + flags.address).c_str());
  tcp::acceptor acceptor(io);
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    std::cerr << "gpushare-extender: cannot listen on " << flags.address << ":" << flags.port
              << ": " << ec.message() << "\n";
    return 1;
  }
  const int port = acceptor.local_endpoint().port();
  if (!flags.port_file.empty()) {
    std::ofstream(flags.port_file + ".tmp") << port << "\n";
    std::rename((flags.port_file + ".tmp").c_str(), flags.port_file.c_str());
  }
  std::cout << "gpushare-extender: " << report.nodes << " nodes, " << report.placed
            << " placements restored; policy " << flags.policy << "; "
            << (api ? "binding through " + flags.apiserver : std::string("reserving only"))
            << "; listening on " << flags.address << ":" << port << std::endl;

  // Expired reservations are forgotten by every mutating call; this timer
  // also frees them while no bind arrives, and resyncs with the API server.
  std::atomic<bool> stop{false};
  std::thread expirer([&] {
    std::set<std::string> logged;
    auto next_sync = std::chrono::steady_clock::now() + std::chrono::milliseconds(flags.resync_ms);
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      (*scheduler)->ExpireReservations();
      if (api && std::chrono::steady_clock::now() >= next_sync) {
        if (absl::Status s = Resync(*api, ext, logged); !s.ok()) {
          std::cerr << "gpushare-extender: resync failed: " << s << "\n";
        }
        next_sync = std::chrono::steady_clock::now() + std::chrono::milliseconds(flags.resync_ms);
      }
    }
  });

  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const beast::error_code&, int) {
    acceptor.close();
    io.stop();
  });
  const gpushare::extender::ServerLimits limits;
  static std::atomic<int> open_connections{0};  // Outlives detached connection threads.
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](beast::error_code aec, tcp::socket socket) {
      if (aec) return;
      if (open_connections.fetch_add(1) >= limits.max_connections) {
        open_connections.fetch_sub(1);
        beast::error_code ignored;
        socket.close(ignored);  // The client retries; the others keep working.
      } else {
        std::thread(gpushare::extender::ServeConnection, std::move(socket), &ext, limits,
                    &open_connections)
            .detach();
      }
      accept();
    });
  };
  accept();
  io.run();
  stop.store(true);
  expirer.join();
  std::cout << "gpushare-extender: stopped" << std::endl;
  // Connection threads may still be running: leave without destructors.
  std::fflush(stdout);
  std::_Exit(0);
}
