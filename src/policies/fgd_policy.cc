#include "src/policies/fgd_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "gpushare/fragmentation.h"
#include "src/fgd/kernel.h"

namespace gpushare::policies {
namespace {

// Without a target workload: one whole-GPU task, so that only partly used
// GPUs count as fragment.
TargetWorkload DefaultTarget() {
  TargetWorkload t;
  t.tasks.push_back(TargetTask{0, kGpuCompute, 1, {}, 1.0});
  return t;
}

class FgdPolicy final : public fgd::KernelPolicy {
 public:
  explicit FgdPolicy(const TargetWorkload& target) : target_(fgd::Compile(target)) {}

  std::string Name() const override { return "fgd"; }
  const fgd::CompiledTarget* target() const override { return &target_; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    const int n = node.num_gpus;
    const double f0 = node.frag >= 0 ? node.frag
                                     : fgd::FragAmount(target_, node.frag_left, n,
                                                       node.frag_full, node.cpu_left,
                                                       node.type_allowed);
    std::array<int64_t, kMaxGpusPerNode> left;
    std::copy(node.frag_left, node.frag_left + n, left.begin());
    const int64_t cpu_after = node.cpu_left - task.cpu;
    const double unit = static_cast<double>(node.frag_full);
    auto after = [&]() {
      return fgd::FragAmount(target_, left.data(), n, node.frag_full, cpu_after,
                             node.type_allowed);
    };
    auto score_of = [&](double f) {
      return std::trunc(100.0 / (1.0 + std::exp(-(f0 - f) / unit)));
    };
    if (task.kind == Demand::Kind::kShared && task.gpu_count == 1) {
      // The result depends only on the idle share of the GPU taken, so GPUs
      // with equal shares are scored once.
      std::array<int64_t, kMaxGpusPerNode> seen_left;
      std::array<double, kMaxGpusPerNode> seen_score;
      int num_seen = 0;
      double best = -1;
      for (int j = 0; j < num_fitting; ++j) {
        const int i = fitting[j];
        double s = -1;
        for (int k = 0; k < num_seen; ++k) {
          if (seen_left[k] == node.frag_left[i]) s = seen_score[k];
        }
        if (s < 0) {
          left[i] -= task.frag_share;
          s = score_of(after());
          left[i] = node.frag_left[i];
          seen_left[num_seen] = node.frag_left[i];
          seen_score[num_seen++] = s;
        }
        if (s > best) {
          best = s;
          gpus[0] = i;
        }
      }
      return best;
    }
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    for (int j = 0; j < task.gpu_count; ++j) {
      const int i = gpus[j];
      left[i] = task.kind == Demand::Kind::kExclusive ? 0 : left[i] - task.frag_share;
    }
    return score_of(after());
  }

 private:
  fgd::CompiledTarget target_;
};

}  // namespace

std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options) {
  return std::make_unique<FgdPolicy>(options.fgd_target ? *options.fgd_target
                                                        : DefaultTarget());
}

}  // namespace gpushare::policies
