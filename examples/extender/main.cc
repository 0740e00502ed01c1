// gpushare_extender: a Kubernetes scheduler extender over HTTP, a drop-in for
// gpushare-scheduler-extender, built on gpushare::k8s::Extender and Boost.Beast.
//
//   gpushare_extender (--apiserver URL | --nodes nodes.json --pods pods.json)
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
// (.../binding) and confirms; on any API error it forgets the reservation and
// replies with the error, so kube-scheduler retries. Every --resync-ms it lists
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
// nothing. One thread per connection (at most kMaxConnections; an idle one is
// closed after kIdleTimeout); the library does the locking.

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

#include "gpushare/gpushare.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr char kPrefix[] = "/gpushare-scheduler/";
constexpr uint64_t kBodyLimit = 64ull << 20;  // Bytes.
constexpr int kMaxConnections = 512;
constexpr auto kIdleTimeout = std::chrono::seconds(120);
constexpr auto kApiTimeout = std::chrono::seconds(20);

struct Flags {
  std::string nodes, pods, apiserver, address = "127.0.0.1", policy = "binpack", port_file;
  int port = 32766;
  int64_t ttl_ms = 60'000;
  int64_t resync_ms = 5'000;
};

// A minimal client of the Kubernetes API over plain HTTP (one connection per
// call: binds and resyncs are rare next to filter calls).
class ApiClient {
 public:
  static absl::StatusOr<ApiClient> Create(const std::string& url) {
    static const std::string kScheme = "http://";
    if (url.rfind(kScheme, 0) != 0) {
      return absl::InvalidArgumentError("--apiserver '" + url +
                                        "' must start with http:// (e.g. kubectl proxy)");
    }
    std::string rest = url.substr(kScheme.size());
    ApiClient c;
    const size_t slash = rest.find('/');
    if (slash != std::string::npos) {
      c.base_ = rest.substr(slash);
      rest.resize(slash);
      while (!c.base_.empty() && c.base_.back() == '/') c.base_.pop_back();
    }
    const size_t colon = rest.rfind(':');
    c.host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
    c.port_ = colon == std::string::npos ? "80" : rest.substr(colon + 1);
    if (c.host_.empty() || c.port_.empty()) {
      return absl::InvalidArgumentError("--apiserver '" + url + "' has no host:port");
    }
    return c;
  }

  // The body of a 2xx reply; Unavailable for transport errors, the API's
  // message for others.
  absl::StatusOr<std::string> Call(http::verb method, const std::string& path,
                                   const std::string& body = "",
                                   const char* content_type = "application/json") const {
    asio::io_context io;
    beast::tcp_stream stream(io);
    beast::error_code ec;
    tcp::resolver resolver(io);
    auto endpoints = resolver.resolve(host_, port_, ec);
    stream.expires_after(kApiTimeout);
    if (!ec) stream.connect(endpoints, ec);
    http::request<http::string_body> req{method, base_ + path, 11};
    req.set(http::field::host, host_);
    req.set(http::field::user_agent, "gpushare-extender");
    req.set(http::field::accept, "application/json");
    if (method != http::verb::get) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.prepare_payload();
    if (!ec) http::write(stream, req, ec);
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 30);
    if (!ec) http::read(stream, buffer, parser, ec);
    stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    if (!parser.is_done()) {
      return absl::UnavailableError(std::string(http::to_string(method)) + " " + path +
                                    ": " + (ec ? ec.message() : "no reply"));
    }
    const auto& res = parser.get();
    if (res.result_int() / 100 != 2) {
      return absl::UnavailableError(std::string(http::to_string(method)) + " " + path +
                                    ": HTTP " + std::to_string(res.result_int()) + " " +
                                    res.body().substr(0, 300));
    }
    return res.body();
  }

  absl::Status Bind(const gpushare::k8s::BindTarget& t,
                    const gpushare::k8s::BindResult& r) const {
    const std::string pod = "/api/v1/namespaces/" + t.pod_namespace + "/pods/" + t.pod_name;
    absl::StatusOr<std::string> patched =
        Call(http::verb::patch, pod, r.patch, "application/merge-patch+json");
    if (!patched.ok()) return patched.status();
    return Call(http::verb::post, pod + "/binding", gpushare::k8s::BindingJson(t)).status();
  }

 private:
  std::string host_, port_, base_;
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
  std::cerr << "gpushare_extender: " << why << "\n"
            << "usage: gpushare_extender (--apiserver http://HOST:PORT | --nodes FILE --pods FILE)\n"
            << "                         [--address A] [--port P] [--policy NAME] [--ttl-ms MS]\n"
            << "                         [--resync-ms MS] [--port-file FILE]\n";
  return 2;
}

