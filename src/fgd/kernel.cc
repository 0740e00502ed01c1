#include "src/fgd/kernel.h"

#include <algorithm>
#include <array>
#include <functional>

#include "gpushare/cluster.h"

namespace gpushare::fgd {

CompiledTarget Compile(const TargetWorkload& target) {
  CompiledTarget c;
  c.resource = target.resource;
  c.source = target;
  c.types.reserve(target.tasks.size());
  for (const TargetTask& t : target.tasks) {
    CompiledTarget::Type type{t.cpu, t.gpu_share, t.gpu_count, t.weight};
    // With m = ceil(2^32 / b) = (2^32 + e) / b, 0 <= e < b: a * m / 2^32 =
    // a / b + a * e / (b * 2^32), and the excess stays below the 1 / b that
    // would carry the floor over while a * e < 2^32 (a, b < 2^16).
    if (t.gpu_share > 0 && t.gpu_share < CompiledTarget::kSmallQuotient) {
      const uint64_t b = static_cast<uint64_t>(t.gpu_share);
      type.share_inverse = ((uint64_t{1} << 32) + b - 1) / b;
    }
    c.types.push_back(type);
  }
  return c;
}

namespace {

// a / b for 0 <= a and 0 < b; in 32 bits when both fit, where division is
// several times faster.
inline int64_t Quotient(int64_t a, int64_t b) {
  if (((a | b) >> 32) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

// The need of type t on GPUs of `full`: its share, or a whole GPU.
inline int64_t Need(const CompiledTarget::Type& t, int64_t full) {
  return (t.share <= 0 || t.share > full) ? full : t.share;
}

// Copies of shared type t an idle share a >= need takes: a / need, by the
// type's reciprocal where it is exact.
inline int64_t ShareCopies(const CompiledTarget::Type& t, int64_t need, int64_t a) {
  if (t.share_inverse != 0 && a < CompiledTarget::kSmallQuotient) {
    return static_cast<int64_t>((static_cast<uint64_t>(a) * t.share_inverse) >> 32);
  }
  return Quotient(a, need);
}

// What one GPU of idle share `a` adds to a type's counts.
inline void AddGpu(const CompiledTarget::Type& t, int64_t need, bool whole, int64_t a,
                   int64_t sign, TypeCounts* c) {
  if (a >= need) {
    c->fits += static_cast<int32_t>(sign);
    c->copies += sign * (whole ? 1 : ShareCopies(t, need, a));
  } else {
    c->small += sign * a;
  }
}

// The sums of FragSumsFrom(); kCpuBound adds the CPU-bound one. Both add the
// types in target order, so every entry point gives exactly what the others
// do on the same shares.
template <bool kCpuBound>
void SumsFrom(const CompiledTarget& target, const TypeCounts* counts, const int64_t* left,
              int n, int64_t full, const GpuChange* changes, int num_changes, int64_t cpu_left,
              const uint8_t* allowed, double* plain, double* cpu_bound) {
  *plain = 0;
  if (kCpuBound) *cpu_bound = 0;
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += left[i];
  for (int j = 0; j < num_changes; ++j) total += changes[j].left - left[changes[j].gpu];
  if (total == 0) return;
  std::array<int64_t, kMaxGpusPerNode> sorted;  // The changed shares, largest first.
  bool is_sorted = false;
  double unbound = 0;  // Plain.
  double amount = 0;   // CPU-bound.
  for (size_t k = 0; k < target.types.size(); ++k) {
    const CompiledTarget::Type& t = target.types[k];
    if (t.count == 0 || cpu_left < t.cpu || (allowed != nullptr && !allowed[k])) {
      unbound += t.weight * static_cast<double>(total);
      if (kCpuBound) amount += t.weight * static_cast<double>(total);
      continue;
    }
    const int64_t need = Need(t, full);
    const bool whole = need == full;
    TypeCounts c = counts[k];
    for (int j = 0; j < num_changes; ++j) {
      AddGpu(t, need, whole, left[changes[j].gpu], -1, &c);
      AddGpu(t, need, whole, changes[j].left, +1, &c);
    }
    if (c.fits < t.count) {
      unbound += t.weight * static_cast<double>(total);
      if (kCpuBound) amount += t.weight * static_cast<double>(total);
      continue;
    }
    unbound += t.weight * static_cast<double>(c.small);
    if (!kCpuBound) continue;
    // Enough CPU for every copy the fitting GPUs take? A shortcut only: the
    // walk below gives the same amount when there is (nothing unserved).
    bool enough = t.cpu <= 0;
    if (!enough && whole) {
      const int copies = t.count == 1 ? c.fits : (c.fits + t.count - 1) / t.count;
      enough = t.cpu * copies <= cpu_left;
    } else if (!enough) {
      enough = ((c.copies | t.cpu) >> 31) == 0 ? c.copies * t.cpu <= cpu_left
                                                 : c.copies <= Quotient(cpu_left, t.cpu);
    }
    if (enough) {
      amount += t.weight * static_cast<double>(c.small);
      continue;
    }
    const int64_t cpu_copies = Quotient(cpu_left, t.cpu);
    if (!is_sorted) {
      std::copy(left, left + n, sorted.begin());
      for (int j = 0; j < num_changes; ++j) sorted[changes[j].gpu] = changes[j].left;
      std::sort(sorted.begin(), sorted.begin() + n, std::greater<int64_t>());
      is_sorted = true;
    }
    // The fitting GPUs are the `fits` largest; serve them largest first.
    int64_t unserved = 0;
    int64_t copies = cpu_copies;
    for (int i = 0; i < c.fits; ++i) {
      if (whole) {
        if (i >= cpu_copies * t.count) unserved += sorted[i];
      } else if (copies <= 0) {
        unserved += sorted[i];
      } else {
        copies -= ShareCopies(t, need, sorted[i]);
      }
    }
    amount += t.weight * static_cast<double>(c.small + unserved);
  }
  *plain = unbound;
  if (kCpuBound) *cpu_bound = amount;
}

// The sums of a node without changes, its counts derived here.
template <bool kCpuBound>
void FragSums(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
              int64_t cpu_left, const uint8_t* allowed, double* plain, double* cpu_bound) {
  int64_t total = 0;
  for (int i = 0; i < n; ++i) total += left[i];
  if (total == 0) {
    *plain = 0;
    if (kCpuBound) *cpu_bound = 0;
    return;
  }
  std::array<TypeCounts, 64> local;
  std::vector<TypeCounts> heap;
  TypeCounts* counts = local.data();
  if (target.types.size() > local.size()) {
    heap.resize(target.types.size());
    counts = heap.data();
  }
  PrepareCounts(target, left, n, full, counts);
  SumsFrom<kCpuBound>(target, counts, left, n, full, nullptr, 0, cpu_left, allowed, plain,
                      cpu_bound);
}

}  // namespace

void PrepareCounts(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                   TypeCounts* counts) {
  for (size_t k = 0; k < target.types.size(); ++k) {
    const CompiledTarget::Type& t = target.types[k];
    const int64_t need = Need(t, full);
    const bool whole = need == full;
    TypeCounts c;
    for (int i = 0; i < n; ++i) AddGpu(t, need, whole, left[i], +1, &c);
    counts[k] = c;
  }
}

void FragSumsFrom(const CompiledTarget& target, const TypeCounts* counts, const int64_t* left,
                  int n, int64_t full, const GpuChange* changes, int num_changes,
                  int64_t cpu_left, const uint8_t* allowed, double* plain, double* cpu_bound) {
  if (cpu_bound == nullptr) {
    SumsFrom<false>(target, counts, left, n, full, changes, num_changes, cpu_left, allowed,
                    plain, nullptr);
  } else {
    SumsFrom<true>(target, counts, left, n, full, changes, num_changes, cpu_left, allowed,
                   plain, cpu_bound);
  }
}

double FragAmount(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                  int64_t cpu_left, const uint8_t* allowed) {
  double plain = 0;
  FragSums<false>(target, left, n, full, cpu_left, allowed, &plain, nullptr);
  return plain;
}

double FragAmountCpuBound(const CompiledTarget& target, const int64_t* left, int n,
                          int64_t full, int64_t cpu_left, const uint8_t* allowed) {
  double plain = 0, cpu_bound = 0;
  FragSums<true>(target, left, n, full, cpu_left, allowed, &plain, &cpu_bound);
  return cpu_bound;
}

void FragAmounts(const CompiledTarget& target, const int64_t* left, int n, int64_t full,
                 int64_t cpu_left, const uint8_t* allowed, double* plain, double* cpu_bound) {
  FragSums<true>(target, left, n, full, cpu_left, allowed, plain, cpu_bound);
}

bool SameTarget(const CompiledTarget* a, const CompiledTarget* b) {
  if (a == nullptr || b == nullptr) return a == b;
  if (a->resource != b->resource || a->source.tasks.size() != b->source.tasks.size()) {
    return false;
  }
  for (size_t i = 0; i < a->source.tasks.size(); ++i) {
    const TargetTask& x = a->source.tasks[i];
    const TargetTask& y = b->source.tasks[i];
    if (x.cpu != y.cpu || x.gpu_share != y.gpu_share || x.gpu_count != y.gpu_count ||
        x.gpu_models != y.gpu_models || x.weight != y.weight) {
      return false;
    }
  }
  return true;
}

void LeastIdleGpus(const KTask& task, const KNode& node, const int* fitting, int num_fitting,
                   int* gpus) {
  const int count = task.gpu_count;
  if (count <= 0) return;
  if (task.kind == Demand::Kind::kExclusive) {
    std::copy(fitting, fitting + count, gpus);
    return;
  }
  std::array<int, kMaxGpusPerNode> order;
  std::copy(fitting, fitting + num_fitting, order.begin());
  std::partial_sort(order.begin(), order.begin() + count, order.begin() + num_fitting,
                    [&](int a, int b) {
                      if (node.compute_left[a] != node.compute_left[b]) {
                        return node.compute_left[a] < node.compute_left[b];
                      }
                      return a < b;
                    });
  std::sort(order.begin(), order.begin() + count);
  std::copy(order.begin(), order.begin() + count, gpus);
}

void TypesAllowed(const CompiledTarget& target, const NodeStatus& node, uint8_t* allowed) {
  // The healthy GPUs' models, each once (a node usually has one).
  std::array<const std::string*, kMaxGpusPerNode> distinct;
  int num_distinct = 0;
  for (const GpuStatus& g : node.gpus) {
    if (!g.healthy) continue;
    bool seen = false;
    for (int i = 0; i < num_distinct && !seen; ++i) seen = *distinct[i] == g.model;
    if (!seen && num_distinct < kMaxGpusPerNode) distinct[num_distinct++] = &g.model;
  }
  for (size_t j = 0; j < target.types.size(); ++j) {
    const std::vector<std::string>& models = target.source.tasks[j].gpu_models;
    bool ok = models.empty();
    for (int i = 0; i < num_distinct && !ok; ++i) {
      ok = std::find(models.begin(), models.end(), *distinct[i]) != models.end();
    }
    allowed[j] = ok ? 1 : 0;
  }
}

NodeChoice KernelPolicy::Evaluate(const Demand& demand, const NodeStatus& node,
                                  const std::vector<int>& fitting, const Cluster& cluster) {
  NodeChoice choice;
  choice.gpus.resize(demand.gpu_count);
  choice.score.primary = EvaluateInto(demand, node, fitting, cluster, choice.gpus.data());
  return choice;
}

double KernelPolicy::EvaluateInto(const Demand& demand, const NodeStatus& node,
                                  const std::vector<int>& fitting, const Cluster& cluster,
                                  int* gpus, NodeFacts* facts) {
  const int n = static_cast<int>(node.gpus.size());
  // Only the first n entries are written and read: zeroing both (1 KiB) on
  // every evaluation cost more than filling them.
  std::array<int64_t, kMaxGpusPerNode> compute_left;
  std::array<int64_t, kMaxGpusPerNode> frag_left;
  const CompiledTarget* t = target();
  const bool memory = t != nullptr && t->resource == FragResource::kMemory;
  for (int i = 0; i < n; ++i) {
    const GpuStatus& g = node.gpus[i];
    compute_left[i] = g.healthy ? g.compute_free() : 0;
    frag_left[i] = !g.healthy ? 0 : memory ? g.memory_free() : compute_left[i];
  }
  KNode k;
  k.num_gpus = n;
  k.compute_left = compute_left.data();
  k.frag_left = memory ? frag_left.data() : compute_left.data();
  k.frag_full = memory && n > 0 ? node.gpus[0].memory : kGpuCompute;
  k.cpu_left = node.cpu > 0 ? node.cpu - node.cpu_used : kUnlimitedCpu;
  k.cpu_capacity = node.cpu;
  std::vector<uint8_t>& allowed = allowed_;  // Kept between calls: no allocation.
  if (t != nullptr && facts != nullptr) {
    if (!facts->allowed_known) {
      TypesAllowed(*t, node, facts->allowed);
      facts->allowed_known = true;
    }
    k.type_allowed = facts->allowed;
    if (!facts->counts_known) {
      PrepareCounts(*t, k.frag_left, n, k.frag_full, facts->counts);
      facts->counts_known = true;
    }
    k.counts = facts->counts;
    const bool cpu_bound = facts->frag_cpu < 0 && NeedsFragCpu(k);
    if (cpu_bound || facts->frag < 0) {
      double plain = 0, bound = 0;
      FragSumsFrom(*t, k.counts, k.frag_left, n, k.frag_full, nullptr, 0, k.cpu_left,
                   k.type_allowed, &plain, cpu_bound ? &bound : nullptr);
      if (facts->frag < 0) facts->frag = plain;
      if (cpu_bound) facts->frag_cpu = bound;
    }
    k.frag = facts->frag;
    k.frag_cpu = facts->frag_cpu;
  } else if (t != nullptr) {
    allowed.resize(t->types.size());
    TypesAllowed(*t, node, allowed.data());
    k.type_allowed = allowed.data();
  }
  if (NeedsTags() && facts != nullptr && facts->tags_known) {
    k.gpu_tags = facts->gpu_tags;
  } else if (NeedsTags()) {
    for (const std::string& id : node.requests) {
      const Placement* p = cluster.FindPlacement(id);
      if (p == nullptr || p->gpus.empty()) continue;
      const int bit = TagBit(p->exclusive ? Demand::Kind::kExclusive : Demand::Kind::kShared,
                             static_cast<int>(p->gpus.size()));
      k.gpu_tags |= uint64_t{1} << bit;
    }
    if (facts != nullptr) {
      facts->gpu_tags = k.gpu_tags;
      facts->tags_known = true;
    }
  }
  KTask task;
  task.kind = demand.kind;
  task.gpu_count = demand.gpu_count;
  task.cpu = demand.cpu;
  if (demand.kind == Demand::Kind::kExclusive) {
    task.compute = kGpuCompute;
    task.frag_share = k.frag_full;
  } else if (demand.kind == Demand::Kind::kShared) {
    task.compute = demand.compute_per_gpu;
    task.frag_share = memory ? demand.memory_per_gpu : demand.compute_per_gpu;
  }
  return Score(task, k, fitting.data(), static_cast<int>(fitting.size()), gpus);
}

}  // namespace gpushare::fgd
