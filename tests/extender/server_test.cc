// /readyz of gpushare-extender's router: 503 with the reason until the
// readiness check passes, then 200; /healthz does not depend on it.

#include "extender/server.h"

#include "extender/metrics.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"

namespace gpushare::extender {
namespace {

namespace http = boost::beast::http;

TEST(RouteTest, ReadyzFollowsTheReadinessCheck) {
  auto cluster = k8s::RebuildCluster("{\"items\":[]}", "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok());
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  bool listed = false;
  const ReadinessCheck ready = [&]() -> absl::Status {
    if (listed) return absl::OkStatus();
    return absl::UnavailableError("waiting for the first list of /api/v1/pods");
  };
  Reply r = Route(ext, http::verb::get, "/readyz", "", ready);
  EXPECT_EQ(r.status, http::status::service_unavailable);
  EXPECT_EQ(nlohmann::json::parse(r.body)["Error"], "waiting for the first list of /api/v1/pods");
  EXPECT_EQ(Route(ext, http::verb::get, "/healthz", "", ready).status, http::status::ok);
  listed = true;
  EXPECT_EQ(Route(ext, http::verb::get, "/readyz?verbose", "", ready).status, http::status::ok);
  // Without a check (files mode) it is ready.
  EXPECT_EQ(Route(ext, http::verb::get, "/readyz", "").status, http::status::ok);
}

TEST(RouteTest, BeforeBindMayAnswerInsteadAndMetricsAreServed) {
  auto cluster = k8s::RebuildCluster("{\"items\":[]}", "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok());
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  bool leader = false;
  RouteHooks hooks;
  std::string seen;
  hooks.before_bind = [&](std::string_view target,
                          std::string_view body) -> std::optional<Reply> {
    seen = std::string(target) + " " + std::string(body);
    if (leader) return std::nullopt;
    return Reply{http::status::service_unavailable,
                 k8s::ErrorJson(absl::UnavailableError("follower (leader: replica-a)"))};
  };
  hooks.metrics = [] { return std::string("# TYPE x counter\nx 1\n"); };
  const std::string bind = R"({"PodName":"p","PodNamespace":"default","PodUID":"u","Node":"n"})";
  Reply r = Route(ext, http::verb::post, "/gpushare-scheduler/bind", bind, hooks);
  EXPECT_EQ(r.status, http::status::service_unavailable);
  EXPECT_EQ(nlohmann::json::parse(r.body)["Error"], "follower (leader: replica-a)");
  EXPECT_EQ(seen, "/gpushare-scheduler/bind " + bind);
  // The leader goes on to the extender (the pod was never seen: an error in the reply).
  leader = true;
  r = Route(ext, http::verb::post, "/gpushare-scheduler/bind", bind, hooks);
  EXPECT_EQ(r.status, http::status::ok);
  EXPECT_NE(nlohmann::json::parse(r.body)["Error"], "");
  // Other verbs are served by followers too.
  leader = false;
  EXPECT_EQ(Route(ext, http::verb::post, "/gpushare-scheduler/filter",
                  R"({"Pod":{"metadata":{"name":"p"}},"NodeNames":[]})", hooks)
                .status,
            http::status::ok);
  r = Route(ext, http::verb::get, "/metrics", "", hooks);
  EXPECT_EQ(r.status, http::status::ok);
  EXPECT_EQ(r.body, "# TYPE x counter\nx 1\n");
  EXPECT_EQ(r.content_type, kMetricsContentType);
  EXPECT_EQ(Route(ext, http::verb::post, "/metrics", "", hooks).status,
            http::status::method_not_allowed);
  EXPECT_EQ(Route(ext, http::verb::get, "/metrics", "").status, http::status::not_found);
}

// In API mode a release from anyone could free a running pod's GPUs for
// another: the lifecycle routes are off there and change nothing.
TEST(RouteTest, LifecycleRoutesAreRefusedWhenOffAndChangeNothing) {
  auto cluster = k8s::RebuildCluster(
      R"({"items":[{"metadata":{"name":"n"},"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1"}}}]})",
      "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  const std::string pod =
      R"({"metadata":{"name":"p","namespace":"default","uid":"u"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}})";
  ASSERT_EQ(Route(ext, http::verb::post, "/gpushare-scheduler/filter",
                  R"({"Pod":)" + pod + R"(,"NodeNames":["n"]})").status,
            http::status::ok);
  Reply bound = Route(ext, http::verb::post, "/gpushare-scheduler/bind",
                      R"({"PodName":"p","PodNamespace":"default","PodUID":"u","Node":"n"})");
  ASSERT_EQ(bound.status, http::status::ok);
  ASSERT_EQ(nlohmann::json::parse(bound.body)["Error"], "");
  const std::string before = Route(ext, http::verb::get, "/gpushare-scheduler/inspect", "").body;
  RouteHooks api_mode;
  api_mode.lifecycle_routes = false;
  for (const char* verb : {"release", "forget", "confirm"}) {
    Reply r = Route(ext, http::verb::post, std::string("/gpushare-scheduler/") + verb,
                    R"({"PodNamespace":"default","PodName":"p"})", api_mode);
    EXPECT_EQ(r.status, http::status::forbidden) << verb;
    EXPECT_NE(nlohmann::json::parse(r.body)["Error"].get<std::string>().find("is off"),
              std::string::npos);
    EXPECT_EQ(Route(ext, http::verb::get, "/gpushare-scheduler/inspect", "").body, before);
  }
  // Files mode (the default) serves them.
  Reply r = Route(ext, http::verb::post, "/gpushare-scheduler/release",
                  R"({"PodNamespace":"default","PodName":"p"})");
  EXPECT_EQ(r.status, http::status::ok);
  EXPECT_NE(Route(ext, http::verb::get, "/gpushare-scheduler/inspect", "").body, before);
}

// Every route that takes a pod or node name refuses one the API server could
// never have issued, with a 400 naming the field, before any state changes.
TEST(RouteTest, EveryRouteRefusesNamesKubernetesWouldRefuse) {
  auto cluster = k8s::RebuildCluster(
      R"({"items":[{"metadata":{"name":"n"},"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1"}}}]})",
      "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok());
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  const std::string before = Route(ext, http::verb::get, "/gpushare-scheduler/inspect", "").body;
  const std::string evil = "x HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nDELETE /victim";
  auto pod = [](const std::string& ns, const std::string& name) {
    return R"({"metadata":{"name":")" + name + R"(","namespace":")" + ns +
           R"(","uid":"u"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}})";
  };
  struct Case {
    const char* route;
    std::string body;
    const char* field;
  };
  const Case cases[] = {
      {"filter", R"({"Pod":)" + pod("default", evil) + R"(,"NodeNames":["n"]})",
       "ExtenderArgs.Pod metadata.name"},
      {"filter", R"({"Pod":)" + pod("Default", "p") + R"(,"NodeNames":["n"]})",
       "ExtenderArgs.Pod metadata.namespace"},
      {"prioritize", R"({"Pod":)" + pod("default", "p") + R"(,"NodeNames":["n/../x"]})",
       "ExtenderArgs.NodeNames item"},
      {"bind", R"({"PodName":")" + evil + R"(","PodNamespace":"default","PodUID":"u","Node":"n"})",
       "ExtenderBindingArgs.PodName"},
      {"bind", R"({"PodName":"p","PodNamespace":"a/b","PodUID":"u","Node":"n"})",
       "ExtenderBindingArgs.PodNamespace"},
      {"bind", R"({"PodName":"p","PodNamespace":"default","PodUID":"u","Node":"n\r\n"})",
       "ExtenderBindingArgs.Node"},
      {"preempt", R"({"Pod":)" + pod("default", "P") + R"(,"NodeNameToMetaVictims":{}})",
       "ExtenderPreemptionArgs.Pod metadata.name"},
      {"release", R"({"PodNamespace":"default","PodName":")" + evil + R"("})",
       "release request PodName"},
      {"confirm", R"({"PodNamespace":"-x","PodName":"p"})", "confirm request PodNamespace"},
      {"forget", R"({"PodNamespace":"default","PodName":"p_q"})", "forget request PodName"},
      {"plan", R"({"PodNamespace":"default","PodName":"a..b"})", "plan request PodName"},
  };
  for (const Case& c : cases) {
    Reply r = Route(ext, http::verb::post, std::string("/gpushare-scheduler/") + c.route, c.body);
    EXPECT_EQ(r.status, http::status::bad_request) << c.route << " " << r.body;
    const std::string error = nlohmann::json::parse(r.body)["Error"];
    EXPECT_NE(error.find(c.field), std::string::npos) << c.route << ": " << error;
    EXPECT_NE(error.find("is not a valid Kubernetes name"), std::string::npos) << error;
    EXPECT_EQ(error.find('\r'), std::string::npos);
    EXPECT_EQ(error.find('\n'), std::string::npos);
  }
  EXPECT_EQ(Route(ext, http::verb::get, "/gpushare-scheduler/inspect", "").body, before);
}

// A node named twice in NodeNames is answered once.
TEST(RouteTest, RepeatedNodeNamesAreAnsweredOnce) {
  auto cluster = k8s::RebuildCluster(
      R"({"items":[{"metadata":{"name":"n"},"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1"}}}]})",
      "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok());
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  nlohmann::json names = nlohmann::json::array();
  for (int i = 0; i < 1000; ++i) names.push_back(i % 2 ? "n" : "m");
  const std::string body =
      R"({"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}},"NodeNames":)" +
      names.dump() + "}";
  Reply f = Route(ext, http::verb::post, "/gpushare-scheduler/filter", body);
  ASSERT_EQ(f.status, http::status::ok) << f.body;
  const nlohmann::json reply = nlohmann::json::parse(f.body);
  EXPECT_EQ(reply["NodeNames"], nlohmann::json::array({"n"}));
  EXPECT_EQ(reply["FailedNodes"].size(), 1u);
  Reply p = Route(ext, http::verb::post, "/gpushare-scheduler/prioritize", body);
  ASSERT_EQ(p.status, http::status::ok);
  EXPECT_EQ(nlohmann::json::parse(p.body).size(), 2u);
}

