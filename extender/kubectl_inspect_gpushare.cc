// kubectl-inspect-gpushare: the kubectl plugin behind `kubectl inspect
// gpushare`, reading a cluster through the Kubernetes API with the client of
// gpushare-extender (kubeclient/kubeconfig.h, kubeclient/api_client.h). The GPU
// sharing it shows is computed by the library from the nodes' capacities and
// the pods' bind annotations (gpushare::k8s::RebuildCluster), and printed in
// the format of the original plugin (gpushare/inspect.h).
//
//   kubectl inspect gpushare               the node table
//   kubectl inspect gpushare -d            per node, every pod's units per GPU
//   kubectl inspect gpushare -d NODE       one node
//   kubectl-inspect-gpushare [--kubeconfig FILE] [--context NAME] [--server URL]
//
// The API server is found as kubectl finds it: --kubeconfig, else
// $KUBECONFIG, else the in-cluster service account; users with exec
// credential plugins (EKS, GKE, AKS, OIDC logins) as kubectl runs them
// (kubeclient/exec_credential.h). Needs get/list of nodes and pods. Exit status: 0, 1 for an API or cluster error, 2 for bad usage.

#include <iostream>
#include <string>

#include "kubeclient/api_client.h"
#include "kubeclient/kubeconfig.h"
#include "gpushare/gpushare.h"
#include "gpushare/inspect.h"
#include "tools/flags/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: kubectl inspect gpushare [-d] [NODE] [--kubeconfig FILE] [--context NAME] "
    "[--server URL]";

int Usage(const std::string& why, const gpushare::flags::FlagSet& flags) {
  std::cerr << "kubectl-inspect-gpushare: " << why << "\n" << flags.Help();
  return 2;
}

// Sets `out` to the flag's value; `missing` is the message without one.
gpushare::flags::FlagSet::Setter Set(std::string missing, std::string* out) {
  return [missing, out](const char* v) -> std::string {
    if (v == nullptr) return missing;
    *out = v;
    return "";
  };
}

}  // namespace

int main(int argc, char** argv) {
  bool details = false;
  std::string node, kubeconfig, context, server;
  gpushare::flags::FlagSet flags("kubectl-inspect-gpushare", kUsage);
  const std::string group = "Flags (--flag value or --flag=value)";
  flags.AddSwitch(group, "-d,--details", "per node, the GPU memory of each pod on each GPU",
                  &details);
  flags.AddPositional("NODE", "only this node (implies -d)", &node);
  flags.Add(group, "--kubeconfig", "FILE",
            "kubeconfig to use (default: $KUBECONFIG, else the\n"
            "in-cluster service account)",
            Set("--kubeconfig needs a file", &kubeconfig));
  flags.Add(group, "--context", "NAME", "kubeconfig context (default: its current-context)",
            Set("--context needs a name", &context));
  flags.Add(group, "-s,--server", "URL", "API server URL; overrides the kubeconfig's server",
            Set("--server needs a URL", &server));
  if (absl::Status s = flags.Parse(argc, argv); !s.ok()) {
    return Usage(std::string(s.message()), flags);
  }
  if (flags.help_requested()) {
    std::cout << flags.Help();
    return 0;
  }
  if (flags.version_requested()) {
    std::cout << gpushare::flags::VersionLine("kubectl-inspect-gpushare");
    return 0;
  }
  absl::StatusOr<gpushare::kubeclient::RestConfig> config =
      gpushare::kubeclient::ResolveRestConfig({server, kubeconfig, context});
  if (!config.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << config.status().message() << "\n";
    return 1;
  }
  gpushare::kubeclient::ClientOptions options;
  options.user_agent = "kubectl-inspect-gpushare";
  auto api = gpushare::kubeclient::ApiClient::Create(*config, options);
  if (!api.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << api.status().message() << "\n";
    return 1;
  }
  absl::StatusOr<std::string> nodes = (*api)->Get("/api/v1/nodes");
  absl::StatusOr<std::string> pods =
      nodes.ok() ? (*api)->Get("/api/v1/pods") : absl::StatusOr<std::string>(nodes.status());
  if (!pods.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << pods.status().message() << "\n";
    return 1;
  }
  gpushare::k8s::RebuildReport report;
  absl::StatusOr<gpushare::Cluster> cluster =
      gpushare::k8s::RebuildCluster(*nodes, *pods, {}, &report);
  if (!cluster.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << cluster.status().message() << "\n";
    return 1;
  }
  for (const std::string& w : report.warnings) std::cerr << "warning: " << w << "\n";
  if (!node.empty()) {
    absl::StatusOr<std::string> one = gpushare::InspectNode(*cluster, node);
    if (!one.ok()) {
      std::cerr << "kubectl-inspect-gpushare: " << one.status().message() << "\n";
      return 1;
    }
    std::cout << *one;
    return 0;
  }
  std::cout << (details ? gpushare::InspectDetails(*cluster) : gpushare::InspectTable(*cluster));
  return 0;
}
