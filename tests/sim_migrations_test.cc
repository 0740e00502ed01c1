// Simulate() with a migration budget (SimulationOptions::migration_budget):
// moves happen only for requests that find no node and only within the
// budget earned, they rescue requests, and no GPU, CPU or host memory is
// ever promised beyond its size after the moves.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::GeneratedNodes;
using ::gpushare::testing::GeneratedRequests;
using ::gpushare::testing::StatusIs;

Node OneGpuNode(const std::string& name) {
  Node n;
  n.name = name;
  n.gpus.push_back(Gpu{16, "T4", "", true});
  n.cpu = 8000;
  n.host_memory = 32768;
  n.gpu_sharing = true;
  return n;
}

Request Shared(const std::string& id, int64_t compute) {
  Request r;
  r.id = id;
  r.compute = compute;
  r.cpu = 1000;
  return r;
}

Request Whole(const std::string& id, int64_t gpus) {
  Request r;
  r.id = id;
  r.whole_gpus = gpus;
  r.cpu = 1000;
  return r;
}

// The requests in the order given, each attempted once.
SimulationOptions InOrder(const std::string& policy) {
  SimulationOptions o;
  o.policy = policy;
  o.shuffle = false;
  o.inflate = 0;
  return o;
}

// Checks, from where every request ended (node_of_request, gpus_of_request),
// that no GPU holds more than its compute and no node more than its CPU and
// host memory, and that the counts and the allocation agree. The requests
// were attempted in input order (InOrder()).
void ExpectConsistent(const std::vector<Node>& nodes, const std::vector<Request>& requests,
                      const SimulationResult& r) {
  ASSERT_EQ(r.node_of_request.size(), requests.size());
  std::map<std::pair<int, int>, int64_t> gpu_use;
  std::map<int, int64_t> cpu_use, mem_use;
  int64_t placed = 0, allocated = 0;
  for (size_t k = 0; k < requests.size(); ++k) {
    const int node = r.node_of_request[k];
    const Request& q = requests[k];
    if (node < 0) {
      EXPECT_EQ(r.gpus_of_request[k], 0u) << k;
      continue;
    }
    ++placed;
    const int64_t gpus = __builtin_popcountll(r.gpus_of_request[k]);
    const int64_t per_gpu = q.whole_gpus > 0 ? 1000 : q.compute;
    EXPECT_EQ(gpus, q.whole_gpus > 0 ? q.whole_gpus : (q.compute > 0 ? q.gpu_count : 0)) << k;
    for (int g = 0; g < 64; ++g) {
      if (r.gpus_of_request[k] >> g & 1) {
        ASSERT_LT(g, static_cast<int>(nodes[node].gpus.size())) << k;
        gpu_use[{node, g}] += per_gpu;
      }
    }
    allocated += per_gpu * gpus;
    cpu_use[node] += q.cpu;
    mem_use[node] += q.host_memory;
  }
  for (const auto& [gpu, use] : gpu_use) {
    EXPECT_LE(use, 1000) << "node " << gpu.first << " GPU " << gpu.second;
  }
  for (const auto& [node, use] : cpu_use) EXPECT_LE(use, nodes[node].cpu) << node;
  for (const auto& [node, use] : mem_use) EXPECT_LE(use, nodes[node].host_memory) << node;
  EXPECT_EQ(placed, r.placed);
  EXPECT_EQ(r.placed + r.failed.total(), r.requests);
  ASSERT_FALSE(r.allocated_after.empty());
  EXPECT_EQ(r.allocated_after.back(), allocated);
}

