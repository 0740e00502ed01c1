// `gpushare simulate`'s flags (cli/simulate_command.h): parsed without
// running anything. tests/simulate_test.cc runs the command itself.

#include "cli/simulate_command.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/flag_parsing.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::cli {
namespace {

using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<SimulateConfig> Parse(std::initializer_list<const char*> args) {
  return ::gpushare::testing::ParseFlags(ParseSimulateFlags, "simulate", args);
}

std::string Error(std::initializer_list<const char*> args) {
  return ::gpushare::testing::FlagError(Parse(args));
}

TEST(SimulateFlagsTest, DefaultsAreThePapersExperiment) {
  ASSERT_OK_AND_ASSIGN(SimulateConfig c, Parse({"--nodes", "n.csv", "--tasks", "t.csv"}));
  EXPECT_FALSE(c.help);
  EXPECT_EQ(c.nodes, "n.csv");
  EXPECT_EQ(c.tasks, "t.csv");
  EXPECT_THAT(c.policies,
              ElementsAre("fgd", "bestfit", "dotprod", "gpupacking", "gpuclustering", "random"));
  EXPECT_EQ(c.seeds.size(), 10u);
  EXPECT_EQ(c.seeds.front(), 42u);
  EXPECT_EQ(c.seeds.back(), 51u);
  EXPECT_EQ(c.inflate, 1.3);
  EXPECT_EQ(c.threads, 0);
  EXPECT_FALSE(c.markdown);
  EXPECT_FALSE(c.replay);
  EXPECT_TRUE(c.curve.empty());
  EXPECT_TRUE(c.topologies.empty());
  EXPECT_THAT(c.migration_budgets, ElementsAre(0));
  EXPECT_EQ(c.max_moves, SimulationOptions{}.max_moves_per_request);
  EXPECT_EQ(c.migration_nodes, SimulationOptions{}.migration_nodes);
  EXPECT_EQ(c.migration_search, SimulationOptions{}.migration_search_budget);
}

TEST(SimulateFlagsTest, EqualsAndSpaceFormsAreTheSameFlag) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--nodes", "n.csv", "--tasks", "t.csv", "--policies", "fgd,bestfit", "--seeds", "1-3",
            "--inflate", "1.1", "--threads", "4", "--curve", "c.csv", "--topology", "8=a.txt",
            "--topology", "V100=b.json", "--migrations", "0,50", "--max-moves", "1",
            "--migration-nodes", "16", "--migration-search", "500", "--markdown"},
           {"--nodes=n.csv", "--tasks=t.csv", "--policies=fgd,bestfit", "--seeds=1-3",
            "--inflate=1.1", "--threads=4", "--curve=c.csv", "--topology=8=a.txt",
            "--topology=V100=b.json", "--migrations=0,50", "--max-moves=1",
            "--migration-nodes=16", "--migration-search=500", "--markdown"}}) {
    std::vector<const char*> argv = {"simulate"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_OK_AND_ASSIGN(SimulateConfig c,
                         ParseSimulateFlags(static_cast<int>(argv.size()), argv.data()));
    EXPECT_EQ(c.nodes, "n.csv");
    EXPECT_EQ(c.tasks, "t.csv");
    EXPECT_THAT(c.policies, ElementsAre("fgd", "bestfit"));
    EXPECT_THAT(c.seeds, ElementsAre(1u, 2u, 3u));
    EXPECT_EQ(c.inflate, 1.1);
    EXPECT_EQ(c.threads, 4);
    EXPECT_EQ(c.curve, "c.csv");
    EXPECT_THAT(c.topologies, ElementsAre("8=a.txt", "V100=b.json"));  // In order.
    EXPECT_THAT(c.migration_budgets, ElementsAre(0, 50));
    EXPECT_EQ(c.max_moves, 1);
    EXPECT_EQ(c.migration_nodes, 16);
    EXPECT_EQ(c.migration_search, 500);
    EXPECT_TRUE(c.markdown);
  }
}

TEST(SimulateFlagsTest, PolicyIsASecondNameOfPolicies) {
  ASSERT_OK_AND_ASSIGN(SimulateConfig c,
                       Parse({"--nodes", "n", "--tasks", "t", "--policy", "fgdcpu"}));
  EXPECT_THAT(c.policies, ElementsAre("fgdcpu"));
  ASSERT_OK_AND_ASSIGN(c, Parse({"--nodes", "n", "--tasks", "t", "--policies", "fgd",
                                 "--policy=random"}));
  EXPECT_THAT(c.policies, ElementsAre("random"));  // The last given.
}

