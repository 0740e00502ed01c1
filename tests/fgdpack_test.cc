// "fgdpack" (gpushare/policy.h) and the packing values it reads
// (src/fgd/packing.h).

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "src/fgd/kernel.h"
#include "src/fgd/packing.h"
#include "tests/testing/packing_fixtures.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using fgd::PackingItem;
using fgd::PackingValues;
using fgd::SolvePacking;

// Every multiset of `items`' shares that fits in `room`, as counts, by plain
// recursion: the reference for the knapsack and for dual feasibility.
void EachPattern(const std::vector<PackingItem>& items, int64_t room, size_t from,
                 std::vector<int>* counts, const std::function<void(const std::vector<int>&)>& f) {
  f(*counts);
  for (size_t i = from; i < items.size(); ++i) {
    if (items[i].share > room) continue;
    ++(*counts)[i];
    EachPattern(items, room - items[i].share, i, counts, f);
    --(*counts)[i];
  }
}

double PatternPrice(const PackingValues& v, const std::vector<int>& counts) {
  double sum = 0;
  for (size_t i = 0; i < counts.size(); ++i) sum += counts[i] * v.price[i];
  return sum;
}

TEST(PackingTest, OneShareIsWorthItsPartOfTheCopiesAGpuHolds) {
  const PackingValues v = SolvePacking({{300, 2.0}}, 1000);
  ASSERT_EQ(v.price.size(), 1u);
  EXPECT_NEAR(v.price[0], 1.0 / 3, 1e-12);
  EXPECT_NEAR(v.gpus_per_weight, 2.0 / 3, 1e-12);
  ASSERT_EQ(v.value.size(), 1001u);
  for (int64_t g : {0, 299, 300, 599, 600, 899, 900, 1000}) {
    EXPECT_NEAR(v.value[g], static_cast<double>(g / 300) / 3, 1e-12) << g;
  }
  // 300 from a GPU with 400 idle loses a third; from 900, a third too.
  EXPECT_NEAR(v.Loss(400, 300), 1.0 / 3, 1e-12);
  EXPECT_NEAR(v.Loss(900, 300), 1.0 / 3, 1e-12);
}

TEST(PackingTest, SolvesSmallLpsWhoseOptimumIsKnown) {
  // One 600 and three 400 per unit: a GPU of 600 + 400, then 400 + 400: 2.
  const PackingValues v = SolvePacking({{600, 1}, {400, 3}}, 1000);
  EXPECT_NEAR(v.gpus_per_weight, 2.0, 1e-9);
  // Shares that only fill what an 810 leaves are worth nothing.
  const PackingValues w = SolvePacking({{810, 1}, {160, 1}}, 1000);
  EXPECT_NEAR(w.gpus_per_weight, 1.0, 1e-9);
  EXPECT_NEAR(w.price[1], 1.0, 1e-9);  // Items ascend: 160, 810.
  EXPECT_NEAR(w.price[0], 0.0, 1e-9);
  // Nothing to pack: no values, no loss.
  EXPECT_TRUE(SolvePacking({}, 1000).value.empty());
  EXPECT_TRUE(SolvePacking({{1000, 1}, {0, 1}, {500, 0}}, 1000).value.empty());
  EXPECT_TRUE(SolvePacking({{500, std::nan("")}, {300, -1}}, 1000).value.empty());
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(SolvePacking({{500, inf}, {300, 1}}, 1000).items.size(), 1u);
  EXPECT_TRUE(SolvePacking({{500, 1e308}, {300, 1e308}}, 1000).value.empty());  // Sum overflows.
  // The prices do not depend on the weights' scale.
  EXPECT_EQ(SolvePacking({{600, 1e-6}, {400, 3e-6}}, 1000).price,
            SolvePacking({{600, 1e6}, {400, 3e6}}, 1000).price);
  EXPECT_EQ(SolvePacking({{300, 1}}, 1000).Loss(1000, 300) >= 0, true);
  EXPECT_EQ(SolvePacking({}, 1000).Loss(1000, 300), 0);
}

// The shared requests of the openb default trace (share, count); the LP
// optimum 23575 / 12 GPUs was computed with an independent solver (HiGHS,
// column generation).
TEST(PackingTest, MatchesAnIndependentSolverOnTheOpenbShares) {
  const std::vector<PackingItem> items = {
      {810, 1078}, {470, 750}, {320, 328}, {650, 253}, {230, 140}, {460, 128}, {590, 75},
      {160, 74},   {550, 72},  {220, 62},  {370, 47},  {110, 24},  {480, 19},  {50, 7},
      {330, 7},    {350, 6},   {270, 4},   {440, 2},   {140, 1},   {290, 1}};
  const PackingValues v = SolvePacking(items, 1000);
  EXPECT_TRUE(v.optimal);
  EXPECT_NEAR(v.gpus_per_weight, 23575.0 / 12, 1e-6);
  EXPECT_GT(v.patterns, static_cast<int>(items.size()));
  EXPECT_NEAR(v.value[1000], 1.0, 1e-9);
}

