// SpreadOrder (src/internal/spread_order.h) against a plain ordered set of
// the same keys, over random inserts, erases and node removals (the later
// slots move down), in both of its forms.

#include "src/internal/spread_order.h"

#include <algorithm>
#include <iterator>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "gpushare/types.h"
#include "gtest/gtest.h"
#include "tests/testing/seeds.h"

namespace gpushare::internal {
namespace {

// A key and the pool of its node, as the index inserts them.
struct Held {
  SpreadKey key;
  SpreadOrder::Pool pool;
};

class Keys {
 public:
  explicit Keys(uint64_t seed) : rng_(testing::TestSeed(seed)) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  // A key as the index makes it for a node of 4 GPUs and `memory` units,
  // `used` used.
  Held Make(uint32_t slot, int64_t memory, int64_t used) {
    const int64_t compute = 4 * kGpuCompute;
    const int64_t compute_used = Uniform(0, 2) * kGpuCompute;
    SpreadKey k;
    k.memory_ratio = static_cast<double>(used) / static_cast<double>(memory);
    k.compute_ratio = static_cast<double>(compute_used) / static_cast<double>(compute);
    k.neg_top = -Uniform(0, 4);
    k.inv_tie = static_cast<uint64_t>(Uniform(0, 3));  // Ties, broken by slot.
    k.kth = Uniform(0, 16);
    k.slot = slot;
    k.gpu = Uniform(-1, 3);
    return Held{k, SpreadOrder::Pool{memory, used, compute, compute_used}};
  }

