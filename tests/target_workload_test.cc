// The target workload for every host: its JSON form (gpushare/fragmentation.h),
// `gpushare typical-tasks`, the Scheduler's policy options, and fgdpack's
// packing prices shared between the policies a host makes.

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "gpushare/gpushare.h"
#include "src/fgd/packing.h"
#include "tests/testing/packing_fixtures.h"
#include "tests/testing/sim_fixtures.h"
#include "tests/testing/status_matchers.h"

namespace gpushare {
namespace {

using ::gpushare::testing::StatusIs;
using ::testing::HasSubstr;

void ExpectSameTarget(const TargetWorkload& a, const TargetWorkload& b) {
  EXPECT_EQ(a.resource, b.resource);
  ASSERT_EQ(a.tasks.size(), b.tasks.size());
  for (size_t i = 0; i < a.tasks.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(a.tasks[i].cpu, b.tasks[i].cpu);
    EXPECT_EQ(a.tasks[i].gpu_share, b.tasks[i].gpu_share);
    EXPECT_EQ(a.tasks[i].gpu_count, b.tasks[i].gpu_count);
    EXPECT_EQ(a.tasks[i].gpu_models, b.tasks[i].gpu_models);
    EXPECT_EQ(a.tasks[i].weight, b.tasks[i].weight);  // Exactly: JSON keeps doubles.
  }
}

TEST(TargetWorkloadJsonTest, WritingThenReadingGivesTheSameWorkload) {
  TargetWorkload t;
  t.resource = FragResource::kMemory;
  t.tasks = {TargetTask{3152, 8, 1, {}, 0.1348184393510172},
             TargetTask{11300, 0, 2, {"V100M16", "V100M32"}, 1.0 / 3},
             TargetTask{4000, 0, 0, {}, 0.5}};
  ASSERT_OK_AND_ASSIGN(TargetWorkload back, TargetWorkloadFromJson(TargetWorkloadToJson(t)));
  ExpectSameTarget(back, t);
  // Fields other than the weight default; compute is the default resource.
  ASSERT_OK_AND_ASSIGN(TargetWorkload minimal,
                       TargetWorkloadFromJson(R"({"tasks": [{"weight": 2}]})"));
  EXPECT_EQ(minimal.resource, FragResource::kCompute);
  ASSERT_EQ(minimal.tasks.size(), 1u);
  EXPECT_EQ(minimal.tasks[0].gpu_count, 0);
  EXPECT_EQ(minimal.tasks[0].weight, 2);
}

TEST(TargetWorkloadJsonTest, RefusesBadInputNamingTheValue) {
  const std::pair<const char*, const char*> cases[] = {
      {"{", "malformed JSON"},
      {"[]", "not a JSON object"},
      {R"({"tasks": []})", "tasks: the list is empty"},
      {R"({"resource": "compute"})", "'tasks' is missing"},
      {R"({"resource": "disk", "tasks": [{"weight": 1}]})", "\"disk\" is not \"compute\""},
      {R"({"tasks": [{"weight": 1}], "extra": 1})", "unknown key 'extra'"},
      {R"({"tasks": [{"weight": 1, "gpu_shares": 5}]})", "tasks[0]: unknown key 'gpu_shares'"},
      {R"({"tasks": [{"cpu": 1}]})", "tasks[0]: field 'weight' is missing"},
      {R"({"tasks": [{"weight": 1}, {"weight": -1}]})", "tasks[1].weight: -1 is not a positive"},
      {R"({"tasks": [{"weight": 0}]})", "tasks[0].weight: 0 is not a positive"},
      {R"({"tasks": [{"weight": "1"}]})", "tasks[0].weight: \"1\" is not a positive"},
      {R"({"tasks": [{"weight": 1, "cpu": -5}]})", "tasks[0].cpu: -5 is outside 0.."},
      {R"({"tasks": [{"weight": 1, "cpu": 1.5}]})", "tasks[0].cpu: 1.5 is not an integer"},
      {R"({"tasks": [{"weight": 1, "gpu_count": 65}]})", "tasks[0].gpu_count: 65 is outside 0..64"},
      {R"({"tasks": [{"weight": 1, "gpu_share": 5}]})", "gpu_share 5 with gpu_count 0"},
      {R"({"tasks": [{"weight": 1, "gpu_count": 1, "gpu_models": "T4"}]})",
       "tasks[0].gpu_models: is not a list"},
      {R"({"tasks": [{"weight": 1, "gpu_count": 1, "gpu_models": [4]}]})",
       "tasks[0].gpu_models: 4 is not a string"},
  };
  for (const auto& [text, message] : cases) {
    SCOPED_TRACE(text);
    absl::StatusOr<TargetWorkload> t = TargetWorkloadFromJson(text);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(message));
  }
}

TEST(TargetWorkloadValidationTest, NamesTheBadValueAndMakePolicyRefusesIt) {
  TargetWorkload good;
  good.tasks = {TargetTask{1000, 8, 1, {}, 0.5}};
  EXPECT_OK(ValidateTargetWorkload(good));
  struct Case {
    TargetTask task;
    const char* message;
  };
  const Case cases[] = {
      {{0, 4, 1, {}, -1}, "tasks[1].weight: -1 is not a positive number"},
      {{0, 4, 1, {}, std::nan("")}, "tasks[1].weight: nan is not a positive number"},
      {{0, 4, 0, {}, 1}, "tasks[1]: gpu_share 4 with gpu_count 0"},
      {{-1, 0, 0, {}, 1}, "tasks[1].cpu: -1 is outside 0..4294967296"},
      {{0, kMaxQuantity + 1, 1, {}, 1}, "tasks[1].gpu_share: 4294967297 is outside"},
      {{0, 4, kMaxGpusPerNode + 1, {}, 1}, "tasks[1].gpu_count: "},
  };
  for (const Case& c : cases) {
    TargetWorkload bad = good;
    bad.tasks.push_back(c.task);
    EXPECT_THAT(ValidateTargetWorkload(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, c.message));
    PolicyOptions options;
    options.fgd_target = std::make_shared<TargetWorkload>(bad);
    for (const char* name : {"fgd", "fgdpack", "binpack"}) {
      EXPECT_THAT(MakePolicy(name, options),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           absl::StrCat("policy '", name, "': target workload: ", c.message)));
    }
  }
  EXPECT_THAT(ValidateTargetWorkload(TargetWorkload{}),
              StatusIs(absl::StatusCode::kInvalidArgument, "tasks: the list is empty"));
  PolicyOptions options;
  options.fgd_target = std::make_shared<TargetWorkload>(good);
  EXPECT_OK(MakePolicy("fgdpack", options).status());
}

