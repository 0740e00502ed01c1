// Cluster::PlanMigrations() and ApplyMigrations(): exact plans on small
// clusters, minimality against brute force, constraints of the moved pods,
// and refusal of a stale plan.

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
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

using ::gpushare::testing::Shared;
using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;

Placement At(const std::string& id, const std::string& node, std::vector<int> gpus,
             int64_t memory) {
  Placement p;
  p.request_id = id;
  p.node = node;
  p.gpus = std::move(gpus);
  p.memory_per_gpu = memory;
  return p;
}

// Calls `visit` once for every single move of a placed pod of `c` to any
// node and GPU set Commit() accepts (other than where it is), with `c` so
// changed; `c` is restored after each call. Stops and returns true as soon as
// `visit` does.
bool AnyMove(Cluster& c, const std::function<bool()>& visit) {
  for (const Placement& from : c.placements()) {
    EXPECT_OK(c.Release(from.request_id));
    bool stop = false;
    for (const std::string& name : c.node_names()) {
      const int g = static_cast<int>(c.FindNode(name)->gpus.size());
      for (int mask = 1; mask < (1 << g) && !stop; ++mask) {
        if (__builtin_popcount(mask) != static_cast<int>(from.gpus.size())) continue;
        Placement to = from;
        to.node = name;
        to.gpus.clear();
        for (int k = 0; k < g; ++k) {
          if (mask & (1 << k)) to.gpus.push_back(k);
        }
        if (to == from || !c.Commit(to).ok()) continue;
        stop = visit();
        EXPECT_OK(c.Release(to.request_id));
      }
    }
    EXPECT_OK(c.Commit(from));
    if (stop) return true;
  }
  return false;
}

// The fewest moves (up to `limit`) after which `goal` holds, by trying every
// placed pod on every node and GPU set; -1 if none. Every pod may move
// anywhere Commit() accepts (the clusters here have one label set and model).
int BruteForceMoves(const Cluster& c, const std::function<bool(const Cluster&)>& goal,
                    int limit) {
  Cluster copy(c);
  std::function<bool(int)> reach = [&](int left) -> bool {
    if (goal(copy)) return true;
    if (left == 0) return false;
    return AnyMove(copy, [&] { return reach(left - 1); });
  };
  for (int k = 0; k <= limit; ++k) {
    if (reach(k)) return k;
  }
  return -1;
}

// 2 or 3 nodes of one or two GPUs of 8 units, and 2 to 1 + `max_pods` pods of
// 1 to `max_units` units placed by "spread" (those that fit).
Cluster RandomSmallCluster(std::mt19937& rng, int max_pods, int max_units) {
  Cluster c;
  const int nodes = 2 + static_cast<int>(rng() % 2);
  for (int n = 0; n < nodes; ++n) {
    std::vector<int64_t> gpus(1 + rng() % 2, 8);
    EXPECT_OK(c.AddNode(SharedNode(absl::StrCat("n", n), gpus)));
  }
  const int pods = 2 + static_cast<int>(rng() % max_pods);
  for (int i = 0; i < pods; ++i) {
    Request r = Shared(absl::StrCat("p", i), 1 + static_cast<int64_t>(rng() % max_units));
    c.Place(r, "spread").IgnoreError();
  }
  return c;
}

TEST(PlanMigrationsTest, OneMoveFreesAGpu) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  ASSERT_OK(c.Commit(At("x", "a", {0}, 4)));
  ASSERT_OK(c.Commit(At("y", "b", {0}, 2)));
  const Request big = Shared("big", 7);
  const std::string before = c.ToJson();

  // Only y may move: y leaves b for a, and b is empty.
  absl::StatusOr<MigrationPlan> plan = c.PlanMigrations(big, 2, {Shared("y", 2)});
  ASSERT_OK(plan.status());
  EXPECT_EQ(c.ToJson(), before) << "planning changed the cluster";
  ASSERT_TRUE(plan->found);
  EXPECT_TRUE(plan->proven);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].from, At("y", "b", {0}, 2));
  EXPECT_EQ(plan->moves[0].to, At("y", "a", {0}, 2));
  ASSERT_TRUE(plan->then.has_value());
  EXPECT_EQ(plan->then->node, "b");

  ASSERT_OK(c.ApplyMigrations(*plan));
  EXPECT_EQ(*c.GetPlacement("y"), At("y", "a", {0}, 2));
  EXPECT_OK(c.Place(big).status());
  EXPECT_OK(c.CheckInvariants());
}

