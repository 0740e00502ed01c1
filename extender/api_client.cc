// The Kubernetes API client of gpushare-extender (see api_client.h).

#include "extender/api_client.h"

#include <chrono>
#include <string>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace gpushare::extender {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {
constexpr auto kApiTimeout = std::chrono::seconds(20);
}  // namespace

absl::StatusOr<ApiClient> ApiClient::Create(const std::string& url) {
  static const std::string kScheme = "http://";
  if (url.rfind(kScheme, 0) != 0) {
    return absl::InvalidArgumentError("--apiserver '" + url +
                                      "' must start with http:// (e.g. kubectl proxy)");
  }
  std::string rest = url.substr(kScheme.size());
  ApiClient c;
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    c.base_ = rest.substr(slash);
    rest.resize(slash);
    while (!c.base_.empty() && c.base_.back() == '/') c.base_.pop_back();
  }
  const size_t colon = rest.rfind(':');
  c.host_ = colon == std::string::npos ? rest : rest.substr(0, colon);
  c.port_ = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  if (c.host_.empty() || c.port_.empty()) {
    return absl::InvalidArgumentError("--apiserver '" + url + "' has no host:port");
  }
  return c;
}

absl::StatusOr<std::string> ApiClient::Call(http::verb method, const std::string& path,
                                            const std::string& body,
                                            const char* content_type) const {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(host_, port_, ec);
  stream.expires_after(kApiTimeout);
  if (!ec) stream.connect(endpoints, ec);
  http::request<http::string_body> req{method, base_ + path, 11};
  req.set(http::field::host, host_);
  req.set(http::field::user_agent, "gpushare-extender");
  req.set(http::field::accept, "application/json");
  if (method != http::verb::get) {
    req.set(http::field::content_type, content_type);
    req.body() = body;
  }
  req.prepare_payload();
  if (!ec) http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  if (!ec) http::read(stream, buffer, parser, ec);
  stream.socket().shutdown(tcp::socket::shutdown_both, ec);
  if (!parser.is_done()) {
    return absl::UnavailableError(std::string(http::to_string(method)) + " " + path + ": " +
                                  (ec ? ec.message() : "no reply"));
  }
  const auto& res = parser.get();
  const unsigned code = res.result_int();
  if (code / 100 != 2) {
    return absl::Status(StatusCodeOfHttp(code),
                        std::string(http::to_string(method)) + " " + path + ": HTTP " +
                            std::to_string(code) + " " + res.body().substr(0, 300));
  }
  return res.body();
}

absl::StatusCode StatusCodeOfHttp(unsigned http_status) {
  switch (http_status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return absl::StatusCode::kAlreadyExists;
    case 408:
    case 429:
      return absl::StatusCode::kUnavailable;
    default:
      return http_status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
  }
}

absl::Status ApiClient::Bind(const k8s::BindTarget& t, const k8s::BindResult& r) const {
  const std::string pod = "/api/v1/namespaces/" + t.pod_namespace + "/pods/" + t.pod_name;
  absl::StatusOr<std::string> patched =
      Call(http::verb::patch, pod, r.patch, "application/merge-patch+json");
  if (!patched.ok()) {
    // The Binding was not sent: the pod is not bound by this call, whatever
    // the PATCH's fate (annotations on an unbound pod are harmless).
    return absl::AbortedError(std::string(patched.status().message()) + " (pod not bound)");
  }
  // 409 Conflict (AlreadyExists): the pod is bound already; the caller reads
  // the pod to learn where (see k8s::ExtenderOptions::binder).
  return Call(http::verb::post, pod + "/binding", k8s::BindingJson(t)).status();
}

absl::StatusOr<std::string> ApiClient::GetPod(const k8s::BindTarget& t) const {
  return Get("/api/v1/namespaces/" + t.pod_namespace + "/pods/" + t.pod_name);
}

}  // namespace gpushare::extender
