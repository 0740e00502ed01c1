// The score memo (see score_memo.h).

#include "src/internal/score_memo.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "src/fgd/kernel.h"
#include "src/internal/btree_erase.h"
#include "src/internal/choice_array.h"
#include "src/internal/cluster_state.h"
#include "src/internal/fit_summary.h"
#include "src/internal/node_race.h"
#include "src/internal/placement_index.h"
#include "src/internal/score_sets.h"
#include "src/policies/gpu_order.h"
#include "src/topology/node_gpus.h"

namespace gpushare::internal {
namespace {

// A tree entry, on the policy's keys (PolicyKeys(); the topology key decides
// only later, in NodeRace). The kernel policies' scores have only a primary
// part (the others are 0), so their keys keep only that: smaller keys make
// wider, and so shallower, trees.
template <typename S>
struct Key {
  S score;
  uint64_t tie;
  uint32_t slot;
};
using PrimaryKey = Key<double>;
using FullKey = Key<Score>;

// The scan's ranking: higher policy score, then larger tie key, then lower
// slot (then NodeRace's window decides on the topology key).
struct KeyLess {
  template <typename S>
  bool operator()(const Key<S>& a, const Key<S>& b) const {
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

// What of a topology need a shape depends on: the mode and objective decide
// the GPUs and the score's topology key (ApplyTopology), a required minimum
// link also feasibility. The objective without a mode of kNone, and the
// minimum link without kRequire, change nothing, so they take their defaults.
TopologyNeed NeedOfShape(const TopologyNeed& need) {
  TopologyNeed kept;
  kept.mode = need.mode;
  if (need.mode != TopologyNeed::Mode::kNone) kept.objective = need.objective;
  if (need.mode == TopologyNeed::Mode::kRequire) kept.min_link = need.min_link;
  return kept;
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
  const TopologyNeed need = NeedOfShape(request.topology);
  for (int64_t v : {static_cast<int64_t>(need.mode), static_cast<int64_t>(need.objective),
                    static_cast<int64_t>(need.min_link.kind),
                    static_cast<int64_t>(need.min_link.nvlinks)}) {
    AppendNumber(&key, v);
  }
  return key;
}

// Whether `models` are in order and without repeats, as ShapeKey() puts them.
bool SortedAndDistinct(const std::vector<std::string>& models) {
  for (size_t i = 1; i < models.size(); ++i) {
    if (!(models[i - 1] < models[i])) return false;
  }
  return true;
}

// The fields of ShapeKey() that the request has, with the demand, for a
// request whose GPU models are SortedAndDistinct(): the shape's key
// without building it (a string, and a copy of the GPU models).
class ShapeFields {
 public:
  ShapeFields(const Request& request, const Demand& demand)
      : request_(request), demand_(demand), need_(NeedOfShape(request.topology)) {}
  const Request& request() const { return request_; }
  const Demand& demand() const { return demand_; }

  uint64_t Hash() const {
    return absl::HashOf(demand_.kind, demand_.gpu_count, demand_.memory_per_gpu,
                        demand_.compute_per_gpu, demand_.cpu, demand_.host_memory,
                        request_.gpu_models, request_.node_selector, need_.mode,
                        need_.objective, need_.min_link.kind, need_.min_link.nvlinks);
  }
  // Whether a shape of `shape_request` (GPU models as ShapeKey() keeps them,
  // topology need as NeedOfShape() does) and `shape_demand` has this key.
  bool Of(const Request& shape_request, const Demand& shape_demand) const {
    const Demand& a = demand_;
    const Demand& b = shape_demand;
    const TopologyNeed& need = shape_request.topology;
    return a.kind == b.kind && a.gpu_count == b.gpu_count &&
           a.memory_per_gpu == b.memory_per_gpu && a.compute_per_gpu == b.compute_per_gpu &&
           a.cpu == b.cpu && a.host_memory == b.host_memory &&
           request_.gpu_models == shape_request.gpu_models &&
           request_.node_selector == shape_request.node_selector && need_.mode == need.mode &&
           need_.objective == need.objective && need_.min_link == need.min_link;
  }

 private:
  const Request& request_;
  const Demand& demand_;
  const TopologyNeed need_;
};

// SetShapeHashForTesting()'s hash; nullptr: ShapeFields::Hash().
ScoreMemo::ShapeHash shape_hash_for_testing = nullptr;

// The hash of a request's shape in Memo::by_hash.
uint64_t HashOfShape(const ShapeFields& fields) {
  return shape_hash_for_testing != nullptr
             ? shape_hash_for_testing(fields.request(), fields.demand())
             : fields.Hash();
}

}  // namespace

void ScoreMemo::SetShapeHashForTesting(ShapeHash hash) { shape_hash_for_testing = hash; }

// How many change-log entries ahead a shape's walk fetches verdicts.
constexpr size_t kPrefetchAhead = 8;
// Stale keys a shape's tree may hold beyond as many as it has feasible ones.
constexpr size_t kStaleSlack = 64;

struct ScoreMemo::Memo {
  // The verdicts of one shape.
  struct Shape {
    Request request;  // Its GPU models and node selector; no id.
    Demand demand;
    // Kernel policies: the shapes a kernel evaluation cannot tell apart
    // (they differ only in host memory or node selector, which decide
    // feasibility alone) share a group and its evaluations (Memo::groups).
    uint32_t group = 0;
    // Each node's feasible verdict, by slot, meaningful where live: the
    // primary part of its score (the others, when the policy sets them, and
    // the topology key, when the shape gets one, are kept beside: rest,
    // topology) and the GPUs it chose. Whether the node is feasible at all
    // is a bit (live): a walk that finds a node infeasible then clears a bit
    // in a small array, and leaves the verdict, likely out of cache, alone.
    // No stamp per verdict: the shape's walk of the change log meets exactly
    // the nodes changed since its last one (and a full walk re-scores every
    // node).
    ChoiceArray<false> verdicts;
    std::vector<uint64_t> live;  // By slot, a bit: the node is feasible.
    bool Live(uint32_t slot) const { return live[slot >> 6] >> (slot & 63) & 1; }
    // The node is infeasible now (its key, if it had one, is stale): a walk's
    // refusal, without a branch on whether it was feasible.
    void Refuse(uint32_t slot) {
      uint64_t& word = live[slot >> 6];
      feasible -= word >> (slot & 63) & 1;
      word &= ~(uint64_t{1} << (slot & 63));
    }
    void SetLive(uint32_t slot) { live[slot >> 6] |= uint64_t{1} << (slot & 63); }
    // Policies other than the kernel ones: each slot's secondary and
    // tertiary score (the kernel ones set only the primary).
    bool full = false;
    std::vector<std::array<double, 2>> rest;
    // Shapes that get a topology key (TopologyKeyCap() > 0): each slot's.
    bool keyed = false;
    std::vector<double> topology;

