// The Prometheus text exposition of gpushare-extender: families, escaping,
// cumulative histogram buckets, and the cluster gauges computed by the
// library (GPU memory per node and model, fragmentation).

#include "extender/metrics.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"

namespace gpushare::extender {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MetricsTest, CountersAreDescribedAndSummedPerLabelSet) {
  Metrics m;
  m.Declare("x_total", Metrics::Type::kCounter, "Things.\nSecond line \\ here.");
  m.Add("x_total", {{"verb", "bind"}});
  m.Add("x_total", {{"verb", "bind"}}, 2);
  m.Add("x_total", {{"verb", "filter"}});
  m.Add("undeclared_total", {});                // Ignored.
  m.Observe("x_total", {{"verb", "bind"}}, 1);  // Wrong type: ignored.
  EXPECT_EQ(m.Value("x_total", {{"verb", "bind"}}), 3);
  const std::string text = m.Render();
  EXPECT_EQ(text,
            "# HELP x_total Things.\\nSecond line \\\\ here.\n"
            "# TYPE x_total counter\n"
            "x_total{verb=\"bind\"} 3\n"
            "x_total{verb=\"filter\"} 1\n");
}

// Binds are counted by result; binds forwarded to the leader or refused by
// a follower are counted where that is decided, not here.
TEST(MetricsTest, RequestsAndBindResultsAreCounted) {
  Metrics m;
  DeclareExtenderMetrics(m);
  CountRequest(m, "filter", 200, R"({"Nodes":null})", false, 0.001);
  CountRequest(m, "bind", 200, R"({"Error":""})", false, 0.002);
  CountRequest(m, "bind", 200, R"({"Error":"no GPU has 7 free"})", false, 0.002);
  CountRequest(m, "bind", 200, "not json", false, 0.002);
  CountRequest(m, "bind", 400, "bad", false, 0.002);
  CountRequest(m, "bind", 500, "", false, 0.002);
  CountRequest(m, "bind", 200, R"({"Error":""})", true, 0.002);   // Forwarded.
  CountRequest(m, "bind", 503, "not the leader", false, 0.002);    // A follower's refusal.
  EXPECT_EQ(m.Value("gpushare_extender_requests_total", {{"route", "filter"}, {"code", "200"}}), 1);
  EXPECT_EQ(m.Value("gpushare_extender_requests_total", {{"route", "bind"}, {"code", "200"}}), 4);
  EXPECT_EQ(m.Value("gpushare_extender_requests_total", {{"route", "bind"}, {"code", "503"}}), 1);
  EXPECT_EQ(m.Value("gpushare_extender_binds_total", {{"result", "bound"}}), 1);
  EXPECT_EQ(m.Value("gpushare_extender_binds_total", {{"result", "refused"}}), 2);
  EXPECT_EQ(m.Value("gpushare_extender_binds_total", {{"result", "bad_request"}}), 1);
  EXPECT_EQ(m.Value("gpushare_extender_binds_total", {{"result", "error"}}), 1);
  EXPECT_THAT(m.Render(), HasSubstr("gpushare_extender_request_duration_seconds_count{route=\"bind\"} 7\n"));
  // Every family is described, even before its first series.
  for (const char* family : {"gpushare_extender_bind_api_results_total",
                             "gpushare_extender_api_requests_total",
                             "gpushare_extender_api_errors_total",
                             "gpushare_extender_objects_skipped_total"}) {
    EXPECT_THAT(m.Render(), HasSubstr(std::string("# TYPE ") + family + " counter\n"));
  }
}

