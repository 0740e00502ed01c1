// EraseUnique (src/internal/btree_erase.h) against the B-tree's own
// erase(key), over random inserts and erases.

#include "src/internal/btree_erase.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>

#include "absl/container/btree_set.h"
#include "gtest/gtest.h"
#include "tests/testing/seeds.h"

namespace gpushare::internal {
namespace {

TEST(BtreeEraseTest, RemovesExactlyTheValue) {
  absl::btree_set<int> set = {1, 2, 3};
  EXPECT_EQ(EraseUnique(set, 2), 1u);
  EXPECT_EQ(set, (absl::btree_set<int>{1, 3}));
  EXPECT_EQ(EraseUnique(set, 2), 0u);  // No longer there: nothing changes.
  EXPECT_EQ(EraseUnique(set, 7), 0u);
  EXPECT_EQ(set, (absl::btree_set<int>{1, 3}));
}

TEST(BtreeEraseTest, MatchesEraseByKeyOverRandomOperations) {
  std::mt19937_64 rng(testing::TestSeed(5));
  absl::btree_set<uint32_t> fast;
  std::set<uint32_t> plain;
  std::uniform_int_distribution<uint32_t> value(0, 2000);
  for (int step = 0; step < 20000; ++step) {
    const uint32_t v = value(rng);
    if (rng() % 2 == 0) {
      fast.insert(v);
      plain.insert(v);
    } else {
      ASSERT_EQ(EraseUnique(fast, v), plain.erase(v)) << "value " << v << " at step " << step;
    }
    ASSERT_EQ(fast.size(), plain.size());
  }
  EXPECT_TRUE(std::equal(fast.begin(), fast.end(), plain.begin(), plain.end()));
}

}  // namespace
}  // namespace gpushare::internal