    // The policy's keys of the slot's score (PolicyKeys()).
    Score PolicyScoreAt(uint32_t slot) const {
      Score s;
      s.primary = verdicts.score(slot);
      if (full) {
        s.secondary = rest[slot][0];
        s.tertiary = rest[slot][1];
      }
      return s;
    }
    Score ScoreAt(uint32_t slot) const {
      Score s = PolicyScoreAt(slot);
      if (keyed) s.topology = topology[slot];
      return s;
    }
    // The feasible verdicts' keys, in the scan's ranking, and stale keys
    // among them: a verdict that changes leaves its old key in place (it is
    // dropped when met at the front, or by SweepIfStale()), which spares a
    // tree descent per change. Held() tells them apart. After each Plan(),
    // at most 2 * feasible + kStaleSlack keys.
    absl::btree_set<PrimaryKey, KeyLess> tree;     // Kernel policies, by_sets false.
    absl::btree_set<FullKey, KeyLess> full_tree;  // The others.
    // Kernel policies keep their keys in ScoreSets while they have at most
    // ScoreSets::kMaxScores distinct scores (the whole-number ones do), by
    // the node ranks Data::rank_of had at Data::ranks_version sets_ranks;
    // in the tree from the first score past that on. A bit is held when its
    // node is feasible with that score (Holds()), as a key is.
    bool by_sets = false;
    ScoreSets sets;
    uint64_t sets_ranks = 0;
    // Sets every feasible verdict's bit in sets, for ranks `rank_of` (the
    // order changed: a node was added). Their scores are among those the
    // sets held, so no Add() fails; should one, the keys go to the tree.
    void FillSets(const std::vector<uint32_t>& rank_of, const std::vector<uint64_t>& tie_keys) {
      sets.Reset(static_cast<uint32_t>(rank_of.size()));
      for (uint32_t slot = 0; slot < verdicts.size(); ++slot) {
        if (Live(slot) && !sets.Add(verdicts.score(slot), rank_of[slot])) {
          MoveToTree(tie_keys);
          return;
        }
      }
    }
    // From the sets to the tree, for good.
    void MoveToTree(const std::vector<uint64_t>& tie_keys) {
      by_sets = false;
      sets = ScoreSets();
      std::vector<PrimaryKey> keys;
      keys.reserve(feasible);
      for (uint32_t slot = 0; slot < verdicts.size(); ++slot) {
        if (Live(slot)) keys.push_back(PrimaryKey{verdicts.score(slot), tie_keys[slot], slot});
      }
      std::sort(keys.begin(), keys.end(), KeyLess());
      tree = absl::btree_set<PrimaryKey, KeyLess>(keys.begin(), keys.end());
    }
    size_t feasible = 0;                          // Feasible verdicts.
    // Whether the node in `slot` is feasible with primary score `score`:
    // a kernel shape's key, or bit, of that score is held, not stale.
    bool Holds(uint32_t slot, double score) const {
      return Live(slot) && verdicts.score(slot) == score;
    }
    bool Held(const PrimaryKey& k) const { return Holds(k.slot, k.score); }
    bool Held(const FullKey& k) const {
      return Live(k.slot) && PolicyScoreAt(k.slot) == k.score;
    }
    // Drops the stale keys once they outnumber the feasible ones (each
    // change leaves at most one, so this is O(1) a change, amortised): the
    // tree is built again from the keys held, in order, which costs a
    // fraction of erasing the stale ones one by one.
    template <typename Tree>
    void SweepIfStale(Tree& t) {
      if (t.size() <= 2 * feasible + kStaleSlack) return;
      std::vector<typename Tree::value_type> held;
      held.reserve(feasible);
      for (const auto& k : t) {
        if (Held(k)) held.push_back(k);
      }
      t = Tree(held.begin(), held.end());  // In order: each key goes at the end.
    }
    // Offers the nodes of the held keys of the best score in `t`, in order,
    // until offer(slot) returns false; drops stale keys on the way (all of
    // them when they outnumber the feasible ones, as SweepIfStale(); else
    // those in front). Assumes a key is held (feasible > 0).
    template <typename Tree, typename Offer>
    void OfferBest(Tree& t, Offer&& offer) {
      SweepIfStale(t);
      // The stale keys in front of the first held one (one is held) go in
      // one range erase: the B-tree removes a leaf's run of them at once and
      // rebalances once, where erasing them one by one rebalances for each.
      auto first = t.begin();
      while (!Held(*first)) ++first;
      if (first != t.begin()) t.erase(t.begin(), first);
      const auto top = t.begin()->score;
      for (auto k = t.begin(); k != t.end() && k->score == top; ++k) {
        if (Held(*k) && !offer(k->slot)) break;
      }
    }
    uint64_t cursor = 0;  // Position in the change log it has applied.
    bool fresh = true;    // Nothing applied yet: re-score every node.
    uint64_t last_use = 0;
    std::string key;               // Its key in Memo::shapes.
    std::optional<uint64_t> hash;  // Its key in Memo::by_hash, when there.
  };

  const std::type_info* type = nullptr;
  std::optional<fgd::CompiledTarget> target;
  absl::flat_hash_map<std::string, std::unique_ptr<Shape>> shapes;
  // Shapes by ShapeFields::Hash(), for the requests whose GPU models are
  // in order: Plan() finds their shape without building its key (most of
  // the cost of finding it), and checks the fields. A shape is here once a
  // request so listed has asked for it, unless another shape holds the hash.
  absl::flat_hash_map<uint64_t, Shape*> by_hash;
  uint64_t last_use = 0;
  // Kernel policies: what they derive from each node alone (F_N(T), for
  // fgdcpu also its CPU-bound form, and the target types its GPU models
  // allow, with a target; the tags of what it holds), and the change stamp
  // it belongs to (~0: none), shared by the shapes that re-score the node.
  // Kept only by the policies that derive any (a target, or tags): for the
  // others, reading a node's empty facts at openb x8 cost a cache miss per
  // evaluation, 3% of a place.
  struct SlotFacts {
    uint64_t stamp = ~uint64_t{0};
    double frag = -1;
    double frag_cpu = -1;
    uint64_t gpu_tags = 0;
    bool tags_known = false;
    bool allowed_known = false;
    bool counts_known = false;
  };
  std::vector<SlotFacts> facts;
  std::vector<uint8_t> allowed;         // types x slot.
  std::vector<fgd::TypeCounts> counts;  // types x slot (fgd::PrepareCounts()).
  // Kernel policies: per group of shapes (Shape::group), per slot, the
  // evaluation of the node at a change stamp, so that the shapes of a group
  // evaluate a changed node once.
  struct Group {
    ChoiceArray<true> evaluations;  // By slot.
    int shapes = 0;                 // Shapes in it; 0: free for reuse.
    std::string key;
  };
  absl::flat_hash_map<std::string, uint32_t> group_ids;
  std::vector<Group> groups;
  std::vector<uint32_t> free_groups;
  // binpack and spread, CPU-only requests: their score is the node's own
  // (its CPU and host-memory use, whatever the request), so one order of the
  // nodes, kept up to date from the change log, serves all such requests; a
  // request walks it from the front to the first node that fits. spread
  // ranks the least-used nodes first, and those nearly always fit: one tree.
  // binpack ranks the fullest first, which mostly do not: one tree per node
  // CPU capacity, where the nodes with enough free CPU for a request are
  // those whose score (the CPU ratio) is at most (capacity - request) /
  // capacity, a suffix of the tree that one lower_bound finds.
  struct CpuOrder {
    std::vector<Score> scores;      // By slot: the policy keys.
    std::vector<uint64_t> stamps;   // The node's change stamp they were made at; 0: never.
    std::vector<int64_t> capacity;  // By slot: the key of its tree.
    absl::btree_map<int64_t, absl::btree_set<FullKey, KeyLess>> trees;
    bool by_capacity = false;  // binpack; spread keeps every node under key 0.
    // binpack: false once a score was not the CPU ratio the suffix rests on
    // (the request's own shape answers from then on).
    bool ratio_holds = true;
    uint64_t cursor = 0;
    bool fresh = true;
  };
  std::unique_ptr<CpuOrder> cpu_order;