TEST(PlanMigrationsTest, NoMoveNeededAndNoPlanWithinTheLimit) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  ASSERT_OK(c.Commit(At("x", "a", {0}, 5)));
  ASSERT_OK(c.Commit(At("y", "b", {0}, 5)));

  absl::StatusOr<MigrationPlan> now = c.PlanMigrations(Shared("small", 3), 1);
  ASSERT_OK(now.status());
  EXPECT_TRUE(now->found);
  EXPECT_TRUE(now->moves.empty());

  // 8 units need an empty GPU: x and y cannot share one (10 > 8).
  absl::StatusOr<MigrationPlan> none = c.PlanMigrations(Shared("big", 8), 3);
  ASSERT_OK(none.status());
  EXPECT_FALSE(none->found);
  EXPECT_TRUE(none->proven);
  EXPECT_THAT(none->reason, HasSubstr("no plan of at most 3 moves"));
  EXPECT_THAT(c.ApplyMigrations(*none),
              StatusIs(absl::StatusCode::kInvalidArgument, "not found"));

  EXPECT_THAT(c.PlanMigrations(Shared("big", 8), 17).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "max_moves 17"));
  EXPECT_THAT(c.PlanMigrations(Shared("x", 1), 1).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "'x'"));
  EXPECT_THAT(c.PlanMigrations(Shared("big", 8), 1, {Shared("x", 4)}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "'x' is not placed with this shape"));
}

TEST(PlanMigrationsTest, MovesKeepThePodsGpuModels) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("t4", {8}, "T4")));
  ASSERT_OK(c.AddNode(SharedNode("v100", {8}, "V100")));
  ASSERT_OK(c.Commit(At("x", "t4", {0}, 4)));
  Request want = Shared("want", 6);
  want.gpu_models = {"T4"};

  // Inferred from its placement, x keeps to T4: no plan.
  absl::StatusOr<MigrationPlan> plan = c.PlanMigrations(want, 2);
  ASSERT_OK(plan.status());
  EXPECT_FALSE(plan->found);
  EXPECT_TRUE(plan->proven);

  Request x = Shared("x", 4);
  x.gpu_models = {"T4"};
  plan = c.PlanMigrations(want, 2, {x});
  ASSERT_OK(plan.status());
  EXPECT_FALSE(plan->found);

  // Submitted without a model list, x may go to the V100.
  x.gpu_models.clear();
  plan = c.PlanMigrations(want, 2, {x});
  ASSERT_OK(plan.status());
  ASSERT_TRUE(plan->found);
  ASSERT_EQ(plan->moves.size(), 1u);
  EXPECT_EQ(plan->moves[0].to.node, "v100");

  // A selector is kept too.
  x.node_selector = {{"zone", "a"}};
  plan = c.PlanMigrations(want, 2, {x});
  ASSERT_OK(plan.status());
  EXPECT_FALSE(plan->found);
}

