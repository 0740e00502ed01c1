// Internal: what NodeFits() reads of a node, in one cache line, so that a
// caller that asks about many (node, request) pairs can refuse most
// infeasible ones without reading the node's status (hundreds of bytes over
// many cache lines, its GPUs' among them). Not part of the public API.
//
// The score memo keeps one per node while it has shapes to re-score: at the
// openb workload's 9,704 nodes over nine in ten of its re-scores are
// refusals for CPU, host memory or GPU count, and the nodes' status no
// longer fits in cache.
//
// A summary only ever refuses what NodeFits() refuses. It leaves node
// selectors, GPU models and topology to NodeFits(); it judges the GPUs only
// when a node has at most kGpus healthy ones; and an amount clamped to its
// 32 (or 16) bits refuses nothing. Within those bounds it refuses exactly
// what NodeFits() refuses (tests/fit_summary_test.cc checks both).
//
//   const FitSummary summary(node);
//   if (summary.Refuses(demand) || !NodeFits(node, demand, request, &fitting)) ...

#ifndef GPUSHARE_INTERNAL_FIT_SUMMARY_H_
#define GPUSHARE_INTERNAL_FIT_SUMMARY_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "gpushare/types.h"

namespace gpushare::internal {

struct alignas(64) FitSummary {
  // The healthy GPUs a summary judges, at most.
  static constexpr int kGpus = 8;

  // A default summary refuses nothing.
  FitSummary() = default;
  explicit FitSummary(const NodeStatus& node)
      : cpu_free(node.cpu > 0 ? Clamp<int32_t>(node.cpu - node.cpu_used) : kMost<int32_t>),
        memory_free(node.host_memory > 0
                        ? Clamp<int32_t>(node.host_memory - node.host_memory_used)
                        : kMost<int32_t>),
        schedulable(node.schedulable),
        gpu_sharing(node.gpu_sharing),
        has_gpus(!node.gpus.empty()) {
    int healthy_gpus = 0, idle_gpus = 0;
    for (const GpuStatus& g : node.gpus) {
      if (!g.healthy) continue;
      if (healthy_gpus < kGpus) {
        gpu_memory_free[healthy_gpus] = Clamp<int32_t>(g.memory_free());
        gpu_compute_free[healthy_gpus] = Clamp<int16_t>(g.compute_free());
      }
      ++healthy_gpus;
      idle_gpus += g.idle();
    }
    healthy = static_cast<uint8_t>(std::min(healthy_gpus, kSaturated));
    idle = static_cast<uint8_t>(std::min(idle_gpus, kSaturated));
  }

  // True only when NodeFits(node, demand, request, ...) is false for every
  // request, whatever its node selector, GPU models and topology need.
  bool Refuses(const Demand& demand) const {
    // Cordoned, or short of CPU or host memory: most of the refusals of a
    // walk over many nodes, tested together without branches (the score
    // memo's walk mispredicted the early returns often).
    if (!schedulable | Short(cpu_free, demand.cpu) | Short(memory_free, demand.host_memory)) {
      return true;
    }
    if (demand.kind == Demand::Kind::kShared && !gpu_sharing) return true;
    if (demand.kind == Demand::Kind::kCpuOnly) return false;
    if (!has_gpus) return true;
    const int count = demand.gpu_count;
    if (count <= 0) return false;
    if (healthy < kSaturated && count > healthy) return true;
    if (demand.kind == Demand::Kind::kExclusive) return idle < kSaturated && count > idle;
    if (healthy > kGpus) return false;  // Not all of them are here.
    int fitting = 0;
    for (int i = 0; i < healthy; ++i) {
      fitting += !Short(gpu_memory_free[i], demand.memory_per_gpu) &&
                 !Short(gpu_compute_free[i], demand.compute_per_gpu);
    }
    return fitting < count;
  }

  bool operator==(const FitSummary& o) const {
    return cpu_free == o.cpu_free && memory_free == o.memory_free &&
           schedulable == o.schedulable && gpu_sharing == o.gpu_sharing &&
           has_gpus == o.has_gpus && healthy == o.healthy && idle == o.idle &&
           std::equal(gpu_memory_free, gpu_memory_free + std::min<int>(healthy, kGpus),
                      o.gpu_memory_free) &&
           std::equal(gpu_compute_free, gpu_compute_free + std::min<int>(healthy, kGpus),
                      o.gpu_compute_free);
  }
  bool operator!=(const FitSummary& o) const { return !(*this == o); }

 private:
  static constexpr int kSaturated = 255;  // Counts stop here: "255 or more".
  template <typename T>
  static constexpr T kMost = std::numeric_limits<T>::max();
  template <typename T>
  static T Clamp(int64_t v) {
    return static_cast<T>(std::clamp<int64_t>(v, std::numeric_limits<T>::min(), kMost<T>));
  }
  // Whether a clamped amount `have` shows that less than `need` is there: a
  // clamped minimum is at least the true amount, a clamped maximum may be
  // less than it.
  template <typename T>
  static bool Short(T have, int64_t need) {
    return (have < need) & (have != kMost<T>);
  }

  int32_t cpu_free = kMost<int32_t>;  // Untracked CPU: the most.
  int32_t memory_free = kMost<int32_t>;
  bool schedulable = true;
  bool gpu_sharing = true;
  bool has_gpus = true;
  uint8_t healthy = kSaturated;  // Healthy GPUs.
  uint8_t idle = kSaturated;     // Healthy GPUs that hold nothing.
  // The first kGpus healthy GPUs' free compute and memory.
  int16_t gpu_compute_free[kGpus] = {};
  int32_t gpu_memory_free[kGpus] = {};
};

static_assert(sizeof(FitSummary) == 64, "one cache line");

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_FIT_SUMMARY_H_
