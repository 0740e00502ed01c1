#include "gpushare/simulate.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::GeneratedNodes;
using ::gpushare::testing::GeneratedRequests;
using ::gpushare::testing::RunCommand;
using ::gpushare::testing::StatusIs;

int64_t GpuRequest(const Request& r) {
  return r.whole_gpus > 0 ? 1000 * r.whole_gpus : r.compute * r.gpu_count;
}

TEST(SimulateTest, RunsTheExperiment) {
  const std::vector<Node> nodes = GeneratedNodes(30, 1);
  const std::vector<Request> requests = GeneratedRequests(300, 2);
  SimulationOptions options;
  options.policy = "fgd";
  options.inflate = 1.3;
  ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, requests, options));
  int64_t capacity = 0;
  for (const Node& n : nodes) capacity += 1000 * static_cast<int64_t>(n.gpus.size());
  EXPECT_EQ(r.gpu_capacity, capacity);
  EXPECT_EQ(r.policy, "fgd");
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.placed + r.failed.total(), r.requests);
  EXPECT_GE(r.requests, static_cast<int64_t>(requests.size()));
  ASSERT_EQ(r.node_of_request.size(), static_cast<size_t>(r.requests));
  // Inflation: the bins reach 130% of capacity, and the curve is consistent.
  ASSERT_EQ(r.arrived_pct.size(), 131u);
  for (size_t i = 0; i < r.arrived_pct.size(); ++i) {
    EXPECT_EQ(r.arrived_pct[i], static_cast<int>(i));
    EXPECT_LE(r.unallocated_pct[i], 100.0);
    EXPECT_GE(r.unallocated_pct[i], 0.0);
    EXPECT_GE(r.frag_rate[i], 0.0);
    EXPECT_LE(r.frag_rate[i], 1.0 + 1e-9);
    // Tasks never leave: unallocated never grows, and with everything placed
    // it is at least 100 - arrived.
    if (i > 0) {
      EXPECT_LE(r.unallocated_pct[i], r.unallocated_pct[i - 1]);
    }
    EXPECT_GE(r.unallocated_pct[i], 100.0 - static_cast<double>(i) - 1e-9);
  }
  EXPECT_DOUBLE_EQ(r.unallocated_pct[0], 100.0);
  EXPECT_DOUBLE_EQ(r.UnallocatedAt(50), r.unallocated_pct[50]);
  EXPECT_DOUBLE_EQ(r.UnallocatedAt(50.5), (r.unallocated_pct[50] + r.unallocated_pct[51]) / 2);
  EXPECT_DOUBLE_EQ(r.UnallocatedAt(500), r.unallocated_pct.back());
  EXPECT_DOUBLE_EQ(r.FragRateAt(20), r.frag_rate[20]);
  EXPECT_GT(r.failed.total(), 0);
  // Placed requests record their node; dropped ones none and no GPUs.
  int64_t placed = 0;
  for (size_t k = 0; k < r.node_of_request.size(); ++k) {
    if (r.node_of_request[k] >= 0) {
      ++placed;
    } else {
      EXPECT_EQ(r.gpus_of_request[k], 0u);
    }
  }
  EXPECT_EQ(placed, r.placed);
  // The per-request records: one per attempt, and bin i is the record of the
  // last request with arrived <= i% of capacity.
  ASSERT_EQ(r.arrived_after.size(), static_cast<size_t>(r.requests));
  ASSERT_EQ(r.allocated_after.size(), r.arrived_after.size());
  ASSERT_EQ(r.frag_amount_after.size(), r.arrived_after.size());
  ASSERT_EQ(r.frag_rate_after.size(), r.arrived_after.size());
  for (int64_t k = 0; k < r.requests; ++k) {
    // A placed request adds its GPU request to both; a dropped one to arrived.
    const int64_t arrived = r.arrived_after[k] - (k > 0 ? r.arrived_after[k - 1] : 0);
    const int64_t allocated = r.allocated_after[k] - (k > 0 ? r.allocated_after[k - 1] : 0);
    EXPECT_GE(arrived, 0) << k;
    EXPECT_EQ(allocated, r.node_of_request[k] >= 0 ? arrived : 0) << k;
    EXPECT_LE(r.allocated_after[k], r.arrived_after[k]);
  }
  for (int bin : {40, 90, 100, 125}) {
    int64_t last = -1;
    for (int64_t k = 0; k < r.requests; ++k) {
      if (100 * r.arrived_after[k] <= bin * capacity) last = k;
    }
    ASSERT_GE(last, 0) << bin;
    EXPECT_DOUBLE_EQ(r.unallocated_pct[bin],
                     100.0 - 100.0 * static_cast<double>(r.allocated_after[last]) /
                                 static_cast<double>(capacity))
        << bin;
    EXPECT_DOUBLE_EQ(r.frag_amount[bin], r.frag_amount_after[last]) << bin;
    EXPECT_DOUBLE_EQ(r.frag_rate[bin], r.frag_rate_after[last]) << bin;
  }
}