  // The group of shapes with kernel key `key`, one shape more in it.
  uint32_t JoinGroup(std::string key) {
    auto [it, made] = group_ids.try_emplace(key, 0);
    if (made) {
      if (free_groups.empty()) {
        it->second = static_cast<uint32_t>(groups.size());
        groups.emplace_back();
      } else {
        it->second = free_groups.back();
        free_groups.pop_back();
      }
      groups[it->second].key = std::move(key);
    }
    ++groups[it->second].shapes;
    return it->second;
  }
  // Erases a shape, and its group's evaluations when it was the last of the
  // group; returns the verdicts freed.
  int64_t EraseShape(absl::flat_hash_map<std::string, std::unique_ptr<Shape>>::iterator it) {
    if (it->second->hash.has_value()) by_hash.erase(*it->second->hash);
    int64_t freed = static_cast<int64_t>(it->second->verdicts.size());
    if (!it->second->full) {
      Group& g = groups[it->second->group];
      if (--g.shapes == 0) {
        freed += static_cast<int64_t>(g.evaluations.size());
        group_ids.erase(g.key);
        g = Group{};
        free_groups.push_back(it->second->group);
      }
    }
    shapes.erase(it);
    return freed;
  }
  // Every verdict held, the groups' included.
  int64_t Entries() const {
    int64_t held = 0;
    for (const auto& [key, shape] : shapes) held += static_cast<int64_t>(shape->verdicts.size());
    for (const Group& g : groups) held += static_cast<int64_t>(g.evaluations.size());
    if (cpu_order != nullptr) held += static_cast<int64_t>(cpu_order->scores.size());
    return held;
  }

  Memo() = default;
  Memo(const Memo& other)
      : type(other.type), target(other.target), last_use(other.last_use), facts(other.facts),
        allowed(other.allowed), counts(other.counts), group_ids(other.group_ids),
        groups(other.groups), free_groups(other.free_groups) {
    for (const auto& [key, shape] : other.shapes) {
      auto copy = std::make_unique<Shape>(*shape);
      if (copy->hash.has_value()) by_hash.emplace(*copy->hash, copy.get());
      shapes.emplace(key, std::move(copy));
    }
    if (other.cpu_order != nullptr) cpu_order = std::make_unique<CpuOrder>(*other.cpu_order);
  }
};

struct ScoreMemo::Data {
  std::vector<uint64_t> stamps;  // Per slot; bumped by every Touch().
  // Per slot, while some memo exists (made with the first, kept by Touch()).
  std::vector<FitSummary> summaries;
  // Slots touched, in order: entry i is change number log_base + i. Kept
  // only while some memo exists. A slot's earlier entries are overwritten
  // with kSuperseded when it is logged again: a shape that would meet them
  // meets the latest one too, so a walk visits each changed slot once. When
  // the log outgrows twice the node count, CompactLog() drops those entries
  // (at least half of them) and moves every reader's cursor along, so that a
  // shape that was not asked for a while still walks only what changed; a
  // full scan of every stamp would read all of its verdicts.
  std::vector<uint32_t> log;
  uint64_t log_base = 0;
  std::vector<uint64_t> logged;  // Per slot: 1 + the change number of its latest entry; 0: none.
  static constexpr uint32_t kSuperseded = ~uint32_t{0};
  std::vector<std::unique_ptr<Memo>> memos;
  uint64_t clock = 0;
  int64_t entries = 0;  // Verdicts held, over every shape.
  // The nodes in the tie order (TieBefore()), for the shapes' ScoreSets:
  // slot_at[r] is the node of rank r, rank_of[slot] its rank. Made for the
  // node count of the last EnsureRanks(), numbered by ranks_version (each
  // node added or removed moves the ranks after its own: a new version).
  std::vector<uint32_t> rank_of, slot_at;
  uint64_t ranks_version = 0;
  // The rank each version from inserts_base + 1 on inserted, in order
  // (inserted[v - inserts_base - 1] for version v): a shape whose sets are
  // for a version in that span moves its bits along (ScoreSets::InsertRank())
  // instead of filling them again. At most kMaxInserts kept.
  std::vector<uint32_t> inserted;
  uint64_t inserts_base = 0;
  static constexpr size_t kMaxInserts = 64;

  void EnsureRanks(const ClusterState& state, uint32_t n) {
    if (rank_of.size() != n) Rank(state, n);
  }
  // Brings a shape's sets to the ranks of today's nodes: behind by a few
  // inserted ranks, it moves their bits along; else it fills them again.
  // (These two are cold calls of their own: inlined, they made every Plan()
  // 2-4% dearer at openb x1 and x8, though they run only after a node joins;
  // docs/performance.md, "Nodes that join a running cluster".)
  __attribute__((cold, noinline)) void SyncSets(Memo::Shape& shape,
                                                const ClusterState& state, uint32_t n) const {
    if (shape.sets_ranks >= inserts_base &&
        shape.sets.num_ranks() + (ranks_version - shape.sets_ranks) == n) {
      for (uint64_t v = shape.sets_ranks + 1; v <= ranks_version; ++v) {
        shape.sets.InsertRank(inserted[v - inserts_base - 1]);
      }
    } else {
      shape.FillSets(rank_of, state.tie_keys);
    }
    shape.sets_ranks = ranks_version;
  }
  // Ranks the n nodes: the nodes added since (at most kMaxInserts) go in one
  // by one, a version each; else, and on the first call, a full sort.
  __attribute__((cold, noinline)) void Rank(const ClusterState& state, uint32_t n) {
    auto before = [&](uint32_t a, uint32_t b) { return TieBefore(state.tie_keys, a, b); };
    const size_t added = n - rank_of.size();
    if (rank_of.empty() || n < rank_of.size() || added > kMaxInserts) {
      slot_at.resize(n);
      for (uint32_t slot = 0; slot < n; ++slot) slot_at[slot] = slot;
      std::sort(slot_at.begin(), slot_at.end(), before);
      rank_of.resize(n);
      for (uint32_t r = 0; r < n; ++r) rank_of[slot_at[r]] = r;
      ++ranks_version;
      inserted.clear();
      inserts_base = ranks_version;
      return;
    }
    // A few nodes added (slots from rank_of.size() on): each goes into the
    // order where it belongs, one version each.
    for (uint32_t slot = static_cast<uint32_t>(rank_of.size()); slot < n; ++slot) {
      const auto at = std::lower_bound(slot_at.begin(), slot_at.end(), slot, before);
      const uint32_t r = static_cast<uint32_t>(at - slot_at.begin());
      slot_at.insert(at, slot);
      rank_of.push_back(r);
      for (uint32_t q = r + 1; q <= slot; ++q) rank_of[slot_at[q]] = q;
      ++ranks_version;
      if (inserted.size() == kMaxInserts) {
        inserted.erase(inserted.begin());
        ++inserts_base;
      }
      inserted.push_back(r);
    }
  }

  Data() = default;
  Data(const Data& other)
      : stamps(other.stamps), summaries(other.summaries), log(other.log),
        log_base(other.log_base), logged(other.logged), clock(other.clock),
        entries(other.entries), rank_of(other.rank_of), slot_at(other.slot_at),
        ranks_version(other.ranks_version), inserted(other.inserted),
        inserts_base(other.inserts_base) {
    for (const auto& m : other.memos) memos.push_back(std::make_unique<Memo>(*m));
  }

