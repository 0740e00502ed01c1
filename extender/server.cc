// Routing and connection serving of gpushare-extender (see server.h).

#include "extender/server.h"

#include <malloc.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/str_cat.h"
#include "extender/metrics.h"
#include "extender/token_review.h"
#include "nlohmann/json.hpp"

namespace gpushare::extender {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

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

// The client showed a certificate and it verified against --client-ca-file.
bool ShowedVerifiedCertificate(SSL* ssl) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  const bool ok = cert != nullptr && SSL_get_verify_result(ssl) == X509_V_OK;
  X509_free(cert);
  return ok;
}

// What the kubelet's probes ask for: served without a client certificate.
bool IsProbe(http::verb method, std::string_view target) {
  const std::string_view path = target.substr(0, target.find('?'));
  return method == http::verb::get && (path == "/healthz" || path == "/readyz");
}

}  // namespace

std::string RouteName(std::string_view target) {
  const std::string path(target.substr(0, target.find('?')));
  static const char* const kVerbs[] = {"filter",  "prioritize", "bind",    "preempt",
                                       "confirm", "forget",     "release", "version",
                                       "plan"};
  if (path.rfind(kRoutePrefix, 0) == 0) {
    const std::string verb = path.substr(sizeof(kRoutePrefix) - 1);
    if (verb == "inspect" || verb.rfind("inspect/", 0) == 0) return "inspect";
    for (const char* v : kVerbs) {
      if (verb == v) return v;
    }
    return "other";
  }
  for (const char* p : {"healthz", "readyz", "version", "metrics"}) {
    if (path == std::string("/") + p) return p;
  }
  return "other";
}

