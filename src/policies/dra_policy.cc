#include "src/policies/dra_policy.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "src/fgd/kernel.h"

namespace gpushare::policies {
namespace {

// The first `gpu_count` of `fitting` (ascending), written to `gpus`.
void FirstFit(int gpu_count, const int* fitting, int num_fitting, int* gpus) {
  std::copy(fitting, fitting + std::min(gpu_count, num_fitting), gpus);
}

// "dra": NodeResourcesFit's default strategy, LeastAllocated, on the one
// resource the compact form tracks besides GPUs: (free CPU after the pod) *
// 100 / CPU capacity, in integers as kube-scheduler computes it; 0 where CPU
// is not tracked (kube-scheduler scores a resource of capacity 0 so). Its
// other default scores are the same on every node for such a pod:
// NodeResourcesBalancedAllocation of one resource, TaintToleration and
// NodeAffinity without taints or affinities, DynamicResources for a request
// without alternatives.
class DraDefaultPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "dra"; }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    FirstFit(task.gpu_count, fitting, num_fitting, gpus);
    if (node.cpu_capacity <= 0) return 0;
    return static_cast<double>((node.cpu_left - task.cpu) * 100 / node.cpu_capacity);
  }
};

// "dra+<name>" for a policy of the compact form: its score, DRA's devices.
class DraKernelPolicy final : public fgd::KernelPolicy {
 public:
  explicit DraKernelPolicy(std::unique_ptr<Policy> owned)
      : owned_(std::move(owned)), inner_(static_cast<fgd::KernelPolicy*>(owned_.get())) {}

  std::string Name() const override { return "dra+" + inner_->Name(); }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    // The node is scored on the GPUs the allocator will take: the node
    // policy is offered those alone.
    const int n = std::min(task.gpu_count, num_fitting);
    const double score = inner_->Score(task, node, fitting, n, gpus);
    FirstFit(task.gpu_count, fitting, num_fitting, gpus);
    return score;
  }
  bool Cacheable() const override { return inner_->Cacheable(); }
  bool NeedsTags() const override { return inner_->NeedsTags(); }
  bool NeedsFragCpu(const fgd::KNode& node) const override { return inner_->NeedsFragCpu(node); }
  bool SplitsScore() const override { return inner_->SplitsScore(); }
  double DrawScore(const fgd::KTask& task, uint64_t* draws) override {
    return inner_->DrawScore(task, draws);
  }
  void GpusFromDraws(const fgd::KTask& task, const int* fitting, int num_fitting,
                     const uint64_t* /*draws*/, int* gpus) override {
    FirstFit(task.gpu_count, fitting, num_fitting, gpus);
  }
  const fgd::CompiledTarget* target() const override { return inner_->target(); }
  void OnCommitted(const Placement& placement) override { inner_->OnCommitted(placement); }

 private:
  std::unique_ptr<Policy> owned_;
  fgd::KernelPolicy* inner_;
};

// "dra+<name>" through Evaluate(): any policy.
class DraWrappedPolicy final : public Policy {
 public:
  explicit DraWrappedPolicy(std::unique_ptr<Policy> inner) : inner_(std::move(inner)) {}

  std::string Name() const override { return "dra+" + inner_->Name(); }

  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster) override {
    std::vector<int> devices = DraDevices(demand.gpu_count, fitting);
    NodeChoice choice = inner_->Evaluate(demand, node, devices, cluster);
    choice.gpus = std::move(devices);
    return choice;
  }
  void OnCommitted(const Placement& placement) override { inner_->OnCommitted(placement); }

 private:
  std::unique_ptr<Policy> inner_;
};

}  // namespace

std::vector<int> DraDevices(int gpu_count, const std::vector<int>& fitting) {
  const size_t n = std::min(fitting.size(), static_cast<size_t>(std::max(gpu_count, 0)));
  return std::vector<int>(fitting.begin(), fitting.begin() + static_cast<std::ptrdiff_t>(n));
}

std::unique_ptr<Policy> NewDraPolicy() { return std::make_unique<DraDefaultPolicy>(); }

std::unique_ptr<Policy> NewDraPolicy(std::unique_ptr<Policy> node_policy) {
  if (dynamic_cast<fgd::KernelPolicy*>(node_policy.get()) != nullptr) {
    return std::make_unique<DraKernelPolicy>(std::move(node_policy));
  }
  return std::make_unique<DraWrappedPolicy>(std::move(node_policy));
}

std::unique_ptr<Policy> NewDraReferencePolicy(std::unique_ptr<Policy> node_policy) {
  return std::make_unique<DraWrappedPolicy>(std::move(node_policy));
}

}  // namespace gpushare::policies
