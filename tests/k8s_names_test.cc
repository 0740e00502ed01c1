// Kubernetes object names (ValidateDns1123Label / ValidateDns1123Subdomain)
// and the lenient list reads that keep one bad object from stopping a host
// (ParseNodeList / ParsePodList with `skipped`, Extender::Sync()).

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gpushare/kubernetes.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::k8s {
namespace {

using ::gpushare::testing::StatusIs;
using ::nlohmann::json;
using ::testing::HasSubstr;

TEST(NamesTest, LabelsFollowDns1123) {
  for (const std::string& ok : {std::string("default"), std::string("kube-system"),
                                std::string("a"), std::string("0"), std::string("a1-b2"),
                                std::string(63, 'x')}) {
    EXPECT_TRUE(ValidateDns1123Label("ns", ok).ok()) << ok;
  }
  for (const std::string& bad :
       {std::string(), std::string("Default"), std::string("-a"), std::string("a-"),
        std::string("a.b"), std::string("a_b"), std::string("a b"), std::string(64, 'x'),
        std::string("a\r\nb"), std::string("a\0b", 3), std::string("caf\xc3\xa9")}) {
    EXPECT_THAT(ValidateDns1123Label("PodNamespace", bad),
                StatusIs(absl::StatusCode::kInvalidArgument, "PodNamespace \""))
        << bad;
  }
}

TEST(NamesTest, SubdomainsFollowDns1123) {
  const std::string long_part(200, 'a');  // A part may pass 63; the whole may not pass 253.
  for (const std::string& ok : {std::string("web-0"), std::string("a.b.c"), std::string("10.0.0.1"),
                               long_part, std::string(253, 'a')}) {
    EXPECT_TRUE(ValidateDns1123Subdomain("name", ok).ok()) << ok;
  }
  for (const std::string& bad :
       {std::string(), std::string(254, 'a'), std::string("a..b"), std::string(".a"),
        std::string("a."), std::string("a.-b"), std::string("a/b"), std::string("A"),
        std::string("x HTTP/1.1\r\nHost: x")}) {
    EXPECT_FALSE(ValidateDns1123Subdomain("name", bad).ok()) << bad;
  }
}

TEST(NamesTest, TheMessageNamesTheFieldAndShowsControlBytesEscaped) {
  const absl::Status s =
      ValidateDns1123Subdomain("ExtenderBindingArgs.PodName", "x\r\nDELETE /victim");
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                          "ExtenderBindingArgs.PodName \"x\\r\\nDELETE /victim\" is not a valid "
                          "Kubernetes name"));
  EXPECT_EQ(std::string(s.message()).find_first_of("\r\n"), std::string::npos);
  // A huge value is cut.
  EXPECT_LT(ValidateDns1123Label("ns", std::string(100000, 'A')).message().size(), 400u);
}

json Node(const std::string& name, const std::string& count, int memory) {
  return json{{"metadata", {{"name", name}}},
              {"status",
               {{"capacity",
                 {{"aliyun.com/gpu-mem", std::to_string(memory)},
                  {"aliyun.com/gpu-count", count}}}}}};
}

json Pod(const std::string& name, const std::string& units, const std::string& node = "") {
  json pod{{"metadata", {{"name", name}, {"namespace", "default"}, {"uid", "uid-" + name}}},
           {"spec",
            {{"containers",
              {{{"name", "c"}, {"resources", {{"limits", {{"aliyun.com/gpu-mem", units}}}}}}}}}}};
  if (!node.empty()) pod["spec"]["nodeName"] = node;
  return pod;
}

std::string List(const std::vector<json>& items) { return json{{"items", items}}.dump(); }

TEST(LenientListTest, ABadNodeIsSkippedAndNamedTheOthersAreRead) {
  const std::string nodes = List({Node("a", "1", 16), Node("huge", "65", 65 * 16), Node("b", "2", 32)});
  // Strict: the whole list fails.
  EXPECT_THAT(ParseNodeList(nodes), StatusIs(absl::StatusCode::kInvalidArgument, "65 GPUs"));
  std::vector<SkippedItem> skipped;
  ASSERT_OK_AND_ASSIGN(std::vector<gpushare::Node> read, ParseNodeList(nodes, &skipped));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].name, "a");
  EXPECT_EQ(read[1].name, "b");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].name, "huge");
  EXPECT_THAT(skipped[0].message, HasSubstr("65 GPUs exceed the limit"));
  // Malformed JSON is still an error.
  EXPECT_THAT(ParseNodeList("{\"items\":[", &skipped),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(LenientListTest, ABadPodIsSkippedWithItsNamespace) {
  const std::string pods = List({Pod("ok", "2"), Pod("bad", "-3")});
  std::vector<SkippedItem> skipped;
  ASSERT_OK_AND_ASSIGN(std::vector<k8s::Pod> read, ParsePodList(pods, &skipped));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].name, "ok");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].name, "default/bad");
}

// Sync with a node that became unreadable: the node is neither removed nor
// changed, the pod on it keeps its GPUs, and the other nodes are synced.
TEST(LenientListTest, SyncLeavesAnUnreadableNodeAsItWas) {
  auto cluster = RebuildCluster(List({Node("a", "1", 16), Node("b", "1", 16)}), List({}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto scheduler = Scheduler::Create(*std::move(cluster));
  ASSERT_TRUE(scheduler.ok());
  Extender ext(scheduler->get());
  const json p = Pod("p", "4");
  ASSERT_OK_AND_ASSIGN(std::string f, ext.Filter(json{{"Pod", p}, {"NodeNames", {"a"}}}.dump()));
  ASSERT_OK_AND_ASSIGN(BindResult bound, ext.BindPod(BindTarget{"default", "p", "uid-p", "a"}));
  json bound_pod = Pod("p", "4", "a");
  bound_pod["metadata"]["annotations"] = json::parse(bound.patch)["metadata"]["annotations"];
  const uint64_t mark = ext.SyncMark();
  ASSERT_OK_AND_ASSIGN(
      SyncReport r,
      ext.Sync(List({Node("a", "65", 65 * 16), Node("b", "1", 16), Node("c", "1", 16)}),
               List({bound_pod}), mark));
  EXPECT_EQ(r.nodes_added, 1);
  EXPECT_EQ(r.nodes_removed, 0);
  EXPECT_EQ(r.released, 0);
  EXPECT_THAT(r.warnings, ::testing::Contains(HasSubstr("node a skipped")));
  (*scheduler)->Read([&](const Cluster& c) {
    ASSERT_NE(c.FindNode("a"), nullptr);
    EXPECT_EQ(c.FindNode("a")->gpus.size(), 1u);
    EXPECT_NE(c.FindPlacement("default/p"), nullptr);
    EXPECT_NE(c.FindNode("c"), nullptr);
  });
  // An unreadable pod keeps what it holds too.
  json broken = bound_pod;
  broken["spec"]["containers"][0]["resources"]["limits"]["aliyun.com/gpu-mem"] = "-4";
  ASSERT_OK_AND_ASSIGN(
      r, ext.Sync(List({Node("a", "1", 16), Node("b", "1", 16), Node("c", "1", 16)}),
                  List({broken}), ext.SyncMark()));
  EXPECT_EQ(r.released, 0);
  EXPECT_THAT(r.warnings, ::testing::Contains(HasSubstr("pod default/p skipped")));
  (*scheduler)->Read([&](const Cluster& c) { EXPECT_NE(c.FindPlacement("default/p"), nullptr); });
}

}  // namespace
}  // namespace gpushare::k8s
