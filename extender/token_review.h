// File: extender/token_review.h
// -----------------------------------------------------------------------------
// Bearer tokens checked by the API server, the way Kubernetes components
// guard their /metrics: the token is authenticated with a TokenReview
// (authentication.k8s.io/v1), and its user authorised with a
// SubjectAccessReview (authorization.k8s.io/v1) for the verb `get` on the
// non-resource URL of the request (e.g. /metrics). Prometheus scrapes with its
// service account token; a ClusterRole granting
//   rules: [{nonResourceURLs: ["/metrics"], verbs: ["get"]}]
// bound to that account lets it in (deploy/monitoring/).
//
//   TokenReviewer reviewer([&](const std::string& path, const std::string& body) {
//     return api->Call(http::verb::post, path, body);
//   });
//   absl::Status s = reviewer.Review(token, "get", "/metrics");
//   // OK: allowed; Unauthenticated: the token is not valid (HTTP 401);
//   // PermissionDenied: its user may not (403); Unavailable: the API server
//   // could not answer (503, not cached).
//
// Answers are cached for kCacheTtl by the token's SHA-256 (the token itself
// is not kept), at most kMaxCacheEntries of them (when full, the expired ones
// go, and if none had, all), so a scrape every few seconds costs the API server two requests
// per kCacheTtl, and a flood of made-up tokens cannot grow the memory.
// Thread-safe.

#ifndef GPUSHARE_EXTENDER_TOKEN_REVIEW_H_
#define GPUSHARE_EXTENDER_TOKEN_REVIEW_H_

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpushare::extender {

class TokenReviewer {
 public:
  // POSTs a JSON body to an API path and returns the reply's body (the API
  // client's Call): the reviewer's only way to the API server.
  using Post = std::function<absl::StatusOr<std::string>(const std::string& path,
                                                          const std::string& body)>;
  using Clock = std::chrono::steady_clock;

  static constexpr std::chrono::seconds kCacheTtl{10};
  static constexpr size_t kMaxCacheEntries = 4096;

  explicit TokenReviewer(Post post, std::function<Clock::time_point()> now = Clock::now)
      : post_(std::move(post)), now_(std::move(now)) {}

  // Whether `token` may `verb` the non-resource URL `path` (see the header).
  absl::Status Review(const std::string& token, const std::string& verb, const std::string& path);

  // Reviews sent to the API server so far (each a TokenReview, and a
  // SubjectAccessReview when the token is valid), for tests and metrics.
  int api_calls() const;

 private:
  struct Entry {
    absl::Status verdict;
    Clock::time_point expires;
  };
  absl::Status Ask(const std::string& token, const std::string& verb, const std::string& path);

  const Post post_;
  const std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> cache_;  // Guarded by mu_; key: hash, verb, path.
  int api_calls_ = 0;                   // Guarded by mu_.
};

// The bearer token of an Authorization header value ("Bearer <token>", the
// scheme in any case); "" when it is not one.
std::string BearerToken(std::string_view authorization);

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_TOKEN_REVIEW_H_
