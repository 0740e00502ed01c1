// The placement indexes (see placement_index.h).

#include "src/internal/placement_index.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "src/internal/btree_erase.h"
#include "src/internal/cluster_state.h"
#include "src/internal/status_macros.h"
#include "src/internal/node_race.h"
#include "src/policies/binpack_policy.h"
#include "src/policies/gpu_order.h"
#include "src/policies/spread_policy.h"
#include "src/topology/node_gpus.h"

namespace gpushare::internal {
namespace {

using ExclusiveKey = PlacementIndex::ExclusiveKey;
using PackKey = PlacementIndex::PackKey;

uint64_t ShapeOf(const GpuStatus& g) {
  return PlacementIndex::GpuShape(g.memory_free(), g.compute_free());
}

ExclusiveKey MakeExclusiveKey(const NodeStatus& node, uint64_t tie, uint32_t slot) {
  return ExclusiveKey{policies::FreeGpuMemory(node), ~tie, slot,
                      policies::IdleHealthyGpus(node)};
}

// The node-wide numbers of the per-GPU-count keys, computed once per change.
struct SpreadBase {
  double memory_ratio = 0;
  double compute_ratio = 0;
  SpreadOrder::Pool pool;  // The numbers of both ratios.
  int healthy = 0;
  int loosest = -1;  // The loosest healthy GPU (policies::CompareGpus(), lowest position).
  // Only the first `healthy` entries (top: healthy + 1) are written: the
  // arrays are left uninitialised, since zeroing them (1.5 KiB) on every
  // place and release cost more than the rest of this function.
  std::array<int64_t, kMaxGpusPerNode> free;     // Healthy frees, largest first.
  std::array<int64_t, kMaxGpusPerNode> compute;  // Healthy free computes, ascending.
  std::array<int64_t, kMaxGpusPerNode + 1> top;  // top[k]: sum of the k largest frees.
};

// Spread's order of a node's GPUs: `a` before `b` when it has more free
// memory, then more free compute (policies::CompareGpus()), then the lower
// position.
bool LooserGpu(const NodeStatus& node, int a, int b) {
  const int c = policies::CompareGpus(node.gpus[a], node.gpus[b], /*tightest=*/false);
  return c != 0 ? c < 0 : a < b;
}

// The node's first healthy GPU in that order; -1 when none is healthy.
int LoosestGpu(const NodeStatus& node) {
  int loosest = -1;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const int gpu = static_cast<int>(i);
    if (node.gpus[i].healthy && (loosest < 0 || LooserGpu(node, gpu, loosest))) loosest = gpu;
  }
  return loosest;
}

// With `sorted` false only top[0..1] are filled (enough for M = 1 spread).
SpreadBase MakeSpreadBase(const NodeStatus& node, bool sorted) {
  SpreadBase b;
  int64_t memory = 0, memory_used = 0, compute_used = 0;
  // The loosest GPU so far and its free memory and compute: LoosestGpu()'s
  // answer, found in the pass that sums (a second pass over the GPUs cost
  // multi-GPU spread 5% a pair). A GPU replaces it only when strictly looser.
  int64_t loosest_free = 0, loosest_compute = 0;
  for (size_t i = 0; i < node.gpus.size(); ++i) {
    const GpuStatus& g = node.gpus[i];
    memory += g.memory;
    memory_used += g.memory_used;
    compute_used += g.compute_used;
    if (!g.healthy) continue;
    const int64_t free = g.memory_free(), compute_free = g.compute_free();
    const bool looser = b.loosest < 0 || free > loosest_free ||
                        (free == loosest_free && compute_free > loosest_compute);
    b.loosest = looser ? static_cast<int>(i) : b.loosest;
    loosest_free = looser ? free : loosest_free;
    loosest_compute = looser ? compute_free : loosest_compute;
    b.compute[b.healthy] = compute_free;
    b.free[b.healthy++] = free;
  }
  // The same arithmetic as the spread policy's score (policies/gpu_order.h).
  b.memory_ratio = policies::Ratio(memory_used, memory);
  const int64_t compute = kGpuCompute * static_cast<int64_t>(node.gpus.size());
  b.compute_ratio = policies::Ratio(compute_used, compute);
  b.pool = {memory, memory_used, compute, compute_used};
  b.top[0] = 0;
  if (!sorted) {
    b.top[1] = loosest_free;
    return b;
  }
  std::sort(b.free.begin(), b.free.begin() + b.healthy, std::greater<int64_t>());
  std::sort(b.compute.begin(), b.compute.begin() + b.healthy);
  for (int k = 0; k < b.healthy; ++k) b.top[k + 1] = b.top[k] + b.free[k];
  return b;
}

SpreadKey MakeSpreadKey(const SpreadBase& b, int count, uint64_t tie, uint32_t slot) {
  return SpreadKey{b.memory_ratio, b.compute_ratio, -b.top[count], ~tie,
                   count == 1 ? b.top[1] : b.free[count - 1], slot, count == 1 ? b.loosest : -1};
}

// The healthy GPUs of a node by (free memory, free compute), ascending,
// sorted once for all the shape trees a change touches.
class ShapeGpus {
 public:
  explicit ShapeGpus(const NodeStatus& node) {
    for (const GpuStatus& g : node.gpus) {
      if (g.healthy) gpus_[n_++] = {g.memory_free(), g.compute_free()};
    }
    std::sort(gpus_.begin(), gpus_.begin() + n_, [](const Free& a, const Free& b) {
      return a.memory != b.memory ? a.memory < b.memory : a.compute < b.compute;
    });
  }

  // The key of shape (count, memory): binpack takes the `count` tightest GPUs
  // with `memory` free, i.e. the first `count` from the first with that much.
  // False when fewer than `count` healthy GPUs have `memory` free.
  bool Key(int count, int64_t memory, uint64_t tie, uint32_t slot,
           PlacementIndex::ShapeKey* key) const {
    int first = 0;
    while (first < n_ && gpus_[first].memory < memory) ++first;
    if (n_ - first < count) return false;
    *key = PlacementIndex::ShapeKey{0, 0, ~tie, slot};
    for (int k = first; k < first + count; ++k) {
      key->memory += gpus_[k].memory;
      key->compute += gpus_[k].compute;
    }
    return true;
  }

