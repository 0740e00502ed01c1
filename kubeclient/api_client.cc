// The Kubernetes API client of gpushare-extender (see api_client.h).

#include "kubeclient/api_client.h"

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace gpushare::kubeclient {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

absl::StatusCode StatusCodeOfHttp(unsigned s) {
  if (s / 100 == 2) return absl::StatusCode::kOk;
  switch (s) {
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
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 408:
    case 429:
      return absl::StatusCode::kUnavailable;
    default:
      return s / 100 == 5 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
  }
}

bool IsGone(const absl::Status& status) {
  return status.code() == absl::StatusCode::kOutOfRange;
}

std::string EscapePathSegment(std::string_view segment) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(segment.size());
  for (const char ch : segment) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
        c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  // "." and ".." are path steps, not names.
  if (out == ".") return "%2E";
  if (out == "..") return "%2E%2E";
  return out;
}

std::string PodPath(std::string_view pod_namespace, std::string_view pod_name) {
  return absl::StrCat("/api/v1/namespaces/", EscapePathSegment(pod_namespace), "/pods/",
                      EscapePathSegment(pod_name));
}

bool IsSafeHeaderValue(std::string_view text) {
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

bool IsSafeTarget(std::string_view text) {
  if (text.empty() || text.front() != '/') return false;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) return false;
  }
  return true;
}

namespace {

// Parsed server URL.
struct Url {
  bool tls = false;
  std::string host;  // Without brackets.
  std::string port;
  std::string prefix;  // "" or "/path" without a trailing slash.
};

absl::StatusOr<Url> ParseUrl(const std::string& url) {
  Url u;
  std::string rest;
  if (url.rfind("https://", 0) == 0) {
    u.tls = true;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return absl::InvalidArgumentError("API server URL '" + url +
                                      "' must start with https:// (or http:// for kubectl proxy)");
  }
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    u.prefix = rest.substr(slash);
    rest.resize(slash);
  }
  if (rest.find('@') != std::string::npos) {
    return absl::InvalidArgumentError(
        "API server URL '" + url.substr(0, url.find("://") + 3) + "...@" +
        rest.substr(rest.rfind('@') + 1) +
        "' holds credentials (user:password@), which are not sent: authenticate with a token "
        "or a client certificate in the kubeconfig");
  }
  if (!IsSafeTarget(u.prefix.empty() ? "/" : u.prefix)) {
    return absl::InvalidArgumentError("API server URL '" + absl::CHexEscape(url) +
                                      "' has a path with a space or a control byte");
  }
  while (!u.prefix.empty() && u.prefix.back() == '/') u.prefix.pop_back();
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest[0] == '[') {  // [IPv6]:port
    const size_t close = rest.find(']');
    if (close == std::string::npos) {
      return absl::InvalidArgumentError("API server URL '" + url + "' has an unclosed '['");
    }
    u.host = rest.substr(1, close - 1);
    colon = rest.size() > close + 1 && rest[close + 1] == ':' ? close + 1 : std::string::npos;
  } else {
    u.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  }
  u.port = colon == std::string::npos ? (u.tls ? "443" : "80") : rest.substr(colon + 1);
  if (u.host.empty() || u.port.empty()) {
    return absl::InvalidArgumentError("API server URL '" + url + "' has no host:port");
  }
  return u;
}

// A token bucket.
class RateLimiter {
 public:
  RateLimiter(double qps, int burst)
      : qps_(qps), burst_(std::max(1, burst)), tokens_(burst_), last_(Clock::now()) {}

  // Blocks until a request may go.
  void Acquire() {
    if (qps_ <= 0) return;
    std::chrono::duration<double> wait{0};
    {
      std::lock_guard lock(mu_);
      const Clock::time_point now = Clock::now();
      tokens_ = std::min<double>(
          burst_, tokens_ + std::chrono::duration<double>(now - last_).count() * qps_);
      last_ = now;
      tokens_ -= 1;  // May go negative: later callers queue behind.
      if (tokens_ < 0) wait = std::chrono::duration<double>(-tokens_ / qps_);
    }
    if (wait.count() > 0) std::this_thread::sleep_for(wait);
  }

