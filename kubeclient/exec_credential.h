// File: kubeclient/exec_credential.h
// -----------------------------------------------------------------------------
// Credential plugins of a kubeconfig (a user's `exec:`), as kubectl runs them:
// the programs that managed clusters and single sign-on hand out tokens
// through (aws eks get-token, gke-gcloud-auth-plugin, kubelogin, ...).
//
//   users:
//   - name: eks
//     user:
//       exec:
//         apiVersion: client.authentication.k8s.io/v1
//         command: aws
//         args: [eks, get-token, --cluster-name, prod]
//         env: [{name: AWS_PROFILE, value: prod}]
//         interactiveMode: Never
//
// The program is started with the environment of this process plus `env`,
// and KUBERNETES_EXEC_INFO holding an ExecCredential request
// ({"apiVersion", "kind": "ExecCredential", "spec": {"interactive", "cluster"
// (with provideClusterInfo)}}); it writes an ExecCredential to its standard
// output, whose status.token is sent as the bearer token until
// status.expirationTimestamp (less ExecCredentialSource::kRefreshMargin), or
// until the API server answers 401 (then the program runs again). Its
// standard error goes to ours (plugins print instructions there).
//
// Supported: apiVersion client.authentication.k8s.io/v1 and v1beta1;
// command (a relative path with a '/' is resolved against the kubeconfig's
// folder, a bare name on $PATH), args, env, installHint (shown when the
// command cannot be started), provideClusterInfo, interactiveMode (Never;
// IfAvailable, the default of v1beta1, and Always use this process's standard
// input when it is a terminal; Always fails without one). A plugin that
// returns a client certificate (clientCertificateData) instead of a token is
// refused with an error saying so: the programs' TLS identity is fixed at
// start.
// Nothing here throws. Thread-safe: the plugin runs once at a time; callers
// during a run wait for its result.

#ifndef GPUSHARE_KUBECLIENT_EXEC_CREDENTIAL_H_
#define GPUSHARE_KUBECLIENT_EXEC_CREDENTIAL_H_

#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpushare::kubeclient {

// A user's exec section, as read from the kubeconfig (kubeconfig.h).
struct ExecConfig {
  std::string api_version;  // client.authentication.k8s.io/v1 or /v1beta1.
  std::string command;      // Resolved as the header says.
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;
  std::string install_hint;
  // "Never", "IfAvailable" or "Always".
  std::string interactive_mode = "IfAvailable";
  // The spec.cluster object of KUBERNETES_EXEC_INFO (JSON) when the user
  // set provideClusterInfo; empty otherwise.
  std::string cluster_json;
  // The plugin must have exited by then (it is killed, and the call fails).
  std::chrono::milliseconds timeout{60'000};
  // Where it came from, for errors: "kubeconfig /path: user 'eks'".
  std::string where;

  bool empty() const { return command.empty(); }
};

// What a plugin answered.
struct ExecCredential {
  std::string token;
  // status.expirationTimestamp; nullopt: valid until the API server refuses it.
  std::optional<std::chrono::system_clock::time_point> expiry;
};

// Parses a plugin's standard output. InvalidArgument, naming `where` and the
// field, for malformed JSON, another kind or apiVersion than `api_version`, a
// status without a token, a client certificate, or an unparsable
// expirationTimestamp (RFC 3339).
absl::StatusOr<ExecCredential> ParseExecCredential(std::string_view json,
                                                   const std::string& api_version,
                                                   const std::string& where);

// Runs the plugin once and parses its answer. `interactive`: its standard
// input is this process's (else /dev/null). Errors: NotFound when the
// command cannot be started (with the install hint), Unavailable when it
// exits with a non-zero status, DeadlineExceeded past config.timeout, those of
// ParseExecCredential; each names the command.
absl::StatusOr<ExecCredential> RunExecPlugin(const ExecConfig& config, bool interactive);

// A token from a plugin, cached until it expires or is invalidated.
class ExecCredentialSource {
 public:
  // A cached token is renewed this long before its expiration.
  static constexpr std::chrono::seconds kRefreshMargin{10};

  explicit ExecCredentialSource(ExecConfig config);

  // The current token, running the plugin when there is none, it has
  // expired, or Invalidate() was called. Errors: those of RunExecPlugin(), and
  // FailedPrecondition for interactiveMode Always without a terminal.
  absl::StatusOr<std::string> Get();

  // The API server refused `refused`: the next Get() runs the plugin, unless
  // the token cached now is another one (another caller renewed it already).
  // Empty: invalidate whatever is cached.
  void Invalidate(std::string_view refused = {});

  // How many times the plugin ran (for tests and logs).
  int runs() const;

 private:
  const ExecConfig config_;
  mutable std::mutex mu_;
  std::optional<ExecCredential> cached_;  // Guarded by mu_.
  int runs_ = 0;                          // Guarded by mu_.
};

}  // namespace gpushare::kubeclient

#endif  // GPUSHARE_KUBECLIENT_EXEC_CREDENTIAL_H_
