// Internal: how the winner among feasible nodes is found, shared by the
// generic scan (Cluster::Plan()), the ordered indexes (placement_index.cc)
// and the score memo (score_memo.cc), so that all three pick the same node.
// Not part of the public API.
//
// The rule (gpushare/policy.h, "GPU topology"): the highest policy score
// (Score's primary, secondary, tertiary keys) wins; among the nodes that
// share it, the first kTopologyWindow in the tie-break order (larger tie key
// first, then lower slot) compete on Score::topology, and the highest key
// wins, ties going to the earlier one. When the request gets no topology key
// (TopologyKeyCap() == 0) the window is one node: the plain tie-break.
//
//   NodeRace race(state.tie_keys, TopologyKeyCap(demand, request));
//   for (each feasible slot) race.Offer(slot, std::move(choice));
//   if (race.Finish(&best, &best_choice)) ...

#ifndef GPUSHARE_INTERNAL_NODE_RACE_H_
#define GPUSHARE_INTERNAL_NODE_RACE_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "gpushare/policy.h"

namespace gpushare::internal {

// How many nodes of equal policy score compete on connectivity.
inline constexpr int kTopologyWindow = 16;

// The policy's own keys of `s` (Score::topology cleared).
inline Score PolicyKeys(Score s) {
  s.topology = 0;
  return s;
}

// Whether slot `a` comes before slot `b` in the tie-break order: larger tie
// key first, then lower slot.
inline bool TieBefore(const std::vector<uint64_t>& tie_keys, uint32_t a, uint32_t b) {
  return tie_keys[a] > tie_keys[b] || (tie_keys[a] == tie_keys[b] && a < b);
}

class NodeRace {
 public:
  // `tie_keys`: the tie key of every slot; `topology_cap`: TopologyKeyCap().
  NodeRace(const std::vector<uint64_t>& tie_keys, double topology_cap)
      : tie_keys_(tie_keys), cap_(topology_cap), limit_(topology_cap > 0 ? kTopologyWindow : 1) {}

  // Whether `a` comes before `b` in the tie-break order.
  bool TieBefore(uint32_t a, uint32_t b) const { return internal::TieBefore(tie_keys_, a, b); }

  // Enters a feasible node with its verdict.
  void Offer(uint32_t slot, NodeChoice choice) {
    const Score keys = PolicyKeys(choice.score);
    if (!window_.empty()) {
      if (keys < best_) return;
      if (best_ < keys) window_.clear();
    }
    best_ = keys;
    auto at = window_.begin();
    while (at != window_.end() && TieBefore(at->first, slot)) ++at;
    if (at - window_.begin() >= limit_) return;
    window_.insert(at, {slot, std::move(choice)});
    if (static_cast<int>(window_.size()) > limit_) window_.pop_back();
  }

  // Whether a node in `slot` whose policy keys are at most `bound` could
  // still change the winner.
  bool CouldWin(const Score& bound, uint32_t slot) const {
    if (window_.empty()) return true;
    const Score keys = PolicyKeys(bound);
    if (keys < best_) return false;
    if (best_ < keys) return true;
    return static_cast<int>(window_.size()) < limit_ || TieBefore(slot, window_.back().first);
  }

  bool found() const { return !window_.empty(); }

  // For walks that meet nodes of equal policy score in the tie-break order:
  // whether no further node of that score can change the winner (the window
  // is full, or a node in it has the largest possible topology key).
  bool Settled() const {
    if (window_.empty()) return false;
    if (static_cast<int>(window_.size()) >= limit_) return true;
    for (const auto& entry : window_) {
      if (entry.second.score.topology >= cap_) return true;
    }
    return false;
  }

  // The winner; false when no node was offered.
  bool Finish(int* best_slot, NodeChoice* best_choice) {
    if (window_.empty()) return false;
    size_t win = 0;
    for (size_t i = 1; i < window_.size(); ++i) {
      if (window_[win].second.score.topology < window_[i].second.score.topology) win = i;
    }
    *best_slot = static_cast<int>(window_[win].first);
    *best_choice = std::move(window_[win].second);
    return true;
  }

 private:
  const std::vector<uint64_t>& tie_keys_;
  const double cap_;
  const int limit_;
  Score best_;  // Policy keys of the nodes in the window.
  // In the tie-break order, at most limit_.
  absl::InlinedVector<std::pair<uint32_t, NodeChoice>, 1> window_;
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_NODE_RACE_H_
