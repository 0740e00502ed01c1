// File: extender/server.h
// -----------------------------------------------------------------------------
// The HTTP side of gpushare-extender: routing of the scheduler-extender
// protocol onto gpushare::k8s::Extender, and an asynchronous HTTP/1.1 server
// (plain or TLS) on Boost.Beast that defends itself against hostile or broken
// clients. Kept apart from main.cc so that tests and fuzzers drive the same
// code.
//
//   gpushare::extender::Reply r =
//       gpushare::extender::Route(ext, http::verb::post, "/gpushare-scheduler/filter", body);
//   // r.status: 200, 400 (malformed body), 404 (unknown route or node), 405 ...
//
//   gpushare::extender::ServerOptions options;         // Defaults: see ServerLimits.
//   auto server = gpushare::extender::Server::Create(&ext, options);
//   absl::StatusOr<int> port = (*server)->Listen("127.0.0.1", 0);
//   (*server)->Run();                                  // Until Stop().
//
// Design. Connections are served asynchronously (Beast async_read/async_write
// on a few I/O threads, each operation with its own deadline through
// tcp_stream::expires_after), so a slow or stalled client costs a socket and a
// few kilobytes, never a thread. Requests are handled (Route: JSON parsing,
// placement, binding through the API server, which may block) on a separate
// pool of worker threads, so a slow bind never delays reading other requests.
//
// Defences, all in ServerLimits (every one a flag of gpushare-extender):
//   * Header deadline: a request's line and headers must arrive within
//     header_timeout of its first byte (an idle keep-alive connection may wait
//     idle_timeout for that first byte).
//   * Minimum body rate: from the body's first byte, each byte must arrive
//     by the time the minimum rate gives it after a header_timeout allowance
//     (byte k by start + header_timeout + k / min_body_rate), checked at every
//     read: a sender that stalls is cut within header_timeout, and the whole
//     body arrives within header_timeout + Content-Length / min_body_rate.
//   * Size limits, answered before the body is read: Content-Length above
//     max_body_bytes gets 413; a request line longer than max_header_bytes 414;
//     headers beyond max_header_bytes 431; a malformed request (a negative,
//     overflowing or repeated Content-Length, bad syntax) 400. Each with the
//     JSON error body {"Error","Code"}, then the connection is closed.
//   * Memory budget: a request's Content-Length is reserved from
//     body_budget_bytes once its body starts to arrive (a connection that
//     sends only headers holds none; at most 16 KiB of a body, one TLS
//     record, is read before) and returned once the reply is built, so at
//     most body_budget_bytes of bodies are being received or parsed at once
//     (parsing costs a multiple of the body; see docs/kubernetes.md). A
//     request that does not fit waits up to budget_wait, then gets 503 with
//     Retry-After (kube-scheduler retries the pod). After a body of at least
//     trim_bytes the freed memory is returned to the system (malloc_trim).
//   * Connection cap: at max_connections, a new connection evicts the open
//     connection that has waited longest for its request's header (then the
//     longest idle one); connections with a request in progress are never
//     evicted, so slow clients cannot lock kube-scheduler out.
//
// Thread safety: Route() is as thread-safe as the Extender (it is). Server's
// methods may be called from any thread; Stop() from a signal handler's
// io_context callback or another thread.

#ifndef GPUSHARE_EXTENDER_SERVER_H_
#define GPUSHARE_EXTENDER_SERVER_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/beast/http/status.hpp>
#include <boost/beast/http/verb.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/kubernetes.h"

