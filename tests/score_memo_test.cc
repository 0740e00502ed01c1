// The score memo that serves the fragmentation-aware built-in policies (and
// binpack and spread for CPU-only requests) in Cluster::Plan()
// (src/internal/score_memo.h) against the generic scan over
// every node: two clusters driven in lock step by long random sequences of
// operations (add and remove nodes, place, plan + commit, replicas that roll
// back, release, health and cordon changes, copies), one asked with the
// policy itself, the other with the same policy behind a wrapper that only
// the scan serves. Identical answers at every step.

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "src/fgd/kernel.h"
#include "src/internal/cluster_state.h"
#include "src/internal/score_memo.h"
#include "src/internal/score_sets.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/scanned_policy.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/seeds.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::ScannedPolicy;

class Ops {
 public:
  // `few_capacities`: node CPU capacities of four kinds (one untracked), and
  // more CPU-only requests, for the shared CPU-only orders of binpack.
  // `topologies`: half the nodes with GPUs have a GPU topology, and requests
  // draw every kind of topology need.
  explicit Ops(uint64_t seed, bool few_capacities = false, bool topologies = false)
      : rng_(testing::TestSeed(seed)), few_capacities_(few_capacities), topologies_(topologies) {}

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }

  Node MakeNode(int n) {
    Node node;
    node.name = "node-" + std::to_string(n);
    static const int kGpus[] = {0, 1, 2, 4, 8, 8};
    static const char* const kModels[] = {"T4", "V100M16", "A10"};
    const int gpus = kGpus[Uniform(0, 5)];
    const std::string model = kModels[Uniform(0, 2)];
    for (int i = 0; i < gpus; ++i) node.gpus.push_back(Gpu{16, model, "", !Chance(0.05)});
    node.labels["gpushare"] = Chance(0.9) ? "true" : "false";
    node.labels["pool"] = Chance(0.5) ? "a" : "b";
    if (few_capacities_) {
      static const int64_t kCpus[] = {0, 8000, 16000, 32000};
      node.cpu = kCpus[Uniform(0, 3)];
    } else if (Chance(0.8)) {
      node.cpu = Uniform(8, 64) * 1000;
    }
    if (Chance(0.3)) node.host_memory = Uniform(8, 256) * 1024;
    node.schedulable = !Chance(0.05);
    if (topologies_ && gpus > 0 && Chance(0.5)) {
      node.topology = testing::PairedTopology(gpus, /*all_nvlink=*/Chance(0.25));
    }
    return node;
  }

  // MakeNode(), labelled to take shared GPU work.
  Node MakeSharingNode(int n) {
    Node node = MakeNode(n);
    node.labels["gpushare"] = "true";
    return node;
  }

  // Few distinct shapes, so that the memo is hit, and some that fit nowhere.
  Request MakeRequest(int n) {
    Request r;
    r.id = "req-" + std::to_string(n);
    const int kind = few_capacities_ && Chance(0.5) ? 9 : Uniform(0, 9);
    if (kind <= 5) {
      r.gpu_count = Chance(0.8) ? 1 : 2;
      r.compute = Uniform(1, 10) * 100;
      if (Chance(0.3)) r.gpu_memory = Uniform(1, 4) * r.gpu_count;
    } else if (kind <= 8) {
      r.whole_gpus = Uniform(1, 4);
    }
    if (Chance(0.5)) r.cpu = Uniform(1, 8) * 2000;
    if (Chance(0.1)) r.host_memory = Uniform(1, 4) * 8192;
    if (Chance(0.1)) r.gpu_models = {Chance(0.5) ? "T4" : "A10"};
    // The same models listed in any order, or twice: one shape (found by
    // the hash of the fields only when they are in order).
    if (Chance(0.04)) {
      r.gpu_models = {"A10", "T4"};
      if (Chance(0.5)) std::swap(r.gpu_models[0], r.gpu_models[1]);
      if (Chance(0.3)) r.gpu_models.push_back(r.gpu_models[0]);
    }
    if (Chance(0.05)) r.node_selector = {{"pool", "a"}};
    if (topologies_) {
      const int mode = Uniform(0, 2);
      const bool nvlink = Chance(0.5);
      r.topology = testing::DrawnTopologyNeed(mode, nvlink, /*weakest_link=*/Chance(0.5));
    }
    return r;
  }

 private:
  std::mt19937_64 rng_;
  bool few_capacities_;
  bool topologies_;
};

std::unique_ptr<Policy> Make(const std::string& name) {
  PolicyOptions options;
  if (name == "fgd" || name == "fgdcpu" || name == "fgdpack") {
    auto target = std::make_shared<TargetWorkload>();
    target->tasks = {TargetTask{2000, 300, 1, {}, 0.4}, TargetTask{4000, 0, 1, {"T4"}, 0.3},
                     TargetTask{8000, 0, 2, {}, 0.2}, TargetTask{0, 700, 1, {"A10"}, 0.1}};
    options.fgd_target = target;
  }
  auto policy = MakePolicy(name, options);
  EXPECT_OK(policy.status());
  return *std::move(policy);
}

// A cluster served by the memo and its twin served by the scan, driven
// alike. Wrap calls in ASSERT_NO_FATAL_FAILURE.
class Twins {
 public:
  // `policy` for the memo's cluster, `scanned` (the same policy) for the
  // scan's; both outlive the twins.
  Twins(Policy* policy, Policy* scanned) : policy_(policy), scanned_(scanned) {}
  // With their own policies, `name` (Make()) each.
  explicit Twins(const std::string& name)
      : owned_(Make(name)), owned_scanned_(std::make_unique<ScannedPolicy>(Make(name))),
        policy_(owned_.get()), scanned_(owned_scanned_.get()) {}