 private:
  // Plain members, so that the array is not zeroed on every construction
  // (std::pair would be); only the first n_ entries are written and read.
  struct Free {
    int64_t memory;
    int64_t compute;
  };
  std::array<Free, kMaxGpusPerNode> gpus_;
  int n_ = 0;
};

PackKey MakePackKey(const SpreadBase& b, int count, uint64_t tie, uint32_t slot) {
  int64_t low_compute = 0;
  for (int k = 0; k < count; ++k) low_compute += b.compute[k];
  return PackKey{b.free[count - 1], b.top[b.healthy] - b.top[b.healthy - count], low_compute,
                 ~tie, slot};
}

template <typename Tree, typename Less>
bool SameTree(const Tree& a, const Tree& b, Less less) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [&](const auto& x, const auto& y) {
           return !less(x, y) && !less(y, x);
         });
}

// One search: evaluates candidate nodes exactly as the generic scan does and
// keeps the best under the scan's rule (NodeRace).
class Search {
 public:
  Search(const ClusterState& state, const Cluster& cluster, const Request& request,
         const Demand& demand, Policy& policy)
      : state_(state),
        cluster_(cluster),
        request_(request),
        demand_(demand),
        policy_(policy),
        race_(state.tie_keys, TopologyKeyCap(demand, request)) {}

  // Evaluates node `slot`; false if it cannot host the demand.
  bool Consider(uint32_t slot) {
    const NodeStatus& node = state_.nodes[slot];
    // One allocation, not one per doubling, and none for the shortcuts.
    if (fitting_.capacity() == 0) fitting_.reserve(kMaxGpusPerNode);
    if (!NodeFits(node, demand_, request_, &fitting_)) return false;
    NodeChoice choice = policy_.Evaluate(demand_, node, fitting_, cluster_);
    ApplyTopology(node, demand_, request_, fitting_, &choice);
    race_.Offer(slot, std::move(choice));
    return true;
  }

  // Consider() for single-GPU shared binpack, whose GPU index walks the
  // GPUs in the policy's own order (least free memory, then compute, then
  // index): the first GPU of a node met, `gpu`, is the one Evaluate() would
  // choose among the fitting ones, so only the node-wide rules are left to
  // check. Nodes whose topology may move the choice take Consider().
  bool ConsiderTightest(uint32_t slot, int gpu) {
    const NodeStatus& node = state_.nodes[slot];
    if (node.topology != nullptr && request_.topology.mode != TopologyNeed::Mode::kNone) {
      return Consider(slot);
    }
    if (!NodeAdmits(node, demand_, request_)) return false;
    NodeChoice choice;
    choice.gpus = {gpu};
    choice.score = policies::BinpackSharedScore(node, demand_, choice.gpus);
    Take(slot, node, std::move(choice));
    return true;
  }

  // Consider() for single-GPU shared spread, from the node's key in the
  // order of M = 1 (`key`). The GPU Evaluate() would choose comes first,
  // among the node's healthy GPUs of an allowed model, in the policy's order
  // (most free memory, then compute, then lowest index); the key names the
  // first of all healthy GPUs, key.gpu. When that GPU is of an allowed model
  // and fits, it is the choice, and the key's ratios and its free memory are
  // the policy's score (policies::SpreadSharedScore(): the same Ratio() of
  // the same sums), so the node's other GPUs are not read. Otherwise, and on
  // nodes whose topology may move the choice, Consider().
  bool ConsiderLoosest(const SpreadKey& key) {
    const NodeStatus& node = state_.nodes[key.slot];
    if (key.gpu < 0 ||
        (node.topology != nullptr && request_.topology.mode != TopologyNeed::Mode::kNone)) {
      return Consider(key.slot);
    }
    if (!NodeAdmits(node, demand_, request_)) return false;
    const GpuStatus& g = node.gpus[key.gpu];
    if (!ModelAllowed(request_, g) || g.memory_free() < demand_.memory_per_gpu ||
        g.compute_free() < demand_.compute_per_gpu) {
      return Consider(key.slot);
    }
    NodeChoice choice;
    choice.gpus = {key.gpu};
    choice.score = {-key.memory_ratio, -key.compute_ratio,
                    static_cast<double>(g.memory_free() - demand_.memory_per_gpu)};
    Take(key.slot, node, std::move(choice));
    return true;
  }

  // Whether a node in `slot` whose policy keys are at most `bound` could
  // still win.
  bool CouldWin(const Score& bound, uint32_t slot) const { return race_.CouldWin(bound, slot); }

  bool found() const { return race_.found(); }
  // See NodeRace::Settled(): for walks in (score desc, tie-break) order.
  bool settled() const { return race_.Settled(); }
  bool Finish(int* best_slot, NodeChoice* best_choice) {
    return race_.Finish(best_slot, best_choice);
  }

 private:
  // Offers `choice` (one GPU, scored) of the node in `slot`, for the
  // shortcuts above.
  void Take(uint32_t slot, const NodeStatus& node, NodeChoice choice) {
    ApplyTopology(node, demand_, request_, fitting_, &choice);  // Sets the topology key only.
    race_.Offer(slot, std::move(choice));
  }

  const ClusterState& state_;
  const Cluster& cluster_;
  const Request& request_;
  const Demand& demand_;
  Policy& policy_;
  NodeRace race_;
  std::vector<int> fitting_;
};

}  // namespace

IndexedPolicy ClassifyPolicy(const Policy& policy) {
  // The built-in policies are final classes, so their dynamic type identifies
  // them; wrappers and user policies have other types.
  static const std::unique_ptr<Policy> binpack_policy = policies::NewBinpackPolicy();
  static const std::unique_ptr<Policy> spread_policy = policies::NewSpreadPolicy();
  static const Policy& binpack_ref = *binpack_policy;
  static const Policy& spread_ref = *spread_policy;
  static const std::type_info& binpack = typeid(binpack_ref);
  static const std::type_info& spread = typeid(spread_ref);
  const std::type_info& type = typeid(policy);
  if (type == binpack) return IndexedPolicy::kBinpack;
  if (type == spread) return IndexedPolicy::kSpread;
  return IndexedPolicy::kNone;
}

bool PlacementIndex::Filter::Admits(const NodeStatus& node) const {
  for (const auto& [key, value] : selector) {
    auto it = node.labels.find(key);
    if (it == node.labels.end() || it->second != value) return false;
  }
  return models.empty() || std::any_of(node.gpus.begin(), node.gpus.end(), [&](const GpuStatus& g) {
           return std::binary_search(models.begin(), models.end(), g.model);
         });
}

