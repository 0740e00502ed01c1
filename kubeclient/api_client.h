// File: kubeclient/api_client.h
// -----------------------------------------------------------------------------
// A client of the Kubernetes API for gpushare-extender: lists and watches
// nodes and pods, and writes binds (the device plugin's annotations, then the
// v1.Binding).
//
//   absl::StatusOr<RestConfig> config = ResolveRestConfig({.kubeconfig = path});
//   auto api = gpushare::kubeclient::ApiClient::Create(*config);
//   absl::StatusOr<std::string> nodes = (*api)->Get("/api/v1/nodes");
//
// HTTPS (OpenSSL through Boost.Asio) verifies the server's certificate
// against the config's CA (else the system's) and its host name (DNS name or
// IP address, or tls_server_name); a client certificate and a bearer token
// (from a file re-read when it rotates) authenticate. Plain http:// is used
// only when the server URL says so (e.g. `kubectl proxy`).
//
// Connections are kept alive and reused (at most ClientOptions::max_idle
// idle ones); each call has a timeout; a client-side token bucket limits the
// request rate (ClientOptions::qps / burst). Idempotent calls (GET, and the
// merge PATCH of a bind, which sets the same annotations again) are retried
// with exponential backoff on transport errors, 429 and 5xx, honouring
// Retry-After; a POST only when it surely was not processed (the connection
// failed, or 429).
//
// Thread-safe: any number of threads may call at once.

#ifndef GPUSHARE_KUBECLIENT_API_CLIENT_H_
#define GPUSHARE_KUBECLIENT_API_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/beast/http/verb.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubeclient/kubeconfig.h"
#include "kubeclient/reflector.h"
#include "gpushare/kubernetes.h"

