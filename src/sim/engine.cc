#include "src/sim/engine.h"

#include <algorithm>
#include <array>
#include <map>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/cluster.h"
#include "src/internal/cluster_state.h"
#include "src/internal/status_macros.h"
#include "src/sim/migrate.h"

namespace gpushare::sim {
namespace {

uint64_t Mask(const std::vector<int>& gpus) {
  uint64_t m = 0;
  for (int g : gpus) m |= uint64_t{1} << g;
  return m;
}

// ---- The specialised engine ----------------------------------------------------

class FastEngine final : public Engine {
 public:
  FastEngine(const Prepared& p, fgd::KernelPolicy& policy, uint64_t tie_seed)
      : p_(p), policy_(policy), cacheable_(policy.Cacheable()), splits_(policy.SplitsScore()),
        uses_frag_(policy.target() != nullptr) {
    const std::vector<Node>& nodes = *p.nodes;
    const size_t n = nodes.size();
    offset_.resize(n + 1);
    for (size_t i = 0; i < n; ++i) {
      offset_[i + 1] = offset_[i] + static_cast<int>(nodes[i].gpus.size());
    }
    left_.assign(offset_[n], kGpuCompute);
    tag_counts_.assign(n * 64, 0);
    cpu_left_.resize(n);
    mem_left_.resize(n);
    version_.assign(n, 1);
    max_left_.resize(n);
    idle_.resize(n);
    tags_.assign(n, 0);
    frag_node_.resize(n);
    frag_cpu_.assign(n, -1);
    frag_cpu_version_.assign(n, 0);
    tie_.resize(n);
    if (uses_frag_) counts_.resize(n * p.compiled.types.size());
    for (size_t i = 0; i < n; ++i) {
      cpu_left_[i] = nodes[i].cpu;
      mem_left_[i] = nodes[i].host_memory;
      const int g = offset_[i + 1] - offset_[i];
      max_left_[i] = g > 0 ? kGpuCompute : 0;
      idle_[i] = g;
      tie_[i] = internal::TieKey(tie_seed, nodes[i].name, i);
      frag_node_[i] = NodeFrag(static_cast<int>(i));
      frag_ += frag_node_[i];
    }
    cache_.resize(p.num_shapes);
  }

  int Place(int task, int64_t slot, uint64_t* gpus) override {
    const Task& t = p_.tasks[task];
    *gpus = 0;
    const int best = splits_ ? ChooseDrawn(t, gpus) : ChooseScored(t, gpus);
    if (best < 0) return -1;
    Apply(t, best, *gpus, +1);
    slots_[slot] = Slot{best, *gpus, task};
    return best;
  }

  void Release(int64_t slot) override {
    auto it = slots_.find(slot);
    if (it == slots_.end()) return;
    Apply(p_.tasks[it->second.task], it->second.node, it->second.gpus, -1);
    slots_.erase(it);
  }

 private:
  struct Entry {
    uint32_t version = 0;  // 0: never evaluated.
    double score = 0;
    uint64_t gpus = 0;
  };
  struct Slot {
    int node;
    uint64_t gpus;
    int task;
  };

  const Node& node(int i) const { return (*p_.nodes)[i]; }

  // The rules of Cluster's CheckNode() on the compact state.
  bool Feasible(const Task& t, int i) const {
    const Node& nd = node(i);
    if (!nd.schedulable) return false;
    if (t.k.kind == Demand::Kind::kShared && !sharing(i)) return false;
    if (nd.cpu > 0 && t.k.cpu > cpu_left_[i]) return false;
    if (nd.host_memory > 0 && t.host_memory > mem_left_[i]) return false;
    if (t.k.kind == Demand::Kind::kCpuOnly) return true;
    const int g = offset_[i + 1] - offset_[i];
    if (g == 0) return false;
    if (t.spec >= 0 && !p_.spec_allows[t.spec][p_.node_model[i]]) return false;
    if (t.k.kind == Demand::Kind::kExclusive) return idle_[i] >= t.k.gpu_count;
    if (t.k.gpu_count == 1) return max_left_[i] >= t.k.compute;
    int fits = 0;
    for (int j = offset_[i]; j < offset_[i + 1]; ++j) fits += left_[j] >= t.k.compute;
    return fits >= t.k.gpu_count;
  }

