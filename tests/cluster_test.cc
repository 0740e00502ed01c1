// The cluster's operations, errors and guarantees.

#include "gpushare/cluster.h"

#include <algorithm>
#include <deque>
#include <random>
#include <set>
#include <string>
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
using ::gpushare::testing::S1Cluster;
using ::gpushare::testing::Shared;
using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Runs `call` and checks that it failed with `code` and left `c` unchanged.
template <typename Call>
void ExpectFailsUnchanged(Cluster& c, absl::StatusCode code, const std::string& message,
                          Call call) {
  const std::string before = c.ToJson();
  absl::Status s = call();
  EXPECT_THAT(s, StatusIs(code, message));
  EXPECT_EQ(c.ToJson(), before) << "a failed call changed the cluster";
  EXPECT_OK(c.CheckInvariants());
}

// ---- Bad input ------------------------------------------------------------

TEST(ClusterTest, RejectsDuplicateNodeNames) {
  Cluster c = S1Cluster();
  ExpectFailsUnchanged(c, absl::StatusCode::kAlreadyExists, "sd-cluster-04",
                       [&] { return c.AddNode(SharedNode("sd-cluster-04", {14})); });
}

TEST(ClusterTest, RejectsBadNodeSizes) {
  Cluster c = S1Cluster();
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "memory 0",
                       [&] { return c.AddNode(SharedNode("n", {14, 0})); });
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "memory -3",
                       [&] { return c.AddNode(SharedNode("n", {-3})); });
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "4611686018427387904", [&] {
    return c.AddNode(SharedNode("n", {int64_t{1} << 62}));
  });
  Node cpu = SharedNode("n", {14});
  cpu.cpu = -1;
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "cpu -1",
                       [&] { return c.AddNode(cpu); });
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "node name is empty",
                       [&] { return c.AddNode(SharedNode("", {14})); });
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "65 GPUs", [&] {
    return c.AddNode(SharedNode("n", std::vector<int64_t>(65, 1)));
  });
}

TEST(ClusterTest, GpuUuidsAreUniqueAcrossTheCluster) {
  Cluster c;
  Node a = SharedNode("a", {16, 16});
  a.gpus[0].uuid = "GPU-SAME";
  a.gpus[1].uuid = "GPU-SAME";
  // Would have given NVIDIA_VISIBLE_DEVICES=GPU-SAME,GPU-SAME.
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument,
                       "node 'a': GPUs 0 and 1 have the same UUID 'GPU-SAME'",
                       [&] { return c.AddNode(a); });
  a.gpus[1].uuid = "GPU-OTHER";
  ASSERT_OK(c.AddNode(a));
  Node b = SharedNode("b", {16, 16, 16});
  b.gpus[2].uuid = "GPU-OTHER";
  ExpectFailsUnchanged(c, absl::StatusCode::kAlreadyExists,
                       "node 'b': GPU UUID 'GPU-OTHER' already belongs to node 'a'",
                       [&] { return c.AddNode(b); });
  b.gpus[2].uuid = "";  // Unknown UUIDs may repeat.
  ASSERT_OK(c.AddNode(b));
  ASSERT_OK(c.AddNode(SharedNode("c", {16, 16})));
  // Removing a node frees its UUIDs.
  ASSERT_OK(c.RemoveNode("a"));
  Node again = SharedNode("again", {16});
  again.gpus[0].uuid = "GPU-SAME";
  EXPECT_OK(c.AddNode(again));
  // A snapshot with a repeated UUID does not load.
  std::string json = c.ToJson();
  const size_t at = json.find("\"uuid\":\"\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 9, "\"uuid\":\"GPU-SAME\"");
  EXPECT_THAT(Cluster::FromJson(json), StatusIs(absl::StatusCode::kInvalidArgument, "GPU-SAME"));
}

TEST(ClusterTest, RejectsBadRequestsNamingTheValue) {
  Cluster c = S1Cluster();
  struct Case {
    Request request;
    std::string message;
  };
  Request compute = Shared("r", 2);
  compute.compute = 1001;
  Request both = Shared("r", 2);
  both.whole_gpus = 1;
  Request negative_cpu = Shared("r", 2);
  negative_cpu.cpu = -5;
  Request count_zero = Shared("r", 2, 0);
  Request huge = Shared("r", int64_t{1} << 62);
  Request empty_id = Shared("", 2);
  const std::vector<Case> cases = {
      {Shared("r", 8, 3), "gpu memory 8 is not divisible by gpu count 3"},
      {Shared("r", 0, 2), "gpu count 2 without gpu memory or compute"},
      {Shared("r", -1), "gpu memory -1"},
      {huge, "gpu memory 4611686018427387904 is out of range"},
      {count_zero, "gpu count 0 is out of range"},
      {Shared("r", 65, 65), "gpu count 65 is out of range [1, 64]"},
      {Exclusive("r", 65), "whole gpus 65 is out of range [0, 64]"},
      {compute, "compute 1001"},
      {both, "exclusive"},
      {negative_cpu, "cpu -5"},
      {empty_id, "request id is empty"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.message);
    EXPECT_THAT(c.Validate(k.request), StatusIs(absl::StatusCode::kInvalidArgument, k.message));
    EXPECT_THAT(c.Fit(k.request), StatusIs(absl::StatusCode::kInvalidArgument, k.message));
    ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, k.message,
                         [&] { return c.Place(k.request, "binpack").status(); });
  }
}