TEST(SimulateTest, IsDeterministicPerSeed) {
  const std::vector<Node> nodes = GeneratedNodes(20, 5);
  const std::vector<Request> requests = GeneratedRequests(200, 6);
  for (const char* policy : {"fgd", "random", "bestfit"}) {
    SimulationOptions options;
    options.policy = policy;
    ASSERT_OK_AND_ASSIGN(SimulationResult a, Simulate(nodes, requests, options));
    ASSERT_OK_AND_ASSIGN(SimulationResult b, Simulate(nodes, requests, options));
    EXPECT_EQ(a.node_of_request, b.node_of_request) << policy;
    options.seed = 43;
    ASSERT_OK_AND_ASSIGN(SimulationResult c, Simulate(nodes, requests, options));
    EXPECT_NE(a.node_of_request, c.node_of_request) << policy;
  }
}

TEST(SimulateTest, WithoutShuffleKeepsTheOrderAndInflatesToTheGoal) {
  const std::vector<Node> nodes = GeneratedNodes(10, 5);
  const std::vector<Request> requests = GeneratedRequests(50, 6);
  SimulationOptions options;
  options.policy = "bestfit";
  options.shuffle = false;
  options.inflate = 2.0;
  ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, requests, options));
  ASSERT_GT(r.requests, 50);
  EXPECT_EQ(r.arrived_pct.back(), static_cast<int>(r.arrived_pct.size()) - 1);
  EXPECT_GE(r.arrived_pct.back(), 200);
  // The first request, in input order, goes where Cluster::Place puts it.
  ClusterOptions co;
  co.tie_break_seed = options.seed;
  Cluster cluster(co);
  for (const Node& n : nodes) ASSERT_OK(cluster.AddNode(n));
  ASSERT_OK_AND_ASSIGN(Placement p, cluster.Place(requests[0], "bestfit"));
  ASSERT_GE(r.node_of_request[0], 0);
  EXPECT_EQ(nodes[r.node_of_request[0]].name, p.node);
}

TEST(SimulateTest, OtherPoliciesRunThroughTheCluster) {
  const std::vector<Node> nodes = GeneratedNodes(10, 5);
  const std::vector<Request> requests = GeneratedRequests(80, 6);
  SimulationOptions options;
  options.policy = "binpack";
  ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, requests, options));
  EXPECT_GT(r.placed, 0);
  EXPECT_EQ(r.policy, "binpack");
}

