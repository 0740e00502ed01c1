#include "src/policies/dotprod_policy.h"

#include <cmath>

#include "src/fgd/kernel.h"
#include "src/policies/paper_constants.h"

namespace gpushare::policies {
namespace {

class DotProdPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "dotprod"; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    const double dot =
        CpuLeft(node) / kMaxSpecCpu * (static_cast<double>(task.cpu) / kMaxSpecCpu) +
        static_cast<double>(fgd::IdleCompute(node)) / kMaxSpecGpu *
            (static_cast<double>(GpuRequest(task)) / kMaxSpecGpu);
    return std::trunc(100.0 * (1.0 - dot / 2.0));
  }
};

}  // namespace

std::unique_ptr<Policy> NewDotProdPolicy() { return std::make_unique<DotProdPolicy>(); }

}  // namespace gpushare::policies