  bool sharing(int i) const { return TakesSharedGpuWork(node(i)); }

  fgd::KNode View(int i) const {
    fgd::KNode k;
    k.num_gpus = offset_[i + 1] - offset_[i];
    k.compute_left = left_.data() + offset_[i];
    k.frag_left = k.compute_left;
    k.cpu_left = node(i).cpu > 0 ? cpu_left_[i] : fgd::kUnlimitedCpu;
    k.cpu_capacity = node(i).cpu;
    const std::vector<uint8_t>& allowed = p_.type_allowed[p_.node_model[i]];
    k.type_allowed = allowed.empty() ? nullptr : allowed.data();
    k.gpu_tags = tags_[i];
    return k;
  }

  // F_N(T) of node i, with its counts derived afresh (when the policy reads
  // the target).
  double NodeFrag(int i) {
    const fgd::KNode k = View(i);
    if (!uses_frag_) {
      return fgd::FragAmount(p_.compiled, k.frag_left, k.num_gpus, kGpuCompute, k.cpu_left,
                             k.type_allowed);
    }
    fgd::TypeCounts* counts = Counts(i);
    fgd::PrepareCounts(p_.compiled, k.frag_left, k.num_gpus, kGpuCompute, counts);
    double f = 0;
    fgd::FragSumsFrom(p_.compiled, counts, k.frag_left, k.num_gpus, kGpuCompute, nullptr, 0,
                      k.cpu_left, k.type_allowed, &f, nullptr);
    return f;
  }
  fgd::TypeCounts* Counts(int i) {
    return counts_.data() + static_cast<size_t>(i) * p_.compiled.types.size();
  }

  // Scores every feasible node (from the cache while a node is unchanged) and
  // returns the best, its GPUs in `gpus`; -1 if none is feasible.
  int ChooseScored(const Task& t, uint64_t* gpus) {
    std::vector<Entry>& cache = cache_[t.shape];
    if (cache.empty()) cache.resize(cpu_left_.size());
    int best = -1;
    double best_score = 0;
    const int n = static_cast<int>(cpu_left_.size());
    for (int i = 0; i < n; ++i) {
      if (!Feasible(t, i)) continue;
      Entry& e = cache[i];
      if (!cacheable_ || e.version != version_[i]) {
        Evaluate(t, i, &e);
        e.version = version_[i];
      }
      if (best < 0 || e.score > best_score || (e.score == best_score && tie_[i] > tie_[best])) {
        best = i;
        best_score = e.score;
      }
    }
    if (best >= 0) *gpus = cache[best].gpus;
    return best;
  }

  // The same choice for a policy that SplitsScore(): the score of every
  // feasible node is drawn, in node order as Score() would draw it, and GPUs
  // are chosen for the winner only.
  int ChooseDrawn(const Task& t, uint64_t* gpus) {
    std::array<uint64_t, kMaxGpusPerNode> draws;
    std::array<uint64_t, kMaxGpusPerNode> best_draws;
    int best = -1;
    double best_score = 0;
    const int n = static_cast<int>(cpu_left_.size());
    for (int i = 0; i < n; ++i) {
      if (!Feasible(t, i)) continue;
      const double score = policy_.DrawScore(t.k, draws.data());
      if (best < 0 || score > best_score || (score == best_score && tie_[i] > tie_[best])) {
        best = i;
        best_score = score;
        std::copy(draws.begin(), draws.begin() + t.k.gpu_count, best_draws.begin());
      }
    }
    if (best < 0) return -1;
    int fitting[kMaxGpusPerNode];
    const int num_fitting = Fitting(t, best, fitting);
    int chosen[kMaxGpusPerNode];
    policy_.GpusFromDraws(t.k, fitting, num_fitting, best_draws.data(), chosen);
    for (int j = 0; j < t.k.gpu_count; ++j) *gpus |= uint64_t{1} << chosen[j];
    return best;
  }

  // The GPUs of node i that can take the task, ascending; returns how many.
  int Fitting(const Task& t, int i, int* fitting) const {
    int num_fitting = 0;
    if (t.k.kind == Demand::Kind::kCpuOnly) return 0;
    for (int j = offset_[i]; j < offset_[i + 1]; ++j) {
      const bool fits = t.k.kind == Demand::Kind::kExclusive ? left_[j] == kGpuCompute
                                                             : left_[j] >= t.k.compute;
      if (fits) fitting[num_fitting++] = j - offset_[i];
    }
    return num_fitting;
  }