TEST(PlanMigrationsTest, AStalePlanIsRefusedAndChangesNothing) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  ASSERT_OK(c.Commit(At("x", "a", {0}, 4)));
  ASSERT_OK(c.Commit(At("y", "b", {0}, 2)));
  absl::StatusOr<MigrationPlan> plan = c.PlanMigrations(Shared("big", 7), 1, {Shared("y", 2)});
  ASSERT_OK(plan.status());
  ASSERT_TRUE(plan->found);
  ASSERT_OK(c.Commit(At("z", "a", {0}, 3)));  // a has no room for y now.
  const std::string before = c.ToJson();
  EXPECT_THAT(c.ApplyMigrations(*plan),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       "move 0 of 'y' from b[0] to a[0] no longer holds"));
  EXPECT_EQ(c.ToJson(), before);

  // The pod moved elsewhere meanwhile.
  ASSERT_OK(c.Release("z"));
  ASSERT_OK(c.Release("y"));
  ASSERT_OK(c.Commit(At("y", "a", {0}, 2)));
  const std::string moved = c.ToJson();
  EXPECT_THAT(c.ApplyMigrations(*plan),
              StatusIs(absl::StatusCode::kFailedPrecondition, "placed elsewhere"));
  EXPECT_EQ(c.ToJson(), moved);
}

TEST(PlanMigrationsTest, EqualUsageNodesHoldingDifferentPodsAreTwoDestinations) {
  // n0 {2, 5} and n1 {3, 2}: with the 2 of n0 taken off, both nodes use 5,
  // yet moving it to n1 lets the 3 go back to n0, leaving 4 free on n1.
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n0", {8})));
  ASSERT_OK(c.AddNode(SharedNode("n1", {8})));
  ASSERT_OK(c.Commit(At("p1", "n0", {0}, 2)));
  ASSERT_OK(c.Commit(At("p2", "n0", {0}, 5)));
  ASSERT_OK(c.Commit(At("p0", "n1", {0}, 3)));
  ASSERT_OK(c.Commit(At("p3", "n1", {0}, 2)));
  const Request want = Shared("want", 4);
  EXPECT_EQ(BruteForceMoves(c, [&](const Cluster& x) { return x.Plan(want, "binpack").ok(); }, 3),
            2);
  absl::StatusOr<MigrationPlan> plan = c.PlanMigrations(want, 3);
  ASSERT_OK(plan.status());
  ASSERT_TRUE(plan->found);
  EXPECT_TRUE(plan->proven);
  EXPECT_EQ(plan->moves.size(), 2u);
  ASSERT_OK(c.ApplyMigrations(*plan));
  EXPECT_OK(c.Place(want).status());
}

TEST(PlanMigrationsTest, MoveCountEqualsBruteForce) {
  std::mt19937 rng(1818);
  int needed_moves = 0, two_or_more = 0;
  for (int round = 0; round < 400; ++round) {
    Cluster c = RandomSmallCluster(rng, 4, 6);
    const Request want = rng() % 4 == 0 ? Shared("want", 8, 2)
                                        : Shared("want", 4 + static_cast<int64_t>(rng() % 5));
    SCOPED_TRACE(absl::StrCat("round ", round, ": ", c.ToJson()));
    const int expected = BruteForceMoves(
        c, [&](const Cluster& x) { return x.Plan(want, "binpack").ok(); }, 3);
    absl::StatusOr<MigrationPlan> plan = c.PlanMigrations(want, 3);
    ASSERT_OK(plan.status());
    EXPECT_TRUE(plan->proven);
    EXPECT_EQ(plan->found, expected >= 0);
    if (!plan->found) continue;
    EXPECT_EQ(static_cast<int>(plan->moves.size()), expected);
    needed_moves += expected > 0 ? 1 : 0;
    two_or_more += expected > 1 ? 1 : 0;
    ASSERT_OK(c.ApplyMigrations(*plan));
    EXPECT_OK(c.Place(want).status());
    EXPECT_OK(c.CheckInvariants());
  }
  EXPECT_GT(needed_moves, 0) << "no instance needed a move";
  EXPECT_GT(two_or_more, 0) << "no instance needed two moves";
}

int64_t IdleGpus(const Cluster& c) { return c.TotalUsage().idle_gpus; }

