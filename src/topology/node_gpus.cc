#include "src/topology/node_gpus.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "src/topology/topology_impl.h"

namespace gpushare::internal {

std::vector<int> IdleGpus(const NodeStatus& node) {
  std::vector<int> idle;
  for (const GpuStatus& g : node.gpus) {
    if (g.healthy && g.idle()) idle.push_back(g.index);
  }
  return idle;
}

namespace {

double MinWeight(const Topology& t, const Request& request) {
  return request.topology.mode == TopologyNeed::Mode::kRequire
             ? t.weights().Of(request.topology.min_link)
             : 0;
}

}  // namespace

void ApplyTopology(const NodeStatus& node, const Demand& demand, const Request& request,
                   const std::vector<int>& fitting, NodeChoice* choice) {
  choice->score.topology = choice->gpus.empty() ? 0 : TopologyKeyCap(demand, request);
  if (node.topology == nullptr || request.topology.mode == TopologyNeed::Mode::kNone ||
      demand.gpu_count < 1 || choice->gpus.empty()) {
    return;
  }
  const Topology& t = *node.topology;
  if (t.uniform() && demand.gpu_count > 1) return;  // Every set is as good.
  std::vector<int> idle = IdleGpus(node);
  std::vector<int> idle_fitting;  // The candidates for one GPU.
  if (demand.gpu_count == 1) {
    if (!std::binary_search(idle.begin(), idle.end(), choice->gpus[0])) return;
    std::set_intersection(fitting.begin(), fitting.end(), idle.begin(), idle.end(),
                          std::back_inserter(idle_fitting));
  }
  GpuSetChoice best = t.Choose(demand.gpu_count == 1 ? idle_fitting : fitting, idle,
                               demand.gpu_count, request.topology.objective,
                               MinWeight(t, request), choice->gpus);
  if (best.gpus.empty()) return;
  choice->gpus = std::move(best.gpus);
  if (demand.gpu_count < 2) return;
  const double ideal = t.IdealMeasure(demand.gpu_count, request.topology.objective);
  if (ideal > 0) {
    choice->score.topology =
        std::min(1.0, MeasureOf(best, request.topology.objective) / ideal);
  }
}

bool MeetsTopologyNeed(const NodeStatus& node, const Demand& demand, const Request& request,
                       const std::vector<int>& fitting) {
  if (request.topology.mode != TopologyNeed::Mode::kRequire || demand.gpu_count < 2) {
    return true;
  }
  if (node.topology == nullptr) return false;
  const Topology& t = *node.topology;
  return !t.Choose(fitting, IdleGpus(node), demand.gpu_count, request.topology.objective,
                   MinWeight(t, request))
              .gpus.empty();
}

std::optional<std::string> CheckTopologyNeed(const NodeStatus& node, const Demand& demand,
                                             const Request& request,
                                             const std::vector<int>& fitting) {
  if (MeetsTopologyNeed(node, demand, request, fitting)) return std::nullopt;
  const std::string need = LinkName(request.topology.min_link);
  if (node.topology == nullptr) {
    return absl::StrCat("node has no GPU topology; the request requires every pair of its ",
                        demand.gpu_count, " GPUs to be linked by ", need, " or better");
  }
  const Topology& t = *node.topology;
  const std::vector<int> idle = IdleGpus(node);
  GpuSetChoice best =
      t.Choose(fitting, idle, demand.gpu_count, TopologyObjective::kWeakestLink, 0);
  return absl::StrCat("no ", demand.gpu_count, " fitting GPUs are linked by ", need,
                      " or better pairwise: the best set [", absl::StrJoin(best.gpus, ", "),
                      "] has weakest link ", LinkName(best.weakest));
}

std::string WeakestLinkOf(const NodeStatus& node, const std::vector<int>& gpus) {
  if (node.topology == nullptr || gpus.size() < 2) return "";
  for (int g : gpus) {
    if (g < 0 || g >= node.topology->num_gpus()) return "";
  }
  return LinkName(node.topology->Rate(gpus).weakest);
}

}  // namespace gpushare::internal
