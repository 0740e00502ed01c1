// The FGD-paper policies: hand-computed scores and GPU choices through the
// Policy interface, and equality of the simulator's engine with
// Cluster::Place() for every one of them.

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::testing::IsSupersetOf;

const char* const kPaperPolicies[] = {"fgd",        "bestfit",       "dotprod",
                                      "gpupacking", "gpuclustering", "random"};

// A cluster of one node "n" with the given idle compute per GPU and CPU.
Cluster NodeWithLeft(const std::vector<int64_t>& left, int64_t cpu = 64000) {
  Cluster cluster;
  Node node = testing::SharedNode("n", std::vector<int64_t>(left.size(), 16));
  node.cpu = cpu;
  EXPECT_OK(cluster.AddNode(node));
  for (size_t i = 0; i < left.size(); ++i) {
    if (left[i] == kGpuCompute) continue;
    Placement p;
    p.request_id = "used-" + std::to_string(i);
    p.node = "n";
    p.gpus = {static_cast<int>(i)};
    p.compute_per_gpu = kGpuCompute - left[i];
    EXPECT_OK(cluster.Commit(p));
  }
  return cluster;
}

Request SharedCompute(const std::string& id, int64_t compute, int64_t cpu = 0) {
  Request r;
  r.id = id;
  r.compute = compute;
  r.cpu = cpu;
  return r;
}

// Evaluates `policy` on node "n" the way Cluster::Plan() does.
NodeChoice EvaluateOn(Policy& policy, const Cluster& cluster, const Request& r) {
  absl::StatusOr<Demand> demand = cluster.Validate(r);
  EXPECT_OK(demand.status());
  const NodeStatus& node = *cluster.FindNode("n");
  std::vector<int> fitting;
  for (const GpuStatus& g : node.gpus) {
    if (demand->kind == Demand::Kind::kExclusive ? g.idle()
                                                 : g.compute_free() >= demand->compute_per_gpu) {
      fitting.push_back(g.index);
    }
  }
  return policy.Evaluate(*demand, node, fitting, cluster);
}

std::unique_ptr<Policy> Make(const std::string& name, PolicyOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Policy>> p = MakePolicy(name, options);
  EXPECT_OK(p.status());
  return p.ok() ? *std::move(p) : nullptr;
}

TEST(PaperPoliciesTest, AreRegisteredByName) {
  std::vector<std::string> names(std::begin(kPaperPolicies), std::end(kPaperPolicies));
  EXPECT_THAT(PolicyNames(), IsSupersetOf(names));
  for (const std::string& name : names) EXPECT_EQ(Make(name)->Name(), name);
}

TEST(BestFitTest, ScoresTheFormulaAndTakesTheLeastIdleGpu) {
  Cluster cluster = NodeWithLeft({1000, 300, 600}, 64000);
  auto policy = Make("bestfit");
  const NodeChoice c = EvaluateOn(*policy, cluster, SharedCompute("p", 250, 16000));
  EXPECT_EQ(c.gpus, std::vector<int>{1});
  // 100 * (1 - (0.5 * 48000 / 128000 + 0.5 * 1650 / 8000)) = 70.93...
  EXPECT_EQ(c.score.primary, 70);
}

TEST(DotProdTest, ScoresTheFormula) {
  Cluster cluster = NodeWithLeft({1000, 1000, 1000, 1000}, 64000);
  auto policy = Make("dotprod");
  Request r;
  r.id = "p";
  r.whole_gpus = 2;
  r.cpu = 64000;
  const NodeChoice c = EvaluateOn(*policy, cluster, r);
  EXPECT_EQ(c.gpus, (std::vector<int>{0, 1}));
  // dot = 0.5 * 0.5 + 0.5 * 0.25 = 0.375 -> int(100 * (1 - 0.1875)) = 81.
  EXPECT_EQ(c.score.primary, 81);
}

