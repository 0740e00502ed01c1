#include "src/policies/bestfit_policy.h"

#include <cmath>

#include "src/fgd/kernel.h"
#include "src/policies/paper_constants.h"

namespace gpushare::policies {
namespace {

class BestFitPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "bestfit"; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    const double cpu_after = CpuAfter(task, node);
    const double gpu_after = static_cast<double>(fgd::IdleCompute(node) - GpuRequest(task));
    return std::trunc(
        100.0 * (1.0 - (0.5 * cpu_after / kMaxSpecCpu + 0.5 * gpu_after / kMaxSpecGpu)));
  }
};

}  // namespace

std::unique_ptr<Policy> NewBestFitPolicy() { return std::make_unique<BestFitPolicy>(); }

}  // namespace gpushare::policies
