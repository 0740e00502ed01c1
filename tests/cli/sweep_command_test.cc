// `gpushare sweep`'s flags and task files (cli/sweep_command.h): parsed
// without running anything. tests/simulate_test.cc runs the command itself.

#include "cli/sweep_command.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/flag_parsing.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<SweepConfig> Parse(std::initializer_list<const char*> args) {
  return ::gpushare::testing::ParseFlags(ParseSweepFlags, "sweep", args);
}

std::string Error(std::initializer_list<const char*> args) {
  return ::gpushare::testing::FlagError(Parse(args));
}

TEST(SweepFlagsTest, DefaultsAreThePapersExperiment) {
  ASSERT_OK_AND_ASSIGN(SweepConfig c, Parse({"--nodes", "n.csv", "a.csv"}));
  EXPECT_FALSE(c.help);
  EXPECT_EQ(c.nodes, "n.csv");
  EXPECT_THAT(c.tasks, ElementsAre("a.csv"));
  EXPECT_EQ(c.policies.size(), 6u);
  EXPECT_EQ(c.seeds.size(), 10u);
  EXPECT_EQ(c.inflate, 1.3);
  EXPECT_EQ(c.threads, 0);
  EXPECT_EQ(c.out, "");
  EXPECT_FALSE(c.progress.has_value());
}

TEST(SweepFlagsTest, TaskFilesComeInTheOrderGivenFromFlagsAndArguments) {
  ASSERT_OK_AND_ASSIGN(SweepConfig c, Parse({"a.csv", "--nodes", "n.csv", "--tasks", "b.csv",
                                             "c.csv", "--tasks=d.csv", "--seeds", "1", "e.csv"}));
  EXPECT_THAT(c.tasks, ElementsAre("a.csv", "b.csv", "c.csv", "d.csv", "e.csv"));
  EXPECT_THAT(c.seeds, ElementsAre(1u));
}

TEST(SweepFlagsTest, EqualsAndSpaceFormsAreTheSameFlag) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--nodes", "n.csv", "--policies", "fgd,random", "--seeds", "7,3", "--inflate", "2",
            "--threads", "3", "--out", "o.csv", "--tasks", "t.csv"},
           {"--nodes=n.csv", "--policies=fgd,random", "--seeds=7,3", "--inflate=2",
            "--threads=3", "--out=o.csv", "--tasks=t.csv"}}) {
    std::vector<const char*> argv = {"sweep"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_OK_AND_ASSIGN(SweepConfig c,
                         ParseSweepFlags(static_cast<int>(argv.size()), argv.data()));
    EXPECT_EQ(c.nodes, "n.csv");
    EXPECT_THAT(c.policies, ElementsAre("fgd", "random"));
    EXPECT_THAT(c.seeds, ElementsAre(7u, 3u));
    EXPECT_EQ(c.inflate, 2);
    EXPECT_EQ(c.threads, 3);
    EXPECT_EQ(c.out, "o.csv");
    EXPECT_THAT(c.tasks, ElementsAre("t.csv"));
  }
}

TEST(SweepFlagsTest, TheLastOfProgressAndNoProgressWins) {
  ASSERT_OK_AND_ASSIGN(SweepConfig c, Parse({"--nodes", "n", "t", "--progress"}));
  EXPECT_EQ(c.progress, true);
  ASSERT_OK_AND_ASSIGN(c, Parse({"--nodes", "n", "t", "--progress", "--no-progress"}));
  EXPECT_EQ(c.progress, false);
  ASSERT_OK_AND_ASSIGN(c, Parse({"--nodes", "n", "t", "--no-progress", "--progress"}));
  EXPECT_EQ(c.progress, true);
  EXPECT_EQ(Error({"--nodes", "n", "t", "--progress=yes"}),
            "--progress takes no value, got '--progress=yes'");
}

TEST(SweepFlagsTest, BadValuesAreRefusedNamingFlagAndValue) {
  EXPECT_EQ(Error({"--nodes", "n", "t", "--inflate", "101"}),
            "--inflate takes a number in 0..100, not 101");
  EXPECT_EQ(Error({"--nodes", "n", "t", "--inflate=x"}),
            "--inflate takes a number in 0..100, not x");
  EXPECT_EQ(Error({"--nodes", "n", "t", "--threads", "many"}),
            "--threads takes a count in 0..2147483647, not many");
  EXPECT_EQ(Error({"--nodes", "n", "t", "--seeds", ","}), "--seeds ',' gives no seeds");
  EXPECT_THAT(Error({"--nodes", "n", "t", "--policies", "fgd,nope"}),
              HasSubstr("--policies: unknown policy 'nope'; known policies: "));
  EXPECT_EQ(Error({"--nodes", "n", "t", "--tasks"}), "--tasks takes a file name");
}

TEST(SweepFlagsTest, UnknownFlagsAndMissingOrTwinFilesAreNamed) {
  EXPECT_EQ(Error({"--nodes", "n", "t", "--policy", "fgd"}), "unknown or incomplete flag --policy");
  EXPECT_EQ(Error({"--nodes", "n", "t", "-x"}), "unknown or incomplete flag -x");
  EXPECT_EQ(Error({"--nodes", "n"}), "--nodes and at least one task file are required");
  EXPECT_EQ(Error({"t.csv"}), "--nodes and at least one task file are required");
  // Two files with one trace label could not be told apart in the CSV.
  EXPECT_EQ(Error({"--nodes", "n", "a/openb_pod_list_x.csv", "--tasks", "b/x.csv"}),
            "two task files are named 'x'");
}

TEST(SweepFlagsTest, HelpIsAskedForWithEitherSpellingAndListsEveryFlag) {
  for (const char* flag : {"--help", "-h"}) {
    ASSERT_OK_AND_ASSIGN(SweepConfig c, Parse({flag}));
    EXPECT_TRUE(c.help) << flag;
  }
  const std::string help = SweepHelp();
  EXPECT_THAT(help, ::testing::StartsWith("usage: gpushare sweep --nodes FILE"));
  for (const char* flag : {"TASKS.csv", "--nodes FILE", "--tasks FILE", "--policies LIST",
                           "--seeds", "--inflate X", "--threads N", "--out FILE", "--progress",
                           "--no-progress", "--help"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace gpushare::cli
