// Internal: the order in which spread walks, for a shared request of M GPUs,
// the nodes that have at least M healthy GPUs (placement_index.h). Not part
// of the public API.
//
// A key orders nodes by (GPU memory used / GPU memory of the node, compute
// used / compute of the node, -(the M largest free memories), tie key desc,
// slot). While every node in the order has the same GPU memory and compute
// (a pool of identical nodes, the usual case), the ratios order exactly as
// the amounts used do, so the keys are kept in one small bucket per amount
// of memory used, found by that amount, with a bit set of the amounts
// present, and within it as 24 bytes of integers, sorted (in an array up to
// kFlatMost of them, in a B-tree above): a place or release searches the
// nodes with its node's memory use, not the whole cluster. The first node
// of another kind puts every key into one B-tree, as it is for mixed
// clusters, until the order is cleared (that node leaving does not clear
// it: a removal renumbers the keys where they are). The buckets cost 48
// bytes per amount of memory a node has (30 KiB for 8 GPUs of 80 units)
// besides their entries; nodes of more than kMaxBuckets units keep one tree.
// While in buckets the order also remembers each node's entry by slot (32
// bytes a node), so that Find() gives a node's key without reading it.
//
//   SpreadOrder order;
//   order.Insert(key, SpreadOrder::Pool{memory, memory_used, compute, compute_used});
//   order.ForEach([](const SpreadKey& k) { ...; return true; });  // false stops

#ifndef GPUSHARE_INTERNAL_SPREAD_ORDER_H_
#define GPUSHARE_INTERNAL_SPREAD_ORDER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/btree_set.h"
#include "src/internal/btree_erase.h"
#include "src/policies/gpu_order.h"

namespace gpushare::internal {

struct SpreadKey {
  double memory_ratio;   // GPU memory used / GPU memory of the node.
  double compute_ratio;  // GPU compute used / GPU compute of the node.
  int64_t neg_top;       // -(sum of the M largest free memories), units.
  uint64_t inv_tie;
  int64_t kth;           // M-th largest free memory, units (not ordered on).
  uint32_t slot;
  // For M = 1: the node's loosest healthy GPU (most free memory, then
  // compute, then lowest position), whose free memory is `kth`; -1 for
  // M > 1. Not ordered on.
  int32_t gpu = -1;
};

struct SpreadLess {
  bool operator()(const SpreadKey& a, const SpreadKey& b) const {
    if (a.memory_ratio != b.memory_ratio) return a.memory_ratio < b.memory_ratio;
    if (a.compute_ratio != b.compute_ratio) return a.compute_ratio < b.compute_ratio;
    if (a.neg_top != b.neg_top) return a.neg_top < b.neg_top;
    if (a.inv_tie != b.inv_tie) return a.inv_tie < b.inv_tie;
    return a.slot < b.slot;
  }
};

class SpreadOrder {
 public:
  using Tree = absl::btree_set<SpreadKey, SpreadLess>;

  // The numbers of the key's ratios: its node's GPU memory and compute, and
  // how much of each is used.
  struct Pool {
    int64_t memory = 0;
    int64_t memory_used = 0;
    int64_t compute = 0;
    int64_t compute_used = 0;
  };

  // Amounts of memory per node above this keep the single tree.
  static constexpr int64_t kMaxBuckets = 4096;
  static_assert(kMaxBuckets <= INT16_MAX, "an entry keeps kth in 16 bits");
  // A bucket keeps up to this many entries in a sorted array (Bucket).
  static constexpr size_t kFlatMost = 256;

