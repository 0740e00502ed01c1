// The API client of gpushare-extender against local HTTP and HTTPS servers on
// 127.0.0.1 (Beast + asio ssl), with certificates made at test time by the
// OpenSSL API: verification (wrong CA, expired, wrong host name), client
// certificates, bearer tokens, keep-alive, retries, status mapping and
// streamed (chunked) watch replies.

#include "kubeclient/api_client.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::kubeclient {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;

// ---- Certificates ---------------------------------------------------------------

struct KeyPair {
  std::string cert_pem, key_pem;
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
};

std::string ToPem(const std::function<int(BIO*)>& write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  EXPECT_EQ(write(bio.get()), 1);
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

// A certificate for `cn` with subjectAltName `san` (e.g. "IP:127.0.0.1"),
// valid from now+`from_s` to now+`to_s` seconds, signed by `issuer` (self
// when null).
KeyPair MakeCert(const std::string& cn, const std::string& san, bool is_ca,
                 const KeyPair* issuer, long from_s = -3600, long to_s = 86400) {
  KeyPair kp;
  kp.key.reset(EVP_RSA_gen(2048), EVP_PKEY_free);
  kp.cert.reset(X509_new(), X509_free);
  X509* x = kp.cert.get();
  X509_set_version(x, 2);
  static std::atomic<long> serial{1};
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), from_s);
  X509_gmtime_adj(X509_getm_notAfter(x), to_s);
  X509_set_pubkey(x, kp.key.get());
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer->cert.get()) : name);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer->cert.get() : x, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr) << value;
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  };
  add(NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (is_ca) add(NID_key_usage, "critical,keyCertSign,cRLSign");
  if (!san.empty()) add(NID_subject_alt_name, san.c_str());
  X509_sign(x, issuer ? issuer->key.get() : kp.key.get(), EVP_sha256());
  kp.cert_pem = ToPem([&](BIO* b) { return PEM_write_bio_X509(b, x); });
  kp.key_pem = ToPem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, kp.key.get(), nullptr, nullptr, 0, nullptr, nullptr);
  });
  return kp;
}

// ---- A small server on 127.0.0.1 -------------------------------------------------------

struct Response {
  http::status status = http::status::ok;
  std::string body = "{}";
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::string> chunks;  // When set: a chunked reply, one chunk each.
};

using json = nlohmann::json;

struct Seen {
  std::string method, target, authorization, client_cn, body;
};

class TestServer {
 public:
  using Handler = std::function<Response(const http::request<http::string_body>&)>;

  // `tls`: serve HTTPS with this certificate; `client_ca`: require a client
  // certificate signed by it.
  TestServer(Handler handler, const KeyPair* tls = nullptr, const KeyPair* client_ca = nullptr)
      : handler_(std::move(handler)),
        acceptor_(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {
    if (tls) {
      ctx_ = std::make_unique<ssl::context>(ssl::context::tls_server);
      ctx_->use_certificate_chain(asio::buffer(tls->cert_pem));
      ctx_->use_private_key(asio::buffer(tls->key_pem), ssl::context::pem);
      if (client_ca) {
        ctx_->add_certificate_authority(asio::buffer(client_ca->cert_pem));
        ctx_->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
      }
    }
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { AcceptLoop(); });
  }

  ~TestServer() {
    stop_ = true;
    beast::error_code ec;
    tcp::socket wake(io_);
    wake.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
    {
      std::lock_guard lock(mu_);
      for (tcp::socket* s : open_) s->shutdown(tcp::socket::shutdown_both, ec);
    }
    for (std::thread& t : connections_) t.join();
  }

  std::string url() const {
    return std::string(ctx_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_);
  }
  int port() const { return port_; }
  int connections() const { return accepted_.load(); }
  std::vector<Seen> seen() {
    std::lock_guard lock(mu_);
    return seen_;
  }

 private:
  void AcceptLoop() {
    for (;;) {
      tcp::socket socket(io_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (stop_ || ec) return;
      ++accepted_;
      connections_.emplace_back([this, s = std::move(socket)]() mutable { Serve(std::move(s)); });
    }
  }

  void Serve(tcp::socket socket) {
    {
      std::lock_guard lock(mu_);
      open_.push_back(&socket);
    }
    beast::error_code ec;
    if (ctx_) {
      ssl::stream<tcp::socket&> stream(socket, *ctx_);
      stream.handshake(ssl::stream_base::server, ec);
      std::string cn;
      if (!ec) {
        if (X509* peer = SSL_get_peer_certificate(stream.native_handle())) {
          char buf[256] = {};
          X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, buf, sizeof buf);
          cn = buf;
          X509_free(peer);
        }
        Loop(stream, cn);
      }
    } else {
      Loop(socket, "");
    }
    std::lock_guard lock(mu_);
    open_.erase(std::find(open_.begin(), open_.end(), &socket));
  }

