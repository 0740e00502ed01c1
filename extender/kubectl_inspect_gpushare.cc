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
//   kubectl inspect gpushare --plan [NAMESPACE/]POD [--max-moves N]
//                                          the fewest moves after which a
//                                          pending pod fits (read-only)
//   kubectl-inspect-gpushare [--kubeconfig FILE] [--context NAME] [--server URL]
//
// The API server is found as kubectl finds it: --kubeconfig, else
// $KUBECONFIG, else the in-cluster service account. Needs get/list of nodes
// and pods. Exit status: 0, 1 for an API or cluster error, 2 for bad usage.
// --plan prints a plan of Cluster::PlanMigrations() on the state read (every
// bound pod may move, kept to its GPU models and its node's labels); it never
// moves anything.

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>

#include "extender/api_client.h"
#include "extender/kubeconfig.h"
#include "gpushare/gpushare.h"
#include "gpushare/inspect.h"

namespace {

int Usage(const std::string& why) {
  std::cerr << "kubectl-inspect-gpushare: " << why
            << "\nusage: kubectl inspect gpushare [-d] [NODE] [--plan [NAMESPACE/]POD] [--max-moves N] "
               "[--kubeconfig FILE] "
               "[--context NAME] [--server URL]\n";
  return 2;
}

std::string Where(const gpushare::Placement& p) {
  std::ostringstream out;
  out << p.node << " GPU" << (p.gpus.size() == 1 ? " " : "s ");
  for (size_t i = 0; i < p.gpus.size(); ++i) out << (i ? "," : "") << p.gpus[i];
  return out.str();
}

// Reads the pending pod and prints the fewest moves after which it fits.
int PrintPlan(gpushare::extender::ApiClient& api, const gpushare::Cluster& cluster,
              const std::string& which, int max_moves) {
  const size_t slash = which.find('/');
  const std::string ns = slash == std::string::npos ? "default" : which.substr(0, slash);
  const std::string name = slash == std::string::npos ? which : which.substr(slash + 1);
  absl::StatusOr<std::string> json = api.Get("/api/v1/namespaces/" + ns + "/pods/" + name);
  absl::StatusOr<gpushare::k8s::Pod> pod =
      json.ok() ? gpushare::k8s::ParsePod(*json)
                : absl::StatusOr<gpushare::k8s::Pod>(json.status());
  if (pod.ok() && !pod->node_name.empty()) {
    pod = absl::FailedPreconditionError("pod " + ns + "/" + name + " is already bound to " +
                                        pod->node_name);
  }
  absl::StatusOr<gpushare::MigrationPlan> plan =
      pod.ok() ? cluster.PlanMigrations(pod->request, max_moves)
               : absl::StatusOr<gpushare::MigrationPlan>(pod.status());
  if (!plan.ok()) {
    std::cerr << "kubectl-inspect-gpushare: " << plan.status().message() << "\n";
    return 1;
  }
  const std::string id = ns + "/" + name;
  if (!plan->found) {
    std::cout << "no plan for " << id << ": " << plan->reason << "\n";
    return 0;
  }
  std::cout << id << " fits after " << plan->moves.size() << " move"
            << (plan->moves.size() == 1 ? "" : "s")
            << (plan->proven ? " (the fewest)" : " (not proven the fewest)") << ":\n";
  for (const gpushare::Migration& m : plan->moves) {
    std::cout << "  move " << m.pod.id << " from " << Where(m.from) << " to " << Where(m.to)
              << "\n";
  }
  if (plan->then.has_value()) {
    std::cout << "then " << id << " goes to " << Where(*plan->then) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool details = false;
  int max_moves = 1;
  std::string node, kubeconfig, context, server, plan;
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
      std::cout << "usage: kubectl inspect gpushare [-d] [NODE] [--plan [NAMESPACE/]POD] [--max-moves N] "
               "[--kubeconfig FILE] "
                   "[--context NAME] [--server URL]\n"
                   "  -d      per node, the GPU memory of each pod on each GPU\n"
                   "  NODE    only this node (implies -d)\n"
                   "  --plan [NAMESPACE/]POD  the fewest moves of bound pods after which the\n"
                   "          pending POD fits (at most --max-moves, default 1); moves nothing\n";
      return 0;
    } else if (arg.rfind("--kubeconfig=", 0) == 0) {
      kubeconfig = arg.substr(13);
    } else if (arg.rfind("--context=", 0) == 0) {
      context = arg.substr(10);
    } else if (arg.rfind("--server=", 0) == 0) {
      server = arg.substr(9);
    } else if (arg == "--plan") {
      if (!value(&plan)) return Usage("--plan needs a pod: [NAMESPACE/]NAME");
    } else if (arg == "--max-moves") {
      std::string v;
      if (!value(&v)) return Usage("--max-moves needs a number");
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || n > 16) {
        return Usage("--max-moves takes 0..16, not " + v);
      }
      max_moves = static_cast<int>(n);
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
  if (!plan.empty()) return PrintPlan(**api, *cluster, plan, max_moves);
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