// On random instances: the prices are feasible for the dual (no pattern,
// enumerated plainly, is worth more than a GPU), non-negative, and the
// value table is the plain maximum over the patterns that fit.
TEST(PackingTest, PricesAreDualFeasibleAndValuesArePatternMaxima) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < (testing::Quick() ? 20 : 80); ++round) {
    const int64_t full = 100 + static_cast<int64_t>(rng() % 5) * 50;
    std::vector<PackingItem> items;
    const int n = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n; ++i) {
      items.push_back({10 + static_cast<int64_t>(rng() % 9) * 10,
                       1 + static_cast<double>(rng() % 100)});
    }
    const PackingValues v = SolvePacking(items, full);
    SCOPED_TRACE(round);
    ASSERT_EQ(v.price.size(), v.items.size());
    for (double y : v.price) EXPECT_GE(y, 0);
    std::vector<double> plain(full + 1, 0);
    std::vector<int> counts(v.items.size(), 0);
    EachPattern(v.items, full, 0, &counts, [&](const std::vector<int>& c) {
      int64_t size = 0;
      for (size_t i = 0; i < c.size(); ++i) size += c[i] * v.items[i].share;
      const double price = PatternPrice(v, c);
      EXPECT_LE(price, 1 + 1e-9);
      plain[size] = std::max(plain[size], price);
    });
    for (int64_t g = 1; g <= full; ++g) plain[g] = std::max(plain[g], plain[g - 1]);
    for (int64_t g = 0; g <= full; ++g) ASSERT_NEAR(v.value[g], plain[g], 1e-9) << g;
    // The volume bound: no packing needs fewer GPUs than the shares' sum.
    double volume = 0;
    for (const PackingItem& item : v.items) volume += item.weight * item.share / full;
    EXPECT_GE(v.gpus_per_weight, volume - 1e-9);
  }
}

// Targets with many distinct shares (up to 90, on a GPU of 1,000 or of
// 32,768 units with shares of no common divisor) end within the solve's
// budget, optimal or not, with prices no pattern breaks: at worst a scaled,
// feasible dual. Before the budget, such a target could stall the simplex
// for minutes.
TEST(PackingTest, ManySharesEndWithinTheBudgetWithFeasiblePrices) {
  std::mt19937_64 rng(11);
  for (int round = 0; round < (testing::Quick() ? 2 : 6); ++round) {
    SCOPED_TRACE(round);
    const bool mib = round % 2 == 1;
    const int64_t full = mib ? 32768 : 1000;
    std::vector<PackingItem> items;
    const int n = 40 + static_cast<int>(rng() % 51);
    for (int i = 0; i < n; ++i) {
      const int64_t share = mib ? 1001 + static_cast<int64_t>(rng() % 20000)
                                : 50 + static_cast<int64_t>(rng() % 91) * 10;
      items.push_back({share, 1 + static_cast<double>(rng() % 1000)});
    }
    const PackingValues v = SolvePacking(items, full);
    ASSERT_EQ(v.value.size(), static_cast<size_t>(full + 1));
    EXPECT_LE(v.value[full], 1 + 1e-9);
    for (double y : v.price) EXPECT_GE(y, 0);
    for (int64_t g = 1; g <= full; ++g) ASSERT_GE(v.value[g], v.value[g - 1]) << g;
    double volume = 0;  // Weak duality: the prices are worth at most the GPUs needed.
    for (size_t i = 0; i < v.items.size(); ++i) volume += v.items[i].weight * v.price[i];
    EXPECT_NEAR(volume, v.gpus_per_weight, 1e-6 * volume);
  }
}

std::unique_ptr<fgd::KernelPolicy> Kernel(const std::string& name, const TargetWorkload& target) {
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(target);
  absl::StatusOr<std::unique_ptr<Policy>> made = MakePolicy(name, po);
  EXPECT_TRUE(made.ok());
  return std::unique_ptr<fgd::KernelPolicy>(dynamic_cast<fgd::KernelPolicy*>(made->release()));
}