  // Calls refresh(slot) for every slot below n that changed since *cursor
  // (every slot when *fresh, or when the log no longer reaches back to
  // *cursor), and moves *cursor to the end of the log; stops, leaving the
  // cursor, at the first refresh() that returns false, and returns false.
  // A walk of the log fetches element slot of each of `arrays`
  // kPrefetchAhead entries before refresh(slot): a reader that was not asked
  // for a while meets many changes, each in a slot whose entry is likely out
  // of cache, and fetching them ahead overlaps the misses. (Arrays, not a
  // callback: GCC at -O2 drops a call whose only effect is a prefetch.)
  template <typename Refresh, typename... Arrays>
  bool WalkChanges(uint64_t* cursor, bool* fresh, uint32_t n, Refresh&& refresh,
                   const Arrays*... arrays) {
    if (*fresh || *cursor < log_base) {
      for (uint32_t slot = 0; slot < n; ++slot) {
        if (!refresh(slot)) return false;
      }
    } else {
      const uint32_t* entries = log.data() + (*cursor - log_base);
      const size_t count = log_base + log.size() - *cursor;
      // A superseded entry fetches the last slot's elements, which costs less
      // than the branch that would skip it (mispredicted often).
      const size_t ahead_end = n > 0 && count > kPrefetchAhead ? count - kPrefetchAhead : 0;
      for (size_t i = 0; i < count; ++i) {
        if (i < ahead_end) {
          const uint32_t e = std::min(entries[i + kPrefetchAhead], n - 1);
          (__builtin_prefetch(arrays + e), ...);
        }
        if (entries[i] < n && !refresh(entries[i])) return false;  // Not kSuperseded.
      }
    }
    *cursor = log_base + log.size();
    *fresh = false;
    return true;
  }

  // Keeps only the log's latest entry of each slot, renumbered from past the
  // last change number (so that numbers only grow), and moves every cursor
  // that reaches into the log to the same place among the entries kept.
  void CompactLog() {
    const uint64_t old_base = log_base;
    const size_t old_size = log.size();
    std::vector<uint32_t> kept_before(old_size + 1);
    size_t kept = 0;
    for (size_t i = 0; i < old_size; ++i) {
      kept_before[i] = static_cast<uint32_t>(kept);
      if (log[i] != kSuperseded) log[kept++] = log[i];
    }
    kept_before[old_size] = static_cast<uint32_t>(kept);
    log.resize(kept);
    log_base = old_base + old_size;
    for (size_t j = 0; j < kept; ++j) logged[log[j]] = log_base + j + 1;
    auto move = [&](uint64_t* cursor, bool fresh) {
      // A cursor behind the log stays behind it (its reader walks every
      // node); one in it keeps the changes it has not met.
      if (!fresh && *cursor >= old_base) *cursor = log_base + kept_before[*cursor - old_base];
    };
    for (const auto& m : memos) {
      for (auto& [key, shape] : m->shapes) move(&shape->cursor, shape->fresh);
      if (m->cpu_order != nullptr) move(&m->cpu_order->cursor, m->cpu_order->fresh);
    }
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
    entries -= owner->EraseShape(it);
    return true;
  }

