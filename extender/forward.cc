// Forwarding binds from a follower to the leader; see forward.h.

#include "extender/forward.h"

#include <utility>

#include "gpushare/kubernetes.h"

namespace gpushare::extender {

namespace http = boost::beast::http;

BindForwarder::BindForwarder(LeaderView view, ForwardOptions options)
    : view_(std::move(view)), options_(std::move(options)) {}

Reply BindForwarder::Refuse(const std::string& why) {
  if (options_.count) options_.count("not_leader");
  return Reply{http::status::service_unavailable,
               k8s::ErrorJson(absl::UnavailableError(why))};
}

std::optional<Reply> BindForwarder::BeforeBind(std::string_view target, std::string_view body) {
  if (view_.may_bind()) return std::nullopt;
  const std::string url = view_.holder_url();
  const std::string holder = view_.holder();
  if (target.find("forwarded=1") != std::string_view::npos) {
    return Refuse("a forwarded bind reached a replica that does not bind: " + view_.describe());
  }
  if (url.empty() || holder.empty() || holder == view_.identity) {
    return Refuse("this replica does not bind and knows no leader to forward to: " +
                  view_.describe());
  }
  std::shared_ptr<ApiClient> client;
  {
    std::lock_guard lock(mu_);
    if (url != url_ || !client_) {
      RestConfig config;
      config.server = url;
      config.ca_pem = options_.ca_pem;
      ClientOptions co;
      co.max_attempts = 1;
      co.timeout = options_.timeout;
      co.qps = 0;
      co.user_agent = "gpushare-extender (forwarding)";
      absl::StatusOr<std::unique_ptr<ApiClient>> c = ApiClient::Create(config, co);
      if (!c.ok()) {
        return Refuse("cannot forward to the leader at " + url + ": " +
                      std::string(c.status().message()));
      }
      client_ = std::move(*c);
      url_ = url;
    }
    client = client_;
  }
  absl::StatusOr<std::string> reply =
      client->Call(http::verb::post, kForwardedBindTarget, std::string(body));
  if (!reply.ok()) {
    return Refuse(view_.describe() + ": forwarding the bind failed: " +
                  std::string(reply.status().message()));
  }
  if (options_.count) options_.count("forwarded");
  Reply r{http::status::ok, *std::move(reply)};
  r.forwarded = true;
  return r;
}

}  // namespace gpushare::extender