PlacementIndex::PlacementIndex() = default;
PlacementIndex::~PlacementIndex() { Clear(); }

PlacementIndex::PlacementIndex(const PlacementIndex& other) { CopyFrom(other); }

PlacementIndex& PlacementIndex::operator=(const PlacementIndex& other) {
  if (this != &other) {
    Clear();
    CopyFrom(other);
  }
  return *this;
}

PlacementIndex::PlacementIndex(PlacementIndex&& other) noexcept { *this = std::move(other); }

PlacementIndex& PlacementIndex::operator=(PlacementIndex&& other) noexcept {
  if (this != &other) {
    Clear();
    gpu_.store(other.gpu_.exchange(nullptr));
    exclusive_.store(other.exclusive_.exchange(nullptr));
    for (int m = 0; m < kSpreadSlots; ++m) {
      spread_[m].store(other.spread_[m].exchange(nullptr));
      pack_[m].store(other.pack_[m].exchange(nullptr));
    }
    for (int i = 0; i < kShapeSlots; ++i) shape_[i].store(other.shape_[i].exchange(nullptr));
    node_counts_.store(other.node_counts_.exchange(0));
    filter_ = std::move(other.filter_);
    for (int i = 0; i < kViewSlots; ++i) views_[i].store(other.views_[i].exchange(nullptr));
    memo_ = std::move(other.memo_);
  }
  return *this;
}

void PlacementIndex::CopyFrom(const PlacementIndex& other) {
  std::lock_guard<std::mutex> lock(other.mu_);
  auto copy = [](const auto& from, auto& to) {
    const auto* t = from.load(std::memory_order_acquire);
    using Tree = std::remove_const_t<std::remove_pointer_t<decltype(t)>>;
    to.store(t == nullptr ? nullptr : new Tree(*t), std::memory_order_release);
  };
  copy(other.gpu_, gpu_);
  copy(other.exclusive_, exclusive_);
  for (int m = 0; m < kSpreadSlots; ++m) {
    copy(other.spread_[m], spread_[m]);
    copy(other.pack_[m], pack_[m]);
  }
  for (int i = 0; i < kShapeSlots; ++i) copy(other.shape_[i], shape_[i]);
  node_counts_.store(other.node_counts_.load());
  filter_ = other.filter_ == nullptr ? nullptr : std::make_unique<Filter>(*other.filter_);
  for (int i = 0; i < kViewSlots; ++i) copy(other.views_[i], views_[i]);
  memo_ = other.memo_;
}

void PlacementIndex::Clear() {
  delete gpu_.exchange(nullptr);
  delete exclusive_.exchange(nullptr);
  for (auto& slot : spread_) delete slot.exchange(nullptr);
  for (auto& slot : pack_) delete slot.exchange(nullptr);
  for (auto& slot : shape_) delete slot.exchange(nullptr);
  node_counts_.store(0);
  for (auto& slot : views_) delete slot.exchange(nullptr);
  memo_.Clear();
}

int PlacementIndex::GpuTrees::IdOf(std::string_view model) const {
  constexpr size_t kCompared = 4;
  if (names.size() <= kCompared) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == model) return static_cast<int>(i);
    }
    return -1;
  }
  auto it = ids.find(Sv(model));
  return it == ids.end() ? -1 : it->second;
}

PlacementIndex::GpuTrees::GpuTrees(const ClusterState& state) {
  const uint32_t n = static_cast<uint32_t>(state.nodes.size());
  while ((1 << shift) < state.max_gpus_per_node) ++shift;
  order.resize(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return TieBefore(state.tie_keys, a, b); });
  // Room for n + 16 more nodes at either end: with the default tie keys
  // (the order of arrival) every new node comes first. With hashed tie keys
  // (a seed) new nodes land anywhere, so seven free keys are left between
  // each two nodes as well.
  const uint32_t room = n + 16;
  const uint32_t gap = state.options.tie_break_seed == 0 ? 1 : 8;
  key.resize(n);
  slot_of.assign(2 * room + gap * n, kNoSlot);
  for (uint32_t rank = 0; rank < n; ++rank) {
    key[order[rank]] = room + gap * rank;
    slot_of[room + gap * rank] = order[rank];
  }
}

bool PlacementIndex::GpuTrees::AddSlot(const ClusterState& state, uint32_t slot) {
  if (slot != key.size() || state.nodes[slot].gpus.size() > (size_t{1} << shift)) return false;
  auto at = std::upper_bound(order.begin(), order.end(), slot, [&](uint32_t a, uint32_t b) {
    return TieBefore(state.tie_keys, a, b);
  });
  // Keys between the neighbours' are free (keys follow the order).
  const int64_t size = static_cast<int64_t>(slot_of.size());
  const int64_t low = at == order.begin() ? int64_t{-1} : int64_t{key[*(at - 1)]};
  const int64_t high = at == order.end() ? size : int64_t{key[*at]};
  if (high - low < 2) return false;
  // Next to the neighbour at an end, so that arrivals there use the room
  // one key at a time; halfway between two nodes.
  const int64_t k = at == order.begin() && high < size ? high - 1
                    : at == order.end() && low >= 0     ? low + 1
                                                        : low + (high - low) / 2;
  key.push_back(static_cast<uint32_t>(k));
  slot_of[k] = slot;
  order.insert(at, slot);
  return true;
}

bool PlacementIndex::GpuTrees::RemoveSlot(uint32_t slot) {
  if (slot >= key.size()) return false;
  slot_of[key[slot]] = kNoSlot;
  key.erase(key.begin() + slot);
  for (uint32_t& s : slot_of) s -= s != kNoSlot && s > slot;
  order.erase(std::find(order.begin(), order.end(), slot));
  for (uint32_t& s : order) s -= s > slot;
  return true;
}

GpuBuckets& PlacementIndex::GpuTrees::For(const std::string& model) {
  if (const int id = IdOf(model); id >= 0) return trees[id];
  auto [it, added] = ids.try_emplace(model, static_cast<int>(trees.size()));
  if (added) {
    names.push_back(model);
    trees.emplace_back(uint64_t{slot_of.size()} << shift);
  }
  return trees[it->second];
}

