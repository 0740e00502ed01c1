// File: kubeclient/kubeconfig.h
// -----------------------------------------------------------------------------
// Where the Kubernetes API is and how to authenticate to it, as client-go
// finds it: a kubeconfig file (--kubeconfig, else the first file of
// $KUBECONFIG), else the in-cluster service account, else nothing.
//
//   ConfigFlags flags;
//   flags.kubeconfig = "/etc/kubernetes/scheduler.conf";
//   absl::StatusOr<RestConfig> config = ResolveRestConfig(flags);
//   // config->server: "https://10.0.0.1:6443"; config->ca_pem: the cluster's CA.
//
// Supported kubeconfig fields (YAML, or the same document written as JSON):
//   current-context; contexts[].context.{cluster,user};
//   clusters[].cluster.{server, certificate-authority, certificate-authority-data,
//                       insecure-skip-tls-verify, tls-server-name};
//   users[].user.{client-certificate[-data], client-key[-data], token, tokenFile,
//                 exec (credential plugins: kubeclient/exec_credential.h)}.
// File paths are resolved against the kubeconfig's folder, as kubectl does.
// Users with auth-provider plugins (removed from kubectl in 1.26), or a
// username and password, are refused with an error naming the user. Nothing
// here throws.

#ifndef GPUSHARE_KUBECLIENT_KUBECONFIG_H_
#define GPUSHARE_KUBECLIENT_KUBECONFIG_H_

#include <chrono>
#include <memory>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kubeclient/exec_credential.h"

namespace gpushare::kubeclient {

// The service account folder of a pod: token, ca.crt, namespace.
inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";

// How to reach one API server.
struct RestConfig {
  // "https://HOST[:PORT][/PREFIX]", or "http://..." (plain HTTP, only when
  // asked for explicitly, e.g. `kubectl proxy`).
  std::string server;
  // PEM certificates trusted for the server; empty = the system's default CAs.
  std::string ca_pem;
  // PEM client certificate (chain) and its private key; both or neither.
  std::string client_cert_pem;
  std::string client_key_pem;
  // A bearer token, and/or a file holding one: the file wins when it can be
  // read, and is re-read when it changes (rotated service-account tokens).
  std::string token;
  std::string token_file;
  // A credential plugin that gives the token (exclusive with the two above).
  ExecConfig exec;
  // Skips verification of the server's certificate (kubeconfig's
  // insecure-skip-tls-verify): honoured, with a warning.
  bool insecure_skip_tls_verify = false;
  // The name checked in the server's certificate and sent as SNI; empty = the
  // host of `server`.
  std::string tls_server_name;
  // Where this came from, for logs: "kubeconfig /path, context ctx".
  std::string source;
  // Things the user should know (e.g. insecure-skip-tls-verify).
  std::vector<std::string> warnings;
};

// Parses kubeconfig text (YAML or JSON). `dir` resolves relative file paths;
// `context` overrides current-context when not empty; `what` names the file
// in errors. Errors: InvalidArgument for malformed YAML, a missing or unknown
// context, cluster or user (each named), a cluster without a server, an
// unsupported user, undecodable base64 data; NotFound for a referenced file
// that cannot be read (named).
absl::StatusOr<RestConfig> ParseKubeconfig(std::string_view text, const std::string& dir,
                                           const std::string& context,
                                           const std::string& what = "kubeconfig");

// Reads and parses the kubeconfig file at `path`. Errors: NotFound if it
// cannot be read; those of ParseKubeconfig().
absl::StatusOr<RestConfig> LoadKubeconfig(const std::string& path, const std::string& context);

// The in-cluster config: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT,
// the CA `dir`/ca.crt and the token file `dir`/token (re-read on rotation).
// Errors: FailedPrecondition when the variables are unset (not in a pod);
// NotFound when the token or CA cannot be read (naming the file).
absl::StatusOr<RestConfig> InClusterConfig(const std::string& dir = kServiceAccountDir);

struct ConfigFlags {
  std::string apiserver;   // --apiserver URL: overrides the server.
  std::string kubeconfig;  // --kubeconfig FILE.
  std::string context;     // --context NAME.
};

// The config the flags and the environment select, in client-go's order:
//  1. --kubeconfig, else (without --apiserver) the first file of $KUBECONFIG
//     (a ':'-separated list; only the first is read, with a warning when
//     there are more);
//  2. else --apiserver alone (no credentials: `kubectl proxy`, or an HTTPS
//     server trusted by the system's CAs), as client-go's
//     BuildConfigFromFlags does: a developer's $KUBECONFIG never sends its
//     credentials to a URL given on the command line;
//  3. else the in-cluster service account.
// --apiserver also overrides the server of 1 (a warning when a token would
// then go over plain http://). Errors: those of
// LoadKubeconfig() and InClusterConfig(); FailedPrecondition when none of the
// three applies.
absl::StatusOr<RestConfig> ResolveRestConfig(const ConfigFlags& flags);

// The bearer token of a RestConfig: the credential plugin's (see
// ExecCredentialSource), else the token file's content (re-read when its
// inode, size or modification time changes, or after Invalidate()), else the
// fixed token. Thread-safe.
class TokenSource {
 public:
  TokenSource(std::string token, std::string token_file, ExecConfig exec = {})
      : token_(std::move(token)), file_(std::move(token_file)) {
    if (!exec.empty()) exec_ = std::make_unique<ExecCredentialSource>(std::move(exec));
  }

  // The current token ("" for none). Errors: NotFound when the token file
  // cannot be read and no earlier read or fixed token exists; those of
  // ExecCredentialSource::Get().
  absl::StatusOr<std::string> Get();

  // The API server refused `refused` (a 401): the file is read again, or the
  // plugin runs again, at the next Get().
  void Invalidate(std::string_view refused = {});

  // Whether Invalidate() can give another token (a file or a plugin).
  bool renewable() const { return exec_ != nullptr || !file_.empty(); }

 private:
  std::unique_ptr<ExecCredentialSource> exec_;
  std::mutex mu_;
  const std::string token_;
  const std::string file_;
  std::string cached_;         // Guarded by mu_.
  std::string stamp_;          // Guarded by mu_: inode/size/mtime of the read.
};

// Reads a whole file. Errors: NotFound naming `path`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace gpushare::kubeclient

#endif  // GPUSHARE_KUBECLIENT_KUBECONFIG_H_