TEST(PlanMigrationsToFreeGpusTest, FreesWholeGpusWithTheFewestMoves) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8, 8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  ASSERT_OK(c.Commit(At("x", "a", {0}, 2)));
  ASSERT_OK(c.Commit(At("y", "a", {1}, 2)));
  ASSERT_OK(c.Commit(At("z", "b", {0}, 3)));
  const std::string before = c.ToJson();

  absl::StatusOr<MigrationPlan> one = c.PlanMigrationsToFreeGpus(1, 3);
  ASSERT_OK(one.status());
  ASSERT_TRUE(one->found);
  EXPECT_TRUE(one->proven);
  EXPECT_EQ(one->moves.size(), 1u);
  EXPECT_EQ(one->free_gpus_goal, 1);

  absl::StatusOr<MigrationPlan> two = c.PlanMigrationsToFreeGpus(2, 3);
  ASSERT_OK(two.status());
  ASSERT_TRUE(two->found);
  EXPECT_TRUE(two->proven);
  EXPECT_EQ(two->moves.size(), 2u);

  absl::StatusOr<MigrationPlan> three = c.PlanMigrationsToFreeGpus(3, 3);
  ASSERT_OK(three.status());
  EXPECT_FALSE(three->found);
  EXPECT_TRUE(three->proven);
  EXPECT_THAT(three->reason, HasSubstr("frees 3 whole GPUs"));
  EXPECT_EQ(c.ToJson(), before);
  EXPECT_THAT(c.PlanMigrationsToFreeGpus(0, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "gpus 0"));

  // The moves found put x and y beside z on b. Where one more pod holds a
  // GPU the moves would empty, the moves still hold but the goal does not.
  ASSERT_EQ(two->moves[0].to.node, "b");
  ASSERT_EQ(two->moves[1].to.node, "b");
  Cluster other(c);
  ASSERT_OK(other.Commit(At("w", "a", {1}, 1)));
  const std::string other_before = other.ToJson();
  EXPECT_THAT(other.ApplyMigrations(*two),
              StatusIs(absl::StatusCode::kFailedPrecondition, "would be free, not 2"));
  EXPECT_EQ(other.ToJson(), other_before);

  ASSERT_OK(c.ApplyMigrations(*two));
  EXPECT_EQ(IdleGpus(c), 2);
  EXPECT_OK(c.CheckInvariants());
}

TEST(PlanMigrationsToFreeGpusTest, MoveCountEqualsBruteForce) {
  std::mt19937 rng(7);
  int needed_moves = 0;
  for (int round = 0; round < 300; ++round) {
    Cluster c = RandomSmallCluster(rng, 4, 6);
    const int64_t k = 1 + static_cast<int64_t>(rng() % 3);
    SCOPED_TRACE(absl::StrCat("round ", round, ", k ", k, ": ", c.ToJson()));
    const int expected =
        BruteForceMoves(c, [&](const Cluster& x) { return IdleGpus(x) >= k; }, 3);
    absl::StatusOr<MigrationPlan> plan = c.PlanMigrationsToFreeGpus(k, 3);
    ASSERT_OK(plan.status());
    EXPECT_TRUE(plan->proven);
    EXPECT_EQ(plan->found, expected >= 0);
    if (!plan->found) continue;
    EXPECT_EQ(static_cast<int>(plan->moves.size()), expected);
    needed_moves += expected > 0 ? 1 : 0;
    ASSERT_OK(c.ApplyMigrations(*plan));
    EXPECT_GE(IdleGpus(c), k);
  }
  EXPECT_GT(needed_moves, 0) << "no instance needed a move";
}

// ---- The fragmentation goal ------------------------------------------------------

// Tasks of 4 and 6 memory units on one GPU, equally likely.
TargetWorkload FourAndSix() {
  TargetWorkload t;
  t.resource = FragResource::kMemory;
  t.tasks = {{0, 4, 1, {}, 0.5}, {0, 6, 1, {}, 0.5}};
  return t;
}