Reply Route(k8s::Extender& ext, http::verb method, std::string_view target,
            std::string_view body, const RouteHooks& hooks) {
  const std::string path(target.substr(0, target.find('?')));
  const bool read = method == http::verb::get || method == http::verb::head;
  if (!read && method != http::verb::post) {
    return {http::status::method_not_allowed,
            k8s::ErrorJson(absl::InvalidArgumentError("method not allowed: only GET, HEAD and POST"))};
  }
  if (!read && (path == "/healthz" || path == "/readyz" || path == "/version" ||
                path == "/gpushare-scheduler/version")) {
    return {http::status::method_not_allowed,
            k8s::ErrorJson(absl::InvalidArgumentError(path.substr(1) + " takes GET"))};
  }
  if (path == "/healthz") return {http::status::ok, "{\"status\":\"ok\"}"};
  if (path == "/readyz") {
    const absl::Status s = hooks.ready ? hooks.ready() : absl::OkStatus();
    if (s.ok() && hooks.role) {
      return {http::status::ok, nlohmann::json{{"status", "ready"}, {"role", hooks.role()}}.dump()};
    }
    if (s.ok()) return {http::status::ok, "{\"status\":\"ready\"}"};
    return {http::status::service_unavailable, k8s::ErrorJson(s)};
  }
  if (path == "/metrics" && hooks.metrics) {
    if (method != http::verb::get) {
      return {http::status::method_not_allowed,
              k8s::ErrorJson(absl::InvalidArgumentError("metrics takes GET"))};
    }
    return {http::status::ok, hooks.metrics(), kMetricsContentType};
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
  if (verb == "bind") {
    if (hooks.before_bind) {
      if (std::optional<Reply> instead = hooks.before_bind(target, body)) return *instead;
    }
    return FromStatus(ext.Bind(body));
  }
  if (verb == "plan") {
    // Read-only; a pod already placed or bound is a conflict, not a bad body.
    absl::StatusOr<std::string> plan = ext.PlanMigrations(body);
    if (!plan.ok() && plan.status().code() == absl::StatusCode::kAlreadyExists) {
      return {http::status::conflict, k8s::ErrorJson(plan.status())};
    }
    return FromStatus(plan);
  }
  if (verb == "preempt") return FromStatus(ext.Preempt(body));
  if ((verb == "confirm" || verb == "forget" || verb == "release") && !hooks.lifecycle_routes) {
    return {http::status::forbidden,
            k8s::ErrorJson(absl::PermissionDeniedError(
                verb + " is off: the extender follows the Kubernetes API, whose watch ends "
                       "placements (a pod that ends or is deleted frees its GPUs)"))};
  }
  if (verb == "confirm") return FromStatus(ext.Confirm(body));
  if (verb == "forget") return FromStatus(ext.Forget(body));
  if (verb == "release") return FromStatus(ext.Release(body));
  return {http::status::not_found, k8s::ErrorJson(absl::NotFoundError("no route " + path))};
}

namespace {

std::string OpenSslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

// How often the TLS files are looked at for a change (Server::Impl::CurrentTls).
constexpr std::chrono::seconds kTlsCheckInterval{1};

// The identity of the TLS files' contents: inode, size and modification time
// of each (following symbolic links, as a Secret's volume swaps them).
std::string TlsFilesStamp(const ServerOptions& o) {
  std::string stamp;
  for (const std::string* path : {&o.tls_cert_file, &o.tls_private_key_file, &o.client_ca_file}) {
    struct stat st {};
    if (path->empty()) continue;
    if (stat(path->c_str(), &st) != 0) {
      absl::StrAppend(&stamp, "missing;");
      continue;
    }
    absl::StrAppend(&stamp, st.st_dev, ":", st.st_ino, ":", st.st_size, ":", st.st_mtim.tv_sec,
                    ".", st.st_mtim.tv_nsec, ";");
  }
  return stamp;
}

// A request of a client without a certificate that carries a bearer token
// (ServerOptions::authorize_token): handled when the token may reach the path.
template <class Handler>
Reply RouteWithToken(Handler& handler, const http::request<http::string_body>& req,
                     const std::string& token, const ServerOptions& o) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::string path(target.substr(0, target.find('?')));
  const absl::Status s = o.authorize_token(token, path);
  if (s.ok()) return handler.Handle(req.method(), target, req.body());
  const http::status status = absl::IsUnauthenticated(s)      ? http::status::unauthorized
                              : absl::IsPermissionDenied(s) ? http::status::forbidden
                                                            : http::status::service_unavailable;
  return Reply{status, k8s::ErrorJson(s)};
}

// Builds the TLS context: TLS 1.2 or newer, the chain and key checked to match.
absl::StatusOr<std::unique_ptr<ssl::context>> MakeTlsContext(const ServerOptions& o) {
  auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                   ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                   ssl::context::single_dh_use);
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return absl::InternalError("cannot require TLS 1.2: " + OpenSslError());
  }
  ERR_clear_error();
  if (SSL_CTX_use_certificate_chain_file(native, o.tls_cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError("--tls-cert-file " + o.tls_cert_file +
                                      " is not a PEM certificate chain: " + OpenSslError());
  }
  if (SSL_CTX_use_PrivateKey_file(native, o.tls_private_key_file.c_str(), SSL_FILETYPE_PEM) !=
      1) {
    if (ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      return absl::InvalidArgumentError("--tls-private-key-file " + o.tls_private_key_file +
                                        " does not match the certificate of --tls-cert-file " +
                                        o.tls_cert_file + ": " + OpenSslError());
    }
    return absl::InvalidArgumentError("--tls-private-key-file " + o.tls_private_key_file +
                                      " is not a PEM private key: " + OpenSslError());
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return absl::InvalidArgumentError("--tls-private-key-file " + o.tls_private_key_file +
                                      " does not match the certificate of --tls-cert-file " +
                                      o.tls_cert_file + ": " + OpenSslError());
  }
  if (!o.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, o.client_ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError("--client-ca-file " + o.client_ca_file +
                                        " holds no PEM certificates: " + OpenSslError());
    }
    // A certificate, when shown, must verify; a client without one (the
    // kubelet's probes) may reach only the probe routes (Session::OnHeader).
    ctx->set_verify_mode(ssl::verify_peer);
  }
  return ctx;
}

}  // namespace

