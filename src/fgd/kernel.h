// Internal: the compact node and task forms that the fragmentation-aware
// policies score, shared by Policy::Evaluate (through a Cluster) and by the
// simulator's own engine, so that both place exactly alike.

#ifndef GPUSHARE_FGD_KERNEL_H_
#define GPUSHARE_FGD_KERNEL_H_

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "gpushare/fragmentation.h"
#include "gpushare/policy.h"
#include "gpushare/types.h"

namespace gpushare::fgd {

// Free CPU of a node that does not track CPU.
inline constexpr int64_t kUnlimitedCpu = std::numeric_limits<int64_t>::max() / 4;

// Tag bits of GpuClustering: bit 0 for shared tasks, bit min(n, 63) for tasks
// holding n whole GPUs. CPU-only tasks have no tag.
inline int TagBit(Demand::Kind kind, int gpu_count) {
  if (kind == Demand::Kind::kShared) return 0;
  if (kind == Demand::Kind::kExclusive) return gpu_count < 63 ? gpu_count : 63;
  return -1;
}

struct TypeCounts;  // Below.

// One node in compact form. Arrays have num_gpus entries.
struct KNode {
  int num_gpus = 0;
  const int64_t* compute_left = nullptr;  // Idle compute per GPU, thousandths.
  const int64_t* frag_left = nullptr;     // Idle share per GPU, FGD resource units.
  int64_t frag_full = kGpuCompute;        // A whole GPU in FGD resource units.
  int64_t cpu_left = kUnlimitedCpu;       // Free CPU, thousandths of a core.
  int64_t cpu_capacity = 0;               // Thousandths of a core; 0 = untracked.
  const uint8_t* type_allowed = nullptr;  // Per target task: GPU model allowed.
  uint64_t gpu_tags = 0;                  // Tag bits of the GPU tasks on the node.
  double frag = -1;                       // F_N(T) now; < 0 = not known.
  double frag_cpu = -1;                   // FragAmountCpuBound() now; < 0 = not known.
  // PrepareCounts() of frag_left, one per target type; nullptr = not known
  // (Score() then derives them).
  const TypeCounts* counts = nullptr;
};

// One task in compact form.
struct KTask {
  Demand::Kind kind = Demand::Kind::kCpuOnly;
  int gpu_count = 0;
  int64_t cpu = 0;         // Thousandths of a core.
  int64_t compute = 0;     // Per GPU, thousandths (kGpuCompute when exclusive).
  int64_t frag_share = 0;  // Per GPU, FGD resource units (frag_full when exclusive).
};

// A target workload prepared for fast evaluation.
struct CompiledTarget {
  struct Type {
    int64_t cpu = 0;
    int64_t share = 0;  // 0 with count > 0: a whole GPU.
    int count = 0;
    double weight = 0;
    // ceil(2^32 / share) when 0 < share < kSmallQuotient, else 0: for a <
    // kSmallQuotient, a / share = (a * share_inverse) >> 32 exactly.
    uint64_t share_inverse = 0;
  };
  static constexpr int64_t kSmallQuotient = int64_t{1} << 16;
  FragResource resource = FragResource::kCompute;
  std::vector<Type> types;
  TargetWorkload source;
};
CompiledTarget Compile(const TargetWorkload& target);
// Whether two targets (or both nullptr) have the same tasks, in order, and
// resource: their fragmentation sums are then the same.
bool SameTarget(const CompiledTarget* a, const CompiledTarget* b);

// F_N(T) for idle shares `left` (n GPUs, whole = full), free CPU `cpu_left`
// and per-type model permission `allowed` (nullptr = every type allowed).
double FragAmount(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                  int64_t cpu_left, const uint8_t* allowed);

// Writes, per type of `target`, whether some healthy GPU of `node` has a
// model the type allows (target.types.size() entries).
void TypesAllowed(const CompiledTarget& target, const NodeStatus& node, uint8_t* allowed);
// F_N(T) as FragAmount(), except that a target type the node can host counts
// only the fitting GPUs its free CPU can serve: with k = cpu_left / (type's
// CPU) copies of the type, the fitting GPUs are taken largest idle share
// first (a whole-GPU type of n GPUs serves n GPUs per copy; a shared type
// serves share-sized copies, as many per GPU as fit) until the k copies are
// used, and the fitting GPUs left over count as fragment too. With CPU for
// every copy the GPUs can take, it equals FragAmount().
double FragAmountCpuBound(const CompiledTarget& target, const int64_t* left, int n,
                          int64_t full, int64_t cpu_left, const uint8_t* allowed);

// Both at once: FragAmount() in *plain, FragAmountCpuBound() in *cpu_bound
// (the same sums in the same order as the single functions).
void FragAmounts(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                 int64_t cpu_left, const uint8_t* allowed, double* plain, double* cpu_bound);

// What the fragmentation sums read of a node's idle shares for one target
// type, with need = the type's share (a whole GPU, `full`, for whole-GPU
// types and shares larger than a GPU): the GPUs whose idle share is at least
// need, the idle share of the others, and the copies of the type the fitting
// GPUs take (floor(idle / need) each; whole-GPU types: one per GPU). A
// function of the idle shares alone (not of CPU or model permissions), so it
// is derived once per change of a node, and FragSumsFrom() evaluates the
// node, or a placement on it, from it in O(types x GPUs changed).
struct TypeCounts {
  int64_t small = 0;
  int64_t copies = 0;
  int32_t fits = 0;
};
// Writes target.types.size() entries to `counts` for idle shares `left`.
void PrepareCounts(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                   TypeCounts* counts);
// One GPU's idle share after a placement.
struct GpuChange {
  int gpu = 0;
  int64_t left = 0;
};
// FragAmount() into *plain and, unless cpu_bound is nullptr,
// FragAmountCpuBound() into *cpu_bound, for the idle shares `left` with the
// `changes` applied (distinct GPUs), from `counts` = PrepareCounts() of
// `left`. Bit-identical to the single functions on the changed shares.
void FragSumsFrom(const CompiledTarget& target, const TypeCounts* counts, const int64_t* left,
                  int n, int64_t full, const GpuChange* changes, int num_changes,
                  int64_t cpu_left, const uint8_t* allowed, double* plain, double* cpu_bound);

// F_N(T) of a node of a cluster (unhealthy GPUs have nothing idle).
double NodeFrag(const NodeStatus& node, const CompiledTarget& target);

// Base of the built-in policies that score the compact form. Evaluate()
// converts the cluster's view and calls Score().
class KernelPolicy : public Policy {
 public:
  // Scores `node` for `task` and writes task.gpu_count chosen GPU indices, in
  // ascending order, to `gpus`. `fitting` lists the usable GPUs ascending.
  virtual double Score(const KTask& task, const KNode& node, const int* fitting, int num_fitting,
                       int* gpus) = 0;
  // Whether the score is a function of (task, node) alone, so that it may be
  // cached until the node changes. False for policies that draw randomness.
  virtual bool Cacheable() const { return true; }
  // Whether Score() reads KNode::gpu_tags.
  virtual bool NeedsTags() const { return false; }
  // Whether Score() reads KNode::frag_cpu for `node` (asked before it is
  // set): callers that keep per-node facts then derive it once per change of
  // the node and pass it in; otherwise Score() derives it itself.
  virtual bool NeedsFragCpu(const KNode& /*node*/) const { return false; }
  // Whether the policy splits Score() in two, so that the simulator's engine
  // chooses GPUs for the winning node only: DrawScore() draws exactly the
  // randomness Score() would and keeps what the GPU choice needs in `draws`
  // (task.gpu_count values); GpusFromDraws() then writes the GPUs Score()
  // would have chosen. For policies whose score needs neither the node's
  // state nor its fitting GPUs (e.g. "random").
  virtual bool SplitsScore() const { return false; }
  virtual double DrawScore(const KTask& /*task*/, uint64_t* /*draws*/) { return 0; }
  virtual void GpusFromDraws(const KTask& /*task*/, const int* /*fitting*/, int /*num_fitting*/,
                             const uint64_t* /*draws*/, int* /*gpus*/) {}
  // The target workload whose fragmentation Score() reads, or nullptr.
  virtual const CompiledTarget* target() const { return nullptr; }