  void Evaluate(const Task& t, int i, Entry* e) {
    int fitting[kMaxGpusPerNode];
    const int num_fitting = Fitting(t, i, fitting);
    fgd::KNode k = View(i);
    if (uses_frag_) {
      k.frag = frag_node_[i];
      k.counts = Counts(i);
    }
    if (uses_frag_ && policy_.NeedsFragCpu(k)) {
      // Derived once per change of the node, for every shape that scores it.
      if (frag_cpu_version_[i] != version_[i]) {
        double plain = 0;
        fgd::FragSumsFrom(p_.compiled, k.counts, k.frag_left, k.num_gpus, kGpuCompute, nullptr,
                          0, k.cpu_left, k.type_allowed, &plain, &frag_cpu_[i]);
        frag_cpu_version_[i] = version_[i];
      }
      k.frag_cpu = frag_cpu_[i];
    }
    int chosen[kMaxGpusPerNode];
    e->score = policy_.Score(t.k, k, fitting, num_fitting, chosen);
    e->gpus = 0;
    for (int j = 0; j < t.k.gpu_count; ++j) e->gpus |= uint64_t{1} << chosen[j];
  }

  void Apply(const Task& t, int i, uint64_t gpus, int sign) {
    const bool exclusive = t.k.kind == Demand::Kind::kExclusive;
    int64_t max_left = 0;
    int idle = 0;
    for (int j = offset_[i]; j < offset_[i + 1]; ++j) {
      if (gpus >> (j - offset_[i]) & 1) {
        const int64_t take = exclusive ? kGpuCompute : t.k.compute;
        left_[j] -= sign * take;
      }
      max_left = std::max(max_left, left_[j]);
      idle += left_[j] == kGpuCompute;
    }
    max_left_[i] = max_left;
    idle_[i] = idle;
    cpu_left_[i] -= sign * t.k.cpu;
    mem_left_[i] -= sign * t.host_memory;
    const int bit = fgd::TagBit(t.k.kind, t.k.gpu_count);
    if (bit >= 0) {
      int32_t& count = tag_counts_[static_cast<size_t>(i) * 64 + bit];
      count += sign;
      if (count > 0) {
        tags_[i] |= uint64_t{1} << bit;
      } else {
        tags_[i] &= ~(uint64_t{1} << bit);
      }
    }
    ++version_[i];
    allocated_ += sign * t.gpu_request;
    const double f = NodeFrag(i);
    frag_ += f - frag_node_[i];
    frag_node_[i] = f;
  }

  const Prepared& p_;
  fgd::KernelPolicy& policy_;
  const bool cacheable_;
  const bool splits_;
  const bool uses_frag_;
  std::vector<int> offset_;          // GPU offsets into left_, per node (+1).
  std::vector<int64_t> left_;        // Idle compute per GPU, thousandths.
  std::vector<int32_t> tag_counts_;  // 64 per node.
  std::vector<int64_t> cpu_left_, mem_left_, max_left_;
  std::vector<uint32_t> version_;
  std::vector<int> idle_;
  std::vector<uint64_t> tags_;
  std::vector<double> frag_node_;
  // fgd::PrepareCounts() per node (types per node), kept with frag_node_.
  std::vector<fgd::TypeCounts> counts_;
  // FragAmountCpuBound() per node, when the policy reads it, and the
  // version_ it was derived at (0: never).
  std::vector<double> frag_cpu_;
  std::vector<uint32_t> frag_cpu_version_;
  std::vector<uint64_t> tie_;
  std::vector<std::vector<Entry>> cache_;  // [shape][node].
  absl::flat_hash_map<int64_t, Slot> slots_;
};

// ---- Through a Cluster -----------------------------------------------------------

class ClusterEngine final : public Engine {
 public:
  ClusterEngine(const Prepared& p, Policy& policy, uint64_t tie_seed)
      : p_(p), policy_(policy), cluster_(Options(tie_seed)) {}

