// ChoiceArray (src/internal/choice_array.h) against a plain model: every
// slot gives back exactly the score, GPUs and stamp last set, in the narrow
// form while they fit it and after widening, which keeps the slots set
// before it.

#include "src/internal/choice_array.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/seeds.h"

namespace gpushare::internal {
namespace {

struct Model {
  double score = 0;
  uint64_t gpus = 0;
  uint64_t stamp = 0;
};

// Bit for bit (so that -0.0 and 0.0 differ), NaN for any NaN.
bool SameScore(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <bool kStamped>
void ExpectMatches(const ChoiceArray<kStamped>& array, const std::vector<Model>& model) {
  ASSERT_EQ(array.size(), model.size());
  for (uint32_t slot = 0; slot < model.size(); ++slot) {
    SCOPED_TRACE(slot);
    EXPECT_TRUE(SameScore(array.score(slot), model[slot].score))
        << array.score(slot) << " != " << model[slot].score;
    EXPECT_EQ(array.gpus(slot), model[slot].gpus);
    if constexpr (kStamped) {
      EXPECT_EQ(array.stamp(slot), model[slot].stamp);
    }
  }
}

TEST(ChoiceArrayTest, WholeScoresAndLowGpusStayNarrow) {
  ChoiceArray<false> verdicts;
  ChoiceArray<true> evaluations;
  std::vector<Model> model(100);
  verdicts.Resize(100);
  evaluations.Resize(100);
  const double scores[] = {0.0, -0.0, 100.0, -1e6, 16777216.0, 0.5, -0.25, std::ldexp(1.0, 127),
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
  for (uint32_t slot = 0; slot < 100; ++slot) {
    const double score = scores[slot % std::size(scores)];
    const uint64_t gpus = (uint64_t{1} << (slot % 32)) | 1;
    model[slot] = Model{score, gpus, (uint64_t{slot} + 1) << 40};
    verdicts.Set(slot, score, gpus);
    evaluations.Set(slot, score, gpus, model[slot].stamp);
  }
  EXPECT_FALSE(verdicts.widened());
  EXPECT_FALSE(evaluations.widened());
  ExpectMatches(evaluations, model);
  for (Model& m : model) m.stamp = 0;
  ExpectMatches(verdicts, model);
}

TEST(ChoiceArrayTest, ANanIsKeptAsANanWithoutWidening) {
  ChoiceArray<false> verdicts;
  verdicts.Resize(2);
  verdicts.Set(1, std::nan(""), 3);
  EXPECT_FALSE(verdicts.widened());
  EXPECT_TRUE(std::isnan(verdicts.score(1)));
  EXPECT_EQ(verdicts.gpus(1), 3u);
}

// Each value a float cannot hold, or a GPU past the 32nd, widens the array
// and keeps what every slot held before.
TEST(ChoiceArrayTest, WidensForWhatTheNarrowFormCannotHold) {
  struct Case {
    double score;
    uint64_t gpus;
  };
  const Case cases[] = {
      {16777217.0, 1},             // 2^24 + 1: the first whole number a float misses.
      {0.1, 1},                    // Not a binary fraction of few digits.
      {1e39, 1},                   // Past a float's range.
      {-1e-46, 1},                 // Below a float's smallest.
      {2.0, uint64_t{1} << 32},    // GPU 32.
      {2.0, uint64_t{1} << 63},    // GPU 63.
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.score);
    SCOPED_TRACE(c.gpus);
    for (bool gpus_alone : {false, true}) {
      if (gpus_alone && c.gpus >> 32 == 0) continue;
      ChoiceArray<true> array;
      std::vector<Model> model(10);
      array.Resize(10);
      for (uint32_t slot = 0; slot < 10; ++slot) {
        model[slot] = Model{slot * 10.0 - 40, uint64_t{1} << slot, 100 + slot};
        array.Set(slot, model[slot].score, model[slot].gpus, model[slot].stamp);
      }
      ASSERT_FALSE(array.widened());
      if (gpus_alone) {
        array.SetGpus(7, c.gpus);
        model[7].gpus = c.gpus;
      } else {
        array.Set(7, c.score, c.gpus, 9);
        model[7] = Model{c.score, c.gpus, 9};
      }
      EXPECT_TRUE(array.widened());
      ExpectMatches(array, model);
      array.Trim();
      EXPECT_TRUE(array.Consistent());
      ExpectMatches(array, model);
      // Wide for good: new slots too, and narrow values.
      array.Resize(12);
      model.resize(12);
      array.Set(11, 1.0, 2, 3);
      model[11] = Model{1.0, 2, 3};
      EXPECT_TRUE(array.widened());
      ExpectMatches(array, model);
    }
  }
}

TEST(ChoiceArrayTest, VisitGivesTheRecordsOfTheCurrentForm) {
  ChoiceArray<false> array;
  array.Resize(4);
  array.Set(2, 1.0, 1);
  EXPECT_EQ(array.Visit([](const auto* records) { return sizeof *records; }), 8u);
  array.Set(3, 0.1, 1);
  EXPECT_EQ(array.Visit([](const auto* records) { return sizeof *records; }), 16u);
  // Before Trim() the narrow records stay (a walk that widened may still
  // fetch them ahead): not yet consistent.
  EXPECT_FALSE(array.Consistent());
  array.Trim();
  EXPECT_TRUE(array.Consistent());
  ChoiceArray<true> stamped;
  stamped.Resize(1);
  EXPECT_EQ(stamped.Visit([](const auto* records) { return sizeof *records; }), 16u);
}

// Random sets of values of every kind, checked against the model after
// each step.
TEST(ChoiceArrayTest, MatchesAModelOverRandomSets) {
  for (int round = 0; round < 20; ++round) {
    std::mt19937_64 rng(testing::TestSeed(round + 1));
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    ChoiceArray<true> array;
    std::vector<Model> model;
    // Rounds differ in how soon a wide value comes, if ever.
    const int wide_every = uniform(0, 3) == 0 ? 0 : uniform(5, 400);
    for (int step = 0; step < 400; ++step) {
      if (uniform(0, 40) == 0 || model.empty()) {
        const uint32_t n = static_cast<uint32_t>(model.size() + uniform(1, 8));
        array.Resize(n);
        model.resize(n);
      }
      const uint32_t slot = static_cast<uint32_t>(uniform(0, static_cast<int>(model.size()) - 1));
      const bool wide = wide_every > 0 && uniform(1, wide_every) == 1;
      double score = uniform(-200, 200);
      uint64_t gpus = uint64_t{1} << uniform(0, 31);
      if (wide) {
        if (uniform(0, 1) == 0) {
          score = score / 3 + 1e9;
        } else {
          gpus |= uint64_t{1} << uniform(32, 63);
        }
      }
      if (uniform(0, 4) == 0) {
        array.SetGpus(slot, gpus);
        model[slot].gpus = gpus;
      } else {
        const uint64_t stamp = rng();
        array.Set(slot, score, gpus, stamp);
        model[slot] = Model{score, gpus, stamp};
      }
      array.Trim();
      ASSERT_TRUE(array.Consistent());
      ASSERT_NO_FATAL_FAILURE(ExpectMatches(array, model));
    }
    if (wide_every == 0) {
      EXPECT_FALSE(array.widened());
    }
  }
}

}  // namespace
}  // namespace gpushare::internal
