// NodePodCache (device-plugin/pod_cache.h): the node's pods from watch events.

#include "device-plugin/pod_cache.h"

#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Pod(const std::string& name, const std::string& units, const std::string& uid = "") {
  return nlohmann::json(
             {{"metadata", {{"name", name}, {"namespace", "ml"}, {"uid", uid.empty() ? "u-" + name : uid}}},
              {"spec",
               {{"containers",
                 {{{"name", "c"}, {"resources", {{"limits", {{"aliyun.com/gpu-mem", units}}}}}}}}}},
              {"status", {{"phase", "Running"}}}})
      .dump();
}

std::vector<std::string> Names(const std::vector<NodePod>& pods) {
  std::vector<std::string> out;
  for (const NodePod& p : pods) out.push_back(p.id());
  return out;
}

TEST(NodePodCacheTest, FollowsAddsChangesAndDeletes) {
  NodePodCache cache;
  cache.Apply("ADDED", Pod("b", "3"));
  cache.Apply("ADDED", Pod("a", "2"));
  EXPECT_THAT(Names(cache.Pods()), ElementsAre("ml/a", "ml/b"));
  cache.Apply("MODIFIED", Pod("a", "5"));
  std::vector<NodePod> pods = cache.Pods();
  EXPECT_EQ(pods[0].containers[0].gpu_mem, 5);
  cache.Apply("DELETED", Pod("b", "3"));
  EXPECT_THAT(Names(cache.Pods()), ElementsAre("ml/a"));
  EXPECT_EQ(cache.size(), 1u);
}

// One pod that cannot be read is left out, named, and forgotten once fixed
// or deleted; the others stay served.
TEST(NodePodCacheTest, AnUnreadablePodAffectsOnlyItself) {
  NodePodCache cache;
  cache.Apply("ADDED", Pod("good", "3"));
  cache.Apply("ADDED", Pod("huge", "5G"));
  std::vector<std::string> skipped;
  EXPECT_THAT(Names(cache.Pods(&skipped)), ElementsAre("ml/good"));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("pod ml/huge container c"));
  cache.Apply("DELETED", Pod("huge", "5G"));
  skipped.clear();
  cache.Pods(&skipped);
  EXPECT_TRUE(skipped.empty());
  cache.Apply("ADDED", Pod("not-json-object", "1").substr(3));  // Malformed: ignored.
  EXPECT_EQ(cache.size(), 1u);
}

TEST(NodePodCacheTest, ThousandsOfPodsAreKeptParsedOnce) {
  NodePodCache cache;
  for (int i = 0; i < 5000; ++i) cache.Apply("ADDED", Pod("p" + std::to_string(i), "1"));
  EXPECT_EQ(cache.size(), 5000u);
  for (int i = 0; i < 5000; i += 2) cache.Apply("DELETED", Pod("p" + std::to_string(i), "1"));
  std::vector<NodePod> pods = cache.Pods();
  ASSERT_EQ(pods.size(), 2500u);
  EXPECT_EQ(pods.front().containers[0].gpu_mem, 1);
}

TEST(NodePodCacheTest, WaitForChangeWakesOnAnEvent) {
  NodePodCache cache;
  const uint64_t seen = cache.generation();
  EXPECT_FALSE(cache.WaitForChange(seen, std::chrono::milliseconds(1)));
  std::thread later([&] { cache.Apply("ADDED", Pod("a", "1")); });
  EXPECT_TRUE(cache.WaitForChange(seen, std::chrono::seconds(30)));
  later.join();
  EXPECT_NE(cache.generation(), seen);
}

TEST(NodePodCacheTest, TheWatchLeavesOutOtherNodesAndFinishedPods) {
  EXPECT_EQ(NodePodsWatchPath("gpu-1"),
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-1%2Cstatus.phase%21%3DSucceeded"
            "%2Cstatus.phase%21%3DFailed");
}

}  // namespace
}  // namespace gpushare::deviceplugin
