// gpushare-device-plugin's metrics: the exposition of a sample, the routes,
// and both served by the extender's HTTP server with a handler.

#include "device-plugin/metrics.h"

#include <string>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "extender/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpushare::deviceplugin {
namespace {

namespace http = boost::beast::http;
using ::testing::HasSubstr;

DevicePluginSample Sample() {
  DevicePluginSample s;
  s.gpus = {{0, "GPU-aaaa", "NVIDIA H200", 140, true}, {1, "GPU-bbbb", "NVIDIA H200", 140, false}};
  s.registered = true;
  s.allocations = 7;
  s.failed_allocations = 1;
  s.unidentified = 2;
  s.disagreements = 3;
  s.writes_sent = 9;
  s.writes_dropped = 4;
  s.writes_given_up = 5;
  s.write_retries = 6;
  s.watch_closed = 10;
  s.watch_expired = 11;
  s.watch_error = 12;
  return s;
}

TEST(DevicePluginMetricsTest, RendersEveryFamilyFromTheSample) {
  const std::string text = RenderDevicePluginMetrics(Sample());
  for (const char* line : {
           "# TYPE gpushare_device_plugin_registered gauge\ngpushare_device_plugin_registered 1\n",
           "gpushare_device_plugin_gpu_memory_units{gpu=\"0\",uuid=\"GPU-aaaa\",model=\"NVIDIA H200\"} 140\n",
           "gpushare_device_plugin_gpu_healthy{gpu=\"0\",uuid=\"GPU-aaaa\",model=\"NVIDIA H200\"} 1\n",
           "gpushare_device_plugin_gpu_healthy{gpu=\"1\",uuid=\"GPU-bbbb\",model=\"NVIDIA H200\"} 0\n",
           "# TYPE gpushare_device_plugin_allocations_total counter\n",
           "gpushare_device_plugin_allocations_total{result=\"served\"} 7\n",
           "gpushare_device_plugin_allocations_total{result=\"failed\"} 1\n",
           "gpushare_device_plugin_unsettled_allocations_total{reason=\"unidentified\"} 2\n",
           "gpushare_device_plugin_unsettled_allocations_total{reason=\"disagreement\"} 3\n",
           "gpushare_device_plugin_api_writes_total{result=\"sent\"} 9\n",
           "gpushare_device_plugin_api_writes_total{result=\"dropped\"} 4\n",
           "gpushare_device_plugin_api_writes_total{result=\"given_up\"} 5\n",
           "gpushare_device_plugin_api_write_retries_total 6\n",
           "gpushare_device_plugin_watch_restarts_total{reason=\"closed\"} 10\n",
           "gpushare_device_plugin_watch_restarts_total{reason=\"expired\"} 11\n",
           "gpushare_device_plugin_watch_restarts_total{reason=\"error\"} 12\n"}) {
    EXPECT_THAT(text, HasSubstr(line));
  }
  DevicePluginSample off;
  EXPECT_THAT(RenderDevicePluginMetrics(off), HasSubstr("gpushare_device_plugin_registered 0\n"));
}

TEST(DevicePluginMetricsTest, RoutesMetricsAndHealthOnly) {
  int samples = 0;
  auto sample = [&] {
    ++samples;
    return Sample();
  };
  extender::Reply r = DevicePluginRoute(http::verb::get, "/metrics?x=1", sample);
  EXPECT_EQ(r.status, http::status::ok);
  EXPECT_EQ(r.content_type, extender::kMetricsContentType);
  EXPECT_THAT(r.body, HasSubstr("gpushare_device_plugin_allocations_total"));
  EXPECT_EQ(samples, 1);
  r = DevicePluginRoute(http::verb::get, "/healthz", sample);
  EXPECT_EQ(r.status, http::status::ok);
  EXPECT_EQ(r.body, "{\"status\":\"ok\"}");
  EXPECT_EQ(DevicePluginRoute(http::verb::post, "/metrics", sample).status,
            http::status::method_not_allowed);
  EXPECT_EQ(DevicePluginRoute(http::verb::get, "/gpushare-scheduler/inspect", sample).status,
            http::status::not_found);
  EXPECT_EQ(samples, 1);  // Only /metrics takes a sample.
}

std::pair<int, std::string> Get(int port, const std::string& target) {
  boost::asio::io_context io;
  boost::beast::tcp_stream stream(io);
  stream.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(stream, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res);
  return {res.result_int(), res.body()};
}

TEST(DevicePluginMetricsTest, TheServerServesAHandlerWithoutAnExtender) {
  extender::ServerOptions o;
  EXPECT_FALSE(extender::Server::Create(nullptr, o).ok());  // Neither an extender nor a handler.
  o.io_threads = 1;
  o.worker_threads = 1;
  o.handler = [](http::verb method, std::string_view target, std::string_view) {
    return DevicePluginRoute(method, target, [] { return Sample(); });
  };
  auto server = extender::Server::Create(nullptr, o);
  ASSERT_TRUE(server.ok()) << server.status();
  auto port = (*server)->Listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();
  std::thread serving([&] { (*server)->Run(); });
  const auto [status, body] = Get(*port, "/metrics");
  EXPECT_EQ(status, 200);
  EXPECT_THAT(body, HasSubstr("gpushare_device_plugin_gpu_healthy{gpu=\"1\""));
  EXPECT_EQ(Get(*port, "/healthz").first, 200);
  EXPECT_EQ(Get(*port, "/gpushare-scheduler/filter").first, 404);
  (*server)->Stop();
  serving.join();
}

}  // namespace
}  // namespace gpushare::deviceplugin
