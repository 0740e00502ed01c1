// File: extender/forward.h
// -----------------------------------------------------------------------------
// What a replica that may not bind does with POST /bind (leader election,
// kubeclient/leader.h): it forwards the request once to the leader, at the URL
// the leader wrote on the Lease, and answers with the leader's reply; when no
// leader is known or reachable, or the request was forwarded already
// (target marked "forwarded=1", so that a bind never bounces between
// replicas), it answers 503, which kube-scheduler treats as a failed bind: the
// pod goes back to its queue and is retried.
//
//   BindForwarder forwarder(view, ForwardOptions{});
//   server_options.before_bind = [&](std::string_view target, std::string_view body) {
//     return forwarder.BeforeBind(target, body);
//   };
//
// Thread-safe.

#ifndef GPUSHARE_EXTENDER_FORWARD_H_
#define GPUSHARE_EXTENDER_FORWARD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "kubeclient/api_client.h"
#include "extender/server.h"

namespace gpushare::extender {

// The Kubernetes client (kubeclient/).
using kubeclient::ApiClient;
using kubeclient::ClientOptions;
using kubeclient::RestConfig;

// The part of the leader election a forwarder reads.
struct LeaderView {
  std::function<bool()> may_bind;            // This replica binds itself.
  std::function<std::string()> holder;       // The Lease's holder ("" when none).
  std::function<std::string()> holder_url;   // Its URL from the Lease ("" when none).
  std::function<std::string()> describe;     // For messages, e.g. "follower (leader: a)".
  std::string identity;                      // This replica.
};

struct ForwardOptions {
  std::string ca_pem;  // CAs of an https leader URL; empty: the system's.
  // The certificate and key this replica presents to the leader (whose
  // listener verifies client certificates); both or neither.
  std::string client_cert_pem;
  std::string client_key_pem;
  // Forward only to an https:// leader URL (set when this replica serves
  // TLS): a Lease naming a plain-HTTP URL is refused, so a host without the
  // leader's certificate cannot answer for it.
  bool require_https = false;
  // The largest reply accepted from the leader (a bind result is a few
  // hundred bytes).
  uint64_t max_reply_bytes = 1 << 20;
  // One try; within kube-scheduler's usual 10 s httpTimeout.
  std::chrono::milliseconds timeout{8'000};
  // Called with "forwarded" or "not_leader" for each bind handled (metrics).
  std::function<void(const char* result)> count;
};

// The path a forwarded bind is posted to.
inline constexpr char kForwardedBindTarget[] = "/gpushare-scheduler/bind?forwarded=1";

class BindForwarder {
 public:
  BindForwarder(LeaderView view, ForwardOptions options);

  // RouteHooks::before_bind: nullopt when this replica may bind; else the
  // leader's reply to the forwarded request (Reply::forwarded set), rebuilt
  // from its fields once checked to be a bind result (a JSON object with a
  // string "Error"; "Placement" and "Annotations" kept when they are
  // objects), or 503 with k8s::ErrorJson() saying why not. What another host
  // answered in an error, or in a reply that is not a bind result, is never
  // passed on.
  std::optional<Reply> BeforeBind(std::string_view target, std::string_view body);

 private:
  Reply Refuse(const std::string& why);

  const LeaderView view_;
  const ForwardOptions options_;
  std::mutex mu_;
  std::string url_;                      // Guarded by mu_.
  std::shared_ptr<ApiClient> client_;    // Guarded by mu_; for url_.
};

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_FORWARD_H_
