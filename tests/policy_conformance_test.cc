// One conformance suite for every registered policy: never oversubscribes,
// respects selectors, models, health and cordons, and is deterministic.

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

// Runs a fixed random workload under `policy` and returns every placement
// made, checking the guarantees after every step.
std::vector<Placement> RunWorkload(const std::string& policy_name, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Cluster cluster;
  for (int n = 0; n < 12; ++n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    node.labels = {{"gpushare", "true"}, {"pool", n % 3 == 0 ? "infer" : "train"}};
    const int gpus = std::vector<int>{1, 2, 4, 8}[uniform(0, 3)];
    for (int g = 0; g < gpus; ++g) {
      node.gpus.push_back(Gpu{16, n % 2 ? "T4" : "V100M16", "", true});
    }
    node.cpu = 32000;
    node.host_memory = 65536;
    EXPECT_OK(cluster.AddNode(node));
  }
  EXPECT_OK(cluster.SetGpuHealthy("node-1", 0, false));
  EXPECT_OK(cluster.SetNodeSchedulable("node-2", false));
  absl::StatusOr<std::unique_ptr<Policy>> policy = MakePolicy(policy_name);
  EXPECT_OK(policy.status());
  if (!policy.ok()) return {};
  std::vector<Placement> made;
  std::vector<std::string> live;
  for (int step = 0; step < 600; ++step) {
    if (!live.empty() && uniform(0, 2) == 0) {
      const int k = uniform(0, static_cast<int>(live.size()) - 1);
      EXPECT_OK(cluster.Release(live[k]));
      live.erase(live.begin() + k);
      continue;
    }
    Request r;
    r.id = "r" + std::to_string(step);
    switch (uniform(0, 4)) {
      case 0: r.gpu_memory = uniform(1, 16); break;
      case 1: r.gpu_count = 2; r.gpu_memory = 2 * uniform(1, 8); break;
      case 2: r.compute = 100 * uniform(1, 10); break;
      case 3: r.whole_gpus = uniform(1, 2); break;
      default: break;  // CPU-only.
    }
    r.cpu = 1000 * uniform(0, 4);
    r.host_memory = 1024 * uniform(0, 4);
    if (uniform(0, 5) == 0) r.node_selector = {{"pool", "infer"}};
    if (uniform(0, 5) == 0) r.gpu_models = {"T4"};
    absl::StatusOr<Placement> p = cluster.Place(r, **policy);
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
      continue;
    }
    const NodeStatus* node = cluster.FindNode(p->node);
    EXPECT_NE(node, nullptr);
    if (node == nullptr) continue;
    EXPECT_TRUE(node->schedulable) << p->node;
    for (const auto& [k, v] : r.node_selector) {
      EXPECT_EQ(node->labels.at(k), v);
    }
    for (int g : p->gpus) {
      if (!r.gpu_models.empty()) {
        EXPECT_EQ(node->gpus[g].model, r.gpu_models[0]);
      }
      EXPECT_FALSE(p->node == "node-1" && g == 0) << "placed on an unhealthy GPU";
    }
    EXPECT_OK(cluster.CheckInvariants());
    made.push_back(*p);
    live.push_back(r.id);
  }
  EXPECT_GT(made.size(), 100u);
  return made;
}

class PolicyConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PolicyConformanceTest, NeverOversubscribesAndRespectsConstraints) {
  RunWorkload(GetParam(), 7);
}

TEST_P(PolicyConformanceTest, IsDeterministic) {
  EXPECT_EQ(RunWorkload(GetParam(), 11), RunWorkload(GetParam(), 11));
}

TEST_P(PolicyConformanceTest, HasAStableName) {
  ASSERT_OK_AND_ASSIGN(auto policy, MakePolicy(GetParam()));
  EXPECT_EQ(policy->Name(), GetParam());
}