struct Reply {
  http::status status = http::status::ok;
  std::string body;
};

Reply FromStatus(const absl::StatusOr<std::string>& r) {
  if (r.ok()) return {http::status::ok, *r};
  const http::status code = r.status().code() == absl::StatusCode::kNotFound
                                ? http::status::not_found
                            : r.status().code() == absl::StatusCode::kInvalidArgument
                                ? http::status::bad_request
                                : http::status::internal_server_error;
  return {code, gpushare::k8s::ErrorJson(r.status())};
}

Reply Route(gpushare::k8s::Extender& ext, http::verb method, const std::string& target,
            const std::string& body) {
  std::string path = target.substr(0, target.find('?'));
  if (path == "/healthz") return {http::status::ok, "{\"status\":\"ok\"}"};
  if (path == "/version" || path == "/gpushare-scheduler/version") return {http::status::ok, ext.Version()};
  if (path.rfind(kPrefix, 0) != 0) {
    return {http::status::not_found, gpushare::k8s::ErrorJson(absl::NotFoundError(
                                         "no route " + path))};
  }
  const std::string verb = path.substr(sizeof(kPrefix) - 1);
  if (verb == "inspect" || verb.rfind("inspect/", 0) == 0) {
    if (method != http::verb::get) {
      return {http::status::method_not_allowed,
              gpushare::k8s::ErrorJson(absl::InvalidArgumentError("inspect takes GET"))};
    }
    return FromStatus(ext.Inspect(verb == "inspect" ? "" : verb.substr(8)));
  }
  if (method != http::verb::post) {
    return {http::status::method_not_allowed,
            gpushare::k8s::ErrorJson(absl::InvalidArgumentError(verb + " takes POST"))};
  }
  if (verb == "filter") return FromStatus(ext.Filter(body));
  if (verb == "prioritize") return FromStatus(ext.Prioritize(body));
  if (verb == "bind") return FromStatus(ext.Bind(body));
  if (verb == "preempt") return FromStatus(ext.Preempt(body));
  if (verb == "confirm") return FromStatus(ext.Confirm(body));
  if (verb == "forget") return FromStatus(ext.Forget(body));
  if (verb == "release") return FromStatus(ext.Release(body));
  return {http::status::not_found,
          gpushare::k8s::ErrorJson(absl::NotFoundError("no route " + path))};
}

std::atomic<int> g_connections{0};

// Serves one keep-alive connection until the peer closes it or stays idle
// for kIdleTimeout.
void Serve(tcp::socket socket, gpushare::k8s::Extender* ext) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kBodyLimit);
    stream.expires_after(kIdleTimeout);
    http::read(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = gpushare::k8s::ErrorJson(absl::InvalidArgumentError("body too large"));
        res.prepare_payload();
        http::write(stream, res, ec);
      }
      break;
    }
    http::request<http::string_body> req = parser.release();
    Reply reply = Route(*ext, req.method(), std::string(req.target()), req.body());
    http::response<http::string_body> res{reply.status, req.version()};
    res.set(http::field::server, "gpushare-extender");
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(reply.body);
    res.prepare_payload();
    stream.expires_after(kIdleTimeout);
    http::write(stream, res, ec);
    if (ec || !req.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  g_connections.fetch_sub(1);
}