  absl::Status Init() {
    for (size_t i = 0; i < p_.nodes->size(); ++i) {
      GPUSHARE_RETURN_IF_ERROR(cluster_.AddNode((*p_.nodes)[i]));
      index_[(*p_.nodes)[i].name] = static_cast<int>(i);
      frag_node_.push_back(fgd::NodeFrag(*cluster_.FindNode((*p_.nodes)[i].name), p_.compiled));
      frag_ += frag_node_.back();
    }
    return absl::OkStatus();
  }

  int Place(int task, int64_t slot, uint64_t* gpus) override {
    // Assigned, not constructed: the scratch request's buffers are reused.
    request_ = (*p_.requests)[task];
    request_.id.clear();
    absl::StrAppend(&request_.id, "#", slot);
    absl::StatusOr<Placement> placed = cluster_.Place(request_, policy_);
    *gpus = 0;
    if (!placed.ok()) return -1;
    *gpus = Mask(placed->gpus);
    allocated_ += p_.tasks[task].gpu_request;
    const int i = index_.at(placed->node);
    slot_task_[slot] = {task, i};
    Refresh(i);
    return i;
  }

  int PlaceMoving(int task, int64_t slot, const MoveLimits& limits, uint64_t* gpus,
                  std::vector<Moved>* moved) override {
    *moved = MoveForTask(cluster_, p_, task, slot, slot_task_, index_, limits);
    for (const Moved& m : *moved) {
      slot_task_.at(m.slot).second = m.node;  // Release() refreshes the node it is on.
      Refresh(m.from);
      Refresh(m.node);
    }
    return Place(task, slot, gpus);
  }

  void Release(int64_t slot) override {
    auto it = slot_task_.find(slot);
    if (it == slot_task_.end()) return;
    const auto [task, i] = it->second;
    slot_task_.erase(it);
    cluster_.Release(absl::StrCat("#", slot)).IgnoreError();
    allocated_ -= p_.tasks[task].gpu_request;
    Refresh(i);
  }

 private:
  static ClusterOptions Options(uint64_t tie_seed) {
    ClusterOptions o;
    o.tie_break_seed = tie_seed;
    o.remembered_releases = 0;
    return o;
  }

  void Refresh(int i) {
    const double f = fgd::NodeFrag(*cluster_.FindNode((*p_.nodes)[i].name), p_.compiled);
    frag_ += f - frag_node_[i];
    frag_node_[i] = f;
  }

