// The indexed placement path of Cluster::Plan() (src/internal/placement_index.h)
// against the generic scan: the same cluster planned once with the built-in
// policy (indexed) and once with a wrapper that hides the built-in's identity
// (scanned) must give the same placement or the same error, over random
// operations that exercise every kind of request and every kind of change.

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/internal/cluster_state.h"
#include "src/internal/placement_index.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/scanned_policy.h"
#include "tests/testing/seeds.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::IsOk;
using ::gpushare::testing::ScannedPolicy;


int Operations() { return std::getenv("GPUSHARE_QUICK") != nullptr ? 2000 : 8000; }

class Generator {
 public:
  // With `many_restrictions`, nodes carry a rack label of 12 values and
  // requests select by rack and model in more combinations than the index
  // keeps views for.
  // With `topologies`, half the nodes have a GPU topology (NVLink pairs, or
  // NVLink between all GPUs) and requests draw every kind of topology need.
  // With `one_pool`, nodes have 4 GPUs of 16 units (models, health and the
  // rest drawn as usual), but for one in fifty with other GPUs.
  explicit Generator(uint64_t seed, bool many_restrictions = false, bool topologies = false,
                     bool one_pool = false)
      : rng_(std::seed_seq{testing::TestSeed(seed)}),
        many_restrictions_(many_restrictions),
        topologies_(topologies),
        one_pool_(one_pool) {}

  int Uniform(int lo, int hi) { return absl::Uniform<int>(absl::IntervalClosed, rng_, lo, hi); }
  bool Chance(double p) { return absl::Bernoulli(rng_, p); }

  Node MakeNode() {
    Node n;
    n.name = absl::StrCat("node-", next_node_++);
    if (Chance(0.85)) n.labels["gpushare"] = "true";
    n.labels["zone"] = Chance(0.5) ? "a" : "b";
    if (many_restrictions_) n.labels["rack"] = absl::StrCat("r", Uniform(0, 11));
    const bool pooled = one_pool_ && !Chance(0.02);
    const int gpus = pooled ? 4 : Chance(0.1) ? 0 : Uniform(1, 8);
    const int64_t sizes[] = {4, 8, 16};
    const int64_t size = pooled ? 16 : sizes[Uniform(0, 2)];
    const bool mixed = !pooled && Chance(0.2);
    for (int i = 0; i < gpus; ++i) {
      Gpu g;
      g.memory = mixed ? sizes[Uniform(0, 2)] : size;
      g.model = (mixed && Chance(0.5)) || Chance(0.3) ? "V100" : "T4";
      g.healthy = !Chance(0.05);
      n.gpus.push_back(g);
    }
    if (Chance(0.4)) n.cpu = Uniform(4, 32) * 1000;
    if (Chance(0.4)) n.host_memory = Uniform(8, 64) * 1024;
    n.schedulable = !Chance(0.05);
    if (topologies_ && !n.gpus.empty() && Chance(0.5)) {
      n.topology = testing::PairedTopology(n.gpus.size(), /*all_nvlink=*/Chance(0.25));
    }
    return n;
  }

  Request MakeRequest() {
    Request r;
    r.id = absl::StrCat("r", next_request_++);
    const int kind = Uniform(0, 99);
    if (kind < 70) {
      const int counts[] = {1, 1, 1, 1, 2, 2, 3, 4, 8};
      r.gpu_count = counts[Uniform(0, 8)];
      r.gpu_memory = Chance(0.05) ? 0 : r.gpu_count * Uniform(1, 8);
      if (r.gpu_memory == 0 || Chance(0.3)) r.compute = Uniform(1, 10) * 100;
    } else if (kind < 85) {
      r.whole_gpus = Uniform(1, 4);
    }
    if (Chance(0.15)) {
      const std::vector<std::vector<std::string>> lists = {{"T4"}, {"V100"}, {"V100", "T4"},
                                                           {"A100"}, {"T4", "T4"}};
      r.gpu_models = lists[Uniform(0, 4)];
    }
    if (Chance(0.1)) r.node_selector["zone"] = "a";
    if (many_restrictions_ && Chance(0.3)) {
      r.node_selector["rack"] = absl::StrCat("r", Uniform(0, 11));
    }
    if (Chance(0.3)) r.cpu = Uniform(0, 8) * 500;
    if (Chance(0.2)) r.host_memory = Uniform(0, 16) * 1024;
    if (topologies_) {
      const int mode = Uniform(0, 2);
      const bool nvlink = Chance(0.5);
      r.topology = testing::DrawnTopologyNeed(mode, nvlink, /*weakest_link=*/Chance(0.5));
    }
    return r;
  }

