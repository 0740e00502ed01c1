#include "src/policies/fgd_policy.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "gpushare/fragmentation.h"
#include "src/fgd/kernel.h"
#include "src/fgd/packing.h"

namespace gpushare::policies {
namespace {

// Without a target workload: one whole-GPU task, so that only partly used
// GPUs count as fragment.
TargetWorkload DefaultTarget() {
  TargetWorkload t;
  t.tasks.push_back(TargetTask{0, kGpuCompute, 1, {}, 1.0});
  return t;
}

// "fgd", and with kCpuBound "fgdcpu" (a type of its own: the cluster's score
// memo tells policies apart by type and target), and with kPack as well
// "fgdpack": fgdcpu's score less kLossScale per millionth of packing value a
// single-GPU shared task loses on the GPU fgdcpu picks (fgd/packing.h), so
// that the loss decides first. fgd and fgdcpu: the same integer score, ties broken
// by int(100 * sigmoid((C0 - C1) / W)) / 101 with C the fragmentation of
// fgd::FragAmountCpuBound() (50 / 101 on nodes whose GPU model a target type
// with a model list may use, and for tasks for one GPU, shared or whole, on
// wholly idle nodes), and a shared task's GPU ties by least idle.
template <bool kCpuBound, bool kPack = false>
class FgdPolicy final : public fgd::KernelPolicy {
 public:
  static_assert(kCpuBound || !kPack, "fgdpack breaks fgdcpu's ties");
  // Above any fgdcpu score (at most 100 + 100 / 101).
  static constexpr double kLossScale = 128;

  explicit FgdPolicy(const TargetWorkload& target) : target_(fgd::Compile(target)) {
    for (size_t k = 0; k < target.tasks.size(); ++k) {
      if (!target.tasks[k].gpu_models.empty()) model_listed_.push_back(k);
    }
  }