// Whether a request fits depends on the nodes there are: more GPUs than the
// largest node has, or an empty cluster, is "nothing fits now"
// (ResourceExhausted) in every call, not malformed input.
TEST(ClusterTest, MoreGpusThanAnyNodeIsResourceExhaustedEverywhere) {
  for (const Request& r : {Shared("r", 4, 2), Exclusive("r", 2)}) {
    Cluster c = S1Cluster();  // Two nodes of one GPU.
    EXPECT_OK(c.Validate(r).status());
    ASSERT_OK_AND_ASSIGN(std::vector<FitResult> fit, c.Fit(r));
    ASSERT_EQ(fit.size(), 2u);
    for (const FitResult& f : fit) {
      EXPECT_FALSE(f.feasible);
      EXPECT_THAT(f.reason, HasSubstr("needs 2"));
    }
    EXPECT_THAT(c.Plan(r), StatusIs(absl::StatusCode::kResourceExhausted,
                                    "needs 2 GPUs on one node but the largest node has 1"));
    ExpectFailsUnchanged(c, absl::StatusCode::kResourceExhausted, "largest node has 1",
                         [&] { return c.Place(r).status(); });
    ExpectFailsUnchanged(c, absl::StatusCode::kResourceExhausted, "largest node has 1",
                         [&] { return c.PlaceReplicas(r, 2).status(); });
    ASSERT_OK_AND_ASSIGN(std::vector<Placement> some,
                         c.PlaceReplicas(r, 2, "binpack", ReplicaMode::kAsManyAsFit));
    EXPECT_TRUE(some.empty());
    EXPECT_EQ(*c.Capacity(r), 0);
    // Once a node is big enough, the same request fits.
    ASSERT_OK(c.AddNode(SharedNode("two", {16, 16})));
    EXPECT_OK(c.Place(r).status());
  }
  Cluster empty;
  for (const Request& r : {Shared("r", 1), Exclusive("r", 1)}) {
    EXPECT_OK(empty.Validate(r).status());
    ASSERT_OK_AND_ASSIGN(std::vector<FitResult> none, empty.Fit(r));
    EXPECT_TRUE(none.empty());
    EXPECT_THAT(empty.Plan(r), StatusIs(absl::StatusCode::kResourceExhausted, "0 nodes"));
    EXPECT_THAT(empty.Place(r), StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_THAT(empty.PlaceReplicas(r, 1), StatusIs(absl::StatusCode::kResourceExhausted));
    EXPECT_EQ(*empty.Capacity(r), 0);
  }
}

// Error messages repeat a name, id or token only up to 100 bytes: a 10 MB id
// must not make a 10 MB message.
TEST(ClusterTest, ErrorsShortenLongNamesAndIds) {
  Cluster c = S1Cluster();
  const std::string huge(10 << 20, 'x');
  const std::string shortened = std::string(100, 'x') + "... (10485760 bytes)";
  const absl::Status errors[] = {
      c.Release(huge),
      c.GetNode(huge).status(),
      c.SetGpuHealthy(huge, 0, false),
      c.Place(Shared(huge, 1, 3)).status(),
      c.Place(Shared(huge, 100)).status(),
      c.Place(Shared("r", 1), huge).status(),
      c.AddNode(SharedNode("sd-cluster-04", {1})).ok() ? absl::OkStatus()
                                                      : c.AddNode(SharedNode(huge, {0})),
  };
  for (const absl::Status& s : errors) {
    EXPECT_FALSE(s.ok());
    EXPECT_LT(s.message().size(), 1000u) << s.message().substr(0, 300);
    EXPECT_THAT(std::string(s.message()), HasSubstr(shortened));
  }
}

TEST(ClusterTest, UnknownPolicyListsTheKnownOnes) {
  Cluster c = S1Cluster();
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "binpack", [&] {
    return c.Place(Shared("r", 1), "tightest").status();
  });
  EXPECT_THAT(MakePolicy("tightest"),
              StatusIs(absl::StatusCode::kInvalidArgument, "unknown policy 'tightest'"));
  EXPECT_THAT(MakePolicy("nope").status().message(), HasSubstr("spread"));
}

TEST(ClusterTest, DuplicateRequestIdIsAlreadyExists) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("r", 1)).status());
  ExpectFailsUnchanged(c, absl::StatusCode::kAlreadyExists, "'r' is already placed",
                       [&] { return c.Place(Shared("r", 1)).status(); });
}