absl::Status ValidateServerOptions(const ServerOptions& o) {
  const ServerLimits& l = o.limits;
  if (l.body_budget_bytes < l.max_body_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--body-budget-bytes ", l.body_budget_bytes,
                     " is smaller than --max-body-bytes ", l.max_body_bytes,
                     ": the largest body could never be admitted"));
  }
  if (l.min_body_rate == 0) return absl::InvalidArgumentError("--min-body-rate must be positive");
  if (l.header_timeout.count() <= 0 || l.idle_timeout.count() <= 0) {
    return absl::InvalidArgumentError("--header-timeout-ms and --idle-timeout-ms must be positive");
  }
  if (l.max_connections < 1 || o.io_threads < 1 || o.worker_threads < 1) {
    return absl::InvalidArgumentError(
        "--max-connections, --io-threads and --worker-threads must be positive");
  }
  if (o.tls_cert_file.empty() != o.tls_private_key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert-file and --tls-private-key-file go together");
  }
  if (!o.client_ca_file.empty() && o.tls_cert_file.empty()) {
    return absl::InvalidArgumentError("--client-ca-file needs --tls-cert-file");
  }
  for (const auto& [flag, path] : {std::pair{"--tls-cert-file", &o.tls_cert_file},
                                   std::pair{"--tls-private-key-file", &o.tls_private_key_file},
                                   std::pair{"--client-ca-file", &o.client_ca_file}}) {
    if (!path->empty() && !Readable(*path)) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " ", *path, " cannot be read"));
    }
  }
  if (!o.tls_cert_file.empty()) {
    absl::StatusOr<std::unique_ptr<ssl::context>> ctx = MakeTlsContext(o);
    if (!ctx.ok()) return ctx.status();
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// The server.

namespace {

// Appends access-log lines; shared by all threads.
class AccessLog {
 public:
  ~AccessLog() {
    if (file_ != nullptr && file_ != stdout) std::fclose(file_);
  }
  absl::Status Open(const std::string& path) {
    if (path.empty()) return absl::OkStatus();
    file_ = path == "-" ? stdout : std::fopen(path.c_str(), "a");
    if (file_ == nullptr) {
      return absl::InvalidArgumentError("--access-log " + path + " cannot be opened");
    }
    return absl::OkStatus();
  }
  bool enabled() const { return file_ != nullptr; }
  void Write(const std::string& line) {
    std::lock_guard<std::mutex> lock(mu_);
    std::fwrite(line.data(), 1, line.size(), file_);
    std::fflush(file_);
  }

 private:
  std::mutex mu_;
  std::FILE* file_ = nullptr;
};

std::string UtcNow(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

// Bytes of request bodies admitted and not yet released.
class Budget {
 public:
  explicit Budget(uint64_t capacity) : capacity_(capacity) {}
  bool TryAcquire(uint64_t n) {
    uint64_t used = used_.load();
    do {
      if (used + n > capacity_) return false;
    } while (!used_.compare_exchange_weak(used, used + n));
    return true;
  }
  void Release(uint64_t n) { used_.fetch_sub(n); }

 private:
  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
};

// A syntax error of the request (as opposed to a socket error or a timeout).
std::string HeaderText(beast::string_view v, size_t max = 200) {
  return std::string(v.data(), std::min(v.size(), max));
}

bool IsHttpError(const beast::error_code& ec) {
  return ec && &ec.category() == &http::make_error_code(http::error::end_of_stream).category() &&
         ec != http::error::end_of_stream;
}

// What a connection is doing, for eviction at the connection cap.
enum class Phase : int { kIdle, kHeader, kBusy };

}  // namespace

class Server::Impl {
 public:
  // The state of a connection that the registry reads from other threads.
  class SessionBase {
   public:
    explicit SessionBase(Impl* impl) : impl_(impl) {}
    virtual ~SessionBase() { impl_->Unregister(this); }
    // Chosen for eviction (set and read under the registry's mutex).
    bool evicting = false;
    // The TLS context the connection was made with, kept while it lives (a
    // reload replaces the server's; the stream, a member of the derived
    // class, is destroyed first).
    std::shared_ptr<ssl::context> tls_context;
    // Closes the connection if it is still idle or reading a header.
    virtual void Evict() = 0;
    void SetPhase(Phase p) {
      phase_.store(p);
      since_ns_.store(Clock::now().time_since_epoch().count());
    }
    Phase phase() const { return phase_.load(); }
    int64_t since_ns() const { return since_ns_.load(); }

   protected:
    Impl* const impl_;

   private:
    std::atomic<Phase> phase_{Phase::kHeader};
    std::atomic<int64_t> since_ns_{Clock::now().time_since_epoch().count()};
  };

  template <class Stream>
  class Session;

  // One request: options_.handler, else the extender's routes.
  Reply Handle(http::verb method, std::string_view target, std::string_view body) {
    const ServerOptions& o = options_;
    if (o.handler) return o.handler(method, target, body);
    return Route(*ext_, method, target, body,
                 RouteHooks{o.ready, o.before_bind, o.metrics, o.role, o.lifecycle_routes});
  }

  Impl(k8s::Extender* ext, const ServerOptions& options)
      : ext_(ext),
        options_(options),
        limits_(options.limits),
        budget_(options.limits.body_budget_bytes),
        workers_(static_cast<size_t>(options.worker_threads)),
        planners_(static_cast<size_t>(std::max(1, options.plan_threads))),
        acceptor_(asio::make_strand(io_)) {}

  ~Impl() {
    beast::error_code ec;
    acceptor_.close(ec);
    workers_.join();
    planners_.join();
  }

  // Admits a /plan from `client` (its address without the port) to the
  // planners' pool: at most one at a time per client and max_plans in all,
  // so plans never occupy the workers that serve filters and binds.
  bool AdmitPlan(const std::string& client) {
    std::lock_guard lock(plans_mu_);
    if (static_cast<int>(planning_.size()) >= std::max(1, options_.max_plans)) return false;
    return planning_.insert(client).second;
  }
  void PlanDone(const std::string& client) {
    std::lock_guard lock(plans_mu_);
    planning_.erase(client);
  }

  absl::Status Init() {
    if (!options_.tls_cert_file.empty()) {
      tls_stamp_ = TlsFilesStamp(options_);
      absl::StatusOr<std::unique_ptr<ssl::context>> ctx = MakeTlsContext(options_);
      if (!ctx.ok()) return ctx.status();
      tls_ = *std::move(ctx);
      tls_checked_ = Clock::now();
    }
    if (absl::Status s = log_.Open(options_.access_log); !s.ok()) return s;
    // One descriptor per connection: make room for max_connections.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
      const rlim_t want = static_cast<rlim_t>(limits_.max_connections) + 64;
      if (rl.rlim_cur < want) {
        rl.rlim_cur = std::min(want, rl.rlim_max);
        setrlimit(RLIMIT_NOFILE, &rl);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> Listen(const std::string& address, int port) {
    beast::error_code ec;
    const asio::ip::address addr = asio::ip::make_address(address, ec);
    if (ec) return absl::InvalidArgumentError("bad --address " + address);
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("--port ", port, " is not in 0..65535"));
    }
    const tcp::endpoint endpoint(addr, static_cast<unsigned short>(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", address, ":", port, ": ", ec.message()));
    }
    return static_cast<int>(acceptor_.local_endpoint().port());
  }

  void Run() {
    Accept();
    std::vector<std::thread> threads;
    for (int i = 1; i < options_.io_threads; ++i) threads.emplace_back([this] { io_.run(); });
    io_.run();
    for (std::thread& t : threads) t.join();
  }

  void Stop() {
    asio::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
      io_.stop();
    });
  }

  int open_connections() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(sessions_.size());
  }

  // Used by sessions.
  void Unregister(SessionBase* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->evicting) --evicting_;
    sessions_.erase(s);
  }
  void Spare(SessionBase* s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->evicting) --evicting_;
    s->evicting = false;
  }
  void Log(const std::string& line) {
    if (log_.enabled()) log_.Write(line);
  }

  bool log_enabled() const { return log_.enabled(); }

  // Declared in this order so that sessions, destroyed with the io_context's
  // pending handlers, find the registry, the log and the TLS context alive.
  k8s::Extender* const ext_;
  const ServerOptions options_;
  const ServerLimits limits_;
  Budget budget_;
  AccessLog log_;
  // The TLS context of new connections (CurrentTls); each session keeps the
  // one it started with.
  std::shared_ptr<ssl::context> tls_;     // Guarded by tls_mu_.
  std::string tls_stamp_;                 // Guarded by tls_mu_: the files' stamps at the last load.
  Clock::time_point tls_checked_{};       // Guarded by tls_mu_.
  std::string tls_failed_stamp_;          // Guarded by tls_mu_: files that did not load.
  std::atomic<int> tls_reloads_{0};
  std::mutex tls_mu_;
  mutable std::mutex mu_;
  std::unordered_map<SessionBase*, std::weak_ptr<SessionBase>> sessions_;
  int evicting_ = 0;  // Sessions marked `evicting`, under mu_.
  asio::io_context io_;
  asio::thread_pool workers_;
  asio::thread_pool planners_;                  // /plan only.
  std::mutex plans_mu_;
  std::set<std::string> planning_;              // Clients with a plan running, under plans_mu_.
  tcp::acceptor acceptor_;

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket s) {
      if (!acceptor_.is_open()) return;
      if (!ec) Admit(std::move(s));
      Accept();
    });
  }

  // The TLS context for a new connection (nullptr: plain HTTP). The files
  // are looked at (stat) at most every kTlsCheckInterval; when any changed,
  // a context is built from them, and replaces the current one only if that
  // succeeds: a renewal written file by file (a certificate before its key)
  // keeps the old context until the files agree again.
  std::shared_ptr<ssl::context> CurrentTls() {
    std::lock_guard lock(tls_mu_);
    if (tls_ == nullptr) return nullptr;
    const Clock::time_point now = Clock::now();
    if (now - tls_checked_ < kTlsCheckInterval) return tls_;
    tls_checked_ = now;
    std::string stamp = TlsFilesStamp(options_);
    if (stamp == tls_stamp_) return tls_;
    absl::StatusOr<std::unique_ptr<ssl::context>> ctx = MakeTlsContext(options_);
    if (ctx.ok()) {
      tls_stamp_ = std::move(stamp);
      tls_ = std::shared_ptr<ssl::context>(*std::move(ctx));
      tls_reloads_.fetch_add(1);
    }
    // A failure is tried again at the next check (the stamp is not taken),
    // and reported once per change of the files.
    if (options_.on_tls_reload && (ctx.ok() || stamp != tls_failed_stamp_)) {
      options_.on_tls_reload(ctx.status());
    }
    if (!ctx.ok()) tls_failed_stamp_ = std::move(stamp);
    return tls_;
  }

  // Starts serving `socket`, evicting a waiting connection at the cap.
  void Admit(tcp::socket socket);

  // At the connection cap (counting the connections being evicted as gone),
  // marks and returns the connection waiting longest for its header, else the
  // longest idle; nullptr if there is none (all busy) or room without one.
  // `*full` tells whether the cap was reached.
  std::shared_ptr<SessionBase> EvictionCandidate(bool* full) {
    std::lock_guard<std::mutex> lock(mu_);
    *full = static_cast<int>(sessions_.size()) - evicting_ >= limits_.max_connections;
    if (!*full) return nullptr;
    SessionBase* best = nullptr;
    for (const auto& [s, weak] : sessions_) {
      const Phase p = s->phase();
      if (p == Phase::kBusy || s->evicting) continue;
      if (best == nullptr || (p == Phase::kHeader && best->phase() == Phase::kIdle) ||
          (p == best->phase() && s->since_ns() < best->since_ns())) {
        best = s;
      }
    }
    if (best == nullptr) return nullptr;
    std::shared_ptr<SessionBase> victim = sessions_[best].lock();
    if (victim != nullptr) {
      victim->evicting = true;
      ++evicting_;
    }
    return victim;
  }
};

