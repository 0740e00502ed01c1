// Acceptance scenarios S1-S3 of the GPU-sharing field reports, exactly.

#include <string>

#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::S1Cluster;
using ::gpushare::testing::Shared;
using ::gpushare::testing::SharedNode;
using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ScenarioS1, BinpackPlacesEveryStepOnTheDocumentedNode) {
  Cluster c = S1Cluster();
  ASSERT_OK_AND_ASSIGN(Placement p1, c.Place(Shared("binpack-1", 2), "binpack"));
  EXPECT_EQ(p1.node, "sd-cluster-05");
  EXPECT_THAT(p1.gpus, ElementsAre(0));
  EXPECT_EQ(p1.memory_per_gpu, 2);
  EXPECT_EQ(InspectTable(c),
            "NAME           IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)\n"
            "sd-cluster-04  192.168.1.214  0/14                   0/14\n"
            "sd-cluster-05  192.168.1.215  2/14                   2/14\n"
            "----------------------------------------------------------\n"
            "Allocated/Total GPU Memory In Cluster:\n"
            "2/28 (7%)\n");

  ASSERT_OK_AND_ASSIGN(auto replicas, c.PlaceReplicas(Shared("binpack-2", 8), 2, "binpack"));
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_EQ(replicas[0].node, "sd-cluster-05");
  EXPECT_EQ(replicas[1].node, "sd-cluster-04");
  EXPECT_EQ(InspectTable(c),
            "NAME           IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)\n"
            "sd-cluster-04  192.168.1.214  8/14                   8/14\n"
            "sd-cluster-05  192.168.1.215  10/14                  10/14\n"
            "----------------------------------------------------------\n"
            "Allocated/Total GPU Memory In Cluster:\n"
            "18/28 (64%)\n");

  ASSERT_OK_AND_ASSIGN(Placement p3, c.Place(Shared("binpack-3", 2), "binpack"));
  EXPECT_EQ(p3.node, "sd-cluster-05");
  // 8 GiB are free, but the largest request that fits is 6 GiB.
  EXPECT_EQ(c.TotalUsage().gpu_memory - c.TotalUsage().gpu_memory_used, 8);
  EXPECT_EQ(*c.Capacity(Shared("probe", 6)), 1);
  EXPECT_EQ(*c.Capacity(Shared("probe", 7)), 0);

  ASSERT_OK_AND_ASSIGN(Placement p4, c.Place(Shared("binpack-4", 5), "binpack"));
  EXPECT_EQ(p4.node, "sd-cluster-04");
  EXPECT_EQ(InspectTable(c),
            "NAME           IPADDRESS      GPU0(Allocated/Total)  GPU Memory(GiB)\n"
            "sd-cluster-04  192.168.1.214  13/14                  13/14\n"
            "sd-cluster-05  192.168.1.215  12/14                  12/14\n"
            "----------------------------------------------------------\n"
            "Allocated/Total GPU Memory In Cluster:\n"
            "25/28 (89%)\n");
  for (const Placement& p : c.placements()) {
    ASSERT_OK_AND_ASSIGN(DeviceView view, MakeDeviceView(c, p, 1));
    EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_DEV"], "14");
    EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_CONTAINER"], std::to_string(p.memory_per_gpu));
  }
  EXPECT_OK(c.CheckInvariants());
}

