// /readyz of gpushare-extender's router: 503 with the reason until the
// readiness check passes, then 200; /healthz does not depend on it.

#include "extender/server.h"

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

}  // namespace
}  // namespace gpushare::extender
