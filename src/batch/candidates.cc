#include "src/batch/candidates.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "src/internal/cluster_state.h"

namespace gpushare::internal {
namespace {

std::string GpuKey(const GpuStatus& g, bool blocked) {
  return absl::StrCat(g.memory, "/", g.memory_used, "/", g.compute_used, "/",
                      g.idle() ? 1 : 0, "/", g.healthy ? 1 : 0, "/",
                      blocked ? 1 : 0, "/", g.model.size(), ":", g.model);
}

bool IsBlocked(const GpuSet* blocked, const std::string& node, int gpu) {
  return blocked != nullptr && blocked->count({node, gpu}) > 0;
}

std::string NodeKey(const NodeStatus& n, const GpuSet* blocked) {
  std::string key = absl::StrCat(n.schedulable ? 1 : 0, n.gpu_sharing ? 1 : 0, "|",
                                 n.cpu, "/", n.cpu_used, "/", n.host_memory, "/",
                                 n.host_memory_used, "|");
  for (const auto& [k, v] : n.labels) {
    absl::StrAppend(&key, k.size(), ":", k, v.size(), ":", v, ";");
  }
  for (const GpuStatus& g : n.gpus) {
    absl::StrAppend(&key, "|", GpuKey(g, IsBlocked(blocked, n.name, g.index)));
  }
  return key;
}

// Appends every way of taking `left` GPUs from the classes [c, end).
void Choose(const std::vector<std::vector<int>>& classes, size_t c, int left,
            std::vector<int>& chosen, std::vector<std::vector<int>>& out) {
  if (left == 0) {
    out.push_back(chosen);
    return;
  }
  if (c == classes.size()) return;
  const int most = std::min<int>(left, static_cast<int>(classes[c].size()));
  for (int take = most; take >= 0; --take) {
    for (int i = 0; i < take; ++i) chosen.push_back(classes[c][i]);
    Choose(classes, c + 1, left - take, chosen, out);
    chosen.resize(chosen.size() - take);
  }
}

}  // namespace

Placement MakePlacementOn(const Request& request, const Demand& demand,
                          const std::string& node, std::vector<int> gpus) {
  Placement p;
  p.request_id = request.id;
  p.node = node;
  std::sort(gpus.begin(), gpus.end());
  p.gpus = std::move(gpus);
  p.memory_per_gpu = demand.memory_per_gpu;
  p.compute_per_gpu = demand.compute_per_gpu;
  p.exclusive = demand.kind == Demand::Kind::kExclusive;
  p.cpu = demand.cpu;
  p.host_memory = demand.host_memory;
  return p;
}

std::vector<Placement> CandidatePlacements(const Cluster& cluster,
                                           const Request& request,
                                           const Demand& demand,
                                           const GpuSet* blocked,
                                           bool reduce_symmetry) {
  struct Scored {
    int64_t free_left;
    size_t order;
    Placement p;
  };
  std::vector<Scored> scored;
  absl::flat_hash_set<std::string> seen_nodes;
  std::vector<int> fitting;
  size_t order = 0;
  for (const std::string& name : cluster.node_names()) {
    const NodeStatus& node = *cluster.FindNode(name);
    if (CheckNode(node, demand, request, &fitting).has_value()) continue;
    fitting.erase(std::remove_if(fitting.begin(), fitting.end(),
                                 [&](int g) { return IsBlocked(blocked, name, g); }),
                  fitting.end());
    if (static_cast<int>(fitting.size()) < demand.gpu_count) continue;
    if (reduce_symmetry && !seen_nodes.insert(NodeKey(node, blocked)).second) continue;
    // Fitting GPUs grouped by state, classes in order of first index.
    std::map<std::string, size_t> class_of;
    std::vector<std::vector<int>> classes;
    for (int g : fitting) {
      auto [it, added] = class_of.emplace(
          reduce_symmetry ? GpuKey(node.gpus[g], false) : absl::StrCat(g), classes.size());
      if (added) classes.emplace_back();
      classes[it->second].push_back(g);
    }
    std::vector<std::vector<int>> sets;
    std::vector<int> chosen;
    Choose(classes, 0, demand.gpu_count, chosen, sets);
    for (std::vector<int>& gpus : sets) {
      int64_t free_left = 0;
      for (int g : gpus) {
        free_left += node.gpus[g].memory_free() - demand.memory_per_gpu;
      }
      scored.push_back(
          {free_left, order++, MakePlacementOn(request, demand, name, std::move(gpus))});
    }
  }
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) {
    if (a.free_left != b.free_left) return a.free_left < b.free_left;
    return a.order < b.order;
  });
  std::vector<Placement> out;
  out.reserve(scored.size());
  for (Scored& s : scored) out.push_back(std::move(s.p));
  return out;
}

}  // namespace gpushare::internal