  void AddNode(const Node& node) {
    ASSERT_OK(memo.AddNode(node));
    ASSERT_OK(scan.AddNode(node));
  }
  // Places `r` in both: the same answer, or the same failure. Records the
  // id in `placed` when it was placed.
  void Place(const Request& r, std::vector<std::string>* placed) {
    absl::StatusOr<Placement> got = memo.Place(r, *policy_);
    absl::StatusOr<Placement> want = scan.Place(r, *scanned_);
    ASSERT_EQ(got.status(), want.status());
    if (!got.ok()) return;
    ASSERT_EQ(*got, *want);
    placed->push_back(r.id);
  }
  // Releases placed[k] from both and forgets it.
  void Release(std::vector<std::string>* placed, size_t k) {
    ASSERT_OK(memo.Release((*placed)[k]));
    ASSERT_OK(scan.Release((*placed)[k]));
    (*placed)[k] = placed->back();
    placed->pop_back();
  }
  void ReleaseAny(Ops& ops, std::vector<std::string>* placed) {
    Release(placed, ops.Uniform(0, static_cast<int>(placed->size()) - 1));
  }
  // `steps` times: releases one of `placed` (with probability 0.45 when
  // there is one), or places make(step) and calls on_placed(request) when
  // it was placed.
  template <typename Make, typename OnPlaced>
  void Churn(Ops& ops, int steps, std::vector<std::string>* placed, Make make,
             OnPlaced on_placed) {
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE(step);
      if (!placed->empty() && ops.Chance(0.45)) {
        ASSERT_NO_FATAL_FAILURE(ReleaseAny(ops, placed));
        continue;
      }
      const Request r = make(step);
      const size_t before = placed->size();
      ASSERT_NO_FATAL_FAILURE(Place(r, placed));
      if (placed->size() > before) on_placed(r);
    }
  }

  Cluster memo, scan;

 private:
  std::unique_ptr<Policy> owned_;
  std::unique_ptr<ScannedPolicy> owned_scanned_;
  Policy* policy_;
  Policy* scanned_;
};

class ScoreMemoTest : public ::testing::TestWithParam<std::string> {};

// Drives a memo cluster and a scanning cluster in lock step (see the top).
void LockStep(const std::string& name, Ops ops) {
  ClusterOptions options;
  options.tie_break_seed = 5;  // Tie keys from names: a fixed random order.
  Cluster memo(options), scan(options);
  ScannedPolicy scanned(Make(name));
  std::vector<std::string> placed;
  std::vector<std::string> names;
  int nodes = 0, requests = 0, placed_count = 0, exhausted = 0;
  auto add_node = [&] {
    Node node = ops.MakeNode(nodes++);
    ASSERT_OK(memo.AddNode(node));
    ASSERT_OK(scan.AddNode(node));
    names.push_back(node.name);
  };
  for (int i = 0; i < 20; ++i) add_node();

  std::unique_ptr<Policy> policy;
  const int total = testing::Quick() ? 4000 : 20000;
  for (int step = 0; step < total; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    // A new policy object now and then: the memo is kept per policy and
    // target, not per object.
    if (step == 0 || ops.Chance(0.01)) policy = Make(name);
    const int op = ops.Uniform(0, 99);
    if (op < 2 && nodes < 60) {
      add_node();
    } else if (op < 3) {  // Remove an empty node (slots move), keeping four.
      if (names.size() <= 4) continue;
      const std::string& victim = names[ops.Uniform(0, static_cast<int>(names.size()) - 1)];
      const absl::Status a = memo.RemoveNode(victim);
      ASSERT_EQ(a.code(), scan.RemoveNode(victim).code());
      if (a.ok()) names.erase(std::find(names.begin(), names.end(), victim));
    } else if (op < 50) {  // Place.
      Request r = ops.MakeRequest(requests++);
      absl::StatusOr<Placement> got = memo.Place(r, *policy);
      absl::StatusOr<Placement> want = scan.Place(r, scanned);
      ASSERT_EQ(got.status(), want.status());  // The same reasons when nothing fits.
      if (!got.ok()) {
        ++exhausted;
        continue;
      }
      ASSERT_EQ(*got, *want);
      placed.push_back(r.id);
      ++placed_count;
    } else if (op < 58) {  // Plan, something else happens, then commit.
      Request r = ops.MakeRequest(requests++);
      absl::StatusOr<Placement> got = memo.Plan(r, *policy);
      absl::StatusOr<Placement> want = scan.Plan(r, scanned);
      ASSERT_EQ(got.status().code(), want.status().code());
      if (!got.ok()) continue;
      ASSERT_EQ(*got, *want);
      Request other = ops.MakeRequest(requests++);
      absl::StatusOr<Placement> o = memo.Place(other, *policy);
      absl::StatusOr<Placement> o2 = scan.Place(other, scanned);
      ASSERT_EQ(o.ok(), o2.ok());
      if (o.ok()) {
        ASSERT_EQ(*o, *o2);
        placed.push_back(other.id);
      }
      const absl::Status a = memo.Commit(*got);
      ASSERT_EQ(a.code(), scan.Commit(*want).code());
      if (a.ok()) placed.push_back(r.id);
    } else if (op < 61) {  // Replicas, all or nothing: often rolled back.
      Request r = ops.MakeRequest(requests++);
      const int count = ops.Uniform(2, 12);
      auto got = memo.PlaceReplicas(r, count, *policy);
      auto want = scan.PlaceReplicas(r, count, scanned);
      ASSERT_EQ(got.status().code(), want.status().code());
      if (!got.ok()) continue;
      ASSERT_EQ(*got, *want);
      for (const Placement& p : *got) placed.push_back(p.request_id);
    } else if (op < 93) {  // Release.
      if (placed.empty()) continue;
      const int k = ops.Uniform(0, static_cast<int>(placed.size()) - 1);
      const std::string id = placed[k];
      placed[k] = placed.back();
      placed.pop_back();
      ASSERT_OK(memo.Release(id));
      ASSERT_OK(scan.Release(id));
    } else if (op < 96) {  // A GPU's health.
      const std::string& node = names[ops.Uniform(0, static_cast<int>(names.size()) - 1)];
      const int gpus = static_cast<int>(memo.FindNode(node)->gpus.size());
      if (gpus == 0) continue;
      const int g = ops.Uniform(0, gpus - 1);
      const bool healthy = ops.Chance(0.6);
      ASSERT_OK(memo.SetGpuHealthy(node, g, healthy));
      ASSERT_OK(scan.SetGpuHealthy(node, g, healthy));
    } else if (op < 99) {  // Cordon or uncordon.
      const std::string& node = names[ops.Uniform(0, static_cast<int>(names.size()) - 1)];
      const bool schedulable = ops.Chance(0.7);
      ASSERT_OK(memo.SetNodeSchedulable(node, schedulable));
      ASSERT_OK(scan.SetNodeSchedulable(node, schedulable));
    } else {  // Continue on a copy (the memo is copied with the cluster).
      Cluster copy = memo;
      memo = std::move(copy);
    }
    if (step % 101 == 0) {
      ASSERT_OK(memo.CheckInvariants());
    }
  }
  ASSERT_OK(memo.CheckInvariants());
  EXPECT_GT(placed_count, total / 10);
  EXPECT_GT(exhausted, 10);
}

