// gpushare-extender's configuration: its flags (tools/flags/flags.h), parsed and
// checked apart from the program so that each rule is tested
// (tests/extender/config_test.cc).

#ifndef GPUSHARE_EXTENDER_CONFIG_H_
#define GPUSHARE_EXTENDER_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubeclient/api_client.h"
#include "kubeclient/leader.h"
#include "extender/server.h"
#include "gpushare/gpushare.h"
#include "tools/flags/flags.h"

namespace gpushare::extender {

// The Kubernetes client (kubeclient/).
using kubeclient::ClientOptions;
using kubeclient::LeaseOptions;
using kubeclient::ValidateLeaseOptions;

struct ExtenderConfig {
  bool help = false;  // --help: print ExtenderHelp() and exit 0.
  bool version = false;  // --version: print the version line and exit 0.
  // Files instead of the API (both or neither).
  std::string nodes, pods;
  // The Kubernetes API.
  std::string apiserver, kubeconfig, context;
  double qps = ClientOptions{}.qps;
  int burst = ClientOptions{}.burst;
  int64_t resync_ms = 300'000;
  int64_t startup_timeout_ms = 120'000;
  bool requeue = true;
  // GET /metrics with a bearer token the API server reviews (extender/token_review.h).
  bool metrics_token_review = true;
  // Leader election.
  bool leader_elect = false;
  bool lease_namespace_given = false;  // --leader-elect-namespace was given.
  LeaseOptions lease;
  std::string forward_ca;    // CA of the leader's serving certificate (forwarded binds).
  std::string forward_cert;  // Client certificate shown to the leader (default: the serving one).
  std::string forward_key;
  // Serving.
  std::string address = "127.0.0.1";
  int port = 32766;
  std::string port_file;
  std::string policy = "binpack";
  std::string target_workload;
  int64_t ttl_ms = 60'000;
  int64_t plan_deadline_ms = k8s::ExtenderOptions{}.plan_deadline_ms;
  ServerOptions serving;  // TLS, access log, limits, threads (AddServingFlags).

  // Whether the state comes from --nodes and --pods rather than the API.
  bool files() const { return !nodes.empty() || !pods.empty(); }
};

// Parses gpushare-extender's command line (argv[0] is the program) and checks
// the flags' rules: each value in its range, --nodes with --pods, files
// exclusive with --apiserver/--kubeconfig and with --leader-elect.
// InvalidArgument naming the flag and the bad value; `help` set for --help.
// Reads no file: see CompleteLeaderElection and ValidateServerOptions.
absl::StatusOr<ExtenderConfig> ParseExtenderFlags(int argc, const char* const* argv);

// The --help text, generated from the same definitions.
std::string ExtenderHelp();

// The serving flags (--tls-cert-file, --max-body-bytes, --io-threads, ...),
// parsed into `options` (whose defaults --help shows). Values are checked
// one by one; ValidateServerOptions checks them together.
void AddServingFlags(flags::FlagSet* flags, ServerOptions* options);

// With --leader-elect true: the Lease's namespace, unless given, from
// `namespace_file` (the service account's) when it can be read; the identity,
// unless given, from the host name and random bits; then checks the Lease
// options (ValidateLeaseOptions). Without --leader-elect: OK, nothing done.
inline constexpr char kServiceAccountNamespaceFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
absl::Status CompleteLeaderElection(ExtenderConfig* config,
                                    const std::string& namespace_file = kServiceAccountNamespaceFile);

}  // namespace gpushare::extender

#endif  // GPUSHARE_EXTENDER_CONFIG_H_