  // Adds / removes `key`, whose node is `pool` (for Erase(): as the node was
  // when the key was inserted).
  void Insert(const SpreadKey& key, const Pool& pool) {
    if (mode_ == Mode::kEmpty) Start(pool);
    if (mode_ == Mode::kBuckets && !Fits(key, pool)) ToTree();
    if (mode_ == Mode::kTree) {
      size_ += tree_.insert(key).second ? 1 : 0;
      return;
    }
    const size_t b = static_cast<size_t>(pool.memory_used);
    const Entry entry = EntryOf(key, pool);
    if (!buckets_[b].Insert(entry)) return;
    ++size_;
    present_[b / 64] |= uint64_t{1} << (b % 64);
    if (key.slot >= held_.size()) held_.resize(key.slot + size_t{1});
    held_[key.slot] = Held{entry, static_cast<int32_t>(b)};
  }
  void Erase(const SpreadKey& key, const Pool& pool) {
    if (mode_ == Mode::kTree) {
      size_ -= EraseUnique(tree_, key);
      return;
    }
    if (mode_ != Mode::kBuckets || !Fits(key, pool)) return;  // Not here.
    EraseEntry(static_cast<size_t>(pool.memory_used), EntryOf(key, pool));
  }

  // The key and pool with which the node in `slot` was inserted, while the
  // order is in buckets; false when it is not, or holds no key of that node.
  bool Find(uint32_t slot, SpreadKey* key, Pool* pool) const {
    const Held* h = HeldAt(slot);
    if (h == nullptr) return false;
    *key = KeyOf(h->entry, policies::Ratio(h->bucket, memory_));
    *pool = Pool{memory_, h->bucket, compute_, static_cast<int64_t>(h->entry.order >> 32)};
    return true;
  }
  // Erase() of that key, from the remembered entry: a change removes the
  // node's key without reading the node. False when Find() would be.
  bool EraseSlot(uint32_t slot) {
    const Held* h = HeldAt(slot);
    return h != nullptr && EraseEntry(static_cast<size_t>(h->bucket), h->entry);
  }

  // The node in `slot`, whose key was erased, left the cluster, and the
  // slots after it moved down by one: so do their keys' slots (the slot is
  // the keys' last part in the order, which stays).
  void SlotRemoved(uint32_t slot) {
    if (mode_ == Mode::kTree) {
      RenumberAfterRemoval(tree_, slot);
      return;
    }
    for (Bucket& b : buckets_) b.SlotRemoved(slot);
    if (slot < held_.size()) held_.erase(held_.begin() + slot);
    for (Held& h : held_) h.entry.slot -= h.entry.slot > slot;
  }

  void clear() {
    mode_ = Mode::kEmpty;
    size_ = 0;
    tree_.clear();
    buckets_.clear();
    present_.clear();
    held_.clear();
  }
  size_t size() const { return size_; }
  bool bucketed() const { return mode_ == Mode::kBuckets; }

  // Calls f(key) for the keys in SpreadLess order while it returns true.
  template <typename F>
  void ForEach(F&& f) const {
    if (mode_ == Mode::kTree) {
      for (const SpreadKey& k : tree_) {
        if (!f(k)) return;
      }
      return;
    }
    for (size_t w = 0; w < present_.size(); ++w) {
      for (uint64_t bits = present_[w]; bits != 0; bits &= bits - 1) {
        const size_t b = w * 64 + static_cast<size_t>(__builtin_ctzll(bits));
        const double memory_ratio = policies::Ratio(static_cast<int64_t>(b), memory_);
        if (!buckets_[b].ForEach([&](const Entry& e) { return f(KeyOf(e, memory_ratio)); })) {
          return;
        }
      }
    }
  }

  // The keys in order.
  std::vector<SpreadKey> Keys() const {
    std::vector<SpreadKey> keys;
    keys.reserve(size_);
    ForEach([&](const SpreadKey& k) {
      keys.push_back(k);
      return true;
    });
    return keys;
  }

  // Structural self-check: the bit set marks exactly the non-empty buckets,
  // the size is the number of keys, and each slot's remembered entry is the
  // one its bucket holds.
  bool Consistent() const {
    if (mode_ == Mode::kTree) return size_ == tree_.size();
    if (mode_ == Mode::kEmpty) return size_ == 0;
    size_t total = 0;
    for (size_t b = 0; b < buckets_.size(); ++b) {
      const bool marked = (present_[b / 64] >> (b % 64) & 1) != 0;
      if (marked == buckets_[b].empty() || !buckets_[b].Consistent()) return false;
      const bool held = buckets_[b].ForEach([&](const Entry& e) {
        return e.slot < held_.size() && held_[e.slot].bucket == static_cast<int32_t>(b) &&
               held_[e.slot].entry == e;
      });
      if (!held) return false;
      total += buckets_[b].size();
    }
    const auto held = std::count_if(held_.begin(), held_.end(),
                                    [](const Held& h) { return h.bucket >= 0; });
    return total == size_ && static_cast<size_t>(held) == size_;
  }

