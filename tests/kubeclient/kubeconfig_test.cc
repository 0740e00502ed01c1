// kubeconfig and in-cluster config of gpushare-extender: every field form,
// relative paths, JSON kubeconfigs, errors naming what is wrong, and the
// rotation of a service-account token.

#include "kubeclient/kubeconfig.h"

#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpushare::kubeclient {
namespace {

using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A temporary folder, removed at the end of the test.
using ::gpushare::testing::TempDir;

constexpr char kCa[] = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
constexpr char kCert[] = "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n";
constexpr char kKey[] = "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n";

std::string TwoContexts(const std::string& cluster_a, const std::string& user_a) {
  return R"(apiVersion: v1
kind: Config
current-context: a
clusters:
- name: ca
  cluster:
)" + cluster_a + R"(
- name: cb
  cluster:
    server: https://b.example:6443
contexts:
- name: a
  context: {cluster: ca, user: ua}
- name: b
  context: {cluster: cb, user: ub}
users:
- name: ua
  user:
)" + user_a + R"(
- name: ub
  user:
    token: token-b
)";
}

TEST(KubeconfigTest, ReadsDataFieldsOfTheCurrentContext) {
  TempDir dir;
  const std::string text =
      TwoContexts("    server: https://10.0.0.1:6443\n    certificate-authority-data: " +
                      absl::Base64Escape(kCa) + "\n    tls-server-name: api.internal",
                  "    client-certificate-data: " + absl::Base64Escape(kCert) +
                      "\n    client-key-data: " + absl::Base64Escape(kKey));
  ASSERT_OK_AND_ASSIGN(RestConfig c, LoadKubeconfig(dir.Write("config", text), ""));
  EXPECT_EQ(c.server, "https://10.0.0.1:6443");
  EXPECT_EQ(c.ca_pem, kCa);
  EXPECT_EQ(c.client_cert_pem, kCert);
  EXPECT_EQ(c.client_key_pem, kKey);
  EXPECT_EQ(c.tls_server_name, "api.internal");
  EXPECT_THAT(c.token, IsEmpty());
  EXPECT_FALSE(c.insecure_skip_tls_verify);
  EXPECT_THAT(c.warnings, IsEmpty());
  EXPECT_THAT(c.source, HasSubstr("context a"));
}

TEST(KubeconfigTest, ResolvesRelativeFilesAgainstTheKubeconfigsFolder) {
  TempDir dir;
  dir.Write("pki/ca.crt", kCa);
  dir.Write("pki/client.crt", kCert);
  const std::string key = dir.Write("elsewhere/client.key", kKey);  // Absolute below.
  dir.Write("pki/token", "file-token\n");
  const std::string text = TwoContexts(
      "    server: https://10.0.0.1:6443\n    certificate-authority: pki/ca.crt",
      "    client-certificate: pki/client.crt\n    client-key: " + key +
          "\n    token: fixed\n    tokenFile: pki/token");
  ASSERT_OK_AND_ASSIGN(RestConfig c, LoadKubeconfig(dir.Write("kube/../config", text), ""));
  EXPECT_EQ(c.ca_pem, kCa);
  EXPECT_EQ(c.client_cert_pem, kCert);
  EXPECT_EQ(c.client_key_pem, kKey);
  EXPECT_EQ(c.token, "fixed");
  EXPECT_EQ(c.token_file, dir.path() + "/kube/../pki/token");
  // The file wins over the fixed token, trimmed.
  TokenSource tokens(c.token, c.token_file);
  EXPECT_EQ(*tokens.Get(), "file-token");
}

TEST(KubeconfigTest, ContextFlagOverridesTheCurrentContext) {
  const std::string text = TwoContexts("    server: https://a:6443", "    token: token-a");
  ASSERT_OK_AND_ASSIGN(RestConfig a, ParseKubeconfig(text, "/", ""));
  EXPECT_EQ(a.token, "token-a");
  ASSERT_OK_AND_ASSIGN(RestConfig b, ParseKubeconfig(text, "/", "b"));
  EXPECT_EQ(b.server, "https://b.example:6443");
  EXPECT_EQ(b.token, "token-b");
}

