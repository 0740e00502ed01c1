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

class ApiClient {
 public:
  // `url` is http://HOST[:PORT][/PATH]. Errors: InvalidArgument for any other
  // scheme or a URL without a host.
  static absl::StatusOr<ApiClient> Create(const std::string& url);

  // The body of a 2xx reply to `method` `path` (with `body` of
  // `content_type` unless GET). Errors: Unavailable for transport errors and
  // non-2xx replies (with the status and the start of the API's message).
  absl::StatusOr<std::string> Call(boost::beast::http::verb method, const std::string& path,
                                   const std::string& body = "",
                                   const char* content_type = "application/json") const;

  absl::StatusOr<std::string> Get(const std::string& path) const {
    return Call(boost::beast::http::verb::get, path);
  }

  // Writes a bind: a merge patch of the pod's annotations, then the Binding.
  absl::Status Bind(const k8s::BindTarget& target, const k8s::BindResult& result) const;

 private:
  std::string host_, port_, base_;
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_API_CLIENT_H_
