// gpushare_extender: a Kubernetes scheduler extender over HTTP, a drop-in for
// gpushare-scheduler-extender, built on gpushare::k8s::Extender and Boost.Beast.
//
//   gpushare_extender --nodes nodes.json --pods pods.json [--address 127.0.0.1]
//                     [--port 32766] [--policy binpack] [--ttl-ms 60000]
//                     [--port-file FILE]
//
// nodes.json / pods.json: `kubectl get nodes -o json` and
// `kubectl get pods -A -o json` output; the state is rebuilt from the bind
// annotations of assigned pods. --port 0 picks a free port; --port-file then
// receives it (for scripts).
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
// nothing. One thread per connection; the library does the locking.

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
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

struct Flags {
  std::string nodes, pods, address = "127.0.0.1", policy = "binpack", port_file;
  int port = 32766;
  int64_t ttl_ms = 60'000;
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
            << "usage: gpushare_extender --nodes FILE --pods FILE [--address A] [--port P]\n"
            << "                         [--policy NAME] [--ttl-ms MS] [--port-file FILE]\n";
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

// Serves one keep-alive connection until the peer closes it.
void Serve(tcp::socket socket, gpushare::k8s::Extender* ext) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kBodyLimit);
    http::read(socket, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = gpushare::k8s::ErrorJson(absl::InvalidArgumentError("body too large"));
        res.prepare_payload();
        http::write(socket, res, ec);
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
    http::write(socket, res, ec);
    if (ec || !req.keep_alive()) break;
  }
  socket.shutdown(tcp::socket::shutdown_both, ec);
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
    } else {
      return Usage(("unknown or incomplete flag " + arg).c_str());
    }
  }
  if (flags.nodes.empty() || flags.pods.empty()) return Usage("--nodes and --pods are required");
  std::string nodes_json, pods_json;
  if (!ReadFile(flags.nodes, &nodes_json)) return Usage(("cannot read " + flags.nodes).c_str());
  if (!ReadFile(flags.pods, &pods_json)) return Usage(("cannot read " + flags.pods).c_str());

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
            << " placements restored; policy " << flags.policy << "; listening on "
            << flags.address << ":" << port << std::endl;

  // Expired reservations are forgotten by every mutating call; this timer
  // also frees them while no bind arrives.
  std::atomic<bool> stop{false};
  std::thread expirer([&] {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      (*scheduler)->ExpireReservations();
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
      std::thread(Serve, std::move(socket), &ext).detach();
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
