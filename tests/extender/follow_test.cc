// The extender following the API server's watches (extender/follow.h): what
// each event changes, when pending pods are retried (the requeuer's kick),
// nodes deleted while they hold placements, and the replay of a node's pods.

#include "extender/follow.h"

#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/extender/k8s_objects.h"

namespace gpushare::extender {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::BoundPod;
using testing::GpuNode;
using testing::GpuPod;

// A pod bound to `node` by another scheduler: no bind annotations.
json ForeignPod(const std::string& name, int units, const std::string& node) {
  json pod = GpuPod(name, units);
  pod["spec"]["nodeName"] = node;
  pod["status"]["phase"] = "Running";
  return pod;
}

class FollowTest : public ::testing::Test {
 protected:
  void Start(const std::vector<json>& nodes, const std::vector<json>& pods) {
    world_ = std::make_unique<testing::World>(nodes, pods);
    ASSERT_TRUE(world_->ext->RememberPods(world_->pods_json).ok());
    FollowerOptions o;
    o.pods_on_node = [this](const std::string& node) {
      std::vector<std::string> out;
      for (const json& p : bound_) {
        if (p["spec"].value("nodeName", "") == node) out.push_back(p.dump());
      }
      return out;
    };
    o.kick = [this] { ++kicks_; };
    o.out = &out_;
    o.err = &err_;
    follower_ = std::make_unique<Follower>(world_->ext.get(), std::move(o));
  }

  bool Placed(const std::string& pod) const {
    bool placed = false;
    world_->scheduler->Read(
        [&](const Cluster& c) { placed = c.GetPlacement("default/" + pod).ok(); });
    return placed;
  }

  std::vector<std::string> Nodes() const {
    std::vector<std::string> names;
    world_->scheduler->Read([&](const Cluster& c) { names = c.node_names(); });
    return names;
  }

  std::unique_ptr<testing::World> world_;
  std::unique_ptr<Follower> follower_;
  std::vector<json> bound_;  // What the pod watch has bound (pods_on_node).
  int kicks_ = 0;
  std::ostringstream out_, err_;
};

TEST_F(FollowTest, ADeleteThatFreesGpusKicksTheRequeuerAndOtherEventsDoNot) {
  const json a = BoundPod("a", 6, "n1", 0);
  Start({GpuNode("n1", 1, 16)}, {a});
  follower_->OnPodEvent("MODIFIED", a.dump());      // Nothing changes.
  follower_->OnPodEvent("ADDED", GpuPod("p", 4).dump());  // Pending: frees nothing.
  EXPECT_EQ(kicks_, 0);
  EXPECT_TRUE(Placed("a"));

  follower_->OnPodEvent("DELETED", a.dump());
  EXPECT_FALSE(Placed("a"));
  EXPECT_EQ(kicks_, 1);
  EXPECT_THAT(out_.str(), HasSubstr("pod event: 0 nodes added, 0 updated, 0 removed; 0 confirmed, "
                                    "1 released"));
  EXPECT_EQ(err_.str(), "");
}

// A GPU pod that gpushare did not place holds its node; its end lifts the
// hold, and the pods that kube-scheduler retried before the extender saw the
// delete are retried again.
TEST_F(FollowTest, AHoldLiftedKicksTheRequeuer) {
  Start({GpuNode("n1", 1, 16)}, {});
  const json foreign = ForeignPod("foreign", 4, "n1");
  follower_->OnPodEvent("ADDED", foreign.dump());
  ASSERT_TRUE(world_->ext->NodeHold("n1").has_value());
  const int after_hold = kicks_;
  follower_->OnPodEvent("DELETED", foreign.dump());
  EXPECT_FALSE(world_->ext->NodeHold("n1").has_value());
  EXPECT_EQ(kicks_, after_hold + 1);
}

// A node deleted while it holds a placement stays, cordoned, until its last
// pod ends; no event names it then, so the release removes it.
TEST_F(FollowTest, ANodeDeletedWhileHoldingAPlacementGoesWithItsLastPod) {
  const json n1 = GpuNode("n1", 1, 16), n2 = GpuNode("n2", 1, 16);
  const json a = BoundPod("a", 6, "n1", 0);
  Start({n1, n2}, {a});
  follower_->OnNodeEvent("DELETED", n1.dump());
  EXPECT_THAT(follower_->doomed(), ElementsAre("n1"));
  EXPECT_THAT(Nodes(), ElementsAre("n1", "n2"));
  EXPECT_THAT(err_.str(), HasSubstr("warning: "));

  follower_->OnPodEvent("DELETED", a.dump());
  EXPECT_THAT(follower_->doomed(), IsEmpty());
  EXPECT_THAT(Nodes(), ElementsAre("n2"));
  EXPECT_THAT(out_.str(), HasSubstr("node removed: 0 nodes added, 0 updated, 1 removed"));

  // Deleted again (a late event) or deleted while empty: gone, not doomed.
  follower_->OnNodeEvent("DELETED", n2.dump());
  EXPECT_THAT(follower_->doomed(), IsEmpty());
  EXPECT_THAT(Nodes(), IsEmpty());
}

// A node that comes back (or first appears after its pods) gets the pods
// the watch has bound to it replayed: their placements are restored.
TEST_F(FollowTest, ANodeThatAppearsGetsItsBoundPodsReplayed) {
  const json n1 = GpuNode("n1", 2, 16);
  Start({}, {});
  bound_ = {BoundPod("a", 6, "n1", 1), BoundPod("b", 16, "n1", 0)};
  follower_->OnNodeEvent("ADDED", n1.dump());
  EXPECT_THAT(Nodes(), ElementsAre("n1"));
  EXPECT_TRUE(Placed("a"));
  EXPECT_TRUE(Placed("b"));
  EXPECT_EQ(kicks_, 1);
  // The same node again: nothing to replay, no kick.
  follower_->OnNodeEvent("MODIFIED", n1.dump());
  EXPECT_EQ(kicks_, 1);
}

// A node deleted while holding a placement and added back before its pod
// ended is no longer doomed.
TEST_F(FollowTest, ANodeAddedBackIsNoLongerDoomed) {
  const json n1 = GpuNode("n1", 1, 16);
  const json a = BoundPod("a", 6, "n1", 0);
  Start({n1}, {a});
  follower_->OnNodeEvent("DELETED", n1.dump());
  ASSERT_THAT(follower_->doomed(), ElementsAre("n1"));
  follower_->OnNodeEvent("MODIFIED", n1.dump());
  EXPECT_THAT(follower_->doomed(), IsEmpty());
  follower_->OnPodEvent("DELETED", a.dump());
  EXPECT_THAT(Nodes(), ElementsAre("n1"));
}

TEST_F(FollowTest, AnEventTheExtenderRefusesIsAWarningAndChangesNothing) {
  const json a = BoundPod("a", 6, "n1", 0);
  Start({GpuNode("n1", 1, 16)}, {a});
  follower_->OnPodEvent("REMOVED", a.dump());
  follower_->OnNodeEvent("ADDED", "{not json");
  EXPECT_THAT(err_.str(), HasSubstr("warning: pod event REMOVED not applied: "));
  EXPECT_THAT(err_.str(), HasSubstr("warning: node event ADDED not applied: "));
  EXPECT_TRUE(Placed("a"));
  EXPECT_THAT(Nodes(), ElementsAre("n1"));
  EXPECT_EQ(kicks_, 0);
  // Each distinct warning is written once.
  const std::string before = err_.str();
  follower_->OnPodEvent("REMOVED", a.dump());
  EXPECT_EQ(err_.str(), before);
}

TEST_F(FollowTest, ALeadersResyncAppliesTheListsAndKicks) {
  const json a = BoundPod("a", 6, "n1", 0);
  Start({GpuNode("n1", 1, 16)}, {a});
  const uint64_t mark = world_->ext->SyncMark();
  const json nodes{{"kind", "NodeList"}, {"items", {GpuNode("n1", 1, 16), GpuNode("n2", 1, 8)}}};
  const json pods{{"kind", "PodList"}, {"items", json::array()}};
  absl::StatusOr<k8s::SyncReport> r = follower_->Resync(nodes.dump(), pods.dump(), mark);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->nodes_added, 1);
  EXPECT_EQ(r->released, 1);
  EXPECT_FALSE(Placed("a"));
  EXPECT_EQ(kicks_, 1);
  EXPECT_THAT(out_.str(), HasSubstr("leader resync: 1 nodes added"));