TEST(SimulateTest, RejectsWhatItCannotSimulate) {
  const std::vector<Node> nodes = GeneratedNodes(3, 5);
  const std::vector<Request> requests = GeneratedRequests(10, 6);
  SimulationOptions options;
  options.policy = "nope";
  EXPECT_THAT(Simulate(nodes, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown policy 'nope'"));
  options.policy = "fgd";
  options.inflate = -1;
  EXPECT_THAT(Simulate(nodes, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "inflate -1"));
  options.inflate = 1.3;
  EXPECT_THAT(Simulate({}, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "at least one node"));
  EXPECT_THAT(Simulate(nodes, {}, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "at least one request"));
  std::vector<Request> memory = requests;
  memory[3].compute = 0;
  memory[3].whole_gpus = 0;
  memory[3].gpu_memory = 4;
  EXPECT_THAT(Simulate(nodes, memory, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "gpu memory 4"));
  std::vector<Node> mixed = nodes;
  mixed[1].gpus[0].model = "Z";
  EXPECT_THAT(Simulate(mixed, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "mixes GPU models"));
  std::vector<Node> twice = {nodes[0], nodes[0]};
  EXPECT_THAT(Simulate(twice, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "appears twice"));
  auto memory_target = std::make_shared<TargetWorkload>();
  memory_target->resource = FragResource::kMemory;
  options.target = memory_target;
  EXPECT_THAT(Simulate(nodes, requests, options),
              StatusIs(absl::StatusCode::kInvalidArgument, "on memory"));
}

TEST(SimulateSeedsTest, MatchesSingleRunsInSeedOrder) {
  const std::vector<Node> nodes = GeneratedNodes(15, 7);
  const std::vector<Request> requests = GeneratedRequests(150, 8);
  SimulationOptions options;
  options.policy = "fgd";
  const std::vector<uint64_t> seeds = {44, 42, 43};
  ASSERT_OK_AND_ASSIGN(std::vector<SimulationResult> runs,
                       SimulateSeeds(nodes, requests, options, seeds, 2));
  ASSERT_EQ(runs.size(), 3u);
  for (size_t i = 0; i < seeds.size(); ++i) {
    options.seed = seeds[i];
    ASSERT_OK_AND_ASSIGN(SimulationResult one, Simulate(nodes, requests, options));
    EXPECT_EQ(runs[i].seed, seeds[i]);
    EXPECT_EQ(runs[i].node_of_request, one.node_of_request);
    EXPECT_EQ(runs[i].unallocated_pct, one.unallocated_pct);
  }
  EXPECT_THAT(SimulateSeeds(nodes, requests, options, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, "no seeds"));
}

TEST(ReplayTest, TasksLeaveAndFreeTheirGpus) {
  const std::vector<Node> nodes = GeneratedNodes(8, 9);
  const std::vector<Request> requests = GeneratedRequests(120, 10);
  std::vector<TimedRequest> timed;
  for (size_t i = 0; i < requests.size(); ++i) {
    // Arrivals every 10 s, each staying 300 s: about 30 present at a time.
    timed.push_back(TimedRequest{requests[i], static_cast<int64_t>(10 * i),
                                 static_cast<int64_t>(10 * i + 300)});
  }
  for (const char* policy : {"fgd", "bestfit", "spread"}) {
    SimulationOptions options;
    options.policy = policy;
    ASSERT_OK_AND_ASSIGN(ReplayResult r, Replay(nodes, timed, options));
    EXPECT_EQ(r.requests, 120);
    EXPECT_EQ(r.placed + r.failed.total(), 120);
    ASSERT_EQ(r.time.size(), 120u);
    for (size_t i = 1; i < r.time.size(); ++i) EXPECT_LE(r.time[i - 1], r.time[i]);
    for (size_t i = 0; i < r.time.size(); ++i) {
      EXPECT_LE(r.allocated_pct[i], r.requested_pct[i] + 1e-9);
      EXPECT_LE(r.allocated_pct[i], 100.0 + 1e-9);
    }
    // Departures bound what is present: far below the sum of all requests.
    int64_t total = 0;
    for (const Request& q : requests) total += GpuRequest(q);
    EXPECT_LT(r.requested_pct.back(), 100.0 * static_cast<double>(total) /
                                          static_cast<double>(r.gpu_capacity) / 2);
    EXPECT_GT(r.peak_allocated_pct, 0);
  }
  timed[5].end = timed[5].start - 1;
  EXPECT_THAT(Replay(nodes, timed, SimulationOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument, "before it starts"));
}

TEST(ReplayTest, FastEngineMatchesTheCluster) {
  const std::vector<Node> nodes = GeneratedNodes(8, 11);
  const std::vector<Request> requests = GeneratedRequests(150, 12);
  std::vector<TimedRequest> timed;
  for (size_t i = 0; i < requests.size(); ++i) {
    timed.push_back(TimedRequest{requests[i], static_cast<int64_t>(7 * i),
                                 i % 4 == 0 ? -1 : static_cast<int64_t>(7 * i + 200)});
  }
  SimulationOptions options;
  options.policy = "fgd";
  ASSERT_OK_AND_ASSIGN(ReplayResult fast, Replay(nodes, timed, options));
  options.through_cluster = true;
  ASSERT_OK_AND_ASSIGN(ReplayResult slow, Replay(nodes, timed, options));
  EXPECT_EQ(fast.placed, slow.placed);
  EXPECT_EQ(fast.allocated_pct, slow.allocated_pct);
}

TEST(ReplayTest, ZeroLengthTasksLeaveRightAfterTheirAttempt) {
  Node node;
  node.name = "n";
  node.cpu = 32000;
  node.host_memory = 65536;
  node.gpu_sharing = true;
  node.gpus.assign(2, Gpu{16, "T4", "", true});
  Request both;
  both.whole_gpus = 2;
  both.cpu = 1000;
  both.id = "zero";
  Request later = both;
  later.id = "later";
  // "zero" starts and ends at 5: placed, then gone before "later" arrives.
  const std::vector<TimedRequest> timed = {{both, 5, 5}, {later, 6, -1}};
  ASSERT_OK_AND_ASSIGN(ReplayResult r, Replay({node}, timed, SimulationOptions{}));
  EXPECT_EQ(r.placed, 2);
  EXPECT_EQ(r.failed.total(), 0);
  ASSERT_EQ(r.allocated_pct.size(), 2u);
  EXPECT_DOUBLE_EQ(r.allocated_pct[0], 0.0);
  EXPECT_DOUBLE_EQ(r.requested_pct[0], 0.0);
  EXPECT_DOUBLE_EQ(r.allocated_pct[1], 100.0);
  EXPECT_DOUBLE_EQ(r.peak_allocated_pct, 100.0);
}

TEST(OpenbExperimentTest, FgdLeavesFewerGpusUnallocatedThanBestFit) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(const testing::OpenbDefault openb, testing::LoadOpenbDefault(dir));
  const std::vector<Node>& nodes = openb.nodes;
  const std::vector<Request>& requests = openb.requests;
  SimulationOptions options;
  options.inflate = 1.05;
  options.policy = "fgd";
  ASSERT_OK_AND_ASSIGN(SimulationResult fgd, Simulate(nodes, requests, options));
  options.policy = "bestfit";
  ASSERT_OK_AND_ASSIGN(SimulationResult bestfit, Simulate(nodes, requests, options));
  // Everything fits until about 90% arrived; then FGD keeps more usable.
  EXPECT_NEAR(fgd.UnallocatedAt(80), 20.0, 0.5);
  EXPECT_NEAR(bestfit.UnallocatedAt(80), 20.0, 0.5);
  EXPECT_LT(fgd.UnallocatedAt(100), bestfit.UnallocatedAt(100) - 1.0);
  // An empty cluster is about 14% fragmented (CPU-only typical tasks).
  EXPECT_NEAR(fgd.frag_rate[0], 0.14, 0.02);
}

// The `gpushare` binary of this build tree (tests/CMakeLists.txt builds it
// with the tests).
const char kCli[] = GPUSHARE_CLI_PATH;

TEST(SimulateCommandTest, PrintsTheTableAndWritesTheCurve) {
  const std::string cli = kCli;
  ASSERT_TRUE(std::ifstream(cli).good()) << cli << " is missing";
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream nodes(dir + "/cli_nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\n";
    for (int i = 0; i < 6; ++i) nodes << "n" << i << ",32000,65536," << (i % 2 ? 2 : 4) << ",T4\n";
    std::ofstream tasks(dir + "/cli_tasks.csv");
    tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    for (int i = 0; i < 40; ++i) {
      tasks << "t" << i << ",2000,1024," << (i % 4 == 0 ? "1,1000" : "1,450") << "\n";
    }
    std::ofstream bad(dir + "/cli_bad.csv");
    bad << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt0,2000,1024,1,4500\n";
  }
  const std::string base = cli + " simulate --nodes " + dir + "/cli_nodes.csv --seeds 1-3";
  auto [code, out] = RunCommand(base + " --tasks " + dir + "/cli_tasks.csv --policies fgd,bestfit" +
                                " --curve " + dir + "/cli_curve.csv");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("6 nodes, 40 tasks, inflate 1.30, 3 seeds"));
  EXPECT_THAT(out, ::testing::ContainsRegex("\nfgd +[0-9.]+ ± [0-9.]+"));
  EXPECT_THAT(out, ::testing::ContainsRegex("\nbestfit +[0-9.]+ ± "));
  std::ifstream curve(dir + "/cli_curve.csv");
  std::string header, line;
  std::getline(curve, header);
  EXPECT_EQ(header, "policy,seed,arrived_pct,unallocated_pct,frag_amount,frag_rate");
  int rows = 0;
  while (std::getline(curve, line)) ++rows;
  EXPECT_EQ(rows, 2 * 3 * 131);  // Policies x seeds x bins 0..130.
  auto [bad_code, bad_out] =
      RunCommand(base + " --tasks " + dir + "/cli_bad.csv 2>&1");
  EXPECT_EQ(bad_code, 1);
  EXPECT_THAT(bad_out, ::testing::HasSubstr("cli_bad.csv:2: column 'gpu_milli' 4500"));
  EXPECT_EQ(RunCommand(base + " --seeds x 2>&1").first, 2);
  // Replay: the tasks have no times, so all arrive at 0 and never leave.
  auto [replay_code, replay_out] =
      RunCommand(base + " --tasks " + dir + "/cli_tasks.csv --policies fgd --replay");
  EXPECT_EQ(replay_code, 0) << replay_out;
  EXPECT_THAT(replay_out, ::testing::ContainsRegex("fgd +[0-9]+ +[0-9]+ +[0-9.]+"));
}

