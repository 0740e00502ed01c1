#include "gpushare/fragmentation.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "nlohmann/json.hpp"
#include "tests/testing/fixtures.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::StatusIs;

TargetWorkload FromJson(const nlohmann::json& list) {
  TargetWorkload t;
  for (const auto& item : list) {
    TargetTask task;
    task.cpu = item.at("cpu_milli").get<int64_t>();
    task.gpu_share = item.at("gpu_milli").get<int64_t>();
    task.gpu_count = item.at("num_gpu").get<int>();
    const std::string model = item.at("gpu_type").get<std::string>();
    if (!model.empty()) task.gpu_models = {model};
    task.weight = item.at("p").get<double>();
    t.tasks.push_back(task);
  }
  return t;
}

TEST(FragmentationGoldenTest, ReproducesTheSimulatorsVectors) {
  const std::string path = testing::FragVectorsPath();
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "golden vectors not found at " << path;
  const nlohmann::json vectors = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : vectors.at("cases")) {
    std::string name = c.at("typical").get<std::string>();
    size_t limit = std::string::npos;
    if (const size_t bracket = name.find('['); bracket != std::string::npos) {
      // "typical_A[0:1]": a prefix of the list.
      limit = std::stoul(name.substr(name.find(':', bracket) + 1));
      name = name.substr(0, bracket);
    }
    TargetWorkload target = FromJson(vectors.at(name));
    if (limit < target.tasks.size()) target.tasks.resize(limit);
    NodeShape node;
    node.cpu_left = c.at("cpu_left").get<int64_t>();
    node.gpu_left = c.at("gpu_left").get<std::vector<int64_t>>();
    node.model = c.at("gpu_type").get<std::string>();
    EXPECT_NEAR(NodeFragmentation(node, target), c.at("expect").get<double>(), 0.01)
        << c.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// The same vectors on a node of a Cluster, measured on compute and on memory:
// GPUs of 1000 memory units, each used by a task holding the same memory and
// compute share, so both resources leave the vector's idle share.
TEST(FragmentationGoldenTest, ReproducesTheVectorsOnClusterNodesInBothUnits) {
  const std::string path = testing::FragVectorsPath();
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "golden vectors not found at " << path;
  const nlohmann::json vectors = nlohmann::json::parse(in);
  int checked = 0;
  for (const auto& c : vectors.at("cases")) {
    std::string name = c.at("typical").get<std::string>();
    size_t limit = std::string::npos;
    if (const size_t bracket = name.find('['); bracket != std::string::npos) {
      limit = std::stoul(name.substr(name.find(':', bracket) + 1));
      name = name.substr(0, bracket);
    }
    const std::vector<int64_t> left = c.at("gpu_left").get<std::vector<int64_t>>();
    const int64_t cpu_left = c.at("cpu_left").get<int64_t>();
    Node node = testing::SharedNode("n", std::vector<int64_t>(left.size(), 1000),
                                    c.at("gpu_type").get<std::string>());
    node.cpu = cpu_left + 1000;  // 0 would mean "CPU not tracked".
    Cluster cluster;
    ASSERT_OK(cluster.AddNode(node));
    Placement cpu;
    cpu.request_id = "cpu";
    cpu.node = "n";
    cpu.cpu = 1000;
    ASSERT_OK(cluster.Commit(cpu));
    for (size_t i = 0; i < left.size(); ++i) {
      if (left[i] == 1000) continue;
      Placement p;
      p.request_id = "used-" + std::to_string(i);
      p.node = "n";
      p.gpus = {static_cast<int>(i)};
      if (left[i] == 0) {
        p.exclusive = true;
      } else {
        p.memory_per_gpu = 1000 - left[i];
        p.compute_per_gpu = 1000 - left[i];
      }
      ASSERT_OK(cluster.Commit(p));
    }
    for (FragResource resource : {FragResource::kCompute, FragResource::kMemory}) {
      TargetWorkload target = FromJson(vectors.at(name));
      if (limit < target.tasks.size()) target.tasks.resize(limit);
      target.resource = resource;
      const double expect = c.at("expect").get<double>();
      EXPECT_NEAR(NodeFragmentation(*cluster.FindNode("n"), target), expect, 0.01)
          << c.dump() << (resource == FragResource::kMemory ? " on memory" : " on compute");
      EXPECT_NEAR(Fragmentation(cluster, target).amount, expect, 0.01) << c.dump();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 7);
}

// The GpuPacking cases of the vectors file, through the policy object.
TEST(FragmentationGoldenTest, GpuPackingCases) {
  const std::string path = testing::FragVectorsPath();
  std::ifstream in(path);
  if (!in) GTEST_SKIP() << "golden vectors not found at " << path;
  const nlohmann::json vectors = nlohmann::json::parse(in);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Policy> policy, MakePolicy("gpupacking"));
  int checked = 0;
  for (const auto& c : vectors.at("gpu_packing_cases_(getPackingScore)")) {
    const std::vector<int64_t> left = c.at("gpu_left").get<std::vector<int64_t>>();
    Node node = testing::SharedNode("n", std::vector<int64_t>(left.size(), 16));
    node.cpu = c.at("cpu_left").get<int64_t>();
    Cluster cluster;
    ASSERT_OK(cluster.AddNode(node));
    for (size_t i = 0; i < left.size(); ++i) {
      if (left[i] == kGpuCompute) continue;
      Placement p;
      p.request_id = "used-" + std::to_string(i);
      p.node = "n";
      p.gpus = {static_cast<int>(i)};
      p.compute_per_gpu = kGpuCompute - left[i];
      ASSERT_OK(cluster.Commit(p));
    }
    Request r;
    r.id = "pod";
    r.cpu = c.at("pod").at("cpu").get<int64_t>();
    const int64_t milli = c.at("pod").at("gpu_milli").get<int64_t>();
    const int64_t count = c.at("pod").at("num_gpu").get<int64_t>();
    if (milli == kGpuCompute) {
      r.whole_gpus = count;
    } else {
      r.compute = milli;
      r.gpu_count = count;
    }
    ASSERT_OK_AND_ASSIGN(const Demand demand, cluster.Validate(r));
    std::vector<int> fitting;
    const NodeStatus& status = *cluster.FindNode("n");
    for (const GpuStatus& g : status.gpus) {
      if (demand.kind == Demand::Kind::kExclusive ? g.idle()
                                                  : g.compute_free() >= demand.compute_per_gpu) {
        fitting.push_back(g.index);
      }
    }
    const NodeChoice choice = policy->Evaluate(demand, status, fitting, cluster);
    EXPECT_EQ(choice.score.primary, c.at("expect").get<double>()) << c.dump();
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

TargetWorkload OneType(int64_t cpu, int64_t share, int count, double weight = 1.0) {
  TargetWorkload t;
  t.tasks.push_back(TargetTask{cpu, share, count, {}, weight});
  return t;
}

TEST(NodeFragmentationTest, FollowsTheDefinition) {
  NodeShape node;
  node.cpu_left = 8000;
  node.gpu_left = {200, 1000, 600, 0};
  node.model = "T4";
  // A 500-share task fits: only the 200 is too small for it.
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, OneType(1000, 500, 1)), 200);
  // A whole-GPU task fits on GPU 1: every partly used GPU is fragment.
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, OneType(1000, 1000, 1)), 800);
  // Two whole GPUs do not fit: everything idle is fragment.
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, OneType(1000, 1000, 2)), 1800);
  // CPU short, CPU-only task, model not allowed: everything.
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, OneType(9000, 100, 1)), 1800);
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, OneType(1000, 0, 0)), 1800);
  TargetWorkload other_model = OneType(1000, 100, 1);
  other_model.tasks[0].gpu_models = {"V100M16"};
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, other_model), 1800);
  // A 700-share task fits on GPU 1 only; weights add up.
  TargetWorkload mix = OneType(1000, 700, 1, 0.25);
  mix.tasks.push_back(TargetTask{1000, 500, 1, {}, 0.75});
  EXPECT_DOUBLE_EQ(NodeFragmentation(node, mix), 0.25 * 800 + 0.75 * 200);
}