  // Lists that cannot be read change nothing and are not a kick.
  EXPECT_FALSE(follower_->Resync("[]", "{", mark).ok());
  EXPECT_EQ(kicks_, 1);
  EXPECT_THAT(Nodes(), ElementsAre("n1", "n2"));
}

// ---- The first lists -----------------------------------------------------------------

// One node or pod that cannot be read is left out, named in a warning and
// counted; the others start as usual, their placements restored.
TEST(StartFromListsTest, AnUnreadableObjectIsSkippedAndTheRestStarts) {
  json bad_node = GpuNode("n9", 1, 16);
  bad_node["status"]["capacity"]["aliyun.com/gpu-count"] = "65";
  json bad_pod = BoundPod("huge", 6, "n1", 0);
  bad_pod["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "5G";
  const json nodes{{"kind", "NodeList"}, {"items", {GpuNode("n1", 1, 16), bad_node}}};
  const json pods{{"kind", "PodList"}, {"items", {BoundPod("a", 6, "n1", 0), bad_pod}}};
  Metrics metrics;
  DeclareExtenderMetrics(metrics);
  std::ostringstream err;
  SchedulerOptions options;
  options.policy = "spread";
  absl::StatusOr<StartState> s =
      StartFromLists(nodes.dump(), pods.dump(), options, &metrics, err);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->report.nodes, 1);
  EXPECT_EQ(s->report.placed, 1);
  ASSERT_EQ(s->pods.size(), 1u);
  EXPECT_EQ(s->pods[0].name, "a");
  EXPECT_EQ(s->scheduler->options().policy, "spread");
  EXPECT_THAT(err.str(), HasSubstr("warning: node n9 skipped: "));
  EXPECT_THAT(err.str(), HasSubstr("warning: pod default/huge skipped: "));
  EXPECT_EQ(metrics.Value("gpushare_extender_objects_skipped_total", {{"kind", "node"}}), 1);
  EXPECT_EQ(metrics.Value("gpushare_extender_objects_skipped_total", {{"kind", "pod"}}), 1);
}

TEST(StartFromListsTest, ATextThatIsNotAListOrABadPolicyIsAnError) {
  const std::string nodes = json{{"kind", "NodeList"}, {"items", {GpuNode("n1", 1, 16)}}}.dump();
  const std::string pods = json{{"kind", "PodList"}, {"items", json::array()}}.dump();
  std::ostringstream err;
  absl::StatusOr<StartState> s = StartFromLists("{not json", pods, {}, nullptr, err);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("cannot read the nodes"));
  s = StartFromLists(nodes, "[1, 2", {}, nullptr, err);
  EXPECT_THAT(s.status().message(), HasSubstr("cannot read the pods"));
  SchedulerOptions options;
  options.policy = "no-such-policy";
  s = StartFromLists(nodes, pods, options, nullptr, err);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("no-such-policy"));
}

}  // namespace
}  // namespace gpushare::extender