 private:
  enum class Mode { kEmpty, kBuckets, kTree };

  // A key within its bucket: (compute used, memory - top) in `order`, which
  // orders as (compute ratio, -top) do in the pool, then the tie key and
  // slot; the memory ratio is the bucket's.
  struct Entry {
    uint64_t order;
    uint64_t inv_tie;
    uint32_t slot;
    int16_t kth;  // At most kMaxBuckets.
    int16_t gpu;  // Below kMaxGpusPerNode.
    bool operator==(const Entry& o) const {
      return order == o.order && inv_tie == o.inv_tie && slot == o.slot && kth == o.kth &&
             gpu == o.gpu;
    }
  };
  // (order, inv_tie, slot), written without branches for the buckets'
  // search (Bucket).
  struct EntryLess {
    bool operator()(const Entry& a, const Entry& b) const {
      return (a.order < b.order) |
             ((a.order == b.order) &
              ((a.inv_tie < b.inv_tie) | ((a.inv_tie == b.inv_tie) & (a.slot < b.slot))));
    }
  };
  // The entries of one bucket, in EntryLess order: a sorted array while it
  // holds at most kFlatMost, a B-tree above. A place or release then finds
  // its place by a search without branches and moves a few hundred bytes of
  // memory already in cache, where a B-tree descends through nodes with a
  // mispredicted branch at each comparison (spread's pair 0.56 -> 0.51 us
  // at 10,000 nodes).
  class Bucket {
   public:
    // False (and no change) when an entry of the same place in the order
    // (EntryLess) is already there / is not there.
    bool Insert(const Entry& e) {
      if (!tree_.empty()) return tree_.insert(e).second;
      const size_t at = LowerBound(e);
      if (at < flat_.size() && !Less(e, flat_[at])) return false;
      flat_.insert(flat_.begin() + static_cast<ptrdiff_t>(at), e);
      if (flat_.size() > kFlatMost) {
        tree_.insert(flat_.begin(), flat_.end());  // In order.
        flat_ = {};
      }
      return true;
    }
    bool Erase(const Entry& e) {
      if (!tree_.empty()) {
        if (EraseUnique(tree_, e) == 0) return false;
        if (tree_.size() < kFlatMost / 4) {
          flat_.assign(tree_.begin(), tree_.end());
          tree_.clear();
        }
        return true;
      }
      const size_t at = LowerBound(e);
      if (at == flat_.size() || Less(e, flat_[at])) return false;
      flat_.erase(flat_.begin() + static_cast<ptrdiff_t>(at));
      return true;
    }
    // Calls f(entry) in order while it returns true; false when one did not.
    template <typename F>
    bool ForEach(F&& f) const {
      auto walk = [&](const auto& entries) {
        for (const Entry& e : entries) {
          if (!f(e)) return false;
        }
        return true;
      };
      return tree_.empty() ? walk(flat_) : walk(tree_);
    }
    // SpreadOrder::SlotRemoved() of the entries here.
    void SlotRemoved(uint32_t slot) {
      for (Entry& e : flat_) e.slot -= e.slot > slot;
      if (!tree_.empty()) RenumberAfterRemoval(tree_, slot);
    }
    bool empty() const { return flat_.empty() && tree_.empty(); }
    size_t size() const { return flat_.size() + tree_.size(); }
    // Sorted, and in the form its size calls for.
    bool Consistent() const {
      if (!tree_.empty()) return flat_.empty() && tree_.size() >= kFlatMost / 4;
      return flat_.size() <= kFlatMost &&
             std::adjacent_find(flat_.begin(), flat_.end(), [](const Entry& a, const Entry& b) {
               return !Less(a, b);
             }) == flat_.end();  // Strictly increasing.
    }