 private:
  const double qps_;
  const int burst_;
  std::mutex mu_;
  double tokens_;          // Guarded by mu_.
  Clock::time_point last_;  // Guarded by mu_.
};

// One connection with its own io_context: every operation is asynchronous
// (so that beast::tcp_stream's expiry applies) and run to completion here.
struct Connection {
  asio::io_context io;
  std::unique_ptr<beast::tcp_stream> plain;
  std::unique_ptr<ssl::stream<beast::tcp_stream>> tls;
  beast::flat_buffer buffer;

  beast::tcp_stream& tcp() { return tls ? tls->next_layer() : *plain; }

  // Starts `start(handler)`, runs it to completion within `timeout`.
  template <class Start>
  beast::error_code Run(std::chrono::milliseconds timeout, Start start) {
    beast::error_code result = asio::error::would_block;
    tcp().expires_after(timeout);
    start([&result](beast::error_code ec, auto&&...) { result = ec; });
    io.restart();
    io.run();
    return result;
  }

  // Calls `f` with the stream (TLS or plain).
  template <class F>
  auto With(F f) {
    return tls ? f(*tls) : f(*plain);
  }
};

std::string Describe(const beast::error_code& ec) {
  if (ec == beast::error::timeout) return "timed out";
  return ec.message();
}

}  // namespace

struct ApiClient::Impl {
  RestConfig config;
  ClientOptions options;
  Url url;
  std::unique_ptr<ssl::context> ssl_ctx;
  mutable TokenSource tokens;
  mutable RateLimiter limiter;
  mutable std::mutex mu;
  mutable std::vector<std::unique_ptr<Connection>> idle;  // Guarded by mu.

  Impl(RestConfig c, ClientOptions o, Url u)
      : config(std::move(c)),
        options(std::move(o)),
        url(std::move(u)),
        tokens(config.token, config.token_file, config.exec),
        limiter(options.qps, options.burst) {}

  // A new connected (and, for https, verified) connection.
  absl::StatusOr<std::unique_ptr<Connection>> Connect() const {
    auto c = std::make_unique<Connection>();
    const std::string where = url.host + ":" + url.port;
    tcp::resolver resolver(c->io);
    beast::error_code ec;
    tcp::resolver::results_type endpoints = resolver.resolve(url.host, url.port, ec);
    if (ec) return absl::UnavailableError("cannot resolve " + where + ": " + ec.message());
    if (url.tls) {
      c->tls = std::make_unique<ssl::stream<beast::tcp_stream>>(c->io, *ssl_ctx);
    } else {
      c->plain = std::make_unique<beast::tcp_stream>(c->io);
    }
    ec = c->Run(options.timeout, [&](auto h) { c->tcp().async_connect(endpoints, h); });
    if (ec) return absl::UnavailableError("cannot connect to " + where + ": " + Describe(ec));
    c->tcp().socket().set_option(tcp::no_delay(true), ec);
    if (!url.tls) return c;
    SSL* ssl_handle = c->tls->native_handle();
    const std::string name = config.tls_server_name.empty() ? url.host : config.tls_server_name;
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_handle);
    beast::error_code not_ip;
    asio::ip::make_address(name, not_ip);
    if (!not_ip) {
      X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
    } else {
      X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
      SSL_set_tlsext_host_name(ssl_handle, name.c_str());
    }
    ec = c->Run(options.timeout,
                [&](auto h) { c->tls->async_handshake(ssl::stream_base::client, h); });
    if (ec) {
      std::string why = Describe(ec);
      const long verify = SSL_get_verify_result(ssl_handle);
      if (verify != X509_V_OK) {
        why = absl::StrCat("certificate verify failed: ", X509_verify_cert_error_string(verify),
                           " (server name '", name, "')");
      }
      return absl::UnavailableError("TLS handshake with " + where + " failed: " + why);
    }
    return c;
  }

  std::unique_ptr<Connection> TakeIdle() const {
    std::lock_guard lock(mu);
    if (idle.empty()) return nullptr;
    std::unique_ptr<Connection> c = std::move(idle.back());
    idle.pop_back();
    return c;
  }

  void PutIdle(std::unique_ptr<Connection> c) const {
    std::lock_guard lock(mu);
    if (static_cast<int>(idle.size()) < options.max_idle) idle.push_back(std::move(c));
  }

  absl::StatusOr<http::request<http::string_body>> MakeRequest(
      http::verb method, const std::string& path, const std::string& body,
      const char* content_type) const {
    const std::string target = url.prefix + path;
    if (!IsSafeTarget(target)) {
      return absl::InvalidArgumentError(
          absl::StrCat("refusing to send request target \"", absl::CHexEscape(target.substr(0, 200)),
                       "\": it must start with '/' and hold no space, control or non-ASCII byte"));
    }
    if (!IsSafeHeaderValue(content_type == nullptr ? "" : content_type)) {
      return absl::InvalidArgumentError("refusing to send a Content-Type with a control byte");
    }
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, url.host);
    req.set(http::field::user_agent, options.user_agent);
    req.set(http::field::accept, "application/json");
    absl::StatusOr<std::string> token = tokens.Get();
    if (!token.ok()) return absl::UnauthenticatedError(std::string(token.status().message()));
    if (!IsSafeHeaderValue(*token)) {
      return absl::InvalidArgumentError(
          "refusing to send the bearer token: it holds a control byte (CR, LF, NUL, ...)");
    }
    if (!token->empty()) req.set(http::field::authorization, "Bearer " + *token);
    if (method != http::verb::get) {
      req.set(http::field::content_type, content_type);
      req.body() = body;
    }
    req.keep_alive(true);
    req.prepare_payload();
    return req;
  }

  std::chrono::milliseconds Backoff(int attempt) const {
    static thread_local std::mt19937 rng(std::random_device{}());
    const double base = std::min<double>(
        static_cast<double>(options.backoff_max.count()),
        static_cast<double>(options.backoff_initial.count()) * (1 << std::min(attempt, 20)));
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    return std::chrono::milliseconds(static_cast<int64_t>(base * jitter(rng)));
  }
};