// Two one-GPU nodes; "spread" puts the two halves on different GPUs, so the
// whole-GPU request finds no idle GPU. One move (a half next to the other)
// frees a GPU for it.
TEST(SimulateMigrationsTest, AMoveRescuesARequestThatOtherwiseFails) {
  const std::vector<Node> nodes = {OneGpuNode("a"), OneGpuNode("b")};
  const std::vector<Request> requests = {Shared("half-1", 500), Shared("half-2", 500),
                                         Whole("whole", 1)};
  SimulationOptions options = InOrder("spread");
  ASSERT_OK_AND_ASSIGN(SimulationResult alone, Simulate(nodes, requests, options));
  ASSERT_NE(alone.node_of_request[0], alone.node_of_request[1]);
  EXPECT_EQ(alone.node_of_request[2], -1);
  EXPECT_EQ(alone.placed, 2);
  EXPECT_EQ(alone.migrations, 0);
  EXPECT_EQ(alone.migration_plans, 0);

  options.migration_budget = 100;  // One move per request attempted.
  ASSERT_OK_AND_ASSIGN(SimulationResult moved, Simulate(nodes, requests, options));
  EXPECT_EQ(moved.placed, 3);
  EXPECT_EQ(moved.failed.total(), 0);
  EXPECT_EQ(moved.migrations, 1);
  EXPECT_EQ(moved.rescued, 1);
  EXPECT_EQ(moved.migration_plans, 1);
  // Both halves now share one GPU and the whole request has the other.
  EXPECT_EQ(moved.node_of_request[0], moved.node_of_request[1]);
  EXPECT_NE(moved.node_of_request[2], moved.node_of_request[0]);
  EXPECT_EQ(moved.gpus_of_request[2], 1u);
  EXPECT_EQ(moved.allocated_after.back(), 2000);
  EXPECT_DOUBLE_EQ(moved.unallocated_pct.back(), 0.0);
  ExpectConsistent(nodes, requests, moved);

  // 3 requests earn floor(3 * 33 / 100) = 0 moves: the planner is not asked.
  options.migration_budget = 33;
  ASSERT_OK_AND_ASSIGN(SimulationResult poor, Simulate(nodes, requests, options));
  EXPECT_EQ(poor.placed, 2);
  EXPECT_EQ(poor.migrations, 0);
  EXPECT_EQ(poor.migration_plans, 0);
  EXPECT_EQ(poor.node_of_request, alone.node_of_request);
  // floor(3 * 34 / 100) = 1.
  options.migration_budget = 34;
  ASSERT_OK_AND_ASSIGN(SimulationResult enough, Simulate(nodes, requests, options));
  EXPECT_EQ(enough.placed, 3);
  EXPECT_EQ(enough.migrations, 1);
}

// A request no move can help (it asks for more compute than is idle in
// all) asks the planner, which finds nothing: nothing moves and it fails as it
// would without migrations.
TEST(SimulateMigrationsTest, NoPlanMovesNothing) {
  const std::vector<Node> nodes = {OneGpuNode("a"), OneGpuNode("b")};
  const std::vector<Request> requests = {Shared("s-1", 700), Shared("s-2", 700),
                                         Shared("s-3", 700)};
  SimulationOptions options = InOrder("spread");
  ASSERT_OK_AND_ASSIGN(SimulationResult alone, Simulate(nodes, requests, options));
  options.migration_budget = 100;
  ASSERT_OK_AND_ASSIGN(SimulationResult tried, Simulate(nodes, requests, options));
  EXPECT_EQ(tried.placed, 2);
  EXPECT_EQ(tried.migration_plans, 1);
  EXPECT_EQ(tried.migrations, 0);
  EXPECT_EQ(tried.rescued, 0);
  EXPECT_EQ(tried.node_of_request, alone.node_of_request);
  EXPECT_EQ(tried.gpus_of_request, alone.gpus_of_request);
}

// Budget 0 is the run without migrations, whatever the other migration
// options say (the specialised engine, too).
TEST(SimulateMigrationsTest, BudgetZeroChangesNothing) {
  const std::vector<Node> nodes = GeneratedNodes(20, 3);
  const std::vector<Request> requests = GeneratedRequests(200, 4);
  for (const bool through_cluster : {false, true}) {
    SimulationOptions plain;
    plain.through_cluster = through_cluster;
    SimulationOptions knobs = plain;
    knobs.max_moves_per_request = 3;
    knobs.migration_nodes = 1;
    knobs.migration_search_budget = 1;
    ASSERT_OK_AND_ASSIGN(SimulationResult a, Simulate(nodes, requests, plain));
    ASSERT_OK_AND_ASSIGN(SimulationResult b, Simulate(nodes, requests, knobs));
    EXPECT_GT(a.failed.total(), 0);
    EXPECT_EQ(a.node_of_request, b.node_of_request);
    EXPECT_EQ(a.gpus_of_request, b.gpus_of_request);
    EXPECT_EQ(a.unallocated_pct, b.unallocated_pct);
    EXPECT_EQ(a.frag_amount_after, b.frag_amount_after);
    EXPECT_EQ(b.migrations, 0);
    EXPECT_EQ(b.migration_plans, 0);
  }
}