TopologyPtr FixtureTopology(const std::string& name) {
  std::ifstream in(std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/topology/" + name);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<TopologyPtr> t = Topology::FromNvidiaSmi(text.str());
  EXPECT_OK(t.status());
  return t.ok() ? *t : nullptr;
}

// With topologies on some nodes: every policy keeps its own node choice, the
// GPUs on that node are at least as well connected as the policy's own pick,
// required links hold, and nothing is oversubscribed.
TEST_P(PolicyConformanceTest, CombinesWithGpuTopology) {
  std::mt19937_64 rng(21);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const TopologyPtr topologies[] = {FixtureTopology("dgx1_v100.txt"),
                                    FixtureTopology("pcie_2socket_8gpu.txt"),
                                    FixtureTopology("t4x4.txt")};
  Cluster cluster;
  for (int n = 0; n < 9; ++n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    node.labels = {{"gpushare", "true"}};
    const TopologyPtr& t = topologies[n % 3];
    const int gpus = n < 6 ? t->num_gpus() : 8;  // The last three are blind.
    for (int g = 0; g < gpus; ++g) node.gpus.push_back(Gpu{16, "V100", "", true});
    if (n < 6) node.topology = t;
    ASSERT_OK(cluster.AddNode(node));
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> policy, MakePolicy(GetParam()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> twin, MakePolicy(GetParam()));
  std::vector<std::string> live;
  int placed = 0, compared = 0;
  for (int step = 0; step < 400; ++step) {
    if (!live.empty() && uniform(0, 2) == 0) {
      const int k = uniform(0, static_cast<int>(live.size()) - 1);
      ASSERT_OK(cluster.Release(live[k]));
      live.erase(live.begin() + k);
      continue;
    }
    Request r;
    r.id = "r" + std::to_string(step);
    if (uniform(0, 1) == 0) {
      r.gpu_count = uniform(1, 4);
      r.gpu_memory = r.gpu_count * uniform(1, 16);
    } else {
      r.whole_gpus = uniform(1, 4);
    }
    const bool required = uniform(0, 4) == 0;
    if (required) {
      r.topology.mode = TopologyNeed::Mode::kRequire;
      r.topology.min_link = uniform(0, 1) ? Link{LinkKind::kNvLink, 1} : Link{LinkKind::kPix, 0};
    }
    if (uniform(0, 3) == 0) r.topology.objective = TopologyObjective::kTotal;
    // The same request without topology, under a twin policy in the same
    // state ("random" draws from its own stream, so it is left out).
    Request blind = r;
    blind.topology = TopologyNeed{};
    blind.topology.mode = TopologyNeed::Mode::kNone;
    absl::StatusOr<Placement> reference = cluster.Plan(blind, *twin);
    absl::StatusOr<Placement> p = cluster.Place(r, *policy);
    if (!p.ok()) {
      ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << p.status();
      continue;
    }
    ++placed;
    live.push_back(r.id);
    const NodeStatus* node = cluster.FindNode(p->node);
    ASSERT_NE(node, nullptr);
    if (required && p->gpus.size() >= 2) {  // One GPU has no pair to judge.
      ASSERT_NE(node->topology, nullptr);
      for (size_t a = 0; a < p->gpus.size(); ++a) {
        for (size_t b = a + 1; b < p->gpus.size(); ++b) {
          EXPECT_FALSE(node->topology->link(p->gpus[a], p->gpus[b]) < r.topology.min_link);
        }
      }
    } else if (GetParam() != "random") {
      ASSERT_OK(reference.status());
      ++compared;
      EXPECT_EQ(p->node, reference->node) << r;
      if (node->topology != nullptr && p->gpus.size() >= 2 &&
          r.topology.objective == TopologyObjective::kWeakestLink) {
        EXPECT_GE(node->topology->Rate(p->gpus).weakest_weight,
                  node->topology->Rate(reference->gpus).weakest_weight)
            << *p << " vs " << *reference;
      }
    }
    EXPECT_EQ(p->weakest_link.empty(), node->topology == nullptr || p->gpus.size() < 2);
    ASSERT_OK(cluster.CheckInvariants());
  }
  EXPECT_GT(placed, 100);
  if (GetParam() != "random") {
    EXPECT_GT(compared, 80);
  }
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyConformanceTest,
                         ::testing::ValuesIn(PolicyNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace gpushare
