// Internal: constants and helpers of the FGD paper's baseline policies.

#ifndef GPUSHARE_POLICIES_PAPER_CONSTANTS_H_
#define GPUSHARE_POLICIES_PAPER_CONSTANTS_H_

#include <cstdint>

#include "src/fgd/kernel.h"

namespace gpushare::policies {

inline constexpr double kMaxSpecCpu = 128000;  // Thousandths of a core.
inline constexpr double kMaxSpecGpu = 8000;    // Thousandths of a GPU.

// Free CPU left after the task, thousandths of a core (0 when untracked).
inline double CpuAfter(const fgd::KTask& task, const fgd::KNode& node) {
  if (node.cpu_capacity <= 0) return 0;
  return static_cast<double>(node.cpu_left - task.cpu);
}

// Free CPU now, thousandths of a core (0 when untracked).
inline double CpuLeft(const fgd::KNode& node) {
  return node.cpu_capacity <= 0 ? 0 : static_cast<double>(node.cpu_left);
}

// The task's total GPU request R = m * n, thousandths of a GPU.
inline int64_t GpuRequest(const fgd::KTask& task) {
  return task.compute * static_cast<int64_t>(task.gpu_count);
}

}  // namespace gpushare::policies

#endif  // GPUSHARE_POLICIES_PAPER_CONSTANTS_H_