  // ScoreMemo::Plan()'s steps, in the order it takes them (a CPU-only
  // request may be answered by PlanFromCpuOrder() between MemoOf() and
  // ShapeOf()); each called with mu_ held, and defined just above Plan().
  void CatchUpNodes(const ClusterState& state, uint32_t n);
  Memo* MemoOf(const Policy& policy, const fgd::CompiledTarget* target);
  Memo::Shape& ShapeOf(Memo* memo, const Request& request, const Demand& demand, bool kernel,
                       uint32_t n);
  void SizeShape(Memo* memo, Memo::Shape& shape, const ClusterState& state, uint32_t n,
                 bool kernel);
  class ShapeWalk;
  bool RefreshShape(Memo* memo, Memo::Shape& shape, const ClusterState& state,
                    const Cluster& cluster, Policy& policy, fgd::KernelPolicy* kernel,
                    const fgd::CompiledTarget* target, int gpu_count, uint32_t n);
  void PickWinner(const ClusterState& state, Memo::Shape& shape, bool kernel, int* best_slot,
                  NodeChoice* best_choice) const;
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

void ScoreMemo::Touch(uint32_t slot, const NodeStatus& node) {
  Data& d = *data_;
  if (slot >= d.stamps.size()) d.stamps.resize(slot + 1, 0);
  ++d.stamps[slot];
  if (d.memos.empty()) return;  // Shapes made later walk every node.
  if (slot >= d.summaries.size()) d.summaries.resize(slot + 1);
  d.summaries[slot] = FitSummary(node);
  if (slot >= d.logged.size()) d.logged.resize(slot + 1, 0);
  if (d.logged[slot] > d.log_base) d.log[d.logged[slot] - 1 - d.log_base] = Data::kSuperseded;
  d.log.push_back(slot);
  d.logged[slot] = d.log_base + d.log.size();
  if (d.log.size() > std::max<size_t>(2 * d.stamps.size(), 4096)) d.CompactLog();
}

void ScoreMemo::PrefetchTouch(uint32_t slot) const {
  const Data& d = *data_;
  if (slot < d.stamps.size()) __builtin_prefetch(&d.stamps[slot], 1);
  if (d.memos.empty()) return;
  if (slot < d.summaries.size()) __builtin_prefetch(&d.summaries[slot], 1);
  if (slot < d.logged.size()) __builtin_prefetch(&d.logged[slot], 1);
}

void ScoreMemo::Clear() { data_ = std::make_unique<Data>(); }

void ScoreMemo::NodeRemoved(uint32_t slot) {
  Data& d = *data_;
  auto erase = [slot](auto& v) {
    if (slot < v.size()) v.erase(v.begin() + slot);
  };
  // Keys of a tree without the removed node's, the later slots renumbered
  // (an order kept: the tie order falls back on the slot, which keeps its
  // order); stale keys are dropped on the way.
  auto renumber = [slot](auto& tree, auto held) {
    using Tree = std::decay_t<decltype(tree)>;
    std::vector<typename Tree::value_type> keys;
    keys.reserve(tree.size());
    for (auto k : tree) {
      if (k.slot == slot || !held(k)) continue;
      k.slot -= k.slot > slot;
      keys.push_back(k);
    }
    tree = Tree(keys.begin(), keys.end());
  };
  erase(d.stamps);
  erase(d.summaries);
  erase(d.logged);
  for (uint32_t& e : d.log) {
    if (e == Data::kSuperseded) continue;
    if (e == slot) {
      e = Data::kSuperseded;
    } else {
      e -= e > slot;
    }
  }
  // The ranks: the node's goes, those above it move down. Shapes whose sets
  // are for today's ranks drop it too; the others fill theirs again.
  const uint64_t ranked_version = d.ranks_version;
  std::optional<uint32_t> removed_rank;
  if (slot < d.rank_of.size()) {
    const uint32_t r = d.rank_of[slot];
    removed_rank = r;
    d.slot_at.erase(d.slot_at.begin() + r);
    for (uint32_t& s : d.slot_at) s -= s > slot;
    d.rank_of.erase(d.rank_of.begin() + slot);
    for (uint32_t& q : d.rank_of) q -= q > r;
    ++d.ranks_version;
    d.inserted.clear();
    d.inserts_base = d.ranks_version;
  }
  for (const auto& m : d.memos) {
    const size_t types = m->target.has_value() ? m->target->types.size() : 0;
    erase(m->facts);
    if ((slot + 1) * types <= m->allowed.size()) {
      m->allowed.erase(m->allowed.begin() + slot * types,
                       m->allowed.begin() + (slot + 1) * types);
    }
    if ((slot + 1) * types <= m->counts.size()) {
      m->counts.erase(m->counts.begin() + slot * types, m->counts.begin() + (slot + 1) * types);
    }
    for (Memo::Group& g : m->groups) {
      if (slot < g.evaluations.size()) g.evaluations.Erase(slot);
    }
    if (Memo::CpuOrder* o = m->cpu_order.get()) {
      erase(o->scores);
      erase(o->stamps);
      erase(o->capacity);
      for (auto it = o->trees.begin(); it != o->trees.end();) {
        renumber(it->second, [](const FullKey&) { return true; });
        it = it->second.empty() ? o->trees.erase(it) : std::next(it);
      }
    }
    for (auto& [key, shape_ptr] : m->shapes) {
      Memo::Shape& shape = *shape_ptr;
      // The trees first: Held() reads the verdicts by the old slots.
      renumber(shape.tree, [&](const PrimaryKey& k) { return shape.Held(k); });
      renumber(shape.full_tree, [&](const FullKey& k) { return shape.Held(k); });
      if (slot < shape.verdicts.size()) {
        shape.feasible -= shape.Live(slot);
        shape.verdicts.Erase(slot);
        ScoreSets::EraseBit(&shape.live, slot);
        shape.live.resize((shape.verdicts.size() + 63) / 64);
        erase(shape.rest);
        erase(shape.topology);
      }
      if (shape.by_sets && removed_rank.has_value() && shape.sets_ranks == ranked_version &&
          shape.sets.num_ranks() > *removed_rank) {
        shape.sets.RemoveRank(*removed_rank);
        shape.sets_ranks = d.ranks_version;
      }
    }
  }
  d.entries = 0;
  for (const auto& m : d.memos) d.entries += m->Entries();
}

bool ScoreMemo::Serves(const Policy& policy) {
  if (ClassifyPolicy(policy) != IndexedPolicy::kNone) return true;
  const auto* kernel = dynamic_cast<const fgd::KernelPolicy*>(&policy);
  return kernel != nullptr && kernel->Cacheable() && !kernel->SplitsScore();
}

ScoreMemo::CpuOrderAnswer ScoreMemo::PlanFromCpuOrder(const ClusterState& state,
                                                      const Cluster& cluster,
                                                      const Request& request,
                                                      const Demand& demand, Policy& policy,
                                                      Memo* memo, int* best_slot,
                                                      NodeChoice* best_choice) const {
  Data& d = *data_;
  const uint32_t n = static_cast<uint32_t>(state.nodes.size());
  if (memo->cpu_order == nullptr) {
    memo->cpu_order = std::make_unique<Memo::CpuOrder>();
    memo->cpu_order->by_capacity = ClassifyPolicy(policy) == IndexedPolicy::kBinpack;
  }
  Memo::CpuOrder& o = *memo->cpu_order;
  if (!o.ratio_holds) return CpuOrderAnswer::kTooFar;
  if (o.scores.size() < n) {
    d.entries += static_cast<int64_t>(n - o.scores.size());
    o.scores.resize(n);
    o.stamps.resize(n, 0);
    o.capacity.resize(n, 0);
  }
  const std::vector<int> no_gpus;
  auto refresh = [&](uint32_t slot) {
    if (o.stamps[slot] == d.stamps[slot]) return;
    const bool held = o.stamps[slot] != 0;
    o.stamps[slot] = d.stamps[slot];
    const NodeStatus& node = state.nodes[slot];
    const Score keys = PolicyKeys(policy.Evaluate(demand, node, no_gpus, cluster).score);
    const int64_t capacity = o.by_capacity ? node.cpu : 0;
    if (o.by_capacity && keys.primary != policies::Ratio(node.cpu_used, node.cpu)) {
      o.ratio_holds = false;
    }
    if (held && keys == o.scores[slot] && capacity == o.capacity[slot]) return;
    const uint64_t tie = state.tie_keys[slot];
    if (held) {
      auto tree = o.trees.find(o.capacity[slot]);
      EraseUnique(tree->second, FullKey{o.scores[slot], tie, slot});
      if (tree->second.empty()) o.trees.erase(tree);
    }
    o.scores[slot] = keys;
    o.capacity[slot] = capacity;
    o.trees[capacity].insert(FullKey{keys, tie, slot});
  };
  d.WalkChanges(
      &o.cursor, &o.fresh, n,
      [&](uint32_t slot) {
        refresh(slot);
        return true;
      },
      o.stamps.data());
  if (!o.ratio_holds || o.trees.size() > kMaxCpuOrderTrees) return CpuOrderAnswer::kTooFar;
  // The first node that fits in the scan's ranking wins (CPU-only requests
  // get no topology key, so NodeRace's window is that one node): the best of
  // each tree's first.
  const KeyLess less;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<int> fitting;
  const FullKey* best = nullptr;
  int walked = 0;
  for (const auto& [capacity, tree] : o.trees) {
    auto it = tree.begin();
    if (capacity > 0 && demand.cpu > 0) {
      if (demand.cpu > capacity) continue;  // No node of this capacity has that much.
      // A node has demand.cpu free iff its CPU ratio is at most this.
      const double most = policies::Ratio(capacity - demand.cpu, capacity);
      it = tree.lower_bound(FullKey{Score{most, kInf, kInf, 0}, ~uint64_t{0}, 0});
    }
    for (; it != tree.end(); ++it) {
      if (best != nullptr && !less(*it, *best)) break;  // Cannot win any more.
      if (NodeFits(state.nodes[it->slot], demand, request, &fitting)) {
        best = &*it;
        break;
      }
      if (++walked >= kCpuOrderWalk) return CpuOrderAnswer::kTooFar;
    }
  }
  if (best == nullptr) return CpuOrderAnswer::kNoneFits;
  *best_slot = static_cast<int>(best->slot);
  best_choice->score = best->score;
  best_choice->gpus.clear();
  return CpuOrderAnswer::kFound;
}

// Plan()'s first step: what Touch() has not kept for the n nodes. A stamp
// for each node it never met, and, since it keeps the fit summaries only
// while some memo exists, the summary of each node it kept none for.
void ScoreMemo::Data::CatchUpNodes(const ClusterState& state, uint32_t n) {
  if (stamps.size() < n) stamps.resize(n, 1);
  if (memos.empty()) summaries.clear();  // Touch() kept none.
  for (uint32_t slot = static_cast<uint32_t>(summaries.size()); slot < n; ++slot) {
    summaries.emplace_back(state.nodes[slot]);
  }
}

// The memo of `policy` (its type and `target`, the policy's own), made on
// first use; making one drops the least recently used once there are
// kMaxPolicies.
ScoreMemo::Memo* ScoreMemo::Data::MemoOf(const Policy& policy,
                                         const fgd::CompiledTarget* target) {
  for (const auto& m : memos) {
    if (*m->type == typeid(policy) &&
        fgd::SameTarget(m->target ? &*m->target : nullptr, target)) {
      return m.get();
    }
  }
  if (static_cast<int>(memos.size()) >= kMaxPolicies) {
    auto oldest = std::min_element(memos.begin(), memos.end(), [](const auto& a, const auto& b) {
      return a->last_use < b->last_use;
    });
    entries -= (*oldest)->Entries();
    memos.erase(oldest);
  }
  auto made = std::make_unique<Memo>();
  made->type = &typeid(policy);
  if (target != nullptr) made->target = *target;
  Memo* memo = made.get();
  memos.push_back(std::move(made));
  return memo;
}

// The shape of a request in `memo`: by the hash of its fields when the
// request lists its GPU models in order, else (or when not found so) by its
// key; made on first use, with no verdicts yet, after dropping the least
// recently used shapes while the verdicts it may bring for the n nodes
// would pass kMaxEntries. `kernel`: the memo's policy is a kernel policy.
ScoreMemo::Memo::Shape& ScoreMemo::Data::ShapeOf(Memo* memo, const Request& request,
                                                 const Demand& demand, bool kernel,
                                                 uint32_t n) {
  std::optional<uint64_t> hash;
  if (SortedAndDistinct(request.gpu_models)) {
    const ShapeFields fields(request, demand);
    hash = HashOfShape(fields);
    auto at = memo->by_hash.find(*hash);
    if (at != memo->by_hash.end() && fields.Of(at->second->request, at->second->demand)) {
      return *at->second;
    }
  }
  std::vector<std::string> models;
  std::string key = ShapeKey(request, demand, &models);
  auto it = memo->shapes.find(key);
  if (it == memo->shapes.end()) {
    // A kernel policy's shape may bring a group's n evaluations too.
    const int64_t adds = kernel ? 2 * int64_t{n} : n;
    while (entries + adds > kMaxEntries && DropOldestShape()) {
    }
    auto shape = std::make_unique<Memo::Shape>();
    shape->request.gpu_models = std::move(models);
    shape->request.node_selector = request.node_selector;
    shape->request.topology = NeedOfShape(request.topology);
    shape->demand = demand;
    shape->full = !kernel;
    shape->by_sets = kernel;
    if (kernel) {
      Request unselected = shape->request;
      unselected.node_selector.clear();
      Demand any_memory = demand;
      any_memory.host_memory = 0;
      std::vector<std::string> unused;
      shape->group = memo->JoinGroup(ShapeKey(unselected, any_memory, &unused));
    }
    shape->keyed = TopologyKeyCap(demand, request) > 0;
    shape->key = key;
    it = memo->shapes.emplace(std::move(key), std::move(shape)).first;
  }
  Memo::Shape* found = it->second.get();
  // A shape keeps the first hash it was filed under.
  if (hash.has_value() && !found->hash.has_value() &&
      memo->by_hash.try_emplace(*hash, found).second) {
    found->hash = hash;
  }
  return *found;
}

// Sizes `shape` of `memo` for the n nodes: a verdict (infeasible until its
// node is scored) for each node added since its last Plan(), its sets for
// the ranks of today's nodes, and its group's evaluations. `kernel`: the
// memo's policy is a kernel policy.
void ScoreMemo::Data::SizeShape(Memo* memo, Memo::Shape& shape, const ClusterState& state,
                                uint32_t n, bool kernel) {
  if (shape.verdicts.size() < n) {
    entries += static_cast<int64_t>(n - shape.verdicts.size());
    shape.verdicts.Resize(n);
    shape.live.resize((n + 63) / 64);
    if (shape.full) shape.rest.resize(n);
    if (shape.keyed) shape.topology.resize(n);
  }
  if (shape.by_sets) {
    EnsureRanks(state, n);
    if (shape.sets_ranks != ranks_version) SyncSets(shape, state, n);
  }
  if (kernel && memo->groups[shape.group].evaluations.size() < n) {
    ChoiceArray<true>& group = memo->groups[shape.group].evaluations;
    entries += static_cast<int64_t>(n - group.size());
    group.Resize(n);
  }
}

// The re-scoring of one shape's nodes, for RefreshShape(): WalkChanges()
// calls it for each node changed since the shape's last Plan(). Assumes the
// shape is sized for the n nodes (SizeShape()), that `kernel` is the policy
// as a kernel policy (nullptr for the others) with `target` its target, and
// that `gpu_count` is the request's (its shape's: the count is in the key).
class ScoreMemo::Data::ShapeWalk {
 public:
  ShapeWalk(Data& d, Memo& memo, Memo::Shape& shape, const ClusterState& state,
            const Cluster& cluster, Policy& policy, fgd::KernelPolicy* kernel,
            const fgd::CompiledTarget* target, int gpu_count, uint32_t n)
      : d_(d), memo_(memo), shape_(shape), state_(state), cluster_(cluster), policy_(policy),
        kernel_(kernel), target_(target), gpu_count_(gpu_count), n_(n),
        keeps_facts_(kernel != nullptr && (target != nullptr || kernel->NeedsTags())),
        summaries_(d.summaries.data()) {}