TEST(ClusterTest, UnknownNodesAndIdsAreNotFound) {
  Cluster c = S1Cluster();
  ExpectFailsUnchanged(c, absl::StatusCode::kNotFound, "unknown request 'ghost'",
                       [&] { return c.Release("ghost"); });
  ExpectFailsUnchanged(c, absl::StatusCode::kNotFound, "unknown node 'ghost'",
                       [&] { return c.SetGpuHealthy("ghost", 0, false); });
  ExpectFailsUnchanged(c, absl::StatusCode::kNotFound, "unknown node 'ghost'",
                       [&] { return c.SetNodeSchedulable("ghost", false); });
  ExpectFailsUnchanged(c, absl::StatusCode::kNotFound, "unknown node 'ghost'",
                       [&] { return c.RemoveNode("ghost"); });
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "has no GPU 3",
                       [&] { return c.SetGpuHealthy("sd-cluster-04", 3, false); });
  EXPECT_THAT(c.GetNode("ghost"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(c.GetPlacement("ghost"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ClusterTest, DoubleReleaseIsFailedPrecondition) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("r", 3)).status());
  ASSERT_OK(c.Release("r"));
  ExpectFailsUnchanged(c, absl::StatusCode::kFailedPrecondition, "already released",
                       [&] { return c.Release("r"); });
  // Placing the id again makes it releasable again.
  ASSERT_OK(c.Place(Shared("r", 3)).status());
  EXPECT_OK(c.Release("r"));
}

TEST(ClusterTest, OldReleasesAreForgottenAfterTheConfiguredCount) {
  ClusterOptions options;
  options.remembered_releases = 2;
  Cluster c(options);
  ASSERT_OK(c.AddNode(SharedNode("n", {14})));
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_OK(c.Place(Shared(id, 1)).status());
    ASSERT_OK(c.Release(id));
  }
  EXPECT_THAT(c.Release("a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(c.Release("c"), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(ClusterTest, ReleaseMemoryAgreesWithALastNListUnderInterleavedCalls) {
  // The memory of releases is a queue with a lookup brought up to date by
  // failing calls; compare it with a plain list of the last N released ids
  // while releases, re-placements and failing releases interleave.
  constexpr int kRemembered = 5;
  ClusterOptions options;
  options.remembered_releases = kRemembered;
  Cluster c(options);
  ASSERT_OK(c.AddNode(SharedNode("n", {1000})));
  std::mt19937 rng(7);
  std::deque<std::string> last;  // The model: ids of the last releases.
  std::set<std::string> placed;
  for (int step = 0; step < 5000; ++step) {
    const std::string id = absl::StrCat("r", rng() % 12);
    switch (rng() % 3) {
      case 0:
        if (!placed.count(id)) {
          ASSERT_OK(c.Place(Shared(id, 1)).status());
          placed.insert(id);
        }
        break;
      case 1:
        if (placed.count(id)) {
          ASSERT_OK(c.Release(id));
          placed.erase(id);
          last.push_back(id);
          if (last.size() > kRemembered) last.pop_front();
        }
        break;
      default:
        if (!placed.count(id)) {
          const bool remembered = std::find(last.begin(), last.end(), id) != last.end();
          ASSERT_THAT(c.Release(id), StatusIs(remembered ? absl::StatusCode::kFailedPrecondition
                                                         : absl::StatusCode::kNotFound))
              << "step " << step << " id " << id;
        }
    }
  }
}

// ---- Placement rules ---------------------------------------------------------

TEST(ClusterTest, SharedRequestNeverSpansGpus) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {8, 8})));
  ASSERT_OK(c.Place(Shared("a", 2)).status());  // binpack: GPU 0 has 6 free.
  ASSERT_OK(c.Place(Shared("b", 6)).status());  // GPU 0 full; GPU 1 empty.
  ASSERT_OK(c.Place(Shared("c", 2)).status());  // GPU 1 now has 6 free.
  // 6 units are free, but on no single GPU is 7 free.
  EXPECT_THAT(c.Place(Shared("d", 7)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "insufficient GPU memory on any single GPU: largest free 6, need 7"));
}

