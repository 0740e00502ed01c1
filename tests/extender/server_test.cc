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
