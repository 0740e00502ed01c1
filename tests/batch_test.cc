// Cluster::PlaceBatch(): the count placed against one-by-one placement and
// against brute force, atomicity and gangs.

#include <algorithm>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::Exclusive;
using ::gpushare::testing::Shared;
using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;

// How many of `requests` Place() puts on a copy of `c`, one by one in order.
int OneByOne(const Cluster& c, const std::vector<Request>& requests,
             const std::string& policy = "binpack") {
  Cluster copy(c);
  int placed = 0;
  for (const Request& r : requests) placed += copy.Place(r, policy).ok() ? 1 : 0;
  return placed;
}

// The most of `requests` any assignment places on `c`: every request on every
// node and every set of its GPUs, or nowhere, checked by Commit().
int BruteForce(const Cluster& c, const std::vector<Request>& requests) {
  Cluster copy(c);
  int best = 0;
  std::function<void(size_t, int)> visit = [&](size_t i, int placed) {
    if (i == requests.size()) {
      best = std::max(best, placed);
      return;
    }
    visit(i + 1, placed);
    const Demand d = *copy.Validate(requests[i]);
    for (const std::string& name : copy.node_names()) {
      const int g = static_cast<int>(copy.FindNode(name)->gpus.size());
      for (int mask = 0; mask < (1 << g); ++mask) {
        if (__builtin_popcount(mask) != d.gpu_count) continue;
        Placement p;
        p.request_id = requests[i].id;
        p.node = name;
        for (int k = 0; k < g; ++k) {
          if (mask & (1 << k)) p.gpus.push_back(k);
        }
        p.memory_per_gpu = d.memory_per_gpu;
        p.compute_per_gpu = d.compute_per_gpu;
        p.exclusive = d.kind == Demand::Kind::kExclusive;
        if (!copy.Commit(p).ok()) continue;
        visit(i + 1, placed + 1);
        ASSERT_OK(copy.Release(p.request_id));
      }
    }
  };
  visit(0, 0);
  return best;
}

// Checks that `result` is what `after` holds and that `after` is sound.
void ExpectCommitted(const Cluster& after, const BatchResult& result) {
  ASSERT_OK(after.CheckInvariants());
  int placed = 0;
  for (const auto& p : result.placements) {
    if (!p.has_value()) continue;
    ++placed;
    absl::StatusOr<Placement> got = after.GetPlacement(p->request_id);
    ASSERT_OK(got.status());
    EXPECT_EQ(*got, *p);
  }
  EXPECT_EQ(placed, result.placed);
}

TEST(PlaceBatchTest, PacksWhereOneByOneBinpackStrandsASix) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  std::vector<Request> pods;
  for (int64_t size : {5, 5, 5, 5, 6, 6}) {
    pods.push_back(Shared(absl::StrCat("p", pods.size()), size));
  }
  EXPECT_EQ(OneByOne(c, pods), 5);
  absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack");
  ASSERT_OK(r.status());
  EXPECT_EQ(r->placed, 6);
  EXPECT_TRUE(r->proven_optimal);
  EXPECT_EQ(r->method, "search");
  ExpectCommitted(c, *r);
  EXPECT_EQ(c.TotalUsage().gpu_memory_used, 32);
}

TEST(PlaceBatchTest, KeepsOneByOnePlacementWhenItIsBest) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  std::vector<Request> pods = {Shared("x", 3), Shared("y", 4)};
  Cluster copy(c);
  std::vector<Placement> expected;
  for (const Request& r : pods) expected.push_back(*copy.Place(r, "binpack"));
  absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack");
  ASSERT_OK(r.status());
  EXPECT_EQ(r->method, "sequential");
  EXPECT_TRUE(r->proven_optimal);
  ASSERT_EQ(r->placements.size(), 2u);
  EXPECT_EQ(*r->placements[0], expected[0]);
  EXPECT_EQ(*r->placements[1], expected[1]);
}

TEST(PlaceBatchTest, IdenticalRequestsAreProvenOptimalByTheFlow) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {10, 7})));
  Node b = SharedNode("b", {9, 9});
  b.cpu = 2000;  // Room for two copies only.
  ASSERT_OK(c.AddNode(b));
  std::vector<Request> pods;
  for (int i = 0; i < 9; ++i) {
    Request r = Shared(absl::StrCat("p", i), 3);
    r.cpu = 1000;
    pods.push_back(r);
  }
  BatchOptions opt;
  opt.search_budget = 1;  // The search could not prove it; the flow does.
  absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack", opt);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->placed, 7);  // 3 + 2 on a, 2 on b (its CPU).
  EXPECT_TRUE(r->proven_optimal);
  ExpectCommitted(c, *r);
}