TEST(ClusterTest, FitGivesEveryNodeAndAReason) {
  Cluster c;
  Node full = SharedNode("full", {4});
  Node t4 = SharedNode("t4", {16}, "T4");
  Node v100 = SharedNode("v100", {16, 16, 16}, "V100M16");
  Node plain = SharedNode("plain", {16});
  plain.labels.clear();
  Node cordoned = SharedNode("cordoned", {16});
  cordoned.schedulable = false;
  Node small_cpu = SharedNode("small-cpu", {16, 16, 16, 16}, "V100M32");
  small_cpu.cpu = 2000;
  Node tf = SharedNode("tf", {16, 16, 16, 16}, "V100M32");
  tf.labels["inference"] = "tensorflow";
  tf.cpu = 64000;
  for (const Node& n : {full, t4, v100, plain, cordoned, small_cpu, tf}) ASSERT_OK(c.AddNode(n));
  Request r = Shared("job", 8, 4);
  r.gpu_models = {"V100M16", "V100M32"};
  r.cpu = 4000;
  r.node_selector = {};
  ASSERT_OK_AND_ASSIGN(std::vector<FitResult> fit, c.Fit(r));
  ASSERT_EQ(fit.size(), 7u);
  std::map<std::string, std::string> reason;
  for (const FitResult& f : fit) reason[f.node] = f.feasible ? "ok" : f.reason;
  EXPECT_EQ(reason["full"], "GPU model T4 not in [V100M16, V100M32]");
  EXPECT_EQ(reason["t4"], "GPU model T4 not in [V100M16, V100M32]");
  EXPECT_EQ(reason["v100"], "needs 4 GPUs with 2 free units each, has 3");
  EXPECT_EQ(reason["plain"], "node does not take shared GPU work");
  EXPECT_EQ(reason["cordoned"], "node is unschedulable");
  EXPECT_EQ(reason["small-cpu"], "insufficient cpu: free 2000, need 4000");
  EXPECT_EQ(reason["tf"], "ok");
  r.node_selector = {{"inference", "tensorflow"}};
  ASSERT_OK_AND_ASSIGN(fit, c.Fit(r));
  EXPECT_EQ(fit[2].reason, "node selector inference=tensorflow not matched");
  EXPECT_TRUE(fit[6].feasible);
  Request one = Shared("one", 5);
  ASSERT_OK_AND_ASSIGN(fit, c.Fit(one));
  EXPECT_EQ(fit[0].reason, "insufficient GPU memory on any single GPU: largest free 4, need 5");
}

TEST(ClusterTest, ComputeSharesAreCheckedPerGpu) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16})));
  Request a = Shared("a", 2);
  a.compute = 700;
  ASSERT_OK(c.Place(a).status());
  Request b = Shared("b", 2);
  b.compute = 400;
  EXPECT_THAT(c.Place(b).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "insufficient GPU compute on any single GPU: largest free 300, need 400"));
  b.compute = 300;
  EXPECT_OK(c.Place(b).status());
  EXPECT_EQ(c.FindNode("n")->gpus[0].compute_used, 1000);
}

TEST(ClusterTest, ExclusiveGpusMustBeIdleAndThenTakeNothingElse) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 16})));
  ASSERT_OK(c.Place(Shared("shared", 1)).status());
  ASSERT_OK_AND_ASSIGN(Placement ex, c.Place(Exclusive("ex", 1)));
  EXPECT_TRUE(ex.exclusive);
  EXPECT_THAT(ex.gpus, ElementsAre(1));  // GPU 0 holds the shared pod.
  EXPECT_THAT(c.Place(Exclusive("ex2", 1)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "needs 1 idle GPU, has 0"));
  // 15 units are free on GPU 0, none on the exclusive GPU 1.
  EXPECT_THAT(c.Place(Shared("big", 16)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "largest free 15"));
  ASSERT_OK(c.Place(Shared("fits", 15)).status());
  EXPECT_EQ(c.FindNode("n")->gpus[1].memory_used, 16);
  ASSERT_OK(c.Release("ex"));
  EXPECT_TRUE(c.FindNode("n")->gpus[1].idle());
}

TEST(ClusterTest, MixedGpuSizesOnOneNodeAreRespected) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {8, 32})));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Shared("big", 20)));
  EXPECT_THAT(p.gpus, ElementsAre(1));
  ASSERT_OK_AND_ASSIGN(Placement q, c.Place(Shared("small", 8)));
  EXPECT_THAT(q.gpus, ElementsAre(0));  // Tightest fit: 8 of 8.
}

TEST(ClusterTest, UnhealthyGpusAndCordonedNodesTakeNoNewWorkButKeepTheirs) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("a", 4)).status());  // sd-cluster-05.
  ASSERT_OK(c.SetGpuHealthy("sd-cluster-05", 0, false));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Shared("b", 4)));
  EXPECT_EQ(p.node, "sd-cluster-04");
  ASSERT_OK(c.SetNodeSchedulable("sd-cluster-04", false));
  EXPECT_THAT(c.Place(Shared("c", 1)).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(c.FindNode("sd-cluster-05")->gpus[0].memory_used, 4);
  EXPECT_OK(c.Release("a"));
  EXPECT_OK(c.CheckInvariants());
  EXPECT_THAT(InspectTable(c), HasSubstr("0/14(unhealthy)"));
}