void PlacementIndex::Rebuild(const ClusterState& state) {
  memo_.Clear();
  ClearTrees();
  for (const auto& entry : views_) {
    PlacementIndex* view = entry.load(std::memory_order_acquire);
    if (view == nullptr) break;
    view->ClearTrees();
  }
  for (uint32_t i = 0; i < state.nodes.size(); ++i) Link(state, i, nullptr);
}

void PlacementIndex::RemoveNode(const ClusterState& state, uint32_t slot) {
  for (const auto& entry : views_) {
    PlacementIndex* view = entry.load(std::memory_order_acquire);
    if (view == nullptr) break;
    view->RemoveOwn(state, slot);
  }
  RemoveOwn(state, slot);
}

void PlacementIndex::RemoveOwn(const ClusterState& state, uint32_t slot) {
  // The node's keys go: Unlink() erases them but for the shape keys, which
  // it notes for the Link() that would follow.
  UnlinkOwn(state, slot, nullptr);
  if (GpuTrees* trees = gpu_.load(std::memory_order_acquire); trees != nullptr &&
                                                              !trees->RemoveSlot(slot)) {
    delete gpu_.exchange(nullptr);
  }
  for (int i = 0; i < kShapeSlots; ++i) {
    ShapeTree* t = shape_[i].load(std::memory_order_acquire);
    if (t == nullptr) break;
    if (pending_.valid[i]) EraseUnique(t->keys, pending_.keys[i]);
    RenumberAfterRemoval(t->keys, slot);
  }
  pending_.slot = kNoSlot;
  pending_spread_.valid = false;
  if (ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) {
    RenumberAfterRemoval(*t, slot);
  }
  for (int m = 0; m < kSpreadSlots; ++m) {
    if (SpreadOrder* t = spread_[m].load(std::memory_order_acquire)) t->SlotRemoved(slot);
    if (PackTree* t = pack_[m].load(std::memory_order_acquire)) RenumberAfterRemoval(*t, slot);
  }
  if (filter_ == nullptr) memo_.NodeRemoved(slot);
}

void PlacementIndex::ClearTrees() {
  pending_.slot = kNoSlot;
  delete gpu_.exchange(nullptr);  // Built again, with new keys, when next needed.
  if (ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) t->clear();
  for (auto& slot : spread_) {
    if (SpreadOrder* t = slot.load(std::memory_order_acquire)) t->clear();
  }
  for (auto& slot : pack_) {
    if (PackTree* t = slot.load(std::memory_order_acquire)) t->clear();
  }
  for (auto& slot : shape_) {
    if (ShapeTree* t = slot.load(std::memory_order_acquire)) t->keys.clear();
  }
}

void PlacementIndex::Unlink(const ClusterState& state, uint32_t slot,
                            const std::vector<int>* gpus) {
  for (const auto& entry : views_) {
    PlacementIndex* view = entry.load(std::memory_order_acquire);
    if (view == nullptr) break;
    view->UnlinkOwn(state, slot, gpus);
  }
  UnlinkOwn(state, slot, gpus);
}

void PlacementIndex::UnlinkOwn(const ClusterState& state, uint32_t slot,
                               const std::vector<int>* gpus) {
  const NodeStatus& node = state.nodes[slot];
  pending_.slot = slot;
  pending_.valid.fill(false);
  pending_spread_.valid = false;
  if (!node.schedulable || !Admits(node)) return;
  const uint64_t tie = state.tie_keys[slot];
  if (ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) {
    EraseUnique(*t, MakeExclusiveKey(node, tie, slot));
  }
  if (!node.gpu_sharing) return;
  UpdateKeys(node, slot, tie, gpus, /*insert=*/false, /*after_unlink=*/false);
  // The shape keys are only noted: Link() replaces those that change.
  if (shape_[0].load(std::memory_order_acquire) == nullptr) return;
  const ShapeGpus fit(node);
  for (int i = 0; i < kShapeSlots; ++i) {
    const ShapeTree* t = shape_[i].load(std::memory_order_acquire);
    if (t == nullptr) break;
    pending_.valid[i] = fit.Key(t->count, t->memory, tie, slot, &pending_.keys[i]);
  }
}

void PlacementIndex::LinkShapes(const NodeStatus& node, uint32_t slot, uint64_t tie,
                                bool in_trees, bool after_unlink) {
  if (shape_[0].load(std::memory_order_acquire) == nullptr) return;
  std::optional<ShapeGpus> fit;
  if (in_trees) fit.emplace(node);
  const ShapeLess less;
  for (int i = 0; i < kShapeSlots; ++i) {
    ShapeTree* t = shape_[i].load(std::memory_order_acquire);
    if (t == nullptr) break;
    ShapeKey key;
    const bool now = in_trees && fit->Key(t->count, t->memory, tie, slot, &key);
    const bool before = after_unlink && pending_.valid[i];
    const ShapeKey& old = pending_.keys[i];
    if (now && before && !less(key, old) && !less(old, key)) continue;
    if (before) EraseUnique(t->keys, old);
    if (now) t->keys.insert(key);
  }
}

void PlacementIndex::Link(const ClusterState& state, uint32_t slot,
                          const std::vector<int>* gpus) {
  for (const auto& entry : views_) {
    PlacementIndex* view = entry.load(std::memory_order_acquire);
    if (view == nullptr) break;
    view->Link(state, slot, gpus);
  }
  const NodeStatus& node = state.nodes[slot];
  if (filter_ == nullptr) memo_.Touch(slot, node);
  if (GpuTrees* trees = gpu_.load(std::memory_order_acquire)) {
    // A new node takes a key, if one is free at its place in the order; a
    // node with more GPUs than the positions per node, or none free, drops
    // the index.
    if (slot < trees->key.size() ? node.gpus.size() > (size_t{1} << trees->shift)
                                 : !trees->AddSlot(state, slot)) {
      delete gpu_.exchange(nullptr);
    }
  }
  const uint64_t tie = state.tie_keys[slot];
  const bool after_unlink = pending_.slot == slot;
  pending_.slot = kNoSlot;
  const bool linked = node.schedulable && Admits(node);
  LinkShapes(node, slot, tie, linked && node.gpu_sharing, after_unlink);
  if (!linked) return;
  if (ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) {
    t->insert(MakeExclusiveKey(node, tie, slot));
  }
  if (!node.gpu_sharing) return;
  UpdateKeys(node, slot, tie, gpus, /*insert=*/true, after_unlink);
}