  template <class Stream>
  void Loop(Stream& stream, const std::string& cn) {
    beast::flat_buffer buffer;
    for (;;) {
      http::request<http::string_body> req;
      beast::error_code ec;
      http::read(stream, buffer, req, ec);
      if (ec) return;
      {
        std::lock_guard lock(mu_);
        seen_.push_back(Seen{std::string(req.method_string()), std::string(req.target()),
                             std::string(req[http::field::authorization]), cn,
                             req.body()});
      }
      Response r = handler_(req);
      if (!r.chunks.empty()) {
        http::response<http::empty_body> res{r.status, 11};
        res.set(http::field::content_type, "application/json");
        res.chunked(true);
        http::response_serializer<http::empty_body> sr{res};
        http::write_header(stream, sr, ec);
        for (const std::string& c : r.chunks) {
          asio::write(stream, http::make_chunk(asio::buffer(c)), ec);
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        }
        asio::write(stream, http::make_chunk_last(), ec);
        continue;
      }
      http::response<http::string_body> res{r.status, 11};
      res.set(http::field::content_type, "application/json");
      for (const auto& [k, v] : r.headers) res.set(k, v);
      res.keep_alive(req.keep_alive());
      res.body() = r.body;
      res.prepare_payload();
      http::write(stream, res, ec);
      if (ec || !req.keep_alive()) return;
    }
  }

  Handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::unique_ptr<ssl::context> ctx_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
  std::vector<std::thread> connections_;
  std::mutex mu_;
  std::vector<tcp::socket*> open_;  // Guarded by mu_.
  std::vector<Seen> seen_;          // Guarded by mu_.
};

Response Ok(const http::request<http::string_body>&) { return Response{}; }

ClientOptions Fast() {
  ClientOptions o;
  o.backoff_initial = std::chrono::milliseconds(1);
  o.backoff_max = std::chrono::milliseconds(5);
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

RestConfig Plain(const std::string& url) {
  RestConfig c;
  c.server = url;
  return c;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new KeyPair(MakeCert("test-ca", "", true, nullptr));
    other_ca_ = new KeyPair(MakeCert("other-ca", "", true, nullptr));
    server_ = new KeyPair(MakeCert("apiserver", "IP:127.0.0.1,DNS:localhost", false, ca_));
  }
  static void TearDownTestSuite() {
    delete ca_;
    delete other_ca_;
    delete server_;
  }
  static RestConfig Config(const TestServer& s, const KeyPair& ca) {
    RestConfig c;
    c.server = s.url();
    c.ca_pem = ca.cert_pem;
    return c;
  }
  static KeyPair* ca_;
  static KeyPair* other_ca_;
  static KeyPair* server_;
};
KeyPair* TlsTest::ca_ = nullptr;
KeyPair* TlsTest::other_ca_ = nullptr;
KeyPair* TlsTest::server_ = nullptr;

TEST_F(TlsTest, TheRightCaSucceedsAndConnectionsAreKeptAlive) {
  TestServer server([](const auto& req) {
    Response r;
    r.body = "{\"path\":\"" + std::string(req.target()) + "\"}";
    return r;
  }, server_);
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Config(server, *ca_), Fast()));
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(std::string body, api->Get("/api/v1/nodes"));
    EXPECT_EQ(body, "{\"path\":\"/api/v1/nodes\"}");
  }
  EXPECT_EQ(server.connections(), 1);
  // By name too: "localhost" is in the certificate.
  RestConfig by_name = Config(server, *ca_);
  by_name.server = "https://localhost:" + std::to_string(server.port());
  ASSERT_OK_AND_ASSIGN(auto named, ApiClient::Create(by_name, Fast()));
  EXPECT_OK(named->Get("/version").status());
}