TEST(ClusterTest, SpreadUsesTheLeastUsedNodeAndGpu) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("a", {16, 16})));
  ASSERT_OK(c.AddNode(SharedNode("b", {16, 16})));
  std::vector<std::string> nodes;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Shared("r" + std::to_string(i), 4), "spread"));
    nodes.push_back(p.node + "/" + std::to_string(p.gpus[0]));
  }
  // Newest node first on ties, then the other node, then the other GPUs.
  EXPECT_THAT(nodes, ElementsAre("b/0", "a/0", "b/1", "a/1"));
}

TEST(ClusterTest, BinpackExclusivePrefersTheNodeWithFewestIdleGpus) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("four", {16, 16, 16, 16})));
  ASSERT_OK(c.AddNode(SharedNode("two", {16, 16})));
  ASSERT_OK(c.AddNode(SharedNode("eight", std::vector<int64_t>(8, 16))));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Exclusive("x", 2), "binpack"));
  EXPECT_EQ(p.node, "two");
  ASSERT_OK_AND_ASSIGN(Placement q, c.Place(Exclusive("y", 2), "spread"));
  EXPECT_EQ(q.node, "eight");
  EXPECT_THAT(q.gpus, ElementsAre(0, 1));
}

TEST(ClusterTest, CpuOnlyRequestsUseHostResources) {
  Cluster c;
  Node n = SharedNode("n", {});
  n.cpu = 4000;
  n.host_memory = 1024;
  ASSERT_OK(c.AddNode(n));
  Request r;
  r.id = "cpu-1";
  r.cpu = 3000;
  r.host_memory = 512;
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(r));
  EXPECT_TRUE(p.gpus.empty());
  r.id = "cpu-2";
  EXPECT_THAT(c.Place(r).status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                            "insufficient cpu: free 1000, need 3000"));
  EXPECT_EQ(*c.Capacity(r), 0);
  r.cpu = 500;
  EXPECT_EQ(*c.Capacity(r), 1);  // Host memory: 512 free, 512 each.
}

TEST(ClusterTest, TieBreakSeedGivesAFixedOrderIndependentOfInsertion) {
  auto first_node = [](uint64_t seed, bool reversed) {
    ClusterOptions options;
    options.tie_break_seed = seed;
    Cluster c(options);
    std::vector<std::string> names;
    for (int i = 0; i < 20; ++i) names.push_back("n" + std::to_string(i));
    if (reversed) std::reverse(names.begin(), names.end());
    for (const std::string& n : names) (void)c.AddNode(SharedNode(n, {8}));
    return c.Place(Shared("r", 1)).value().node;
  };
  EXPECT_EQ(first_node(7, false), first_node(7, true));
  EXPECT_EQ(first_node(0, false), "n19");
  EXPECT_EQ(first_node(0, true), "n0");
  std::set<std::string> firsts;
  for (uint64_t seed = 1; seed <= 20; ++seed) firsts.insert(first_node(seed, false));
  EXPECT_GT(firsts.size(), 3u);
}

// ---- Plan and commit ---------------------------------------------------------------

TEST(ClusterTest, PlanChangesNothingAndCommitApplies) {
  Cluster c = S1Cluster();
  const std::string before = c.ToJson();
  ASSERT_OK_AND_ASSIGN(Placement p, c.Plan(Shared("r", 6), "binpack"));
  EXPECT_EQ(c.ToJson(), before);
  ASSERT_OK(c.Commit(p));
  EXPECT_EQ(*c.GetPlacement("r"), p);
  EXPECT_THAT(c.Commit(p), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST(ClusterTest, StalePlanFailsWithFailedPrecondition) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {14})));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Plan(Shared("late", 10)));
  ASSERT_OK(c.Place(Shared("early", 10)).status());
  ExpectFailsUnchanged(c, absl::StatusCode::kFailedPrecondition, "GPU 0 has 4 free units, needs 10",
                       [&] { return c.Commit(p); });
  ASSERT_OK(c.Release("early"));
  ASSERT_OK(c.SetGpuHealthy("n", 0, false));
  ExpectFailsUnchanged(c, absl::StatusCode::kFailedPrecondition, "GPU 0 is unhealthy",
                       [&] { return c.Commit(p); });
}

TEST(ClusterTest, MalformedCommitIsInvalidArgument) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {14, 14})));
  Placement p;
  p.request_id = "x";
  p.node = "n";
  p.memory_per_gpu = 2;
  p.gpus = {2};
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "GPU index 2 is out of range",
                       [&] { return c.Commit(p); });
  p.gpus = {1, 1};
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "ascending and distinct",
                       [&] { return c.Commit(p); });
  p.gpus = {0};
  p.memory_per_gpu = -2;
  ExpectFailsUnchanged(c, absl::StatusCode::kInvalidArgument, "memory per gpu -2",
                       [&] { return c.Commit(p); });
  p.memory_per_gpu = 2;
  p.node = "m";
  ExpectFailsUnchanged(c, absl::StatusCode::kNotFound, "unknown node 'm'",
                       [&] { return c.Commit(p); });
}

// ---- Replicas, capacity, nodes needed ----------------------------------------------------