TEST(GpuClusteringTest, PrefersNodesWithTheSameKind) {
  Cluster cluster;
  Node node = testing::SharedNode("n", {16, 16, 16, 16});
  node.cpu = 64000;
  ASSERT_OK(cluster.AddNode(node));
  auto policy = Make("gpuclustering");
  const Request share = SharedCompute("s", 500);
  Request one;
  one.id = "one";
  one.whole_gpus = 1;
  // Empty 4-GPU node: u = 25 * (8000 - 4000) / 8000 = 12.
  EXPECT_EQ(EvaluateOn(*policy, cluster, share).score.primary, 25 + 12);
  ASSERT_OK(cluster.Place(SharedCompute("s0", 500), *policy).status());
  // G = 3500: u = 14. Only shared tasks: 75 + u for a shared task, u otherwise.
  EXPECT_EQ(EvaluateOn(*policy, cluster, share).score.primary, 75 + 14);
  EXPECT_EQ(EvaluateOn(*policy, cluster, one).score.primary, 14);
  Request whole;
  whole.id = "w";
  whole.whole_gpus = 1;
  ASSERT_OK(cluster.Place(whole, *policy).status());
  // Mixed: 50 + u for either kind; u = 25 * 5500 / 8000 = 17.
  EXPECT_EQ(EvaluateOn(*policy, cluster, share).score.primary, 50 + 17);
  Request cpu_only;
  cpu_only.id = "c";
  cpu_only.cpu = 1000;
  EXPECT_EQ(EvaluateOn(*policy, cluster, cpu_only).score.primary, 0);
}

TEST(GpuPackingTest, PrefersPartlyUsedGpus) {
  auto policy = Make("gpupacking");
  Cluster cluster = NodeWithLeft({1000, 400, 700});
  const NodeChoice c = EvaluateOn(*policy, cluster, SharedCompute("p", 300));
  EXPECT_EQ(c.gpus, std::vector<int>{1});
  EXPECT_EQ(c.score.primary, 100 - 40 / 10);
  const NodeChoice big = EvaluateOn(*policy, cluster, SharedCompute("q", 800));
  EXPECT_EQ(big.gpus, std::vector<int>{0});
  EXPECT_EQ(big.score.primary, 49);
}

// The four GpuPacking cases of fgd.md (also in the vectors file, which
// FragmentationGoldenTest.GpuPackingCases reads when ../shared is present).
TEST(GpuPackingTest, ScoresThePapersFourCases) {
  auto policy = Make("gpupacking");
  Request two_whole;
  two_whole.id = "w";
  two_whole.cpu = 100;
  two_whole.whole_gpus = 2;
  Request two_shares = SharedCompute("s", 200, 100);
  two_shares.gpu_count = 2;
  const std::vector<int64_t> mixed = {200, 1000, 1000, 500};
  EXPECT_EQ(EvaluateOn(*policy, NodeWithLeft(mixed, 1000), two_whole).score.primary, 48);
  EXPECT_EQ(EvaluateOn(*policy, NodeWithLeft({1000, 1000, 1000, 1000}, 1000), two_whole)
                .score.primary,
            29);
  EXPECT_EQ(EvaluateOn(*policy, NodeWithLeft(std::vector<int64_t>(8, 1000), 1000), two_whole)
                .score.primary,
            25);
  const NodeChoice shares = EvaluateOn(*policy, NodeWithLeft(mixed, 1000), two_shares);
  EXPECT_EQ(shares.score.primary, 93);
  EXPECT_EQ(shares.gpus, (std::vector<int>{0, 3}));  // The least idle that fit.
}