ApiClient::ApiClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ApiClient::~ApiClient() = default;

const RestConfig& ApiClient::config() const { return impl_->config; }

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(const std::string& url) {
  RestConfig c;
  c.server = url;
  c.source = "--apiserver";
  return Create(c);
}

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(const RestConfig& config,
                                                             ClientOptions options) {
  absl::StatusOr<Url> url = ParseUrl(config.server);
  if (!url.ok()) return url.status();
  auto impl = std::make_unique<Impl>(config, std::move(options), *url);
  if (url->tls) {
    impl->ssl_ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    ssl::context& ctx = *impl->ssl_ctx;
    SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
    beast::error_code ec;
    if (!config.ca_pem.empty()) {
      ctx.add_certificate_authority(asio::buffer(config.ca_pem), ec);
      if (ec) {
        return absl::InvalidArgumentError("the CA certificate is not valid PEM: " + ec.message());
      }
    } else {
      ctx.set_default_verify_paths(ec);
    }
    if (!config.client_cert_pem.empty()) {
      ctx.use_certificate_chain(asio::buffer(config.client_cert_pem), ec);
      if (ec) {
        return absl::InvalidArgumentError("the client certificate is not valid PEM: " +
                                          ec.message());
      }
      ctx.use_private_key(asio::buffer(config.client_key_pem), ssl::context::pem, ec);
      if (ec) {
        return absl::InvalidArgumentError(
            "the client key is not valid PEM or does not match the certificate: " + ec.message());
      }
    }
    ctx.set_verify_mode(config.insecure_skip_tls_verify ? ssl::verify_none : ssl::verify_peer);
  } else if (!config.client_cert_pem.empty()) {
    return absl::InvalidArgumentError("a client certificate needs an https:// server, not " +
                                      config.server);
  }
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(impl)));
}

