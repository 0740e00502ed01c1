// gpushare-extender's flags (extender/config.h): each rule, both spellings,
// the defaults, the exclusive flags, the help text.

#include "extender/config.h"

#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/flag_parsing.h"

namespace gpushare::extender {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

absl::StatusOr<ExtenderConfig> Parse(std::initializer_list<const char*> args) {
  return ::gpushare::testing::ParseFlags(ParseExtenderFlags, "gpushare-extender", args);
}

std::string Error(std::initializer_list<const char*> args) {
  return ::gpushare::testing::FlagError(Parse(args));
}

TEST(ExtenderFlagsTest, DefaultsWithoutFlags) {
  absl::StatusOr<ExtenderConfig> c = Parse({});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->help);
  EXPECT_FALSE(c->files());
  EXPECT_EQ(c->address, "127.0.0.1");
  EXPECT_EQ(c->port, 32766);
  EXPECT_EQ(c->policy, "binpack");
  EXPECT_EQ(c->ttl_ms, 60'000);
  EXPECT_EQ(c->resync_ms, 300'000);
  EXPECT_EQ(c->startup_timeout_ms, 120'000);
  EXPECT_EQ(c->plan_deadline_ms, 5'000);
  EXPECT_TRUE(c->requeue);
  EXPECT_FALSE(c->leader_elect);
  EXPECT_FALSE(c->lease_namespace_given);
  EXPECT_EQ(c->lease.name, "gpushare-extender");
  EXPECT_EQ(c->lease.lease_duration.count(), 15'000);
  EXPECT_EQ(c->qps, ClientOptions{}.qps);
  EXPECT_EQ(c->burst, ClientOptions{}.burst);
  const ServerOptions d;
  EXPECT_EQ(c->serving.io_threads, d.io_threads);
  EXPECT_EQ(c->serving.plan_threads, d.plan_threads);
  EXPECT_EQ(c->serving.max_plans, d.max_plans);
  EXPECT_EQ(c->serving.limits.max_body_bytes, d.limits.max_body_bytes);
  EXPECT_TRUE(c->serving.tls_cert_file.empty());
}

TEST(ExtenderFlagsTest, EqualsAndSpaceFormsAreTheSameFlag) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--port", "8080", "--policy", "spread", "--max-body-bytes", "1Mi", "--leader-elect",
            "true", "--plan-threads", "3", "--leader-forward-key", "k.pem"},
           {"--port=8080", "--policy=spread", "--max-body-bytes=1Mi", "--leader-elect=true",
            "--plan-threads=3", "--leader-forward-key=k.pem"}}) {
    std::vector<const char*> argv = {"gpushare-extender"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<ExtenderConfig> c = ParseExtenderFlags(static_cast<int>(argv.size()), argv.data());
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->port, 8080);
    EXPECT_EQ(c->policy, "spread");
    EXPECT_EQ(c->serving.limits.max_body_bytes, 1u << 20);
    EXPECT_TRUE(c->leader_elect);
    EXPECT_EQ(c->serving.plan_threads, 3);
    EXPECT_EQ(c->forward_key, "k.pem");
  }
}

TEST(ExtenderFlagsTest, ValuesAreKeptWhole) {
  // After '=', the rest is the value, '=' and all; after a space, the next
  // argument is the value even when it starts with "--".
  absl::StatusOr<ExtenderConfig> c =
      Parse({"--apiserver=http://h:8001/?a=b", "--port-file", "--odd-name", "--ttl-ms", "5"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->apiserver, "http://h:8001/?a=b");
  EXPECT_EQ(c->port_file, "--odd-name");
  EXPECT_EQ(c->ttl_ms, 5);
  // "--flag=" is an empty value, not "take the next argument".
  c = Parse({"--port-file=", "--port", "0", "--leader-elect-url="});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port_file, "");
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(c->lease.url, "");
  EXPECT_EQ(Error({"--access-log=", "--port", "1"}), "--access-log takes a file name");
}

TEST(ExtenderFlagsTest, TheLastOfARepeatedFlagWins) {
  absl::StatusOr<ExtenderConfig> c = Parse({"--port", "1", "--port=2", "--policy", "fgd"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->port, 2);
}

TEST(ExtenderFlagsTest, BooleansTakeAValue) {
  absl::StatusOr<ExtenderConfig> c = Parse({"--requeue-pending", "false", "--leader-elect", "1"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->requeue);
  EXPECT_TRUE(c->leader_elect);
  c = Parse({"--requeue-pending=0", "--leader-elect=false"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->requeue);
  EXPECT_FALSE(c->leader_elect);
  EXPECT_EQ(Error({"--leader-elect=maybe"}), "--leader-elect takes true or false, not maybe");
  EXPECT_EQ(Error({"--requeue-pending", "yes"}), "--requeue-pending takes true or false, not yes");
}

TEST(ExtenderFlagsTest, BadValuesAreRefusedNamingFlagAndValue) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {{"--port=70000"}, "--port must be in 0..65535, not 70000"},
           {{"--port", "http"}, "--port must be in 0..65535, not http"},
           {{"--port", "-1"}, "--port must be in 0..65535, not -1"},
           {{"--kube-api-qps", "-1"}, "--kube-api-qps takes requests per second in 0..1e6, not -1"},
           {{"--kube-api-qps", "nan"}, "--kube-api-qps takes requests per second in 0..1e6, not nan"},
           {{"--kube-api-burst", "0"}, "--kube-api-burst takes a count in 1..1000000, not 0"},
           {{"--resync-ms", "50"}, "--resync-ms takes milliseconds in 100..86400000, not 50"},
           {{"--startup-timeout-ms", "-1"}, "--startup-timeout-ms takes milliseconds in 0..86400000, not -1"},
           {{"--ttl-ms", "0"}, "--ttl-ms takes milliseconds in 1..86400000, not 0"},
           {{"--ttl-ms", "1m"}, "--ttl-ms takes milliseconds in 1..86400000, not 1m"},
           {{"--plan-deadline-ms", "600001"}, "--plan-deadline-ms takes milliseconds in 1..600000, not 600001"},
           {{"--leader-elect-retry-period-ms", "x"}, "--leader-elect-retry-period-ms takes milliseconds in 0..86400000, not x"},
           {{"--max-body-bytes=lots"}, "--max-body-bytes takes a byte count like 1048576 or 192Mi, not lots"},
           {{"--max-body-bytes", "-5"}, "--max-body-bytes takes a byte count like 1048576 or 192Mi, not -5"},
           {{"--trim-bytes", "1Ti"}, "--trim-bytes takes a byte count like 1048576 or 192Mi, not 1Ti"},
           {{"--max-header-bytes", "10"}, "--max-header-bytes takes a byte count in 1Ki..1Mi, not 10"},
           {{"--header-timeout-ms", "soon"}, "--header-timeout-ms takes milliseconds in 0..86400000, not soon"},
           {{"--max-connections", "0"}, "--max-connections takes a number in 1..1000000, not 0"},
           {{"--io-threads", "257"}, "--io-threads takes a number in 1..256, not 257"},
           {{"--worker-threads", "0"}, "--worker-threads takes a number in 1..1024, not 0"},
           {{"--plan-threads", "65"}, "--plan-threads takes a number in 1..64, not 65"},
           {{"--max-plans", "0"}, "--max-plans takes a number in 1..1024, not 0"},
           {{"--tls-cert-file="}, "--tls-cert-file takes a file name"},
       }) {
    EXPECT_EQ(Error(c.args), c.message) << *c.args.begin();
  }
}

TEST(ExtenderFlagsTest, AFlagWithoutItsValueIsNamed) {
  EXPECT_EQ(Error({"--io-threads"}), "--io-threads takes a number in 1..256, not nothing");
  EXPECT_EQ(Error({"--port"}), "--port must be in 0..65535, not nothing");
  EXPECT_EQ(Error({"--port", "1", "--nodes"}), "--nodes takes a value");
  EXPECT_EQ(Error({"--leader-elect"}), "--leader-elect takes true or false, not nothing");
}

TEST(ExtenderFlagsTest, UnknownFlagsAndArgumentsAreNamed) {
  EXPECT_EQ(Error({"--bogus=1"}), "unknown or incomplete flag --bogus=1");
  EXPECT_EQ(Error({"--port", "1", "--Port", "2"}), "unknown or incomplete flag --Port");
  EXPECT_EQ(Error({"stray"}), "unknown or incomplete flag stray");
  // No abbreviations, and no single-dash forms of long flags.
  EXPECT_EQ(Error({"--kubecon", "x"}), "unknown or incomplete flag --kubecon");
  EXPECT_EQ(Error({"-port", "1"}), "unknown or incomplete flag -port");
}

TEST(ExtenderFlagsTest, FilesComeInPairsAndExcludeTheApi) {
  EXPECT_EQ(Error({"--nodes", "n.json"}), "--nodes and --pods go together");
  EXPECT_EQ(Error({"--pods=p.json"}), "--nodes and --pods go together");
  EXPECT_EQ(Error({"--nodes", "n", "--pods", "p", "--apiserver", "http://h"}),
            "--nodes/--pods and --apiserver/--kubeconfig exclude each other");
  EXPECT_EQ(Error({"--nodes", "n", "--pods", "p", "--kubeconfig", "k"}),
            "--nodes/--pods and --apiserver/--kubeconfig exclude each other");
  EXPECT_EQ(Error({"--nodes", "n", "--pods", "p", "--leader-elect", "true"}),
            "--leader-elect needs the Kubernetes API, not --nodes/--pods");
  absl::StatusOr<ExtenderConfig> c = Parse({"--nodes", "n", "--pods", "p", "--leader-elect=false"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->files());
  c = Parse({"--apiserver", "http://h", "--kubeconfig", "k", "--context", "ctx"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->files());
  EXPECT_EQ(c->context, "ctx");
}

TEST(ExtenderFlagsTest, HelpIsAskedForWithEitherSpelling) {
  for (const char* flag : {"--help", "-h"}) {
    absl::StatusOr<ExtenderConfig> c = Parse({"--port", "1", flag});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(c->help) << flag;
  }
  // Help wins over a rule that the flags break together.
  absl::StatusOr<ExtenderConfig> c = Parse({"--nodes", "n", "--help"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->help);
}

TEST(ExtenderFlagsTest, HelpListsEveryFlagWithItsDefault) {
  const std::string help = ExtenderHelp();
  EXPECT_THAT(help, StartsWith("usage: gpushare-extender [flags]"));
  for (const char* flag :
       {"--kubeconfig", "--context", "--apiserver", "--kube-api-qps", "--kube-api-burst",
        "--resync-ms", "--startup-timeout-ms", "--requeue-pending", "--leader-elect BOOL",
        "--leader-elect-namespace", "--leader-elect-name", "--leader-elect-identity",
        "--leader-elect-lease-duration-ms", "--leader-elect-renew-deadline-ms",
        "--leader-elect-retry-period-ms", "--leader-elect-url", "--leader-forward-ca",
        "--leader-forward-cert", "--leader-forward-key", "--nodes", "--pods", "--address",
        "--port P", "--port-file", "--policy", "--target-workload", "--ttl-ms",
        "--plan-deadline-ms", "--tls-cert-file", "--tls-private-key-file", "--client-ca-file",
        "--access-log", "--max-body-bytes", "--body-budget-bytes", "--budget-wait-ms",
        "--max-header-bytes", "--header-timeout-ms", "--idle-timeout-ms", "--min-body-rate",
        "--max-connections", "--trim-bytes", "--io-threads", "--worker-threads",
        "--plan-threads", "--max-plans", "--help"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
  // Defaults come from the options' own defaults.
  EXPECT_THAT(help, HasSubstr("(default 32766)"));
  EXPECT_THAT(help, HasSubstr("(default 5000)"));
  EXPECT_THAT(help, HasSubstr("lower CPU priority (nice 10) (" +
                              std::to_string(ServerOptions{}.plan_threads) + ")"));
}

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/namespace_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  void TearDown() override { std::remove(path_.c_str()); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_;
};

TEST_F(LeaderElectionTest, WithoutLeaderElectionNothingIsFilled) {
  absl::StatusOr<ExtenderConfig> c = Parse({"--leader-elect-renew-deadline-ms", "99999"});
  ASSERT_TRUE(c.ok()) << c.status();
  Write("gpu-system\n");
  EXPECT_TRUE(CompleteLeaderElection(&*c, path_).ok());
  EXPECT_EQ(c->lease.namespace_name, "kube-system");
  EXPECT_TRUE(c->lease.identity.empty());
}

TEST_F(LeaderElectionTest, NamespaceFromTheServiceAccountUnlessGiven) {
  Write("gpu-system\n");
  absl::StatusOr<ExtenderConfig> c = Parse({"--leader-elect", "true"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(CompleteLeaderElection(&*c, path_).ok());
  EXPECT_EQ(c->lease.namespace_name, "gpu-system");
  EXPECT_FALSE(c->lease.identity.empty());  // Host name and random bits.

  c = Parse({"--leader-elect", "true", "--leader-elect-namespace", "mine",
             "--leader-elect-identity", "replica-1"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(CompleteLeaderElection(&*c, path_).ok());
  EXPECT_EQ(c->lease.namespace_name, "mine");
  EXPECT_EQ(c->lease.identity, "replica-1");

  // No service account: kube-system.
  c = Parse({"--leader-elect", "true"});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(CompleteLeaderElection(&*c, path_ + ".missing").ok());
  EXPECT_EQ(c->lease.namespace_name, "kube-system");
}

TEST_F(LeaderElectionTest, TheLeaseTimingsAreChecked) {
  absl::StatusOr<ExtenderConfig> c =
      Parse({"--leader-elect", "true", "--leader-elect-renew-deadline-ms", "20000"});
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status s = CompleteLeaderElection(&*c, path_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("renew deadline < lease duration"));

  c = Parse({"--leader-elect", "true", "--leader-elect-lease-duration-ms", "15500"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(std::string(CompleteLeaderElection(&*c, path_).message()),
              HasSubstr("whole seconds"));
  c = Parse({"--leader-elect", "true", "--leader-elect-namespace="});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(std::string(CompleteLeaderElection(&*c, path_).message()),
              HasSubstr("namespace and name must not be empty"));
}

}  // namespace
}  // namespace gpushare::extender