TEST(PlaceBatchTest, MixedSizesOverBudgetAreNotProven) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  std::vector<Request> pods;
  for (int64_t size : {5, 5, 5, 5, 6, 6, 7}) {
    pods.push_back(Shared(absl::StrCat("p", pods.size()), size));
  }
  const int sequential = OneByOne(c, pods);
  BatchOptions opt;
  opt.search_budget = 1;
  absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack", opt);
  ASSERT_OK(r.status());
  EXPECT_FALSE(r->proven_optimal);
  EXPECT_GE(r->placed, sequential);
  ExpectCommitted(c, *r);
}

TEST(PlaceBatchTest, MatchesBruteForceAndNeverLosesToOneByOne) {
  std::mt19937 rng(18);
  int bettered = 0;
  for (int round = 0; round < 500; ++round) {
    Cluster c;
    const int nodes = 1 + static_cast<int>(rng() % 2);
    for (int n = 0; n < nodes; ++n) {
      std::vector<int64_t> gpus(1 + rng() % 2);
      for (int64_t& g : gpus) g = 6 + static_cast<int64_t>(rng() % 7);
      ASSERT_OK(c.AddNode(SharedNode(absl::StrCat("n", n), gpus)));
    }
    std::vector<Request> pods;
    const int count = 2 + static_cast<int>(rng() % 4);
    for (int i = 0; i < count; ++i) {
      const std::string id = absl::StrCat("p", i);
      const int kind = static_cast<int>(rng() % 6);
      if (kind == 0) {
        pods.push_back(Exclusive(id, 1));
      } else if (kind == 1) {
        pods.push_back(Shared(id, 2 * (1 + static_cast<int64_t>(rng() % 4)), 2));
      } else {
        pods.push_back(Shared(id, 1 + static_cast<int64_t>(rng() % 8)));
      }
    }
    const int sequential = OneByOne(c, pods);
    const int best = BruteForce(c, pods);
    absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack");
    ASSERT_OK(r.status());
    SCOPED_TRACE(absl::StrCat("round ", round));
    EXPECT_TRUE(r->proven_optimal);
    EXPECT_EQ(r->placed, best);
    EXPECT_GE(r->placed, sequential);
    bettered += r->placed > sequential ? 1 : 0;
    ExpectCommitted(c, *r);
  }
  EXPECT_GT(bettered, 0) << "no instance where one-by-one placement was beaten";
}

TEST(PlaceBatchTest, AllOrNothingFailureLeavesTheClusterByteIdentical) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  ASSERT_OK(c.Place(Shared("old", 3)).status());
  const std::string before = c.ToJson();
  std::vector<Request> pods;
  for (int64_t size : {5, 5, 5, 5, 6, 6}) {
    pods.push_back(Shared(absl::StrCat("p", pods.size()), size));
  }
  BatchOptions opt;
  opt.all_or_nothing = true;
  EXPECT_THAT(c.PlaceBatch(pods, "binpack", opt).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "at most 5"));
  EXPECT_EQ(c.ToJson(), before);

  pods.push_back(Shared("p0", 1));  // Repeated id.
  EXPECT_THAT(c.PlaceBatch(pods, "binpack").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "'p0' appears twice"));
  pods.back() = Shared("old", 1);
  EXPECT_THAT(c.PlaceBatch(pods, "binpack").status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "requests[6]"));
  pods.back() = Shared("bad", 3, 2);
  EXPECT_THAT(c.PlaceBatch(pods, "binpack").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "requests[6]"));
  opt.search_budget = 0;
  EXPECT_THAT(c.PlaceBatch({}, "binpack", opt).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "budget 0"));
  EXPECT_EQ(c.ToJson(), before);

  // With room for all of them, all_or_nothing places all.
  ASSERT_OK(c.Release("old"));
  opt.search_budget = 200000;
  pods.pop_back();
  absl::StatusOr<BatchResult> r = c.PlaceBatch(pods, "binpack", opt);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->placed, 6);
}

TEST(PlaceBatchTest, GangMembersDoNotShareAGpu) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  ASSERT_OK(c.AddNode(SharedNode("m", {16})));
  ASSERT_OK(c.Place(Shared("other", 2)).status());
  std::vector<Request> gang = {Shared("w0", 2), Shared("w1", 2), Shared("w2", 2),
                               Shared("w3", 2)};
  BatchOptions opt;
  opt.gang_anti_sharing = true;
  opt.all_or_nothing = true;
  const std::string before = c.ToJson();
  EXPECT_THAT(c.PlaceBatch(gang, "binpack", opt).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "at most 3"));
  EXPECT_EQ(c.ToJson(), before);
  gang.pop_back();
  absl::StatusOr<BatchResult> r = c.PlaceBatch(gang, "binpack", opt);
  ASSERT_OK(r.status());
  EXPECT_EQ(r->placed, 3);
  std::set<std::pair<std::string, int>> gpus;
  for (const auto& p : r->placements) {
    ASSERT_TRUE(p.has_value());
    ASSERT_EQ(p->gpus.size(), 1u);
    EXPECT_TRUE(gpus.insert({p->node, p->gpus[0]}).second)
        << p->request_id << " shares a GPU with another member";
  }
  ExpectCommitted(c, *r);
}

}  // namespace
}  // namespace gpushare
