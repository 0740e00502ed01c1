#include "gpushare/trace.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::StatusIs;

constexpr char kTasks[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n"
    "p0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
    "p1,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Failed,10,20,nan\n"
    "\n"
    "p2,8000,30517,0,0,nan,LS,Pending,30,,\n"
    "p3,4000,1024,4,1000,,Guaranteed,Succeeded,5,9,6\r\n";

TEST(ParseOpenbTasksTest, ReadsEveryColumn) {
  ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks, ParseOpenbTasks(kTasks));
  ASSERT_EQ(tasks.size(), 4u);
  EXPECT_EQ(tasks[0].name, "p0");
  EXPECT_EQ(tasks[0].cpu, 12000);
  EXPECT_EQ(tasks[0].memory_mib, 16384);
  EXPECT_EQ(tasks[0].num_gpu, 1);
  EXPECT_EQ(tasks[0].gpu_milli, 1000);
  EXPECT_TRUE(tasks[0].gpu_spec.empty());
  EXPECT_EQ(tasks[0].deletion_time, 12537496);
  EXPECT_EQ(tasks[1].gpu_spec, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ(tasks[1].qos, "BE");
  EXPECT_EQ(tasks[1].phase, "Failed");
  EXPECT_EQ(tasks[1].scheduled_time, -1);  // nan
  EXPECT_TRUE(tasks[2].gpu_spec.empty());  // nan
  EXPECT_EQ(tasks[2].deletion_time, -1);   // empty
  EXPECT_EQ(tasks[3].num_gpu, 4);
  EXPECT_EQ(tasks[3].scheduled_time, 6);   // CRLF line end
}

TEST(ParseOpenbTasksTest, ReadsTheFiveColumnFiles) {
  ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks,
                       ParseOpenbTasks("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                       "a,1000,10,8,1000\nb,2000,20,1,250\n"));
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_EQ(tasks[0].num_gpu, 8);
  EXPECT_EQ(tasks[1].gpu_milli, 250);
  EXPECT_EQ(tasks[1].creation_time, -1);
  EXPECT_TRUE(tasks[1].qos.empty());
}

TEST(ParseOpenbTasksTest, ErrorsNameTheLineAndColumn) {
  const std::string header = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";
  EXPECT_THAT(ParseOpenbTasks(header + "a,1000,10,1,500\nb,x1,10,1,500\n", "t.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "t.csv:3: column 'cpu_milli' 'x1' is not an integer"));
  EXPECT_THAT(ParseOpenbTasks(header + "a,1000,10,1,1500\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, ":2: column 'gpu_milli' 1500"));
  EXPECT_THAT(ParseOpenbTasks(header + "a,1000,10,2,500\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "needs 1 GPU"));
  EXPECT_THAT(ParseOpenbTasks(header + "a,1000,10,1,0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "with num_gpu 1"));
  EXPECT_THAT(ParseOpenbTasks(header + "a,-5,10,0,0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "-5 is negative"));
  EXPECT_THAT(ParseOpenbTasks(header + "a,1000,10\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, ":2: row has 3 cells"));
  EXPECT_THAT(ParseOpenbTasks("name,cpu_milli,memory_mib,num_gpu\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, ":1: missing column 'gpu_milli'"));
  EXPECT_THAT(ParseOpenbTasks(""), StatusIs(absl::StatusCode::kInvalidArgument, "empty file"));
  EXPECT_THAT(LoadOpenbTasks("/nonexistent/tasks.csv"),
              StatusIs(absl::StatusCode::kNotFound, "/nonexistent/tasks.csv"));
}

TEST(ParseOpenbTasksTest, EveryNumberIsCheckedForTypeAndRange) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time,"
      "scheduled_time\n";
  const struct {
    std::string row, error;
  } cases[] = {
      {"a,inf,10,0,0,1,2,1", "column 'cpu_milli' 'inf' is not an integer"},
      {"a,-inf,10,0,0,1,2,1", "column 'cpu_milli' '-inf' is not an integer"},
      {"a,1000,10,0,0,inf,2,1", "column 'creation_time' 'inf' is not an integer"},
      {"a,1000,1e300,0,0,1,2,1", "column 'memory_mib' 1e300 is outside 0..4294967296"},
      {"a,1000,10,0,0,9223372036854775808,2,1",
       "column 'creation_time' 9223372036854775808 is outside 0.."},
      {"a,1000,10,0,0,1,9.3e18,1", "column 'deletion_time' 9.3e18 is outside 0.."},
      {"a,1000,10,0.9,0,1,2,1", "column 'num_gpu' '0.9' is not an integer"},
      {"a,1000,10,1,450.5,1,2,1", "column 'gpu_milli' '450.5' is not an integer"},
      {"a,1000,10,4294967297,1000,1,2,1", "column 'num_gpu' 4294967297 is outside 0..64"},
      {"a,8589934592,10,0,0,1,2,1", "column 'cpu_milli' 8589934592 is outside 0..4294967296"},
      {"a,1000,10,0,0,-5,2,1", "column 'creation_time' -5 is negative"},
      {"a,1000,10,0,0,1,-2,1", "column 'deletion_time' -2 is negative"},
      {"a,1000,10,0,0,1,2,-1", "column 'scheduled_time' -1 is negative"},
  };
  for (const auto& t : cases) {
    EXPECT_THAT(ParseOpenbTasks(header + t.row + "\n", "t.csv"),
                StatusIs(absl::StatusCode::kInvalidArgument, "t.csv:2: " + t.error))
        << t.row;
  }
  // Whole numbers written as decimals still load; empty and nan are unknown.
  ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks,
                       ParseOpenbTasks(header + "a,1000.0,1e3,1,450,7.0,,nan\n"));
  EXPECT_EQ(tasks[0].cpu, 1000);
  EXPECT_EQ(tasks[0].memory_mib, 1000);
  EXPECT_EQ(tasks[0].creation_time, 7);
  EXPECT_EQ(tasks[0].deletion_time, -1);
  EXPECT_EQ(tasks[0].scheduled_time, -1);
}

TEST(ParseOpenbNodesTest, EveryNumberIsCheckedForTypeAndRange) {
  const std::string header = "sn,cpu_milli,memory_mib,gpu,model\n";
  EXPECT_THAT(ParseOpenbNodes(header + "a,inf,1,1,T4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "'inf' is not an integer"));
  EXPECT_THAT(ParseOpenbNodes(header + "a,1,1,0.9,T4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "column 'gpu' '0.9' is not an integer"));
  EXPECT_THAT(ParseOpenbNodes(header + "a,1,1e300,1,T4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "column 'memory_mib' 1e300 is outside"));
  EXPECT_THAT(ParseOpenbNodes(header + "a,1,1,4294967296,T4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "column 'gpu' 4294967296 is outside"));
  // A long malformed cell is shortened in the message.
  absl::StatusOr<std::vector<Node>> r =
      ParseOpenbNodes(header + "a," + std::string(1 << 20, 'x') + ",1,1,T4\n");
  ASSERT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument, "(1048576 bytes)"));
  EXPECT_LT(r.status().message().size(), 300u);
}

TEST(ParseOpenbTasksTest, AcceptsAByteOrderMarkAndEveryLineEnding) {
  const std::string rows[] = {"name,cpu_milli,memory_mib,num_gpu,gpu_milli", "a,1000,10,1,500",
                              "b,2000,20,0,0", "c,3000,30,2,1000"};
  for (const std::string bom : {"", "\xEF\xBB\xBF"}) {
    for (const std::string eol : {"\n", "\r\n", "\r"}) {
      std::string text = bom;
      for (const std::string& row : rows) text += row + eol;
      ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks, ParseOpenbTasks(text));
      ASSERT_EQ(tasks.size(), 3u) << (bom.empty() ? "" : "BOM, ") << "eol " << int(eol[0]);
      EXPECT_EQ(tasks[0].name, "a");
      EXPECT_EQ(tasks[2].num_gpu, 2);
    }
  }
  // Line numbers in errors count every kind of line end.
  EXPECT_THAT(ParseOpenbTasks(rows[0] + "\r" + rows[1] + "\r\n\rx,1,1,1,9999\r", "t.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument, "t.csv:4: column 'gpu_milli'"));
  ASSERT_OK_AND_ASSIGN(std::vector<Node> nodes,
                       ParseOpenbNodes("\xEF\xBB\xBFsn,cpu_milli,memory_mib,gpu,model\rn0,1,1,1,T4\r"));
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name, "n0");
}

TEST(ParseOpenbNodesTest, MakesSharingNodesWithModelMemory) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<Node> nodes,
      ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\n"
                      "n0,64000,262144,2,P100\nn1,96000,786432,8,V100M32\nn2,32000,1024,0,\n"
                      "n3,1000,1,1,G2\n"));
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].cpu, 64000);
  EXPECT_EQ(nodes[0].host_memory, 262144);
  ASSERT_EQ(nodes[0].gpus.size(), 2u);
  EXPECT_EQ(nodes[0].gpus[1].model, "P100");
  EXPECT_EQ(nodes[0].gpus[1].memory, 16);
  EXPECT_EQ(nodes[1].gpus[0].memory, 32);
  EXPECT_TRUE(nodes[2].gpus.empty());
  EXPECT_EQ(nodes[3].gpus[0].memory, 16);  // Unlisted model: the default.
  EXPECT_EQ(nodes[0].gpu_sharing, std::optional<bool>(true));
  TraceOptions options;
  options.default_gpu_memory = 40;
  ASSERT_OK_AND_ASSIGN(nodes, ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\nn,1,1,1,G1\n",
                                              "x", options));
  EXPECT_EQ(nodes[0].gpus[0].memory, 40);
}

TEST(ParseOpenbNodesTest, Errors) {
  const std::string header = "sn,cpu_milli,memory_mib,gpu,model\n";
  EXPECT_THAT(ParseOpenbNodes(header + "a,1,1,1,T4\na,1,1,1,T4\n", "n.csv"),
              StatusIs(absl::StatusCode::kInvalidArgument, "n.csv:3: column 'sn' repeats"));
  EXPECT_THAT(ParseOpenbNodes(header + "a,1,1,65,T4\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "column 'gpu' 65"));
  EXPECT_THAT(ParseOpenbNodes("sn,cpu_milli,gpu,model\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "missing column 'memory_mib'"));
  TraceOptions bad;
  bad.default_gpu_memory = 0;
  EXPECT_THAT(ParseOpenbNodes(header, "x", bad),
              StatusIs(absl::StatusCode::kInvalidArgument, "default gpu memory 0"));
  EXPECT_THAT(LoadOpenbNodes("/nonexistent/nodes.csv"), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ToRequestTest, MapsTheKinds) {
  TraceTask t;
  t.name = "s";
  t.cpu = 3000;
  t.memory_mib = 100;
  t.num_gpu = 1;
  t.gpu_milli = 460;
  t.gpu_spec = {"T4"};
  Request r = ToRequest(t);
  EXPECT_EQ(r.id, "s");
  EXPECT_EQ(r.compute, 460);
  EXPECT_EQ(r.gpu_count, 1);
  EXPECT_EQ(r.whole_gpus, 0);
  EXPECT_EQ(r.gpu_memory, 0);
  EXPECT_EQ(r.cpu, 3000);
  EXPECT_EQ(r.host_memory, 100);
  EXPECT_EQ(r.gpu_models, std::vector<std::string>{"T4"});
  t.num_gpu = 4;
  t.gpu_milli = 1000;
  r = ToRequest(t);
  EXPECT_EQ(r.whole_gpus, 4);
  EXPECT_EQ(r.compute, 0);
  t.num_gpu = 0;
  t.gpu_milli = 0;
  r = ToRequest(t);
  EXPECT_EQ(r.whole_gpus, 0);
  EXPECT_EQ(r.compute, 0);
  EXPECT_EQ(ToRequests({t, t}).size(), 2u);
}

TEST(OpenbTraceTest, LoadsEveryFile) {
  const std::string dir = testing::OpenbDir();
  if (dir.empty()) GTEST_SKIP() << "openb traces not found under " << testing::SharedDir();
  ASSERT_OK_AND_ASSIGN(std::vector<Node> nodes, LoadOpenbNodes(dir + "/openb_node_list_gpu_node.csv"));
  EXPECT_EQ(nodes.size(), 1213u);
  size_t gpus = 0;
  for (const Node& n : nodes) gpus += n.gpus.size();
  EXPECT_EQ(gpus, 6212u);
  ASSERT_OK_AND_ASSIGN(nodes, LoadOpenbNodes(dir + "/openb_node_list_all_node.csv"));
  EXPECT_EQ(nodes.size(), 1523u);
  ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks,
                       LoadOpenbTasks(dir + "/openb_pod_list_default.csv"));
  EXPECT_EQ(tasks.size(), 8152u);
  int cpu_only = 0, sharing = 0;
  for (const TraceTask& t : tasks) {
    cpu_only += t.num_gpu == 0;
    sharing += t.num_gpu == 1 && t.gpu_milli < 1000;
  }
  EXPECT_EQ(sharing, 3078);
  EXPECT_NEAR(100.0 * cpu_only / 8152, 13.35, 0.01);
  for (const char* name : {"cpu050", "cpu200", "gpushare40", "gpushare80", "gpuspec10",
                           "gpuspec25", "multigpu20", "multigpu40"}) {
    EXPECT_OK(LoadOpenbTasks(dir + "/openb_pod_list_" + name + ".csv").status()) << name;
  }
}

}  // namespace
}  // namespace gpushare
