// A follower's binds go to the leader: a real gpushare-extender Server plays
// the leader; the forwarder must pass the bind on once, marked, and return
// the leader's reply, and answer 503 when it may not or cannot forward.

#include "extender/forward.h"

#include <atomic>
#include <utility>

#include <boost/asio.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::extender {
namespace {

namespace http = boost::beast::http;
using ::nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json PodJson(const std::string& name, int units) {
  return json{{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
              {"spec",
               {{"containers",
                 json::array({{{"name", "main"},
                               {"resources",
                                {{"limits", {{"aliyun.com/gpu-mem", std::to_string(units)}}}}}}})}}}};
}

class ForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const json node{{"metadata", {{"name", "n1"}, {"labels", {{"gpushare", "true"}}}}},
                    {"spec", json::object()},
                    {"status",
                     {{"capacity",
                       {{"aliyun.com/gpu-mem", "14"}, {"aliyun.com/gpu-count", "1"}}}}}};
    auto cluster = k8s::RebuildCluster(json{{"items", {node}}}.dump(), "{\"items\":[]}");
    ASSERT_OK(cluster);
    auto scheduler = Scheduler::Create(*std::move(cluster));
    ASSERT_OK(scheduler);
    scheduler_ = *std::move(scheduler);
    leader_ext_ = std::make_unique<k8s::Extender>(scheduler_.get());
    ServerOptions o;
    o.before_bind = [this](std::string_view target, std::string_view) -> std::optional<Reply> {
      std::lock_guard lock(mu_);
      leader_saw_.emplace_back(target);
      return std::nullopt;
    };
    auto server = Server::Create(leader_ext_.get(), o);
    ASSERT_OK(server);
    leader_ = *std::move(server);
    auto port = leader_->Listen("127.0.0.1", 0);
    ASSERT_OK(port);
    leader_url_ = "http://127.0.0.1:" + std::to_string(*port);
    thread_ = std::thread([this] { leader_->Run(); });
    // The leader has seen the pod (kube-scheduler's filter went there).
    ASSERT_OK(leader_ext_->Filter(
        json{{"Pod", PodJson("p", 6)}, {"NodeNames", {"n1"}}}.dump()));
  }
  void TearDown() override {
    leader_->Stop();
    thread_.join();
  }

  std::vector<std::string> Saw() {
    std::lock_guard lock(mu_);
    return leader_saw_;
  }

  LeaderView View() {
    LeaderView v;
    v.may_bind = [this] { return may_bind_; };
    v.holder = [this] { return holder_; };
    v.holder_url = [this] { return url_; };
    v.describe = [this] { return "follower (leader: " + holder_ + ")"; };
    v.identity = "b";
    return v;
  }
  ForwardOptions Options() {
    ForwardOptions o;
    o.timeout = std::chrono::milliseconds(3000);
    o.count = [this](const char* r) { counted_.emplace_back(r); };
    return o;
  }

  const std::string bind_ = R"({"PodName":"p","PodNamespace":"default","PodUID":"uid-p","Node":"n1"})";
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<k8s::Extender> leader_ext_;
  std::unique_ptr<Server> leader_;
  std::string leader_url_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> leader_saw_;
  std::vector<std::string> counted_;
  bool may_bind_ = false;
  std::string holder_ = "a";
  std::string url_;
};

TEST_F(ForwardTest, TheLeaderBindsAForwardedBindAndItsReplyComesBack) {
  url_ = leader_url_;
  BindForwarder f(View(), Options());
  std::optional<Reply> r = f.BeforeBind("/gpushare-scheduler/bind", bind_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, http::status::ok);
  EXPECT_TRUE(r->forwarded);
  const json reply = json::parse(r->body);
  EXPECT_EQ(reply["Error"], "") << r->body;
  EXPECT_EQ(reply["Placement"]["node"], "n1") << r->body;
  EXPECT_THAT(Saw(), ElementsAre(kForwardedBindTarget));
  // The leader's state holds it: 6 of 14 units.
  int64_t used = -1;
  scheduler_->Read([&](const Cluster& c) { used = c.FindNode("n1")->gpu_memory_used(); });
  EXPECT_EQ(used, 6);
  EXPECT_THAT(counted_, ElementsAre("forwarded"));
}

TEST_F(ForwardTest, TheLeaderBindsItselfWithoutForwarding) {
  may_bind_ = true;
  url_ = leader_url_;
  BindForwarder f(View(), Options());
  EXPECT_FALSE(f.BeforeBind("/gpushare-scheduler/bind", bind_).has_value());
  EXPECT_TRUE(Saw().empty());
  EXPECT_TRUE(counted_.empty());
}