// The least fragmentation amount reachable with at most `limit` moves, and
// the fewest moves that reach it, trying every pod on every node and GPU set
// and measuring every end state from scratch.
std::pair<double, int> BruteForceLeastFragmentation(const Cluster& c,
                                                    const TargetWorkload& target,
                                                    int limit) {
  Cluster copy(c);
  std::vector<double> best(limit + 1, Fragmentation(c, target).amount);
  std::function<void(int)> walk = [&](int depth) {
    const double amount = Fragmentation(copy, target).amount;
    for (int k = depth; k <= limit; ++k) best[k] = std::min(best[k], amount);
    if (depth == limit) return;
    AnyMove(copy, [&] {
      walk(depth + 1);
      return false;
    });
  };
  walk(0);
  int fewest = 0;
  while (best[fewest] > best[limit] + 1e-9) ++fewest;
  return {best[limit], fewest};
}

TEST(PlanMigrationsToLowerFragmentationTest, OneMoveJoinsTwoSmallPods) {
  // 3 units on each of two GPUs of 8: 5 idle on each, useless to a task of 6.
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {8})));
  ASSERT_OK(c.AddNode(SharedNode("b", {8})));
  ASSERT_OK(c.Commit(At("x", "a", {0}, 3)));
  ASSERT_OK(c.Commit(At("y", "b", {0}, 3)));
  TargetWorkload six;
  six.resource = FragResource::kMemory;
  six.tasks = {{0, 6, 1, {}, 1.0}};
  const std::string before = c.ToJson();
  absl::StatusOr<MigrationPlan> plan = c.PlanMigrationsToLowerFragmentation(six, 2);
  ASSERT_OK(plan.status());
  ASSERT_TRUE(plan->found);
  EXPECT_TRUE(plan->proven);
  EXPECT_EQ(plan->moves.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->fragmentation_before, 10);  // 5 + 5.
  EXPECT_DOUBLE_EQ(plan->fragmentation_after, 2);    // 2 left beside 6 used.
  EXPECT_EQ(c.ToJson(), before);
  // Nothing to gain with no move allowed.
  absl::StatusOr<MigrationPlan> none = c.PlanMigrationsToLowerFragmentation(six, 0);
  ASSERT_OK(none.status());
  EXPECT_FALSE(none->found);
  EXPECT_TRUE(none->proven);
  EXPECT_THAT(none->reason, HasSubstr("lowers the fragmentation measure"));
  // Once another pod of 5 sits on the GPU the move would empty, the moves
  // still hold but no longer lower the measure: refused, nothing changes.
  Cluster other(c);
  const std::string leaving = plan->moves[0].from.node;
  ASSERT_OK(other.Commit(At("w", leaving, {0}, 5)));
  const std::string other_before = other.ToJson();
  EXPECT_THAT(other.ApplyMigrations(*plan),
              StatusIs(absl::StatusCode::kFailedPrecondition, "no longer lower"));
  EXPECT_EQ(other.ToJson(), other_before);
  ASSERT_OK(c.ApplyMigrations(*plan));
  EXPECT_DOUBLE_EQ(Fragmentation(c, six).amount, 2);
  EXPECT_OK(c.CheckInvariants());
  // Bad targets are named.
  EXPECT_THAT(c.PlanMigrationsToLowerFragmentation(TargetWorkload{}, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "no task"));
  TargetWorkload negative = six;
  negative.tasks[0].weight = -1;
  EXPECT_THAT(c.PlanMigrationsToLowerFragmentation(negative, 1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "weight -1"));
}