  const Prepared& p_;
  Policy& policy_;
  Cluster cluster_;
  Request request_;  // The request being placed.
  absl::flat_hash_map<std::string, int> index_;
  SlotTasks slot_task_;
  std::vector<double> frag_node_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<const Prepared>> Prepare(
    const std::vector<Node>& nodes, const std::vector<Request>& requests,
    std::shared_ptr<const TargetWorkload> target) {
  if (nodes.empty()) return absl::InvalidArgumentError("simulation needs at least one node");
  if (requests.empty()) return absl::InvalidArgumentError("simulation needs at least one request");
  auto p = std::make_shared<Prepared>();
  p->nodes = &nodes;
  p->requests = &requests;
  std::map<std::string, int> models;
  absl::flat_hash_set<std::string> names;
  for (const Node& node : nodes) {
    GPUSHARE_RETURN_IF_ERROR(internal::ValidateNode(node));
    if (!names.insert(node.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("node '", node.name, "' appears twice"));
    }
    const std::string model = node.gpus.empty() ? "" : node.gpus[0].model;
    for (const Gpu& g : node.gpus) {
      if (g.model != model) {
        return absl::InvalidArgumentError(absl::StrCat(
            "node '", node.name, "' mixes GPU models '", model, "' and '", g.model,
            "'; simulation needs one model per node"));
      }
      if (!g.healthy) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", node.name, "' has an unhealthy GPU; simulation needs healthy GPUs"));
      }
    }
    auto it = models.try_emplace(model, static_cast<int>(models.size())).first;
    p->node_model.push_back(it->second);
    p->gpu_capacity += kGpuCompute * static_cast<int64_t>(node.gpus.size());
  }
  if (target == nullptr) {
    GPUSHARE_ASSIGN_OR_RETURN(TargetWorkload typical, TypicalTasks(requests));
    target = std::make_shared<const TargetWorkload>(std::move(typical));
  }
  if (target->resource != FragResource::kCompute) {
    return absl::InvalidArgumentError("simulation measures fragmentation on compute; the target "
                                      "workload is on memory");
  }
  p->target = target;
  p->compiled = fgd::Compile(*target);
  std::vector<std::string> model_names(models.size());
  for (const auto& [name, index] : models) model_names[index] = name;
  p->type_allowed.resize(models.size());
  for (size_t m = 0; m < models.size(); ++m) {
    for (const TargetTask& t : target->tasks) {
      p->type_allowed[m].push_back(
          t.gpu_models.empty() ||
          std::find(t.gpu_models.begin(), t.gpu_models.end(), model_names[m]) !=
              t.gpu_models.end());
    }
  }
  std::map<std::vector<std::string>, int> specs;
  std::map<std::tuple<int, int, int64_t, int64_t>, int> shapes;
  p->tasks.reserve(requests.size());
  for (const Request& r : requests) {
    if (r.gpu_memory > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request '", r.id, "' asks for gpu memory ", r.gpu_memory,
          "; simulation works on compute only"));
    }
    if (!r.node_selector.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request '", r.id, "' has a node selector; simulation does not support it"));
    }
    GPUSHARE_ASSIGN_OR_RETURN(const Demand d, internal::ValidateRequest(r, kMaxGpusPerNode));
    Task t;
    t.k.kind = d.kind;
    t.k.gpu_count = d.gpu_count;
    t.k.cpu = d.cpu;
    t.k.compute = d.kind == Demand::Kind::kExclusive ? kGpuCompute : d.compute_per_gpu;
    t.k.frag_share = t.k.compute;
    t.host_memory = d.host_memory;
    t.gpu_request = t.k.compute * d.gpu_count;
    t.task_class = d.kind == Demand::Kind::kCpuOnly  ? TaskClass::kCpuOnly
                   : d.kind == Demand::Kind::kShared ? TaskClass::kShared
                   : d.gpu_count == 1                ? TaskClass::kOneGpu
                                                     : TaskClass::kMultiGpu;
    if (!r.gpu_models.empty()) {
      auto [it, inserted] = specs.try_emplace(r.gpu_models, static_cast<int>(specs.size()));
      if (inserted) {
        std::vector<uint8_t> allows;
        for (const std::string& m : model_names) {
          allows.push_back(std::find(r.gpu_models.begin(), r.gpu_models.end(), m) !=
                           r.gpu_models.end());
        }
        p->spec_allows.push_back(std::move(allows));
      }
      t.spec = it->second;
    }
    auto key = std::make_tuple(static_cast<int>(d.kind), d.gpu_count, t.k.cpu, t.k.compute);
    t.shape = shapes.try_emplace(key, static_cast<int>(shapes.size())).first->second;
    p->tasks.push_back(t);
  }
  p->num_shapes = static_cast<int>(shapes.size());
  return std::shared_ptr<const Prepared>(std::move(p));
}

absl::StatusOr<std::unique_ptr<Engine>> MakeEngine(const Prepared& prepared, Policy& policy,
                                                   uint64_t tie_seed, bool through_cluster) {
  auto* kernel = dynamic_cast<fgd::KernelPolicy*>(&policy);
  // The specialised engine knows nothing of GPU topology.
  const bool topology = std::any_of(prepared.nodes->begin(), prepared.nodes->end(),
                                    [](const Node& n) { return n.topology != nullptr; });
  // It reads the target's facts (F_N(T), the models each type allows) of
  // the experiment's target: a policy with another target goes through the
  // cluster.
  const bool own_target =
      kernel != nullptr && kernel->target() != nullptr &&
      !fgd::SameTarget(kernel->target(), &prepared.compiled);
  if (!through_cluster && !topology && kernel != nullptr && !own_target) {
    return std::unique_ptr<Engine>(std::make_unique<FastEngine>(prepared, *kernel, tie_seed));
  }
  auto engine = std::make_unique<ClusterEngine>(prepared, policy, tie_seed);
  GPUSHARE_RETURN_IF_ERROR(engine->Init());
  return std::unique_ptr<Engine>(std::move(engine));
}

}  // namespace gpushare::sim