TEST(SharedPackingTest, SolvesEachTargetOnceAndEqualsTheSolve) {
  const std::vector<fgd::PackingItem> items = {{470, 0.4}, {810, 0.4}, {160, 0.2}};
  const auto a = fgd::SharedPacking(items, 1000);
  const auto b = fgd::SharedPacking(items, 1000);
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->value, fgd::SolvePacking(items, 1000).value);
  EXPECT_NE(fgd::SharedPacking(items, 2000).get(), a.get());
  EXPECT_NE(fgd::SharedPacking({{470, 0.5}, {810, 0.3}, {160, 0.2}}, 1000).get(), a.get());
  // The oldest are dropped past 64 targets; the values stay correct.
  for (int64_t full = 100; full < 200; ++full) {
    EXPECT_EQ(fgd::SharedPacking({{50, 1}}, full)->value.size(), static_cast<size_t>(full + 1));
  }
  EXPECT_EQ(fgd::SharedPacking(items, 1000)->value, a->value);
  // A NaN weight is left out, as the solve leaves it out; it does not match
  // another target's entry.
  const std::vector<fgd::PackingItem> with_nan = {{470, 0.4}, {810, std::nan("")}, {160, 0.2}};
  EXPECT_EQ(fgd::SharedPacking(with_nan, 1000)->value, fgd::SolvePacking(with_nan, 1000).value);
  EXPECT_NE(fgd::SharedPacking(with_nan, 1000)->value, a->value);
}

// A scheduler hands its policy options to every policy it makes: with the
// target, fgdpack keeps the 840 a 160 share left for an 810 share and puts a
// 650 on the idle GPU; without one (fragmentation against a single
// whole-GPU task) it takes the tighter GPU.
TEST(SchedulerTargetTest, PoliciesGetTheTargetWorkload) {
  for (bool with_target : {true, false}) {
    SCOPED_TRACE(with_target);
    SchedulerOptions options;
    options.policy = "fgdpack";
    if (with_target) {
      options.policy_options.fgd_target =
          std::make_shared<const TargetWorkload>(testing::PackingTarget());
    }
    ASSERT_OK_AND_ASSIGN(
        std::unique_ptr<Scheduler> s,
        Scheduler::Create(testing::OneGpuNodesHolding({{"hole-840", 160}, {"idle", 0}}),
                          options));
    const Request r = testing::ComputeShare("r", 650);
    ASSERT_OK_AND_ASSIGN(std::vector<NodeScore> scores, s->Score(r));
    ASSERT_EQ(scores.size(), 2u);
    ASSERT_OK_AND_ASSIGN(Placement placed, s->Reserve(r));
    EXPECT_EQ(placed.node, with_target ? "idle" : "hole-840");
  }
}

const char kCli[] = GPUSHARE_CLI_PATH;