TEST(PlanMigrationsToLowerFragmentationTest, EqualsBruteForce) {
  std::mt19937 rng(2023);
  const TargetWorkload target = FourAndSix();
  int lowered = 0, two_moves = 0;
  for (int round = 0; round < 200; ++round) {
    Cluster c = RandomSmallCluster(rng, 3, 5);
    const int limit = 1 + static_cast<int>(rng() % 2);
    SCOPED_TRACE(absl::StrCat("round ", round, ", limit ", limit, ": ", c.ToJson()));
    const auto [least, fewest] = BruteForceLeastFragmentation(c, target, limit);
    absl::StatusOr<MigrationPlan> plan = c.PlanMigrationsToLowerFragmentation(target, limit);
    ASSERT_OK(plan.status());
    EXPECT_TRUE(plan->proven);
    EXPECT_NEAR(plan->fragmentation_after, least, 1e-6);
    EXPECT_EQ(plan->found, fewest > 0);
    if (!plan->found) continue;
    EXPECT_EQ(static_cast<int>(plan->moves.size()), fewest);
    ++lowered;
    two_moves += fewest == 2 ? 1 : 0;
    ASSERT_OK(c.ApplyMigrations(*plan));
    EXPECT_NEAR(Fragmentation(c, target).amount, least, 1e-6);
    EXPECT_OK(c.CheckInvariants());
  }
  EXPECT_GT(lowered, 0) << "no instance could be improved";
  EXPECT_GT(two_moves, 0) << "no instance needed two moves for its best";
}

TEST(PlanMigrationsToLowerFragmentationTest, OverBudgetIsNotProven) {
  Cluster c;
  for (int n = 0; n < 3; ++n) ASSERT_OK(c.AddNode(SharedNode(absl::StrCat("n", n), {8, 8})));
  for (int i = 0; i < 6; ++i) ASSERT_OK(c.Place(Shared(absl::StrCat("p", i), 3), "spread").status());
  absl::StatusOr<MigrationPlan> plan =
      c.PlanMigrationsToLowerFragmentation(FourAndSix(), 3, {}, 5);
  ASSERT_OK(plan.status());
  EXPECT_FALSE(plan->proven);
  // Whatever it found within the budget never raises the measure.
  EXPECT_LE(plan->fragmentation_after, plan->fragmentation_before);
}

// A search past its deadline stops as one past its budget does: not proven,
// and the reason says why. 120 GPUs each hold a 6-unit pod; freeing the three
// GPUs of one node (or any three) takes three moves, so a search of at most
// two tries every first move (thousands of candidates) and fails.
TEST(MigrationDeadlineTest, ASearchPastItsDeadlineIsNotProven) {
  Cluster c;
  for (int n = 0; n < 40; ++n) {
    const std::string name = absl::StrCat("n", n);
    ASSERT_OK(c.AddNode(SharedNode(name, {16, 16, 16})));
    for (int g = 0; g < 3; ++g) {
      ASSERT_OK(c.Commit(At(absl::StrCat(name, "-", g), name, {g}, 6)));
    }
  }
  const Request all = Shared("all", 48, 3);
  ASSERT_OK_AND_ASSIGN(MigrationPlan unhurried, c.PlanMigrations(all, 2, {}, 1'000'000));
  EXPECT_FALSE(unhurried.found);
  EXPECT_TRUE(unhurried.proven);
  ASSERT_OK_AND_ASSIGN(MigrationPlan hurried,
                       c.PlanMigrations(all, 2, {}, 1'000'000, std::chrono::steady_clock::now()));
  EXPECT_FALSE(hurried.found);
  EXPECT_FALSE(hurried.proven);
  EXPECT_THAT(hurried.reason, HasSubstr("deadline"));
  ASSERT_OK_AND_ASSIGN(MigrationPlan freeing,
                       c.PlanMigrationsToFreeGpus(3, 2, {}, 1'000'000,
                                                  std::chrono::steady_clock::now()));
  EXPECT_FALSE(freeing.proven);
  EXPECT_THAT(freeing.reason, HasSubstr("deadline"));
  // A deadline far ahead changes nothing.
  ASSERT_OK_AND_ASSIGN(
      MigrationPlan later,
      c.PlanMigrations(all, 2, {}, 1'000'000,
                       std::chrono::steady_clock::now() + std::chrono::hours(1)));
  EXPECT_TRUE(later.proven);
}

}  // namespace
}  // namespace gpushare