TEST_F(TlsTest, AWrongCaIsRefused) {
  TestServer server(Ok, server_);
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Config(server, *other_ca_), Fast()));
  EXPECT_THAT(api->Get("/api/v1/nodes"),
              StatusIs(absl::StatusCode::kUnavailable, "unable to get local issuer certificate"));
  EXPECT_THAT(api->Get("/api/v1/nodes").status().message(), HasSubstr("certificate verify failed"));
  EXPECT_TRUE(server.seen().empty());
  // insecure-skip-tls-verify is honoured.
  RestConfig insecure = Config(server, *other_ca_);
  insecure.insecure_skip_tls_verify = true;
  ASSERT_OK_AND_ASSIGN(auto lax, ApiClient::Create(insecure, Fast()));
  EXPECT_OK(lax->Get("/api/v1/nodes").status());
}

TEST_F(TlsTest, AnExpiredCertificateIsRefused) {
  const KeyPair expired =
      MakeCert("apiserver", "IP:127.0.0.1", false, ca_, -7 * 86400, -86400);
  TestServer server(Ok, &expired);
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Config(server, *ca_), Fast()));
  EXPECT_THAT(api->Get("/api/v1/nodes"),
              StatusIs(absl::StatusCode::kUnavailable, "certificate has expired"));
}

TEST_F(TlsTest, AWrongHostNameIsRefused) {
  const KeyPair elsewhere = MakeCert("apiserver", "DNS:api.example.com", false, ca_);
  TestServer server(Ok, &elsewhere);
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Config(server, *ca_), Fast()));
  EXPECT_THAT(api->Get("/api/v1/nodes"),
              StatusIs(absl::StatusCode::kUnavailable, "IP address mismatch"));
  RestConfig by_name = Config(server, *ca_);
  by_name.server = "https://localhost:" + std::to_string(server.port());
  ASSERT_OK_AND_ASSIGN(auto named, ApiClient::Create(by_name, Fast()));
  EXPECT_THAT(named->Get("/api/v1/nodes"),
              StatusIs(absl::StatusCode::kUnavailable, "hostname mismatch"));
  // tls-server-name checks the name the certificate does have.
  RestConfig renamed = by_name;
  renamed.tls_server_name = "api.example.com";
  ASSERT_OK_AND_ASSIGN(auto ok, ApiClient::Create(renamed, Fast()));
  EXPECT_OK(ok->Get("/api/v1/nodes").status());
}

