// Routing and connection serving of gpushare-extender (see server.h).

#include "extender/server.h"

#include <string>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace gpushare::extender {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

Reply FromStatus(const absl::StatusOr<std::string>& r) {
  if (r.ok()) return {http::status::ok, *r};
  const http::status code = r.status().code() == absl::StatusCode::kNotFound
                                ? http::status::not_found
                            : r.status().code() == absl::StatusCode::kInvalidArgument
                                ? http::status::bad_request
                                : http::status::internal_server_error;
  return {code, k8s::ErrorJson(r.status())};
}

}  // namespace

Reply Route(k8s::Extender& ext, http::verb method, std::string_view target,
            std::string_view body, const ReadinessCheck& ready) {
  const std::string path(target.substr(0, target.find('?')));
  if (path == "/healthz") return {http::status::ok, "{\"status\":\"ok\"}"};
  if (path == "/readyz") {
    const absl::Status s = ready ? ready() : absl::OkStatus();
    if (s.ok()) return {http::status::ok, "{\"status\":\"ready\"}"};
    return {http::status::service_unavailable, k8s::ErrorJson(s)};
  }
  if (path == "/version" || path == "/gpushare-scheduler/version") {
    return {http::status::ok, ext.Version()};
  }
  if (path.rfind(kRoutePrefix, 0) != 0) {
    return {http::status::not_found, k8s::ErrorJson(absl::NotFoundError("no route " + path))};
  }
  const std::string verb = path.substr(sizeof(kRoutePrefix) - 1);
  if (verb == "inspect" || verb.rfind("inspect/", 0) == 0) {
    if (method != http::verb::get) {
      return {http::status::method_not_allowed,
              k8s::ErrorJson(absl::InvalidArgumentError("inspect takes GET"))};
    }
    return FromStatus(ext.Inspect(verb == "inspect" ? "" : verb.substr(8)));
  }
  if (method != http::verb::post) {
    return {http::status::method_not_allowed,
            k8s::ErrorJson(absl::InvalidArgumentError(verb + " takes POST"))};
  }
  if (verb == "filter") return FromStatus(ext.Filter(body));
  if (verb == "prioritize") return FromStatus(ext.Prioritize(body));
  if (verb == "bind") return FromStatus(ext.Bind(body));
  if (verb == "preempt") return FromStatus(ext.Preempt(body));
  if (verb == "confirm") return FromStatus(ext.Confirm(body));
  if (verb == "forget") return FromStatus(ext.Forget(body));
  if (verb == "release") return FromStatus(ext.Release(body));
  return {http::status::not_found, k8s::ErrorJson(absl::NotFoundError("no route " + path))};
}

void ServeConnection(tcp::socket socket, k8s::Extender* ext, const ServerLimits& limits,
                     std::atomic<int>* open_connections) {
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(limits.body_limit);
    stream.expires_after(limits.idle_timeout);
    http::read(stream, buffer, parser, ec);
    if (ec) {
      if (ec == http::error::body_limit || ec == http::error::header_limit) {
        http::response<http::string_body> res{http::status::payload_too_large, 11};
        res.set(http::field::content_type, "application/json");
        res.body() = k8s::ErrorJson(absl::InvalidArgumentError("body too large"));
        res.prepare_payload();
        http::write(stream, res, ec);
      }
      break;
    }
    http::request<http::string_body> req = parser.release();
    const std::string_view target(req.target().data(), req.target().size());
    Reply reply = Route(*ext, req.method(), target, req.body(), limits.ready);
    http::response<http::string_body> res{reply.status, req.version()};
    res.set(http::field::server, "gpushare-extender");
    res.set(http::field::content_type, "application/json");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(reply.body);
    res.prepare_payload();
    stream.expires_after(limits.idle_timeout);
    http::write(stream, res, ec);
    if (ec || !req.keep_alive()) break;
  }
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  open_connections->fetch_sub(1);
}

}  // namespace gpushare::extender