  // Brings the verdict of the node in `slot` up to date; false when the scan
  // must answer instead. Inlined into the walk, which calls it for every
  // changed node: most are refused by their fit summary alone, and the rest
  // go to Rescore().
  bool operator()(uint32_t slot) {
    if (summaries_[slot].Refuses(shape_.demand)) {
      shape_.Refuse(slot);
      return true;
    }
    return Rescore(slot);
  }

 private:
  // A kernel policy's evaluation of `node`, in `slot`, at change stamp
  // `stamp`, with the node's facts kept per slot when the policy derives
  // any (`types`: the target's); writes the GPUs chosen into `chosen`.
  // Assumes memo_.facts, allowed and counts are sized for the n nodes.
  inline double Evaluate(uint32_t slot, uint64_t stamp, size_t types, const NodeStatus& node,
                         int* chosen);
  // The node in `slot`, which its fit summary does not refuse, scored anew
  // (or refused by the full rules); false when the scan must answer (GPUs it
  // would reject, a NaN score). A call of its own, so that operator(),
  // which the walk calls for every node and which mostly refuses, stays
  // small.
  __attribute__((noinline)) bool Rescore(uint32_t slot);

  Data& d_;
  Memo& memo_;
  Memo::Shape& shape_;
  const ClusterState& state_;
  const Cluster& cluster_;
  Policy& policy_;
  fgd::KernelPolicy* const kernel_;
  const fgd::CompiledTarget* const target_;
  const int gpu_count_;
  const uint32_t n_;
  const bool keeps_facts_;
  const FitSummary* const summaries_;
  // Scratch for Rescore(), kept between nodes (their buffers with them).
  std::vector<int> fitting_;
  NodeChoice choice_;
};

double ScoreMemo::Data::ShapeWalk::Evaluate(uint32_t slot, uint64_t stamp, size_t types,
                                            const NodeStatus& node, int* chosen) {
  if (!keeps_facts_) {
    return kernel_->EvaluateInto(shape_.demand, node, fitting_, cluster_, chosen);
  }
  Memo::SlotFacts& kept = memo_.facts[slot];
  if (kept.stamp != stamp) kept = Memo::SlotFacts{stamp};
  fgd::KernelPolicy::NodeFacts facts;
  facts.frag = kept.frag;
  facts.frag_cpu = kept.frag_cpu;
  facts.allowed = memo_.allowed.data() + slot * types;
  facts.allowed_known = kept.allowed_known;
  facts.counts = types > 0 ? memo_.counts.data() + slot * types : nullptr;
  facts.counts_known = kept.counts_known;
  facts.gpu_tags = kept.gpu_tags;
  facts.tags_known = kept.tags_known;
  const double primary =
      kernel_->EvaluateInto(shape_.demand, node, fitting_, cluster_, chosen, &facts);
  kept.frag = facts.frag;
  kept.frag_cpu = facts.frag_cpu;
  kept.allowed_known = facts.allowed_known;
  kept.counts_known = facts.counts_known;
  kept.gpu_tags = facts.gpu_tags;
  kept.tags_known = facts.tags_known;
  return primary;
}

bool ScoreMemo::Data::ShapeWalk::Rescore(uint32_t slot) {
  Memo::Shape& shape = shape_;
  const NodeStatus& node = state_.nodes[slot];
  if (!NodeFits(node, shape.demand, shape.request, &fitting_)) {
    shape.Refuse(slot);
    return true;
  }
  const uint64_t stamp = d_.stamps[slot];
  // Kernel policies write their choice into `chosen` without allocating.
  std::array<int, kMaxGpusPerNode> chosen;
  const int* gpus = chosen.data();
  int count = gpu_count_;
  Score score;
  if (kernel_ != nullptr) {
    if (count < 0 || count > kMaxGpusPerNode) return false;
    const size_t types = target_ != nullptr ? target_->types.size() : 0;
    if (keeps_facts_ && memo_.facts.size() < n_) {
      memo_.facts.resize(n_);
      memo_.allowed.resize(n_ * types);
      memo_.counts.resize(n_ * types);
    }
    // A shape alone in its group has no one to share with: it neither
    // reads nor writes the group's evaluations (a shape that joins later
    // finds them stale by their stamps).
    Memo::Group& group = memo_.groups[shape.group];
    ChoiceArray<true>* shared = group.shapes > 1 ? &group.evaluations : nullptr;
    if (shared != nullptr && shared->stamp(slot) == stamp) {
      score.primary = shared->score(slot);
      int c = 0;
      for (uint64_t m = shared->gpus(slot); m != 0; m &= m - 1) chosen[c++] = __builtin_ctzll(m);
      count = c;
    } else {
      score.primary = Evaluate(slot, stamp, types, node, chosen.data());
      if (shared != nullptr) {
        uint64_t mask = 0;
        for (int i = 0; i < count; ++i) {
          if (chosen[i] >= 0 && chosen[i] < kMaxGpusPerNode) mask |= uint64_t{1} << chosen[i];
        }
        shared->Set(slot, score.primary, mask, stamp);
      }
    }
  } else {
    choice_ = policy_.Evaluate(shape.demand, node, fitting_, cluster_);
    score = choice_.score;
    gpus = choice_.gpus.data();
    count = static_cast<int>(choice_.gpus.size());
  }
  // The scan's own check (Cluster::Plan()); the scan reports the error.
  if (count != gpu_count_) return false;
  int previous = -1;
  for (int i = 0; i < count; ++i) {
    const int g = gpus[i];
    if (g <= previous || !std::binary_search(fitting_.begin(), fitting_.end(), g)) return false;
    previous = g;
  }
  // The node's topology may move the GPUs and sets the topology key; on a
  // topology-blind node, or for kNone, it only sets the key (ApplyTopology()).
  if (node.topology != nullptr && shape.request.topology.mode != TopologyNeed::Mode::kNone &&
      count > 0) {
    if (kernel_ != nullptr) choice_.gpus.assign(gpus, gpus + count);
    choice_.score = score;
    ApplyTopology(node, shape.demand, shape.request, fitting_, &choice_);
    score.topology = choice_.score.topology;
    gpus = choice_.gpus.data();
    count = static_cast<int>(choice_.gpus.size());
  } else {
    score.topology = count > 0 ? TopologyKeyCap(shape.demand, shape.request) : 0;
  }
  // A NaN score would break the trees' order: the scan answers instead.
  const Score keys = PolicyKeys(score);
  if (std::isnan(keys.primary) || std::isnan(keys.secondary) || std::isnan(keys.tertiary)) {
    return false;
  }
  uint64_t mask = 0;
  for (int i = 0; i < count; ++i) mask |= uint64_t{1} << gpus[i];
  if (shape.keyed) shape.topology[slot] = score.topology;
  // Policy scores are often unchanged (the built-in ones are whole
  // numbers): the node then keeps its place in the tree.
  const bool live = shape.Live(slot);
  if (live && shape.PolicyScoreAt(slot) == keys) {
    shape.verdicts.SetGpus(slot, mask);
    return true;
  }
  shape.feasible += !live;  // The old key, if any, is stale now.
  shape.SetLive(slot);
  shape.verdicts.Set(slot, keys.primary, mask);
  if (kernel_ == nullptr) {
    shape.rest[slot] = {keys.secondary, keys.tertiary};
    shape.full_tree.insert(FullKey{keys, state_.tie_keys[slot], slot});
  } else if (!shape.by_sets) {
    shape.tree.insert(PrimaryKey{keys.primary, state_.tie_keys[slot], slot});
  } else if (!shape.sets.Add(keys.primary, d_.rank_of[slot])) {
    shape.MoveToTree(state_.tie_keys);  // This node's key included.
  }
  return true;
}

// Re-scores the nodes that changed since the shape's last Plan() (every
// node on its first), with ShapeWalk; false, with the walk stopped there,
// when the scan must answer instead. Assumes SizeShape() sized the shape.
bool ScoreMemo::Data::RefreshShape(Memo* memo, Memo::Shape& shape, const ClusterState& state,
                                   const Cluster& cluster, Policy& policy,
                                   fgd::KernelPolicy* kernel, const fgd::CompiledTarget* target,
                                   int gpu_count, uint32_t n) {
  ShapeWalk refresh(*this, *memo, shape, state, cluster, policy, kernel, target, gpu_count, n);
  // Fetched ahead: each node's fit summary, the shape's verdict, and the
  // group's evaluations too, when the shape shares them. A refusal reads no
  // verdict, and nine in ten of the nodes met are refusals at openb x8, but
  // fetching the verdicts of all of them measured 6-9% faster at x1 and x8
  // than fetching none. Fetching only those of the nodes the summary does
  // not refuse (judged a few entries earlier) measured 10% faster at x1 for
  // dotprod and gpupacking, no faster at x8, and 3% slower for fgd there.
  // The walk is a call of its own: inlined here, its loop kept its bounds
  // and arrays on the stack, reloaded for every change met.
  Memo::Group* group = kernel != nullptr ? &memo->groups[shape.group] : nullptr;
  const bool ok = shape.verdicts.Visit([&](const auto* verdicts) __attribute__((noinline)) {
    if (group == nullptr || group->shapes <= 1) {
      return WalkChanges(&shape.cursor, &shape.fresh, n, refresh, summaries.data(), verdicts);
    }
    return group->evaluations.Visit([&](const auto* evaluations) {
      return WalkChanges(&shape.cursor, &shape.fresh, n, refresh, summaries.data(), verdicts,
                         evaluations);
    });
  });
  shape.verdicts.Trim();
  if (group != nullptr) group->evaluations.Trim();
  return ok;
}

// The node and choice the scan would pick among the shape's feasible nodes:
// the first nodes of the best policy score, in the tie-break order, race on
// the topology key (NodeRace, as the scan does). Assumes the shape was
// refreshed (RefreshShape()) and has a feasible node. `kernel`: the policy
// is a kernel policy (its keys, when not in the sets, are in shape.tree).
void ScoreMemo::Data::PickWinner(const ClusterState& state, Memo::Shape& shape, bool kernel,
                                 int* best_slot, NodeChoice* best_choice) const {
  NodeRace race(state.tie_keys, TopologyKeyCap(shape.demand, shape.request));
  int entered = 0;
  // Offers the node in `slot` to the race; false once the race wants no more.
  auto offer = [&](uint32_t slot) {
    PrefetchNode(state.nodes[slot]);  // Likely the node committed to next.
    NodeChoice entry;
    entry.score = shape.ScoreAt(slot);
    race.Offer(slot, std::move(entry));
    return ++entered < kTopologyWindow && !race.Settled();
  };
  if (shape.by_sets) {
    shape.sets.TakeBest(
        [&](double score, uint32_t rank) { return shape.Holds(slot_at[rank], score); },
        [&](uint32_t rank) { return offer(slot_at[rank]); });
  } else if (kernel) {
    shape.OfferBest(shape.tree, offer);
  } else {
    shape.OfferBest(shape.full_tree, offer);
  }
  NodeChoice won;
  race.Finish(best_slot, &won);
  best_choice->score = won.score;
  best_choice->gpus.clear();
  const uint64_t mask = shape.verdicts.gpus(static_cast<uint32_t>(*best_slot));
  for (int g = 0; g < kMaxGpusPerNode; ++g) {
    if (mask >> g & 1) best_choice->gpus.push_back(g);
  }
}

bool ScoreMemo::Plan(const ClusterState& state, const Cluster& cluster, const Request& request,
                     const Demand& demand, Policy& policy, int* best_slot,
                     NodeChoice* best_choice, bool* none_feasible) const {
  if (!Serves(policy)) return false;
  auto* kernel = dynamic_cast<fgd::KernelPolicy*>(&policy);
  const fgd::CompiledTarget* target = kernel != nullptr ? kernel->target() : nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  Data& d = *data_;
  const uint64_t now = ++d.clock;
  const uint32_t n = static_cast<uint32_t>(state.nodes.size());
  d.CatchUpNodes(state, n);
  Memo* memo = d.MemoOf(policy, target);
  memo->last_use = now;

  if (kernel == nullptr && demand.kind == Demand::Kind::kCpuOnly &&
      TopologyKeyCap(demand, request) == 0) {
    switch (PlanFromCpuOrder(state, cluster, request, demand, policy, memo, best_slot,
                             best_choice)) {
      case CpuOrderAnswer::kFound:
        return true;
      case CpuOrderAnswer::kNoneFits:
        if (none_feasible != nullptr) *none_feasible = true;
        return false;
      case CpuOrderAnswer::kTooFar:
        break;  // The request's own shape answers.
    }
  }

  Memo::Shape& shape = d.ShapeOf(memo, request, demand, kernel != nullptr, n);
  shape.last_use = now;
  d.SizeShape(memo, shape, state, n, kernel != nullptr);
  if (!d.RefreshShape(memo, shape, state, cluster, policy, kernel, target, demand.gpu_count,
                      n)) {
    // The scan answers. The walk stopped short of the shape's changes, so
    // the shape goes (the next request of it makes it again, by a full walk).
    d.entries -= memo->EraseShape(memo->shapes.find(shape.key));
    return false;
  }
  if (shape.feasible == 0) {
    shape.tree.clear();  // Every key left is stale.
    shape.full_tree.clear();
    if (shape.by_sets) shape.sets.Reset(shape.sets.num_ranks());
    if (none_feasible != nullptr) *none_feasible = true;
    return false;
  }
  d.PickWinner(state, shape, kernel != nullptr, best_slot, best_choice);
  return true;
}

bool ScoreMemo::Consistent(const ClusterState& state) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!data_->memos.empty()) {
    // Touch() kept every node's summary since the first memo was made.
    if (data_->summaries.size() > state.nodes.size()) return false;
    for (size_t slot = 0; slot < data_->summaries.size(); ++slot) {
      if (data_->summaries[slot] != FitSummary(state.nodes[slot])) return false;
    }
  }
  // The ranks, when made for today's nodes, are their tie order (nodes
  // added since leave them to be made again; nothing else may change it).
  const std::vector<uint32_t>& slot_at = data_->slot_at;
  if (slot_at.size() != data_->rank_of.size() || slot_at.size() > state.nodes.size()) {
    return false;
  }
  if (slot_at.size() == state.nodes.size()) {
    for (uint32_t r = 0; r < slot_at.size(); ++r) {
      if (slot_at[r] >= slot_at.size() || data_->rank_of[slot_at[r]] != r) return false;
      if (r > 0 && !TieBefore(state.tie_keys, slot_at[r - 1], slot_at[r])) return false;
    }
  }
  int64_t entries = 0;
  for (const auto& m : data_->memos) entries += m->Entries();
  if (entries != data_->entries) return false;
  for (const auto& m : data_->memos) {
    for (const Memo::Group& g : m->groups) {
      if (!g.evaluations.Consistent()) return false;
    }
    // Each shape found by hash is one of the memo's, under the hash of its
    // own fields.
    for (const auto& [hash, shape] : m->by_hash) {
      auto it = m->shapes.find(shape->key);
      if (it == m->shapes.end() || it->second.get() != shape || shape->hash != hash ||
          HashOfShape(ShapeFields(shape->request, shape->demand)) != hash) {
        return false;
      }
    }
    for (const auto& entry : m->shapes) {
      const Memo::Shape* shape = entry.second.get();
      if (shape->key != entry.first) return false;
      if (shape->hash.has_value()) {
        auto it = m->by_hash.find(*shape->hash);
        if (it == m->by_hash.end() || it->second != shape) return false;
      }
      size_t feasible = 0;
      if (shape->live.size() != (shape->verdicts.size() + 63) / 64) return false;
      if (!shape->verdicts.Consistent()) return false;
      for (uint64_t word : shape->live) feasible += __builtin_popcountll(word);
      if (!shape->tree.empty() && !shape->full_tree.empty()) return false;
      if (feasible != shape->feasible) return false;
      if (shape->by_sets) {
        // Each feasible verdict has its bit in the sets, when they are for
        // the ranks of today's nodes (a node added since leaves them to be
        // filled again on the shape's next Plan()).
        if (!shape->tree.empty() || !shape->sets.Consistent()) return false;
        if (shape->sets_ranks != data_->ranks_version) continue;
        if (shape->sets.num_ranks() != shape->verdicts.size() ||
            data_->slot_at.size() != shape->verdicts.size()) {
          return false;
        }
        size_t held = 0;
        shape->sets.ForEach([&](double score, uint32_t rank) {
          held += shape->Holds(data_->slot_at[rank], score);
        });
        if (held != feasible) return false;
        continue;
      }
      if (shape->sets.num_scores() != 0) return false;
      // Every feasible verdict's key is in the tree (stale keys may be too).
      size_t held = 0;
      for (const PrimaryKey& k : shape->tree) {
        if (k.slot >= shape->verdicts.size()) return false;
        held += shape->Held(k);
      }
      for (const FullKey& k : shape->full_tree) {
        if (k.slot >= shape->verdicts.size()) return false;
        held += shape->Held(k);
      }
      if (held != feasible) return false;
      if (shape->tree.size() + shape->full_tree.size() > 2 * feasible + kStaleSlack) return false;
    }
    if (const Memo::CpuOrder* o = m->cpu_order.get()) {
      size_t scored = 0, keys = 0;
      for (uint64_t stamp : o->stamps) scored += stamp != 0;
      for (const auto& [capacity, tree] : o->trees) {
        if (tree.empty()) return false;
        keys += tree.size();
        for (const FullKey& k : tree) {
          if (k.slot >= o->stamps.size() || o->stamps[k.slot] == 0 ||
              !(o->scores[k.slot] == k.score) || o->capacity[k.slot] != capacity) {
            return false;
          }
        }
      }
      if (scored != keys) return false;
    }
  }
  return true;
}

}  // namespace gpushare::internal
