// Printing of the value types: constructor-call reprs shared with Python.

#include <sstream>
#include <string>

#include "gpushare/types.h"
#include "gtest/gtest.h"

namespace gpushare {
namespace {

template <typename T>
std::string Print(const T& value) {
  std::ostringstream os;
  os << value;
  return os.str();
}

TEST(TypesPrintTest, GpuLeavesDefaultsOut) {
  EXPECT_EQ(Print(Gpu{14, "T4", "", true}), "Gpu(memory=14, model='T4')");
  EXPECT_EQ(Print(Gpu{15, "", "GPU-1", false}), "Gpu(memory=15, uuid='GPU-1', healthy=False)");
}

TEST(TypesPrintTest, NodePrintsGpusLabelsAndAddress) {
  Node node;
  node.name = "sd-cluster-04";
  node.address = "192.168.1.214";
  node.labels = {{"gpushare", "true"}};
  node.gpus = {Gpu{14, "T4", "", true}};
  EXPECT_EQ(Print(node),
            "Node(name='sd-cluster-04', gpus=[Gpu(memory=14, model='T4')], "
            "labels={'gpushare': 'true'}, address='192.168.1.214')");
  node.labels.clear();
  node.address.clear();
  node.gpus.push_back(Gpu{16, "", "", true});
  node.cpu = 4000;
  node.host_memory = 8192;
  node.schedulable = false;
  node.gpu_sharing = true;
  EXPECT_EQ(Print(node),
            "Node(name='sd-cluster-04', gpus=[Gpu(memory=14, model='T4'), Gpu(memory=16)], "
            "cpu=4000, host_memory=8192, schedulable=False, gpu_sharing=True)");
}

TEST(TypesPrintTest, RequestPrintsOnlyWhatIsSet) {
  Request r;
  r.id = "binpack-1";
  r.gpu_memory = 2;
  EXPECT_EQ(Print(r), "Request(id='binpack-1', gpu_memory=2)");
  r.gpu_memory = 8;
  r.gpu_count = 4;
  r.compute = 250;
  r.cpu = 4000;
  r.host_memory = 8192;
  r.gpu_models = {"V100M16", "T4"};
  r.node_selector = {{"inference", "tensorflow"}};
  EXPECT_EQ(Print(r),
            "Request(id='binpack-1', gpu_memory=8, gpu_count=4, compute=250, cpu=4000, "
            "host_memory=8192, gpu_models=['V100M16', 'T4'], "
            "node_selector={'inference': 'tensorflow'})");
  Request exclusive;
  exclusive.id = "x";
  exclusive.whole_gpus = 2;
  EXPECT_EQ(Print(exclusive), "Request(id='x', whole_gpus=2)");
}

TEST(TypesPrintTest, QuotesEscapeLikePython) {
  Request r;
  r.id = "it's\\a\nb";
  EXPECT_EQ(Print(r), "Request(id='it\\'s\\\\a\\nb')");
}

TEST(TypesPrintTest, FitResultShowsReasonOnlyWhenInfeasible) {
  EXPECT_EQ(Print(FitResult{"n1", true, ""}), "FitResult(node='n1', feasible=True)");
  EXPECT_EQ(Print(FitResult{"n2", false, "node is cordoned"}),
            "FitResult(node='n2', feasible=False, reason='node is cordoned')");
}

}  // namespace
}  // namespace gpushare