// One connection: reads requests, hands them to the workers, writes replies.
// Everything but the handling runs on the connection's strand.
template <class Stream>
class Server::Impl::Session : public Server::Impl::SessionBase,
                              public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(Impl* impl, Stream stream, std::string peer)
      : SessionBase(impl), stream_(std::move(stream)), peer_(std::move(peer)) {}

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = this->shared_from_this()] {
      if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
        self->ReadIdle();
      } else {
        self->SetPhase(Phase::kHeader);
        self->Lowest().expires_after(self->impl_->limits_.header_timeout);
        self->stream_.async_handshake(ssl::stream_base::server,
                                      [self](beast::error_code ec) {
                                        if (ec) return self->Close();
                                        self->certified_ = ShowedVerifiedCertificate(
                                            self->stream_.native_handle());
                                        self->ReadIdle();
                                      });
      }
    });
  }

  void Evict() override {
    asio::post(stream_.get_executor(), [self = this->shared_from_this()] {
      if (self->phase() != Phase::kBusy) return self->Close();
      self->impl_->Spare(self.get());  // It got busy meanwhile: it stays.
    });
  }

 private:
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }
  const ServerLimits& limits() const { return impl_->limits_; }

  // Deadline of moving `bytes` at the minimum rate, plus the header timeout.
  std::chrono::milliseconds TransferTime(uint64_t bytes) const {
    return limits().header_timeout +
           std::chrono::milliseconds(bytes * 1000 / limits().min_body_rate);
  }

  // Waits up to idle_timeout for the first byte of the next request.
  void ReadIdle() {
    if (buffer_.size() > 0) return ReadHeader();
    SetPhase(Phase::kIdle);
    Lowest().expires_after(limits().idle_timeout);
    stream_.async_read_some(
        buffer_.prepare(4096), [self = this->shared_from_this()](beast::error_code ec,
                                                                  size_t n) {
          if (ec) return self->Close();
          self->buffer_.commit(n);
          self->ReadHeader();
        });
  }

  // Reads the request line and headers within header_timeout.
  void ReadHeader() {
    SetPhase(Phase::kHeader);
    parser_.emplace();
    parser_->header_limit(limits().max_header_bytes);
    parser_->body_limit(limits().max_body_bytes);
    Lowest().expires_after(limits().header_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) {
                              self->OnHeader(ec);
                            });
  }

  void OnHeader(beast::error_code ec) {
    SetPhase(Phase::kBusy);
    start_ = Clock::now();
    start_wall_ = std::chrono::system_clock::now();
    if (ec == http::error::header_limit) {
      // The request line alone too long: 414; else the headers: 431. The
      // parser takes the request line as soon as it is whole, so a parsed
      // target means the headers are what overflowed.
      if (parser_->get().target().empty()) {
        return Fail(http::status::uri_too_long, "request line longer than " +
                                                    std::to_string(limits().max_header_bytes) +
                                                    " bytes");
      }
      return Fail(http::status::request_header_fields_too_large,
                  "request headers longer than " + std::to_string(limits().max_header_bytes) +
                      " bytes");
    }
    if (ec == http::error::body_limit) {
      return Fail(http::status::payload_too_large,
                  absl::StrCat("body too large: Content-Length ",
                               HeaderText(parser_->get()[http::field::content_length]),
                               " exceeds ", limits().max_body_bytes, " bytes"));
    }
    if (IsHttpError(ec)) {
      return Fail(http::status::bad_request, "malformed request: " + ec.message());
    }
    if (ec) return Close();
    token_.clear();
    if (!impl_->options_.client_ca_file.empty() && !certified_) {
      const http::verb method = parser_->get().method();
      const std::string_view target(parser_->get().target().data(),
                                    parser_->get().target().size());
      if (impl_->options_.authorize_token && method == http::verb::get &&
          RouteName(target) == "metrics") {
        const beast::string_view h = parser_->get()[http::field::authorization];
        token_ = BearerToken(std::string(h.data(), h.size()));
      }
      if (token_.empty() && !IsProbe(method, target)) {
        return Fail(http::status::forbidden,
                    "a client certificate signed by a CA of --client-ca-file is required; "
                    "without one only GET /healthz and /readyz are served (and GET /metrics "
                    "with a bearer token, when the extender checks tokens)");
      }
    }
    // A chunked body may grow to the limit: reserve that much.
    want_ = parser_->chunked() ? limits().max_body_bytes : parser_->content_length().value_or(0);
    if (want_ == 0 || parser_->is_done()) return AcquireBudget();
    // The budget is taken once the body starts to arrive: a connection that
    // sends only headers holds none of it.
    if (buffer_.size() > 0) return StartBody();
    // The first bytes (at most one TLS record's worth) are read unbudgeted,
    // through the stream so that TLS data already taken off the socket counts.
    Lowest().expires_after(limits().header_timeout);
    stream_.async_read_some(buffer_.prepare(kFirstBodyRead),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              if (ec) return self->Close();
                              self->buffer_.commit(n);
                              self->StartBody();
                            });
  }

  void StartBody() {
    budget_deadline_ = Clock::now() + limits().budget_wait;
    AcquireBudget();
  }

  void AcquireBudget() {
    if (want_ == 0 || impl_->budget_.TryAcquire(want_)) {
      held_ = want_;
      return ReadBody();
    }
    if (Clock::now() >= budget_deadline_) {
      return Fail(http::status::service_unavailable,
                  "too many request bodies in flight; retry", /*retry_after=*/true);
    }
    timer_.emplace(stream_.get_executor());
    timer_->expires_after(std::chrono::milliseconds(10));
    timer_->async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec) return self->Close();
      self->AcquireBudget();
    });
  }

  // Reads the body piece by piece. Each piece must come before the time by
  // which the minimum rate would have brought the bytes so far plus one, after
  // the header timeout's allowance from the body's start: a client that stops
  // sending is cut within header_timeout, not only at the end of the whole
  // body's allowance, so held budget cannot be kept by a stalled sender.
  void ReadBody() {
    body_start_ = Clock::now();
    ReadBodySome();
  }

  void ReadBodySome() {
    if (parser_->is_done()) return OnBody({});
    const uint64_t got = parser_->get().body().size();
    Lowest().expires_at(body_start_ + TransferTime(got + 1));
    http::async_read_some(stream_, buffer_, *parser_,
                          [self = this->shared_from_this()](beast::error_code ec, size_t) {
                            if (ec) return self->OnBody(ec);
                            self->ReadBodySome();
                          });
  }

  void OnBody(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return Fail(http::status::payload_too_large,
                  absl::StrCat("body too large: more than ", limits().max_body_bytes, " bytes"));
    }
    if (IsHttpError(ec)) {
      return Fail(http::status::bad_request, "malformed request: " + ec.message());
    }
    if (ec) return Close();
    auto req = std::make_shared<http::request<http::string_body>>(parser_->release());
    parser_.reset();
    // A plan runs on the planners' pool, one per client at a time.
    const bool plan = req->method() == http::verb::post &&
                      RouteName(std::string_view(req->target().data(), req->target().size())) ==
                          "plan";
    std::string client;
    if (plan) {
      client = peer_.substr(0, peer_.rfind(':'));
      if (!impl_->AdmitPlan(client)) {
        ReleaseBudget();
        const size_t in = req->body().size();
        return Respond(
            Reply{http::status::too_many_requests,
                  k8s::ErrorJson(absl::ResourceExhaustedError(
                      "a plan of this client is running, or the most plans at once are; "
                      "retry when it is done"))},
            *req, in);
      }
    }
    // The worker returns the budget once the body is parsed and freed.
    asio::post(plan ? impl_->planners_ : impl_->workers_,
               [self = this->shared_from_this(), req, held = std::exchange(held_, 0), plan,
                client, token = std::exchange(token_, std::string())] {
      // A plan is a long search: its thread yields the CPU to filters and
      // binds (nice 10 for this thread only; Linux applies it per thread).
      if (plan) {
        static thread_local const bool lowered =
            setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10) == 0;
        (void)lowered;
      }
      const size_t in = req->body().size();
      const ServerOptions& o = self->impl_->options_;
      const std::string_view target(req->target().data(), req->target().size());
      const auto began = Clock::now();
      Reply reply = token.empty() ? self->impl_->Handle(req->method(), target, req->body())
                                  : RouteWithToken(*self->impl_, *req, token, o);
      if (o.on_request) {
        o.on_request(RouteName(target), reply,
                     std::chrono::duration<double>(Clock::now() - began).count());
      }
      // Free the body before returning its budget.
      std::string().swap(req->body());
      if (held > 0) self->impl_->budget_.Release(held);
      if (std::max<uint64_t>(in, held) >= self->limits().trim_bytes) malloc_trim(0);
      if (plan) self->impl_->PlanDone(client);
      asio::post(self->stream_.get_executor(), [self, req, in, reply = std::move(reply)]() mutable {
        self->Respond(std::move(reply), *req, in);
      });
    });
  }

  void Respond(Reply reply, const http::request<http::string_body>& req, size_t in) {
    res_.emplace(reply.status, req.version());
    res_->set(http::field::server, "gpushare-extender");
    res_->set(http::field::content_type, reply.content_type);
    res_->keep_alive(req.keep_alive());
    res_->body() = std::move(reply.body);
    res_->prepare_payload();
    method_ = HeaderText(req.method_string());
    target_ = HeaderText(req.target());
    in_ = in;
    Write(req.keep_alive());
  }

  // Answers an error before the body was read, then closes the connection.
  void Fail(http::status status, const std::string& message, bool retry_after = false) {
    SetPhase(Phase::kBusy);
    ReleaseBudget();
    if (parser_) {
      const auto& h = parser_->get();
      method_ = HeaderText(h.method_string());
      target_ = HeaderText(h.target());
    }
    res_.emplace(status, 11);
    res_->set(http::field::server, "gpushare-extender");
    res_->set(http::field::content_type, "application/json");
    if (retry_after) res_->set(http::field::retry_after, "1");
    res_->keep_alive(false);
    res_->body() = k8s::ErrorJson(status == http::status::service_unavailable
                                      ? absl::UnavailableError(message)
                                      : absl::InvalidArgumentError(message));
    res_->prepare_payload();
    in_ = 0;
    Write(false);
  }

  void Write(bool keep_alive) {
    SetPhase(Phase::kBusy);
    Lowest().expires_after(TransferTime(res_->body().size()));
    http::async_write(stream_, *res_, [self = this->shared_from_this(), keep_alive](
                                          beast::error_code ec, size_t) {
      self->LogRequest();
      self->res_.reset();
      if (ec) return self->Close();
      if (!keep_alive) return self->Linger();
      self->ReadIdle();
    });
  }

  void LogRequest() {
    if (!impl_->log_enabled()) return;
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
    impl_->Log(absl::StrCat(UtcNow(start_wall_), " ", peer_, " ",
                            method_.empty() ? "-" : method_, " ",
                            target_.empty() ? "-" : target_, " ",
                            static_cast<unsigned>(res_->result_int()), " ", in_, " ",
                            res_->body().size(), " ", us, "us\n"));
    method_.clear();
    target_.clear();
  }

  // Half-closes, then drops what the client still sends (a body it was
  // told not to send) for up to a second, so that its reading our reply is
  // not cut by a reset.
  void Linger() {
    SetPhase(Phase::kBusy);
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return Close();
    Lowest().expires_after(std::chrono::seconds(1));
    Drain();
  }

  void Drain() {
    Lowest().async_read_some(
        asio::buffer(drain_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
          self->drained_ += n;
          if (ec || self->drained_ > (4u << 20)) return self->Close();
          self->Drain();
        });
  }

  void ReleaseBudget() {
    if (held_ > 0) impl_->budget_.Release(std::exchange(held_, 0));
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    ReleaseBudget();
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().close();
  }

  Stream stream_;
  const std::string peer_;
  bool certified_ = false;  // TLS: the client showed a certificate that verified.
  std::string token_;       // This request's bearer token, to check (authorize_token).

  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> res_;
  std::optional<asio::steady_timer> timer_;
  uint64_t want_ = 0;  // Budget this request needs.
  uint64_t held_ = 0;  // Budget held by this connection (not yet by a worker).
  Clock::time_point budget_deadline_;
  Clock::time_point body_start_;
  // The most of a body read before its budget is taken (one TLS record).
  static constexpr size_t kFirstBodyRead = 16 << 10;
  Clock::time_point start_;
  std::chrono::system_clock::time_point start_wall_;
  std::string method_, target_;
  size_t in_ = 0;
  std::array<char, 16384> drain_;
  size_t drained_ = 0;
  bool closed_ = false;
};

