#include "src/policies/gpuclustering_policy.h"

#include "src/fgd/kernel.h"
#include "src/policies/paper_constants.h"

namespace gpushare::policies {
namespace {

class GpuClusteringPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "gpuclustering"; }
  bool NeedsTags() const override { return true; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    const int bit = fgd::TagBit(task.kind, task.gpu_count);
    if (bit < 0) return 0;
    const int64_t u = 25 * (static_cast<int64_t>(kMaxSpecGpu) - fgd::IdleCompute(node)) /
                      static_cast<int64_t>(kMaxSpecGpu);
    const uint64_t mine = uint64_t{1} << bit;
    if (node.gpu_tags == 0) return static_cast<double>(25 + u);
    if (node.gpu_tags == mine) return static_cast<double>(75 + u);
    if ((node.gpu_tags & mine) != 0) return static_cast<double>(50 + u);
    return static_cast<double>(u);
  }
};

}  // namespace

std::unique_ptr<Policy> NewGpuClusteringPolicy() {
  return std::make_unique<GpuClusteringPolicy>();
}

}  // namespace gpushare::policies