// Score() is fgdcpu's score and GPUs, less 128 per millionth of packing
// value the shared task loses on that GPU; other tasks score as in fgdcpu.
TEST(FgdPackPolicyTest, ScoreIsFgdcpusLessThePackingLossOnItsGpu) {
  TargetWorkload target;
  target.tasks = {TargetTask{3000, 810, 1, {}, 0.3}, TargetTask{6000, 470, 1, {}, 0.3},
                  TargetTask{2000, 160, 1, {}, 0.1}, TargetTask{11000, 0, 1, {}, 0.3}};
  std::unique_ptr<fgd::KernelPolicy> cpu = Kernel("fgdcpu", target);
  std::unique_ptr<fgd::KernelPolicy> pack = Kernel("fgdpack", target);
  ASSERT_EQ(pack->Name(), "fgdpack");
  const PackingValues values = SolvePacking({{810, 0.3}, {470, 0.3}, {160, 0.1}}, kGpuCompute);
  std::mt19937_64 rng(9);
  const int64_t shares[] = {0, 160, 470, 810};
  int differ = 0;
  for (int round = 0; round < 2000; ++round) {
    const int n = 1 + static_cast<int>(rng() % 4);
    std::vector<int64_t> left(n);
    for (int64_t& l : left) {
      l = rng() % 3 == 0 ? kGpuCompute : static_cast<int64_t>(rng() % 101) * 10;
    }
    fgd::KNode node;
    node.num_gpus = n;
    node.compute_left = left.data();
    node.frag_left = left.data();
    node.cpu_capacity = 32000;
    node.cpu_left = static_cast<int64_t>(rng() % 33) * 1000;
    fgd::KTask task;
    const int64_t share = shares[rng() % 4];
    task.kind = share == 0 ? Demand::Kind::kExclusive : Demand::Kind::kShared;
    task.gpu_count = 1;
    task.cpu = 1000;
    task.compute = task.frag_share = share == 0 ? kGpuCompute : share;
    std::vector<int> fitting;
    for (int i = 0; i < n; ++i) {
      if (left[i] >= task.compute) fitting.push_back(i);
    }
    if (fitting.empty()) continue;
    int want_gpu = -1, got_gpu = -1;
    const double want = cpu->Score(task, node, fitting.data(), static_cast<int>(fitting.size()),
                                   &want_gpu);
    const double got = pack->Score(task, node, fitting.data(), static_cast<int>(fitting.size()),
                                   &got_gpu);
    SCOPED_TRACE(round);
    ASSERT_EQ(got_gpu, want_gpu);
    const double loss =
        share == 0 ? 0 : std::round(1e6 * values.Loss(left[want_gpu], task.frag_share));
    EXPECT_EQ(got, want - 128 * loss);
    differ += loss > 0;
  }
  EXPECT_GT(differ, 100);
}

// The node a policy (with the target of the packing fixtures) picks for a
// share on one-GPU nodes holding `held`, for every tie order.
std::vector<std::string> Picks(const std::string& policy_name,
                               const std::vector<std::pair<std::string, int64_t>>& held,
                               int64_t share) {
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(testing::PackingTarget());
  std::vector<std::string> picks;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    Cluster c = testing::OneGpuNodesHolding(held, seed);
    absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(policy_name, po);
    EXPECT_OK(policy.status());
    absl::StatusOr<Placement> placed = c.Place(testing::ComputeShare("r", share), **policy);
    EXPECT_OK(placed.status());
    picks.push_back(placed.ok() ? placed->node : "");
  }
  return picks;
}

// A 650 share keeps out of the 840 a 160 share left, which an 810 share
// would fill (losing a whole GPU's worth of packing there, against 2/3 on an
// idle GPU); fgdcpu takes the tighter GPU. A 160 share fills the hole an 810
// leaves (losing nothing) rather than the room beside a 470.
TEST(FgdPackPolicyTest, KeepsHolesForTheSharesThatFitThem) {
  const std::vector<std::pair<std::string, int64_t>> held = {{"hole-840", 160}, {"idle", 0}};
  for (const std::string& node : Picks("fgdpack", held, 650)) EXPECT_EQ(node, "idle");
  for (const std::string& node : Picks("fgdcpu", held, 650)) EXPECT_EQ(node, "hole-840");
  for (const std::string& node : Picks("fgdpack", {{"beside-470", 470}, {"hole-190", 810}}, 160)) {
    EXPECT_EQ(node, "hole-190");
  }
}

TEST(FgdPackPolicyTest, LeavesFewerGpusUnallocatedThanFgdcpuOnTheDefaultTrace) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(const testing::OpenbDefault openb, testing::LoadOpenbDefault(dir));
  ASSERT_OK_AND_ASSIGN(const double fgdcpu, testing::MeanUnallocatedAt100(openb, "fgdcpu"));
  ASSERT_OK_AND_ASSIGN(const double fgdpack, testing::MeanUnallocatedAt100(openb, "fgdpack"));
  EXPECT_LT(fgdpack, fgdcpu - 0.2);
  EXPECT_LT(fgdpack, 4.0);
}

}  // namespace
}  // namespace gpushare
