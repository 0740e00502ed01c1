#include "src/sim/breakdown.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace gpushare::sim {

UnallocatedBreakdown ClassifyUnallocated(const Prepared& p, const std::vector<int>& order,
                                         const std::vector<int32_t>& node_of,
                                         const std::vector<uint64_t>& gpus_of) {
  const std::vector<Node>& nodes = *p.nodes;
  std::vector<std::vector<int64_t>> left(nodes.size());
  std::vector<int64_t> cpu_left(nodes.size()), mem_left(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    left[i].assign(nodes[i].gpus.size(), kGpuCompute);
    cpu_left[i] = nodes[i].cpu;
    mem_left[i] = nodes[i].host_memory;
  }
  for (size_t k = 0; k < order.size() && k < node_of.size(); ++k) {
    const int i = node_of[k];
    if (i < 0) continue;
    const Task& t = p.tasks[order[k]];
    cpu_left[i] -= t.k.cpu;
    mem_left[i] -= t.host_memory;
    for (size_t g = 0; g < left[i].size(); ++g) {
      if (gpus_of[k] >> g & 1) left[i][g] -= t.k.compute;
    }
  }
  // The distinct GPU requests of the workload.
  std::set<std::tuple<int, int, int64_t, int64_t, int64_t, int>> seen;
  std::vector<const Task*> wanted;
  for (const Task& t : p.tasks) {
    if (t.k.kind == Demand::Kind::kCpuOnly) continue;
    if (seen.emplace(static_cast<int>(t.k.kind), t.k.gpu_count, t.k.cpu, t.k.compute,
                     t.host_memory, t.spec)
            .second) {
      wanted.push_back(&t);
    }
  }
  UnallocatedBreakdown b;
  std::vector<const Task*> fits_memory;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& node = nodes[i];
    const std::vector<int64_t>& l = left[i];
    int64_t idle_sum = 0;
    for (int64_t x : l) idle_sum += x;
    if (idle_sum == 0) continue;
    // The first cause that rules out every request holds for the whole node
    // (model, CPU, host memory); the GPU shape is judged per GPU.
    bool model = false, cpu = false;
    fits_memory.clear();
    if (node.schedulable) {
      const bool sharing = TakesSharedGpuWork(node);
      for (const Task* t : wanted) {
        if (t->k.kind == Demand::Kind::kShared && !sharing) continue;
        if (t->spec >= 0 && !p.spec_allows[t->spec][p.node_model[i]]) continue;
        model = true;
        if (node.cpu > 0 && t->k.cpu > cpu_left[i]) continue;
        cpu = true;
        if (node.host_memory > 0 && t->host_memory > mem_left[i]) continue;
        fits_memory.push_back(t);
      }
    }
    if (!model) {
      b.gpu_model += idle_sum;
      continue;
    }
    if (!cpu) {
      b.cpu += idle_sum;
      continue;
    }
    if (fits_memory.empty()) {
      b.host_memory += idle_sum;
      continue;
    }
    const int idle = static_cast<int>(std::count(l.begin(), l.end(), kGpuCompute));
    for (int64_t share : l) {
      if (share == 0) continue;
      bool usable = false;
      for (const Task* t : fits_memory) {
        if (t->k.kind == Demand::Kind::kExclusive) {
          usable = share == kGpuCompute && idle >= t->k.gpu_count;
        } else {
          const int fitting = static_cast<int>(std::count_if(
              l.begin(), l.end(), [&](int64_t x) { return x >= t->k.compute; }));
          usable = share >= t->k.compute && fitting >= t->k.gpu_count;
        }
        if (usable) break;
      }
      (usable ? b.placeable : b.gpu_shape) += share;
    }
  }
  return b;
}

}  // namespace gpushare::sim
