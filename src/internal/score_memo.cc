// The score memo (see score_memo.h).

#include "src/internal/score_memo.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <typeinfo>
#include <utility>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "src/fgd/kernel.h"
#include "src/internal/cluster_state.h"
#include "src/internal/node_race.h"
#include "src/internal/placement_index.h"
#include "src/topology/node_gpus.h"

namespace gpushare::internal {
namespace {

// One node's verdict for one shape.
struct Verdict {
  Score score;
  uint64_t stamp = 0;  // The node's change stamp it was made at; 0: never.
  uint64_t gpus = 0;   // Bit mask of the chosen GPUs.
  bool feasible = false;
};

struct Key {
  Score score;  // The policy's keys (PolicyKeys()); the topology key is in the Verdict.
  uint64_t tie;
  uint32_t slot;
};

// The scan's ranking: higher policy score, then larger tie key, then lower
// slot (then NodeRace's window decides on the topology key).
struct KeyLess {
  bool operator()(const Key& a, const Key& b) const {
    if (!(a.score == b.score)) return b.score < a.score;
    if (a.tie != b.tie) return a.tie > b.tie;
    return a.slot < b.slot;
  }
};

void AppendNumber(std::string* out, int64_t v) {
  char bytes[sizeof v];
  std::memcpy(bytes, &v, sizeof v);
  out->append(bytes, sizeof v);
}

void AppendText(std::string* out, const std::string& s) {
  AppendNumber(out, static_cast<int64_t>(s.size()));
  out->append(s);
}

// Everything of a request that CheckNode() and Evaluate() read.
std::string ShapeKey(const Request& request, const Demand& demand,
                     std::vector<std::string>* models) {
  *models = request.gpu_models;
  std::sort(models->begin(), models->end());
  models->erase(std::unique(models->begin(), models->end()), models->end());
  std::string key;
  for (int64_t v : {static_cast<int64_t>(demand.kind), static_cast<int64_t>(demand.gpu_count),
                    demand.memory_per_gpu, demand.compute_per_gpu, demand.cpu,
                    demand.host_memory}) {
    AppendNumber(&key, v);
  }
  AppendNumber(&key, static_cast<int64_t>(models->size()));
  for (const std::string& m : *models) AppendText(&key, m);
  AppendNumber(&key, static_cast<int64_t>(request.node_selector.size()));
  for (const auto& [k, v] : request.node_selector) {
    AppendText(&key, k);
    AppendText(&key, v);
  }
  // The topology need: the mode and objective decide the GPUs and the score's
  // topology key (ApplyTopology), a required minimum link also feasibility.
  const TopologyNeed& need = request.topology;
  AppendNumber(&key, static_cast<int64_t>(need.mode));
  if (need.mode != TopologyNeed::Mode::kNone) {
    AppendNumber(&key, static_cast<int64_t>(need.objective));
  }
  if (need.mode == TopologyNeed::Mode::kRequire) {
    AppendNumber(&key, static_cast<int64_t>(need.min_link.kind));
    AppendNumber(&key, static_cast<int64_t>(need.min_link.nvlinks));
  }
  return key;
}

bool SameTarget(const fgd::CompiledTarget* a, const fgd::CompiledTarget* b) {
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

}  // namespace

struct ScoreMemo::Memo {
  // The verdicts of one shape.
  struct Shape {
    Request request;  // Its GPU models and node selector; no id.
    Demand demand;
    std::vector<Verdict> verdicts;  // By slot.
    absl::btree_set<Key, KeyLess> tree;
    uint64_t cursor = 0;  // Position in the change log it has applied.
    bool fresh = true;    // Nothing applied yet: compare every stamp.
    uint64_t last_use = 0;
  };

  const std::type_info* type = nullptr;
  std::optional<fgd::CompiledTarget> target;
  absl::flat_hash_map<std::string, std::unique_ptr<Shape>> shapes;
  uint64_t last_use = 0;

  Memo() = default;
  Memo(const Memo& other) : type(other.type), target(other.target), last_use(other.last_use) {
    for (const auto& [key, shape] : other.shapes) {
      shapes.emplace(key, std::make_unique<Shape>(*shape));
    }
  }
};

struct ScoreMemo::Data {
  std::vector<uint64_t> stamps;  // Per slot; bumped by every Touch().
  // Slots touched since the log was last emptied: entry i is change number
  // log_base + i. Kept only while some memo exists, and emptied when it
  // outgrows twice the node count (shapes behind it then compare stamps).
  std::vector<uint32_t> log;
  uint64_t log_base = 0;
  std::vector<std::unique_ptr<Memo>> memos;
  uint64_t clock = 0;
  int64_t entries = 0;  // Verdicts held, over every shape.