namespace gpushare::extender {

// The prefix of the extender protocol's routes (kube-scheduler's urlPrefix
// ends with it): POST /gpushare-scheduler/filter and so on.
inline constexpr char kRoutePrefix[] = "/gpushare-scheduler/";

// One HTTP reply: a status and a body (JSON unless content_type says otherwise).
struct Reply {
  boost::beast::http::status status = boost::beast::http::status::ok;
  std::string body;
  std::string content_type = "application/json";
  bool forwarded = false;  // Answered by another replica (RouteHooks::before_bind).
};

// Readiness for GET /readyz: OK when the extender's state has been built
// from the API server (the first full list of nodes and pods applied), else
// a status whose message says what is missing. Empty: always ready.
using ReadinessCheck = std::function<absl::Status()>;

// What a host adds to the routes; every member may be empty.
struct RouteHooks {
  ReadinessCheck ready;  // /readyz; empty: always ready.
  // Called with the target and body of each POST /bind before the extender
  // sees it (leader election, kubeclient/leader.h): nullopt binds here; a
  // reply is sent instead, e.g. the leader's reply to the forwarded request,
  // or HTTP 503 with k8s::ErrorJson() when this replica may not bind:
  // kube-scheduler's HTTP extender treats any status but 200 as a failed
  // bind, forgets the assumed pod and puts it back in its queue (with
  // backoff), so the pod is retried. Empty: bind here.
  std::function<std::optional<Reply>(std::string_view target, std::string_view body)>
      before_bind;
  // The body of GET /metrics (Prometheus text, kMetricsContentType); empty: 404.
  std::function<std::string()> metrics;
  // The replica's role, added to /readyz's 200 body as "role" (e.g. "leader",
  // "follower (leader: b)"); empty: left out.
  std::function<std::string()> role;
  // Whether POST confirm, forget and release are served. With the Kubernetes
  // API as the source of truth the watch alone ends placements (a pod that
  // ends or is deleted), kube-scheduler never sends these, and a release from
  // anyone else could free the GPUs of a running pod for another: there they
  // are off and answer 403 Forbidden. On (the default) for file-fed state.
  bool lifecycle_routes = true;
};

// Routes one request to `ext`. `target` is the request target (a query
// string is ignored). Never throws; malformed bodies are 400 with
// k8s::ErrorJson(), unknown routes 404, a wrong method 405; /readyz is 200,
// or 503 with the reason `hooks.ready` gives.
Reply Route(k8s::Extender& ext, boost::beast::http::verb method, std::string_view target,
            std::string_view body, const RouteHooks& hooks);
inline Reply Route(k8s::Extender& ext, boost::beast::http::verb method, std::string_view target,
                   std::string_view body, const ReadinessCheck& ready = {}) {
  return Route(ext, method, target, body, RouteHooks{ready, {}, {}, {}});
}

// The path of a request target without its query string, and the name
// under which it is counted in metrics: "filter", "bind", ... for the
// extender's routes, "readyz", "metrics", ... for the others, "other" for
// unknown routes (so that a scan cannot grow the label set).
std::string RouteName(std::string_view target);

// Limits of one server; the defaults suit one kube-scheduler on the same
// network. Sizes in bytes, rates in bytes per second.
struct ServerLimits {
  // One request body. 10,000 full v1.Node objects (nodeCacheCapable: false)
  // make a 127 MiB ExtenderArgs; 192 MiB leaves room for larger nodes.
  uint64_t max_body_bytes = 192ull << 20;
  // Bodies being received or handled at once (reserved by Content-Length).
  // Must be at least max_body_bytes.
  uint64_t body_budget_bytes = 192ull << 20;
  // How long a request waits for the budget before 503 + Retry-After.
  std::chrono::milliseconds budget_wait{2000};
  // Request line plus headers (kube-scheduler sends a few hundred bytes).
  uint32_t max_header_bytes = 16 << 10;
  // From a request's first byte to the end of its headers; also the TLS
  // handshake, and the base allowance of a body or a reply.
  std::chrono::milliseconds header_timeout{10'000};
  // A keep-alive connection waiting for the next request (longer than Go's
  // 90 s IdleConnTimeout, so kube-scheduler closes first).
  std::chrono::milliseconds idle_timeout{120'000};
  // Slowest accepted body (and reply) transfer.
  uint64_t min_body_rate = 1ull << 20;
  // Open connections; beyond it the longest-waiting idle or header-reading
  // connection is evicted.
  int max_connections = 1024;
  // Bodies at least this large are followed by malloc_trim().
  uint64_t trim_bytes = 8ull << 20;
};

// Where requests are logged: one line per request,
//   <UTC time> <peer> <method> <target> <status> <body bytes in> <body bytes out> <N>us
// e.g. "2024-03-01T10:00:00.123Z 127.0.0.1:50412 POST /gpushare-scheduler/filter
// 200 2113 1450 412us": the time is when the request's headers were read, N
// the microseconds from then until the reply was written.
struct ServerOptions {
  ServerLimits limits;
  int io_threads = 2;       // Threads reading and writing sockets.
  int worker_threads = 8;   // Threads handling requests (binds may block).
  // POST /plan runs on threads of its own, at a lower CPU priority (nice 10),
  // so that plans never hold up filters and binds; a client with a plan running, or a plan beyond
  // max_plans at once, gets 429.
  int plan_threads = 1;
  int max_plans = 2;
  // PEM chain; TLS (1.2+) when set. The three files (this, the key and
  // client_ca_file) are read again when they change (checked at most once a
  // second, at new connections), so renewed certificates are served without
  // a restart; open connections keep theirs. Files that do not load
  // together (a key not matching the new certificate yet) keep the last
  // context that did.
  std::string tls_cert_file;
  std::string tls_private_key_file;  // PEM; required with tls_cert_file.
  // PEM CAs. A client that shows a certificate must have one they signed;
  // a client without one (the kubelet's probes) is served GET /healthz and
  // /readyz only (and GET /metrics with a token; authorize_token), and gets
  // 403 for anything else.
  std::string client_ca_file;
  // With client_ca_file: checks the bearer token of a GET /metrics from a
  // client without a certificate (Prometheus with its service account
  // token; extender/token_review.h) on a worker thread, with the request's
  // path. OK serves it; Unauthenticated answers 401, PermissionDenied 403,
  // anything else 503. Empty: such a client gets 403 like any other.
  std::function<absl::Status(const std::string& token, const std::string& path)> authorize_token;
  // Called after each reload of the TLS files: OK, or why the changed files
  // could not be used (once per change; the old ones stay in use).
  std::function<void(const absl::Status&)> on_tls_reload;
  std::string access_log;            // File path, "-" for stdout, "" for none.
  ReadinessCheck ready;              // For /readyz (see Route()); empty: ready.
  std::function<std::optional<Reply>(std::string_view target, std::string_view body)>
      before_bind;                           // See RouteHooks.
  std::function<std::string()> metrics;    // See RouteHooks.
  std::function<std::string()> role;       // See RouteHooks.
  bool lifecycle_routes = true;            // See RouteHooks.
  // Handles every request instead of Route() over an Extender: the same
  // hardened server for another program's routes (gpushare-device-plugin's
  // /metrics). Called on a worker thread with the method, the target and
  // the body; the RouteHooks above are then not used.
  std::function<Reply(boost::beast::http::verb method, std::string_view target,
                      std::string_view body)>
      handler;
  // Called on the worker thread after each routed request with its
  // RouteName(), the reply, and the seconds Route() took (for metrics).
  std::function<void(const std::string& route, const Reply& reply, double seconds)> on_request;
};

// The serving flags that fill ServerOptions: AddServingFlags (extender/config.h).

// Checks options (limits consistent, TLS files readable, key matching the
// certificate). InvalidArgument naming the bad value.
absl::Status ValidateServerOptions(const ServerOptions& options);

// An HTTP(S) server of one Extender.
class Server {
 public:
  // Validates `options` (ValidateServerOptions), loads the TLS files and
  // opens the access log. `ext` must outlive the server; it may be null
  // when options.handler is set (InvalidArgument otherwise).
  static absl::StatusOr<std::unique_ptr<Server>> Create(k8s::Extender* ext,
                                                        const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; returns the port (useful with port 0).
  // InvalidArgument for a bad address, Unavailable when the bind fails.
  absl::StatusOr<int> Listen(const std::string& address, int port);

  // Accepts and serves until Stop(); returns once the I/O threads are done.
  void Run();

  // Stops accepting and serving; Run() returns. Idempotent.
  void Stop();

  // Open connections now.
  int open_connections() const;

  // How many times changed TLS files were loaded (see ServerOptions).
  int tls_reloads() const;

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_SERVER_H_