TEST_P(ScoreMemoTest, MatchesTheScanOverRandomOperations) {
  LockStep(GetParam(), Ops(std::hash<std::string>()(GetParam())));
}

// The same on nodes of which half have a GPU topology, with requests that
// need none, prefer or require it: shapes then carry a topology key, and a
// node's topology may move the chosen GPUs.
TEST_P(ScoreMemoTest, MatchesTheScanOnTopologyNodes) {
  LockStep(GetParam(), Ops(std::hash<std::string>()(GetParam()) + 13, /*few_capacities=*/false,
                           /*topologies=*/true));
}

// Puts back the memo's own shape hash when it goes (tests that replace it).
struct ScopedShapeHash {
  ~ScopedShapeHash() { internal::ScoreMemo::SetShapeHashForTesting(nullptr); }
};

// Plan() finds a request's shape by a hash of its fields, then checks the
// fields. Under hashes that each leave some fields out, shapes that differ
// only in those collide: the answers are still the scan's. (Trusting the
// hash, or leaving a field out of the check, gives requests the verdicts of
// another shape, and fails here.)
TEST(ScoreMemoTest, ShapesWhoseHashesCollideStayApart) {
  ScopedShapeHash restore;
  const internal::ScoreMemo::ShapeHash hashes[] = {
      [](const Request&, const Demand&) { return uint64_t{42}; },
      [](const Request& r, const Demand& d) {  // No topology need.
        return static_cast<uint64_t>(absl::HashOf(d.kind, d.gpu_count, d.memory_per_gpu,
                                                  d.compute_per_gpu, d.cpu, d.host_memory,
                                                  r.gpu_models, r.node_selector));
      },
      [](const Request& r, const Demand& d) {  // No GPU models, selector or memory.
        return static_cast<uint64_t>(absl::HashOf(d.kind, d.gpu_count, d.memory_per_gpu,
                                                  d.compute_per_gpu, d.cpu, r.topology.mode));
      },
      [](const Request& r, const Demand& d) {  // Nothing of the demand's amounts.
        return static_cast<uint64_t>(absl::HashOf(d.kind, r.gpu_models, r.node_selector,
                                                  r.topology.mode));
      }};
  for (const internal::ScoreMemo::ShapeHash hash : hashes) {
    internal::ScoreMemo::SetShapeHashForTesting(hash);
    LockStep("dotprod", Ops(11));
    LockStep("gpupacking", Ops(17, /*few_capacities=*/false, /*topologies=*/true));
  }
}

// The same for shapes that differ only in their topology need, on a node
// where each part of it changes the answer: the GPUs the weakest-link and
// the total objectives choose, those of a topology-blind choice, and whether
// a minimum link can be met at all. Every request shares one hash.
TEST(ScoreMemoTest, ShapesDifferingOnlyInTheirTopologyNeedStayApart) {
  ScopedShapeHash restore;
  internal::ScoreMemo::SetShapeHashForTesting(
      [](const Request&, const Demand&) { return uint64_t{42}; });
  // GPU0-1 and GPU0-2 over NV4, the rest over SYS, but 3-4-5 all over NV1.
  std::vector<std::vector<Link>> links(6, std::vector<Link>(6, Link{LinkKind::kSys, 0}));
  auto set = [&](int a, int b, Link l) { links[a][b] = links[b][a] = l; };
  set(0, 1, Link{LinkKind::kNvLink, 4});
  set(0, 2, Link{LinkKind::kNvLink, 4});
  set(3, 4, Link{LinkKind::kNvLink, 1});
  set(3, 5, Link{LinkKind::kNvLink, 1});
  set(4, 5, Link{LinkKind::kNvLink, 1});
  Node node;
  node.name = "n";
  node.gpus.assign(6, Gpu{16, "T4", "", true});
  ASSERT_OK_AND_ASSIGN(node.topology, Topology::Make(links));
  auto policy = Make("dotprod");
  ScannedPolicy scanned(Make("dotprod"));
  auto need = [](TopologyNeed::Mode mode, TopologyObjective objective, Link min_link) {
    TopologyNeed n;
    n.mode = mode;
    n.objective = objective;
    n.min_link = min_link;
    return n;
  };
  const Link nv1{LinkKind::kNvLink, 1}, nv4{LinkKind::kNvLink, 4};
  using Mode = TopologyNeed::Mode;
  using Objective = TopologyObjective;
  const std::vector<std::pair<TopologyNeed, std::vector<int>>> cases = {
      {need(Mode::kPrefer, Objective::kWeakestLink, nv1), {3, 4, 5}},
      {need(Mode::kPrefer, Objective::kTotal, nv1), {0, 1, 2}},
      {need(Mode::kRequire, Objective::kWeakestLink, nv1), {3, 4, 5}},
      {need(Mode::kRequire, Objective::kWeakestLink, nv4), {}},  // No such three.
      {need(Mode::kNone, Objective::kWeakestLink, nv1), {0, 1, 2}}};
  // Each case's shape is asked first in a cluster of its own, and so holds
  // the hash when the others are asked.
  for (size_t first = 0; first < cases.size(); ++first) {
    SCOPED_TRACE(absl::StrCat("first ", first));
    Cluster memo, scan;
    ASSERT_OK(memo.AddNode(node));
    ASSERT_OK(scan.AddNode(node));
    for (size_t k = 0; k <= cases.size(); ++k) {
      const size_t i = k == 0 ? first : k - 1;
      SCOPED_TRACE(i);
      Request r;
      r.id = absl::StrCat("r", k);
      r.whole_gpus = 3;
      r.topology = cases[i].first;
      absl::StatusOr<Placement> got = memo.Plan(r, *policy);
      absl::StatusOr<Placement> want = scan.Plan(r, scanned);
      ASSERT_EQ(got.status().code(), want.status().code());
      if (cases[i].second.empty()) {
        EXPECT_FALSE(got.ok());
        continue;
      }
      ASSERT_OK(got.status());
      EXPECT_EQ(*got, *want);
      EXPECT_EQ(got->gpus, cases[i].second);
    }
    ASSERT_OK(memo.CheckInvariants());
  }
}