absl::StatusOr<std::string> ApiClient::Call(http::verb method, const std::string& path,
                                            const std::string& body,
                                            const char* content_type) const {
  const Impl& m = *impl_;
  const bool idempotent = method != http::verb::post;
  const std::string what = std::string(http::to_string(method)) + " " + path;
  absl::Status last = absl::UnavailableError(what + ": not attempted");
  bool reauthenticated = false;
  for (int attempt = 0; attempt < std::max(1, m.options.max_attempts); ++attempt) {
    std::chrono::milliseconds pause = m.Backoff(attempt);
    m.limiter.Acquire();
    absl::StatusOr<http::request<http::string_body>> req =
        m.MakeRequest(method, path, body, content_type);
    if (!req.ok()) return req.status();
    // A kept-alive connection may have been closed by the server meanwhile:
    // then the request goes again on a new one, once, without a pause.
    std::unique_ptr<Connection> conn = m.TakeIdle();
    const bool reused = conn != nullptr;
    bool written = false;
    beast::error_code ec;
    std::optional<http::response_parser<http::string_body>> parser;
    for (int round = 0; round < 2; ++round) {
      if (!conn) {
        absl::StatusOr<std::unique_ptr<Connection>> fresh = m.Connect();
        if (!fresh.ok()) {
          last = absl::Status(fresh.status().code(),
                              absl::StrCat(what, ": ", fresh.status().message()));
          // TLS verification failures do not heal by retrying.
          if (absl::StrContains(fresh.status().message(), "certificate verify failed")) {
            return last;
          }
          break;
        }
        conn = *std::move(fresh);
      }
      written = false;
      ec = conn->With([&](auto& stream) {
        return conn->Run(m.options.timeout, [&](auto h) { http::async_write(stream, *req, h); });
      });
      if (!ec) {
        written = true;
        parser.emplace();
        parser->body_limit(m.options.max_reply_bytes);
        // The header first: a Content-Length over the limit is refused before
        // any of the body is read (Beast's own check did not stop a 2 MiB
        // reply under a 1 MiB limit here); a chunked body is held to the
        // limit as it arrives.
        ec = conn->With([&](auto& stream) {
          return conn->Run(m.options.timeout, [&](auto h) {
            http::async_read_header(stream, conn->buffer, *parser, h);
          });
        });
        if (!ec && parser->content_length().value_or(0) > m.options.max_reply_bytes) {
          ec = http::error::body_limit;
        }
        if (!ec && !parser->is_done()) {
          ec = conn->With([&](auto& stream) {
            return conn->Run(m.options.timeout, [&](auto h) {
              http::async_read(stream, conn->buffer, *parser, h);
            });
          });
        }
        if (!ec && parser->is_done() && parser->get().body().size() > m.options.max_reply_bytes) {
          ec = http::error::body_limit;
        }
      }
      const bool stale = reused && round == 0 && ec && (!parser || !parser->got_some()) &&
                         (!written || idempotent);
      if (!stale) break;
      conn.reset();
    }
    const bool more = attempt + 1 < m.options.max_attempts;
    const bool replied = conn && !ec && parser && parser->is_done();
    if (m.options.on_reply) {
      m.options.on_reply(method, replied ? static_cast<int>(parser->get().result_int()) : 0);
    }
    if (!conn) {  // Nothing was sent: any method may go again.
      if (more) std::this_thread::sleep_for(pause);
      continue;
    }
    if (ec == http::error::body_limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, ": the reply is larger than ", m.options.max_reply_bytes, " bytes"));
    }
    if (ec || !parser || !parser->is_done()) {
      last = ec == beast::error::timeout
                 ? absl::DeadlineExceededError(what + ": no reply within " +
                                               std::to_string(m.options.timeout.count()) + " ms")
                 : absl::UnavailableError(what + ": " + Describe(ec));
      if (!idempotent && written) return last;  // It may have been processed.
      if (more) std::this_thread::sleep_for(pause);
      continue;
    }
    http::response<http::string_body> res = parser->release();
    if (res.keep_alive()) m.PutIdle(std::move(conn));
    const int status = res.result_int();
    if (status / 100 == 2) return std::move(res.body());
    last = absl::Status(StatusCodeOfHttp(status),
                        absl::StrCat(what, ": HTTP ", status, " ", res.body().substr(0, 300)));
    if (status == 401 && m.tokens.renewable() && !reauthenticated) {
      reauthenticated = true;  // The token may have rotated or expired under us.
      const std::string sent((*req)[http::field::authorization]);
      if (absl::StartsWith(sent, "Bearer ")) m.tokens.Invalidate(sent.substr(7));
      continue;
    }
    const bool retryable = status == 429 || (status / 100 == 5 && idempotent);
    if (!retryable) return last;
    if (auto ra = res.find(http::field::retry_after); ra != res.end()) {
      const long seconds = std::atol(std::string(ra->value()).c_str());
      if (seconds > 0) {
        pause = std::min<std::chrono::milliseconds>(std::chrono::seconds(seconds),
                                                    m.options.backoff_max);
      }
    }
    if (more) std::this_thread::sleep_for(pause);
  }
  return last;
}

