// kubectl-inspect-gpushare: the kubectl plugin behind `kubectl inspect
// gpushare`, reading a cluster through the Kubernetes API with the client of
// gpushare-extender (extender/kubeconfig.h, extender/api_client.h). The GPU
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
// $KUBECONFIG, else the in-cluster service account. Needs get/list of nodes
// and pods. Exit status: 0, 1 for an API or cluster error, 2 for bad usage.

#include <iostream>
#include <string>

#include "extender/api_client.h"
#include "extender/kubeconfig.h"
#include "gpushare/gpushare.h"
#include "gpushare/inspect.h"

namespace {

int Usage(const std::string& why) {
  std::cerr << "kubectl-inspect-gpushare: " << why
            << "\nusage: kubectl inspect gpushare [-d] [NODE] [--kubeconfig FILE] "
               "[--context NAME] [--server URL]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  bool details = false;
  std::string node, kubeconfig, context, server;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    if (arg == "-d" || arg == "--details") {
      details = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << "usage: kubectl inspect gpushare [-d] [NODE] [--kubeconfig FILE] "
                   "[--context NAME] [--server URL]\n"
                   "  -d      per node, the GPU memory of each pod on each GPU\n"
                   "  NODE    only this node (implies -d)\n";
      return 0;
    } else if (arg.rfind("--kubeconfig=", 0) == 0) {
      kubeconfig = arg.substr(13);
    } else if (arg.rfind("--context=", 0) == 0) {
      context = arg.substr(10);
    } else if (arg.rfind("--server=", 0) == 0) {
      server = arg.substr(9);
    } else if (arg == "--kubeconfig") {
      if (!value(&kubeconfig)) return Usage("--kubeconfig needs a file");
    } else if (arg == "--context") {
      if (!value(&context)) return Usage("--context needs a name");
    } else if (arg == "--server" || arg == "-s") {
      if (!value(&server)) return Usage("--server needs a URL");
    } else if (!arg.empty() && arg[0] != '-' && node.empty()) {
      node = arg;
    } else {
      return Usage("unknown argument " + arg);
    }
  }
  absl::StatusOr<gpushare::extender::RestConfig> config =
      gpushare::extender::ResolveRestConfig({server, kubeconfig, context});
  if (!config.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << config.status().message() << "\n";
    return 1;
  }
  gpushare::extender::ClientOptions options;
  options.user_agent = "kubectl-inspect-gpushare";
  auto api = gpushare::extender::ApiClient::Create(*config, options);
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