bool PlacementIndex::UpdateFirstSpreadKey(const NodeStatus& node, uint32_t slot, uint64_t tie,
                                          const std::vector<int>& gpus, bool insert,
                                          bool after_unlink) {
  SpreadOrder* order = spread_[1].load(std::memory_order_acquire);
  PendingSpread& p = pending_spread_;
  if (!insert) {
    p.valid = false;
    if (gpus.size() > p.used.size() || !order->Find(slot, &p.key, &p.pool)) return false;
    for (size_t k = 0; k < gpus.size(); ++k) {
      const GpuStatus& g = node.gpus[gpus[k]];
      p.used[k] = {g.memory_used, g.compute_used};
    }
    order->EraseSlot(slot);
    p.valid = true;
    return true;
  }
  if (!after_unlink || !p.valid || p.key.gpu < 0) return false;
  p.valid = false;
  // The loosest GPU (LooserGpu()). The one before was at least as loose as
  // every other GPU. If it is no tighter now, the loosest is it or one of
  // the changed GPUs; if it is tighter (spread's own place takes the
  // loosest GPU), any healthy GPU may be, and all are read (LoosestGpu()).
  // The pool follows from the changes alone.
  SpreadOrder::Pool pool = p.pool;
  int loosest = p.key.gpu;
  bool loosest_tighter = false;
  for (size_t k = 0; k < gpus.size(); ++k) {
    const GpuStatus& g = node.gpus[gpus[k]];
    const auto [memory_used, compute_used] = p.used[k];
    pool.memory_used += g.memory_used - memory_used;
    pool.compute_used += g.compute_used - compute_used;
    if (gpus[k] == p.key.gpu) {
      // Less free memory, or as much and less free compute, or unhealthy.
      loosest_tighter = g.memory_used > memory_used ||
                        (g.memory_used == memory_used && g.compute_used > compute_used) ||
                        !g.healthy;
    } else if (g.healthy && LooserGpu(node, gpus[k], loosest)) {
      loosest = gpus[k];
    }
  }
  if (loosest_tighter) {
    loosest = LoosestGpu(node);
    if (loosest < 0) return false;
  }
  const int64_t top = node.gpus[loosest].memory_free();
  order->Insert(SpreadKey{policies::Ratio(pool.memory_used, pool.memory),
                          policies::Ratio(pool.compute_used, pool.compute), -top, ~tie, top,
                          slot, loosest},
                pool);
  return true;
}

void PlacementIndex::UpdateKeys(const NodeStatus& node, uint32_t slot, uint64_t tie,
                                const std::vector<int>* gpus, bool insert, bool after_unlink) {
  if (GpuTrees* trees = gpu_.load(std::memory_order_acquire)) {
    auto update = [&](const GpuStatus& g) {
      if (!g.healthy) return;
      const uint32_t pos = trees->PositionOf(slot, g.index);
      if (insert) {
        trees->For(g.model).Insert(ShapeOf(g), pos);
      } else {
        if (const int id = trees->IdOf(g.model); id >= 0) trees->trees[id].Erase(ShapeOf(g), pos);
      }
    };
    if (gpus == nullptr) {
      for (const GpuStatus& g : node.gpus) update(g);
    } else {
      for (int i : *gpus) update(node.gpus[i]);
    }
  }
  uint64_t counts = node_counts_.load(std::memory_order_acquire);
  if (counts == 0) return;
  const bool only_first = counts == 1 && pack_[1].load(std::memory_order_acquire) == nullptr;
  if (only_first && gpus != nullptr &&
      UpdateFirstSpreadKey(node, slot, tie, *gpus, insert, after_unlink)) {
    return;
  }
  const SpreadBase base = MakeSpreadBase(node, !only_first);
  if (base.healthy < 64) counts &= (uint64_t{1} << base.healthy) - 1;
  for (; counts != 0; counts &= counts - 1) {
    const int m = __builtin_ctzll(counts) + 1;
    if (SpreadOrder* t = spread_[m].load(std::memory_order_acquire)) {
      const SpreadKey key = MakeSpreadKey(base, m, tie, slot);
      if (insert) {
        t->Insert(key, base.pool);
      } else {
        t->Erase(key, base.pool);
      }
    }
    if (PackTree* t = pack_[m].load(std::memory_order_acquire)) {
      const PackKey key = MakePackKey(base, m, tie, slot);
      if (insert) {
        t->insert(key);
      } else {
        EraseUnique(*t, key);
      }
    }
  }
}

const PlacementIndex::GpuTrees& PlacementIndex::GpuTreesFor(const ClusterState& state) const {
  if (const GpuTrees* t = gpu_.load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mu_);
  if (const GpuTrees* t = gpu_.load(std::memory_order_acquire)) return *t;
  GpuTrees* trees = MakeGpuTrees(state).release();
  gpu_.store(trees, std::memory_order_release);
  return *trees;
}

std::unique_ptr<PlacementIndex::GpuTrees> PlacementIndex::MakeGpuTrees(
    const ClusterState& state) const {
  auto trees = std::make_unique<GpuTrees>(state);
  for (uint32_t i = 0; i < state.nodes.size(); ++i) {
    const NodeStatus& node = state.nodes[i];
    if (!node.schedulable || !node.gpu_sharing || !Admits(node)) continue;
    for (const GpuStatus& g : node.gpus) {
      if (g.healthy) trees->For(g.model).Insert(ShapeOf(g), trees->PositionOf(i, g.index));
    }
  }
  return trees;
}

const PlacementIndex::ExclusiveTree& PlacementIndex::ExclusiveTreeFor(
    const ClusterState& state) const {
  if (const ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mu_);
  if (const ExclusiveTree* t = exclusive_.load(std::memory_order_acquire)) return *t;
  auto* tree = new ExclusiveTree;
  for (uint32_t i = 0; i < state.nodes.size(); ++i) {
    const NodeStatus& node = state.nodes[i];
    if (node.schedulable && Admits(node)) {
      tree->insert(MakeExclusiveKey(node, state.tie_keys[i], i));
    }
  }
  exclusive_.store(tree, std::memory_order_release);
  return *tree;
}

