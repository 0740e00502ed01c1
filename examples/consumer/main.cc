// Uses the installed gpushare package: one node, one placement, checked.
#include <iostream>

#include "gpushare/gpushare.h"

int main() {
  gpushare::Cluster cluster;
  gpushare::Node node;
  node.name = "node-a";
  node.gpu_sharing = true;
  node.gpus = {gpushare::Gpu{16, "V100M16", "", true}};
  if (!cluster.AddNode(node).ok()) return 1;
  gpushare::Request pod;
  pod.id = "notebook";
  pod.gpu_memory = 4;
  absl::StatusOr<gpushare::Placement> p = cluster.Place(pod, "spread");
  if (!p.ok() || p->node != "node-a" || p->gpus != std::vector<int>{0}) {
    std::cerr << "consumer: unexpected result\n";
    return 1;
  }
  std::cout << "consumer: " << *p << "\n";
  return 0;
}