TEST(ClusterTest, ReplicasAllOrNothingPlacesNothingOnShortfall) {
  Cluster c = S1Cluster();
  ExpectFailsUnchanged(c, absl::StatusCode::kResourceExhausted, "placed 2 of 3 replicas", [&] {
    return c.PlaceReplicas(Shared("big", 8), 3, "binpack").status();
  });
  ASSERT_OK_AND_ASSIGN(auto some, c.PlaceReplicas(Shared("big", 8), 3, "binpack",
                                                  ReplicaMode::kAsManyAsFit));
  EXPECT_EQ(some.size(), 2u);
  EXPECT_EQ(some[1].request_id, "big-1");
  EXPECT_THAT(c.PlaceReplicas(Shared("big", 1), 1, "binpack").status(),
              StatusIs(absl::StatusCode::kAlreadyExists, "big-0"));
  EXPECT_THAT(c.PlaceReplicas(Shared("r", 1), -1, "binpack").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "-1"));
}

TEST(ClusterTest, CapacityMatchesPlacingCopiesUntilFull) {
  for (const char* policy : {"binpack", "spread"}) {
    SCOPED_TRACE(policy);
    Cluster c;
    ASSERT_OK(c.AddNode(SharedNode("a", {16, 16, 8, 32})));
    ASSERT_OK(c.AddNode(SharedNode("b", {15, 15})));
    ASSERT_OK(c.Place(Shared("x", 5)).status());
    for (const Request& r : {Shared("r", 3), Shared("r", 6, 2), Shared("r", 4, 4), Exclusive("r", 2)}) {
      const std::string before = c.ToJson();
      ASSERT_OK_AND_ASSIGN(int64_t capacity, c.Capacity(r, policy));
      EXPECT_EQ(c.ToJson(), before);
      Cluster copy = c;
      ASSERT_OK_AND_ASSIGN(auto placed, copy.PlaceReplicas(r, 1000, policy, ReplicaMode::kAsManyAsFit));
      EXPECT_EQ(capacity, static_cast<int64_t>(placed.size()));
      EXPECT_GT(capacity, 0);
    }
  }
}

TEST(ClusterTest, NodesNeededForPendingReplicas) {
  // S5: a pool labelled inference=tensorflow, one GPU per replica.
  Cluster c;
  Node pool = SharedNode("pool-0", {16});
  pool.labels["inference"] = "tensorflow";
  ASSERT_OK(c.AddNode(pool));
  Request replica = Exclusive("serving", 1);
  replica.node_selector = {{"inference", "tensorflow"}};
  ASSERT_OK(c.PlaceReplicas(replica, 1, "binpack").status());
  EXPECT_EQ(*c.Capacity(replica), 0);
  Node shape = SharedNode("spot", {16, 16, 16, 16});
  shape.labels["inference"] = "tensorflow";
  EXPECT_EQ(*c.NodesNeeded(replica, 9, shape), 3);  // 4 per node.
  EXPECT_EQ(*c.NodesNeeded(replica, 0, shape), 0);
  Node wrong = SharedNode("cpu", {16});
  EXPECT_THAT(c.NodesNeeded(replica, 1, wrong),
              StatusIs(absl::StatusCode::kResourceExhausted, "node selector"));
}

// ---- Snapshot -------------------------------------------------------------------------

TEST(ClusterTest, JsonSnapshotRoundTripsToAnIdenticalCluster) {
  Cluster c = S1Cluster();
  Node odd = SharedNode("odd", {8, 16}, "V100M16");
  odd.gpus[1].uuid = "GPU-1234";
  odd.cpu = 8000;
  odd.host_memory = 4096;
  ASSERT_OK(c.AddNode(odd));
  ASSERT_OK(c.Place(Shared("a", 2)).status());
  ASSERT_OK(c.Place(Exclusive("b", 1)).status());
  Request cpu;
  cpu.id = "c";
  cpu.cpu = 1000;
  ASSERT_OK(c.Place(cpu).status());
  ASSERT_OK(c.SetGpuHealthy("odd", 0, false));
  ASSERT_OK(c.SetNodeSchedulable("sd-cluster-04", false));
  ASSERT_OK_AND_ASSIGN(Cluster back, Cluster::FromJson(c.ToJson(2)));
  EXPECT_EQ(back.ToJson(), c.ToJson());
  EXPECT_EQ(InspectTable(back), InspectTable(c));
  EXPECT_OK(back.CheckInvariants());
  // The two clusters now behave alike.
  EXPECT_EQ(*back.Place(Shared("next", 3)), *c.Place(Shared("next", 3)));
}