void Server::Impl::Admit(tcp::socket socket) {
  bool full = false;
  if (std::shared_ptr<SessionBase> victim = EvictionCandidate(&full)) {
    victim->Evict();
  } else if (full) {
    beast::error_code ignored;
    socket.close(ignored);  // Every connection is busy: the client retries.
    return;
  }
  beast::error_code ec;
  socket.set_option(tcp::no_delay(true), ec);
  const tcp::endpoint remote = socket.remote_endpoint(ec);
  std::string peer = ec ? "-" : absl::StrCat(remote.address().to_string(), ":", remote.port());
  std::shared_ptr<SessionBase> base;
  auto start = [&](auto session) {
    base = session;
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_[session.get()] = session;
    }
    session->Start();
  };
  if (std::shared_ptr<ssl::context> tls = CurrentTls()) {
    auto session = std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(
        this, beast::ssl_stream<beast::tcp_stream>(beast::tcp_stream(std::move(socket)), *tls),
        std::move(peer));
    session->tls_context = std::move(tls);
    start(std::move(session));
  } else {
    start(std::make_shared<Session<beast::tcp_stream>>(this, beast::tcp_stream(std::move(socket)),
                                                       std::move(peer)));
  }
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::Create(k8s::Extender* ext,
                                                       const ServerOptions& options) {
  if (absl::Status s = ValidateServerOptions(options); !s.ok()) return s;
  if (ext == nullptr && !options.handler) {
    return absl::InvalidArgumentError("a server needs an extender or a handler");
  }
  auto impl = std::make_unique<Impl>(ext, options);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

absl::StatusOr<int> Server::Listen(const std::string& address, int port) {
  return impl_->Listen(address, port);
}
void Server::Run() { impl_->Run(); }
void Server::Stop() { impl_->Stop(); }
int Server::open_connections() const { return impl_->open_connections(); }
int Server::tls_reloads() const { return impl_->tls_reloads_.load(); }

}  // namespace gpushare::extender
