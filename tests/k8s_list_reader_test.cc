// The fast readers of whole Kubernetes lists (src/k8s/json_util.h) give the
// reference's result: the same pods and nodes, or the same error. On the
// samples, on variations that take every fallback (keys in another case,
// floats, nulls, duplicate keys, required affinity, bad quantities), and on
// damaged lists.

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "src/k8s/json_util.h"
#include "tests/testing/k8s_text.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::k8s {
namespace {

using ::gpushare::testing::ListText;
using ::gpushare::testing::NodeText;
using ::gpushare::testing::PodText;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Both readers on `text`; returns how many items the fast one read itself.
int ExpectPodReadersAgree(const std::string& text) {
  absl::StatusOr<std::vector<Pod>> reference = internal::ReadPodListReference(text);
  absl::StatusOr<std::vector<Pod>> fast = internal::ReadPodList(text);
  const int fast_items = internal::FastItemsOfLastRead();
  const std::string shown = text.size() > 400 ? text.substr(0, 400) + "..." : text;
  EXPECT_EQ(fast.ok(), reference.ok()) << (fast.ok() ? reference.status() : fast.status())
                                       << "\n" << shown;
  if (fast.ok() && reference.ok()) {
    EXPECT_EQ(ListText(*fast, PodText), ListText(*reference, PodText)) << shown;
  } else if (!fast.ok() && !reference.ok()) {
    EXPECT_EQ(fast.status(), reference.status()) << shown;
  }
  return fast_items;
}

int ExpectNodeReadersAgree(const std::string& text) {
  absl::StatusOr<std::vector<Node>> reference = internal::ReadNodeListReference(text);
  absl::StatusOr<std::vector<Node>> fast = internal::ReadNodeList(text);
  const int fast_items = internal::FastItemsOfLastRead();
  const std::string shown = text.size() > 400 ? text.substr(0, 400) + "..." : text;
  EXPECT_EQ(fast.ok(), reference.ok()) << (fast.ok() ? reference.status() : fast.status())
                                       << "\n" << shown;
  if (fast.ok() && reference.ok()) {
    EXPECT_EQ(ListText(*fast, NodeText), ListText(*reference, NodeText)) << shown;
  } else if (!fast.ok() && !reference.ok()) {
    EXPECT_EQ(fast.status(), reference.status()) << shown;
  }
  return fast_items;
}

const std::string& SamplePods() {
  static const std::string text =
      ReadFile(absl::StrCat(GPUSHARE_SOURCE_DIR, "/extender/samples/pods.json"));
  return text;
}
const std::string& SampleNodes() {
  static const std::string text =
      ReadFile(absl::StrCat(GPUSHARE_SOURCE_DIR, "/extender/samples/nodes.json"));
  return text;
}

TEST(K8sListReaderTest, SamplesAreReadFastAndAlike) {
  ASSERT_FALSE(SamplePods().empty());
  ASSERT_FALSE(SampleNodes().empty());
  absl::StatusOr<std::vector<Pod>> pods = internal::ReadPodListReference(SamplePods());
  ASSERT_OK(pods.status());
  absl::StatusOr<std::vector<Node>> nodes = internal::ReadNodeListReference(SampleNodes());
  ASSERT_OK(nodes.status());
  // Every sample pod without required node affinity, and every node, is read
  // by the fast reader itself.
  int plain_pods = 0;
  for (const Pod& p : *pods) plain_pods += p.required_node_affinity.empty() ? 1 : 0;
  EXPECT_EQ(ExpectPodReadersAgree(SamplePods()), plain_pods);
  EXPECT_EQ(ExpectNodeReadersAgree(SampleNodes()), static_cast<int>(nodes->size()));
}

TEST(K8sListReaderTest, CorpusObjectsAgree) {
  for (const char* name :
       {"node_sd-cluster-04.json", "node_sd-cluster-05.json", "node_v100-node.json",
        "node_whole_gpus.json", "pod_affinity_split.json", "pod_finished-job.json",
        "pod_waiting.json", "pod_web-0.json", "pod_whole_gpus.json"}) {
    const std::string item =
        ReadFile(absl::StrCat(GPUSHARE_SOURCE_DIR, "/fuzz/corpus/k8s_objects/", name));
    ASSERT_FALSE(item.empty()) << name;
    ExpectPodReadersAgree("[" + item + "]");
    ExpectNodeReadersAgree("{\"items\":[" + item + "," + item + "]}");
  }
}

// Each variation is applied to the samples (text replacement), and must read
// alike whichever reader takes it.
TEST(K8sListReaderTest, VariationsAgree) {
  const std::vector<std::pair<std::string, std::string>> variations = {
      {"\"metadata\"", "\"Metadata\""},
      {"\"name\"", "\"NAME\""},
      {"\"labels\"", "\"Labels\""},
      {"\"limits\"", "\"Limits\""},
      {"\"requests\"", "\"requests\":null,\"requests\""},
      {"\"annotations\":", "\"annotations\":{\"a\":1},\"annotations\":"},
      {"\"nodeName\":", "\"nodeName\":null,\"nodeName\":"},
      {"\"aliyun.com/gpu-mem\": \"", "\"aliyun.com/gpu-mem\": \"x"},
      {"\"aliyun.com/gpu-mem\":\"", "\"aliyun.com/gpu-mem\":\"x"},
      {"\"aliyun.com/gpu-mem\": \"3\"", "\"aliyun.com/gpu-mem\": 3.0"},
      {"\"aliyun.com/gpu-mem\": \"3\"", "\"aliyun.com/gpu-mem\": 3"},
      {"\"aliyun.com/gpu-mem\": \"14\"", "\"aliyun.com/gpu-mem\": null"},
      {"\"cpu\": \"", "\"cpu\": \"-"},
      {"\"status\": {", "\"status\": {\"phase\": 3, "},
      {"\"status\": {", "\"status\": 7, \"x\": {"},
      {"\"spec\": {", "\"spec\": {\"unschedulable\": true, "},
      {"\"spec\": {", "\"spec\": {\"unschedulable\": \"yes\", "},
      {"\"spec\": {", "\"spec\": {\"affinity\": {\"podAntiAffinity\": {}}, "},
      {"\"spec\": {", "\"spec\": {\"affinity\": 5, "},
      {"\"containers\": [", "\"containers\": [7, "},
      {"\"containers\": [", "\"containers\": [{\"name\": 7}, "},
      {"\"addresses\": [", "\"addresses\": [{\"type\": \"Hostname\", \"address\": \"h\"}, "},
      {"\"addresses\": [", "\"addresses\": [5, "},
      {"\"capacity\": {", "\"capacity\": {\"aliyun.com/gpu-count\": \"100\", "},
      {"\"capacity\": {", "\"capacity\": {\"aliyun.com/gpu-count\": \"0\", "},
      {"\"capacity\": {", "\"capacity\": {\"aliyun.com/gpu-count\": null, "},
      {"\"capacity\": {", "\"capacity\": null, \"x\": {"},
      {"\"items\": [", "\"Items\": [], \"items\": ["},
      {"\"items\": [", "\"items\": 5, \"x\": ["},
      {"\"kind\": \"Pod\"", "\"kind\": \"Pod\", \"big\": 123456789012345678901234567890"},
      {"\"namespace\": \"", "\"namespace\": \"\\u00e9"},
      {"gpushare", "gpu\\u0073hare"},
  };
  for (const auto& [from, to] : variations) {
    ExpectPodReadersAgree(absl::StrReplaceAll(SamplePods(), {{from, to}}));
    ExpectNodeReadersAgree(absl::StrReplaceAll(SampleNodes(), {{from, to}}));
  }
  // gpushare-device-plugin's annotations: GPU sizes and health, good and bad.
  const std::string uid = "\"uid\": \"node-uid-v100-node\",";
  for (const char* annotations :
       {R"({"gpushare.io/gpu-memory": "10,20,20,10", "gpushare.io/unhealthy-gpus": "1,3"})",
        R"({"gpushare.io/gpu-memory": "10,20,20,11"})", R"({"gpushare.io/gpu-memory": "60"})",
        R"({"gpushare.io/gpu-memory": "x,20,20,20"})", R"({"gpushare.io/unhealthy-gpus": "4"})",
        R"({"gpushare.io/unhealthy-gpus": ""})"}) {
    ExpectNodeReadersAgree(absl::StrReplaceAll(
        SampleNodes(), {{uid, absl::StrCat(uid, " \"annotations\": ", annotations, ",")}}));
  }
  for (const std::string& text :
       {std::string(""), std::string("[]"), std::string("{}"), std::string("{\"items\":null}"),
        std::string("5"), std::string("\"x\""), std::string("[1]"), std::string("[{}]"),
        std::string("\xef\xbb\xbf[]"), std::string("[] x")}) {
    ExpectPodReadersAgree(text);
    ExpectNodeReadersAgree(text);
  }
}

TEST(K8sListReaderTest, DamagedListsAgree) {
  absl::BitGen gen;
  const std::string bytes = "{}[],:\"\\0123456789-.eE tfnulGMKi";
  for (int round = 0; round < 300; ++round) {
    const bool pods = absl::Bernoulli(gen, 0.5);
    std::string text = pods ? SamplePods() : SampleNodes();
    for (int edits = absl::Uniform(gen, 1, 4); edits > 0 && !text.empty(); --edits) {
      const size_t at = absl::Uniform<size_t>(gen, 0, text.size());
      switch (absl::Uniform(gen, 0, 3)) {
        case 0: text[at] = bytes[absl::Uniform<size_t>(gen, 0, bytes.size())]; break;
        case 1: text.erase(at, 1); break;
        default: text.insert(at, 1, text[at]);
      }
    }
    if (pods) {
      ExpectPodReadersAgree(text);
    } else {
      ExpectNodeReadersAgree(text);
    }
  }
}

// RebuildCluster() reads through the fast readers: the state rebuilt from
// the texts is the one rebuilt from the reference's lists.
TEST(K8sListReaderTest, RebuildFromTextsMatchesRebuildFromReferenceLists) {
  const std::string text =
      ReadFile(absl::StrCat(GPUSHARE_SOURCE_DIR, "/fuzz/corpus/k8s_objects/rebuild_samples.txt"));
  const size_t cut = text.find('\f');
  ASSERT_NE(cut, std::string::npos);
  const std::string nodes_json = text.substr(0, cut);
  // The finished job, still running, holds its recorded GPU.
  const std::string pods_json = absl::StrReplaceAll(
      text.substr(cut + 1), {{"\"phase\":\"Succeeded\"", "\"phase\":\"Running\""}});
  RebuildReport report, expected_report;
  ASSERT_OK_AND_ASSIGN(Cluster c, RebuildCluster(nodes_json, pods_json, {}, &report));
  ASSERT_OK_AND_ASSIGN(std::vector<Node> nodes, internal::ReadNodeListReference(nodes_json));
  ASSERT_OK_AND_ASSIGN(std::vector<Pod> pods, internal::ReadPodListReference(pods_json));
  ASSERT_OK_AND_ASSIGN(Cluster expected, RebuildCluster(nodes, pods, {}, &expected_report));
  EXPECT_EQ(report.placed, 1);
  EXPECT_EQ(c.ToJson(), expected.ToJson());
  EXPECT_EQ(report.placed, expected_report.placed);
  EXPECT_EQ(report.warnings, expected_report.warnings);
  EXPECT_OK(c.CheckInvariants());
  // And ParsePodList() is the reader RebuildCluster() used.
  ASSERT_OK_AND_ASSIGN(std::vector<Pod> parsed, ParsePodList(pods_json));
  EXPECT_EQ(ListText(parsed, PodText), ListText(pods, PodText));
}

}  // namespace
}  // namespace gpushare::k8s