 private:
  absl::BitGen rng_;
  bool many_restrictions_;
  bool topologies_;
  bool one_pool_;
  int next_node_ = 0;
  int next_request_ = 0;
};

struct Param {
  const char* policy;
  uint64_t tie_break_seed;
};

class PlacementIndexTest : public ::testing::TestWithParam<Param> {};

// Random operations drawn by `gen`, each plan compared between the indexed
// and the scanned policy.
void CompareOverRandomOperations(const Param& param, Generator& gen) {
  ClusterOptions options;
  options.tie_break_seed = param.tie_break_seed;
  Cluster cluster(options);
  for (int i = 0; i < 40; ++i) ASSERT_THAT(cluster.AddNode(gen.MakeNode()), IsOk());
  auto builtin = MakePolicy(param.policy);
  ASSERT_THAT(builtin, IsOk());
  ScannedPolicy scanned(*MakePolicy(param.policy));
  std::vector<std::string> placed;
  int compared = 0, found = 0;

  const int ops = Operations();
  for (int step = 0; step < ops; ++step) {
    const int op = gen.Uniform(0, 99);
    if (op < 55) {
      const Request r = gen.MakeRequest();
      absl::StatusOr<Placement> fast = cluster.Plan(r, **builtin);
      absl::StatusOr<Placement> slow = cluster.Plan(r, scanned);
      ++compared;
      ASSERT_EQ(fast.status(), slow.status()) << "step " << step;
      if (!fast.ok()) continue;
      ++found;
      ASSERT_EQ(*fast, *slow) << "step " << step;
      if (op < 45) {
        ASSERT_THAT(cluster.Commit(*fast), IsOk());
        placed.push_back(r.id);
      }
    } else if (op < 80) {
      if (placed.empty()) continue;
      const int i = gen.Uniform(0, static_cast<int>(placed.size()) - 1);
      ASSERT_THAT(cluster.Release(placed[i]), IsOk());
      placed[i] = placed.back();
      placed.pop_back();
    } else if (op < 88) {
      const std::vector<std::string> names = cluster.node_names();
      if (names.empty()) continue;
      const NodeStatus* node = cluster.FindNode(names[gen.Uniform(0, names.size() - 1)]);
      if (node->gpus.empty()) continue;
      const int g = gen.Uniform(0, static_cast<int>(node->gpus.size()) - 1);
      ASSERT_THAT(cluster.SetGpuHealthy(node->name, g, !node->gpus[g].healthy), IsOk());
    } else if (op < 93) {
      const std::vector<std::string> names = cluster.node_names();
      if (names.empty()) continue;
      const NodeStatus* node = cluster.FindNode(names[gen.Uniform(0, names.size() - 1)]);
      ASSERT_THAT(cluster.SetNodeSchedulable(node->name, !node->schedulable), IsOk());
    } else if (op < 96) {
      if (cluster.num_nodes() < 80) {
        ASSERT_THAT(cluster.AddNode(gen.MakeNode()), IsOk());
      }
    } else if (op < 98) {
      const std::vector<std::string> names = cluster.node_names();
      if (names.size() < 10) continue;
      const std::string& name = names[gen.Uniform(0, names.size() - 1)];
      if (cluster.FindNode(name)->requests.empty()) {
        ASSERT_THAT(cluster.RemoveNode(name), IsOk());
      }
    } else if (op < 99) {
      Cluster copy = cluster;  // Copies carry their indexes along.
      cluster = std::move(copy);
    } else {
      // The snapshot is written directly; it must be the text nlohmann::json
      // prints for the same document, at every indent.
      const int indent = step % 4 - 1;
      const std::string text = cluster.ToJson(indent);
      ASSERT_EQ(nlohmann::json::parse(text).dump(indent), text) << "step " << step;
      absl::StatusOr<Cluster> loaded = Cluster::FromJson(text);
      ASSERT_THAT(loaded, IsOk());
      cluster = *std::move(loaded);
    }
    if (step % 500 == 0) {
      ASSERT_THAT(cluster.CheckInvariants(), IsOk()) << "step " << step;
    }
  }
  ASSERT_THAT(cluster.CheckInvariants(), IsOk());
  // The comparison must have covered both outcomes often.
  EXPECT_GT(found, compared / 4);
  EXPECT_GT(compared - found, compared / 20);
}

