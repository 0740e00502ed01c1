// The "dra" policies: Kubernetes' DRA allocator chooses the GPUs inside a
// node first fit, in index order; "dra" leaves the node to kube-scheduler's
// LeastAllocated CPU score, "dra+<name>" to <name> scoring the GPUs DRA
// will take. The compact form (what the simulator runs) against the
// wrapper through Evaluate() (src/policies/dra_policy.h).
#include "src/policies/dra_policy.h"

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;

// A share of one GPU (testing::Shared) with host CPU.
Request Share(const std::string& id, int64_t memory, int64_t cpu = 1000) {
  Request r = testing::Shared(id, memory);
  r.cpu = cpu;
  return r;
}

Node WithCpu(Node node, int64_t cpu) {
  node.cpu = cpu;
  node.host_memory = 65536;
  return node;
}

std::unique_ptr<Policy> Make(const std::string& name) {
  absl::StatusOr<std::unique_ptr<Policy>> p = MakePolicy(name);
  EXPECT_TRUE(p.ok()) << name << ": " << p.status();
  return p.ok() ? *std::move(p) : nullptr;
}

TEST(DraDevicesTest, TheFirstThatFitInIndexOrder) {
  EXPECT_THAT(policies::DraDevices(1, {1, 3}), ElementsAre(1));
  EXPECT_THAT(policies::DraDevices(2, {0, 2, 5}), ElementsAre(0, 2));
  EXPECT_THAT(policies::DraDevices(0, {0, 1}), ElementsAre());
}

// Free memory GPU 0: 8 of 16, GPU 1: 4 of 16. A request for 4 units:
// binpack fills GPU 1 (tightest); DRA's allocator takes GPU 0, the first
// with room, whoever chose the node.
TEST(DraPolicyTest, TheAllocatorTakesTheFirstGpuWithRoomNotTheTightest) {
  for (const std::string name : {"binpack", "dra+binpack", "dra", "dra+fgd", "dra+spread"}) {
    Cluster c;
    ASSERT_OK(c.AddNode(WithCpu(SharedNode("n", {16, 16}), 64000)));
    ASSERT_OK_AND_ASSIGN(Placement a, c.Place(Share("a", 8), "binpack"));
    ASSERT_OK_AND_ASSIGN(Placement b, c.Place(Share("b", 12), "binpack"));
    ASSERT_THAT(a.gpus, ElementsAre(0));
    ASSERT_THAT(b.gpus, ElementsAre(1));
    std::unique_ptr<Policy> policy = Make(name);
    ASSERT_NE(policy, nullptr);
    ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Share("c", 4), *policy));
    EXPECT_THAT(p.gpus, ElementsAre(name == "binpack" ? 1 : 0)) << name;
    ASSERT_OK(c.CheckInvariants());
  }
}

// Two GPUs over four: the first two with room, skipping a full one.
TEST(DraPolicyTest, SeveralGpusAreTheFirstThatFit) {
  Cluster c;
  ASSERT_OK(c.AddNode(WithCpu(SharedNode("n", {16, 16, 16, 16}), 64000)));
  ASSERT_OK_AND_ASSIGN(Placement w, c.Place(testing::Exclusive("whole", 1), "binpack"));
  ASSERT_THAT(w.gpus, ElementsAre(0));
  const Request pair = testing::Shared("pair", 8, 2);
  std::unique_ptr<Policy> policy = Make("dra+spread");
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(pair, *policy));
  EXPECT_THAT(p.gpus, ElementsAre(1, 2));
}

