// Internal: what an idle share of a GPU is worth to the single-GPU shared
// requests of a target workload, as a bin-packing problem. Used by the
// "fgdpack" policy (gpushare/policy.h).
//
// The shared types of the target (one GPU, a share s_i below a whole GPU of
// `full` units, weight p_i) are packed into GPUs as in the cutting-stock
// problem: a pattern is a multiset of shares that fits one GPU, and the LP
// relaxation
//     min  sum_p x_p   s.t.  sum_p a_ip x_p >= p_i,  x >= 0
// gives the fewest GPUs per unit of weight. Its dual
//     max  sum_i p_i y_i   s.t.  sum_i a_ip y_i <= 1 for every pattern p,  y >= 0
// prices each share: y_i is the part of a GPU a copy of type i is worth when
// the workload is packed as tightly as it can be (a share that only fills
// holes others leave is worth 0; one that needs a GPU of its own is worth 1).
// The value of an idle share g is then V(g) = max sum_i a_i y_i over the
// multisets that fit in g (an unbounded knapsack), and placing a share s on
// a GPU with g idle loses V(g) - V(g - s) of packing value: 0 when the share
// fits an optimal pattern of what the GPU can still take, more when it
// breaks one (two shares of 470 on one GPU lose nothing; 470 on a GPU with
// 810 idle loses the room of an 810 share).
//
// Solved by row generation on the dual: a dense simplex with Bland's rule
// over the patterns found so far (at first one pattern per type, as many
// copies as fit), then the most violated pattern from the knapsack, until
// none is violated by more than 1e-9. The dual has many optima (a share
// that only fills the holes larger shares leave may be priced anywhere
// from 0 up to what those holes allow); the objective is tilted by a
// relative 1e-7 per unit of share / full towards the larger shares, so the
// optimum found prices such fillers lowest: 160 beside 810 is worth 0, and
// fills an 810's hole before it opens a GPU. Deterministic: the same target
// gives the same values, bit for bit.

#ifndef GPUSHARE_FGD_PACKING_H_
#define GPUSHARE_FGD_PACKING_H_

#include <cstdint>
#include <memory>
#include <vector>

namespace gpushare::fgd {

// One shared type: its share of a GPU and its weight.
struct PackingItem {
  int64_t share = 0;  // 1..full-1 units.
  double weight = 0;  // > 0.
};

struct PackingValues {
  int64_t full = 0;
  // value[g] = V(g) for g = 0..full; nondecreasing, value[full] <= 1. Empty
  // when there is nothing to pack (no item, or full out of range).
  std::vector<double> value;
  // The items as solved (shares merged, ascending) and their dual prices y_i.
  std::vector<PackingItem> items;
  std::vector<double> price;
  // The LP optimum: GPUs per unit of weight, sum_i p_i y_i.
  double gpus_per_weight = 0;
  // Patterns generated (rows of the final LP).
  int patterns = 0;
  // Whether the LP was solved to its optimum. The solve has a budget (about
  // a third of a second of work); past it, and for the rare target where
  // rounding stalls it, the prices found so far are scaled down until no
  // pattern is worth more than a GPU: feasible, not optimal.
  bool optimal = false;

  // The packing value lost by taking `share` from a GPU with `idle` idle:
  // V(idle) - V(idle - share), or 0 without values. Requires
  // 0 <= share <= idle <= full.
  double Loss(int64_t idle, int64_t share) const {
    if (value.empty()) return 0;
    return value[idle] - value[idle - share];
  }
};

// The largest `full` solved; beyond it the values are empty (a memory target
// in MiB, say, where a share's exact packing matters less than its size).
inline constexpr int64_t kMaxPackingFull = int64_t{1} << 16;

// Solves the LP above for `items` (shares outside 1..full-1 and weights that
// are not positive finite numbers are left out; equal shares are merged) in
// GPUs of `full` units.
PackingValues SolvePacking(const std::vector<PackingItem>& items, int64_t full);

// SolvePacking() remembered across calls: the same items and size give the
// same values, solved once per process (hosts such as the Scheduler make a
// policy per call; a solve takes about a millisecond for the openb target).
// Thread-safe; the 64 most recently solved are kept.
std::shared_ptr<const PackingValues> SharedPacking(const std::vector<PackingItem>& items,
                                                   int64_t full);

}  // namespace gpushare::fgd

#endif  // GPUSHARE_FGD_PACKING_H_
