// The fit summary (src/internal/fit_summary.h) against NodeFits() over
// random nodes and demands: it never refuses a node NodeFits() accepts, and,
// where its bounds allow (no selector, GPU models or topology; at most
// FitSummary::kGpus healthy GPUs; amounts within 32 bits), it refuses every
// node NodeFits() refuses.

#include "src/internal/fit_summary.h"

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "src/internal/cluster_state.h"
#include "tests/testing/seeds.h"

namespace gpushare::internal {
namespace {

struct Draw {
  std::mt19937_64 rng;
  int64_t Int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool Coin(int percent) { return Int(0, 99) < percent; }
  // Small amounts, so that fits and misses are both common; sometimes one
  // beyond 32 bits.
  int64_t Amount(int64_t scale) {
    return Coin(3) ? Int(int64_t{1} << 31, int64_t{1} << 40) : Int(0, scale);
  }
};

NodeStatus RandomNode(Draw& d, int most_gpus) {
  NodeStatus node;
  node.name = "n";
  node.schedulable = !d.Coin(5);
  node.gpu_sharing = !d.Coin(10);
  node.cpu = d.Coin(10) ? 0 : d.Amount(64);
  node.cpu_used = node.cpu > 0 ? d.Int(0, node.cpu) : 0;
  node.host_memory = d.Coin(10) ? 0 : d.Amount(64);
  node.host_memory_used = node.host_memory > 0 ? d.Int(0, node.host_memory) : 0;
  const int gpus = static_cast<int>(d.Int(0, most_gpus));
  for (int i = 0; i < gpus; ++i) {
    GpuStatus g;
    g.index = i;
    g.memory = d.Amount(16) + 1;
    g.memory_used = d.Coin(40) ? 0 : d.Int(0, g.memory);
    g.compute_used = d.Coin(40) ? 0 : d.Int(0, kGpuCompute);
    g.holders = g.memory_used > 0 || g.compute_used > 0 ? static_cast<int>(d.Int(1, 3)) : 0;
    g.healthy = !d.Coin(10);
    g.model = d.Coin(50) ? "A100" : "T4";
    node.gpus.push_back(g);
  }
  return node;
}

Demand RandomDemand(Draw& d) {
  Demand demand;
  demand.kind = static_cast<Demand::Kind>(d.Int(0, 2));
  demand.cpu = d.Coin(30) ? 0 : d.Amount(32);
  demand.host_memory = d.Coin(30) ? 0 : d.Amount(32);
  if (demand.kind != Demand::Kind::kCpuOnly) {
    // A count of 0 is refused by validation, but NodeFits() defines it too.
    demand.gpu_count = static_cast<int>(d.Int(d.Coin(2) ? 0 : 1, 10));
    if (demand.kind == Demand::Kind::kShared) {
      demand.memory_per_gpu = d.Amount(16);
      demand.compute_per_gpu = d.Coin(50) ? 0 : d.Int(0, kGpuCompute);
    }
  }
  return demand;
}

// Whether the summary is held to refusing all that NodeFits() refuses.
bool WithinBounds(const NodeStatus& node, const Demand& demand) {
  auto big = [](int64_t v) { return v >= std::numeric_limits<int32_t>::max(); };
  if (big(demand.cpu) || big(demand.host_memory) || big(demand.memory_per_gpu)) return false;
  if (node.cpu > 0 && big(node.cpu - node.cpu_used)) return false;
  if (node.host_memory > 0 && big(node.host_memory - node.host_memory_used)) return false;
  int healthy = 0;
  for (const GpuStatus& g : node.gpus) {
    if (!g.healthy) continue;
    ++healthy;
    if (big(g.memory_free())) return false;
  }
  return healthy <= FitSummary::kGpus;
}

TEST(FitSummaryTest, RefusesExactlyWhatNodeFitsRefusesWithinItsBounds) {
  Draw d{std::mt19937_64(gpushare::testing::TestSeed(11))};
  const Request no_constraints;
  std::vector<int> fitting;
  int refused = 0, exact = 0;
  for (int i = 0; i < 200000; ++i) {
    const NodeStatus node = RandomNode(d, i % 4 == 0 ? 12 : FitSummary::kGpus);
    const Demand demand = RandomDemand(d);
    const bool fits = NodeFits(node, demand, no_constraints, &fitting);
    const bool refuses = FitSummary(node).Refuses(demand);
    ASSERT_FALSE(refuses && fits) << "case " << i;
    if (WithinBounds(node, demand)) {
      ++exact;
      ASSERT_EQ(refuses, !fits) << "case " << i;
    }
    refused += refuses;
  }
  // Both answers were met often, and most cases were held to exactness.
  EXPECT_GT(refused, 40000);
  EXPECT_LT(refused, 190000);
  EXPECT_GT(exact, 100000);
}

TEST(FitSummaryTest, NeverRefusesForWhatItLeavesToNodeFits) {
  Draw d{std::mt19937_64(gpushare::testing::TestSeed(12))};
  std::vector<int> fitting;
  Request picky;
  picky.node_selector = {{"zone", "b"}};
  picky.gpu_models = {"A100"};
  int refused_by_node_fits_only = 0;
  for (int i = 0; i < 100000; ++i) {
    NodeStatus node = RandomNode(d, 12);
    if (d.Coin(50)) node.labels["zone"] = d.Coin(50) ? "b" : "a";
    const Demand demand = RandomDemand(d);
    const bool fits = NodeFits(node, demand, picky, &fitting);
    const bool refuses = FitSummary(node).Refuses(demand);
    ASSERT_FALSE(refuses && fits) << "case " << i;
    refused_by_node_fits_only += !fits && !refuses;
  }
  EXPECT_GT(refused_by_node_fits_only, 1000);  // Selectors and models were met.
}

TEST(FitSummaryTest, ClampedAmountsRefuseNothing) {
  NodeStatus node;
  node.schedulable = true;
  node.gpu_sharing = true;
  node.cpu = int64_t{3} << 32;  // Free CPU beyond 32 bits.
  node.host_memory = 0;         // Untracked.
  GpuStatus g;
  g.memory = int64_t{5} << 32;
  node.gpus = {g};
  Demand demand;
  demand.kind = Demand::Kind::kShared;
  demand.gpu_count = 1;
  demand.cpu = int64_t{2} << 32;
  demand.host_memory = int64_t{1} << 40;
  demand.memory_per_gpu = int64_t{4} << 32;
  std::vector<int> fitting;
  ASSERT_TRUE(NodeFits(node, demand, Request{}, &fitting));
  EXPECT_FALSE(FitSummary(node).Refuses(demand));
  // One unit more than the GPU has is refused by both.
  demand.memory_per_gpu = g.memory + 1;
  ASSERT_FALSE(NodeFits(node, demand, Request{}, &fitting));
  EXPECT_FALSE(FitSummary(node).Refuses(demand));  // Beyond 32 bits: left to NodeFits().
  node.gpus[0].memory = 1000;
  demand.memory_per_gpu = 1001;
  EXPECT_TRUE(FitSummary(node).Refuses(demand));
}

TEST(FitSummaryTest, ADefaultSummaryRefusesNothing) {
  Draw d{std::mt19937_64(gpushare::testing::TestSeed(13))};
  for (int i = 0; i < 10000; ++i) {
    ASSERT_FALSE(FitSummary().Refuses(RandomDemand(d))) << "case " << i;
  }
}

TEST(FitSummaryTest, EqualsOnlyTheSummaryOfAnEqualNode) {
  Draw d{std::mt19937_64(gpushare::testing::TestSeed(14))};
  for (int i = 0; i < 2000; ++i) {
    NodeStatus node = RandomNode(d, FitSummary::kGpus);
    const FitSummary before(node);
    EXPECT_EQ(before, FitSummary(node));
    if (node.gpus.empty() || !node.gpus[0].healthy ||
        node.gpus[0].memory_free() >= std::numeric_limits<int32_t>::max()) {
      continue;  // Clamped: a change of one unit does not show.
    }
    node.gpus[0].memory_used = node.gpus[0].memory_used == 0 ? 1 : 0;
    EXPECT_NE(before, FitSummary(node)) << "case " << i;
  }
}

}  // namespace
}  // namespace gpushare::internal