  std::string Name() const override { return kPack ? "fgdpack" : kCpuBound ? "fgdcpu" : "fgd"; }
  const fgd::CompiledTarget* target() const override { return &target_; }
  bool NeedsFragCpu(const fgd::KNode& node) const override { return ByCpu(node); }

  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    const int n = node.num_gpus;
    const fgd::TypeCounts* counts = node.counts;
    if (counts == nullptr) {
      counts_.resize(target_.types.size());
      fgd::PrepareCounts(target_, node.frag_left, n, node.frag_full, counts_.data());
      counts = counts_.data();
    }
    // On a wholly idle node, the CPU-bound sums count as stranded the GPUs
    // its CPU could not serve with copies of the (small) target types; a
    // multi-GPU task would use them whole. A task for one GPU (shared or
    // whole; not a CPU-only one) gets the neutral tie there (50 / 101, as
    // where CPU binds nothing), so that the CPU gradient does not draw it
    // onto idle nodes.
    const bool by_cpu =
        ByCpu(node) && !(task.kind != Demand::Kind::kCpuOnly && task.gpu_count <= 1 && Idle(node));
    double f0 = node.frag, c0 = by_cpu ? node.frag_cpu : 0;
    if (f0 < 0 || c0 < 0) {
      double f = 0, c = 0;
      fgd::FragSumsFrom(target_, counts, node.frag_left, n, node.frag_full, nullptr, 0,
                        node.cpu_left, node.type_allowed, &f, c0 < 0 ? &c : nullptr);
      if (f0 < 0) f0 = f;
      if (c0 < 0) c0 = c;
    }
    const int64_t cpu_after = node.cpu_left - task.cpu;
    const double unit = static_cast<double>(node.frag_full);
    std::array<fgd::GpuChange, kMaxGpusPerNode> changes;
    // The score of the placement that leaves the idle shares `changes` and
    // cpu_after.
    auto score_after = [&](int num_changes) {
      double f = 0, c1 = 0;
      fgd::FragSumsFrom(target_, counts, node.frag_left, n, node.frag_full, changes.data(),
                        num_changes, cpu_after, node.type_allowed, &f, by_cpu ? &c1 : nullptr);
      const double score = std::trunc(100.0 / (1.0 + std::exp(-(f0 - f) / unit)));
      if (!kCpuBound) return score;
      if (!by_cpu) return score + 50.0 / 101.0;
      return score + std::trunc(100.0 / (1.0 + std::exp(-(c0 - c1) / unit))) / 101.0;
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
          changes[0] = fgd::GpuChange{i, node.frag_left[i] - task.frag_share};
          s = score_after(1);
          seen_left[num_seen] = node.frag_left[i];
          seen_score[num_seen++] = s;
        }
        if (s > best ||
            (kCpuBound && s == best && node.frag_left[i] < node.frag_left[gpus[0]])) {
          best = s;
          gpus[0] = i;
        }
      }
      if (kPack) best -= kLossScale * LossMillionths(node, gpus[0], task.frag_share);
      return best;
    }
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    for (int j = 0; j < task.gpu_count; ++j) {
      const int i = gpus[j];
      changes[j] = fgd::GpuChange{
          i, task.kind == Demand::Kind::kExclusive ? 0 : node.frag_left[i] - task.frag_share};
    }
    return score_after(task.gpu_count);
  }

 private:
  // Whether the node's ties go by the CPU-bound gradient. Where a
  // model-listed target type may run, the tie order also decides which
  // models stay free for such tasks: it is left to the seeded order.
  bool ByCpu(const fgd::KNode& node) const {
    if (!kCpuBound) return false;
    for (const size_t k : model_listed_) {
      if (node.type_allowed == nullptr || node.type_allowed[k]) return false;
    }
    return true;
  }

  // The packing value (fgd/packing.h) that taking `share` from GPU `gpu`
  // loses, in millionths of a GPU (rounded, so that float noise does not
  // decide). Values are solved once per GPU size.
  double LossMillionths(const fgd::KNode& node, int gpu, int64_t share) {
    const int64_t full = node.frag_full, idle = node.frag_left[gpu];
    if (share < 1 || share > idle || idle > full) return 0;
    auto it = packing_.find(full);
    if (it == packing_.end()) {
      std::vector<fgd::PackingItem> items;
      for (const fgd::CompiledTarget::Type& type : target_.types) {
        if (type.count == 1 && type.share > 0) items.push_back({type.share, type.weight});
      }
      it = packing_.emplace(full, fgd::SharedPacking(items, full)).first;
    }
    return std::round(1e6 * it->second->Loss(idle, share));
  }

  // Whether every GPU of the node is wholly idle: all of its compute and of
  // its FGD resource share free.
  static bool Idle(const fgd::KNode& node) {
    for (int i = 0; i < node.num_gpus; ++i) {
      if (node.compute_left[i] != kGpuCompute || node.frag_left[i] < node.frag_full) return false;
    }
    return node.num_gpus > 0;
  }

  fgd::CompiledTarget target_;
  std::vector<fgd::TypeCounts> counts_;  // Score()'s, when the node's are not known.
  std::vector<size_t> model_listed_;  // The target types with a GPU model list.
  // fgdpack's, by GPU size.
  std::map<int64_t, std::shared_ptr<const fgd::PackingValues>> packing_;
};

}  // namespace

std::unique_ptr<Policy> NewFgdPolicy(const PolicyOptions& options, FgdVariant variant) {
  const TargetWorkload& target = options.fgd_target ? *options.fgd_target : DefaultTarget();
  switch (variant) {
    case FgdVariant::kCpuTies:
      return std::make_unique<FgdPolicy<true>>(target);
    case FgdVariant::kPacking:
      return std::make_unique<FgdPolicy<true, true>>(target);
    case FgdVariant::kPaper:
      break;
  }
  return std::make_unique<FgdPolicy<false>>(target);
}

}  // namespace gpushare::policies