  NodeChoice Evaluate(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster) final;
  // What EvaluateInto() derives from the node alone and the target(), kept
  // by the caller while the node is unchanged, so that scoring one node for
  // several requests derives it once.
  struct NodeFacts {
    double frag = -1;            // F_N(T) now; < 0: not derived yet.
    double frag_cpu = -1;        // FragAmountCpuBound() now, when NeedsFragCpu(); < 0: not yet.
    uint8_t* allowed = nullptr;  // target()->types.size() entries (TypesAllowed()).
    bool allowed_known = false;  // Whether `allowed` is filled.
    // target()->types.size() entries (PrepareCounts() of the idle shares);
    // required when the policy has a target().
    TypeCounts* counts = nullptr;
    bool counts_known = false;  // Whether `counts` is filled.
    uint64_t gpu_tags = 0;       // KNode::gpu_tags, when NeedsTags().
    bool tags_known = false;     // Whether `gpu_tags` is derived.
  };
  // Evaluate() without allocating, for the score memo: writes the
  // demand.gpu_count chosen GPUs to `gpus` and returns the score's primary
  // part (the others are always 0). With `facts`, what is not known in
  // *facts yet is derived and stored there.
  double EvaluateInto(const Demand& demand, const NodeStatus& node,
                      const std::vector<int>& fitting, const Cluster& cluster, int* gpus,
                      NodeFacts* facts = nullptr);

 private:
  std::vector<uint8_t> allowed_;  // Evaluate()'s per-type permissions.
};

// GPU choice of the non-FGD baselines: whole-GPU tasks take the first
// gpu_count fitting (idle) GPUs by index; others take the fitting GPUs with
// the least idle compute (ties: lowest index). Writes ascending indices.
void LeastIdleGpus(const KTask& task, const KNode& node, const int* fitting, int num_fitting,
                   int* gpus);

// Sum of idle compute over the node's GPUs, thousandths.
inline int64_t IdleCompute(const KNode& node) {
  int64_t g = 0;
  for (int i = 0; i < node.num_gpus; ++i) g += node.compute_left[i];
  return g;
}

}  // namespace gpushare::fgd

#endif  // GPUSHARE_FGD_KERNEL_H_