// binpack's CPU-only order is one tree per node CPU capacity, used while
// there are few capacities (the random nodes above have dozens).
TEST(ScoreMemoTest, CpuOnlyOrdersMatchTheScanWithFewCapacities) {
  for (const char* name : {"binpack", "spread"}) {
    SCOPED_TRACE(name);
    LockStep(name, Ops(std::hash<std::string>()(name) + 7, /*few_capacities=*/true));
  }
}

INSTANTIATE_TEST_SUITE_P(KernelPolicies, ScoreMemoTest,
                         ::testing::Values("fgd", "fgdcpu", "fgdpack", "bestfit", "dotprod",
                                           "gpupacking", "gpuclustering", "binpack", "spread"),
                         [](const auto& info) { return info.param; });

// The random test above would pass with the memo switched off (the scan
// gives the same answers); here the index itself must answer, from the memo,
// for every policy it serves, before and after a node changes.
TEST(ScoreMemoPathTest, ServedPoliciesAreAnsweredByTheMemo) {
  Cluster cluster;
  internal::ClusterState state;
  for (uint32_t i = 0; i < 10; ++i) {
    Node n;
    n.name = absl::StrCat("n", i);
    n.labels = {{"gpushare", "true"}};
    n.gpus.assign(4, Gpu{16, "T4", "", true});
    n.cpu = 32000;
    ASSERT_OK(cluster.AddNode(n));
    state.nodes.push_back(internal::MakeNodeStatus(n));
    state.tie_keys.push_back(internal::TieKey(0, n.name, i));
    state.index.Link(state, i, nullptr);
  }
  Request shared;
  shared.id = "shared";
  shared.compute = 300;
  shared.cpu = 1000;
  Request cpu_only;
  cpu_only.id = "cpu";
  cpu_only.cpu = 2000;
  for (const char* name :
       {"fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "binpack", "spread"}) {
    std::unique_ptr<Policy> policy = Make(name);
    ScannedPolicy scan(Make(name));
    for (const Request* r : {&shared, &cpu_only}) {
      if ((std::string(name) == "binpack" || std::string(name) == "spread") && r == &shared) {
        continue;  // Served by the ordered indexes (placement_index_test).
      }
      for (int round = 0; round < 2; ++round) {
        absl::StatusOr<Demand> demand = internal::ValidateRequest(*r, 4);
        ASSERT_OK(demand.status());
        int slot = -1;
        NodeChoice choice;
        ASSERT_TRUE(state.index.Plan(state, cluster, *r, *demand, *policy, &slot, &choice))
            << name << " " << r->id;
        absl::StatusOr<Placement> want = cluster.Plan(*r, scan);
        ASSERT_OK(want.status());
        EXPECT_EQ(state.nodes[slot].name, want->node) << name << " " << r->id;
        EXPECT_EQ(choice.gpus, want->gpus) << name << " " << r->id;
        // Commit the scan's choice to both, so the next round sees a change.
        Placement p = *want;
        p.request_id = absl::StrCat(name, r->id, round);
        ASSERT_OK(cluster.Commit(p));
        const uint32_t at = static_cast<uint32_t>(slot);
        state.index.Unlink(state, at, &p.gpus);
        internal::ApplyToNode(state.nodes[at], p);
        state.index.Link(state, at, &p.gpus);
      }
    }
  }
  EXPECT_TRUE(state.index.Consistent(state));
}

// CPU-only requests of spread walk one order of every node from the best;
// when more than ScoreMemo::kCpuOrderWalk nodes that do not fit come first,
// the request's own shape answers: idle small nodes ahead of the one large
// node that fits. binpack's order per CPU capacity skips the half-used small
// nodes without walking them.
TEST(ScoreMemoTest, CpuOnlyRequestsPastManyNodesThatDoNotFitAreExact) {
  const int small = internal::ScoreMemo::kCpuOrderWalk + 30;
  for (const char* name : {"binpack", "spread"}) {
    SCOPED_TRACE(name);
    Cluster memo, scan;
    ScannedPolicy scanned(Make(name));
    auto policy = Make(name);
    for (int i = 0; i <= small; ++i) {
      Node n;
      n.name = absl::StrCat("n", i);
      n.cpu = i == small / 2 ? 64000 : 4000;
      ASSERT_OK(memo.AddNode(n));
      ASSERT_OK(scan.AddNode(n));
    }
    // binpack: half of every small node used; spread: an eighth of the large
    // one. Either way the small nodes rank first, and the requests of 8
    // cores only the large node can take.
    const bool binpack = std::string(name) == "binpack";
    for (int i = 0; i <= small; ++i) {
      if (binpack == (i == small / 2)) continue;
      Placement p;
      p.request_id = absl::StrCat("bg", i);
      p.node = absl::StrCat("n", i);
      p.cpu = binpack ? 2000 : 8000;
      ASSERT_OK(memo.Commit(p));
      ASSERT_OK(scan.Commit(p));
    }
    for (int round = 0; round < 6; ++round) {
      SCOPED_TRACE(round);
      Request r;
      r.id = absl::StrCat("big", round);
      r.cpu = round % 2 == 0 ? 8000 : 1000;  // Then one that fits almost anywhere.
      absl::StatusOr<Placement> got = memo.Place(r, *policy);
      absl::StatusOr<Placement> want = scan.Place(r, scanned);
      ASSERT_EQ(got.ok(), want.ok()) << got.status() << " / " << want.status();
      if (got.ok()) {
        EXPECT_EQ(got->node, want->node);
      }
    }
    // Larger than any node: no node fits, and the errors agree.
    Request huge;
    huge.id = "huge";
    huge.cpu = 100000;
    EXPECT_EQ(memo.Plan(huge, *policy).status(), scan.Plan(huge, scanned).status());
    EXPECT_OK(memo.CheckInvariants());
  }
}

// A kernel shape keeps its feasible nodes in per-score bit sets while it has
// at most ScoreSets::kMaxScores distinct scores, and moves them to a tree at
// the first score past that. Here bestfit first sees one score (identical
// idle nodes), then 150 (pairs of nodes whose CPU use differs by about a
// point of bestfit's score from the next pair's): the move happens within a
// walk of changed nodes, and the memo stays exact through the places and
// releases after it. With `topology`, the nodes have two NVLink pairs of
// GPUs, and in each pair of nodes one holds a whole pair (its free GPUs are
// a pair) and the other one GPU of each (its free GPUs are not): equal
// scores, and the requests for two GPUs prefer NVLink, so the tree's first
// nodes of the best score must race on their topology keys as the scan's do.
void ManyScoresLockStep(bool topology) {
  constexpr int kNodes = 300;
  static_assert(kNodes / 2 > static_cast<int>(internal::ScoreSets::kMaxScores));
  ClusterOptions options;
  options.tie_break_seed = 11;
  Cluster memo(options), scan(options);
  ScannedPolicy scanned(Make("bestfit"));
  auto policy = Make("bestfit");
  for (int i = 0; i < kNodes; ++i) {
    Node n;
    n.name = absl::StrCat("n", i);
    n.labels = {{"gpushare", "true"}};
    n.cpu = 1000000;
    n.gpus.assign(4, Gpu{16, "T4", "", true});
    if (topology) n.topology = testing::PairedTopology(4, /*all_nvlink=*/false);
    ASSERT_OK(memo.AddNode(n));
    ASSERT_OK(scan.AddNode(n));
  }
  Request r;
  r.id = "probe";
  r.compute = 200;
  r.cpu = 1000;
  if (topology) {
    r.gpu_count = 2;
    r.topology = testing::DrawnTopologyNeed(/*mode=*/1, /*nvlink=*/true, /*weakest_link=*/true);
  }
  auto same_plan = [&] {
    absl::StatusOr<Placement> got = memo.Plan(r, *policy);
    absl::StatusOr<Placement> want = scan.Plan(r, scanned);
    ASSERT_OK(got.status());
    ASSERT_OK(want.status());
    EXPECT_EQ(*got, *want);
    EXPECT_OK(memo.CheckInvariants());
  };
  ASSERT_NO_FATAL_FAILURE(same_plan());  // One score: the sets.
  for (int i = 0; i < kNodes; ++i) {
    Placement p;
    p.request_id = absl::StrCat("bg", i);
    p.node = absl::StrCat("n", i);
    p.cpu = 2600 * ((i / 2 * 7) % (kNodes / 2));  // Scores in another order than the slots.
    if (topology) {
      p.gpus = i % 2 == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
      p.exclusive = true;
    }
    ASSERT_OK(memo.Commit(p));
    ASSERT_OK(scan.Commit(p));
  }
  ASSERT_NO_FATAL_FAILURE(same_plan());  // 150 scores: the tree.
  std::mt19937_64 rng(testing::TestSeed(31));
  std::vector<std::string> placed;
  for (int step = 0; step < 600; ++step) {
    SCOPED_TRACE(step);
    if (!placed.empty() && rng() % 3 == 0) {
      const size_t k = rng() % placed.size();
      ASSERT_OK(memo.Release(placed[k]));
      ASSERT_OK(scan.Release(placed[k]));
      placed[k] = placed.back();
      placed.pop_back();
      continue;
    }
    Request q = r;
    q.id = absl::StrCat("q", step);
    q.cpu = 1000 * static_cast<int64_t>(1 + rng() % 8);
    absl::StatusOr<Placement> got = memo.Place(q, *policy);
    absl::StatusOr<Placement> want = scan.Place(q, scanned);
    ASSERT_EQ(got.status(), want.status());
    if (!got.ok()) continue;
    ASSERT_EQ(*got, *want);
    placed.push_back(q.id);
  }
  EXPECT_GT(placed.size(), 100u);
  EXPECT_OK(memo.CheckInvariants());
}

TEST(ScoreMemoTest, ShapesWithManyDistinctScoresMoveToATree) { ManyScoresLockStep(false); }

TEST(ScoreMemoTest, ShapesInATreeRaceOnTopologyAsTheScanDoes) { ManyScoresLockStep(true); }

// More (node, shape) verdicts than the memo keeps (about 3,800 shapes of
// 1,100 nodes): it drops the least recently used shapes, builds them again
// when they come back, and stays exact.
// Shapes that differ only in host memory or node selector share one kernel
// evaluation per node change (the memo's groups): a few base shapes, each
// asked with many host memories and selectors, on nodes where those decide
// feasibility; with a small entry budget, shapes (and groups) are dropped
// and made again.
TEST(ScoreMemoTest, ShapesDifferingOnlyInFeasibilityShareEvaluationsExactly) {
  for (const char* name : {"fgd", "fgdcpu", "fgdpack", "bestfit", "gpuclustering"}) {
    SCOPED_TRACE(name);
    Ops ops(std::hash<std::string>()(name) + 1);
    Twins twins(name);
    for (int i = 0; i < 40; ++i) {
      Node node = ops.MakeSharingNode(i);
      node.host_memory = ops.Uniform(1, 8) * 16384;
      ASSERT_NO_FATAL_FAILURE(twins.AddNode(node));
    }
    std::vector<std::string> placed;
    const int total = testing::Quick() ? 3000 : 12000;
    int shared_placed = 0;
    auto make = [&](int step) {
      Request r;
      r.id = absl::StrCat("r", step);
      const int base = ops.Uniform(0, 3);
      if (base == 0) r.compute = 300;
      if (base == 1) r.compute = 500, r.cpu = 4000;
      if (base == 2) r.whole_gpus = 1, r.cpu = 8000;
      if (base == 3) r.whole_gpus = 2;
      r.host_memory = ops.Uniform(0, 9) * 12288;
      if (ops.Chance(0.3)) r.node_selector = {{"pool", ops.Chance(0.5) ? "a" : "b"}};
      return r;
    };
    ASSERT_NO_FATAL_FAILURE(twins.Churn(ops, total, &placed, make, [&](const Request& r) {
      shared_placed += r.whole_gpus == 0;
    }));
    ASSERT_OK(twins.memo.CheckInvariants());
    EXPECT_GT(shared_placed, total / 10);
  }
}

// The memo keeps a shape's verdicts, and a group's shared evaluations, in
// 8 bytes while a float holds their scores and their GPUs are among a
// node's first 32 (ChoiceArray). Nodes that arrive later widen them in
// mid-life, for shapes whose narrow verdicts must carry over: nodes of 40
// GPUs (the healthy ones past the 32nd), and nodes with CPU enough for
// dotprod's scores to outgrow a float (4 GPUs, so that only the score
// widens). The memo stays the scan's twin.
TEST(ScoreMemoTest, VerdictsThatOutgrowTheNarrowFormStayExact) {
  constexpr int64_t kBigCpu = int64_t{1} << 31;  // Only the big nodes have it.
  for (const char* name : {"fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering"}) {
    SCOPED_TRACE(name);
    Ops ops(std::hash<std::string>()(name) + 7);
    Twins twins(name);
    for (int i = 0; i < 30; ++i) ASSERT_NO_FATAL_FAILURE(twins.AddNode(ops.MakeSharingNode(i)));
    // A few base shapes, each with several host memories: shapes that
    // share a group's evaluations (a node selector does not split a group).
    auto make = [&](int step) {
      Request r;
      r.id = absl::StrCat("r", step);
      r.host_memory = ops.Uniform(0, 2) * 4096;
      switch (ops.Uniform(0, 4)) {
        case 0:
          r.compute = 300;
          break;
        case 1:
          r.whole_gpus = 1;
          r.cpu = 4000;
          break;
        case 2:
          r.whole_gpus = 2;
          break;
        case 3:  // Only the big nodes fit it.
          r.compute = 500;
          r.cpu = kBigCpu + ops.Uniform(0, 9) * 1000003;
          break;
        default:  // Only the nodes of 40 GPUs fit it.
          r.whole_gpus = 1;
          r.node_selector = {{"kind", "wide"}};
          break;
      }
      return r;
    };
    std::vector<std::string> placed;
    auto ignore = [](const Request&) {};
    ASSERT_NO_FATAL_FAILURE(twins.Churn(ops, 600, &placed, make, ignore));
    for (int i = 0; i < 3; ++i) {
      Node wide;
      wide.name = absl::StrCat("wide-", i);
      wide.labels = {{"gpushare", "true"}, {"kind", "wide"}};
      for (int g = 0; g < 40; ++g) wide.gpus.push_back(Gpu{16, "T4", "", g >= 34});
      wide.cpu = 64000;
      ASSERT_NO_FATAL_FAILURE(twins.AddNode(wide));
    }
    for (int i = 0; i < 4; ++i) {
      Node big;
      big.name = absl::StrCat("big-", i);
      big.labels["gpushare"] = "true";
      big.gpus.assign(4, Gpu{16, "T4", "", true});
      big.cpu = kMaxQuantity - i;  // dotprod scores a float would merge.
      ASSERT_NO_FATAL_FAILURE(twins.AddNode(big));
    }
    int past_32 = 0, big_cpu = 0, placements = 0;
    auto count = [&](const Request& r) {
      const Placement* p = twins.memo.FindPlacement(r.id);
      ASSERT_NE(p, nullptr);
      past_32 += !p->gpus.empty() && p->gpus.back() >= 32;
      big_cpu += r.cpu >= kBigCpu;
      // Often: a verdict kept inexactly leaves its key or bit unheld, which
      // the answers alone may not show (the memo then defers to the scan).
      if (++placements % 10 == 0) {
        ASSERT_OK(twins.memo.CheckInvariants());
      }
    };
    ASSERT_NO_FATAL_FAILURE(twins.Churn(ops, 1500, &placed, make, count));
    ASSERT_OK(twins.memo.CheckInvariants());
    EXPECT_GT(past_32, 50);
    EXPECT_GT(big_cpu, 50);
  }
}

// A request of one of four kinds, by `kind`: a GPU share (compute only), a
// whole GPU, a share of one GPU's memory and compute, or CPU-only (no GPU).
Request RequestOfKind(std::string id, int kind) {
  Request r;
  r.id = std::move(id);
  if (kind == 0) r.compute = 300;
  if (kind == 1) r.whole_gpus = 1;
  if (kind == 2) {
    r.gpu_count = 1;
    r.compute = 200;
    r.gpu_memory = 2;
  }
  return r;
}

// A node added goes into the tie order at its place, and the shapes that
// keep their nodes in ScoreSets move their bits along, one inserted rank at
// a time, when they are behind by at most a few dozen; further behind, or
// after many nodes at once, they fill the sets again. Nodes join here one,
// a few or a hundred at a time among places and releases, in a random tie
// order (seed 11) and in the order they came (seed 0: each new node last);
// shapes are asked often (a few ranks behind) and rarely (many behind),
// past several 64-rank words. The memo stays the scan's twin, and the
// invariants (each feasible verdict's bit in the sets) hold throughout.
TEST(ScoreMemoTest, NodesJoiningOneByOneKeepTheSetsExact) {
  for (uint64_t seed : {uint64_t{11}, uint64_t{0}}) {
    for (const char* name : {"fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering"}) {
      SCOPED_TRACE(absl::StrCat(name, " seed ", seed));
      Ops ops(std::hash<std::string>()(name) + seed);
      Twins twins(name);
      ClusterOptions options;
      options.tie_break_seed = seed;
      twins.memo = Cluster(options);
      twins.scan = Cluster(options);
      int nodes = 0;
      auto join = [&](int count) {
        for (int i = 0; i < count; ++i) {
          ASSERT_NO_FATAL_FAILURE(twins.AddNode(ops.MakeSharingNode(nodes++)));
        }
      };
      ASSERT_NO_FATAL_FAILURE(join(20));
      int step = 0;
      auto make = [&](int) {
        const std::string id = absl::StrCat("r", step++);
        if (step % 97 == 0) {  // A rare shape: its sets fall far behind.
          Request rare = RequestOfKind(id, 0);
          rare.compute = 100 * ops.Uniform(1, 3);
          rare.cpu = 3000;
          return rare;
        }
        Request r = RequestOfKind(id, ops.Uniform(0, 2));
        r.cpu = ops.Uniform(0, 2) * 2000;
        return r;
      };
      std::vector<std::string> placed;
      int placements = 0;
      auto check = [&](const Request&) {
        ++placements;
        if (step % 7 == 0) {
          ASSERT_OK(twins.memo.CheckInvariants());
        }
      };
      const int rounds = testing::Quick() ? 40 : 120;
      for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE(round);
        // A hundred at once at least mid-way, whatever the draws.
        const int pick = round == rounds / 2 ? 19 : ops.Uniform(0, 19);
        ASSERT_NO_FATAL_FAILURE(join(pick < 14 ? 1 : pick < 19 ? ops.Uniform(2, 5) : 100));
        ASSERT_NO_FATAL_FAILURE(twins.Churn(ops, ops.Uniform(2, 30), &placed, make, check));
      }
      ASSERT_OK(twins.memo.CheckInvariants());
      EXPECT_GT(nodes, 150);
      EXPECT_GT(placements, rounds * 4);
    }
  }
}