// While every request fits, a budget changes nothing either: the same
// placements as the run through a Cluster without one.
TEST(SimulateMigrationsTest, NoFailureNoMove) {
  const std::vector<Node> nodes = GeneratedNodes(20, 5);
  const std::vector<Request> requests = GeneratedRequests(40, 6);
  SimulationOptions plain = InOrder("fgd");
  plain.through_cluster = true;
  SimulationOptions budget = InOrder("fgd");
  budget.migration_budget = 10;
  ASSERT_OK_AND_ASSIGN(SimulationResult a, Simulate(nodes, requests, plain));
  ASSERT_OK_AND_ASSIGN(SimulationResult b, Simulate(nodes, requests, budget));
  ASSERT_EQ(a.failed.total(), 0);
  EXPECT_EQ(a.node_of_request, b.node_of_request);
  EXPECT_EQ(a.gpus_of_request, b.gpus_of_request);
  EXPECT_EQ(a.frag_amount_after, b.frag_amount_after);
  EXPECT_EQ(b.migration_plans, 0);
}

// An overloaded generated cluster: moves stay within the budget earned, they
// rescue requests, the accounting holds after them, and runs repeat exactly.
TEST(SimulateMigrationsTest, MovesStayWithinBudgetAndKeepAccountingExact) {
  const std::vector<Node> nodes = GeneratedNodes(12, 7);
  const std::vector<Request> requests = GeneratedRequests(90, 8);
  int64_t moves = 0, rescued = 0;
  for (const char* policy : {"fgd", "bestfit", "spread"}) {
    for (const int budget : {2, 10, 50}) {
      SCOPED_TRACE(::testing::Message() << policy << " budget " << budget);
      SimulationOptions options = InOrder(policy);
      options.migration_budget = budget;
      ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, requests, options));
      ExpectConsistent(nodes, requests, r);
      EXPECT_LE(r.migrations, static_cast<int64_t>(requests.size()) * budget / 100);
      EXPECT_LE(r.rescued, r.migration_plans);
      EXPECT_LE(r.migration_plans, r.failed.total() + r.rescued);
      EXPECT_GT(r.failed.total(), 0);
      moves += r.migrations;
      rescued += r.rescued;
      ASSERT_OK_AND_ASSIGN(SimulationResult again, Simulate(nodes, requests, options));
      EXPECT_EQ(again.node_of_request, r.node_of_request);
      EXPECT_EQ(again.gpus_of_request, r.gpus_of_request);
      EXPECT_EQ(again.migrations, r.migrations);
    }
  }
  // The checks above saw runs with moves.
  EXPECT_GT(moves, 0);
  EXPECT_GT(rescued, 0);
}

TEST(SimulateMigrationsTest, RejectsBadOptionsByName) {
  const std::vector<Node> nodes = {OneGpuNode("a")};
  const std::vector<Request> requests = {Shared("s", 500)};
  auto bad = [&](auto set, const std::string& message) {
    SimulationOptions o;
    set(o);
    EXPECT_THAT(Simulate(nodes, requests, o),
                StatusIs(absl::StatusCode::kInvalidArgument, message));
  };
  bad([](SimulationOptions& o) { o.migration_budget = -1; }, "migration budget -1");
  bad([](SimulationOptions& o) { o.migration_budget = 10001; }, "migration budget 10001");
  bad([](SimulationOptions& o) { o.max_moves_per_request = 0; }, "max moves per request 0");
  bad([](SimulationOptions& o) { o.max_moves_per_request = 4; }, "max moves per request 4");
  bad([](SimulationOptions& o) { o.migration_nodes = 0; }, "migration nodes 0");
  bad([](SimulationOptions& o) { o.migration_search_budget = 0; }, "migration search budget 0");
  SimulationOptions replay;
  replay.migration_budget = 1;
  EXPECT_THAT(Replay(nodes, {TimedRequest{requests[0], 0, -1}}, replay),
              StatusIs(absl::StatusCode::kInvalidArgument, "replay does not migrate"));
}

}  // namespace
}  // namespace gpushare
