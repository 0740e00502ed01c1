// Internal: an order of nodes for scores that take few distinct values.
// Not part of the public API.
//
// The score memo keeps each shape's feasible nodes in the scan's ranking:
// higher score first, then the tie order (tie key desc, slot asc). The
// built-in policies bestfit, dotprod, gpupacking and gpuclustering score in
// whole numbers, about a hundred values, so the ranking is a few sets of
// nodes, each in the tie order. ScoreSets keeps, per distinct score, a bit
// per node rank (a node's position in the tie order, the same for every
// shape), and a summary bit per 64-bit word. Adding a node costs a search
// among the scores and setting two bits, where a B-tree insert at 10,000
// nodes costs a descent through cache misses; and its cost does not grow
// with the number of nodes.
//
// Like the memo's trees, the sets are lazy about removal: a node whose
// score changed, or that became infeasible, keeps its old bit, and the
// caller's `held(score, rank)` tells it apart when met at the front, where
// it is cleared. A bit cannot go stale twice without being met or set again,
// so the memory is fixed (a bit per node and score held) and no sweep is
// needed.
//
//   ScoreSets sets;
//   sets.Reset(num_nodes);
//   if (!sets.Add(score, rank)) ...;  // More than kMaxScores scores.
//   sets.TakeBest(held, [&](uint32_t rank) { ...; return want_more; });
//   sets.InsertRank(r);  // A node joined the tie order at rank r.
//   sets.RemoveRank(r);  // The node of rank r left it.

#ifndef GPUSHARE_INTERNAL_SCORE_SETS_H_
#define GPUSHARE_INTERNAL_SCORE_SETS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace gpushare::internal {

class ScoreSets {
 public:
  // At most this many distinct scores at once (a set costs a bit per node:
  // 128 of them as much memory as the memo's verdicts).
  static constexpr size_t kMaxScores = 128;

  // Empties the sets, for ranks below `n`.
  void Reset(uint32_t n) {
    n_ = n;
    scores_.clear();
    sets_.clear();
    spare_.clear();
  }
  uint32_t num_ranks() const { return n_; }
  // Distinct scores held (those whose bits are all stale included).
  size_t num_scores() const { return scores_.size(); }

  // Sets the bit of `rank` (below num_ranks()) under `score` (not NaN).
  // Returns false, and changes nothing, when `score` is not held yet and
  // kMaxScores are.
  bool Add(double score, uint32_t rank) {
    // Ascending, so that the best score is at the back.
    const auto it = std::lower_bound(scores_.begin(), scores_.end(), score);
    const size_t i = static_cast<size_t>(it - scores_.begin());
    if (it == scores_.end() || *it != score) {
      if (scores_.size() >= kMaxScores) return false;
      scores_.insert(it, score);
      sets_.insert(sets_.begin() + static_cast<std::ptrdiff_t>(i), NewSet());
    }
    Set& s = sets_[i];
    s.words[rank >> 6] |= uint64_t{1} << (rank & 63);
    s.summary[rank >> 12] |= uint64_t{1} << (rank >> 6 & 63);
    return true;
  }

  // Makes room for a new rank `r` (at most num_ranks()): every rank from r
  // on moves up by one, keeping its bits, and r has none. A node added to
  // the tie order costs a shift of each score's bits, where filling the sets
  // again costs an Add() per feasible node.
  void InsertRank(uint32_t r) {
    ++n_;
    for (Set& s : sets_) ShiftUp(s, r);
    for (Set& s : spare_) {  // All clear: only the size changes.
      s.words.resize(NumWords(), 0);
      s.summary.resize((NumWords() + 63) / 64, 0);
    }
  }

  // Drops rank `r` (below num_ranks()) and its bits: every rank above it
  // moves down by one, keeping its bits. (A node removed from the order.)
  void RemoveRank(uint32_t r) {
    --n_;
    for (Set& s : sets_) {
      EraseBit(&s.words, r);
      Summarise(s, r >> 6);  // A word past the new count is clear now.
      s.words.resize(NumWords());
      s.summary.resize((NumWords() + 63) / 64);
    }
    for (Set& s : spare_) {  // All clear: only the size changes.
      s.words.resize(NumWords());
      s.summary.resize((NumWords() + 63) / 64);
    }
  }

  // Removes bit `bit` of the bit set `words`, moving every bit above it
  // down by one (the top bit becomes clear); the size stays.
  static void EraseBit(std::vector<uint64_t>* words, uint32_t bit) {
    std::vector<uint64_t>& w = *words;
    const size_t first = bit >> 6;
    if (first >= w.size()) return;
    const uint64_t below = (uint64_t{1} << (bit & 63)) - 1;  // Bits that stay.
    w[first] = (w[first] & below) | (w[first] >> 1 & ~below);
    for (size_t i = first; i + 1 < w.size(); ++i) {
      w[i] |= w[i + 1] << 63;
      w[i + 1] >>= 1;
    }
  }