TEST(SimulateCommandTest, PolicyNamesOnePolicyAndTheIdleGpusAreBrokenDown) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream nodes(dir + "/cli_cause_nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\nn0,4000,65536,4,T4\n";
    std::ofstream tasks(dir + "/cli_cause_tasks.csv");
    tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt0,4000,1024,1,500\n";
  }
  auto [code, out] = RunCommand(std::string(kCli) + " simulate --nodes " + dir +
                                "/cli_cause_nodes.csv --tasks " + dir +
                                "/cli_cause_tasks.csv --seeds 1 --policy fgdcpu");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::ContainsRegex("\nfgdcpu +[0-9.]+ ± "));
  // The one task takes every core: the 3.5 GPUs left are lost to CPU.
  EXPECT_THAT(out, ::testing::HasSubstr("idle GPUs at the end of the run by cause"));
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "\nfgdcpu +0\\.00 +87\\.50 +0\\.00 +0\\.00 +0\\.00 +87\\.50\n"))
      << out;
}

// Writes a small node and task CSV for the command-line tests; returns the
// start of a command line with --nodes and --tasks.
std::string SmallTraceCommand(const std::string& prefix) {
  const std::string dir = ::testing::TempDir();
  std::ofstream nodes(dir + "/" + prefix + "_nodes.csv");
  nodes << "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\n";
  std::ofstream tasks(dir + "/" + prefix + "_tasks.csv");
  tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nt0,1000,1024,1,500\n";
  // `timeout` turns a hang into a failure.
  return "timeout 10 " + std::string(kCli) + " simulate --nodes " + dir + "/" + prefix +
         "_nodes.csv --tasks " + dir + "/" + prefix + "_tasks.csv";
}

