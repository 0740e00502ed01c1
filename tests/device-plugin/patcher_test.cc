// Patcher (device-plugin/patcher.h): API writes off the kubelet's path.

#include "device-plugin/patcher.h"

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using namespace std::chrono_literals;

Patcher::Options Fast() {
  Patcher::Options o;
  o.backoff_initial = 1ms;
  o.backoff_max = 2ms;
  o.max_attempts = 4;
  return o;
}

TEST(PatcherTest, EnqueueNeverWaitsForTheServer) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> calls{0};
  Patcher patcher(
      [&](const Patcher::Write&) {
        ++calls;
        released.wait();  // An API server that does not answer.
        return absl::OkStatus();
      },
      Fast());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) patcher.Enqueue({"", "w", "/p", "{}"});
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);  // Not 100 stalled calls.
  EXPECT_FALSE(patcher.Drain(10ms));
  release.set_value();
  EXPECT_TRUE(patcher.Drain(30s));
  EXPECT_EQ(calls.load(), 100);
  EXPECT_EQ(patcher.stats().sent, 100);
}

TEST(PatcherTest, FailuresAreRetriedAndNotFoundIsDropped) {
  std::mutex mu;
  std::vector<std::string> seen;
  int failures_left = 2;
  Patcher patcher(
      [&](const Patcher::Write& w) {
        std::lock_guard lock(mu);
        seen.push_back(w.path);
        if (w.path == "/gone") return absl::NotFoundError("pods \"a\" not found");
        if (w.path == "/down") return absl::UnavailableError("connection refused");
        if (failures_left-- > 0) return absl::UnavailableError("timeout");
        return absl::OkStatus();
      },
      Fast());
  patcher.Enqueue({"", "flaky", "/flaky", "{}"});
  patcher.Enqueue({"", "gone", "/gone", "{}"});
  patcher.Enqueue({"", "down", "/down", "{}"});
  ASSERT_TRUE(patcher.Drain(30s));
  EXPECT_THAT(seen, ElementsAre("/flaky", "/flaky", "/flaky", "/gone", "/down", "/down", "/down",
                                "/down"));
  Patcher::Stats st = patcher.stats();
  EXPECT_EQ(st.sent, 1);
  EXPECT_EQ(st.dropped, 1);
  EXPECT_EQ(st.given_up, 1);
  EXPECT_EQ(st.retries, 2 + 3);
}

TEST(PatcherTest, TheLatestWriteOfAKeyWins) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::mutex mu;
  std::vector<std::string> bodies;
  Patcher patcher(
      [&](const Patcher::Write& w) {
        released.wait();
        std::lock_guard lock(mu);
        bodies.push_back(w.body);
        return absl::OkStatus();
      },
      Fast());
  patcher.Enqueue({"first", "", "/a", "0"});  // Being sent while the others queue.
  for (int i = 1; i <= 3; ++i) patcher.Enqueue({"node", "", "/node", std::to_string(i)});
  release.set_value();
  ASSERT_TRUE(patcher.Drain(30s));
  EXPECT_THAT(bodies, ElementsAre("0", "3"));
}

TEST(PatcherTest, AFullQueueDropsTheOldest) {
  std::promise<void> release, started;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  std::mutex mu;
  std::vector<std::string> bodies;
  Patcher::Options o = Fast();
  o.max_queue = 2;
  Patcher patcher(
      [&](const Patcher::Write& w) {
        if (first.exchange(false)) started.set_value();
        released.wait();
        std::lock_guard lock(mu);
        bodies.push_back(w.body);
        return absl::OkStatus();
      },
      o);
  patcher.Enqueue({"", "", "/", "busy"});
  started.get_future().wait();  // The worker holds "busy"; the queue is what follows.
  for (const char* b : {"1", "2", "3"}) patcher.Enqueue({"", "", "/", b});
  release.set_value();
  ASSERT_TRUE(patcher.Drain(30s));
  EXPECT_EQ(patcher.stats().dropped, 1);
  EXPECT_THAT(bodies, ElementsAre("busy", "2", "3"));
}

}  // namespace
}  // namespace gpushare::deviceplugin
