// File: extender/server.h
// -----------------------------------------------------------------------------
// The HTTP side of gpushare-extender: routing of the scheduler-extender
// protocol onto gpushare::k8s::Extender, and serving connections on Boost.Beast.
// Kept apart from main.cc so that tests and fuzzers can drive the same code.
//
//   gpushare::extender::Reply r =
//       gpushare::extender::Route(ext, http::verb::post, "/gpushare-scheduler/filter", body);
//   // r.status: 200, 400 (malformed body), 404 (unknown route or node), 405 ...

#ifndef GPUSHARE_EXTENDER_SERVER_H_
#define GPUSHARE_EXTENDER_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/verb.hpp>

#include "gpushare/kubernetes.h"

namespace gpushare::extender {

// The prefix of the extender protocol's routes (kube-scheduler's urlPrefix
// ends with it): POST /gpushare-scheduler/filter and so on.
inline constexpr char kRoutePrefix[] = "/gpushare-scheduler/";

// One HTTP reply: a status and a JSON body.
struct Reply {
  boost::beast::http::status status = boost::beast::http::status::ok;
  std::string body;
};

// Readiness for GET /readyz: OK when the extender's state has been built
// from the API server (the first full list of nodes and pods applied), else
// a status whose message says what is missing. Empty: always ready.
using ReadinessCheck = std::function<absl::Status()>;

// Routes one request to `ext`. `target` is the request target (a query
// string is ignored). Never throws; malformed bodies are 400 with
// k8s::ErrorJson(), unknown routes 404, a wrong method 405; /readyz is 200,
// or 503 with the reason `ready` gives.
Reply Route(k8s::Extender& ext, boost::beast::http::verb method, std::string_view target,
            std::string_view body, const ReadinessCheck& ready = {});

// Limits of one server.
struct ServerLimits {
  uint64_t body_limit = 64ull << 20;                  // Bytes of one request body.
  int max_connections = 512;                          // Open connections at once.
  std::chrono::seconds idle_timeout{120};             // Keep-alive connection idle.
  ReadinessCheck ready;                               // For /readyz (see Route()).
};

// Serves one keep-alive connection until the peer closes it or stays idle for
// limits.idle_timeout; decrements `open_connections` when done. Runs on the
// calling thread.
void ServeConnection(boost::asio::ip::tcp::socket socket, k8s::Extender* ext,
                     const ServerLimits& limits, std::atomic<int>* open_connections);

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_SERVER_H_
