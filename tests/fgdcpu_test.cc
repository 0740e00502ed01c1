// "fgdcpu" (gpushare/policy.h) and its CPU-bound fragmentation
// (fgd::FragAmountCpuBound).

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "src/fgd/kernel.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

fgd::CompiledTarget OneType(int64_t cpu, int64_t share, int count) {
  TargetWorkload t;
  t.tasks.push_back(TargetTask{cpu, share, count, {}, 1.0});
  return fgd::Compile(t);
}

TEST(FragAmountCpuBoundTest, EqualsFragAmountWhenCpuServesEveryCopy) {
  const std::vector<int64_t> left = {200, 1000, 1000, 500};
  for (const auto& target : {OneType(1000, 500, 1), OneType(4000, 0, 1), OneType(2000, 0, 2),
                             OneType(0, 300, 1)}) {
    for (int64_t cpu : {0, 999, 64000}) {
      EXPECT_DOUBLE_EQ(
          fgd::FragAmountCpuBound(target, left.data(), 4, kGpuCompute, cpu, nullptr),
          fgd::FragAmount(target, left.data(), 4, kGpuCompute, cpu, nullptr))
          << cpu;
    }
  }
}

TEST(FragAmountCpuBoundTest, FittingGpusTheCpuCannotServeAreFragment) {
  const std::vector<int64_t> idle = {1000, 1000, 1000, 1000};
  // CPU for one whole-GPU copy: three idle GPUs are lost to it.
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(4000, 0, 1), idle.data(), 4, kGpuCompute, 5000, nullptr),
      3000);
  // One copy of a 2-GPU type serves two GPUs.
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(4000, 0, 2), idle.data(), 4, kGpuCompute, 4000, nullptr),
      2000);
  // Shared copies: 500 each, CPU for two; the largest GPU takes both, the
  // other fitting GPU is lost, the 300 left is too small anyway.
  const std::vector<int64_t> mixed = {300, 1000, 600};
  EXPECT_DOUBLE_EQ(
      fgd::FragAmountCpuBound(OneType(1000, 500, 1), mixed.data(), 3, kGpuCompute, 2000, nullptr),
      900);
  EXPECT_DOUBLE_EQ(
      fgd::FragAmount(OneType(1000, 500, 1), mixed.data(), 3, kGpuCompute, 2000, nullptr), 300);
}

TEST(FgdCpuPolicyTest, FastEngineMatchesClusterPlace) {
  const std::vector<Node> nodes = testing::GeneratedNodes(testing::Quick() ? 12 : 40, 3);
  const std::vector<Request> requests =
      testing::GeneratedRequests(testing::Quick() ? 150 : 500, 4);
  SimulationOptions options;
  options.policy = "fgdcpu";
  options.seed = 11;
  options.inflate = 1.2;
  ASSERT_OK_AND_ASSIGN(SimulationResult fast, Simulate(nodes, requests, options));
  options.through_cluster = true;
  ASSERT_OK_AND_ASSIGN(SimulationResult slow, Simulate(nodes, requests, options));
  EXPECT_EQ(fast.policy, "fgdcpu");
  EXPECT_GT(fast.failed.total(), 0);
  EXPECT_EQ(fast.node_of_request, slow.node_of_request);
  EXPECT_EQ(fast.gpus_of_request, slow.gpus_of_request);
}

TEST(FgdCpuPolicyTest, BreaksFgdTiesOnTheGpuTheCpuWouldStrand) {
  // Two idle 2-GPU nodes; the "short" one has CPU for one 8-core target task
  // only, so one of its GPUs is lost to the target anyway. FGD scores both
  // nodes alike for a 1-core whole-GPU task (ties go by the seeded order);
  // fgdcpu puts it on the GPU the short node's CPU would strand, keeping
  // both GPUs of the "long" node for 8-core tasks.
  std::vector<Node> nodes;
  for (auto [name, cpu] : {std::pair<const char*, int64_t>{"short", 10000}, {"long", 64000}}) {
    Node n;
    n.name = name;
    n.gpus = {Gpu{16, "A", "", true}, Gpu{16, "A", "", true}};
    n.cpu = cpu;
    nodes.push_back(n);
  }
  TargetWorkload target;
  target.tasks.push_back(TargetTask{8000, 0, 1, {}, 1.0});
  PolicyOptions po;
  po.fgd_target = std::make_shared<const TargetWorkload>(target);
  Request r;
  r.id = "r";
  r.whole_gpus = 1;
  r.cpu = 1000;
  int fgd_long = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    ClusterOptions co;
    co.tie_break_seed = seed;
    // One cluster for both: its score memo must not hand fgd's verdicts to
    // fgdcpu (same target, other policy).
    Cluster c(co);
    for (const Node& n : nodes) ASSERT_OK(c.AddNode(n));
    for (const char* name : {"fgd", "fgdcpu"}) {
      ASSERT_OK_AND_ASSIGN(auto policy, MakePolicy(name, po));
      ASSERT_OK_AND_ASSIGN(Placement p, c.Place(r, *policy));
      ASSERT_OK(c.Release(r.id));
      if (std::string(name) == "fgdcpu") {
        EXPECT_EQ(p.node, "short") << seed;
      } else {
        fgd_long += p.node == "long";
      }
    }
  }
  EXPECT_GT(fgd_long, 0);  // For FGD it is a tie.
}

TEST(FgdCpuPolicyTest, LeavesFewerGpusUnallocatedThanFgdOnTheDefaultTrace) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(const testing::OpenbDefault openb, testing::LoadOpenbDefault(dir));
  const std::vector<Node>& nodes = openb.nodes;
  const std::vector<Request>& requests = openb.requests;
  SimulationOptions options;
  options.inflate = 1.05;  // The same tasks up to 100% arrived as with 1.3.
  const std::vector<uint64_t> seeds = {42, 43, 44};
  double mean[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    options.policy = k == 0 ? "fgd" : "fgdcpu";
    ASSERT_OK_AND_ASSIGN(std::vector<SimulationResult> runs,
                         SimulateSeeds(nodes, requests, options, seeds));
    for (const SimulationResult& r : runs) mean[k] += r.UnallocatedAt(100) / 3;
  }
  EXPECT_LT(mean[1], mean[0] - 0.1);
}

}  // namespace
}  // namespace gpushare
