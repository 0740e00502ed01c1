// POST /gpushare-scheduler/plan: the read-only defragmentation planner of
// gpushare-extender, through the same router kube-scheduler's calls take.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "extender/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"
#include "tests/extender/k8s_objects.h"

namespace gpushare::extender {
namespace {

namespace http = boost::beast::http;
using nlohmann::json;
using ::testing::HasSubstr;
using testing::BoundPod;
using testing::GpuNode;
using testing::GpuPod;

constexpr char kPlan[] = "/gpushare-scheduler/plan";

// The extender's world, with its plan route and its Inspect view.
struct World : testing::World {
  using testing::World::World;
  Reply Post(const json& body) { return Route(*ext, http::verb::post, kPlan, body.dump()); }
  std::string Inspect() { return *ext->Inspect(); }
};

// n1 holds a (6 of 16), n2 holds b (8 of 16): a pod of 12 fits nowhere
// until a joins b (or b joins a).
World Fragmented() {
  return World({GpuNode("n1", 1, 16), GpuNode("n2", 1, 16)},
               {BoundPod("a", 6, "n1", 0), BoundPod("b", 8, "n2", 0)});
}

TEST(PlanRouteTest, OneMoveMakesThePendingPodFitAndNothingChanges) {
  World w = Fragmented();
  const std::string before = w.Inspect();
  Reply r = w.Post({{"Pod", GpuPod("big", 12)}, {"MaxMoves", 2}});
  ASSERT_EQ(r.status, http::status::ok) << r.body;
  const json plan = json::parse(r.body);
  EXPECT_EQ(plan["Found"], true);
  EXPECT_EQ(plan["Proven"], true);
  ASSERT_EQ(plan["Moves"].size(), 1u);
  const json& m = plan["Moves"][0];
  EXPECT_EQ(m["PodNamespace"], "default");
  // Whichever pod moves, it lands beside the other and the pod of 12 takes
  // the GPU it left.
  const std::string from = m["From"]["Node"], to = m["To"]["Node"];
  EXPECT_NE(from, to);
  EXPECT_EQ(m["PodName"], from == "n1" ? "a" : "b");
  EXPECT_EQ(plan["Then"]["Node"], from);
  EXPECT_EQ(plan["Then"]["GPUs"], json::array({0}));
  // The same answer as the library's planner on the same state.
  auto cluster = k8s::RebuildCluster(w.nodes_json, w.pods_json);
  ASSERT_TRUE(cluster.ok());
  auto pod = k8s::ParsePod(GpuPod("big", 12).dump());
  ASSERT_TRUE(pod.ok());
  auto lib = cluster->PlanMigrations(pod->request, 2);
  ASSERT_TRUE(lib.ok());
  ASSERT_EQ(lib->moves.size(), 1u);
  EXPECT_EQ(lib->moves[0].from.node, from);
  // Read-only: the extender's state is what it was.
  EXPECT_EQ(w.Inspect(), before);
  EXPECT_TRUE(w.scheduler->CheckInvariants().ok());
}

TEST(PlanRouteTest, NoPlanWithinMaxMovesSaysWhy) {
  World w = Fragmented();
  const json plan = json::parse(w.Post({{"Pod", GpuPod("big", 12)}, {"MaxMoves", 0}}).body);
  EXPECT_EQ(plan["Found"], false);
  EXPECT_EQ(plan["Proven"], true);
  EXPECT_TRUE(plan["Moves"].empty());
  EXPECT_THAT(plan["Reason"].get<std::string>(), HasSubstr("no plan of at most 0 moves"));
  // 17 units fit no GPU of 16, however many pods move.
  const json never = json::parse(w.Post({{"Pod", GpuPod("huge", 17)}, {"MaxMoves", 3}}).body);
  EXPECT_EQ(never["Found"], false);
  EXPECT_EQ(never["Proven"], true);
  // A pod that fits now needs no move.
  const json now = json::parse(w.Post({{"Pod", GpuPod("small", 8)}}).body);
  EXPECT_EQ(now["Found"], true);
  EXPECT_TRUE(now["Moves"].empty());
  EXPECT_EQ(now["Then"]["Node"], "n2");  // Binpack: the fuller GPU.
}

TEST(PlanRouteTest, APodSeenByFilterIsFoundByName) {
  World w = Fragmented();
  const json args{{"Pod", GpuPod("big", 12)}, {"NodeNames", {"n1", "n2"}}};
  ASSERT_EQ(Route(*w.ext, http::verb::post, "/gpushare-scheduler/filter", args.dump()).status,
            http::status::ok);
  Reply r = w.Post({{"PodNamespace", "default"}, {"PodName", "big"}});
  ASSERT_EQ(r.status, http::status::ok) << r.body;
  EXPECT_EQ(json::parse(r.body)["Moves"].size(), 1u);
  // The namespace defaults to "default".
  EXPECT_EQ(json::parse(w.Post({{"PodName", "big"}}).body)["Found"], true);
  Reply unknown = w.Post({{"PodNamespace", "ml"}, {"PodName", "big"}});
  EXPECT_EQ(unknown.status, http::status::not_found);
  EXPECT_THAT(json::parse(unknown.body)["Error"].get<std::string>(), HasSubstr("'ml/big'"));
}

TEST(PlanRouteTest, FreeGpusGoal) {
  World w({GpuNode("n1", 2, 16), GpuNode("n2", 1, 16)},
          {BoundPod("a", 6, "n1", 0), BoundPod("b", 8, "n1", 1), BoundPod("c", 2, "n2", 0)});
  const json one = json::parse(w.Post({{"FreeGPUs", 1}}).body);
  EXPECT_EQ(one["Found"], true);
  EXPECT_EQ(one["FreeGPUs"], 1);
  EXPECT_EQ(one["Moves"].size(), 1u);
  const json two = json::parse(w.Post({{"FreeGPUs", 2}, {"MaxMoves", 3}}).body);
  EXPECT_EQ(two["Found"], true);
  EXPECT_EQ(two["Moves"].size(), 2u);  // All 16 units on one GPU.
  const json three = json::parse(w.Post({{"FreeGPUs", 3}, {"MaxMoves", 3}}).body);
  EXPECT_EQ(three["Found"], false);
  EXPECT_EQ(three["Proven"], true);
}

TEST(PlanRouteTest, AReservationInProgressNeverMoves) {
  // n1 holds a (6 of 16), n2 holds b (12 of 16), n3 (8) is empty: a pod of
  // 12 fits once a moves to n3; b can go nowhere.
  const std::vector<json> nodes = {GpuNode("n1", 1, 16), GpuNode("n2", 1, 16),
                                   GpuNode("n3", 1, 8)};
  World confirmed(nodes, {BoundPod("a", 6, "n1", 0), BoundPod("b", 12, "n2", 0)});
  const json plan =
      json::parse(confirmed.Post({{"Pod", GpuPod("big", 12)}, {"MaxMoves", 2}}).body);
  ASSERT_EQ(plan["Found"], true);
  ASSERT_EQ(plan["Moves"].size(), 1u);
  EXPECT_EQ(plan["Moves"][0]["PodName"], "a");
  EXPECT_EQ(plan["Moves"][0]["To"]["Node"], "n3");

  // The same state, but a's bind is in progress (reserved, not confirmed).
  World reserved(nodes, {BoundPod("b", 12, "n2", 0)});
  const json args{{"Pod", GpuPod("a", 6)}, {"NodeNames", {"n1"}}};
  ASSERT_EQ(
      Route(*reserved.ext, http::verb::post, "/gpushare-scheduler/filter", args.dump()).status,
      http::status::ok);
  const json bind{{"PodName", "a"}, {"PodNamespace", "default"}, {"PodUID", "uid-a"},
                  {"Node", "n1"}};
  ASSERT_EQ(
      Route(*reserved.ext, http::verb::post, "/gpushare-scheduler/bind", bind.dump()).status,
      http::status::ok);
  ASSERT_TRUE(reserved.scheduler->IsReserved("default/a"));
  const json none =
      json::parse(reserved.Post({{"Pod", GpuPod("big", 12)}, {"MaxMoves", 2}}).body);
  EXPECT_EQ(none["Found"], false);
  EXPECT_EQ(none["Proven"], true);
  // With no confirmed placement at all, the reason says nothing may move.
  World lone(nodes, {});
  ASSERT_EQ(Route(*lone.ext, http::verb::post, "/gpushare-scheduler/filter", args.dump()).status,
            http::status::ok);
  ASSERT_EQ(Route(*lone.ext, http::verb::post, "/gpushare-scheduler/bind", bind.dump()).status,
            http::status::ok);
  const json nothing = json::parse(lone.Post({{"FreeGPUs", 3}, {"MaxMoves", 2}}).body);
  EXPECT_EQ(nothing["Found"], false);
  EXPECT_THAT(nothing["Reason"].get<std::string>(), HasSubstr("no confirmed placement may move"));
}

TEST(PlanRouteTest, BadRequestsNameTheBadValueAndChangeNothing) {
  World w = Fragmented();
  const std::string before = w.Inspect();
  struct Case {
    std::string body;
    http::status status;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"{", http::status::bad_request, "not valid JSON"},
      {"[1]", http::status::bad_request, "JSON object"},
      {json{{"Pod", GpuPod("big", 12)}, {"MaxMoves", 17}}.dump(), http::status::bad_request,
       "MaxMoves is 17"},
      {json{{"Pod", GpuPod("big", 12)}, {"MaxMoves", "2"}}.dump(), http::status::bad_request,
       "MaxMoves is \"2\""},
      {json{{"Pod", GpuPod("big", 12)}, {"SearchBudget", 0}}.dump(), http::status::bad_request,
       "SearchBudget is 0"},
      {json{{"FreeGPUs", -1}}.dump(), http::status::bad_request, "FreeGPUs is -1"},
      {json{{"Pod", GpuPod("big", 12)}, {"FreeGPUs", 1}}.dump(), http::status::bad_request,
       "exactly one goal"},
      {json{{"MaxMoves", 1}}.dump(), http::status::bad_request, "exactly one goal"},
      {json{{"PodNamespace", "x"}, {"FreeGPUs", 1}}.dump(), http::status::bad_request,
       "PodNamespace 'x'"},
      {json{{"Pod", GpuPod("cpu-only", 0)}}.dump(), http::status::bad_request, "no GPU"},
      {json{{"Pod", BoundPod("a", 6, "n1", 0)}}.dump(), http::status::conflict,
       "already bound to node 'n1'"},
  };
  for (const Case& c : cases) {
    Reply r = Route(*w.ext, http::verb::post, kPlan, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    EXPECT_THAT(json::parse(r.body)["Error"].get<std::string>(), HasSubstr(c.says)) << c.body;
  }
  Reply get = Route(*w.ext, http::verb::get, kPlan, "");
  EXPECT_EQ(get.status, http::status::method_not_allowed);
  EXPECT_EQ(RouteName(kPlan), "plan");
  EXPECT_EQ(w.Inspect(), before);
}

}  // namespace
}  // namespace gpushare::extender
