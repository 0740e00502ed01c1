// Internal: an ordered set of (shape, position) pairs with cheap updates,
// for the GPU index of single-GPU binpack (placement_index.h). Not part of
// the public API.
//
// A shape is a GPU's packed free memory and compute; a position is its
// place in the tie-break order (its node's key, times the positions per
// node, plus the GPU's index), below a fixed universe. Pairs are kept per
// shape, in a map of the shapes present (few in a real cluster); each shape
// holds its positions in a B-tree of 4-byte numbers while it has few, and
// in a two-level bit set once they are more than a 512th of the universe.
// A place or release then moves one GPU between two bit sets in a few word
// operations, where a B-tree of whole keys descends and rebalances; the bit
// sets cost at most 64 bytes per position they hold.
//
//   GpuBuckets set(/*universe=*/nodes * 8);
//   set.Insert(shape, position);
//   uint64_t s; uint32_t p;
//   for (bool more = set.Next(from, 0, &s, &p); more; more = set.Next(s, p + 1, &s, &p)) ...

#ifndef GPUSHARE_INTERNAL_GPU_BUCKETS_H_
#define GPUSHARE_INTERNAL_GPU_BUCKETS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"

namespace gpushare::internal {

class GpuBuckets {
 public:
  // Positions are below `universe`.
  explicit GpuBuckets(uint64_t universe = 0) : universe_(universe) {}

  uint64_t universe() const { return universe_; }
  size_t size() const { return size_; }

  // Adds / removes the pair; false (and no change) when it is already there /
  // not there. `position` must be below the universe.
  bool Insert(uint64_t shape, uint32_t position);
  bool Erase(uint64_t shape, uint32_t position);

  // The least pair at or after (shape, position), in (shape, position)
  // order; false when there is none.
  bool Next(uint64_t shape, uint64_t position, uint64_t* at_shape, uint32_t* at_position) const;

  // Calls f(shape, position) for every pair, in order.
  template <typename F>
  void ForEach(F&& f) const {
    for (const auto& [shape, bucket] : buckets_) {
      for (uint64_t p = bucket.LowerBound(0); p != kNone; p = bucket.LowerBound(p + 1)) {
        f(shape, static_cast<uint32_t>(p));
      }
    }
  }

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};

  // The positions of one shape.
  class Bucket {
   public:
    bool Insert(uint32_t position, uint64_t universe);
    bool Erase(uint32_t position, uint64_t universe);
    // The least position at or after `position`, or kNone.
    uint64_t LowerBound(uint64_t position) const;
    size_t size() const { return size_; }

   private:
    bool dense() const { return !words_.empty(); }
    bool Has(uint32_t position) const;
    void Set(uint32_t position);
    void Clear(uint32_t position);

    size_t size_ = 0;
    absl::btree_set<uint32_t> sparse_;  // While not dense.
    std::vector<uint64_t> words_;       // Bit p: position p is held.
    std::vector<uint64_t> summary_;     // Bit w: words_[w] is not 0.
  };

  uint64_t universe_;
  size_t size_ = 0;
  absl::btree_map<uint64_t, Bucket> buckets_;  // No empty bucket.
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_GPU_BUCKETS_H_