// A node removed moves the slots after it down by one; the memo keeps
// every other node's verdicts, change-log entries, ranks and tree keys,
// renumbered (ScoreMemo::NodeRemoved()). Nodes leave here one or a few at
// a time (their placements released first) among places, releases and
// joins, for every policy the memo serves, CPU-only requests included (the
// shared CPU orders), in a random tie order and in arrival order. The memo
// stays the scan's twin, and the invariants hold after each change.
TEST(ScoreMemoTest, NodesLeavingKeepTheMemoExact) {
  for (uint64_t seed : {uint64_t{11}, uint64_t{0}}) {
    for (const char* name :
         {"binpack", "spread", "fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering"}) {
      SCOPED_TRACE(absl::StrCat(name, " seed ", seed));
      Ops ops(std::hash<std::string>()(name) + seed + 3);
      Twins twins(name);
      ClusterOptions options;
      options.tie_break_seed = seed;
      twins.memo = Cluster(options);
      twins.scan = Cluster(options);
      std::vector<std::string> names;
      int nodes = 0;
      auto join = [&] {
        Node node = ops.MakeSharingNode(nodes++);
        names.push_back(node.name);
        ASSERT_NO_FATAL_FAILURE(twins.AddNode(node));
      };
      for (int i = 0; i < 150; ++i) ASSERT_NO_FATAL_FAILURE(join());
      std::vector<std::string> placed;
      auto leave = [&] {
        const size_t v = static_cast<size_t>(ops.Uniform(0, static_cast<int>(names.size()) - 1));
        const std::vector<std::string> held = twins.memo.FindNode(names[v])->requests;
        for (const std::string& id : held) {
          const auto it = std::find(placed.begin(), placed.end(), id);
          ASSERT_NE(it, placed.end());
          ASSERT_NO_FATAL_FAILURE(twins.Release(&placed, it - placed.begin()));
        }
        ASSERT_OK(twins.memo.RemoveNode(names[v]));
        ASSERT_OK(twins.scan.RemoveNode(names[v]));
        names.erase(names.begin() + static_cast<std::ptrdiff_t>(v));
      };
      int step = 0;
      auto make = [&](int) {
        Request r = RequestOfKind(absl::StrCat("r", step++), ops.Uniform(0, 3));
        r.cpu = ops.Uniform(r.whole_gpus + r.compute + r.gpu_count == 0 ? 1 : 0, 3) * 2000;
        // Shapes that differ only here share their group's evaluations.
        r.host_memory = ops.Uniform(0, 2) * 4096;
        if (ops.Chance(0.2)) r.node_selector = {{"pool", ops.Chance(0.5) ? "a" : "b"}};
        return r;
      };
      int placements = 0;
      auto count_placed = [&](const Request&) { ++placements; };
      int left = 0;
      const int rounds = testing::Quick() ? 40 : 120;
      for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE(round);
        ASSERT_NO_FATAL_FAILURE(
            twins.Churn(ops, ops.Uniform(2, 30), &placed, make, count_placed));
        const int pick = ops.Uniform(0, 9);
        const int count = pick < 6 ? 1 : pick < 8 ? 0 : ops.Uniform(2, 5);
        if (count == 0) {
          ASSERT_NO_FATAL_FAILURE(join());
        }
        for (int i = 0; i < count && names.size() > 4; ++i, ++left) {
          ASSERT_NO_FATAL_FAILURE(leave());
        }
        ASSERT_OK(twins.memo.CheckInvariants());
      }
      EXPECT_GT(left, rounds / 2);
      EXPECT_GT(placements, rounds * 4);
    }
  }
}