TEST(ClusterTest, MalformedJsonIsInvalidArgumentNamingTheProblem) {
  const std::string good = S1Cluster().ToJson();
  EXPECT_THAT(Cluster::FromJson(good.substr(0, good.size() / 2)),
              StatusIs(absl::StatusCode::kInvalidArgument, "malformed cluster JSON"));
  EXPECT_THAT(Cluster::FromJson("[]"), StatusIs(absl::StatusCode::kInvalidArgument, "object"));
  EXPECT_THAT(Cluster::FromJson(R"({"format":"x","version":1})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "format 'x'"));
  std::string no_name = good;
  no_name.replace(no_name.find("\"name\""), 6, "\"nome\"");
  EXPECT_THAT(Cluster::FromJson(no_name),
              StatusIs(absl::StatusCode::kInvalidArgument, "nodes[0]: missing field 'name'"));
  std::string bad_type = good;
  bad_type.replace(bad_type.find("\"memory\":14"), 11, "\"memory\":\"14\"");
  EXPECT_THAT(Cluster::FromJson(bad_type),
              StatusIs(absl::StatusCode::kInvalidArgument, "'memory' must be an integer, not a string"));
  // A snapshot that would overfill a GPU is refused.
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("a", 14)).status());
  std::string over = c.ToJson();
  over.replace(over.find("\"memory_per_gpu\":14"), 19, "\"memory_per_gpu\":15");
  EXPECT_THAT(Cluster::FromJson(over),
              StatusIs(absl::StatusCode::kInvalidArgument, "placements[0]"));
}

// `text` with the first `from` replaced by `to`.
std::string Replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

TEST(ClusterTest, FromJsonChecksEveryNumberForTypeAndRange) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("a", 4)).status());
  const std::string good = c.ToJson();
  ASSERT_OK(Cluster::FromJson(good).status());
  const struct {
    std::string from, to, error;
  } cases[] = {
      {"\"version\":1", "\"version\":4294967297", "version 4294967297 is not supported"},
      {"\"version\":1", "\"version\":1.9", "field 'version' must be an integer, not 1.9"},
      {"\"version\":1", "\"version\":1.0", "field 'version' must be an integer, not 1.0"},
      {"\"version\":1", "\"version\":1e300", "field 'version' must be an integer"},
      {"\"version\":1", "\"version\":18446744073709551615",
       "field 'version' value 18446744073709551615 is out of range"},
      {"\"gpus\":[0]", "\"gpus\":[4294967296]",
       "placements[0]: field 'gpus[0]' value 4294967296 is out of range [0, 63]"},
      {"\"gpus\":[0]", "\"gpus\":[0.9]", "field 'gpus[0]' must be an integer, not 0.9"},
      {"\"gpus\":[0]", "\"gpus\":[-1]", "field 'gpus[0]' value -1 is out of range"},
      {"\"gpus\":[0]", "\"gpus\":0", "field 'gpus' must be an array"},
      {"\"memory_per_gpu\":4", "\"memory_per_gpu\":4.9",
       "field 'memory_per_gpu' must be an integer, not 4.9"},
      {"\"memory_per_gpu\":4", "\"memory_per_gpu\":true",
       "field 'memory_per_gpu' must be an integer, not a boolean"},
      {"\"remembered_releases\":65536", "\"remembered_releases\":1099511627776",
       "options: field 'remembered_releases' value 1099511627776 is out of range [0, 2147483647]"},
      {"\"remembered_releases\":65536", "\"remembered_releases\":-1",
       "'remembered_releases' value -1 is out of range"},
      {"\"tie_break_seed\":0", "\"tie_break_seed\":-1",
       "field 'tie_break_seed' value -1 is out of range"},
      {"\"tie_break_seed\":0", "\"tie_break_seed\":0.5",
       "field 'tie_break_seed' must be an integer"},
      {"\"memory\":14", "\"memory\":14.5", "nodes[0].gpus[0]: field 'memory' must be an integer"},
      {"\"memory\":14", "\"memory\":8589934592",
       "nodes[0].gpus[0]: field 'memory' value 8589934592 is out of range [1, 4294967296]"},
      {"\"cpu\":0", "\"cpu\":-5", "nodes[0]: field 'cpu' value -5 is out of range"},
      {"\"schedulable\":true", "\"schedulable\":1",
       "field 'schedulable' must be true or false, not 1"},
      {"\"labels\":{", "\"labels\":{\"n\":1,", "field 'labels' entry 'n' must be a string"},
      {"\"name\":\"sd-cluster-04\"", "\"name\":4", "field 'name' must be a string"},
  };
  for (const auto& t : cases) {
    EXPECT_THAT(Cluster::FromJson(Replaced(good, t.from, t.to)),
                StatusIs(absl::StatusCode::kInvalidArgument, t.error))
        << t.to;
  }
}