TEST_F(TlsTest, PresentsTheClientCertificateAndTheToken) {
  const KeyPair client = MakeCert("system:kube-scheduler", "", false, ca_);
  TestServer server(Ok, server_, /*client_ca=*/ca_);
  RestConfig c = Config(server, *ca_);
  c.client_cert_pem = client.cert_pem;
  c.client_key_pem = client.key_pem;
  c.token = "s3cret";
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(c, Fast()));
  ASSERT_OK(api->Get("/api/v1/pods").status());
  ASSERT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(server.seen()[0].client_cn, "system:kube-scheduler");
  EXPECT_EQ(server.seen()[0].authorization, "Bearer s3cret");
  // Without the certificate the server refuses the handshake.
  ASSERT_OK_AND_ASSIGN(auto anonymous, ApiClient::Create(Config(server, *ca_), Fast()));
  EXPECT_THAT(anonymous->Get("/api/v1/pods"), StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(TlsTest, RejectsBadPemAndMismatchedKeys) {
  RestConfig c;
  c.server = "https://127.0.0.1:1";
  c.ca_pem = "not a certificate";
  EXPECT_THAT(ApiClient::Create(c), StatusIs(absl::StatusCode::kInvalidArgument, "CA"));
  const KeyPair a = MakeCert("a", "", false, ca_);
  const KeyPair b = MakeCert("b", "", false, ca_);
  c.ca_pem = ca_->cert_pem;
  c.client_cert_pem = a.cert_pem;
  c.client_key_pem = b.key_pem;
  EXPECT_THAT(ApiClient::Create(c), StatusIs(absl::StatusCode::kInvalidArgument, "client key"));
  EXPECT_THAT(ApiClient::Create("ftp://x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ApiClient::Create("http://"), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- Status mapping, retries, streams (plain HTTP) ------------------------------------

TEST(ApiClientTest, AServerUrlWithCredentialsIsRefusedClearly) {
  auto c = ApiClient::Create("https://admin:hunter2@10.0.0.1:6443");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kInvalidArgument,
                                   "holds credentials (user:password@)"));
  EXPECT_EQ(std::string(c.status().message()).find("hunter2"), std::string::npos);
  EXPECT_THAT(ApiClient::Create("https://10.0.0.1:6443/a b").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "space or a control byte"));
}

TEST(ApiClientTest, MapsStatusesInOnePlace) {
  EXPECT_EQ(StatusCodeOfHttp(201), absl::StatusCode::kOk);
  EXPECT_EQ(StatusCodeOfHttp(409), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusCodeOfHttp(404), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusCodeOfHttp(403), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeOfHttp(401), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(StatusCodeOfHttp(410), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(IsGone(absl::Status(StatusCodeOfHttp(410), "gone")));
  EXPECT_EQ(StatusCodeOfHttp(429), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeOfHttp(408), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeOfHttp(503), absl::StatusCode::kUnavailable);
  EXPECT_EQ(StatusCodeOfHttp(422), absl::StatusCode::kInvalidArgument);
}

TEST(ApiClientTest, RetriesIdempotentCallsOn429And5xxButNotAPostOn5xx) {
  std::atomic<int> calls{0};
  TestServer server([&](const auto& req) {
    Response r;
    const int n = calls++;
    if (req.method() == http::verb::get && n < 2) {
      r.status = n == 0 ? http::status::too_many_requests : http::status::service_unavailable;
      r.headers = {{"Retry-After", "0"}};
    } else if (req.method() == http::verb::post) {
      r.status = http::status::internal_server_error;
    }
    return r;
  });
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Plain(server.url()), Fast()));
  EXPECT_OK(api->Get("/api/v1/nodes").status());
  EXPECT_EQ(calls.load(), 3);
  EXPECT_THAT(api->Call(http::verb::post, "/api/v1/namespaces/d/pods/p/binding", "{}"),
              StatusIs(absl::StatusCode::kUnavailable, "HTTP 500"));
  EXPECT_EQ(calls.load(), 4);
}

TEST(ApiClientTest, HonoursRetryAfterAndTheRateLimit) {
  std::atomic<int> calls{0};
  TestServer server([&](const auto&) {
    Response r;
    if (calls++ == 0) {
      r.status = http::status::too_many_requests;
      r.headers = {{"Retry-After", "1"}};
    }
    return r;
  });
  ClientOptions o = Fast();
  o.backoff_max = std::chrono::milliseconds(3000);
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Plain(server.url()), o));
  auto start = std::chrono::steady_clock::now();
  EXPECT_OK(api->Get("/api/v1/nodes").status());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(950));
  // 10 requests/s with a burst of 1: five calls take at least 0.4 s.
  o.qps = 10;
  o.burst = 1;
  ASSERT_OK_AND_ASSIGN(auto limited, ApiClient::Create(Plain(server.url()), o));
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) EXPECT_OK(limited->Get("/api/v1/nodes").status());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(390));
}

// The device plugin caps a reply at 32 MiB (its container's limit is 128
// MiB): a larger one is an error, not retried, and nothing more is read.
TEST(ApiClientTest, AReplyOverTheCapIsRefusedWithoutRetrying) {
  std::atomic<int> calls{0};
  TestServer server([&](const auto&) {
    ++calls;
    Response r;
    r.body = std::string(3 << 20, 'x');  // 3 MiB of pods, say.
    return r;
  });
  ClientOptions o = Fast();
  o.max_reply_bytes = 1 << 20;
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(Plain(server.url()), o));
  EXPECT_EQ(api->Get("/api/v1/pods").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(calls.load(), 1);
  o.max_reply_bytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(auto roomy, ApiClient::Create(Plain(server.url()), o));
  ASSERT_OK_AND_ASSIGN(std::string body, roomy->Get("/api/v1/pods"));
  EXPECT_EQ(body.size(), 3u << 20);
}

TEST(ApiClientTest, BindMapsAConflictToAlreadyExists) {
  TestServer server([](const auto& req) {
    Response r;
    if (req.method() == http::verb::post) {
      r.status = http::status::conflict;
      r.body = "{\"kind\":\"Status\",\"message\":\"pod p is already assigned to node n2\"}";
    }
    return r;
  });
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(server.url()));
  k8s::BindTarget target{"d", "p", "uid-p", "n1"};
  k8s::BindResult result;
  result.patch = "{\"metadata\":{\"annotations\":{}}}";
  EXPECT_THAT(api->Bind(target, result),
              StatusIs(absl::StatusCode::kAlreadyExists, "already assigned"));
  ASSERT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(server.seen()[0].method, "POST");
  EXPECT_EQ(server.seen()[0].target, "/api/v1/namespaces/d/pods/p/binding");
}