const SpreadOrder& PlacementIndex::SpreadOrderFor(const ClusterState& state,
                                                  int count) const {
  if (const SpreadOrder* t = spread_[count].load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mu_);
  if (const SpreadOrder* t = spread_[count].load(std::memory_order_acquire)) return *t;
  auto* tree = new SpreadOrder;
  for (uint32_t i = 0; i < state.nodes.size(); ++i) {
    const NodeStatus& node = state.nodes[i];
    if (!node.schedulable || !node.gpu_sharing || !Admits(node)) continue;
    const SpreadBase base = MakeSpreadBase(node, count > 1);
    if (base.healthy >= count) {
      tree->Insert(MakeSpreadKey(base, count, state.tie_keys[i], i), base.pool);
    }
  }
  spread_[count].store(tree, std::memory_order_release);
  node_counts_.fetch_or(uint64_t{1} << (count - 1));
  return *tree;
}

const PlacementIndex::PackTree& PlacementIndex::PackTreeFor(const ClusterState& state,
                                                            int count) const {
  if (const PackTree* t = pack_[count].load(std::memory_order_acquire)) return *t;
  std::lock_guard<std::mutex> lock(mu_);
  if (const PackTree* t = pack_[count].load(std::memory_order_acquire)) return *t;
  auto* tree = new PackTree;
  for (uint32_t i = 0; i < state.nodes.size(); ++i) {
    const NodeStatus& node = state.nodes[i];
    if (!node.schedulable || !node.gpu_sharing || !Admits(node)) continue;
    const SpreadBase base = MakeSpreadBase(node, true);
    if (base.healthy >= count) tree->insert(MakePackKey(base, count, state.tie_keys[i], i));
  }
  pack_[count].store(tree, std::memory_order_release);
  node_counts_.fetch_or(uint64_t{1} << (count - 1));
  return *tree;
}

const PlacementIndex::ShapeTree* PlacementIndex::ShapeTreeFor(const ClusterState& state,
                                                              int count, int64_t memory) const {
  auto find = [&]() -> const ShapeTree* {
    for (const auto& entry : shape_) {
      const ShapeTree* t = entry.load(std::memory_order_acquire);
      if (t == nullptr || (t->count == count && t->memory == memory)) return t;
    }
    return nullptr;
  };
  if (const ShapeTree* t = find()) return t;
  std::lock_guard<std::mutex> lock(mu_);
  if (const ShapeTree* t = find()) return t;
  for (auto& entry : shape_) {
    if (entry.load(std::memory_order_acquire) != nullptr) continue;
    auto* tree = new ShapeTree;
    tree->count = count;
    tree->memory = memory;
    for (uint32_t i = 0; i < state.nodes.size(); ++i) {
      const NodeStatus& node = state.nodes[i];
      if (!node.schedulable || !node.gpu_sharing || !Admits(node)) continue;
      ShapeKey key;
      if (ShapeGpus(node).Key(count, memory, state.tie_keys[i], i, &key)) tree->keys.insert(key);
    }
    entry.store(tree, std::memory_order_release);
    return tree;
  }
  return nullptr;
}

const PlacementIndex* PlacementIndex::ViewFor(const Request& request) const {
  Filter filter;
  filter.selector = request.node_selector;
  filter.models = request.gpu_models;
  std::sort(filter.models.begin(), filter.models.end());
  filter.models.erase(std::unique(filter.models.begin(), filter.models.end()),
                      filter.models.end());
  auto find = [&]() -> const PlacementIndex* {
    for (const auto& entry : views_) {
      const PlacementIndex* view = entry.load(std::memory_order_acquire);
      if (view == nullptr || *view->filter_ == filter) return view;
    }
    return nullptr;
  };
  if (const PlacementIndex* view = find()) return view;
  std::lock_guard<std::mutex> lock(mu_);
  if (const PlacementIndex* view = find()) return view;
  for (auto& entry : views_) {
    if (entry.load(std::memory_order_acquire) != nullptr) continue;
    // Its trees are built on first use, like those of the whole cluster.
    auto* view = new PlacementIndex;
    view->filter_ = std::make_unique<Filter>(std::move(filter));
    entry.store(view, std::memory_order_release);
    return view;
  }
  return nullptr;
}

bool PlacementIndex::Plan(const ClusterState& state, const Cluster& cluster,
                          const Request& request, const Demand& demand, Policy& policy,
                          int* best_slot, NodeChoice* best_choice,
                          bool* none_feasible) const {
  const IndexedPolicy kind = ClassifyPolicy(policy);
  if (kind == IndexedPolicy::kNone) {
    return filter_ == nullptr &&
           memo_.Plan(state, cluster, request, demand, policy, best_slot, best_choice,
                      none_feasible);
  }
  // The per-model GPU trees already restrict single-GPU binpack by model.
  const bool by_model_trees = kind == IndexedPolicy::kBinpack &&
                              demand.kind == Demand::Kind::kShared && demand.gpu_count == 1;
  if (filter_ == nullptr && demand.kind != Demand::Kind::kCpuOnly &&
      (!request.node_selector.empty() || (!request.gpu_models.empty() && !by_model_trees))) {
    if (const PlacementIndex* view = ViewFor(request)) {
      return view->Plan(state, cluster, request, demand, policy, best_slot, best_choice,
                        none_feasible);
    }
  }
  switch (demand.kind) {
    case Demand::Kind::kCpuOnly:  // No GPU key helps: the scores are remembered.
      return filter_ == nullptr &&
             memo_.Plan(state, cluster, request, demand, policy, best_slot, best_choice,
                        none_feasible);
    case Demand::Kind::kExclusive:
      return PlanExclusive(state, cluster, request, demand, policy,
                           kind == IndexedPolicy::kSpread, best_slot, best_choice);
    case Demand::Kind::kShared:
      if (demand.gpu_count < 1 || demand.gpu_count > kMaxGpusPerNode) return false;
      if (kind == IndexedPolicy::kBinpack && demand.gpu_count > 1) {
        return PlanBinpackMulti(state, cluster, request, demand, policy, best_slot,
                                best_choice);
      }
      return kind == IndexedPolicy::kBinpack
                 ? PlanBinpackShared(state, cluster, request, demand, policy, best_slot,
                                     best_choice)
                 : PlanSpreadShared(state, cluster, request, demand, policy, best_slot,
                                    best_choice);
  }
  return false;
}

