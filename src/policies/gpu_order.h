// Internal: choosing GPUs on one node, shared by the built-in policies.

#ifndef GPUSHARE_POLICIES_GPU_ORDER_H_
#define GPUSHARE_POLICIES_GPU_ORDER_H_

#include <algorithm>
#include <vector>

#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare::policies {

// Negative when GPU `x` comes before GPU `y` in the order "least free
// memory, then least free compute" (tightest = true) or "most free memory,
// then most free compute" (tightest = false), positive when after, 0 when
// they are level (callers then take the lower position on the node).
inline int CompareGpus(const GpuStatus& x, const GpuStatus& y, bool tightest) {
  const int sign = tightest ? -1 : 1;  // For x below y.
  if (x.memory_free() != y.memory_free()) return x.memory_free() < y.memory_free() ? sign : -sign;
  if (x.compute_free() != y.compute_free()) {
    return x.compute_free() < y.compute_free() ? sign : -sign;
  }
  return 0;
}

// The `count` GPUs of `fitting` that come first in CompareGpus()'s order,
// then by lowest index, returned in ascending index order.
inline std::vector<int> ChooseGpus(const NodeStatus& node,
                                   const std::vector<int>& fitting, int count,
                                   bool tightest) {
  auto before = [&](int a, int b) {
    const int c = CompareGpus(node.gpus[a], node.gpus[b], tightest);
    return c != 0 ? c < 0 : a < b;
  };
  if (count == 1 && !fitting.empty()) {  // The common request: no copy to sort.
    return {*std::min_element(fitting.begin(), fitting.end(), before)};
  }
  std::vector<int> order = fitting;
  std::partial_sort(order.begin(), order.begin() + count, order.end(), before);
  order.resize(count);
  std::sort(order.begin(), order.end());
  return order;
}

// Free memory and compute left on `gpus` after each takes one share.
struct LeftAfter {
  double memory = 0;
  double compute = 0;
};
inline LeftAfter FreeLeftAfter(const NodeStatus& node, const Demand& demand,
                               const std::vector<int>& gpus) {
  LeftAfter left;
  for (int i : gpus) {
    left.memory += static_cast<double>(node.gpus[i].memory_free() - demand.memory_per_gpu);
    left.compute += static_cast<double>(node.gpus[i].compute_free() - demand.compute_per_gpu);
  }
  return left;
}

// binpack's score of a shared placement on `gpus`: the less free memory,
// then compute, it leaves on them, the higher.
inline Score BinpackSharedScore(const NodeStatus& node, const Demand& demand,
                                const std::vector<int>& gpus) {
  const LeftAfter left = FreeLeftAfter(node, demand, gpus);
  return {-left.memory, -left.compute, 0};
}

inline double Ratio(int64_t used, int64_t total) {
  return total > 0 ? static_cast<double>(used) / static_cast<double>(total) : 0.0;
}

inline int IdleHealthyGpus(const NodeStatus& node) {
  int idle = 0;
  for (const GpuStatus& g : node.gpus) idle += (g.idle() && g.healthy) ? 1 : 0;
  return idle;
}

inline int64_t FreeGpuMemory(const NodeStatus& node) {
  return node.gpu_memory() - node.gpu_memory_used();
}

inline int64_t ComputeUsed(const NodeStatus& node) {
  int64_t used = 0;
  for (const GpuStatus& g : node.gpus) used += g.compute_used;
  return used;
}

// spread's score of a shared placement on `gpus`: the less of the node's GPU
// memory, then compute, is in use, the higher; then the more free memory it
// leaves on `gpus`.
inline Score SpreadSharedScore(const NodeStatus& node, const Demand& demand,
                               const std::vector<int>& gpus) {
  const LeftAfter left = FreeLeftAfter(node, demand, gpus);
  const int64_t compute_total = kGpuCompute * static_cast<int64_t>(node.gpus.size());
  return {-Ratio(node.gpu_memory_used(), node.gpu_memory()),
          -Ratio(ComputeUsed(node), compute_total), left.memory};
}

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_GPU_ORDER_H_