TEST(SimulateCommandTest, SeedRangesAreBoundedAndSeedsUnique) {
  const std::string base = SmallTraceCommand("seeds") + " --policies bestfit";
  // The loop over 18446744073709551615-18446744073709551615 used to wrap and
  // run forever, growing memory.
  auto [code, out] = RunCommand(base + " --seeds 18446744073709551615-18446744073709551615 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("1 seeds"));
  std::tie(code, out) = RunCommand(base + " --seeds 0-18446744073709551615 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("has more than 10000 seeds"));
  std::tie(code, out) = RunCommand(base + " --seeds 1-10000,20000 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("gives more than 10000 seeds"));
  std::tie(code, out) = RunCommand(base + " --seeds 1,1 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("lists seed 1 twice"));
  std::tie(code, out) = RunCommand(base + " --seeds 1-3,2 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("lists seed 2 twice"));
  std::tie(code, out) = RunCommand(base + " --seeds 18446744073709551616 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("is not A-B or A,B"));
  std::tie(code, out) = RunCommand(base + " --seeds , 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("gives no seeds"));
  std::tie(code, out) = RunCommand(base + " --seeds 5,7-8 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("3 seeds"));
  // A long bad argument is shortened in the message.
  std::tie(code, out) = RunCommand(base + " --seeds " + std::string(5000, 'x') + " 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, ::testing::HasSubstr("... (5000 bytes)"));
  EXPECT_LT(out.size(), 400u);
}

TEST(SimulateCommandTest, PoliciesMustNameKnownPolicies) {
  const std::string base = SmallTraceCommand("policies") + " --seeds 1";
  for (const std::string list : {"''", "','"}) {
    auto [code, out] = RunCommand(base + " --policies " + list + " 2>&1");
    EXPECT_EQ(code, 2) << list << ": " << out;
    EXPECT_THAT(out, ::testing::HasSubstr("names no policy; known policies: "));
    EXPECT_THAT(out, ::testing::HasSubstr("fgd"));
  }
  auto [code, out] = RunCommand(base + " --policies fgd,best 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("unknown policy 'best'; known policies: "));
  std::tie(code, out) = RunCommand(base + " --policies bestfit, 2>&1");
  EXPECT_EQ(code, 0) << out;
}

TEST(SimulateCommandTest, MigrationBudgetsAddRowsAndColumns) {
  const std::string base = SmallTraceCommand("migrations") + " --seeds 1 --policies fgd";
  auto [code, out] = RunCommand(base + " --migrations 0,50 --max-moves 1 --markdown 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("| s/run | moves | rescued |"));
  EXPECT_THAT(out, ::testing::ContainsRegex("\\| fgd \\| .* \\| 0\\.0 \\| 0\\.0 \\|"));
  EXPECT_THAT(out, ::testing::HasSubstr("| fgd+m50 |"));
  std::tie(code, out) = RunCommand(base + " 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::Not(::testing::HasSubstr("rescued")));
  std::tie(code, out) = RunCommand(base + " --migrations 1,x 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--migrations 'x' is not a budget in 0..10000"));
  std::tie(code, out) = RunCommand(base + " --migrations 1 --replay 2>&1");
  EXPECT_EQ(code, 2) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("--replay does not migrate"));
  std::tie(code, out) = RunCommand(base + " --migrations 1 --max-moves 9 2>&1");
  EXPECT_EQ(code, 1) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("max moves per request 9 is outside 1..3"));
}

TEST(SimulateCommandTest, ReadsATaskFileWithAByteOrderMarkAndCrLineEnds) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream tasks(dir + "/bom_cr_tasks.csv", std::ios::binary);
    tasks << "\xEF\xBB\xBFname,cpu_milli,memory_mib,num_gpu,gpu_milli\rt0,1000,1024,1,500\r"
             "t1,1000,1024,1,250\r";
  }
  // The second --tasks replaces the small trace's.
  auto [code, out] = RunCommand(SmallTraceCommand("cr") + " --tasks " + dir +
                                "/bom_cr_tasks.csv --seeds 1 --policies bestfit 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("1 nodes, 2 tasks"));
}

TEST(SimulateCommandTest, RunsTheDefaultTrace) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  auto [code, out] = RunCommand(std::string(kCli) + " simulate --nodes " + dir +
                                "/openb_node_list_gpu_node.csv --tasks " + dir +
                                "/openb_pod_list_default.csv --policies fgd --seeds 42-43" +
                                " --markdown 2>&1");
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("1213 nodes, 8152 tasks, inflate 1.30, 2 seeds"));
  // | fgd | @90 | @95 | @100 | ...: FGD leaves about 5% of the GPUs at 100%.
  EXPECT_THAT(out, ::testing::ContainsRegex("\\| fgd \\| 10\\.[0-9]+ ± [0-9.]+ \\| [0-9.]+ ± "
                                            "[0-9.]+ \\| [45]\\.[0-9]+ ± "))
      << out;
}

// `gpushare sweep`: every task file x policy x seed as CSV rows, each the bin
// of the same Simulate() run, in the order given; progress only on request
// or on a terminal; every argument and file checked before anything runs.
TEST(SweepCommandTest, WritesEveryRunAsCsvRows) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream nodes(dir + "/sweep_nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\n";
    for (int i = 0; i < 6; ++i) nodes << "n" << i << ",32000,65536," << (i % 2 ? 2 : 4) << ",T4\n";
    std::ofstream a(dir + "/openb_pod_list_halves.csv");
    std::ofstream b(dir + "/thirds.csv");
    a << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    b << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    for (int i = 0; i < 40; ++i) {
      a << "t" << i << ",2000,1024," << (i % 4 == 0 ? "1,1000" : "1,500") << "\n";
      b << "t" << i << ",2000,1024," << (i % 3 == 0 ? "2,1000" : "1,330") << "\n";
    }
  }
  const std::string csv = dir + "/sweep_out.csv";
  std::remove(csv.c_str());
  const std::string base = std::string(kCli) + " sweep --nodes " + dir + "/sweep_nodes.csv";
  auto [code, out] = RunCommand(base + " --policies fgd,random --seeds 7,3 --out " + csv + " " +
                                dir + "/openb_pod_list_halves.csv --tasks " + dir +
                                "/thirds.csv 2>&1");
  ASSERT_EQ(code, 0) << out;
  EXPECT_EQ(out, "");  // stderr is no terminal here: no progress.
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "trace,policy,seed,arrived,unallocated,frag_amount,frag_rate");
  ASSERT_OK_AND_ASSIGN(std::vector<Node> nodes, LoadOpenbNodes(dir + "/sweep_nodes.csv"));
  int rows = 0;
  for (const std::string trace : {"halves", "thirds"}) {
    const std::string file = trace == "halves" ? "/openb_pod_list_halves.csv" : "/thirds.csv";
    ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks, LoadOpenbTasks(dir + file));
    for (const std::string policy : {"fgd", "random"}) {
      for (uint64_t seed : {7, 3}) {
        SimulationOptions options;
        options.policy = policy;
        options.seed = seed;
        ASSERT_OK_AND_ASSIGN(SimulationResult r, Simulate(nodes, ToRequests(tasks), options));
        for (size_t i = 0; i < r.arrived_pct.size(); ++i, ++rows) {
          ASSERT_TRUE(std::getline(in, line)) << "row " << rows;
          std::vector<std::string> cells = absl::StrSplit(line, ',');
          ASSERT_EQ(cells.size(), 7u) << line;
          EXPECT_EQ(cells[0], trace);
          EXPECT_EQ(cells[1], policy);
          EXPECT_EQ(cells[2], std::to_string(seed));
          EXPECT_EQ(cells[3], std::to_string(r.arrived_pct[i]));
          EXPECT_EQ(std::stod(cells[4]), r.unallocated_pct[i]) << line;
          EXPECT_EQ(std::stod(cells[6]), r.frag_rate[i]) << line;
        }
      }
    }
  }
  EXPECT_FALSE(std::getline(in, line)) << "extra row: " << line;
  EXPECT_GT(rows, 8 * 100);
  // --progress forces the progress line onto stderr (stdout gets the CSV).
  std::tie(code, out) = RunCommand(base + " --progress --seeds 1-2 --policies bestfit " + dir +
                                   "/thirds.csv 2>&1 >/dev/null");
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("sweep: 2/2 runs (100%)"));
  // Bad arguments fail before anything is written.
  std::remove(csv.c_str());
  std::tie(code, out) = RunCommand(base + " --policies fgd,nope --out " + csv + " " + dir +
                                   "/thirds.csv 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, ::testing::HasSubstr("unknown policy 'nope'"));
  std::tie(code, out) = RunCommand(base + " --seeds , --out " + csv + " " + dir + "/thirds.csv 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(out, ::testing::HasSubstr("gives no seeds"));
  std::tie(code, out) = RunCommand(base + " --out " + csv + " " + dir + "/thirds.csv " + dir +
                                   "/missing.csv 2>&1");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, ::testing::HasSubstr("missing.csv"));
  EXPECT_FALSE(std::ifstream(csv).good()) << "a failed sweep wrote " << csv;
}

}  // namespace
}  // namespace gpushare
