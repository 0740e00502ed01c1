// Fixture topologies on simulated trace nodes: the rules that attach them
// (gpushare/simulate.h), the connectivity a run reports, and the
// `gpushare simulate --topology` option.

#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpushare/gpushare.h"
#include "gtest/gtest.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::RunCommand;
using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  return std::string(GPUSHARE_SOURCE_DIR) + "/tests/data/topology/" + name;
}

Node TraceNode(const std::string& name, int gpus, const std::string& model) {
  Node n;
  n.name = name;
  n.cpu = 96000;
  n.host_memory = 1 << 20;
  n.gpus.assign(gpus, Gpu{16, model, "", true});
  return n;
}

TEST(TopologyRuleTest, ReadsNvidiaSmiTextAndJsonAndChecksTheGpuCount) {
  ASSERT_OK_AND_ASSIGN(TopologyRule by_count, LoadTopologyRule("8=" + Fixture("dgx1_v100.txt")));
  EXPECT_TRUE(by_count.model.empty());
  ASSERT_NE(by_count.topology, nullptr);
  EXPECT_EQ(by_count.topology->num_gpus(), 8);
  ASSERT_OK_AND_ASSIGN(TopologyRule by_model, LoadTopologyRule("T4=" + Fixture("t4x4.txt")));
  EXPECT_EQ(by_model.model, "T4");
  // The JSON form gives the same (interned) topology.
  const std::string json = ::testing::TempDir() + "/t4x4.json";
  std::ofstream(json) << by_model.topology->ToJson();
  ASSERT_OK_AND_ASSIGN(TopologyRule from_json, LoadTopologyRule("4=" + json));
  EXPECT_EQ(from_json.topology, by_model.topology);

  EXPECT_THAT(LoadTopologyRule("4=" + Fixture("dgx1_v100.txt")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "has 8 GPUs, not 4"));
  EXPECT_THAT(LoadTopologyRule(Fixture("t4x4.txt")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "is not N=FILE or MODEL=FILE"));
  EXPECT_THAT(LoadTopologyRule("8=").status(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LoadTopologyRule("8=/no/such/file").status(),
              StatusIs(absl::StatusCode::kNotFound, "cannot read '/no/such/file'"));
  const std::string bad = ::testing::TempDir() + "/bad_topo.txt";
  std::ofstream(bad) << "\tGPU0\tGPU1\nGPU0\t X \tNV9X\nGPU1\tNV9X\t X \n";
  EXPECT_THAT(LoadTopologyRule("2=" + bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, "NV9X"));
}

TEST(TopologyRuleTest, AttachesByModelThenCountAndKeepsExistingTopologies) {
  ASSERT_OK_AND_ASSIGN(TopologyRule dgx1, LoadTopologyRule("V100M32=" + Fixture("dgx1_v100.txt")));
  ASSERT_OK_AND_ASSIGN(TopologyRule pcie, LoadTopologyRule("8=" + Fixture("pcie_2socket_8gpu.txt")));
  ASSERT_OK_AND_ASSIGN(TopologyRule t4, LoadTopologyRule("T4=" + Fixture("t4x4.txt")));
  std::vector<Node> nodes = {TraceNode("v100", 8, "V100M32"), TraceNode("p100", 8, "P100"),
                             TraceNode("t4", 4, "T4"), TraceNode("t4-small", 2, "T4"),
                             TraceNode("v100-4", 4, "V100M32"), TraceNode("own", 8, "V100M32")};
  nodes.back().topology = t4.topology;  // Wrong size, but it is the node's own: kept.
  const std::vector<Node> out = AttachTopologies(nodes, {dgx1, pcie, t4});
  ASSERT_EQ(out.size(), nodes.size());
  EXPECT_EQ(out[0].topology, dgx1.topology);
  EXPECT_EQ(out[1].topology, pcie.topology);
  EXPECT_EQ(out[2].topology, t4.topology);
  EXPECT_EQ(out[3].topology, nullptr);  // No 2-GPU rule.
  EXPECT_EQ(out[4].topology, nullptr);  // V100M32, but not 8 GPUs.
  EXPECT_EQ(out[5].topology, t4.topology);
  // The first matching rule wins: "8" before "V100M32".
  EXPECT_EQ(AttachTopologies(nodes, {pcie, dgx1})[0].topology, pcie.topology);
  EXPECT_EQ(nodes[0].topology, nullptr);  // The input is not changed.
}

std::vector<Request> MultiGpuRequests() {
  std::vector<Request> requests;
  for (int i = 0; i < 60; ++i) {
    Request r;
    r.id = absl::StrCat("r", i);
    r.cpu = 1000;
    if (i % 3 == 0) {
      r.compute = 300;
    } else {
      r.whole_gpus = i % 3 == 1 ? 2 : 4;
    }
    requests.push_back(r);
  }
  return requests;
}

TEST(TopologySimulationTest, ReportsTheWeakestLinksOfMultiGpuTasks) {
  std::vector<Node> nodes;
  for (int i = 0; i < 6; ++i) nodes.push_back(TraceNode(absl::StrCat("n", i), 8, i % 2 ? "V100M32" : "P100"));
  std::vector<Request> requests = MultiGpuRequests();
  SimulationOptions options;
  options.policy = "fgd";
  options.inflate = 0.9;
  ASSERT_OK_AND_ASSIGN(TopologyRule dgx1, LoadTopologyRule("V100M32=" + Fixture("dgx1_v100.txt")));
  ASSERT_OK_AND_ASSIGN(TopologyRule pcie, LoadTopologyRule("8=" + Fixture("pcie_2socket_8gpu.txt")));
  options.topologies = {dgx1, pcie};
  ASSERT_OK_AND_ASSIGN(SimulationResult aware, Simulate(nodes, requests, options));
  EXPECT_GT(aware.topology_tasks, 10);
  EXPECT_EQ(aware.topology_best, aware.topology_tasks);
  int64_t sum = 0;
  Link previous{LinkKind::kNvLink, 64};
  for (const auto& [name, n] : aware.topology_weakest) {
    ASSERT_OK_AND_ASSIGN(Link link, ParseLink(name));
    EXPECT_LT(link, previous) << "best link first";
    previous = link;
    EXPECT_GT(n, 0);
    sum += n;
  }
  EXPECT_EQ(sum, aware.topology_tasks);
  // The same run with the topologies on the nodes themselves.
  std::vector<Node> attached = AttachTopologies(nodes, options.topologies);
  SimulationOptions plain = options;
  plain.topologies.clear();
  ASSERT_OK_AND_ASSIGN(SimulationResult same, Simulate(attached, requests, plain));
  EXPECT_EQ(same.node_of_request, aware.node_of_request);
  EXPECT_EQ(same.gpus_of_request, aware.gpus_of_request);
  EXPECT_EQ(same.topology_weakest, aware.topology_weakest);
  // Topology-blind GPU choice on the same nodes: worse links show up.
  for (Request& r : requests) r.topology.mode = TopologyNeed::Mode::kNone;
  ASSERT_OK_AND_ASSIGN(SimulationResult blind, Simulate(nodes, requests, options));
  EXPECT_LT(blind.topology_best, blind.topology_tasks);
  EXPECT_NE(blind.topology_weakest, aware.topology_weakest);
  // No rules: no topology, nothing counted.
  options.topologies.clear();
  ASSERT_OK_AND_ASSIGN(SimulationResult none, Simulate(nodes, requests, options));
  EXPECT_EQ(none.topology_tasks, 0);
  EXPECT_TRUE(none.topology_weakest.empty());
}

TEST(TopologySimulateCommandTest, AttachesTopologiesAndPrintsTheConnectivity) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream nodes(dir + "/topo_nodes.csv");
    nodes << "sn,cpu_milli,memory_mib,gpu,model\n";
    for (int i = 0; i < 4; ++i) nodes << "n" << i << ",96000,262144,8," << (i % 2 ? "V100M32" : "P100") << "\n";
    std::ofstream tasks(dir + "/topo_tasks.csv");
    tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
    for (int i = 0; i < 40; ++i) {
      tasks << "t" << i << ",2000,1024," << (i % 3 == 0 ? "1,450" : i % 3 == 1 ? "2,1000" : "4,1000")
            << "\n";
    }
  }
  const std::string base = "timeout 60 " + std::string(GPUSHARE_CLI_PATH) + " simulate --nodes " +
                           dir + "/topo_nodes.csv --tasks " + dir +
                           "/topo_tasks.csv --seeds 1-2 --policies fgd,bestfit";
  auto [code, out] = RunCommand(base + " --topology V100M32=" + Fixture("dgx1_v100.txt") +
                         " --topology 8=" + Fixture("pcie_2socket_8gpu.txt"));
  EXPECT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("multi-GPU tasks on nodes with a topology"));
  EXPECT_THAT(out, ::testing::ContainsRegex("\nfgd +[0-9]+ tasks, best available +[0-9.]+%, "
                                            "weakest links: (NV2|NV1|PIX|PXB|NODE|SYS) [0-9]+"));
  EXPECT_THAT(out, ::testing::ContainsRegex("\nbestfit +[0-9]+ tasks"));
  auto [md_code, md] = RunCommand(base + " --markdown --topology 8=" + Fixture("dgx1_v100.txt"));
  EXPECT_EQ(md_code, 0) << md;
  EXPECT_THAT(md, HasSubstr("| policy | multi-GPU tasks | best available | weakest links |"));
  EXPECT_THAT(md, ::testing::ContainsRegex("\n\\| fgd \\| [0-9]+ \\| 100.0% \\| NV"));
  // Without --topology there is no connectivity table.
  auto [plain_code, plain] = RunCommand(base);
  EXPECT_EQ(plain_code, 0) << plain;
  EXPECT_THAT(plain, ::testing::Not(HasSubstr("multi-GPU tasks on nodes with a topology")));
  auto [bad_code, bad] = RunCommand(base + " --topology 4=" + Fixture("dgx1_v100.txt") + " 2>&1");
  EXPECT_EQ(bad_code, 2);
  EXPECT_THAT(bad, HasSubstr("has 8 GPUs, not 4"));
}

}  // namespace
}  // namespace gpushare