 private:
  std::mt19937_64 rng_;
};

std::vector<SpreadKey> Sorted(const std::map<uint32_t, Held>& held) {
  std::set<SpreadKey, SpreadLess> keys;
  for (const auto& [slot, h] : held) keys.insert(h.key);
  return {keys.begin(), keys.end()};
}

bool SameKeys(const std::vector<SpreadKey>& a, const std::vector<SpreadKey>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (SpreadLess()(a[i], b[i]) || SpreadLess()(b[i], a[i]) || a[i].kth != b[i].kth ||
        a[i].gpu != b[i].gpu) {
      return false;
    }
  }
  return true;
}

// Find() gives, while the order is in buckets, exactly the key and pool
// each held node was inserted with, and nothing for the others.
void ExpectFindsHeld(const SpreadOrder& order, const std::map<uint32_t, Held>& held,
                     uint32_t slots) {
  for (uint32_t slot = 0; slot < slots; ++slot) {
    SpreadKey key;
    SpreadOrder::Pool pool;
    const bool found = order.Find(slot, &key, &pool);
    const auto it = held.find(slot);
    ASSERT_EQ(found, order.bucketed() && it != held.end()) << "slot " << slot;
    if (!found) continue;
    const Held& h = it->second;
    EXPECT_TRUE(SameKeys({key}, {h.key})) << "slot " << slot;
    EXPECT_EQ(key.inv_tie, h.key.inv_tie);
    EXPECT_EQ(std::make_tuple(pool.memory, pool.memory_used, pool.compute, pool.compute_used),
              std::make_tuple(h.pool.memory, h.pool.memory_used, h.pool.compute,
                              h.pool.compute_used))
        << "slot " << slot;
  }
}

// What RandomOperations() does: `steps` random inserts, erases and re-keys
// of up to `slots` nodes of `memory` units with at most `used_most` used,
// and now and then a node's removal from the cluster; with `odd_memory_at`
// >= 0, the node inserted at that step has other GPU memory. Then every node
// is erased.
struct Workload {
  int64_t memory = 64;
  int64_t used_most = 64;
  int odd_memory_at = -1;
  uint32_t slots = 200;
  int steps = 20000;
};

void RandomOperations(uint64_t seed, const Workload& run, bool* ended_bucketed) {
  Keys gen(seed);
  SpreadOrder order;
  std::map<uint32_t, Held> held;
  auto check = [&](int step) {
    ASSERT_TRUE(order.Consistent()) << "step " << step;
    ASSERT_TRUE(SameKeys(order.Keys(), Sorted(held))) << "step " << step;
    ExpectFindsHeld(order, held, run.slots);
  };
  for (int step = 0; step < run.steps; ++step) {
    const uint32_t slot = static_cast<uint32_t>(gen.Uniform(0, static_cast<int>(run.slots) - 1));
    if (step != run.odd_memory_at && gen.Uniform(0, 49) == 0) {
      // The node leaves: its key is erased, and the later slots move down.
      if (auto it = held.find(slot); it != held.end()) {
        order.Erase(it->second.key, it->second.pool);
        held.erase(it);
      }
      order.SlotRemoved(slot);
      std::map<uint32_t, Held> moved;
      for (const auto& [s, h] : held) {
        Held renumbered = h;
        renumbered.key.slot = s > slot ? s - 1 : s;
        moved.emplace(renumbered.key.slot, renumbered);
      }
      held = std::move(moved);
      check(step);
      continue;
    }
    auto it = held.find(slot);
    if (it != held.end()) {
      // Every other erase by slot while in buckets, as a release does.
      if (order.bucketed() && step % 2 == 0) {
        ASSERT_TRUE(order.EraseSlot(slot)) << "step " << step;
      } else {
        order.Erase(it->second.key, it->second.pool);
      }
      held.erase(it);
    }
    if (step == run.odd_memory_at || gen.Uniform(0, 2) > 0) {
      const int64_t m = step == run.odd_memory_at ? run.memory + 8 : run.memory;
      const Held h = gen.Make(slot, m, gen.Uniform(0, static_cast<int>(run.used_most)));
      order.Insert(h.key, h.pool);
      held[slot] = h;
    }
    ASSERT_EQ(order.size(), held.size()) << "step " << step;
    if (step % 97 == 0) check(step);
  }
  check(run.steps);
  // ForEach stops when told to.
  int seen = 0;
  order.ForEach([&](const SpreadKey&) { return ++seen < 5; });
  EXPECT_EQ(seen, std::min<int>(5, static_cast<int>(held.size())));
  *ended_bucketed = order.bucketed();
  // Drained in random order, every bucket shrinks to nothing.
  for (int step = run.steps; !held.empty(); ++step) {
    auto it = held.begin();
    std::advance(it, gen.Uniform(0, static_cast<int>(held.size()) - 1));
    order.Erase(it->second.key, it->second.pool);
    held.erase(it);
    ASSERT_EQ(order.size(), held.size()) << "step " << step;
    if (step % 31 == 0) check(step);
  }
  check(-1);
}

TEST(SpreadOrderTest, OnePoolKeepsBucketsInTheOrderOfASet) {
  bool bucketed = false;
  RandomOperations(1, Workload{}, &bucketed);
  EXPECT_TRUE(bucketed);
}

// Two amounts of memory used among 1,200 nodes (about 400 each): buckets grow past
// kFlatMost into B-trees and shrink back into arrays.
TEST(SpreadOrderTest, CrowdedBucketsTurnIntoTreesAndBack) {
  static_assert(SpreadOrder::kFlatMost < 1200 / 3, "buckets must outgrow their arrays");
  bool bucketed = false;
  RandomOperations(5, Workload{64, 1, -1, 1200, 20000}, &bucketed);
  EXPECT_TRUE(bucketed);
}

// A key is one node's place in the order: a second key of the same place
// (fields not ordered on aside) is not inserted, and erasing by such a key
// erases the one held; in a bucket's array as in its tree.
TEST(SpreadOrderTest, AKeyIsUniqueByItsPlaceInTheOrder) {
  for (const size_t others : {size_t{0}, 2 * SpreadOrder::kFlatMost}) {
    Keys gen(6);
    SpreadOrder order;
    for (uint32_t slot = 1; slot <= others; ++slot) {
      const Held h = gen.Make(slot, 64, 10);  // All in the bucket of 10 units.
      order.Insert(h.key, h.pool);
    }
    Held first = gen.Make(0, 64, 10);
    first.key.kth = 3;
    order.Insert(first.key, first.pool);
    Held again = first;
    again.key.kth = 7;
    again.key.gpu = first.key.gpu == 0 ? 1 : 0;
    order.Insert(again.key, again.pool);
    ASSERT_EQ(order.size(), others + 1) << others;
    SpreadKey key;
    SpreadOrder::Pool pool;
    ASSERT_TRUE(order.Find(0, &key, &pool));
    EXPECT_EQ(key.kth, 3) << others;
    EXPECT_EQ(key.gpu, first.key.gpu) << others;
    order.Erase(again.key, again.pool);
    EXPECT_EQ(order.size(), others) << others;
    EXPECT_FALSE(order.Find(0, &key, &pool));
    EXPECT_TRUE(order.Consistent());
  }
}

TEST(SpreadOrderTest, ANodeOfAnotherKindTurnsItIntoOneTree) {
  bool bucketed = true;
  RandomOperations(2, Workload{64, 64, 5000}, &bucketed);
  EXPECT_FALSE(bucketed);
}

TEST(SpreadOrderTest, LargeNodesKeepOneTree) {
  bool bucketed = true;
  RandomOperations(3, Workload{SpreadOrder::kMaxBuckets + 1, SpreadOrder::kMaxBuckets + 1},
                   &bucketed);
  EXPECT_FALSE(bucketed);
}

TEST(SpreadOrderTest, ClearStartsAfresh) {
  Keys gen(4);
  SpreadOrder order;
  const Held first = gen.Make(0, 32, 5);
  const Held odd = gen.Make(1, 40, 3);
  order.Insert(first.key, first.pool);
  EXPECT_TRUE(order.bucketed());
  order.Insert(odd.key, odd.pool);
  EXPECT_FALSE(order.bucketed());
  order.clear();
  EXPECT_EQ(order.size(), 0u);
  order.Insert(odd.key, odd.pool);
  EXPECT_TRUE(order.bucketed());
  ASSERT_EQ(order.Keys().size(), 1u);
  EXPECT_EQ(order.Keys()[0].slot, 1u);
  // Erasing what is not there changes nothing.
  const Held absent = gen.Make(2, 40, 7);
  order.Erase(absent.key, absent.pool);
  order.Erase(odd.key, first.pool);
  EXPECT_FALSE(order.EraseSlot(2));
  EXPECT_EQ(order.size(), 1u);
  EXPECT_TRUE(order.Consistent());
}

}  // namespace
}  // namespace gpushare::internal
