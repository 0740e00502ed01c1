// /readyz of gpushare-extender's router: 503 with the reason until the
// readiness check passes, then 200; /healthz does not depend on it.

#include "extender/server.h"

#include "extender/metrics.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

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

// An extender over one node "n" with one 16-unit GPU.
struct OneNode {
  OneNode()
      : scheduler(*Scheduler::Create(*k8s::RebuildCluster(
            R"({"items":[{"metadata":{"name":"n"},"status":{"capacity":{"aliyun.com/gpu-mem":"16","aliyun.com/gpu-count":"1"}}}]})",
            R"({"items":[]})"))),
        ext(scheduler.get()) {}
  std::unique_ptr<Scheduler> scheduler;
  k8s::Extender ext;
};

// In API mode a release from anyone could free a running pod's GPUs for
// another: the lifecycle routes are off there and change nothing.
TEST(RouteTest, LifecycleRoutesAreRefusedWhenOffAndChangeNothing) {
  OneNode one;
  k8s::Extender& ext = one.ext;
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
  OneNode one;
  k8s::Extender& ext = one.ext;
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
  OneNode one;
  k8s::Extender& ext = one.ext;
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

// One request on a new connection to 127.0.0.1:`port`: status and body.
std::pair<int, std::string> Post(int port, const std::string& target, const std::string& body) {
  namespace beast = boost::beast;
  boost::asio::io_context io;
  beast::tcp_stream stream(io);
  stream.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, "127.0.0.1");
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  beast::error_code ec;
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return {res.result_int(), res.body()};
}

// /plan runs on its own thread with a deadline: filters are answered while
// it searches, a second plan of the same client is refused with 429, and
// the plan answers at its deadline, not proven.
TEST(ServerTest, PlansRunApartWithADeadlineOnePerClient) {
  Cluster cluster;
  for (int n = 0; n < 200; ++n) {
    Node node;
    node.name = "n" + std::to_string(n);
    node.labels = {{"gpushare", "true"}};
    node.gpus.assign(3, Gpu{16, "T4", "", true});
    ASSERT_TRUE(cluster.AddNode(node).ok());
    for (int g = 0; g < 3; ++g) {
      Placement p;
      p.request_id = "default/" + node.name + "-" + std::to_string(g);
      p.node = node.name;
      p.gpus = {g};
      p.memory_per_gpu = 6;
      ASSERT_TRUE(cluster.Commit(p).ok());
    }
  }
  auto scheduler = Scheduler::Create(std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  k8s::ExtenderOptions eo;
  eo.plan_deadline_ms = 1500;
  k8s::Extender ext(scheduler->get(), eo);
  ServerOptions o;
  o.plan_threads = 1;
  o.max_plans = 2;
  auto server = Server::Create(&ext, o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = (*server)->Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  std::thread serving([&] { (*server)->Run(); });

  // Three GPUs freed take three moves: a search of two runs to its deadline.
  const std::string plan = R"({"FreeGPUs":3,"MaxMoves":2,"SearchBudget":1000000})";
  const auto t0 = std::chrono::steady_clock::now();
  std::pair<int, std::string> first;
  std::thread planning([&] { first = Post(*port, "/gpushare-scheduler/plan", plan); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::pair<int, std::string> second = Post(*port, "/gpushare-scheduler/plan", plan);
  EXPECT_EQ(second.first, 429) << second.second;
  const auto f0 = std::chrono::steady_clock::now();
  const std::pair<int, std::string> filter = Post(
      *port, "/gpushare-scheduler/filter",
      R"({"Pod":{"metadata":{"name":"p","uid":"u"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}},"NodeNames":["n0"]})");
  const auto filter_took = std::chrono::steady_clock::now() - f0;
  EXPECT_EQ(filter.first, 200) << filter.second;
  planning.join();
  const auto plan_took = std::chrono::steady_clock::now() - t0;
  (*server)->Stop();
  serving.join();
  // The filter did not wait for the plan (which was still searching).
  EXPECT_LT(filter_took, std::chrono::milliseconds(1000));
  EXPECT_GT(plan_took, filter_took + std::chrono::milliseconds(300));
  ASSERT_EQ(first.first, 200) << first.second;
  const nlohmann::json reply = nlohmann::json::parse(first.second);
  EXPECT_EQ(reply["Found"], false);
  EXPECT_EQ(reply["Proven"], false);
  EXPECT_NE(reply["Reason"].get<std::string>().find("deadline"), std::string::npos) << reply;
  EXPECT_GE(plan_took, std::chrono::milliseconds(1400));
  EXPECT_LT(plan_took, std::chrono::milliseconds(10'000));
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
