// File: extender/api_client.h
// -----------------------------------------------------------------------------
// A client of the Kubernetes API for gpushare-extender: lists nodes and pods
// and writes binds (the device plugin's annotations, then the v1.Binding).
//
//   auto api = gpushare::extender::ApiClient::Create("http://127.0.0.1:8001");
//   absl::StatusOr<std::string> nodes = api->Get("/api/v1/nodes");
//
// Today: plain HTTP to a URL such as `kubectl proxy`, one connection per call
// (binds and resyncs are rare next to filter calls). Thread-safe: every call
// uses its own connection.

#ifndef GPUSHARE_EXTENDER_API_CLIENT_H_
#define GPUSHARE_EXTENDER_API_CLIENT_H_

#include <string>

#include <boost/beast/http/verb.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpushare/kubernetes.h"

namespace gpushare::extender {

// The canonical code of a non-2xx HTTP status of the API server: 400/422
// InvalidArgument, 401 Unauthenticated, 403 PermissionDenied, 404 NotFound,
// 409 AlreadyExists, 408/429/5xx Unavailable, others Unknown.
absl::StatusCode StatusCodeOfHttp(unsigned http_status);

class ApiClient {
 public:
  // `url` is http://HOST[:PORT][/PATH]. Errors: InvalidArgument for any other
  // scheme or a URL without a host.
  static absl::StatusOr<ApiClient> Create(const std::string& url);

  // The body of a 2xx reply to `method` `path` (with `body` of
  // `content_type` unless GET). Errors, with the status and the start of the
  // API's message: Unavailable for transport errors (including timeouts and
  // dropped connections); for non-2xx replies, StatusCodeOfHttp() of the
  // HTTP status.
  absl::StatusOr<std::string> Call(boost::beast::http::verb method, const std::string& path,
                                   const std::string& body = "",
                                   const char* content_type = "application/json") const;

  absl::StatusOr<std::string> Get(const std::string& path) const {
    return Call(boost::beast::http::verb::get, path);
  }

  // Writes a bind: a merge patch of the pod's annotations, then the Binding.
  // Errors: Aborted if the PATCH failed (the Binding was not sent); else
  // those of Call() for the Binding, e.g. AlreadyExists (409) when the pod is
  // bound already, Unavailable when its outcome is unknown.
  absl::Status Bind(const k8s::BindTarget& target, const k8s::BindResult& result) const;

  // The v1.Pod of a bind target (GET /api/v1/namespaces/NS/pods/NAME).
  absl::StatusOr<std::string> GetPod(const k8s::BindTarget& target) const;

 private:
  std::string host_, port_, base_;
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_API_CLIENT_H_