TEST_F(ForwardTest, RefusesWith503WhenItCannotOrMustNotForward) {
  BindForwarder f(View(), Options());
  auto refused = [&](const char* target, const char* why) {
    std::optional<Reply> r = f.BeforeBind(target, bind_);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, http::status::service_unavailable);
    EXPECT_FALSE(r->forwarded);
    EXPECT_THAT(json::parse(r->body)["Error"].get<std::string>(), HasSubstr(why));
  };
  // No URL on the Lease.
  refused("/gpushare-scheduler/bind", "knows no leader");
  // Already forwarded once: never bounced on.
  url_ = leader_url_;
  refused(kForwardedBindTarget, "forwarded bind");
  // The Lease names this replica (it is syncing, or just lost it).
  holder_ = "b";
  refused("/gpushare-scheduler/bind", "knows no leader");
  // A leader that cannot be reached.
  holder_ = "a";
  url_ = "http://127.0.0.1:1";
  refused("/gpushare-scheduler/bind", "forwarding the bind to http://127.0.0.1:1 failed");
  EXPECT_TRUE(Saw().empty());
  EXPECT_EQ(counted_, std::vector<std::string>(4, "not_leader"));
}

// A host that is not the leader (the Lease names it; it answers anything):
// each connection gets `reply`, a whole raw HTTP response, then is closed.
class ForeignHost {
 public:
  explicit ForeignHost(std::string reply)
      : reply_(std::move(reply)), acceptor_(io_, {boost::asio::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] {
      for (;;) {
        boost::asio::ip::tcp::socket socket(io_);
        boost::system::error_code ec;
        acceptor_.accept(socket, ec);
        if (ec || stop_) return;
        std::string request;
        char buf[4096];
        // Headers, then the Content-Length the request announced.
        while (request.find("\r\n\r\n") == std::string::npos) {
          const size_t n = socket.read_some(boost::asio::buffer(buf), ec);
          if (ec) break;
          request.append(buf, n);
        }
        boost::asio::write(socket, boost::asio::buffer(reply_), ec);
        socket.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      }
    });
  }
  ~ForeignHost() {
    stop_ = true;
    boost::system::error_code ec;
    boost::asio::ip::tcp::socket poke(io_);
    poke.connect(acceptor_.local_endpoint(), ec);
    thread_.join();
  }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
  }

 private:
  std::string reply_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::string RawReply(int status, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n"
         "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" +
         body;
}

// What another host answers is checked, capped and never passed on.
TEST_F(ForwardTest, AForeignHostCannotAnswerForTheLeader) {
  struct Case {
    std::string reply;
    const char* why;
  };
  const Case cases[] = {
      // "Bound", from a host that is not a gpushare leader, but not a bind result.
      {RawReply(200, R"(["SECRET-1"])"), "did not answer with a bind result"},
      {RawReply(200, R"({"Error":7,"x":"SECRET-2"})"), "did not answer with a bind result"},
      {RawReply(200, "SECRET-3 not json"), "did not answer with a bind result"},
      // Its error bodies are not echoed.
      {RawReply(500, R"({"Error":"SECRET-4"})"), "failed (UNAVAILABLE)"},
      {RawReply(403, "SECRET-5"), "failed (PERMISSION_DENIED)"},
      // A huge reply is refused past 1 MiB, not read into memory.
      {RawReply(200, R"({"Error":")" + std::string(2 << 20, 'a') + "\"}"),
       "failed (RESOURCE_EXHAUSTED)"},
  };
  for (const Case& c : cases) {
    ForeignHost host(c.reply);
    url_ = host.url();
    BindForwarder f(View(), Options());
    std::optional<Reply> r = f.BeforeBind("/gpushare-scheduler/bind", bind_);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, http::status::service_unavailable) << c.why;
    EXPECT_FALSE(r->forwarded);
    const std::string error = json::parse(r->body)["Error"];
    EXPECT_THAT(error, HasSubstr(c.why));
    EXPECT_EQ(error.find("SECRET"), std::string::npos) << error;
    EXPECT_LT(r->body.size(), 1000u);
  }
  // A bind result is passed on rebuilt from its fields: nothing else travels.
  ForeignHost host(RawReply(200, R"({"Error":"","Placement":{"node":"n1"},"Extra":"SECRET-6"})"));
  url_ = host.url();
  BindForwarder f(View(), Options());
  std::optional<Reply> r = f.BeforeBind("/gpushare-scheduler/bind", bind_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, http::status::ok);
  EXPECT_EQ(json::parse(r->body), json::parse(R"({"Error":"","Placement":{"node":"n1"}})"));
}

TEST_F(ForwardTest, AReplicaServingTlsForwardsOnlyOverTls) {
  url_ = leader_url_;  // http://
  ForwardOptions o = Options();
  o.require_https = true;
  BindForwarder f(View(), o);
  std::optional<Reply> r = f.BeforeBind("/gpushare-scheduler/bind", bind_);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, http::status::service_unavailable);
  EXPECT_THAT(json::parse(r->body)["Error"].get<std::string>(), HasSubstr("is not https://"));
  EXPECT_TRUE(Saw().empty());
}

}  // namespace
}  // namespace gpushare::extender