  Data() = default;
  Data(const Data& other)
      : stamps(other.stamps), log(other.log), log_base(other.log_base), clock(other.clock),
        entries(other.entries) {
    for (const auto& m : other.memos) memos.push_back(std::make_unique<Memo>(*m));
  }

  // Drops the least recently used shape; false when there is none.
  bool DropOldestShape() {
    Memo* owner = nullptr;
    const std::string* key = nullptr;
    uint64_t oldest = ~uint64_t{0};
    for (const auto& m : memos) {
      for (const auto& [k, shape] : m->shapes) {
        if (shape->last_use < oldest) {
          oldest = shape->last_use;
          owner = m.get();
          key = &k;
        }
      }
    }
    if (owner == nullptr) return false;
    auto it = owner->shapes.find(*key);
    entries -= static_cast<int64_t>(it->second->verdicts.size());
    owner->shapes.erase(it);
    return true;
  }
};

ScoreMemo::ScoreMemo() : data_(std::make_unique<Data>()) {}
ScoreMemo::~ScoreMemo() = default;
ScoreMemo::ScoreMemo(const ScoreMemo& other) { CopyFrom(other); }
ScoreMemo& ScoreMemo::operator=(const ScoreMemo& other) {
  if (this != &other) CopyFrom(other);
  return *this;
}
ScoreMemo::ScoreMemo(ScoreMemo&& other) noexcept
    : data_(std::exchange(other.data_, std::make_unique<Data>())) {}
ScoreMemo& ScoreMemo::operator=(ScoreMemo&& other) noexcept {
  if (this != &other) data_ = std::exchange(other.data_, std::make_unique<Data>());
  return *this;
}

void ScoreMemo::CopyFrom(const ScoreMemo& other) {
  std::lock_guard<std::mutex> lock(other.mu_);
  data_ = std::make_unique<Data>(*other.data_);
}

void ScoreMemo::Touch(uint32_t slot) {
  Data& d = *data_;
  if (slot >= d.stamps.size()) d.stamps.resize(slot + 1, 0);
  ++d.stamps[slot];
  if (d.memos.empty()) return;  // Shapes made later compare every stamp.
  d.log.push_back(slot);
  if (d.log.size() > std::max<size_t>(2 * d.stamps.size(), 4096)) {
    d.log_base += d.log.size();
    d.log.clear();
  }
}

void ScoreMemo::Clear() { data_ = std::make_unique<Data>(); }

bool ScoreMemo::Serves(const Policy& policy) {
  if (ClassifyPolicy(policy) != IndexedPolicy::kNone) return true;
  const auto* kernel = dynamic_cast<const fgd::KernelPolicy*>(&policy);
  return kernel != nullptr && kernel->Cacheable() && !kernel->SplitsScore();
}

bool ScoreMemo::Plan(const ClusterState& state, const Cluster& cluster, const Request& request,
                     const Demand& demand, Policy& policy, int* best_slot,
                     NodeChoice* best_choice, bool* none_feasible) const {
  if (!Serves(policy)) return false;
  const auto* kernel = dynamic_cast<const fgd::KernelPolicy*>(&policy);
  const fgd::CompiledTarget* target = kernel != nullptr ? kernel->target() : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  Data& d = *data_;
  const uint64_t now = ++d.clock;
  const uint32_t n = static_cast<uint32_t>(state.nodes.size());
  if (d.stamps.size() < n) d.stamps.resize(n, 1);

  // The memo of this policy (its type and target), made on first use.
  Memo* memo = nullptr;
  for (const auto& m : d.memos) {
    if (*m->type == typeid(policy) &&
        SameTarget(m->target ? &*m->target : nullptr, target)) {
      memo = m.get();
      break;
    }
  }
  if (memo == nullptr) {
    if (static_cast<int>(d.memos.size()) >= kMaxPolicies) {
      auto oldest = std::min_element(d.memos.begin(), d.memos.end(),
                                     [](const auto& a, const auto& b) {
                                       return a->last_use < b->last_use;
                                     });
      for (const auto& [key, shape] : (*oldest)->shapes) {
        d.entries -= static_cast<int64_t>(shape->verdicts.size());
      }
      d.memos.erase(oldest);
    }
    auto made = std::make_unique<Memo>();
    made->type = &typeid(policy);
    if (target != nullptr) made->target = *target;
    memo = made.get();
    d.memos.push_back(std::move(made));
  }
  memo->last_use = now;

  // The shape, made on first use.
  std::vector<std::string> models;
  std::string key = ShapeKey(request, demand, &models);
  auto it = memo->shapes.find(key);
  if (it == memo->shapes.end()) {
    while (d.entries + n > kMaxEntries && d.DropOldestShape()) {
    }
    auto shape = std::make_unique<Memo::Shape>();
    shape->request.gpu_models = std::move(models);
    shape->request.node_selector = request.node_selector;
    shape->request.topology = request.topology;
    shape->demand = demand;
    it = memo->shapes.emplace(std::move(key), std::move(shape)).first;
  }
  Memo::Shape& shape = *it->second;
  shape.last_use = now;
  if (shape.verdicts.size() < n) {
    d.entries += static_cast<int64_t>(n - shape.verdicts.size());
    shape.verdicts.resize(n);
  }

  // Re-scores the nodes that changed since the shape's last Plan().
  std::vector<int> fitting;
  auto refresh = [&](uint32_t slot) {
    Verdict& v = shape.verdicts[slot];
    if (v.stamp == d.stamps[slot]) return true;
    const uint64_t tie = state.tie_keys[slot];
    v.stamp = d.stamps[slot];
    const NodeStatus& node = state.nodes[slot];
    if (!NodeFits(node, shape.demand, shape.request, &fitting)) {
      if (v.feasible) shape.tree.erase(Key{PolicyKeys(v.score), tie, slot});
      v.feasible = false;
      return true;
    }
    NodeChoice choice = policy.Evaluate(shape.demand, node, fitting, cluster);
    // The scan's own check (Cluster::Plan()); the scan reports the error.
    if (static_cast<int>(choice.gpus.size()) != demand.gpu_count) return false;
    int previous = -1;
    for (int g : choice.gpus) {
      if (g <= previous || !std::binary_search(fitting.begin(), fitting.end(), g)) return false;
      previous = g;
    }
    ApplyTopology(node, shape.demand, shape.request, fitting, &choice);
    uint64_t mask = 0;
    for (int g : choice.gpus) mask |= uint64_t{1} << g;
    v.gpus = mask;
    // Scores are often unchanged (the built-in ones are whole numbers): the
    // node then keeps its place in the tree.
    const bool same_place = v.feasible && PolicyKeys(v.score) == PolicyKeys(choice.score);
    if (v.feasible && !same_place) shape.tree.erase(Key{PolicyKeys(v.score), tie, slot});
    v.score = choice.score;
    v.feasible = true;
    if (!same_place) shape.tree.insert(Key{PolicyKeys(v.score), tie, slot});
    return true;
  };
  bool ok = true;
  if (shape.fresh || shape.cursor < d.log_base) {
    for (uint32_t slot = 0; slot < n && ok; ++slot) ok = refresh(slot);
  } else {
    for (uint64_t i = shape.cursor; i < d.log_base + d.log.size() && ok; ++i) {
      const uint32_t slot = d.log[i - d.log_base];
      if (slot < n) ok = refresh(slot);
    }
  }
  if (!ok) {
    d.entries -= static_cast<int64_t>(shape.verdicts.size());
    memo->shapes.erase(it);
    return false;
  }
  shape.cursor = d.log_base + d.log.size();
  shape.fresh = false;
  if (shape.tree.empty()) {
    if (none_feasible != nullptr) *none_feasible = true;
    return false;
  }

  // The first nodes of the best policy score, in the tie-break order, race
  // on the topology key (NodeRace, as the scan does).
  NodeRace race(state.tie_keys, TopologyKeyCap(shape.demand, shape.request));
  const Score top = shape.tree.begin()->score;
  int entered = 0;
  for (auto k = shape.tree.begin(); k != shape.tree.end() && k->score == top; ++k) {
    NodeChoice entry;
    entry.score = shape.verdicts[k->slot].score;
    race.Offer(k->slot, std::move(entry));
    if (++entered >= kTopologyWindow || race.Settled()) break;
  }
  NodeChoice won;
  race.Finish(best_slot, &won);
  best_choice->score = won.score;
  best_choice->gpus.clear();
  const uint64_t mask = shape.verdicts[*best_slot].gpus;
  for (int g = 0; g < kMaxGpusPerNode; ++g) {
    if (mask >> g & 1) best_choice->gpus.push_back(g);
  }
  return true;
}

bool ScoreMemo::Consistent() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& m : data_->memos) {
    for (const auto& [key, shape] : m->shapes) {
      size_t feasible = 0;
      for (const Verdict& v : shape->verdicts) feasible += v.feasible;
      if (feasible != shape->tree.size()) return false;
      for (const Key& k : shape->tree) {
        if (k.slot >= shape->verdicts.size() || !shape->verdicts[k.slot].feasible ||
            !(PolicyKeys(shape->verdicts[k.slot].score) == k.score)) {
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace gpushare::internal