TEST(FgdTest, TakesTheGpuThatAddsTheLeastFragmentation) {
  // Whole-GPU target: every partly used GPU is fragment.
  auto target = std::make_shared<TargetWorkload>();
  target->tasks.push_back(TargetTask{0, 1000, 1, {}, 1.0});
  PolicyOptions options;
  options.fgd_target = target;
  auto policy = Make("fgd", options);
  Cluster cluster = NodeWithLeft({1000, 700});
  // GPU 1: F 700 -> 500, score int(100 * sigmoid(0.2)) = 54; GPU 0 would
  // raise F to 1500.
  const NodeChoice c = EvaluateOn(*policy, cluster, SharedCompute("p", 200));
  EXPECT_EQ(c.gpus, std::vector<int>{1});
  EXPECT_EQ(c.score.primary, 54);
  // Equal scores: the first GPU. Both idle GPUs give the same F.
  Cluster idle = NodeWithLeft({1000, 1000});
  EXPECT_EQ(EvaluateOn(*policy, idle, SharedCompute("p", 200)).gpus, std::vector<int>{0});
}

TEST(FgdTest, WithoutTargetUsesOneWholeGpuTask) {
  auto policy = Make("fgd");
  Cluster cluster = NodeWithLeft({1000, 700});
  EXPECT_EQ(EvaluateOn(*policy, cluster, SharedCompute("p", 200)).gpus, std::vector<int>{1});
}

TEST(RandomTest, IsSeeded) {
  std::vector<Node> nodes = testing::GeneratedNodes(20, 1);
  auto run = [&](uint64_t seed) {
    PolicyOptions o;
    o.seed = seed;
    auto policy = Make("random", o);
    Cluster cluster;
    for (const Node& n : nodes) EXPECT_OK(cluster.AddNode(n));
    std::vector<std::string> where;
    for (int i = 0; i < 30; ++i) {
      absl::StatusOr<Placement> p =
          cluster.Place(SharedCompute("r" + std::to_string(i), 300), *policy);
      EXPECT_OK(p.status());
      where.push_back(p->node + "/" + std::to_string(p->gpus[0]));
    }
    return where;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

// The simulator's specialised engine must place exactly like
// Cluster::Place() with the same policy.
class EngineEqualityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineEqualityTest, FastEngineMatchesClusterPlace) {
  const std::vector<Node> nodes = testing::GeneratedNodes(testing::Quick() ? 12 : 40, 3);
  const std::vector<Request> requests =
      testing::GeneratedRequests(testing::Quick() ? 150 : 500, 4);
  SimulationOptions options;
  options.policy = GetParam();
  options.seed = 11;
  options.inflate = 1.2;
  ASSERT_OK_AND_ASSIGN(SimulationResult fast, Simulate(nodes, requests, options));
  options.through_cluster = true;
  ASSERT_OK_AND_ASSIGN(SimulationResult slow, Simulate(nodes, requests, options));
  ASSERT_EQ(fast.requests, slow.requests);
  EXPECT_GT(fast.placed, 0);
  EXPECT_GT(fast.failed.total(), 0);  // Inflated past capacity.
  EXPECT_EQ(fast.node_of_request, slow.node_of_request);
  EXPECT_EQ(fast.gpus_of_request, slow.gpus_of_request);
  EXPECT_EQ(fast.unallocated_pct, slow.unallocated_pct);
  ASSERT_EQ(fast.frag_amount.size(), slow.frag_amount.size());
  for (size_t i = 0; i < fast.frag_amount.size(); ++i) {
    EXPECT_NEAR(fast.frag_amount[i], slow.frag_amount[i], 1e-6) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PaperPolicies, EngineEqualityTest, ::testing::ValuesIn(kPaperPolicies));
INSTANTIATE_TEST_SUITE_P(BeyondThePaper, EngineEqualityTest, ::testing::Values("fgdcpu", "fgdpack"));
// DRA's device choice under kube-scheduler's and the policies' node choice.
INSTANTIATE_TEST_SUITE_P(Dra, EngineEqualityTest,
                         ::testing::Values("dra", "dra+fgdpack", "dra+random", "dra+gpupacking"));

}  // namespace
}  // namespace gpushare