TEST(SimulateFlagsTest, BadValuesAreRefusedNamingFlagAndValue) {
  struct Case {
    std::initializer_list<const char*> args;
    const char* message;
  };
  for (const Case& c : std::initializer_list<Case>{
           {{"--inflate", "x"}, "--inflate takes a number, not x"},
           {{"--threads=-1"}, "--threads takes a count in 0..2147483647, not -1"},
           {{"--max-moves", "two"}, "--max-moves takes a whole number, not two"},
           {{"--migration-nodes", "1.5"}, "--migration-nodes takes a whole number, not 1.5"},
           {{"--migration-search", ""}, "--migration-search takes a whole number, not "},
           {{"--migrations", "1,x"}, "--migrations 'x' is not a budget in 0..10000"},
           {{"--migrations", "10001"}, "--migrations '10001' is not a budget in 0..10000"},
           {{"--migrations", ","}, "--migrations ',' gives no budget"},
           {{"--seeds", "1,1"}, "--seeds '1,1' lists seed 1 twice"},
           {{"--seeds=x"}, "--seeds 'x' is not A-B or A,B,... (seeds are integers "
                           "0..18446744073709551615, a range A-B has A <= B)"},
           {{"--markdown=yes"}, "--markdown takes no value, got '--markdown=yes'"},
           {{"--replay=1"}, "--replay takes no value, got '--replay=1'"},
       }) {
    std::vector<const char*> args = {"--nodes", "n", "--tasks", "t"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    std::vector<const char*> argv = {"simulate"};
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<SimulateConfig> parsed =
        ParseSimulateFlags(static_cast<int>(argv.size()), argv.data());
    EXPECT_THAT(parsed, StatusIs(absl::StatusCode::kInvalidArgument)) << *c.args.begin();
    EXPECT_EQ(parsed.status().message(), c.message) << *c.args.begin();
  }
  EXPECT_THAT(Error({"--nodes", "n", "--tasks", "t", "--policies", "fgd,best"}),
              HasSubstr("--policies: unknown policy 'best'; known policies: "));
  // The simulator checks the ranges of these (exit 1, with its message).
  ASSERT_OK_AND_ASSIGN(SimulateConfig c, Parse({"--nodes", "n", "--tasks", "t", "--max-moves",
                                                "9", "--inflate", "500"}));
  EXPECT_EQ(c.max_moves, 9);
  EXPECT_EQ(c.inflate, 500);
}

TEST(SimulateFlagsTest, MissingValuesUnknownFlagsAndMissingFilesAreNamed) {
  EXPECT_EQ(Error({"--nodes", "n", "--tasks"}), "--tasks takes a value");
  EXPECT_EQ(Error({"--nodes", "n", "--tasks", "t", "--seeds"}), "--seeds takes a value");
  EXPECT_EQ(Error({"--nodes", "n", "--tasks", "t", "--topology"}),
            "--topology takes N=FILE or MODEL=FILE");
  EXPECT_EQ(Error({"--nodes", "n", "--tasks", "t", "--bogus", "1"}),
            "unknown or incomplete flag --bogus");
  EXPECT_EQ(Error({"--nodes", "n", "--tasks", "t", "stray.csv"}),
            "unknown or incomplete flag stray.csv");
  EXPECT_EQ(Error({"--nodes", "n"}), "--nodes and --tasks are required");
  EXPECT_EQ(Error({"--tasks", "t", "--nodes="}), "--nodes and --tasks are required");
  EXPECT_EQ(Error({"--nodes", "n", "--tasks", "t", "--replay", "--migrations", "0,5"}),
            "--replay does not migrate; drop --migrations");
}

TEST(SimulateFlagsTest, HelpIsAskedForWithEitherSpellingAndListsEveryFlag) {
  for (const char* flag : {"--help", "-h"}) {
    // Nothing else is checked: --nodes and --tasks may be missing.
    ASSERT_OK_AND_ASSIGN(SimulateConfig c, Parse({"--seeds", "1", flag}));
    EXPECT_TRUE(c.help) << flag;
  }
  const std::string help = SimulateHelp();
  EXPECT_THAT(help, ::testing::StartsWith("usage: gpushare simulate --nodes FILE --tasks FILE"));
  for (const char* flag :
       {"--nodes FILE", "--tasks FILE", "--policies,--policy LIST", "--seeds", "--inflate X",
        "--threads N", "--curve FILE", "--markdown", "--topology N=FILE|MODEL=FILE", "--replay",
        "--migrations LIST", "--max-moves N", "--migration-nodes N", "--migration-search N",
        "--help", "(default 42-51)", "(default 1.3)"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace gpushare::cli
