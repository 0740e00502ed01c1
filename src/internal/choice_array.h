// Internal: the score memo's per-node records of a score and the GPUs
// chosen, as small as their values allow. Not part of the public API.
//
// ChoiceArray keeps, per slot (a node's position), a score (a policy
// score's primary part) and the GPUs chosen on the node (a bit mask), and,
// when kStamped, the node's change stamp they were made at (0: never). It
// takes 8 bytes a slot (16 stamped) while a float holds every score exactly
// and every chosen GPU is among a node's first 32, as for the whole-number
// policies (bestfit, dotprod, gpupacking, gpuclustering) on nodes of at most
// 32 GPUs; and 16 (24) from the first record that does not fit, for good.
// What it gives back is always what was set, exactly.
//
// Why: at openb x8 (9,704 nodes) the memo's records of a hundred request
// shapes outgrow the 32 MB cache. Padding the verdicts from 16 bytes to 32
// made a place there 5% dearer and left x1 alone; the narrow forms made it
// 7-10% cheaper (2-4% at x1). (The scores and the GPUs in arrays of their
// own measured 5% dearer at x8: a re-score then writes two cache lines.)
//
//   ChoiceArray<false> verdicts;
//   verdicts.Resize(num_nodes);
//   verdicts.Set(slot, score, gpu_mask);
//   double s = verdicts.score(slot);  // == score, bit for bit but NaN's payload.

#ifndef GPUSHARE_INTERNAL_CHOICE_ARRAY_H_
#define GPUSHARE_INTERNAL_CHOICE_ARRAY_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

namespace gpushare::internal {

template <bool kStamped>
class ChoiceArray {
 public:
  // Slots; new ones hold score 0, no GPUs and stamp 0.
  size_t size() const { return widened_ ? wide_.size() : narrow_.size(); }
  void Resize(uint32_t n) {
    if (widened_) {
      wide_.resize(n);
    } else {
      narrow_.resize(n);
    }
  }
  // Drops `slot` (< size()); the slots after it move down by one.
  void Erase(uint32_t slot) {
    if (widened_) {
      wide_.erase(wide_.begin() + slot);
    } else {
      narrow_.erase(narrow_.begin() + slot);
    }
  }
  // What the last Set() / SetGpus() of `slot` (< size()) gave.
  double score(uint32_t slot) const { return widened_ ? wide_[slot].score : narrow_[slot].score; }
  uint64_t gpus(uint32_t slot) const { return widened_ ? wide_[slot].gpus : narrow_[slot].gpus; }
  uint64_t stamp(uint32_t slot) const {
    static_assert(kStamped);
    return widened_ ? wide_[slot].stamp : narrow_[slot].stamp;
  }
  // Records `slot`'s (< size()) score, GPUs and, when kStamped, stamp;
  // widens every slot first when these do not fit in the narrow form.
  void Set(uint32_t slot, double score, uint64_t gpus, uint64_t stamp = 0) {
    if (!widened_ && (gpus >> 32 != 0 || !FloatHolds(score))) Widen();
    if (widened_) {
      Fill(&wide_[slot], score, gpus, stamp);
    } else {
      Fill(&narrow_[slot], static_cast<float>(score), static_cast<uint32_t>(gpus), stamp);
    }
  }
  // The GPUs alone (the score and stamp stay).
  void SetGpus(uint32_t slot, uint64_t gpus) {
    if (!widened_ && gpus >> 32 != 0) Widen();
    if (widened_) {
      wide_[slot].gpus = gpus;
    } else {
      narrow_[slot].gpus = static_cast<uint32_t>(gpus);
    }
  }
  // Calls f(records) with a pointer to slot 0's record, for fetching ahead
  // (`records + slot` is the slot's).
  template <typename F>
  decltype(auto) Visit(F&& f) const {
    return widened_ ? f(wide_.data()) : f(narrow_.data());
  }
  // Widening keeps the narrow records, which a walk that widens fetches
  // ahead until its end; this frees them.
  void Trim() {
    if (widened_ && narrow_.capacity() != 0) narrow_ = std::vector<Narrow>();
  }
  // Whether the records take the wide form (16 bytes, 24 stamped).
  bool widened() const { return widened_; }
  // Trimmed.
  bool Consistent() const { return !widened_ || narrow_.empty(); }

 private:
  struct Unstamped {};
  struct Stamped {
    uint64_t stamp = 0;
  };
  using Base = std::conditional_t<kStamped, Stamped, Unstamped>;
  template <typename S, typename G>
  struct Record : Base {
    S score = 0;
    G gpus = 0;
  };
  using Narrow = Record<float, uint32_t>;
  using Wide = Record<double, uint64_t>;
  static_assert(sizeof(Narrow) == (kStamped ? 16 : 8) && sizeof(Wide) == (kStamped ? 24 : 16));

  // Whether a float holds `score` exactly (a NaN as a NaN).
  static bool FloatHolds(double score) {
    if (std::isnan(score)) return true;
    if (!(std::fabs(score) <= std::numeric_limits<float>::max())) return std::isinf(score);
    return static_cast<double>(static_cast<float>(score)) == score;
  }
  template <typename R, typename S, typename G>
  static void Fill(R* r, S score, G gpus, uint64_t stamp) {
    r->score = score;
    r->gpus = gpus;
    if constexpr (kStamped) r->stamp = stamp;
  }
  void Widen() {
    wide_.resize(narrow_.size());
    for (size_t slot = 0; slot < narrow_.size(); ++slot) {
      if constexpr (kStamped) wide_[slot].stamp = narrow_[slot].stamp;
      wide_[slot].score = narrow_[slot].score;
      wide_[slot].gpus = narrow_[slot].gpus;
    }
    widened_ = true;
  }

  bool widened_ = false;
  std::vector<Narrow> narrow_;  // While not widened.
  std::vector<Wide> wide_;      // Once widened.
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_CHOICE_ARRAY_H_