TEST(ScoreMemoTest, ManyShapesStayExact) {
  Cluster memo, scan;
  ScannedPolicy scanned(Make("bestfit"));
  auto policy = Make("bestfit");
  for (int i = 0; i < 1100; ++i) {
    Node node;
    node.name = "n" + std::to_string(i);
    node.gpus.assign(4, Gpu{16, "T4", "", true});
    node.cpu = 64000;
    node.labels["gpushare"] = "true";
    ASSERT_OK(memo.AddNode(node));
    ASSERT_OK(scan.AddNode(node));
  }
  const int shapes = testing::Quick() ? 500 : 6000;
  for (int i = 0; i < shapes; ++i) {
    Request r;
    r.id = "r" + std::to_string(i);
    r.compute = 1 + i % 997;
    r.cpu = (i / 997) % 5 * 10;
    absl::StatusOr<Placement> got = memo.Place(r, *policy);
    absl::StatusOr<Placement> want = scan.Place(r, scanned);
    ASSERT_EQ(got.ok(), want.ok()) << i;
    if (got.ok()) {
      ASSERT_EQ(*got, *want) << i;
    }
    if (i >= 40) {
      const std::string old = "r" + std::to_string(i - 40);
      ASSERT_EQ(memo.Release(old).ok(), scan.Release(old).ok());
    }
  }
  ASSERT_OK(memo.CheckInvariants());
}

