// `gpushare typical-tasks`'s flags (cli/typical_tasks_command.h): parsed
// without reading anything. tests/target_workload_test.cc runs the command.

#include "cli/typical_tasks_command.h"

#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/flag_parsing.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::cli {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<TypicalTasksConfig> Parse(std::initializer_list<const char*> args) {
  return ::gpushare::testing::ParseFlags(ParseTypicalTasksFlags, "typical-tasks", args);
}

std::string Error(std::initializer_list<const char*> args) {
  return ::gpushare::testing::FlagError(Parse(args));
}

TEST(TypicalTasksFlagsTest, EqualsAndSpaceFormsAreTheSameFlag) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--tasks", "t.csv", "--coverage", "0.9", "--out", "w.json"},
           {"--tasks=t.csv", "--coverage=0.9", "--out=w.json"}}) {
    std::vector<const char*> argv = {"typical-tasks"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_OK_AND_ASSIGN(TypicalTasksConfig c,
                         ParseTypicalTasksFlags(static_cast<int>(argv.size()), argv.data()));
    EXPECT_EQ(c.tasks, "t.csv");
    EXPECT_EQ(c.pods, "");
    EXPECT_EQ(c.coverage, 0.9);
    EXPECT_EQ(c.out, "w.json");
  }
  ASSERT_OK_AND_ASSIGN(TypicalTasksConfig c, Parse({"--pods", "p.json"}));
  EXPECT_EQ(c.pods, "p.json");
  EXPECT_EQ(c.coverage, 0.95);
  EXPECT_EQ(c.out, "");
}

TEST(TypicalTasksFlagsTest, ExactlyOneWorkloadIsGiven) {
  EXPECT_EQ(Error({}), "give one of --tasks and --pods");
  EXPECT_EQ(Error({"--tasks", "t", "--pods", "p"}), "give one of --tasks and --pods");
  EXPECT_EQ(Error({"--tasks="}), "give one of --tasks and --pods");
}

TEST(TypicalTasksFlagsTest, BadValuesAndUnknownFlagsAreNamed) {
  EXPECT_EQ(Error({"--tasks", "t", "--coverage", "most"}), "--coverage takes a number, not most");
  EXPECT_EQ(Error({"--tasks", "t", "--coverage"}), "--coverage takes a number, not nothing");
  EXPECT_EQ(Error({"--tasks", "t", "--covrage", "0.9"}), "unknown or incomplete flag --covrage");
  EXPECT_EQ(Error({"--tasks", "t", "extra"}), "unknown or incomplete flag extra");
  // TypicalTasks() checks the range (exit 1, with its message).
  ASSERT_OK_AND_ASSIGN(TypicalTasksConfig c, Parse({"--tasks", "t", "--coverage", "2"}));
  EXPECT_EQ(c.coverage, 2);
}

TEST(TypicalTasksFlagsTest, HelpIsAskedForWithEitherSpellingAndListsEveryFlag) {
  for (const char* flag : {"--help", "-h"}) {
    ASSERT_OK_AND_ASSIGN(TypicalTasksConfig c, Parse({flag}));
    EXPECT_TRUE(c.help) << flag;
  }
  const std::string help = TypicalTasksHelp();
  EXPECT_THAT(help, ::testing::StartsWith("usage: gpushare typical-tasks (--tasks FILE.csv"));
  for (const char* flag : {"--tasks FILE", "--pods FILE", "--coverage C", "--out FILE",
                           "(default 0.95)", "--help"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace gpushare::cli