TEST(KubeconfigTest, ReadsTheJsonForm) {
  const std::string text = R"({"apiVersion":"v1","kind":"Config","current-context":"j",
    "clusters":[{"name":"c","cluster":{"server":"https://[fd00::1]:6443",
                                       "insecure-skip-tls-verify":true}}],
    "contexts":[{"name":"j","context":{"cluster":"c","user":"u"}}],
    "users":[{"name":"u","user":{"token":"json-token"}}]})";
  ASSERT_OK_AND_ASSIGN(RestConfig c, ParseKubeconfig(text, "/", ""));
  EXPECT_EQ(c.server, "https://[fd00::1]:6443");
  EXPECT_EQ(c.token, "json-token");
  EXPECT_TRUE(c.insecure_skip_tls_verify);
  EXPECT_THAT(c.warnings, ::testing::ElementsAre(HasSubstr("insecure-skip-tls-verify")));
}

// client-go reads insecure-skip-tls-verify as a YAML boolean: a quoted
// 'yes' is a string there, an error, and must never turn verification off.
TEST(KubeconfigTest, InsecureSkipTlsVerifyIsABooleanOnly) {
  auto with = [](const std::string& v) {
    return ParseKubeconfig(
        TwoContexts("    server: https://a:6443\n    insecure-skip-tls-verify: " + v, "    token: t"),
        "/", "");
  };
  for (const char* quoted : {"'yes'", "\"true\"", "'on'", "maybe", "[true]"}) {
    EXPECT_THAT(with(quoted), StatusIs(absl::StatusCode::kInvalidArgument,
                                       "insecure-skip-tls-verify must be a YAML boolean"))
        << quoted;
  }
  EXPECT_THAT(with("'yes'"), StatusIs(absl::StatusCode::kInvalidArgument, "the string 'yes'"));
  ASSERT_OK_AND_ASSIGN(RestConfig on, with("true"));
  EXPECT_TRUE(on.insecure_skip_tls_verify);
  ASSERT_OK_AND_ASSIGN(RestConfig off, with("false"));
  EXPECT_FALSE(off.insecure_skip_tls_verify);
  EXPECT_TRUE(off.warnings.empty());
}