TEST(MetricsTest, WatchRestartsAndTheLeaderAreReadAtScrapeTime) {
  LeaderSample alone_leader;
  alone_leader.leading = true;
  const std::string alone = RenderProcessGauges({}, alone_leader);
  EXPECT_THAT(alone, HasSubstr("gpushare_extender_leader{identity=\"\"} 1\n"));
  EXPECT_THAT(alone, Not(HasSubstr("gpushare_extender_leader_transitions")));

  LeaderSample follower;
  follower.identity = "replica-b";
  follower.transitions = 5;
  const std::string elected =
      RenderProcessGauges({{"nodes", 1, 2, 3}, {"pods", 0, 0, 4}}, follower);
  EXPECT_THAT(elected, HasSubstr("# TYPE gpushare_extender_watch_restarts_total counter\n"));
  EXPECT_THAT(elected, HasSubstr(
      "gpushare_extender_watch_restarts_total{resource=\"nodes\",reason=\"closed\"} 1\n"
      "gpushare_extender_watch_restarts_total{resource=\"nodes\",reason=\"expired\"} 2\n"
      "gpushare_extender_watch_restarts_total{resource=\"nodes\",reason=\"error\"} 3\n"));
  EXPECT_THAT(elected, HasSubstr(
      "gpushare_extender_watch_restarts_total{resource=\"pods\",reason=\"error\"} 4\n"));
  EXPECT_THAT(elected, HasSubstr("gpushare_extender_leader{identity=\"replica-b\"} 0\n"));
  EXPECT_THAT(elected, HasSubstr("gpushare_extender_leader_transitions 5\n"));
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(RenderLabels({{"a", "q\"b\\s\nn"}, {"b", ""}}), "a=\"q\\\"b\\\\s\\nn\",b=\"\"");
}

