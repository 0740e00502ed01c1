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

}  // namespace
}  // namespace gpushare