TEST_P(PlacementIndexTest, IndexedPlanEqualsScanOverRandomOperations) {
  Generator gen(1234 + GetParam().tie_break_seed);
  CompareOverRandomOperations(GetParam(), gen);
}

// The same on nodes of which half have a GPU topology, with requests that
// need none, prefer or require it: the node's topology may move the GPUs a
// policy chose, so the indexes must leave those nodes to the policy's choice.
TEST_P(PlacementIndexTest, IndexedPlanEqualsScanOnTopologyNodes) {
  Generator gen(4321 + GetParam().tie_break_seed, /*many_restrictions=*/false,
                /*topologies=*/true);
  CompareOverRandomOperations(GetParam(), gen);
}

// The same on a pool of identical nodes, where spread keeps its order in
// one tree per amount of memory used (spread_order.h) until a node of
// another kind joins; rebuilds (a snapshot load, a node leaving) start
// again from the nodes of the time.
TEST_P(PlacementIndexTest, IndexedPlanEqualsScanOnOnePool) {
  Generator gen(2468 + GetParam().tie_break_seed, /*many_restrictions=*/false,
                /*topologies=*/false, /*one_pool=*/true);
  CompareOverRandomOperations(GetParam(), gen);
}

INSTANTIATE_TEST_SUITE_P(
    Policies, PlacementIndexTest,
    ::testing::Values(Param{"binpack", 0}, Param{"binpack", 7}, Param{"spread", 0},
                      Param{"spread", 7}),
    [](const ::testing::TestParamInfo<Param>& info) {
      return absl::StrCat(info.param.policy, "_seed", info.param.tie_break_seed);
    });

// Binpack's GPU index places nodes added after it was built in the
// tie-break order: first with the default tie keys (the order of arrival),
// anywhere with a seed. It is built again when no key is free at a node's
// place (the room at the front runs out here) or a node has more GPUs than
// any before it.
TEST_P(PlacementIndexTest, GpuIndexFollowsNodesAddedAfterIt) {
  const Param param = GetParam();
  if (std::string(param.policy) != "binpack") GTEST_SKIP() << "the GPU index serves binpack";
  Generator gen(5 + param.tie_break_seed);
  ClusterOptions options;
  options.tie_break_seed = param.tie_break_seed;
  Cluster cluster(options);
  for (int i = 0; i < 10; ++i) ASSERT_THAT(cluster.AddNode(gen.MakeNode()), IsOk());
  auto builtin = MakePolicy("binpack");
  ASSERT_THAT(builtin, IsOk());
  ScannedPolicy scanned(*MakePolicy("binpack"));
  int placed = 0;
  for (int step = 0; step < 300; ++step) {
    Node node = gen.MakeNode();
    if (step == 150) node.gpus.assign(16, Gpu{8, "T4", "", true});
    ASSERT_THAT(cluster.AddNode(node), IsOk());
    for (int k = 0; k < 3; ++k) {
      Request r;
      r.id = absl::StrCat("s", step, "-", k);
      r.gpu_memory = gen.Uniform(1, 8);
      if (k == 2) r.gpu_models = {"V100"};
      absl::StatusOr<Placement> fast = cluster.Plan(r, **builtin);
      absl::StatusOr<Placement> slow = cluster.Plan(r, scanned);
      ASSERT_EQ(fast.status(), slow.status()) << "step " << step;
      if (!fast.ok()) continue;
      ASSERT_EQ(*fast, *slow) << "step " << step;
      ASSERT_THAT(cluster.Commit(*fast), IsOk());
      ++placed;
    }
    ASSERT_THAT(cluster.CheckInvariants(), IsOk()) << "step " << step;
  }
  EXPECT_GT(placed, 600);
}

