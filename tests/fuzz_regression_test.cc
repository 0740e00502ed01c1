// Inputs found by the fuzz targets (fuzz/), kept as regression tests.

#include <string>

#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;

// openb_fuzzer: a node name from a CSV that is not UTF-8 made ToJson() throw
// nlohmann's type_error 316 out of the library. Bad bytes are now written as
// U+FFFD, and the snapshot loads.
TEST(FuzzRegressionTest, SnapshotOfNamesThatAreNotUtf8) {
  ASSERT_OK_AND_ASSIGN(std::vector<Node> nodes,
                       ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\n"
                                       "openb-node-00\xe1\x07,64000,262144,2,P100\n"));
  Cluster c;
  ASSERT_OK(c.AddNode(nodes[0]));
  Node labelled = SharedNode("n\xff", {8}, "T\xc3");
  labelled.labels["zone\xfe"] = "a\x80";
  ASSERT_OK(c.AddNode(labelled));
  Request r;
  r.id = "pod-\xc0";
  r.gpu_memory = 2;
  ASSERT_OK(c.Place(r).status());

  std::string json;
  ASSERT_NO_THROW(json = c.ToJson());
  ASSERT_NO_THROW(c.ToJson(2));
  EXPECT_THAT(json, HasSubstr("openb-node-00\xef\xbf\xbd\\u0007"));
  ASSERT_OK_AND_ASSIGN(Cluster back, Cluster::FromJson(json));
  EXPECT_OK(back.CheckInvariants());
  EXPECT_EQ(back.ToJson(), json);
  EXPECT_NE(back.FindNode("n\xef\xbf\xbd"), nullptr);
  EXPECT_NE(back.FindPlacement("pod-\xef\xbf\xbd"), nullptr);
}

// k8s_objects_fuzzer: a node listed twice made RebuildCluster() return the
// cluster's AlreadyExists; kubernetes.h promises InvalidArgument for a
// malformed list.
TEST(FuzzRegressionTest, RebuildWithANodeListedTwiceIsInvalidArgument) {
  const std::string node =
      R"({"metadata":{"name":"sd-cluster-05"},"status":{"capacity":{"aliyun.com/gpu-mem":"14"}}})";
  EXPECT_THAT(k8s::RebuildCluster("[" + node + "," + node + "]", "[]"),
              StatusIs(absl::StatusCode::kInvalidArgument, "sd-cluster-05"));
}

// http_fuzzer: a request path that is not UTF-8 (POST /gpushare-s\xefheduler/x)
// went into the 404 body through ErrorJson(), whose dump() threw type_error
// 316 out of extender::Route() and ended the whole extender process. Bad
// bytes are now written as U+FFFD.
TEST(FuzzRegressionTest, ErrorJsonOfMessagesThatAreNotUtf8) {
  std::string body;
  ASSERT_NO_THROW(body = k8s::ErrorJson(absl::NotFoundError("no route /gpushare-s\xefheduler/x")));
  EXPECT_EQ(body,
            "{\"Code\":\"NOT_FOUND\",\"Error\":\"no route /gpushare-s\xef\xbf\xbdheduler/x\"}");

  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n1", {8})));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Scheduler> scheduler, Scheduler::Create(c));
  k8s::Extender extender(scheduler.get());
  absl::StatusOr<std::string> inspect = extender.Inspect("n\xff");
  EXPECT_THAT(inspect, StatusIs(absl::StatusCode::kNotFound));
  ASSERT_NO_THROW(body = k8s::ErrorJson(inspect.status()));
  EXPECT_THAT(body, HasSubstr("n\xef\xbf\xbd"));
}

// Every reply of the extender is written with bad bytes as U+FFFD: a
// cluster loaded from an openb CSV or a snapshot may hold names that are not
// UTF-8, and Inspect() or a bind's reply must not throw for them.
TEST(FuzzRegressionTest, ExtenderRepliesOfNamesThatAreNotUtf8) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n\xff", {8}, "T\xc3")));
  Request r;
  r.id = "default/pod-\xc0";
  r.gpu_memory = 2;
  ASSERT_OK(c.Place(r).status());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Scheduler> scheduler, Scheduler::Create(c));
  k8s::Extender extender(scheduler.get());
  absl::StatusOr<std::string> all;
  ASSERT_NO_THROW(all = extender.Inspect());
  ASSERT_OK(all.status());
  EXPECT_THAT(*all, HasSubstr("n\xef\xbf\xbd"));
  EXPECT_THAT(*all, HasSubstr("pod-\xef\xbf\xbd"));
  absl::StatusOr<std::string> one;
  ASSERT_NO_THROW(one = extender.Inspect("n\xff"));
  EXPECT_OK(one.status());
  std::string binding;
  ASSERT_NO_THROW(binding = k8s::BindingJson({"default", "pod-\xc0", "", "n\xff"}));
  EXPECT_THAT(binding, HasSubstr("n\xef\xbf\xbd"));
}

}  // namespace
}  // namespace gpushare