// Single-GPU binpack: walks the GPUs that could take the share (free memory
// >= m, free compute >= c, allowed model) in ascending (free memory, free
// compute, tie desc, slot) order, merging the trees of the allowed models.
// A node's score is that of its first GPU in this order that fits, so the
// first node that can host the request wins.
bool PlacementIndex::PlanBinpackShared(const ClusterState& state, const Cluster& cluster,
                                       const Request& request, const Demand& demand,
                                       Policy& policy, int* best_slot,
                                       NodeChoice* best_choice) const {
  // One cursor per model's set, at its next (shape, position) pair; the
  // walk takes the least of them, which is the order of the binpack scan.
  struct Cursor {
    uint64_t shape;
    uint32_t pos;
    bool live;
    const GpuBuckets* set;
  };
  absl::InlinedVector<Cursor, 4> cursors;
  const int64_t m = demand.memory_per_gpu;
  const int64_t c = demand.compute_per_gpu;
  auto seek = [](Cursor& cur, uint64_t shape, uint64_t pos) {
    cur.live = cur.set->Next(shape, pos, &cur.shape, &cur.pos);
  };
  auto add = [&](const GpuBuckets& set) {
    cursors.push_back(Cursor{0, 0, false, &set});
    seek(cursors.back(), GpuShape(m, c), 0);
  };
  const GpuTrees& trees = GpuTreesFor(state);
  if (request.gpu_models.empty()) {
    for (const GpuBuckets& set : trees.trees) add(set);
  } else {
    for (size_t i = 0; i < request.gpu_models.size(); ++i) {
      const std::string& model = request.gpu_models[i];
      if (std::find(request.gpu_models.begin(), request.gpu_models.begin() + i, model) !=
          request.gpu_models.begin() + i) {
        continue;
      }
      auto it = trees.ids.find(model);
      if (it != trees.ids.end()) add(trees.trees[it->second]);
    }
  }
  Search search(state, cluster, request, demand, policy);
  absl::flat_hash_set<uint32_t> seen;
  while (true) {
    Cursor* next = nullptr;
    for (Cursor& cur : cursors) {
      if (cur.live && (next == nullptr || cur.shape < next->shape ||
                       (cur.shape == next->shape && cur.pos < next->pos))) {
        next = &cur;
      }
    }
    if (next == nullptr) break;
    if (ShapeCompute(next->shape) < c) {
      seek(*next, GpuShape(ShapeMemory(next->shape), c), 0);
      continue;
    }
    const uint32_t slot = trees.SlotAt(next->pos);
    const int gpu = static_cast<int>(next->pos & ((uint32_t{1} << trees.shift) - 1));
    seek(*next, next->shape, uint64_t{next->pos} + 1);
    if (seen.contains(slot)) continue;
    // The first feasible node wins (M = 1: no topology key, a window of one).
    if (search.ConsiderTightest(slot, gpu) && search.settled()) break;
    seen.insert(slot);
  }
  return search.Finish(best_slot, best_choice);
}

// A node that can host M shares of m has M healthy GPUs with m free, so its
// threshold (M-th largest free) is at least m; its chosen GPUs are M healthy
// ones, so the memory and compute they keep free are at least the key's
// sums minus the demand. Within one threshold the walk order makes that
// bound non-increasing; for nodes whose GPUs all fit (a whole node, say) it
// is exact and the first feasible node ends the threshold.
bool PlacementIndex::PlanBinpackMulti(const ClusterState& state, const Cluster& cluster,
                                      const Request& request, const Demand& demand,
                                      Policy& policy, int* best_slot,
                                      NodeChoice* best_choice) const {
  const int64_t need = demand.gpu_count * demand.memory_per_gpu;
  const int64_t need_compute = demand.gpu_count * demand.compute_per_gpu;
  if (const ShapeTree* shape = ShapeTreeFor(state, demand.gpu_count, demand.memory_per_gpu)) {
    // A node's chosen GPUs keep at least the key's sums free, minus the
    // demand: compute or model limits only narrow the choice. Equal memory
    // means the same free memories, and the key's GPUs have the least
    // compute among such sets. Exact, so the first feasible node wins.
    Search search(state, cluster, request, demand, policy);
    for (const ShapeKey& k : shape->keys) {
      const Score bound{-static_cast<double>(k.memory - need),
                        -static_cast<double>(k.compute - need_compute), 0};
      if (!search.CouldWin(bound, k.slot)) break;
      search.Consider(k.slot);
    }
    return search.Finish(best_slot, best_choice);
  }
  const PackTree& tree = PackTreeFor(state, demand.gpu_count);
  auto from = [](int64_t threshold) {
    return PackKey{threshold, std::numeric_limits<int64_t>::min(),
                   std::numeric_limits<int64_t>::min(), 0, 0};
  };
  Search search(state, cluster, request, demand, policy);
  auto it = tree.lower_bound(from(demand.memory_per_gpu));
  while (it != tree.end()) {
    const int64_t threshold = it->threshold;
    for (; it != tree.end() && it->threshold == threshold; ++it) {
      const Score bound{-static_cast<double>(it->low_memory - need),
                        -static_cast<double>(it->low_compute - need_compute), 0};
      if (!search.CouldWin(bound, it->slot)) break;
      search.Consider(it->slot);
    }
    if (it != tree.end() && it->threshold == threshold) it = tree.lower_bound(from(threshold + 1));
  }
  return search.Finish(best_slot, best_choice);
}

// Walks nodes from the least used. A node's score is at most (its two
// ratios, sum of its M largest healthy free memories - M m), and the walk
// order makes that bound non-increasing, so the first node that cannot beat
// the best found ends the walk.
bool PlacementIndex::PlanSpreadShared(const ClusterState& state, const Cluster& cluster,
                                      const Request& request, const Demand& demand,
                                      Policy& policy, int* best_slot,
                                      NodeChoice* best_choice) const {
  const SpreadOrder& order = SpreadOrderFor(state, demand.gpu_count);
  const int64_t need = demand.gpu_count * demand.memory_per_gpu;
  Search search(state, cluster, request, demand, policy);
  order.ForEach([&](const SpreadKey& k) {
    const Score bound{-k.memory_ratio, -k.compute_ratio,
                      static_cast<double>(-k.neg_top - need)};
    if (!search.CouldWin(bound, k.slot)) return false;
    if (k.kth < demand.memory_per_gpu) return true;  // Fewer than M GPUs with m free.
    if (demand.gpu_count == 1) {
      search.ConsiderLoosest(k);
    } else {
      search.Consider(k.slot);
    }
    return true;
  });
  return search.Finish(best_slot, best_choice);
}