TEST(TypicalTasksCommandTest, WritesTheTypicalTasksOfATraceOrAPodList) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream tasks(dir + "/tt_tasks.csv");
    tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
             "t0,4000,1024,1,500,\nt1,4000,1024,1,500,\nt2,8000,1024,2,1000,V100M16\n"
             "t3,1000,512,0,0,\n";
  }
  auto [code, out] = testing::RunCommand(std::string(kCli) + " typical-tasks --tasks " + dir +
                                         "/tt_tasks.csv --coverage 1");
  ASSERT_EQ(code, 0) << out;
  ASSERT_OK_AND_ASSIGN(TargetWorkload got, TargetWorkloadFromJson(out));
  ASSERT_OK_AND_ASSIGN(std::vector<TraceTask> tasks, LoadOpenbTasks(dir + "/tt_tasks.csv"));
  ASSERT_OK_AND_ASSIGN(TargetWorkload want, TypicalTasks(ToRequests(tasks), 1.0));
  ExpectSameTarget(got, want);
  EXPECT_EQ(got.tasks.size(), 3u);

  {
    std::ofstream pods(dir + "/tt_pods.json");
    pods << R"({"kind": "PodList", "items": [)"
         << R"({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"containers": [)"
         << R"({"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": "4", "cpu": "2"}}}]}},)"
         << R"({"metadata": {"name": "b", "namespace": "ns"}, "spec": {"containers": [)"
         << R"({"name": "c", "resources": {"limits": {"aliyun.com/gpu-mem": "4", "cpu": "2"}}}]}})"
         << "]}";
  }
  std::tie(code, out) = testing::RunCommand(std::string(kCli) + " typical-tasks --pods " + dir +
                                            "/tt_pods.json --out " + dir + "/tt_target.json");
  ASSERT_EQ(code, 0) << out;
  std::ifstream in(dir + "/tt_target.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_OK_AND_ASSIGN(TargetWorkload memory, TargetWorkloadFromJson(text));
  EXPECT_EQ(memory.resource, FragResource::kMemory);
  ASSERT_EQ(memory.tasks.size(), 1u);
  EXPECT_EQ(memory.tasks[0].gpu_share, 4);
  EXPECT_EQ(memory.tasks[0].cpu, 2000);
  EXPECT_EQ(memory.tasks[0].weight, 1.0);

  std::tie(code, out) = testing::RunCommand(std::string(kCli) + " typical-tasks --tasks " + dir +
                                            "/missing.csv 2>&1");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("missing.csv"));
  std::tie(code, out) = testing::RunCommand(std::string(kCli) + " typical-tasks --tasks " + dir +
                                            "/tt_tasks.csv --coverage 2 2>&1");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(out, HasSubstr("coverage"));
}

// Every command takes "--flag=value" as well as "--flag value", as
// gpushare-extender does; a switch given a value is refused, naming it.
TEST(CommandLineTest, FlagsTakeTheirValueAfterAnEqualsSignToo) {
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream tasks(dir + "/eq_tasks.csv");
    tasks << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
             "t0,4000,1024,1,500,\nt1,4000,1024,1,500,\nt2,8000,1024,2,1000,V100M16\n";
  }
  const std::string tasks = dir + "/eq_tasks.csv";
  const std::string command = std::string(kCli) + " typical-tasks";
  auto [code, spaced] = testing::RunCommand(command + " --tasks " + tasks + " --coverage 0.5");
  ASSERT_EQ(code, 0) << spaced;
  std::string joined;
  std::tie(code, joined) = testing::RunCommand(command + " --tasks=" + tasks + " --coverage=0.5");
  ASSERT_EQ(code, 0) << joined;
  EXPECT_EQ(joined, spaced);
  // --coverage=0.5 keeps one of the two shapes: the value was read.
  ASSERT_OK_AND_ASSIGN(TargetWorkload got, TargetWorkloadFromJson(joined));
  EXPECT_EQ(got.tasks.size(), 1u);
  // A value may contain '=' itself (here a file name), in either form.
  std::tie(code, joined) = testing::RunCommand(std::string(kCli) + " typical-tasks --tasks=" +
                                               dir + "/a=b.csv 2>&1");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(joined, HasSubstr("a=b.csv"));

  for (const char* bad : {"simulate --markdown=yes", "simulate --replay=1",
                          "sweep --progress=true", "typical-tasks --help=x"}) {
    SCOPED_TRACE(bad);
    std::string out;
    std::tie(code, out) = testing::RunCommand(std::string(kCli) + " " + bad + " 2>&1");
    EXPECT_EQ(code, 2);
    EXPECT_THAT(out, HasSubstr("takes no value"));
    EXPECT_THAT(out, HasSubstr(std::string(bad).substr(std::string(bad).find(' ') + 1)));
  }
  std::string out;
  std::tie(code, out) = testing::RunCommand(std::string(kCli) + " simulate --nodes=" + dir +
                                            "/no-nodes.csv --tasks=" + tasks + " 2>&1");
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("no-nodes.csv"));
}

}  // namespace
}  // namespace gpushare