// The change log is compacted when it outgrows max(2 x nodes, 4096) entries,
// and the cursors of the shapes (and CPU-only orders) not asked since move
// with it. Here one shape churns place and release on a few nodes, past
// several compactions, while rare shapes are asked every 301 steps, so that
// their cursors are moved in the log many times; each answer is checked
// against the scan. Moving a cursor to the end of the log instead (skipping
// what it had not met) makes the rare shapes answer from stale verdicts.
TEST(ScoreMemoTest, RareShapesStayExactAcrossLogCompactions) {
  for (const char* name : {"bestfit", "fgd", "binpack", "spread"}) {
    SCOPED_TRACE(name);
    Ops ops(std::hash<std::string>()(name) + 3);
    Twins twins(name);
    for (int i = 0; i < 30; ++i) {
      Node node;
      node.name = "n" + std::to_string(i);
      node.gpus.assign(4, Gpu{16, i % 2 == 0 ? "T4" : "A10", "", true});
      node.cpu = (8 + i % 3 * 8) * 1000;
      node.labels["gpushare"] = "true";
      ASSERT_NO_FATAL_FAILURE(twins.AddNode(node));
    }
    std::vector<std::string> churn, rare;
    const int total = testing::Quick() ? 12000 : 30000;
    int rare_asked = 0;
    for (int step = 0; step < total; ++step) {
      SCOPED_TRACE(step);
      Request r;
      r.id = absl::StrCat("r", step);
      if (step % 301 == 0) {
        // One of the rare shapes: GPU shares, whole GPUs of a model, CPU only.
        const int kind = ops.Uniform(0, 3);
        if (kind == 0) r.compute = 100 * ops.Uniform(1, 9);
        if (kind == 1) r.whole_gpus = 1, r.gpu_models = {"A10"};
        r.cpu = 1000 * ops.Uniform(1, 3);
        ASSERT_NO_FATAL_FAILURE(twins.Place(r, &rare));
        ++rare_asked;
        continue;
      }
      if (!churn.empty() && (churn.size() > 40 || ops.Chance(0.5))) {
        ASSERT_NO_FATAL_FAILURE(twins.ReleaseAny(ops, &churn));
        continue;
      }
      r.compute = 200;
      r.cpu = 1000 * ops.Uniform(1, 4);
      ASSERT_NO_FATAL_FAILURE(twins.Place(r, &churn));
      if (rare.size() > 20) {  // Keep room for the rare shapes.
        ASSERT_NO_FATAL_FAILURE(twins.Release(&rare, 0));
      }
    }
    ASSERT_OK(twins.memo.CheckInvariants());
    EXPECT_GT(rare_asked, 35);
  }
}