TEST(KubeconfigTest, ErrorsNameWhatIsMissingOrWrong) {
  const std::string good = TwoContexts("    server: https://a:6443", "    token: t");
  EXPECT_THAT(LoadKubeconfig("/nonexistent/kubeconfig", ""),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/kubeconfig"));
  EXPECT_THAT(ParseKubeconfig("clusters: [", "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "malformed"));
  EXPECT_THAT(ParseKubeconfig("just text", "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "not a kubeconfig"));
  EXPECT_THAT(ParseKubeconfig(good, "/", "nope"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown context 'nope'"));
  std::string no_current = good;
  no_current.replace(no_current.find("current-context: a"), 18, "");
  EXPECT_THAT(ParseKubeconfig(no_current, "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "no current-context"));
  std::string bad_cluster = good;
  bad_cluster.replace(bad_cluster.find("{cluster: ca"), 12, "{cluster: cx");
  EXPECT_THAT(ParseKubeconfig(bad_cluster, "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown cluster 'cx'"));
  std::string bad_user = good;
  bad_user.replace(bad_user.find("user: ua}"), 9, "user: ux}");
  EXPECT_THAT(ParseKubeconfig(bad_user, "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown user 'ux'"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    insecure-skip-tls-verify: true", "    token: t"),
                              "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "cluster 'ca' has no server"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    server: https://a\n    certificate-authority: "
                                          "missing.crt",
                                          "    token: t"),
                              "/tmp/x", ""),
              StatusIs(absl::StatusCode::kNotFound, "/tmp/x/missing.crt"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    server: https://a\n    certificate-authority-data: "
                                          "not-base64%%",
                                          "    token: t"),
                              "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "certificate-authority-data"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    server: https://a",
                                          "    exec: {command: aws, apiVersion: v1}"),
                              "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "user 'ua': exec: apiVersion 'v1' is not client.authentication.k8s.io"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    server: https://a",
                                          "    auth-provider: {name: oidc}"),
                              "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "user 'ua' uses auth-provider"));
  EXPECT_THAT(ParseKubeconfig(TwoContexts("    server: https://a",
                                          "    client-certificate-data: " +
                                              absl::Base64Escape(kCert)),
                              "/", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, "without a key"));
}

// Sets environment variables for one test, restoring them after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(InClusterTest, ReadsTheServiceAccountAndFollowsTokenRotation) {
  TempDir dir;
  dir.Write("ca.crt", kCa);
  dir.Write("token", "first\n");
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "10.96.0.1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "443");
  ASSERT_OK_AND_ASSIGN(RestConfig c, InClusterConfig(dir.path()));
  EXPECT_EQ(c.server, "https://10.96.0.1:443");
  EXPECT_EQ(c.ca_pem, kCa);
  EXPECT_EQ(c.token_file, dir.path() + "/token");
  TokenSource tokens(c.token, c.token_file);
  EXPECT_EQ(*tokens.Get(), "first");
  // kubelet rotates the token by swapping the file (a new inode).
  dir.Write("token.new", "second");
  std::filesystem::rename(dir.path() + "/token.new", dir.path() + "/token");
  EXPECT_EQ(*tokens.Get(), "second");
  // A read failure mid-rotation keeps the last good token.
  std::filesystem::remove(dir.path() + "/token");
  EXPECT_EQ(*tokens.Get(), "second");
}

TEST(InClusterTest, ErrorsOutsideAPodOrWithoutItsFiles) {
  TempDir dir;
  {
    ScopedEnv host("KUBERNETES_SERVICE_HOST", nullptr);
    EXPECT_THAT(InClusterConfig(dir.path()),
                StatusIs(absl::StatusCode::kFailedPrecondition, "KUBERNETES_SERVICE_HOST"));
  }
  ScopedEnv host("KUBERNETES_SERVICE_HOST", "fd00::1");
  ScopedEnv port("KUBERNETES_SERVICE_PORT", "6443");
  EXPECT_THAT(InClusterConfig(dir.path()),
              StatusIs(absl::StatusCode::kNotFound, dir.path() + "/token"));
  dir.Write("token", "t");
  EXPECT_THAT(InClusterConfig(dir.path()),
              StatusIs(absl::StatusCode::kNotFound, dir.path() + "/ca.crt"));
  dir.Write("ca.crt", kCa);
  ASSERT_OK_AND_ASSIGN(RestConfig c, InClusterConfig(dir.path()));
  EXPECT_EQ(c.server, "https://[fd00::1]:6443");
}

TEST(ResolveTest, KubeconfigFlagThenEnvironmentThenApiserverAlone) {
  TempDir dir;
  const std::string first =
      dir.Write("first", TwoContexts("    server: https://first:6443", "    token: t1"));
  const std::string second =
      dir.Write("second", TwoContexts("    server: https://second:6443", "    token: t2"));
  ScopedEnv env("KUBECONFIG", (first + ":" + second).c_str());
  ASSERT_OK_AND_ASSIGN(RestConfig c, ResolveRestConfig({}));
  EXPECT_EQ(c.server, "https://first:6443");
  EXPECT_THAT(c.warnings, ::testing::ElementsAre(HasSubstr("only the first")));
  ASSERT_OK_AND_ASSIGN(c, ResolveRestConfig({"", second, "b"}));
  EXPECT_EQ(c.server, "https://b.example:6443");
  ASSERT_OK_AND_ASSIGN(c, ResolveRestConfig({"https://override:1", second, ""}));
  EXPECT_EQ(c.server, "https://override:1");
  EXPECT_EQ(c.token, "t2");
  ASSERT_OK_AND_ASSIGN(c, ResolveRestConfig({"http://127.0.0.1:8001", second, ""}));
  EXPECT_THAT(c.warnings, ::testing::Contains(HasSubstr("token goes over plain HTTP")));
  // --apiserver alone ignores $KUBECONFIG: its credentials stay home.
  ASSERT_OK_AND_ASSIGN(c, ResolveRestConfig({"http://127.0.0.1:8001", "", ""}));
  EXPECT_EQ(c.server, "http://127.0.0.1:8001");
  EXPECT_THAT(c.token, IsEmpty());
  ScopedEnv no_env("KUBECONFIG", nullptr);
  ASSERT_OK_AND_ASSIGN(c, ResolveRestConfig({"http://127.0.0.1:8001", "", ""}));
  EXPECT_EQ(c.server, "http://127.0.0.1:8001");
  EXPECT_THAT(c.token, IsEmpty());
  ScopedEnv no_host("KUBERNETES_SERVICE_HOST", nullptr);
  EXPECT_THAT(ResolveRestConfig({}), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ResolveRestConfig({"", "", "ctx"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--context ctx"));
}

}  // namespace
}  // namespace gpushare::kubeclient