   private:
    static bool Less(const Entry& a, const Entry& b) { return EntryLess()(a, b); }
    // The first position whose entry is not less than `e`.
    size_t LowerBound(const Entry& e) const {
      if (flat_.empty()) return 0;
      const Entry* base = flat_.data();
      for (size_t len = flat_.size(); len > 1;) {
        const size_t half = len / 2;
        base = Less(base[half - 1], e) ? base + half : base;
        len -= half;
      }
      return static_cast<size_t>(base - flat_.data()) + (Less(*base, e) ? 1 : 0);
    }
    std::vector<Entry> flat_;
    absl::btree_set<Entry, EntryLess> tree_;  // Not empty: the entries are here.
  };

  // A node's entry and its bucket, remembered by slot.
  struct Held {
    Entry entry;
    int32_t bucket = -1;  // -1: the slot has no entry.
  };
  const Held* HeldAt(uint32_t slot) const {
    if (mode_ != Mode::kBuckets || slot >= held_.size() || held_[slot].bucket < 0) return nullptr;
    return &held_[slot];
  }
  // Removes `entry` from bucket `b`; false when it is not there.
  bool EraseEntry(size_t b, const Entry& entry) {
    if (!buckets_[b].Erase(entry)) return false;
    --size_;
    if (buckets_[b].empty()) present_[b / 64] &= ~(uint64_t{1} << (b % 64));
    held_[entry.slot].bucket = -1;
    return true;
  }

  // Whether `key` of a node of `pool` has a bucket and an entry.
  bool Fits(const SpreadKey& key, const Pool& pool) const {
    return pool.memory == memory_ && pool.compute == compute_ && pool.memory_used >= 0 &&
           pool.memory_used <= memory_ && pool.compute_used >= 0 &&
           pool.compute_used <= compute_ && key.neg_top <= 0 && -key.neg_top <= memory_ &&
           key.kth >= 0 && key.kth <= memory_;
  }
  Entry EntryOf(const SpreadKey& key, const Pool& pool) const {
    return Entry{static_cast<uint64_t>(pool.compute_used) << 32 |
                     static_cast<uint64_t>(memory_ + key.neg_top),
                 key.inv_tie, key.slot, static_cast<int16_t>(key.kth),
                 static_cast<int16_t>(key.gpu)};
  }
  SpreadKey KeyOf(const Entry& e, double memory_ratio) const {
    const auto compute_used = static_cast<int64_t>(e.order >> 32);
    const auto memory_left = static_cast<int64_t>(e.order & 0xffffffff);
    return SpreadKey{memory_ratio, policies::Ratio(compute_used, compute_), memory_left - memory_,
                     e.inv_tie, e.kth, e.slot, e.gpu};
  }
  void Start(const Pool& pool) {
    if (pool.memory <= 0 || pool.memory > kMaxBuckets || pool.compute <= 0 ||
        pool.compute > (int64_t{1} << 31)) {
      mode_ = Mode::kTree;
      return;
    }
    mode_ = Mode::kBuckets;
    memory_ = pool.memory;
    compute_ = pool.compute;
    buckets_.assign(static_cast<size_t>(memory_) + 1, Bucket());
    present_.assign(buckets_.size() / 64 + 1, 0);
  }
  void ToTree() {
    ForEach([this](const SpreadKey& k) {
      tree_.insert(k);
      return true;
    });
    buckets_.clear();
    present_.clear();
    held_.clear();
    mode_ = Mode::kTree;
  }

  Mode mode_ = Mode::kEmpty;
  int64_t memory_ = 0;   // kBuckets: the GPU memory of every node, units.
  int64_t compute_ = 0;  // kBuckets: the GPU compute of every node.
  size_t size_ = 0;
  Tree tree_;                      // kTree.
  std::vector<Bucket> buckets_;    // kBuckets: by memory used.
  std::vector<uint64_t> present_;  // kBuckets: bit b: buckets_[b] is not empty.
  std::vector<Held> held_;  // kBuckets: by slot, each node's entry.
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_SPREAD_ORDER_H_
