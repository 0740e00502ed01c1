#include "src/policies/bestfit_policy.h"

#include <cmath>

#include "src/fgd/kernel.h"
#include "src/policies/paper_constants.h"

namespace gpushare::policies {
namespace {

// The paper's simulator then min-max normalises the scores of the feasible
// nodes to 0..100 with integer division. Only the nodes with the highest raw
// score reach 100 after it, so the winner (and the tie-break among equals) is
// the same without it; the raw score is returned.
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