TEST(MetricsTest, HistogramBucketsAreCumulativeWithSumAndCount) {
  Metrics m;
  m.Declare("d_seconds", Metrics::Type::kHistogram, "Durations.", {0.1, 0.01, 1});
  for (double v : {0.005, 0.01, 0.05, 0.5, 7.0}) m.Observe("d_seconds", {{"route", "bind"}}, v);
  const std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("d_seconds_bucket{route=\"bind\",le=\"0.01\"} 2\n"));  // le is <=
  EXPECT_THAT(text, HasSubstr("d_seconds_bucket{route=\"bind\",le=\"0.10000000000000001\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("d_seconds_bucket{route=\"bind\",le=\"1\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("d_seconds_bucket{route=\"bind\",le=\"+Inf\"} 5\n"));
  const std::string sum = "d_seconds_sum{route=\"bind\"} ";
  ASSERT_NE(text.find(sum), std::string::npos);
  EXPECT_DOUBLE_EQ(std::stod(text.substr(text.find(sum) + sum.size())), 7.565);
  EXPECT_THAT(text, HasSubstr("d_seconds_count{route=\"bind\"} 5\n"));
}

TEST(MetricsTest, ClusterGaugesFollowTheLibrarysView) {
  Cluster cluster;
  auto node = [](const std::string& name, int gpus, int64_t memory, const std::string& model) {
    Node n;
    n.name = name;
    n.gpu_sharing = true;
    for (int i = 0; i < gpus; ++i) {
      Gpu g;
      g.memory = memory;
      g.model = model;
      n.gpus.push_back(g);
    }
    return n;
  };
  ASSERT_TRUE(cluster.AddNode(node("a", 1, 14, "T4")).ok());
  ASSERT_TRUE(cluster.AddNode(node("b", 2, 16, "V100")).ok());
  ASSERT_TRUE(cluster.AddNode(node("cpu-only", 0, 0, "")).ok());
  Request r;
  r.id = "default/p";
  r.gpu_memory = 10;
  ASSERT_TRUE(cluster.Place(r).ok());
  r.id = "default/q";
  r.gpu_memory = 12;
  auto q = cluster.Place(r);
  ASSERT_TRUE(q.ok());
  const std::string text = ClusterMetrics(cluster);
  EXPECT_THAT(text, HasSubstr("gpushare_node_gpu_memory_total_units{node=\"a\",model=\"T4\"} 14\n"));
  EXPECT_THAT(text, HasSubstr("gpushare_node_gpu_memory_total_units{node=\"b\",model=\"V100\"} 32\n"));
  EXPECT_THAT(text, Not(HasSubstr("cpu-only")));
  const NodeStatus* a = cluster.FindNode("a");
  const NodeStatus* b = cluster.FindNode("b");
  EXPECT_THAT(text, HasSubstr("gpushare_node_gpu_memory_allocated_units{node=\"a\",model=\"T4\"} " +
                              std::to_string(a->gpu_memory_used()) + "\n"));
  EXPECT_THAT(text, HasSubstr("gpushare_model_gpu_memory_allocated_units{model=\"V100\"} " +
                              std::to_string(b->gpu_memory_used()) + "\n"));
  EXPECT_EQ(a->gpu_memory_used() + b->gpu_memory_used(), 22);
  EXPECT_THAT(text, HasSubstr("gpushare_model_gpu_memory_total_units{model=\"T4\"} 14\n"));
  // Against the shapes placed now (10 and 12 units, half each).
  TargetWorkload target;
  target.resource = FragResource::kMemory;
  for (int64_t share : {10, 12}) {
    TargetTask t;
    t.gpu_share = share;
    t.gpu_count = 1;
    t.weight = 0.5;
    target.tasks.push_back(t);
  }
  const ClusterFragmentation f = Fragmentation(cluster, target);
  EXPECT_GT(f.amount, 0);
  const std::string key = "\ngpushare_gpu_memory_fragmentation_units ";
  const size_t at = text.find(key);
  ASSERT_NE(at, std::string::npos);
  EXPECT_NEAR(std::stod(text.substr(at + key.size())), f.amount, 1e-9);
  const std::string rkey = "\ngpushare_gpu_memory_fragmentation_ratio ";
  ASSERT_NE(text.find(rkey), std::string::npos);
  EXPECT_NEAR(std::stod(text.substr(text.find(rkey) + rkey.size())), f.rate, 1e-9);
  EXPECT_THAT(text, HasSubstr("# TYPE gpushare_gpu_memory_fragmentation_ratio gauge\n"));
}

TEST(MetricsTest, AnEmptyClusterHasNoFragmentation) {
  Cluster cluster;
  const std::string text = ClusterMetrics(cluster);
  EXPECT_THAT(text, HasSubstr("gpushare_gpu_memory_fragmentation_units 0\n"));
  EXPECT_THAT(text, HasSubstr("gpushare_gpu_memory_fragmentation_ratio 0\n"));
}

TEST(SharedRenderTest, EachCallSeesARenderThatStartedAfterIt) {
  int state = 0;
  SharedRender r([&] { return std::to_string(state); });
  EXPECT_EQ(r.Get(), "0");
  state = 1;
  EXPECT_EQ(r.Get(), "1");  // Never an older text.
  EXPECT_EQ(r.renders(), 2u);
}

TEST(SharedRenderTest, CallersArrivingDuringARenderShareTheNextOne) {
  std::mutex mu;
  std::condition_variable cv;
  int entered = 0;
  bool release = false;
  std::atomic<int> state{0};
  SharedRender r([&] {
    const std::string text = std::to_string(state.load());
    std::unique_lock lock(mu);
    ++entered;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return text;
  });
  std::string first;
  std::thread t0([&] { first = r.Get(); });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return entered == 1; });
  }
  // The first render has read state 0 and is blocked. Eight callers arrive
  // after a change: none may take the first render's text.
  state = 7;
  std::vector<std::string> got(8);
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) callers.emplace_back([&, i] { got[i] = r.Get(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  {
    std::lock_guard lock(mu);
    release = true;
  }
  cv.notify_all();
  t0.join();
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(first, "0");
  for (const std::string& g : got) EXPECT_EQ(g, "7");
  // The eight shared renders: at most one each, in practice one in all.
  EXPECT_LE(r.renders(), 9u);
  EXPECT_GE(r.renders(), 2u);
}

TEST(SharedRenderTest, AFailedRenderDoesNotBlockTheNext) {
  bool fail = true;
  SharedRender r([&]() -> std::string {
    if (fail) throw std::runtime_error("render failed");
    return "ok";
  });
  EXPECT_THROW(r.Get(), std::runtime_error);
  fail = false;
  EXPECT_EQ(r.Get(), "ok");
}

}  // namespace
}  // namespace gpushare::extender