TEST(ClusterTest, FromJsonNeverThrows) {
  // Numbers beyond double's range: nlohmann reports them as out_of_range.
  for (const char* text : {R"({"a":1e3001})", "1e3001", R"({"format":-1e999})", "[1e400]"}) {
    EXPECT_THAT(Cluster::FromJson(text),
                StatusIs(absl::StatusCode::kInvalidArgument, "malformed cluster JSON"))
        << text;
  }
  EXPECT_THAT(Cluster::FromJson(R"({"a":1e3001})"),
              StatusIs(absl::StatusCode::kInvalidArgument, "1e3001"));
  EXPECT_THAT(Cluster::FromJson("{\"a\":\"\xff\xfe\"}"),
              StatusIs(absl::StatusCode::kInvalidArgument, "malformed cluster JSON"));
  EXPECT_THAT(Cluster::FromJson("{\"a\": tru"),
              StatusIs(absl::StatusCode::kInvalidArgument, "at byte"));
  // A 2 MB unterminated string is not repeated in the message.
  const std::string huge = "{\"" + std::string(2 << 20, 'x');
  absl::StatusOr<Cluster> r = Cluster::FromJson(huge);
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, "malformed cluster JSON"));
  EXPECT_LT(r.status().message().size(), 400u) << r.status().message().substr(0, 400);
  EXPECT_THAT(std::string(r.status().message()), ::testing::HasSubstr("bytes)"));
}

TEST(ClusterTest, ToJsonOfTextThatIsNotUtf8DoesNotThrow) {
  Cluster c;
  Node n = SharedNode("bad-\xff-name", {8});
  n.labels["k"] = "v\xc3";
  ASSERT_OK(c.AddNode(n));
  const std::string text = c.ToJson();
  EXPECT_THAT(text, ::testing::HasSubstr("bad-\xef\xbf\xbd-name"));  // U+FFFD.
  ASSERT_OK_AND_ASSIGN(Cluster back, Cluster::FromJson(text));
  EXPECT_EQ(back.num_nodes(), 1);
}

// ---- Overflow and invariants ----------------------------------------------------------------

TEST(ClusterTest, LargeSizesDoNotOverflow) {
  Cluster c;
  Node n = SharedNode("big", std::vector<int64_t>(64, kMaxQuantity));
  n.cpu = kMaxQuantity;
  ASSERT_OK(c.AddNode(n));
  ASSERT_OK(c.AddNode(SharedNode("big2", std::vector<int64_t>(64, kMaxQuantity))));
  Request r = Shared("r", kMaxQuantity / 64 * 64, 64);
  ASSERT_OK(c.Place(r).status());
  EXPECT_EQ(c.TotalUsage().gpu_memory, 128 * kMaxQuantity);
  ASSERT_OK_AND_ASSIGN(int64_t more, c.Capacity(Shared("x", kMaxQuantity)));
  EXPECT_EQ(more, 64);
  EXPECT_OK(c.CheckInvariants());
}

TEST(ClusterTest, RemoveNodeOnlyWhenEmpty) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("a", 1)).status());
  ExpectFailsUnchanged(c, absl::StatusCode::kFailedPrecondition, "release them first",
                       [&] { return c.RemoveNode("sd-cluster-05"); });
  ASSERT_OK(c.RemoveNode("sd-cluster-04"));
  EXPECT_THAT(c.node_names(), ElementsAre("sd-cluster-05"));
  EXPECT_OK(c.CheckInvariants());
  EXPECT_OK(c.Release("a"));
}

// Removing a node moves the nodes after it down the node list; placements on
// them must still release from their own node.
TEST(ClusterTest, ReleasesAfterAnEarlierNodeIsRemoved) {
  Cluster c;
  for (const char* name : {"n0", "n1", "n2", "n3"}) {
    ASSERT_OK(c.AddNode(SharedNode(name, {16, 16})));
  }
  auto placement = [](const char* id, const char* node, int gpu, int64_t memory) {
    Placement p;
    p.request_id = id;
    p.node = node;
    p.gpus = {gpu};
    p.memory_per_gpu = memory;
    return p;
  };
  ASSERT_OK(c.Commit(placement("on-n2", "n2", 0, 5)));
  ASSERT_OK(c.Commit(placement("on-n3", "n3", 1, 7)));
  ASSERT_OK(c.Commit(placement("on-n1", "n1", 0, 3)));
  ASSERT_OK(c.Release("on-n1"));
  ASSERT_OK(c.RemoveNode("n1"));
  ASSERT_OK(c.RemoveNode("n0"));
  EXPECT_OK(c.CheckInvariants());
  ASSERT_OK(c.Release("on-n3"));
  ASSERT_OK_AND_ASSIGN(NodeStatus n3, c.GetNode("n3"));
  EXPECT_EQ(n3.gpus[1].memory_used, 0);
  ASSERT_OK_AND_ASSIGN(NodeStatus n2, c.GetNode("n2"));
  EXPECT_EQ(n2.gpus[0].memory_used, 5);
  ASSERT_OK(c.Release("on-n2"));
  EXPECT_EQ(c.TotalUsage().gpu_memory_used, 0);
  EXPECT_OK(c.CheckInvariants());
}

}  // namespace
}  // namespace gpushare