// kube-scheduler alone prefers the node with the most CPU left (no default
// score counts DRA devices) and opens an idle GPU there; GpuShare's binpack
// fills the used GPU.
TEST(DraPolicyTest, DraAloneChoosesTheNodeByFreeCpu) {
  Cluster c;
  ASSERT_OK(c.AddNode(WithCpu(SharedNode("a", {16}), 32000)));
  ASSERT_OK(c.AddNode(WithCpu(SharedNode("b", {16}), 32000)));
  ASSERT_OK_AND_ASSIGN(Placement busy, c.Place(Share("busy", 12, 30000), "binpack"));
  const std::string idle = busy.node == "a" ? "b" : "a";
  std::unique_ptr<Policy> dra = Make("dra");
  std::unique_ptr<Policy> dra_binpack = Make("dra+binpack");
  ASSERT_OK_AND_ASSIGN(Placement by_dra, c.Plan(Share("x", 4), *dra));
  ASSERT_OK_AND_ASSIGN(Placement by_gpushare, c.Plan(Share("x", 4), *dra_binpack));
  EXPECT_EQ(by_dra.node, idle) << "2 of 32 cores free on " << busy.node;
  EXPECT_EQ(by_gpushare.node, busy.node);
}

TEST(DraPolicyTest, NamesAreListedAndBadOnesNamed) {
  const std::vector<std::string> names = PolicyNames();
  EXPECT_THAT(names, Contains("dra"));
  EXPECT_THAT(names, Contains("dra+fgdpack"));
  EXPECT_THAT(names, Contains("dra+binpack"));
  EXPECT_THAT(names, ::testing::Not(Contains("dra+dra")));
  for (const std::string& name : names) {
    std::unique_ptr<Policy> p = Make(name);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->Name(), name);
  }
  EXPECT_THAT(MakePolicy("dra+nope"), StatusIs(absl::StatusCode::kInvalidArgument,
                                               "policy 'dra+nope': unknown policy 'nope'"));
  EXPECT_THAT(MakePolicy("dra+dra"), StatusIs(absl::StatusCode::kInvalidArgument,
                                              "not 'dra'"));
  EXPECT_THAT(MakePolicy("dra+dra+fgd"),
              StatusIs(absl::StatusCode::kInvalidArgument, "not 'dra+fgd'"));
  EXPECT_THAT(MakePolicy("dra+"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           "unknown policy ''"));
}

// The compact form (a KernelPolicy, as the simulator's engine runs it)
// places exactly as the wrapper through Evaluate() does, request after
// request on a shared cluster.
class DraFormsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DraFormsTest, CompactFormMatchesTheReferenceWrapper) {
  const std::string inner = GetParam();
  PolicyOptions po;
  ASSERT_OK_AND_ASSIGN(TargetWorkload target, TypicalTasks(testing::GeneratedRequests(300, 5)));
  po.fgd_target = std::make_shared<TargetWorkload>(std::move(target));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> fast, MakePolicy("dra+" + inner, po));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> inner_policy, MakePolicy(inner, po));
  std::unique_ptr<Policy> reference = policies::NewDraReferencePolicy(std::move(inner_policy));
  Cluster a;
  Cluster b;
  for (const Node& n : testing::GeneratedNodes(10, 3)) {
    ASSERT_OK(a.AddNode(n));
    ASSERT_OK(b.AddNode(n));
  }
  // Departures too: without them GPUs fill in index order, and the first
  // GPU with room is mostly also the fullest, so the forms could not differ.
  std::mt19937_64 rng(9);
  std::vector<std::string> live;
  int placed = 0;
  for (const Request& r : testing::GeneratedRequests(400, 4)) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      ASSERT_OK(a.Release(live[k]));
      ASSERT_OK(b.Release(live[k]));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    absl::StatusOr<Placement> pa = a.Place(r, *fast);
    absl::StatusOr<Placement> pb = b.Place(r, *reference);
    ASSERT_EQ(pa.ok(), pb.ok()) << r;
    if (!pa.ok()) continue;
    ++placed;
    live.push_back(r.id);
    ASSERT_EQ(*pa, *pb) << r;
  }
  EXPECT_GT(placed, 100);
  ASSERT_OK(a.CheckInvariants());
}

INSTANTIATE_TEST_SUITE_P(NodePolicies, DraFormsTest,
                         ::testing::Values("fgd", "fgdcpu", "fgdpack", "bestfit", "gpupacking",
                                           "random"));

}  // namespace
}  // namespace gpushare