  // Finds the best score with a rank for which held(score, rank) is true,
  // clearing on the way the bits for which it is false (and dropping the
  // scores left without bits); then calls take(rank) for the held ranks of
  // that score, in rank order, until take() returns false. Returns whether
  // some rank was held.
  template <typename Held, typename Take>
  bool TakeBest(Held&& held, Take&& take) {
    while (!scores_.empty()) {
      const double score = scores_.back();
      Set& s = sets_.back();
      bool found = false;
      for (size_t sw = 0; sw < s.summary.size(); ++sw) {
        for (uint64_t sum = s.summary[sw]; sum != 0; sum &= sum - 1) {
          const size_t w = sw * 64 + static_cast<size_t>(__builtin_ctzll(sum));
          for (uint64_t bits = s.words[w]; bits != 0; bits &= bits - 1) {
            const uint32_t rank = static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits));
            if (!held(score, rank)) {
              s.words[w] &= ~(uint64_t{1} << (rank & 63));
              continue;
            }
            found = true;
            if (!take(rank)) return true;  // This word keeps that bit.
          }
          if (s.words[w] == 0) s.summary[sw] &= ~(uint64_t{1} << (w & 63));
        }
      }
      if (found) return true;
      // Every bit of the best score was stale: it goes, its set kept for reuse.
      if (spare_.size() < kMaxSpare) spare_.push_back(std::move(s));
      sets_.pop_back();
      scores_.pop_back();
    }
    return false;
  }

  // Calls f(score, rank) for every bit set.
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < scores_.size(); ++i) {
      const std::vector<uint64_t>& words = sets_[i].words;
      for (size_t w = 0; w < words.size(); ++w) {
        for (uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
          f(scores_[i], static_cast<uint32_t>(w * 64 + __builtin_ctzll(bits)));
        }
      }
    }
  }

  // Structural self-check: scores strictly ascending and at most
  // kMaxScores; every set sized for num_ranks(), with no bit at or past it,
  // and a summary bit exactly where a word has bits.
  bool Consistent() const {
    if (scores_.size() != sets_.size() || scores_.size() > kMaxScores) return false;
    for (size_t i = 1; i < scores_.size(); ++i) {
      if (!(scores_[i - 1] < scores_[i])) return false;
    }
    for (const Set& s : sets_) {
      if (!Sized(s)) return false;
      for (size_t w = 0; w < s.words.size(); ++w) {
        const bool summarised = (s.summary[w >> 6] >> (w & 63) & 1) != 0;
        if (summarised != (s.words[w] != 0)) return false;
      }
      if (n_ % 64 != 0 && !s.words.empty() && s.words.back() >> (n_ % 64) != 0) return false;
    }
    for (const Set& s : spare_) {
      if (!Sized(s)) return false;
      for (uint64_t w : s.words) {
        if (w != 0) return false;
      }
      for (uint64_t w : s.summary) {
        if (w != 0) return false;
      }
    }
    return true;
  }

 private:
  // A score's nodes: bit r of words (word r / 64) for rank r, and bit w of
  // summary for a word w with bits.
  struct Set {
    std::vector<uint64_t> words;
    std::vector<uint64_t> summary;
  };
  static constexpr size_t kMaxSpare = 8;

  size_t NumWords() const { return (static_cast<size_t>(n_) + 63) / 64; }
  bool Sized(const Set& s) const {
    return s.words.size() == NumWords() && s.summary.size() == (NumWords() + 63) / 64;
  }
  // Moves the bits of ranks r and up of `s` (sized for n_ - 1 ranks) up by
  // one, and sizes it for n_.
  void ShiftUp(Set& s, uint32_t r) {
    s.words.resize(NumWords(), 0);
    s.summary.resize((NumWords() + 63) / 64, 0);
    const size_t first = r >> 6;
    for (size_t w = s.words.size() - 1; w > first; --w) {
      s.words[w] = s.words[w] << 1 | s.words[w - 1] >> 63;
    }
    const uint64_t below = (uint64_t{1} << (r & 63)) - 1;  // Ranks that stay.
    s.words[first] = (s.words[first] & below) | (s.words[first] & ~below) << 1;
    Summarise(s, first);
  }
  // Sets the summary bits of words `first` on from the words.
  static void Summarise(Set& s, size_t first) {
    for (size_t w = first; w < s.words.size(); ++w) {
      const uint64_t bit = uint64_t{1} << (w & 63);
      if (s.words[w] != 0) {
        s.summary[w >> 6] |= bit;
      } else {
        s.summary[w >> 6] &= ~bit;
      }
    }
  }
  // An empty set, from the spares when one is left (all its bits are clear).
  Set NewSet() {
    if (!spare_.empty()) {
      Set s = std::move(spare_.back());
      spare_.pop_back();
      return s;
    }
    Set s;
    s.words.assign(NumWords(), 0);
    s.summary.assign((NumWords() + 63) / 64, 0);
    return s;
  }

  uint32_t n_ = 0;
  std::vector<double> scores_;  // Ascending; sets_[i] holds scores_[i]'s ranks.
  std::vector<Set> sets_;
  std::vector<Set> spare_;  // Emptied sets, all bits clear.
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_SCORE_SETS_H_