// The indexes (views included) equal a recomputation from the node states
// after every operation, and the indexed plan equals the scan, while requests
// restrict candidates in more ways than there are view slots.
TEST_P(PlacementIndexTest, IndexesEqualRecomputationAfterEveryOperation) {
  const Param param = GetParam();
  Generator gen(99 + param.tie_break_seed, /*many_restrictions=*/true);
  ClusterOptions options;
  options.tie_break_seed = param.tie_break_seed;
  Cluster cluster(options);
  for (int i = 0; i < 30; ++i) ASSERT_THAT(cluster.AddNode(gen.MakeNode()), IsOk());
  auto builtin = MakePolicy(param.policy);
  ASSERT_THAT(builtin, IsOk());
  ScannedPolicy scanned(*MakePolicy(param.policy));
  std::vector<std::string> placed;
  const int ops = Operations() / 4;
  for (int step = 0; step < ops; ++step) {
    const int op = gen.Uniform(0, 99);
    if (op < 50) {
      const Request r = gen.MakeRequest();
      absl::StatusOr<Placement> fast = cluster.Plan(r, **builtin);
      absl::StatusOr<Placement> slow = cluster.Plan(r, scanned);
      ASSERT_EQ(fast.status(), slow.status()) << "step " << step;
      if (fast.ok()) {
        ASSERT_EQ(*fast, *slow) << "step " << step;
        ASSERT_THAT(cluster.Commit(*fast), IsOk());
        placed.push_back(r.id);
      }
    } else if (op < 80) {
      if (placed.empty()) continue;
      const int i = gen.Uniform(0, static_cast<int>(placed.size()) - 1);
      ASSERT_THAT(cluster.Release(placed[i]), IsOk());
      placed[i] = placed.back();
      placed.pop_back();
    } else if (op < 90) {
      const std::vector<std::string> names = cluster.node_names();
      const NodeStatus* node = cluster.FindNode(names[gen.Uniform(0, names.size() - 1)]);
      if (node->gpus.empty()) continue;
      const int g = gen.Uniform(0, static_cast<int>(node->gpus.size()) - 1);
      ASSERT_THAT(cluster.SetGpuHealthy(node->name, g, !node->gpus[g].healthy), IsOk());
    } else if (op < 95) {
      const std::vector<std::string> names = cluster.node_names();
      const NodeStatus* node = cluster.FindNode(names[gen.Uniform(0, names.size() - 1)]);
      ASSERT_THAT(cluster.SetNodeSchedulable(node->name, !node->schedulable), IsOk());
    } else if (op < 98) {
      if (cluster.num_nodes() < 60) {
        ASSERT_THAT(cluster.AddNode(gen.MakeNode()), IsOk());
      }
    } else {
      const std::vector<std::string> names = cluster.node_names();
      const std::string& name = names[gen.Uniform(0, names.size() - 1)];
      if (names.size() > 10 && cluster.FindNode(name)->requests.empty()) {
        ASSERT_THAT(cluster.RemoveNode(name), IsOk());
      }
    }
    ASSERT_THAT(cluster.CheckInvariants(), IsOk()) << "step " << step;
  }
}

// The comparisons above would also pass if every plan fell back on the scan;
// here the indexes themselves must answer every kind of request the built-in
// policies serve, restricted or not, with the scan's node.
TEST(PlacementIndexPathTest, BuiltInPoliciesAreAnsweredByTheIndexes) {
  using internal::ClassifyPolicy;
  using internal::IndexedPolicy;
  EXPECT_EQ(ClassifyPolicy(**MakePolicy("binpack")), IndexedPolicy::kBinpack);
  EXPECT_EQ(ClassifyPolicy(**MakePolicy("spread")), IndexedPolicy::kSpread);
  EXPECT_EQ(ClassifyPolicy(ScannedPolicy(*MakePolicy("spread"))), IndexedPolicy::kNone);

  Cluster cluster;
  internal::ClusterState state;
  for (int i = 0; i < 12; ++i) {
    Node n;
    n.name = absl::StrCat("n", i);
    n.labels = {{"gpushare", "true"}, {"zone", i % 3 == 0 ? "a" : "b"}};
    n.gpus.assign(4, Gpu{16, i % 4 == 0 ? "A10" : "T4", "", true});
    ASSERT_THAT(cluster.AddNode(n), IsOk());
    state.nodes.push_back(internal::MakeNodeStatus(n));
    state.tie_keys.push_back(internal::TieKey(0, n.name, i));
    state.index.Link(state, i, nullptr);
  }
  std::vector<Request> requests(6);
  requests[0].gpu_memory = 3;
  requests[1].gpu_count = 2;
  requests[1].gpu_memory = 6;
  requests[2].whole_gpus = 2;
  requests[3].gpu_memory = 3;
  requests[3].gpu_models = {"A10"};
  requests[4].gpu_count = 4;
  requests[4].gpu_memory = 4;
  requests[4].node_selector = {{"zone", "a"}};
  requests[5].whole_gpus = 1;
  requests[5].gpu_models = {"A10", "V100"};
  requests[5].node_selector = {{"zone", "b"}};
  for (const char* name : {"binpack", "spread"}) {
    std::unique_ptr<Policy> policy = *MakePolicy(name);
    ScannedPolicy scan(*MakePolicy(name));
    for (size_t i = 0; i < requests.size(); ++i) {
      Request& r = requests[i];
      r.id = absl::StrCat("r", i);
      absl::StatusOr<Demand> demand = internal::ValidateRequest(r, 4);
      ASSERT_THAT(demand, IsOk());
      int slot = -1;
      NodeChoice choice;
      ASSERT_TRUE(state.index.Plan(state, cluster, r, *demand, *policy, &slot, &choice))
          << name << " request " << i;
      absl::StatusOr<Placement> scanned = cluster.Plan(r, scan);
      ASSERT_THAT(scanned, IsOk());
      EXPECT_EQ(state.nodes[slot].name, scanned->node) << name << " request " << i;
      EXPECT_EQ(choice.gpus, scanned->gpus) << name << " request " << i;
    }
  }
  EXPECT_TRUE(state.index.Consistent(state));
}