TEST(ScenarioS1, DetailedViewListsEveryPodPerNode) {
  Cluster c = S1Cluster();
  ASSERT_OK(c.Place(Shared("binpack-1", 2)).status());
  ASSERT_OK(c.PlaceReplicas(Shared("binpack-2", 8), 2).status());
  ASSERT_OK(c.Place(Shared("team-a/binpack-3", 2)).status());
  ASSERT_OK_AND_ASSIGN(std::string node, InspectNode(c, "sd-cluster-05"));
  EXPECT_EQ(node,
            "NAME:       sd-cluster-05\n"
            "IPADDRESS:  192.168.1.215\n"
            "\n"
            "NAME         NAMESPACE  GPU0(Allocated)\n"
            "binpack-1    default    2\n"
            "binpack-2-0  default    8\n"
            "binpack-3    team-a     2\n"
            "Allocated :  12 (85%)\n"
            "Total :      14\n"
            "----------------------------------------------------------\n");
  EXPECT_THAT(InspectDetails(c), HasSubstr("Allocated/Total GPU Memory In Cluster:  20/28 (71%)"));
  EXPECT_THAT(InspectNode(c, "nope"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ScenarioS2, ThreeNotebooksShareOneT4AndAFourthWaits) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("gpu-node", {14}, "T4")));
  for (int i = 1; i <= 3; ++i) {
    ASSERT_OK(c.Place(Shared("notebook-" + std::to_string(i), 4)).status());
  }
  EXPECT_THAT(c.Place(Shared("notebook-4", 4)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       "insufficient GPU memory on any single GPU: largest free 2, need 4"));
  EXPECT_THAT(InspectTable(c), HasSubstr("12/14 (85%)"));
}

TEST(ScenarioS2, WithoutSharingWholeGpuPodsTakeTheCardOneAtATime) {
  Cluster c;
  Node node = SharedNode("gpu-node", {14}, "T4");
  node.labels.clear();
  ASSERT_OK(c.AddNode(node));
  EXPECT_THAT(c.Place(Shared("notebook", 4)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "does not take shared GPU work"));
  ASSERT_OK(c.Place(::gpushare::testing::Exclusive("pod-1", 1)).status());
  EXPECT_THAT(c.Place(::gpushare::testing::Exclusive("pod-2", 1)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, "needs 1 idle GPU, has 0"));
}

TEST(ScenarioS3, MultiCardSplitGivesTwoUnitsOnEachOfFourV100s) {
  Cluster c;
  Node node = SharedNode("v100-node", {15, 15, 15, 15}, "V100M16");
  for (int i = 0; i < 4; ++i) node.gpus[i].uuid = "GPU-v100-" + std::to_string(i);
  ASSERT_OK(c.AddNode(node));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(Shared("default/tf-0", 8, 4)));
  EXPECT_THAT(p.gpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(p.memory_per_gpu, 2);
  ASSERT_OK_AND_ASSIGN(DeviceView view, MakeDeviceView(c, p, 1700000000000000000));
  EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_CONTAINER"], "2");
  EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_DEV"], "15");
  EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_POD"], "8");
  EXPECT_EQ(view.env["ALIYUN_COM_GPU_MEM_IDX"], "0-1-2-3");
  EXPECT_EQ(view.env["NVIDIA_VISIBLE_DEVICES"], "GPU-v100-0,GPU-v100-1,GPU-v100-2,GPU-v100-3");
  EXPECT_EQ(view.annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"], "false");
  EXPECT_EQ(view.annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"], "1700000000000000000");
  EXPECT_EQ(view.annotations["scheduler.framework.gpushare.allocation"],
            R"({"0":{"0":2,"1":2,"2":2,"3":2}})");
  // 8 over 3 GPUs is rejected, naming both numbers.
  EXPECT_THAT(c.Place(Shared("bad", 8, 3)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "gpu memory 8 is not divisible by gpu count 3"));
}

TEST(DeviceView, UsesIndicesWhenAnyUuidIsUnknownAndWholeMemoryForExclusive) {
  Cluster c;
  ASSERT_OK(c.AddNode(SharedNode("n", {16, 32})));
  ASSERT_OK_AND_ASSIGN(Placement p, c.Place(::gpushare::testing::Exclusive("x", 2)));
  ASSERT_OK_AND_ASSIGN(DeviceView view, MakeDeviceView(c, p, 1));
  EXPECT_EQ(view.env["NVIDIA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(view.annotations["ALIYUN_COM_GPU_MEM_POD"], "48");
  EXPECT_EQ(view.annotations["scheduler.framework.gpushare.allocation"], R"({"0":{"0":16,"1":32}})");
  Placement bad = p;
  bad.node = "ghost";
  EXPECT_THAT(MakeDeviceView(c, bad), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace gpushare
