// The cluster's placement store (src/internal/placement_store.h) against a
// std::map model: random inserts, finds and erases (slots freed and reused),
// node positions renumbered as nodes leave, copies and assignments that must
// be independent afterwards, and ids the short-string buffer does not hold or
// that contain NUL bytes.

#include "src/internal/placement_store.h"

#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gpushare::internal {
namespace {

// id -> the placement and its node position.
using Model = std::map<std::string, std::pair<Placement, uint32_t>>;

constexpr uint32_t kNodes = 17;
uint32_t NodeOf(int n) { return static_cast<uint32_t>(n) % kNodes; }

Placement Make(std::string id, int n) {
  Placement p;
  p.request_id = std::move(id);
  p.node = absl::StrCat("node-", NodeOf(n));
  p.gpus.assign(1 + n % 4, 0);
  for (size_t i = 0; i < p.gpus.size(); ++i) p.gpus[i] = static_cast<int>(i);
  p.memory_per_gpu = n % 9;
  p.cpu = n;
  return p;
}

// Stores placement `n` under `id` in both.
void Insert(PlacementStore& store, Model& model, const std::string& id, int n) {
  Placement p = Make(id, n);
  const Placement& stored =
      n % 2 == 0 ? store.Insert(p, NodeOf(n)) : store.Insert(Placement(p), NodeOf(n));
  ASSERT_EQ(stored, p);
  model.emplace(id, std::make_pair(p, NodeOf(n)));
}

void Erase(PlacementStore& store, Model& model, const std::string& id) {
  const Placement* q = store.Find(id);
  ASSERT_NE(q, nullptr) << id;
  EXPECT_EQ(store.Erase(*q), id);
  model.erase(id);
  EXPECT_EQ(store.Find(id), nullptr);
}

// Every id of `model` is found with its placement and node, and nothing else
// is.
void ExpectSame(const PlacementStore& store, const Model& model) {
  ASSERT_EQ(store.size(), model.size());
  for (const auto& [id, want] : model) {
    const Placement* q = store.Find(id);
    ASSERT_NE(q, nullptr) << id;
    EXPECT_EQ(*q, want.first) << id;
    EXPECT_EQ(store.NodeOf(*q), want.second) << id;
    EXPECT_TRUE(store.contains(id));
  }
  Model seen;
  store.ForEach([&](const Placement& p) {
    EXPECT_TRUE(seen.emplace(p.request_id, std::make_pair(p, store.NodeOf(p))).second)
        << "visited twice: " << p.request_id;
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
      Insert(store, model, id, step);
    } else if (rng() % 3 != 0) {
      Erase(store, model, id);
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
  store.Insert(Make("a", 1), 1);
  store.Insert(Make("b", 2), 2);
  store.Insert(Make("c", 3), 3);
  const Placement* b = store.Find("b");
  store.Erase(*b);
  // Filling the freed slot appends nothing, so `b` still points into the
  // slots: at the new placement.
  EXPECT_EQ(&store.Insert(Make("d", 4), 4), b);
  EXPECT_EQ(store.NodeOf(*b), 4u);
  EXPECT_EQ(store.Find("b"), nullptr);
  EXPECT_EQ(store.Find("d"), b);
  EXPECT_EQ(store.Find("a")->cpu, 1);
  EXPECT_EQ(store.Find("c")->cpu, 3);
}

TEST(PlacementStoreTest, CopiesAreIndependent) {
  PlacementStore store;
  Model model;
  for (int k = 0; k < 300; ++k) Insert(store, model, Id(k), k);
  for (int k = 0; k < 300; k += 4) Erase(store, model, Id(k));
  PlacementStore copy(store);
  Model copy_model = model;
  PlacementStore assigned;
  assigned.Insert(Make("gone", 0), 0);
  assigned = store;
  Model assigned_model = model;

  // Change each afterwards: the others do not see it, and each one's lookups
  // read its own slots (a copied index that read the source's would fail).
  for (int k = 1; k < 300; k += 4) Erase(store, model, Id(k));
  for (int k = 300; k < 400; ++k) Insert(copy, copy_model, Id(k), k);
  Erase(assigned, assigned_model, Id(2));
  assigned = assigned;  // Self-assignment changes nothing.

  ExpectSame(store, model);
  ExpectSame(copy, copy_model);
  ExpectSame(assigned, assigned_model);
  EXPECT_EQ(assigned.Find("gone"), nullptr);
}

TEST(PlacementStoreTest, NodePositionsAboveARemovedNodeMoveDown) {
  PlacementStore store;
  Model model;
  for (int k = 0; k < 200; ++k) Insert(store, model, Id(k), k);
  // Node 5 leaves: it must hold nothing, as Cluster::RemoveNode() ensures.
  for (int k = 0; k < 200; ++k) {
    if (NodeOf(k) == 5) Erase(store, model, Id(k));
  }
  store.NodeRemoved(5);
  for (auto& [id, want] : model) {
    if (want.second > 5) --want.second;
  }
  ExpectSame(store, model);
}

TEST(PlacementStoreTest, IdsDifferingOnlyAfterANulAreDistinct) {
  PlacementStore store;
  store.Insert(Make(std::string("x\0a", 3), 1), 0);
  store.Insert(Make(std::string("x\0b", 3), 2), 0);
  store.Insert(Make("x", 3), 0);
  EXPECT_EQ(store.size(), 3u);
  EXPECT_EQ(store.Find(std::string("x\0a", 3))->cpu, 1);
  EXPECT_EQ(store.Find(std::string("x\0b", 3))->cpu, 2);
  EXPECT_EQ(store.Find("x")->cpu, 3);
  EXPECT_EQ(store.Find(std::string("x\0", 2)), nullptr);
}

}  // namespace
}  // namespace gpushare::internal
