// Forwarding binds from a follower to the leader; see forward.h.

#include "extender/forward.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gpushare/kubernetes.h"
#include "nlohmann/json.hpp"

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
  if (options_.require_https && url.rfind("https://", 0) != 0) {
    return Refuse("the leader's URL " + url +
                  " is not https://; this replica forwards binds only over TLS");
  }
  std::shared_ptr<ApiClient> client;
  {
    std::lock_guard lock(mu_);
    if (url != url_ || !client_) {
      RestConfig config;
      config.server = url;
      config.ca_pem = options_.ca_pem;
      config.client_cert_pem = options_.client_cert_pem;
      config.client_key_pem = options_.client_key_pem;
      ClientOptions co;
      co.max_reply_bytes = options_.max_reply_bytes;
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
    // The canonical code only: the message may hold what the other host said.
    return Refuse(absl::StrCat(view_.describe(), ": forwarding the bind to ", url, " failed (",
                               absl::StatusCodeToString(reply.status().code()), ")"));
  }
  const nlohmann::json j = nlohmann::json::parse(*reply, nullptr, /*allow_exceptions=*/false);
  const auto error = j.is_object() ? j.find("Error") : j.end();
  if (!j.is_object() || error == j.end() || !error->is_string()) {
    return Refuse(absl::StrCat(view_.describe(), ": the leader at ", url,
                               " did not answer with a bind result"));
  }
  nlohmann::json result{{"Error", *error}};
  for (const char* key : {"Placement", "Annotations"}) {
    const auto it = j.find(key);
    if (it != j.end() && it->is_object()) result[key] = *it;
  }
  if (options_.count) options_.count("forwarded");
  Reply r{http::status::ok, result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
  r.forwarded = true;
  return r;
}

}  // namespace gpushare::extender
