// ScoreSets (src/internal/score_sets.h) against a plain model: each rank's
// current score, or none. The sets may hold stale bits (a rank's old score,
// or a rank that is gone); TakeBest() must see through them exactly as the
// memo's `held` does, and clear them.

#include "src/internal/score_sets.h"

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/seeds.h"

namespace gpushare::internal {
namespace {

// The best score held by some rank, and its ranks in order; nullopt when
// no rank holds a score.
std::optional<std::pair<double, std::vector<uint32_t>>> Best(
    const std::vector<std::optional<double>>& current) {
  std::map<double, std::set<uint32_t>> by_score;
  for (uint32_t r = 0; r < current.size(); ++r) {
    if (current[r]) by_score[*current[r]].insert(r);
  }
  if (by_score.empty()) return std::nullopt;
  const auto& [score, ranks] = *by_score.rbegin();
  return std::make_pair(score, std::vector<uint32_t>(ranks.begin(), ranks.end()));
}

// Random adds (moving a rank to a new score leaves its old bit behind),
// removals (the bit stays) and takes of the best, over `n` ranks and scores
// drawn from `values` distinct ones.
void RandomOperations(uint64_t seed, uint32_t n, int values) {
  std::mt19937_64 rng(testing::TestSeed(seed));
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  ScoreSets sets;
  sets.Reset(n);
  std::vector<std::optional<double>> current(n);
  int takes = 0, held_takes = 0;
  for (int step = 0; step < 20000; ++step) {
    SCOPED_TRACE(step);
    const int op = uniform(0, 9);
    const uint32_t rank = static_cast<uint32_t>(uniform(0, static_cast<int>(n) - 1));
    if (op < 5) {  // A rank gets a (maybe new) score.
      const double score = uniform(0, values - 1) * 0.5 - 3;
      ASSERT_TRUE(sets.Add(score, rank));
      current[rank] = score;
    } else if (op < 7) {  // A rank goes (infeasible): its bit stays, stale.
      current[rank].reset();
    } else {  // The best, and as many of its ranks as asked for.
      const size_t want = static_cast<size_t>(uniform(1, 5));
      std::vector<uint32_t> taken;
      double taken_score = 0;
      const bool found = sets.TakeBest(
          [&](double score, uint32_t r) {
            EXPECT_LT(r, n);
            return r < n && current[r] && *current[r] == score;
          },
          [&](uint32_t r) {
            taken_score = *current[r];
            taken.push_back(r);
            return taken.size() < want;
          });
      const auto best = Best(current);
      ++takes;
      ASSERT_EQ(found, best.has_value());
      if (found) {
        ++held_takes;
        EXPECT_EQ(taken_score, best->first);
        std::vector<uint32_t> expected = best->second;
        if (expected.size() > want) expected.resize(want);
        EXPECT_EQ(taken, expected);
      } else {
        EXPECT_EQ(sets.num_scores(), 0u);  // Every bit was stale: all gone.
      }
    }
    ASSERT_TRUE(sets.Consistent());
  }
  // Every bit still held is one of a current score.
  size_t bits = 0, held = 0;
  sets.ForEach([&](double score, uint32_t r) {
    ++bits;
    held += current[r] && *current[r] == score;
  });
  size_t live = 0;
  for (const auto& c : current) live += c.has_value();
  EXPECT_EQ(held, live);
  EXPECT_GE(bits, held);
  EXPECT_GT(held_takes, takes / 2);
}

TEST(ScoreSetsTest, MatchesAPlainModelOverRandomOperations) {
  for (uint32_t n : {1u, 63u, 64u, 65u, 700u, 4097u, 5000u}) {
    SCOPED_TRACE(n);
    RandomOperations(n, n, 12);
  }
}

TEST(ScoreSetsTest, ManyRanksFewScores) { RandomOperations(99, 20000, 3); }

// Ranks inserted among the others (a node added to the tie order) or
// removed (a node removed) keep every other rank's bits, stale ones
// included, moved up or down past that rank: the sets then answer as the
// model with an empty rank inserted, or the rank erased, there. The ranks
// cross word (64) and summary-word (4,096) boundaries both ways.
TEST(ScoreSetsTest, InsertedAndRemovedRanksMoveTheOthers) {
  for (uint32_t start : {1u, 60u, 4090u}) {
    SCOPED_TRACE(start);
    std::mt19937_64 rng(testing::TestSeed(start));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    ScoreSets sets;
    sets.Reset(start);
    std::vector<std::optional<double>> current(start);
    for (int step = 0; step < 3000; ++step) {
      SCOPED_TRACE(step);
      const uint32_t n = static_cast<uint32_t>(current.size());
      const int op = uniform(0, 9);
      const int inserts = step < 1500 ? 2 : 1;  // Growing, then shrinking back.
      if (op < inserts) {  // A rank inserted anywhere, the end included.
        const uint32_t r = static_cast<uint32_t>(uniform(0, static_cast<int>(n)));
        sets.InsertRank(r);
        current.insert(current.begin() + r, std::nullopt);
        ASSERT_EQ(sets.num_ranks(), n + 1);
      } else if (op < 3) {  // A rank removed, with its bits (held or stale).
        if (n == 1) continue;
        const uint32_t r = static_cast<uint32_t>(uniform(0, static_cast<int>(n) - 1));
        sets.RemoveRank(r);
        current.erase(current.begin() + r);
        ASSERT_EQ(sets.num_ranks(), n - 1);
      } else if (op < 7) {
        const uint32_t r = static_cast<uint32_t>(uniform(0, static_cast<int>(n) - 1));
        const double score = uniform(0, 5);
        ASSERT_TRUE(sets.Add(score, r));
        current[r] = score;
      } else if (op < 8) {  // Infeasible: its bit stays, stale.
        current[static_cast<uint32_t>(uniform(0, static_cast<int>(n) - 1))].reset();
      } else {  // Take every rank of the best score.
        std::vector<uint32_t> taken;
        double taken_score = 0;
        const bool found = sets.TakeBest(
            [&](double score, uint32_t r) { return r < n && current[r] && *current[r] == score; },
            [&](uint32_t r) {
              taken_score = *current[r];
              taken.push_back(r);
              return true;
            });
        const auto best = Best(current);
        ASSERT_EQ(found, best.has_value());
        if (found) {
          EXPECT_EQ(taken_score, best->first);
          EXPECT_EQ(taken, best->second);
        }
      }
      ASSERT_TRUE(sets.Consistent());
      // Every bit is at a rank below the count, and every current score has its bit.
      size_t held = 0;
      sets.ForEach([&](double score, uint32_t r) {
        ASSERT_LT(r, current.size());
        held += current[r] && *current[r] == score;
      });
      size_t live = 0;
      for (const auto& c : current) live += c.has_value();
      ASSERT_EQ(held, live);
    }
  }
}

TEST(ScoreSetsTest, AtMostMaxScoresAndAFailedAddChangesNothing) {
  ScoreSets sets;
  sets.Reset(300);
  for (uint32_t i = 0; i < ScoreSets::kMaxScores; ++i) {
    ASSERT_TRUE(sets.Add(static_cast<double>(i), i));
  }
  EXPECT_EQ(sets.num_scores(), ScoreSets::kMaxScores);
  EXPECT_FALSE(sets.Add(-1.0, 200));   // A new score: refused.
  EXPECT_FALSE(sets.Add(1000.0, 201));
  EXPECT_TRUE(sets.Add(5.0, 202));     // A score held: fine.
  EXPECT_EQ(sets.num_scores(), ScoreSets::kMaxScores);
  EXPECT_TRUE(sets.Consistent());
  std::set<std::pair<double, uint32_t>> bits;
  sets.ForEach([&](double score, uint32_t r) { bits.emplace(score, r); });
  EXPECT_EQ(bits.size(), ScoreSets::kMaxScores + 1);
  EXPECT_FALSE(bits.count({-1.0, 200u}));
  EXPECT_FALSE(bits.count({1000.0, 201u}));
  EXPECT_TRUE(bits.count({5.0, 202u}));
  // Once the best scores' bits are all stale they go, and make room.
  std::vector<uint32_t> taken;
  EXPECT_TRUE(sets.TakeBest([](double score, uint32_t) { return score < 100; },
                            [&](uint32_t r) {
                              taken.push_back(r);
                              return true;
                            }));
  EXPECT_EQ(taken, std::vector<uint32_t>{99});
  EXPECT_EQ(sets.num_scores(), 100u);
  EXPECT_TRUE(sets.Add(-1.0, 200));
  EXPECT_TRUE(sets.Consistent());
}

// Zero and minus zero are one score, as the scan's comparison has it.
TEST(ScoreSetsTest, ZeroAndMinusZeroAreOneScore) {
  ScoreSets sets;
  sets.Reset(10);
  ASSERT_TRUE(sets.Add(0.0, 3));
  ASSERT_TRUE(sets.Add(-0.0, 1));
  EXPECT_EQ(sets.num_scores(), 1u);
  std::vector<uint32_t> taken;
  EXPECT_TRUE(sets.TakeBest([](double, uint32_t) { return true; },
                            [&](uint32_t r) {
                              taken.push_back(r);
                              return true;
                            }));
  EXPECT_EQ(taken, (std::vector<uint32_t>{1, 3}));
}

}  // namespace
}  // namespace gpushare::internal