// Exclusive scores depend on the node only: (-idle, -free) for binpack,
// (+idle, +free) for spread; the first feasible node in that order wins.
bool PlacementIndex::PlanExclusive(const ClusterState& state, const Cluster& cluster,
                                   const Request& request, const Demand& demand,
                                   Policy& policy, bool spread, int* best_slot,
                                   NodeChoice* best_choice) const {
  const ExclusiveTree& exclusive = ExclusiveTreeFor(state);
  Search search(state, cluster, request, demand, policy);
  const int32_t k = demand.gpu_count;
  if (!spread) {
    // Scores fall along the walk; nodes of equal (idle, free) score equal,
    // so the walk goes on past the first feasible node only while one of
    // them might offer a better connected set.
    const ExclusiveKey low{std::numeric_limits<int64_t>::min(), 0, 0, k};
    for (auto it = exclusive.lower_bound(low); it != exclusive.end(); ++it) {
      const Score bound{-static_cast<double>(it->idle), -static_cast<double>(it->free_memory), 0};
      if (!search.CouldWin(bound, it->slot)) break;
      if (search.Consider(it->slot) && search.settled()) break;
    }
    return search.Finish(best_slot, best_choice);
  }
  auto hi = exclusive.end();
  while (hi != exclusive.begin() && !search.found()) {
    const ExclusiveKey& last = *std::prev(hi);
    if (last.idle < k) break;
    auto lo = exclusive.lower_bound(ExclusiveKey{last.free_memory, 0, 0, last.idle});
    for (auto it = lo; it != hi; ++it) {  // Equal scores: see the binpack walk.
      if (search.Consider(it->slot) && search.settled()) break;
    }
    hi = lo;
  }
  return search.Finish(best_slot, best_choice);
}

bool PlacementIndex::Consistent(const ClusterState& state) const {
  if (!memo_.Consistent(state)) return false;
  for (const auto& entry : views_) {
    const PlacementIndex* view = entry.load();
    if (view == nullptr) break;
    if (!view->Consistent(state)) return false;
  }
  PlacementIndex fresh;
  if (filter_ != nullptr) fresh.filter_ = std::make_unique<Filter>(*filter_);
  if (exclusive_.load() != nullptr) fresh.exclusive_.store(new ExclusiveTree);
  for (int m = 0; m < kSpreadSlots; ++m) {
    if (spread_[m].load() != nullptr) fresh.spread_[m].store(new SpreadOrder);
    if (pack_[m].load() != nullptr) fresh.pack_[m].store(new PackTree);
  }
  for (int i = 0; i < kShapeSlots; ++i) {
    if (const ShapeTree* t = shape_[i].load()) {
      auto* empty = new ShapeTree;
      empty->count = t->count;
      empty->memory = t->memory;
      fresh.shape_[i].store(empty);
    }
  }
  fresh.node_counts_.store(node_counts_.load());
  fresh.Rebuild(state);
  if (const ExclusiveTree* have = exclusive_.load()) {
    if (!SameTree(*have, *fresh.exclusive_.load(), ExclusiveLess())) return false;
  }
  if (const GpuTrees* have = gpu_.load()) {
    const std::unique_ptr<GpuTrees> want = MakeGpuTrees(state);
    // Every node has a key of its own, the keys follow the tie-break order,
    // and the sets hold the same GPUs (keys may differ from fresh ones).
    const size_t keyed = static_cast<size_t>(std::count_if(
        have->slot_of.begin(), have->slot_of.end(),
        [](uint32_t s) { return s != GpuTrees::kNoSlot; }));
    if (have->key.size() != state.nodes.size() || keyed != state.nodes.size() ||
        have->order != want->order) {
      return false;
    }
    for (size_t r = 0; r < have->order.size(); ++r) {
      const uint32_t slot = have->order[r];
      if (have->slot_of[have->key[slot]] != slot) return false;
      if (r > 0 && have->key[have->order[r - 1]] >= have->key[slot]) return false;
    }
    auto pairs = [](const GpuTrees& trees, const std::string& model) {
      std::vector<std::tuple<uint64_t, uint32_t, uint32_t>> all;
      if (const int id = trees.IdOf(model); id >= 0) {
        const uint32_t mask = (uint32_t{1} << trees.shift) - 1;
        trees.trees[id].ForEach([&](uint64_t shape, uint32_t pos) {
          all.emplace_back(shape, trees.SlotAt(pos), pos & mask);
        });
      }
      std::sort(all.begin(), all.end());
      return all;
    };
    for (const GpuTrees* side : {have, static_cast<const GpuTrees*>(want.get())}) {
      for (const std::string& model : side->names) {
        if (pairs(*have, model) != pairs(*want, model)) return false;
      }
    }
  }
  for (int m = 0; m < kSpreadSlots; ++m) {
    if (const SpreadOrder* have = spread_[m].load()) {
      // Whole keys: the fields not ordered on (kth, gpu) are read too.
      auto whole = [](const SpreadKey& k) {
        return std::make_tuple(k.memory_ratio, k.compute_ratio, k.neg_top, k.inv_tie, k.kth,
                               k.slot, k.gpu);
      };
      const std::vector<SpreadKey> keys = have->Keys();
      const std::vector<SpreadKey> want = fresh.spread_[m].load()->Keys();
      auto same = [&](const SpreadKey& a, const SpreadKey& b) { return whole(a) == whole(b); };
      if (!have->Consistent() ||
          !std::equal(keys.begin(), keys.end(), want.begin(), want.end(), same)) {
        return false;
      }
    }
    const PackTree* have_pack = pack_[m].load();
    if (have_pack != nullptr && !SameTree(*have_pack, *fresh.pack_[m].load(), PackLess())) {
      return false;
    }
  }
  for (int i = 0; i < kShapeSlots; ++i) {
    const ShapeTree* have = shape_[i].load();
    if (have != nullptr &&
        !SameTree(have->keys, fresh.shape_[i].load()->keys, ShapeLess())) {
      return false;
    }
  }
  return true;
}

}  // namespace gpushare::internal
