#include "src/policies/gpupacking_policy.h"

#include <algorithm>

#include "src/fgd/kernel.h"

namespace gpushare::policies {
namespace {

class GpuPackingPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "gpupacking"; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    if (task.kind == Demand::Kind::kCpuOnly) return 0;
    int idle = 0;
    for (int i = 0; i < node.num_gpus; ++i) idle += node.compute_left[i] == kGpuCompute;
    if (idle == node.num_gpus) return std::max(33 - idle, idle);
    int idle_used = 0;
    int64_t used_left = 0;
    for (int j = 0; j < task.gpu_count; ++j) {
      const int64_t left = node.compute_left[gpus[j]];
      idle_used += left == kGpuCompute;
      used_left += left * 100 / kGpuCompute;
    }
    if (idle_used > 0) return std::max(50 - idle_used, 33);
    return static_cast<double>(std::max<int64_t>(100 - used_left / 10, 50));
  }
};

}  // namespace

std::unique_ptr<Policy> NewGpuPackingPolicy() { return std::make_unique<GpuPackingPolicy>(); }

}  // namespace gpushare::policies
