// The cluster's placement store (src/internal/placement_store.h) against a
// std::map model: random inserts, finds and erases (slots freed and reused),
// copies and assignments that must be independent afterwards, and ids the
// short-string buffer does not hold or that contain NUL bytes.

#include "src/internal/placement_store.h"

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gpushare::internal {
namespace {

using Model = std::map<std::string, Placement>;

Placement Make(std::string id, int n) {
  Placement p;
  p.request_id = std::move(id);
  p.node = absl::StrCat("node-", n % 17);
  p.gpus.assign(1 + n % 4, 0);
  for (size_t i = 0; i < p.gpus.size(); ++i) p.gpus[i] = static_cast<int>(i);
  p.memory_per_gpu = n % 9;
  p.cpu = n;
  return p;
}

// Every id of `model` is found with its placement, and nothing else is.
void ExpectSame(const PlacementStore& store, const Model& model) {
  ASSERT_EQ(store.size(), model.size());
  for (const auto& [id, p] : model) {
    const Placement* q = store.Find(id);
    ASSERT_NE(q, nullptr) << id;
    EXPECT_EQ(*q, p) << id;
    EXPECT_TRUE(store.contains(id));
  }
  Model seen;
  store.ForEach([&](const Placement& p) {
    EXPECT_TRUE(seen.emplace(p.request_id, p).second) << "visited twice: " << p.request_id;
  });
  EXPECT_EQ(seen, model);
}

// Ids of three kinds: short, longer than the short-string buffer, with a NUL.
std::string Id(int k) {
  switch (k % 3) {
    case 0:
      return absl::StrCat("p", k);
    case 1:
      return absl::StrCat("namespace-with-a-long-name/pod-", k, "-abcdefghij");
    default:
      return absl::StrCat(std::string("q\0", 2), k);
  }
}

TEST(PlacementStoreTest, MatchesAMapOverRandomOperations) {
  std::mt19937_64 rng(7);
  PlacementStore store;
  Model model;
  for (int step = 0; step < 20000; ++step) {
    const int k = static_cast<int>(rng() % 600);
    const std::string id = Id(k);
    const bool present = model.count(id) > 0;
    ASSERT_EQ(store.contains(id), present) << id;
    if (!present) {
      Placement p = Make(id, step);
      const Placement& stored = (rng() % 2 == 0) ? store.Insert(p) : store.Insert(Placement(p));
      ASSERT_EQ(stored, p);
      model.emplace(id, p);
    } else if (rng() % 3 != 0) {
      const Placement* q = store.Find(id);
      ASSERT_NE(q, nullptr);
      EXPECT_EQ(store.Erase(*q), id);
      model.erase(id);
      EXPECT_EQ(store.Find(id), nullptr);
    }
    if (step % 2500 == 0) {
      store.Reserve(rng() % 100);
      ExpectSame(store, model);
    }
  }
  ExpectSame(store, model);
}

TEST(PlacementStoreTest, AFreedSlotIsFilledNext) {
  PlacementStore store;
  store.Insert(Make("a", 1));
  store.Insert(Make("b", 2));
  store.Insert(Make("c", 3));
  const Placement* b = store.Find("b");
  store.Erase(*b);
  // Filling the freed slot appends nothing, so `b` still points into the
  // slots: at the new placement.
  EXPECT_EQ(&store.Insert(Make("d", 4)), b);
  EXPECT_EQ(store.Find("b"), nullptr);
  EXPECT_EQ(store.Find("d"), b);
  EXPECT_EQ(store.Find("a")->cpu, 1);
  EXPECT_EQ(store.Find("c")->cpu, 3);
}

TEST(PlacementStoreTest, CopiesAreIndependent) {
  PlacementStore store;
  Model model;
  for (int k = 0; k < 300; ++k) {
    store.Insert(Make(Id(k), k));
    model.emplace(Id(k), Make(Id(k), k));
  }
  for (int k = 0; k < 300; k += 4) {
    store.Erase(*store.Find(Id(k)));
    model.erase(Id(k));
  }
  PlacementStore copy(store);
  Model copy_model = model;
  PlacementStore assigned;
  assigned.Insert(Make("gone", 0));
  assigned = store;
  Model assigned_model = model;

  // Change each afterwards: the others do not see it, and each one's lookups
  // read its own slots (a copied index that read the source's would fail).
  for (int k = 1; k < 300; k += 4) {
    store.Erase(*store.Find(Id(k)));
    model.erase(Id(k));
  }
  for (int k = 300; k < 400; ++k) {
    copy.Insert(Make(Id(k), k));
    copy_model.emplace(Id(k), Make(Id(k), k));
  }
  assigned.Erase(*assigned.Find(Id(2)));
  assigned_model.erase(Id(2));
  assigned = assigned;  // Self-assignment changes nothing.

  ExpectSame(store, model);
  ExpectSame(copy, copy_model);
  ExpectSame(assigned, assigned_model);
  EXPECT_EQ(assigned.Find("gone"), nullptr);
}

TEST(PlacementStoreTest, IdsDifferingOnlyAfterANulAreDistinct) {
  PlacementStore store;
  store.Insert(Make(std::string("x\0a", 3), 1));
  store.Insert(Make(std::string("x\0b", 3), 2));
  store.Insert(Make("x", 3));
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Find(std::string("x\0a", 3))->cpu, 1);
  EXPECT_EQ(store.Find(std::string("x\0b", 3))->cpu, 2);
  EXPECT_EQ(store.Find("x")->cpu, 3);
  EXPECT_EQ(store.Find(std::string("x\0", 2)), nullptr);
}

}  // namespace
}  // namespace gpushare::internal