TEST(ApiClientTest, EscapesEveryPathSegmentItBuilds) {
  EXPECT_EQ(EscapePathSegment("web-0.v1"), "web-0.v1");
  EXPECT_EQ(EscapePathSegment("a/b c?d#e%f"), "a%2Fb%20c%3Fd%23e%25f");
  EXPECT_EQ(EscapePathSegment("x\r\nHost: y"), "x%0D%0AHost%3A%20y");
  EXPECT_EQ(EscapePathSegment(std::string("a\0b", 3)), "a%00b");
  EXPECT_EQ(EscapePathSegment(".."), "%2E%2E");
  EXPECT_EQ(EscapePathSegment("."), "%2E");
  EXPECT_EQ(PodPath("d", "p"), "/api/v1/namespaces/d/pods/p");
  EXPECT_EQ(PodPath("../x", "p/binding"), "/api/v1/namespaces/..%2Fx/pods/p%2Fbinding");
  EXPECT_TRUE(IsSafeTarget("/api/v1/pods?watch=1&resourceVersion=5"));
  EXPECT_FALSE(IsSafeTarget("/api/v1/pods HTTP/1.1"));
  EXPECT_FALSE(IsSafeTarget("/a\r\nb"));
  EXPECT_FALSE(IsSafeTarget(std::string("/a\0", 3)));
  EXPECT_FALSE(IsSafeTarget("/caf\xc3\xa9"));
  EXPECT_FALSE(IsSafeTarget("api/v1"));
  EXPECT_TRUE(IsSafeHeaderValue("Bearer abc.def"));
  EXPECT_FALSE(IsSafeHeaderValue("abc\r\nX-Evil: 1"));
}

// The smuggling reproducer: a pod name that would end the request line and
// start a second request. Bind writes one Binding of that one pod, with the
// name escaped into a single segment; the server sees no other request.
TEST(ApiClientTest, ANameCannotSmuggleASecondRequest) {
  TestServer server([](const auto&) { return Response(); });
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(server.url()));
  const std::string evil =
      "x HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/namespaces/default/pods/victim";
  k8s::BindTarget target{"default", evil, "uid-x", "n1"};
  k8s::BindResult result;
  result.patch = "{\"metadata\":{\"annotations\":{}}}";
  EXPECT_OK(api->Bind(target, result));
  ASSERT_EQ(server.seen().size(), 1u);
  for (const Seen& s : server.seen()) {
    EXPECT_NE(s.method, "DELETE");
    EXPECT_EQ(s.target.find_first_of(" \r\n"), std::string::npos) << s.target;
    EXPECT_THAT(s.target, HasSubstr("/pods/x%20HTTP%2F1.1%0D%0AHost%3A%20x"));
  }
  EXPECT_EQ(server.seen()[0].target.substr(server.seen()[0].target.size() - 8), "/binding");
  // A raw path with CR/LF is refused before anything is sent.
  EXPECT_THAT(api->Get("/api/v1/pods\r\nDELETE /x"),
              StatusIs(absl::StatusCode::kInvalidArgument, "refusing to send request target"));
  EXPECT_THAT(api->Get("/api/v1/pods HTTP/1.0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(server.seen().size(), 1u);
}

TEST(ApiClientTest, BindAsksBeforeItWritesAndStopsWhenRefused) {
  TestServer server([](const auto&) { return Response(); });
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(server.url()));
  k8s::BindTarget target{"d", "p", "uid-p", "n1"};
  k8s::BindResult result;
  result.annotations = {{"ALIYUN_COM_GPU_MEM_IDX", "1"}, {"ALIYUN_COM_GPU_MEM_POD", "8"}};
  int asked = 0;
  // Refused: nothing is written.
  EXPECT_THAT(api->Bind(target, result, [&] {
    ++asked;
    return absl::UnavailableError("lease lost");
  }), StatusIs(absl::StatusCode::kFailedPrecondition, "lease lost"));
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(server.seen().empty());
  // Allowed: one write, the Binding with the annotations on it.
  EXPECT_OK(api->Bind(target, result, [] { return absl::OkStatus(); }));
  ASSERT_EQ(server.seen().size(), 1u);
  EXPECT_EQ(server.seen()[0].method, "POST");
  json binding = json::parse(server.seen()[0].body);
  EXPECT_EQ(binding["kind"], "Binding");
  EXPECT_EQ(binding["target"]["name"], "n1");
  EXPECT_EQ(binding["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"], "1");
  EXPECT_EQ(binding["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_POD"], "8");
}

