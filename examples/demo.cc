// The gpushare demo: scenario S1 of the GPU-sharing field reports step by step
// as `kubectl inspect gpushare` tables, then binpack and spread side by side on
// the same requests, then the FGD experiment on a generated workload under
// fgdpack, fgd, bestfit and random. Built-in data only.

#include <iostream>
#include <string>
#include <vector>

#include "gpushare/gpushare.h"

namespace {

gpushare::Node T4Node(const std::string& name, const std::string& address) {
  gpushare::Node node;
  node.name = name;
  node.address = address;
  node.labels = {{"gpushare", "true"}};
  node.gpus = {gpushare::Gpu{14, "T4", "", true}};
  return node;
}

gpushare::Request Pod(const std::string& id, int64_t units) {
  gpushare::Request r;
  r.id = id;
  r.gpu_memory = units;
  return r;
}

int Fail(const absl::Status& s) {
  std::cerr << "demo failed: " << s << "\n";
  return 1;
}

}  // namespace

int main() {
  std::cout << "gpushare " << gpushare::Version()
            << " demo\n\n== S1: binpack on two single-GPU nodes (Tesla T4, 14 GiB) ==\n\n";
  gpushare::Cluster cluster;
  for (const auto& [name, ip] : std::vector<std::pair<std::string, std::string>>{
           {"sd-cluster-04", "192.168.1.214"}, {"sd-cluster-05", "192.168.1.215"}}) {
    if (auto s = cluster.AddNode(T4Node(name, ip)); !s.ok()) return Fail(s);
  }
  struct Step {
    std::string id;
    int64_t units;
    int replicas;
  };
  const std::vector<Step> steps = {
      {"binpack-1", 2, 1}, {"binpack-2", 8, 2}, {"binpack-3", 2, 1}, {"binpack-4", 5, 1}};
  int n = 0;
  for (const Step& step : steps) {
    auto placed = step.replicas == 1
                      ? cluster.Place(Pod(step.id, step.units), "binpack").status()
                      : cluster.PlaceReplicas(Pod(step.id, step.units), step.replicas,
                                              "binpack").status();
    if (!placed.ok()) return Fail(placed);
    std::cout << "step " << ++n << ": " << step.id << " asks " << step.units << " GiB x "
              << step.replicas << "\n";
    for (const gpushare::Placement& p : cluster.placements()) {
      if (p.request_id.rfind(step.id, 0) == 0) std::cout << "  " << p << "\n";
    }
    std::cout << "\n" << gpushare::InspectTable(cluster) << "\n";
  }
  // Capacity questions, answered without changing anything.
  int64_t largest = 0;
  for (int64_t units = 1; units <= 14; ++units) {
    auto copies = cluster.Capacity(Pod("probe", units), "binpack");
    if (!copies.ok()) return Fail(copies.status());
    if (*copies > 0) largest = units;
  }
  auto ones = cluster.Capacity(Pod("probe", 1), "binpack");
  if (!ones.ok()) return Fail(ones.status());
  std::cout << "Free: " << 28 - cluster.TotalUsage().gpu_memory_used
            << " GiB; largest pod that fits now: " << largest << " GiB; 1 GiB pods that fit: "
            << *ones << "\n\n";
  std::cout << gpushare::InspectDetails(cluster) << "\n";

  std::cout << "== binpack vs spread: the same requests on two fresh nodes ==\n\n";
  const std::vector<int64_t> sizes = {4, 4, 10, 2};
  for (const char* policy : {"binpack", "spread"}) {
    gpushare::Cluster c;
    for (const auto& [name, ip] : std::vector<std::pair<std::string, std::string>>{
             {"sd-cluster-04", "192.168.1.214"}, {"sd-cluster-05", "192.168.1.215"}}) {
      if (auto s = c.AddNode(T4Node(name, ip)); !s.ok()) return Fail(s);
    }
    std::cout << policy << ":\n";
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto p = c.Place(Pod("req-" + std::to_string(i), sizes[i]), policy);
      std::cout << "  req-" << i << " (" << sizes[i] << " GiB) -> "
                << (p.ok() ? p->node : "pending: " + std::string(p.status().message()))
                << "\n";
    }
    std::cout << "\n" << gpushare::InspectTable(c) << "\n";
  }

  std::cout << "== fragmentation-aware placement: a generated workload, inflated to 130% ==\n\n";
  {
    // 40 nodes with 8 GPUs; requests for 0.3 to 0.7 of a GPU and some whole GPUs.
    std::vector<gpushare::Node> nodes;
    for (int i = 0; i < 40; ++i) {
      gpushare::Node n;
      n.name = "sim-" + std::to_string(i);
      n.cpu = 96000;
      n.gpu_sharing = true;
      n.gpus.assign(8, gpushare::Gpu{16, "T4", "", true});
      nodes.push_back(n);
    }
    std::vector<gpushare::Request> work;
    for (int i = 0; i < 400; ++i) {
      gpushare::Request r;
      r.id = "job-" + std::to_string(i);
      r.cpu = 4000;
      if (i % 5 == 4) {
        r.whole_gpus = 1 + i % 2;
      } else {
        r.compute = 300 + 100 * (i * 7 % 5);
      }
      work.push_back(r);
    }
    for (const char* policy : {"fgdpack", "fgd", "bestfit", "random"}) {
      gpushare::SimulationOptions options;
      options.policy = policy;
      auto run = gpushare::Simulate(nodes, work, options);
      if (!run.ok()) return Fail(run.status());
      std::cout << "  " << policy << ": unallocated GPUs at 100% arrived "
                << static_cast<int>(run->UnallocatedAt(100) * 10 + 0.5) / 10.0 << "%, "
                << run->failed.total() << " of "
                << run->requests << " requests dropped\n";
    }
  }
  return 0;
}