namespace gpushare::kubeclient {

// The canonical code of an HTTP status from the API server, in one place:
// 2xx OK; 400 and 422 InvalidArgument; 401 Unauthenticated; 403
// PermissionDenied; 404 NotFound; 409 AlreadyExists (a conflict: e.g. the pod
// is already bound); 410 OutOfRange (a watch's resource version is too old:
// see IsGone()); 408, 429 and 5xx Unavailable; others Unknown.
absl::StatusCode StatusCodeOfHttp(unsigned http_status);

// Whether `status` says "410 Gone / too old resource version": the watcher
// must list again.
bool IsGone(const absl::Status& status);

// `segment` as one segment of a request path: every byte but the unreserved
// ones of RFC 3986 (letters, digits, '-', '.', '_', '~') percent-encoded, so
// that no name can add a segment, a query, a space or a line to the request.
std::string EscapePathSegment(std::string_view segment);

// "/api/v1/namespaces/<namespace>/pods/<name>", each name escaped.
std::string PodPath(std::string_view pod_namespace, std::string_view pod_name);

// Whether `text` may be sent as a request target or a header value: no byte
// below 0x20 (CR, LF, NUL and the other controls) and no DEL; a target also
// no space. ApiClient refuses anything else before a byte is written,
// whatever its caller passes.
bool IsSafeHeaderValue(std::string_view text);
bool IsSafeTarget(std::string_view text);

struct ClientOptions {
  // Client-side rate limit: a token bucket of `burst` requests refilled at
  // `qps` per second (qps <= 0: unlimited). client-go's defaults (5/10) are
  // meant for controllers. Each bind costs two requests (patch + binding),
  // so these are twice kube-scheduler's own client (50/100): binding through
  // the extender keeps up with kube-scheduler's 50 binds/s (at 50/100 a
  // 1,000-pod burst was bound at 26 pods/s, the limit's 25 binds/s), while
  // still protecting the API server from a loop.
  double qps = 100;     // Requests per second.
  int burst = 200;      // Requests.
  std::chrono::milliseconds timeout{30'000};      // Connect + one request and reply.
  int max_attempts = 5;                           // Per call, the first one included.
  std::chrono::milliseconds backoff_initial{200};  // Doubles each retry, +/- 25% jitter.
  std::chrono::milliseconds backoff_max{10'000};
  int max_idle = 4;  // Kept-alive idle connections.
  // The largest reply body Call() reads; a larger one is ResourceExhausted
  // and not retried. A list of 10,000 full Node objects is about 130 MiB.
  uint64_t max_reply_bytes = 1ull << 30;
  std::string user_agent = "gpushare-extender";
  // Called after every attempt of Call() (retries included) with its method
  // and the reply's HTTP status, 0 when none came (connection failure,
  // timeout): for metrics. Must be thread-safe and quick.
  std::function<void(boost::beast::http::verb method, int http_status)> on_reply;
};

class ApiClient {
 public:
  // Errors: InvalidArgument for a server URL that is not http(s)://HOST[:PORT]
  // [/PREFIX], or TLS material OpenSSL refuses (naming which).
  static absl::StatusOr<std::unique_ptr<ApiClient>> Create(const RestConfig& config,
                                                           ClientOptions options = {});
  // A server URL alone, no credentials (e.g. http://127.0.0.1:8001 for
  // `kubectl proxy`).
  static absl::StatusOr<std::unique_ptr<ApiClient>> Create(const std::string& url);

  ~ApiClient();
  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // The body of a 2xx reply to `method` `path` (with `body` of
  // `content_type` unless GET). Errors: StatusCodeOfHttp() of the reply's
  // status (message: method, path, status and the API's message), after the
  // retries above; Unavailable for transport errors (TLS verification
  // failures say why: "certificate has expired", "hostname mismatch", ...);
  // DeadlineExceeded when a reply takes longer than options.timeout;
  // InvalidArgument, with nothing sent, for a path that is not IsSafeTarget()
  // or a content type or bearer token that is not IsSafeHeaderValue().
  absl::StatusOr<std::string> Call(boost::beast::http::verb method, const std::string& path,
                                   const std::string& body = "",
                                   const char* content_type = "application/json") const;

  absl::StatusOr<std::string> Get(const std::string& path) const {
    return Call(boost::beast::http::verb::get, path);
  }

  // Writes a bind in one write: the Binding, carrying the placement's
  // annotations (BindingJson()), which the API server merges into the pod
  // in the update that binds it. `may_write`, when set, is asked right
  // before it (a leader checks that it still holds its Lease): an error is
  // FailedPrecondition, nothing written. Errors: those of Call() for the
  // Binding, e.g. AlreadyExists (409) when the pod is bound already,
  // Unavailable or DeadlineExceeded when its outcome is unknown.
  absl::Status Bind(const k8s::BindTarget& target, const k8s::BindResult& result,
                    const std::function<absl::Status()>& may_write = {}) const;

  // The v1.Pod of a bind target (GET /api/v1/namespaces/NS/pods/NAME).
  absl::StatusOr<std::string> GetPod(const k8s::BindTarget& target) const;

  // GETs `path` on a connection of its own and hands each piece of the body
  // to `on_data` as it arrives (a watch: pieces do not follow line or event
  // boundaries). Returns OK when the server ends the reply, Cancelled when
  // `on_data` returns false, DeadlineExceeded when nothing arrives for
  // `idle_timeout`, the mapped status of a non-2xx reply, or Unavailable.
  // Not retried: the caller decides.
  absl::Status Stream(const std::string& path,
                      const std::function<bool(std::string_view)>& on_data,
                      std::chrono::milliseconds idle_timeout) const;

  const RestConfig& config() const;

 private:
  struct Impl;
  explicit ApiClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The Reflector's transport (reflector.h) over an ApiClient: lists with
// Get(), watches with Stream() (`idle`: a watch silent that long is ended),
// a real clock. Used by both gpushare-extender and gpushare-device-plugin.
class ApiWatchTransport : public WatchTransport {
 public:
  ApiWatchTransport(const ApiClient* api, std::chrono::milliseconds idle) : api_(api), idle_(idle) {}
  absl::StatusOr<std::string> List(const std::string& path) override { return api_->Get(path); }
  absl::Status Watch(const std::string& path,
                     const std::function<bool(std::string_view)>& on_data) override {
    return api_->Stream(path, on_data, idle_);
  }
  void Sleep(std::chrono::milliseconds d) override;
  std::chrono::steady_clock::time_point Now() override { return std::chrono::steady_clock::now(); }

 private:
  const ApiClient* api_;
  const std::chrono::milliseconds idle_;
};

}  // namespace gpushare::kubeclient

#endif  // GPUSHARE_KUBECLIENT_API_CLIENT_H_
