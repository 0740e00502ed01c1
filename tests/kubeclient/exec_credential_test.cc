// Credential plugins: the kubeconfig's exec section, the plugin's run (real
// shell scripts as plugins), the token's cache, and the API client renewing
// a token the server refuses.

#include "kubeclient/exec_credential.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kubeclient/kubeconfig.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"
#include "tests/testing/temp_dir.h"

namespace gpushare::kubeclient {
namespace {

using ::gpushare::testing::IsOkAndHolds;
using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

constexpr char kV1[] = "client.authentication.k8s.io/v1";
constexpr char kV1beta1[] = "client.authentication.k8s.io/v1beta1";

using ::gpushare::testing::TempDir;

std::string Credential(const std::string& token, const std::string& expiry = "",
                       const std::string& version = kV1) {
  nlohmann::json j = {{"apiVersion", version},
                      {"kind", "ExecCredential"},
                      {"status", {{"token", token}}}};
  if (!expiry.empty()) j["status"]["expirationTimestamp"] = expiry;
  return j.dump();
}

std::string Rfc3339(absl::Time t) { return absl::FormatTime(absl::RFC3339_sec, t, absl::UTCTimeZone()); }

// A kubeconfig whose user `u` has the given exec section (indented below exec:).
std::string Kubeconfig(const std::string& exec, const std::string& extra_user = "") {
  return absl::StrCat(R"(apiVersion: v1
kind: Config
current-context: c
clusters:
- name: k
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: )",
                      absl::Base64Escape("CA PEM"), R"(
    tls-server-name: api.internal
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
)", extra_user, "    exec:\n", exec);
}

TEST(ExecCredentialTest, ParsesTokenAndExpiry) {
  ASSERT_OK_AND_ASSIGN(ExecCredential c,
                       ParseExecCredential(Credential("t1", "2030-01-02T03:04:05Z"), kV1, "p"));
  EXPECT_EQ(c.token, "t1");
  ASSERT_TRUE(c.expiry.has_value());
  EXPECT_EQ(absl::FromChrono(*c.expiry), absl::FromCivil(absl::CivilSecond(2030, 1, 2, 3, 4, 5),
                                                          absl::UTCTimeZone()));
  ASSERT_OK_AND_ASSIGN(c, ParseExecCredential(Credential("t2", "", kV1beta1), kV1beta1, "p"));
  EXPECT_EQ(c.token, "t2");
  EXPECT_FALSE(c.expiry.has_value());
}

TEST(ExecCredentialTest, RefusesWhatIsNotATokenCredential) {
  EXPECT_THAT(ParseExecCredential("not json", kV1, "plugin 'x'"),
              StatusIs(absl::StatusCode::kInvalidArgument, "plugin 'x': its output is not a JSON"));
  EXPECT_THAT(ParseExecCredential(Credential("t", "", kV1beta1), kV1, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "apiVersion 'client.authentication.k8s.io/v1beta1', not the kubeconfig's"));
  EXPECT_THAT(ParseExecCredential(R"({"apiVersion":"client.authentication.k8s.io/v1",
                                      "kind":"Pod","status":{"token":"t"}})",
                                  kV1, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument, "kind 'Pod', not ExecCredential"));
  EXPECT_THAT(ParseExecCredential(Credential(""), kV1, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument, "no status.token"));
  EXPECT_THAT(ParseExecCredential(Credential("t", "tomorrow"), kV1, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "status.expirationTimestamp 'tomorrow' is not an RFC 3339 time"));
  EXPECT_THAT(ParseExecCredential(R"({"apiVersion":"client.authentication.k8s.io/v1",
                                      "kind":"ExecCredential","status":{
                                      "clientCertificateData":"C","clientKeyData":"K"}})",
                                  kV1, "p"),
              StatusIs(absl::StatusCode::kInvalidArgument, "returned a client certificate"));
}