TEST(NodeFragmentationTest, WorksOnMemoryUnits) {
  Cluster cluster;
  ASSERT_OK(cluster.AddNode(testing::SharedNode("n", {16, 16})));
  ASSERT_OK(cluster.Place(testing::Shared("a", 10)).status());  // GPU with 6 left.
  TargetWorkload t = OneType(0, 8, 1);
  t.resource = FragResource::kMemory;
  // 6 free units are too few for an 8-unit task; the idle 16 is not.
  EXPECT_DOUBLE_EQ(NodeFragmentation(*cluster.FindNode("n"), t), 6);
  // Whole GPUs (share 0 = the GPU's memory): the 6 counts.
  TargetWorkload whole = OneType(0, 0, 1);
  whole.resource = FragResource::kMemory;
  EXPECT_DOUBLE_EQ(NodeFragmentation(*cluster.FindNode("n"), whole), 6);
  const ClusterFragmentation f = Fragmentation(cluster, t);
  EXPECT_DOUBLE_EQ(f.amount, 6);
  EXPECT_DOUBLE_EQ(f.idle, 22);
  EXPECT_DOUBLE_EQ(f.rate, 6.0 / 22.0);
}

TEST(ClusterFragmentationTest, SumsNodesOnCompute) {
  Cluster cluster;
  ASSERT_OK(cluster.AddNode(testing::SharedNode("a", {16, 16})));
  ASSERT_OK(cluster.AddNode(testing::SharedNode("b", {16})));
  Request r;
  r.id = "r";
  r.compute = 700;
  ASSERT_OK(cluster.Place(r).status());
  const TargetWorkload t = OneType(0, 500, 1);
  const ClusterFragmentation f = Fragmentation(cluster, t);
  EXPECT_DOUBLE_EQ(f.amount, 300);  // The 300 left next to the 700.
  EXPECT_DOUBLE_EQ(f.idle, 2300);
  EXPECT_NEAR(f.rate, 300.0 / 2300.0, 1e-12);
  EXPECT_DOUBLE_EQ(Fragmentation(Cluster(), t).rate, 0);
}