// Lists nodes and pods from the API server and reconciles the extender.
absl::Status Resync(const ApiClient& api, gpushare::k8s::Extender& ext,
                    std::set<std::string>& logged) {
  const uint64_t mark = ext.SyncMark();
  absl::StatusOr<std::string> nodes = api.Call(http::verb::get, "/api/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  absl::StatusOr<std::string> pods = api.Call(http::verb::get, "/api/v1/pods");
  if (!pods.ok()) return pods.status();
  absl::StatusOr<gpushare::k8s::SyncReport> r = ext.Sync(*nodes, *pods, mark);
  if (!r.ok()) return r.status();
  if (r->nodes_added + r->nodes_updated + r->nodes_removed + r->confirmed + r->released +
          r->restored > 0) {
    std::cout << "gpushare_extender: resync: " << r->nodes_added << " nodes added, "
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
    absl::StatusOr<std::string> listed = api->Call(http::verb::get, path);
    if (!listed.ok()) {
      std::cerr << "gpushare_extender: cannot list " << path << ": " << listed.status() << "\n";
      return 1;
    }
    *json = *std::move(listed);
  }

  gpushare::k8s::RebuildReport report;
  absl::StatusOr<gpushare::Cluster> cluster =
      gpushare::k8s::RebuildCluster(nodes_json, pods_json, {}, &report);
  if (!cluster.ok()) {
    std::cerr << "gpushare_extender: cannot rebuild the state: " << cluster.status() << "\n";
    return 1;
  }
  for (const std::string& w : report.warnings) std::cerr << "warning: " << w << "\n";
  gpushare::SchedulerOptions options;
  options.policy = flags.policy;
  options.reservation_ttl_ms = flags.ttl_ms;
  auto scheduler = gpushare::Scheduler::Create(*std::move(cluster), options);
  if (!scheduler.ok()) {
    std::cerr << "gpushare_extender: " << scheduler.status() << "\n";
    return 1;
  }
  gpushare::k8s::ExtenderOptions ext_options;
  ext_options.version = std::string("gpushare-extender ") + gpushare::Version();
  if (api) {
    ext_options.binder = [&api](const gpushare::k8s::BindTarget& t,
                                const gpushare::k8s::BindResult& r) { return api->Bind(t, r); };
  }
  gpushare::k8s::Extender ext(scheduler->get(), ext_options);
  if (absl::Status s = ext.RememberPods(pods_json); !s.ok()) {
    std::cerr << "gpushare_extender: " << s << "\n";
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
    std::cerr << "gpushare_extender: cannot listen on " << flags.address << ":" << flags.port
              << ": " << ec.message() << "\n";
    return 1;
  }
  const int port = acceptor.local_endpoint().port();
  if (!flags.port_file.empty()) {
    std::ofstream(flags.port_file + ".tmp") << port << "\n";
    std::rename((flags.port_file + ".tmp").c_str(), flags.port_file.c_str());
  }
  std::cout << "gpushare_extender: " << report.nodes << " nodes, " << report.placed
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
          std::cerr << "gpushare_extender: resync failed: " << s << "\n";
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
  std::function<void()> accept = [&] {
    acceptor.async_accept([&](beast::error_code aec, tcp::socket socket) {
      if (aec) return;
      if (g_connections.fetch_add(1) >= kMaxConnections) {
        g_connections.fetch_sub(1);
        beast::error_code ignored;
        socket.close(ignored);  // The client retries; the others keep working.
      } else {
        std::thread(Serve, std::move(socket), &ext).detach();
      }
      accept();
    });
  };
  accept();
  io.run();
  stop.store(true);
  expirer.join();
  std::cout << "gpushare_extender: stopped" << std::endl;
  // Connection threads may still be running: leave without destructors.
  std::fflush(stdout);
  std::_Exit(0);
}
