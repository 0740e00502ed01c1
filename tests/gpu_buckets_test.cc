// The GPU index's ordered set (src/internal/gpu_buckets.h) against a
// std::set model: random inserts, erases and Next() queries, with shapes
// that grow past the bit-set threshold and shrink back below it, positions
// at both ends of the universe, and copies that must be independent.

#include "src/internal/gpu_buckets.h"

#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gpushare::internal {
namespace {

using Model = std::set<std::pair<uint64_t, uint32_t>>;

// Next() as the model answers it.
bool ModelNext(const Model& model, uint64_t shape, uint64_t position, uint64_t* at_shape,
               uint32_t* at_position) {
  auto it = position > UINT32_MAX ? model.upper_bound({shape, UINT32_MAX})
                                   : model.lower_bound({shape, static_cast<uint32_t>(position)});
  if (it == model.end()) return false;
  *at_shape = it->first;
  *at_position = it->second;
  return true;
}

void ExpectSame(const GpuBuckets& set, const Model& model) {
  ASSERT_EQ(set.size(), model.size());
  Model listed;
  set.ForEach([&](uint64_t shape, uint32_t position) {
    EXPECT_TRUE(listed.empty() || *listed.rbegin() < std::make_pair(shape, position));
    listed.emplace(shape, position);
  });
  EXPECT_EQ(listed, model);
}

// Random operations on `set` and `model` over `shapes` shapes; returns how
// many Next() queries agreed.
int Churn(GpuBuckets& set, Model& model, uint64_t shapes, int steps, std::mt19937_64& rng) {
  const uint64_t universe = set.universe();
  std::uniform_int_distribution<uint64_t> shape_of(0, shapes - 1);
  std::uniform_int_distribution<uint32_t> position_of(0, static_cast<uint32_t>(universe - 1));
  int agreed = 0;
  for (int step = 0; step < steps; ++step) {
    const uint64_t shape = shape_of(rng) << 11 | 7;
    const uint32_t position = position_of(rng);
    switch (rng() % 4) {
      case 0:
      case 1: {
        const bool added = model.emplace(shape, position).second;
        EXPECT_EQ(set.Insert(shape, position), added) << shape << " " << position;
        break;
      }
      case 2: {
        // Mostly pairs that are there, so that buckets also shrink.
        auto pick = model.lower_bound({shape, position});
        const auto pair = pick != model.end() ? *pick : std::make_pair(shape, position);
        const bool removed = model.erase(pair) > 0;
        EXPECT_EQ(set.Erase(pair.first, pair.second), removed);
        break;
      }
      default: {
        const uint64_t from = rng() % 2 == 0 ? position : position + 1;
        uint64_t s = 0, want_s = 0;
        uint32_t p = 0, want_p = 0;
        const bool want = ModelNext(model, shape, from, &want_s, &want_p);
        EXPECT_EQ(set.Next(shape, from, &s, &p), want);
        if (want) {
          EXPECT_EQ(s, want_s);
          EXPECT_EQ(p, want_p);
        }
        agreed += want;
        break;
      }
    }
  }
  return agreed;
}

TEST(GpuBucketsTest, MatchesASetThroughGrowthAndShrinkage) {
  std::mt19937_64 rng(7);
  for (uint64_t universe : {1u, 64u, 100u, 4096u, 70000u}) {
    GpuBuckets set(universe);
    Model model;
    // Few shapes: buckets grow past the threshold into bit sets.
    EXPECT_GT(Churn(set, model, 3, 20000, rng), 0) << universe;
    ExpectSame(set, model);
    // Mostly erases: they shrink back.
    for (int i = 0; i < 30000 && !model.empty(); ++i) {
      auto it = model.begin();
      std::advance(it, static_cast<long>(rng() % model.size()));
      ASSERT_TRUE(set.Erase(it->first, it->second));
      model.erase(it);
    }
    ExpectSame(set, model);
    // Many shapes: small buckets.
    Churn(set, model, 500, 20000, rng);
    ExpectSame(set, model);
  }
}

TEST(GpuBucketsTest, EndsOfTheUniverse) {
  const uint64_t universe = 64 * 64 * 3 + 5;  // Words and summary words not full.
  GpuBuckets set(universe);
  const uint32_t last = static_cast<uint32_t>(universe - 1);
  EXPECT_FALSE(set.Insert(1, static_cast<uint32_t>(universe)));  // Outside.
  uint64_t s;
  uint32_t p;
  EXPECT_FALSE(set.Next(0, 0, &s, &p));
  ASSERT_TRUE(set.Insert(1, last));
  ASSERT_TRUE(set.Insert(1, 0));
  ASSERT_TRUE(set.Next(1, 1, &s, &p));
  EXPECT_EQ(p, last);
  // Dense now, holding the last position and a run far before it.
  for (uint32_t q = 100; q < 300; ++q) ASSERT_TRUE(set.Insert(1, q));
  ASSERT_TRUE(set.Next(1, 300, &s, &p));
  EXPECT_EQ(p, last);
  EXPECT_FALSE(set.Next(1, universe, &s, &p));
  EXPECT_FALSE(set.Next(1, uint64_t{1} << 32, &s, &p));
  ASSERT_TRUE(set.Insert(2, 0));
  ASSERT_TRUE(set.Next(1, universe, &s, &p));  // On to the next shape.
  EXPECT_EQ(s, 2u);
  EXPECT_EQ(p, 0u);
  EXPECT_FALSE(set.Erase(3, 0));
  EXPECT_FALSE(set.Erase(1, 1));
  EXPECT_EQ(set.size(), 203u);
}

TEST(GpuBucketsTest, CopiesAreIndependent) {
  std::mt19937_64 rng(11);
  GpuBuckets set(5000);
  Model model;
  Churn(set, model, 2, 5000, rng);
  GpuBuckets copy = set;
  Model copy_model = model;
  Churn(set, model, 2, 5000, rng);
  Churn(copy, copy_model, 2, 5000, rng);
  ExpectSame(set, model);
  ExpectSame(copy, copy_model);
}

}  // namespace
}  // namespace gpushare::internal