TEST(ExecCredentialTest, ReadsTheExecSectionOfAKubeconfig) {
  TempDir dir;
  const std::string path = dir.Write("kube/config", Kubeconfig(R"(      apiVersion: client.authentication.k8s.io/v1
      command: ./bin/get-token
      args: [--cluster, prod]
      env: [{name: PROFILE, value: p1}]
      interactiveMode: Never
      installHint: install get-token
      provideClusterInfo: true
)"));
  ASSERT_OK_AND_ASSIGN(RestConfig c, LoadKubeconfig(path, ""));
  EXPECT_EQ(c.exec.api_version, kV1);
  EXPECT_EQ(c.exec.command, dir.path() + "/kube/./bin/get-token");
  EXPECT_THAT(c.exec.args, ElementsAre("--cluster", "prod"));
  EXPECT_THAT(c.exec.env, ElementsAre(Pair("PROFILE", "p1")));
  EXPECT_EQ(c.exec.interactive_mode, "Never");
  EXPECT_EQ(c.exec.install_hint, "install get-token");
  const nlohmann::json cluster = nlohmann::json::parse(c.exec.cluster_json);
  EXPECT_EQ(cluster["server"], "https://10.0.0.1:6443");
  EXPECT_EQ(cluster["certificate-authority-data"], absl::Base64Escape("CA PEM"));
  EXPECT_EQ(cluster["tls-server-name"], "api.internal");
  EXPECT_TRUE(c.token.empty());
  // A bare command name is looked up on $PATH, not in the kubeconfig's folder;
  // v1beta1 defaults to IfAvailable; no cluster info unless asked for.
  ASSERT_OK_AND_ASSIGN(c, ParseKubeconfig(Kubeconfig("      apiVersion: client.authentication.k8s.io/v1beta1\n"
                                                     "      command: aws\n"),
                                          "/etc", ""));
  EXPECT_EQ(c.exec.command, "aws");
  EXPECT_EQ(c.exec.interactive_mode, "IfAvailable");
  EXPECT_EQ(c.exec.cluster_json, "");
}

TEST(ExecCredentialTest, NamesWhatIsWrongInAnExecSection) {
  auto parse = [](const std::string& exec, const std::string& extra = "") {
    return ParseKubeconfig(Kubeconfig(exec, extra), "/", "");
  };
  EXPECT_THAT(parse("      command: aws\n      interactiveMode: Never\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "user 'u': exec: apiVersion ''"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1\n"
                    "      interactiveMode: Never\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "exec: has no command"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "interactiveMode is required"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"
                    "      interactiveMode: Sometimes\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "interactiveMode 'Sometimes'"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n"
                    "      env: [{value: x}]\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "env must be a list of {name, value}"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n"
                    "      args: {a: b}\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "args must be a list of strings"));
  EXPECT_THAT(parse("      apiVersion: client.authentication.k8s.io/v1beta1\n      command: aws\n",
                    "    token: t\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "both a token"));
}

ExecConfig Plugin(const std::string& command) {
  ExecConfig e;
  e.api_version = kV1;
  e.command = command;
  e.interactive_mode = "Never";
  e.where = "kubeconfig k: user 'u'";
  return e;
}

TEST(ExecCredentialTest, RunsThePluginWithItsEnvironmentAndRequest) {
  TempDir dir;
  const std::string script = dir.Write("plugin.sh", absl::StrCat(R"(#!/bin/sh
printf '%s' "$KUBERNETES_EXEC_INFO" > ")", dir.path(), R"(/info"
printf '%s %s' "$PROFILE" "$*" > ")", dir.path(), R"(/args"
echo "instructions for the user" >&2
cat <<EOF
{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
 "status": {"token": "tok-$PROFILE"}}
EOF
)"), true);
  ExecConfig e = Plugin(script);
  e.args = {"--cluster", "prod"};
  e.env = {{"PROFILE", "p1"}};
  e.cluster_json = R"({"server":"https://10.0.0.1:6443"})";
  ASSERT_OK_AND_ASSIGN(ExecCredential c, RunExecPlugin(e, /*interactive=*/false));
  EXPECT_EQ(c.token, "tok-p1");
  EXPECT_EQ(dir.Read("args"), "p1 --cluster prod");
  const nlohmann::json info = nlohmann::json::parse(dir.Read("info"));
  EXPECT_EQ(info["apiVersion"], kV1);
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], "https://10.0.0.1:6443");
}

TEST(ExecCredentialTest, ReportsAPluginThatFails) {
  TempDir dir;
  ExecConfig missing = Plugin(dir.path() + "/no-such-plugin");
  missing.install_hint = "brew install get-token";
  EXPECT_THAT(RunExecPlugin(missing, false),
              StatusIs(absl::StatusCode::kNotFound,
                       "credential plugin '" + dir.path() + "/no-such-plugin' cannot be started"));
  EXPECT_THAT(RunExecPlugin(missing, false).status().message(), HasSubstr("brew install"));
  EXPECT_THAT(RunExecPlugin(Plugin(dir.Write("fail.sh", "#!/bin/sh\nexit 3\n", true)), false),
              StatusIs(absl::StatusCode::kUnavailable, "exited with status 3"));
  EXPECT_THAT(RunExecPlugin(Plugin(dir.Write("junk.sh", "#!/bin/sh\necho junk\n", true)), false),
              StatusIs(absl::StatusCode::kInvalidArgument, "its output is not a JSON object"));
  ExecConfig slow = Plugin(dir.Write("slow.sh", "#!/bin/sh\nexec sleep 30\n", true));
  slow.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(RunExecPlugin(slow, false),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "did not finish within 300 ms"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

// A plugin that counts its runs in a file and answers token-<run> with the
// expiry in the file `expiry` (none when empty).
std::string CountingPlugin(const TempDir& dir) {
  dir.Write("expiry", "");
  return dir.Write("count.sh", absl::StrCat(R"(#!/bin/sh
d=")", dir.path(), R"("
n=$(( $(cat "$d/runs" 2>/dev/null || echo 0) + 1 ))
echo $n > "$d/runs"
e=$(cat "$d/expiry")
if [ -n "$e" ]; then x=", \"expirationTimestamp\": \"$e\""; else x=""; fi
echo "{\"apiVersion\": \"client.authentication.k8s.io/v1\", \"kind\": \"ExecCredential\", \"status\": {\"token\": \"token-$n\"$x}}"
)"), true);
}

TEST(ExecCredentialTest, CachesTheTokenUntilItExpiresOrIsRefused) {
  TempDir dir;
  ExecCredentialSource source(Plugin(CountingPlugin(dir)));
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-1")));
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-1")));
  EXPECT_EQ(source.runs(), 1);
  // A refusal of an older token (another caller renewed it) runs nothing.
  source.Invalidate("token-0");
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-1")));
  source.Invalidate("token-1");
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-2")));
  EXPECT_EQ(source.runs(), 2);

  // Expiring within the refresh margin: renewed at every call.
  dir.Write("expiry", Rfc3339(absl::Now() + absl::Seconds(5)));
  source.Invalidate();
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-3")));
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-4")));
  // Valid for an hour: kept.
  dir.Write("expiry", Rfc3339(absl::Now() + absl::Hours(1)));
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-5")));
  EXPECT_THAT(source.Get(), IsOkAndHolds(std::string("token-5")));
  EXPECT_EQ(source.runs(), 5);
}

TEST(ExecCredentialTest, AlwaysInteractiveNeedsATerminal) {
  if (isatty(STDIN_FILENO) == 1) GTEST_SKIP() << "standard input is a terminal";
  TempDir dir;
  ExecConfig e = Plugin(CountingPlugin(dir));
  e.interactive_mode = "Always";
  ExecCredentialSource source(e);
  EXPECT_THAT(source.Get(), StatusIs(absl::StatusCode::kFailedPrecondition, "needs a terminal"));
  EXPECT_EQ(source.runs(), 0);
}

TEST(ExecCredentialTest, TokenSourcePrefersThePlugin) {
  TempDir dir;
  TokenSource tokens("", "", Plugin(CountingPlugin(dir)));
  EXPECT_TRUE(tokens.renewable());
  EXPECT_THAT(tokens.Get(), IsOkAndHolds(std::string("token-1")));
  tokens.Invalidate("token-1");
  EXPECT_THAT(tokens.Get(), IsOkAndHolds(std::string("token-2")));
  EXPECT_FALSE(TokenSource("fixed", "").renewable());
}

}  // namespace
}  // namespace gpushare::kubeclient
