// Requests of gpushare-device-plugin to the Kubernetes API (device-plugin/kube.h).

#include "device-plugin/kube.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace gpushare::deviceplugin {
namespace {

TEST(KubeTest, PodsOfTheNodeAreSelectedByField) {
  EXPECT_EQ(NodePodsPath("gpu-7"), "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-7");
  // A name cannot smuggle another selector or query parameter in.
  EXPECT_EQ(NodePodsPath("a,b&c"), "/api/v1/pods?fieldSelector=spec.nodeName%3Da%2Cb%26c");
  EXPECT_EQ(NodePath("n/1"), "/api/v1/nodes/n%2F1");
}

TEST(KubeTest, AssignedPatchSetsTheOriginalsAnnotations) {
  nlohmann::json p = nlohmann::json::parse(AssignedPatch(123));
  EXPECT_EQ(p["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"], "true");
  EXPECT_EQ(p["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGN_TIME"], "123");
}

TEST(KubeTest, NodePatchSetsOrRemovesTheUnhealthyList) {
  nlohmann::json sick = nlohmann::json::parse(
      NodeAnnotationsPatch(R"({"gpus":2,"links":["NV2"]})", {10, 20}, {{0, "XID 79"}, {1, "lost"}}));
  EXPECT_EQ(sick["metadata"]["annotations"]["gpushare.io/unhealthy-gpus"], "0,1");
  EXPECT_EQ(sick["metadata"]["annotations"]["gpushare.io/gpu-memory"], "10,20");
  EXPECT_EQ(sick["metadata"]["annotations"]["gpushare.io/gpu-topology"],
            R"({"gpus":2,"links":["NV2"]})");
  nlohmann::json well = nlohmann::json::parse(NodeAnnotationsPatch("", {16}, {}));
  EXPECT_TRUE(well["metadata"]["annotations"]["gpushare.io/unhealthy-gpus"].is_null());
  EXPECT_TRUE(well["metadata"]["annotations"]["gpushare.io/gpu-topology"].is_null());
}

}  // namespace
}  // namespace gpushare::deviceplugin