TEST(TypicalTasksTest, GroupsCountsAndRenormalises) {
  std::vector<Request> w;
  auto add = [&](int copies, int64_t cpu, int64_t compute, int64_t whole) {
    for (int i = 0; i < copies; ++i) {
      Request r;
      r.id = "r" + std::to_string(w.size());
      r.cpu = cpu;
      r.compute = compute;
      r.whole_gpus = whole;
      w.push_back(r);
    }
  };
  add(6, 1000, 500, 0);
  add(3, 2000, 0, 2);
  add(1, 4000, 0, 0);
  ASSERT_OK_AND_ASSIGN(TargetWorkload t, TypicalTasks(w, 0.9));
  ASSERT_EQ(t.tasks.size(), 2u);  // 6 + 3 cover 90%.
  EXPECT_EQ(t.tasks[0].gpu_share, 500);
  EXPECT_EQ(t.tasks[0].gpu_count, 1);
  EXPECT_DOUBLE_EQ(t.tasks[0].weight, 6.0 / 9.0);
  EXPECT_EQ(t.tasks[1].gpu_share, 1000);
  EXPECT_EQ(t.tasks[1].gpu_count, 2);
  EXPECT_EQ(t.tasks[1].cpu, 2000);
  ASSERT_OK_AND_ASSIGN(TargetWorkload all, TypicalTasks(w, 1.0));
  ASSERT_EQ(all.tasks.size(), 3u);
  EXPECT_EQ(all.tasks[2].gpu_count, 0);
  EXPECT_DOUBLE_EQ(all.tasks[2].weight, 0.1);
}

TEST(TypicalTasksTest, RejectsBadInput) {
  EXPECT_THAT(TypicalTasks({}), StatusIs(absl::StatusCode::kInvalidArgument, "empty"));
  std::vector<Request> w(1);
  w[0].id = "a";
  EXPECT_THAT(TypicalTasks(w, 0), StatusIs(absl::StatusCode::kInvalidArgument, "coverage 0"));
  EXPECT_THAT(TypicalTasks(w, 1.5), StatusIs(absl::StatusCode::kInvalidArgument, "coverage 1.5"));
}

TEST(TypicalTasksTest, DefaultTraceMatchesThePaper) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(auto tasks, LoadOpenbTasks(dir + "/openb_pod_list_default.csv"));
  ASSERT_OK_AND_ASSIGN(TargetWorkload t, TypicalTasks(ToRequests(tasks)));
  ASSERT_EQ(t.tasks.size(), 35u);
  EXPECT_EQ(t.tasks[0].cpu, 3152);
  EXPECT_EQ(t.tasks[0].gpu_share, 810);
  EXPECT_EQ(t.tasks[0].gpu_count, 1);
  EXPECT_NEAR(t.tasks[0].weight, 0.135, 0.0005);
  EXPECT_EQ(t.tasks[1].cpu, 11300);
  EXPECT_NEAR(t.tasks[1].weight, 0.113, 0.0005);
  EXPECT_EQ(t.tasks[2].cpu, 11400);
  EXPECT_NEAR(t.tasks[2].weight, 0.077, 0.0005);
  for (const TargetTask& task : t.tasks) EXPECT_LE(task.gpu_count, 1);
  // An empty cluster: every idle GPU is fragment for the CPU-only share.
  ASSERT_OK_AND_ASSIGN(auto nodes, LoadOpenbNodes(dir + "/openb_node_list_gpu_node.csv"));
  Cluster cluster;
  for (const Node& n : nodes) ASSERT_OK(cluster.AddNode(n));
  const ClusterFragmentation f = Fragmentation(cluster, t);
  EXPECT_DOUBLE_EQ(f.idle, 6212.0 * 1000);
  EXPECT_GT(f.rate, 0.12);
  EXPECT_LT(f.rate, 0.16);
}

}  // namespace
}  // namespace gpushare