TEST(RouteTest, UnknownAndWrongMethodsGet405) {
  auto cluster = k8s::RebuildCluster("{\"items\":[]}", "{\"items\":[]}");
  ASSERT_TRUE(cluster.ok());
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::Extender ext(scheduler->get());
  for (const char* path : {"/healthz", "/readyz", "/version", "/gpushare-scheduler/filter",
                           "/nowhere"}) {
    EXPECT_EQ(Route(ext, http::verb::unknown, path, "").status, http::status::method_not_allowed)
        << path;
    EXPECT_EQ(Route(ext, http::verb::delete_, path, "").status, http::status::method_not_allowed)
        << path;
  }
  for (const char* path : {"/healthz", "/readyz", "/version"}) {
    EXPECT_EQ(Route(ext, http::verb::post, path, "").status, http::status::method_not_allowed);
    EXPECT_EQ(Route(ext, http::verb::get, path, "").status, http::status::ok);
  }
}

TEST(RouteTest, RouteNamesAreBounded) {
  EXPECT_EQ(RouteName("/gpushare-scheduler/bind"), "bind");
  EXPECT_EQ(RouteName("/gpushare-scheduler/filter?x=1"), "filter");
  EXPECT_EQ(RouteName("/gpushare-scheduler/inspect/node-1"), "inspect");
  EXPECT_EQ(RouteName("/gpushare-scheduler/../../etc"), "other");
  EXPECT_EQ(RouteName("/metrics"), "metrics");
  EXPECT_EQ(RouteName("/readyz?verbose"), "readyz");
  EXPECT_EQ(RouteName("/random-scan"), "other");
}

}  // namespace
}  // namespace gpushare::extender