absl::Status ApiClient::Bind(const k8s::BindTarget& t, const k8s::BindResult& r,
                             const std::function<absl::Status()>& may_write) const {
  const std::string pod = PodPath(t.pod_namespace, t.pod_name);
  if (may_write) {
    if (absl::Status s = may_write(); !s.ok()) {
      return absl::FailedPreconditionError(std::string(s.message()) + " (nothing written)");
    }
  }
  // 409 Conflict (AlreadyExists): the pod is bound already; the caller reads
  // the pod to learn where (see k8s::ExtenderOptions::binder).
  return Call(http::verb::post, pod + "/binding", k8s::BindingJson(t, r.annotations)).status();
}

absl::Status ApiClient::Stream(const std::string& path,
                               const std::function<bool(std::string_view)>& on_data,
                               std::chrono::milliseconds idle_timeout) const {
  const Impl& m = *impl_;
  const std::string what = "GET " + path;
  m.limiter.Acquire();
  absl::StatusOr<http::request<http::string_body>> req =
      m.MakeRequest(http::verb::get, path, "", "");
  if (!req.ok()) return req.status();
  absl::StatusOr<std::unique_ptr<Connection>> conn = m.Connect();
  if (!conn.ok()) {
    return absl::Status(conn.status().code(), absl::StrCat(what, ": ", conn.status().message()));
  }
  Connection& c = **conn;
  beast::error_code ec = c.With([&](auto& stream) {
    return c.Run(m.options.timeout, [&](auto h) { http::async_write(stream, *req, h); });
  });
  http::response_parser<http::buffer_body> parser;
  // Unlimited (a watch never ends by size). Not boost::none: Beast 1.74
  // compares a Content-Length against an empty limit as exceeded.
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!ec) {
    ec = c.With([&](auto& stream) {
      return c.Run(m.options.timeout,
                   [&](auto h) { http::async_read_header(stream, c.buffer, parser, h); });
    });
  }
  if (ec) return absl::UnavailableError(what + ": " + Describe(ec));
  const int status = parser.get().result_int();
  std::string error_body;
  char buf[16384];
  while (!parser.is_done()) {
    parser.get().body().data = buf;
    parser.get().body().size = sizeof(buf);
    ec = c.With([&](auto& stream) {
      return c.Run(idle_timeout,
                   [&](auto h) { http::async_read_some(stream, c.buffer, parser, h); });
    });
    if (ec == http::error::need_buffer) ec = {};
    if (ec) break;
    const size_t n = sizeof(buf) - parser.get().body().size;
    if (n == 0) continue;
    if (status / 100 != 2) {
      if (error_body.size() < 4096) error_body.append(buf, std::min<size_t>(n, 4096));
      continue;
    }
    if (!on_data(std::string_view(buf, n))) return absl::CancelledError(what + ": stopped");
  }
  if (status / 100 != 2) {
    return absl::Status(StatusCodeOfHttp(status),
                        absl::StrCat(what, ": HTTP ", status, " ", error_body.substr(0, 300)));
  }
  if (ec == beast::error::timeout) {
    return absl::DeadlineExceededError(what + ": nothing for " +
                                       std::to_string(idle_timeout.count()) + " ms");
  }
  if (ec && ec != http::error::end_of_stream) {
    return absl::UnavailableError(what + ": " + Describe(ec));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ApiClient::GetPod(const k8s::BindTarget& t) const {
  return Get(PodPath(t.pod_namespace, t.pod_name));
}

void ApiWatchTransport::Sleep(std::chrono::milliseconds d) { std::this_thread::sleep_for(d); }

}  // namespace gpushare::kubeclient