TEST(ApiClientTest, ReportsAnUnreachableServer) {
  int port = 0;
  {
    TestServer gone(Ok);
    port = gone.port();
  }
  ClientOptions o = Fast();
  o.max_attempts = 2;
  ASSERT_OK_AND_ASSIGN(
      auto api, ApiClient::Create(Plain("http://127.0.0.1:" + std::to_string(port)), o));
  EXPECT_THAT(api->Get("/api/v1/nodes"), StatusIs(absl::StatusCode::kUnavailable, "connect"));
}

TEST(ApiClientTest, ReReadsARotatedTokenAfter401) {
  char tmpl[] = "/tmp/api_client_test_token.XXXXXX";
  const int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string file = tmpl;
  std::ofstream(file) << "old";
  TestServer server([&](const auto& req) {
    Response r;
    if (req[http::field::authorization] != "Bearer new") r.status = http::status::unauthorized;
    return r;
  });
  RestConfig c = Plain(server.url());
  c.token_file = file;
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(c, Fast()));
  EXPECT_THAT(api->Get("/api/v1/pods"), StatusIs(absl::StatusCode::kUnauthenticated));
  // Rotated in place (same inode, maybe same size and second): the 401
  // forces a re-read.
  std::ofstream(file, std::ios::trunc) << "new";
  EXPECT_OK(api->Get("/api/v1/pods").status());
  std::remove(file.c_str());
}

TEST(ApiClientTest, RunsTheCredentialPluginAgainAfter401) {
  char tmpl[] = "/tmp/api_client_test_exec.XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string script = dir + "/plugin.sh";
  // token-1, then token-2, ...: the server takes token-2 only.
  std::ofstream(script) << "#!/bin/sh\nn=$(( $(cat " << dir << "/runs 2>/dev/null || echo 0) + 1 ))\n"
                        << "echo $n > " << dir << "/runs\n"
                        << "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
                           "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"token-'$n'\"}}'\n";
  chmod(script.c_str(), 0755);
  TestServer server([&](const auto& req) {
    Response r;
    if (req[http::field::authorization] != "Bearer token-2") r.status = http::status::unauthorized;
    return r;
  });
  RestConfig c = Plain(server.url());
  c.exec.api_version = "client.authentication.k8s.io/v1";
  c.exec.command = script;
  c.exec.interactive_mode = "Never";
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(c, Fast()));
  EXPECT_OK(api->Get("/api/v1/pods").status());  // token-1 refused, token-2 taken.
  EXPECT_OK(api->Get("/api/v1/nodes").status());  // token-2 from the cache.
  std::ifstream runs(dir + "/runs");
  int n = 0;
  runs >> n;
  EXPECT_EQ(n, 2);
  std::filesystem::remove_all(dir);
}

TEST(ApiClientTest, StreamsChunksAsTheyArriveAndMapsErrors) {
  const std::vector<std::string> chunks = {"{\"type\":\"ADDED\",", "\"object\":{}}\n{\"ty",
                                           "pe\":\"BOOKMARK\",\"object\":{}}\n"};
  TestServer server([&](const auto& req) {
    Response r;
    if (req.target().starts_with("/gone")) {
      r.status = http::status::gone;
      r.body = "{\"message\":\"too old resource version\"}";
    } else {
      r.chunks = chunks;
    }
    return r;
  });
  ASSERT_OK_AND_ASSIGN(auto api, ApiClient::Create(server.url()));
  std::string got;
  int pieces = 0;
  EXPECT_OK(api->Stream("/api/v1/pods?watch=1", [&](std::string_view d) {
    got.append(d);
    ++pieces;
    return true;
  }, std::chrono::seconds(5)));
  EXPECT_EQ(got, chunks[0] + chunks[1] + chunks[2]);
  EXPECT_GE(pieces, 2);
  // Stopping early.
  EXPECT_THAT(api->Stream("/api/v1/pods?watch=1", [](std::string_view) { return false; },
                          std::chrono::seconds(5)),
              StatusIs(absl::StatusCode::kCancelled));
  const absl::Status gone =
      api->Stream("/gone", [](std::string_view) { return true; }, std::chrono::seconds(5));
  EXPECT_TRUE(IsGone(gone)) << gone;
  EXPECT_THAT(gone, StatusIs(absl::StatusCode::kOutOfRange, "too old resource version"));
}

}  // namespace
}  // namespace gpushare::kubeclient