// A kernel policy whose score is NaN on some nodes: NaN has no place in the
// memo's ordered trees, so the memo declines such a shape and the scan
// answers, whatever it makes of NaN. Both clusters agree at every step.
class NanOnSomeNodesPolicy final : public fgd::KernelPolicy {
 public:
  std::string Name() const override { return "nan-on-some-nodes"; }
  double Score(const fgd::KTask& task, const fgd::KNode& node, const int* fitting,
               int num_fitting, int* gpus) override {
    fgd::LeastIdleGpus(task, node, fitting, num_fitting, gpus);
    const int64_t idle = fgd::IdleCompute(node);
    if (idle % 3000 == 0) {
      ++nans;
      return std::numeric_limits<double>::quiet_NaN();
    }
    return static_cast<double>(idle % 7000);
  }
  int nans = 0;  // NaN scores returned.
};

TEST(ScoreMemoTest, NanScoresAreLeftToTheScan) {
  Ops ops(11);
  NanOnSomeNodesPolicy policy;
  ScannedPolicy scanned(std::make_unique<NanOnSomeNodesPolicy>());
  Twins twins(&policy, &scanned);
  for (int i = 0; i < 40; ++i) {
    Node node = ops.MakeNode(i);
    node.labels["gpushare"] = "true";
    ASSERT_NO_FATAL_FAILURE(twins.AddNode(node));
  }
  std::vector<std::string> placed;
  auto make = [&](int step) {
    Request r;
    r.id = absl::StrCat("r", step);
    r.compute = 100 * ops.Uniform(1, 5);
    return r;
  };
  ASSERT_NO_FATAL_FAILURE(twins.Churn(ops, 3000, &placed, make, [](const Request&) {}));
  ASSERT_OK(twins.memo.CheckInvariants());
  EXPECT_GT(policy.nans, 20);  // 58 to several hundred, by the seed.
}

}  // namespace
}  // namespace gpushare