// Equal nodes: ties decide, and the newest node (tie seed 0) wins.
TEST(PlacementIndexTieTest, EqualNodesGoToTheNewestUnderBothPolicies) {
  for (const char* policy : {"binpack", "spread"}) {
    Cluster cluster;
    for (int i = 0; i < 5; ++i) {
      Node n;
      n.name = absl::StrCat("n", i);
      n.labels = {{"gpushare", "true"}};
      n.gpus = {Gpu{16, "T4", "", true}, Gpu{16, "T4", "", true}};
      ASSERT_THAT(cluster.AddNode(n), IsOk());
    }
    Request shared;
    shared.id = "s";
    shared.gpu_memory = 4;
    absl::StatusOr<Placement> p = cluster.Plan(shared, policy);
    ASSERT_THAT(p, IsOk());
    EXPECT_EQ(p->node, "n4") << policy;
    EXPECT_EQ(p->gpus, std::vector<int>{0}) << policy;
    Request whole;
    whole.id = "w";
    whole.whole_gpus = 2;
    p = cluster.Plan(whole, policy);
    ASSERT_THAT(p, IsOk());
    EXPECT_EQ(p->node, "n4") << policy;
  }
}

// A cordoned node or an unhealthy GPU leaves the index and comes back.
TEST(PlacementIndexTieTest, CordonAndHealthChangesMoveTheWinner) {
  Cluster cluster;
  for (int i = 0; i < 2; ++i) {
    Node n;
    n.name = absl::StrCat("n", i);
    n.labels = {{"gpushare", "true"}};
    n.gpus = {Gpu{16, "T4", "", true}};
    ASSERT_THAT(cluster.AddNode(n), IsOk());
  }
  Request r;
  r.id = "r";
  r.gpu_memory = 4;
  ASSERT_THAT(cluster.SetNodeSchedulable("n1", false), IsOk());
  EXPECT_EQ(cluster.Plan(r, "binpack")->node, "n0");
  ASSERT_THAT(cluster.SetGpuHealthy("n0", 0, false), IsOk());
  EXPECT_THAT(cluster.Plan(r, "binpack"),
              ::gpushare::testing::StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(cluster.SetNodeSchedulable("n1", true), IsOk());
  EXPECT_EQ(cluster.Plan(r, "spread")->node, "n1");
  ASSERT_THAT(cluster.CheckInvariants(), IsOk());
}

// Const Plan() calls may run together, including the first multi-GPU spread
// plan, which builds an index on demand.
TEST(PlacementIndexTieTest, ConcurrentConstPlansAgree) {
  Cluster cluster;
  for (int i = 0; i < 64; ++i) {
    Node n;
    n.name = absl::StrCat("n", i);
    n.labels = {{"gpushare", "true"}};
    n.gpus.assign(4, Gpu{16, "T4", "", true});
    ASSERT_THAT(cluster.AddNode(n), IsOk());
  }
  const Cluster& view = cluster;
  std::vector<std::string> nodes(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&view, &nodes, t] {
      Request r;
      r.id = "r";
      r.gpu_memory = 2 * (t % 2 + 1);
      r.gpu_count = t % 2 + 1;
      absl::StatusOr<Placement> p = view.Plan(r, "spread");
      if (p.ok()) nodes[t] = p->node;
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& n : nodes) EXPECT_EQ(n, "n63");
}

}  // namespace
}  // namespace gpushare
