// The programs' flag parser (tools/flags/flags.h): the rules that
// gpushare-extender's flags do not exercise (tests/extender/config_test.cc
// covers the rest): repeatable flags and positional arguments in the order
// given, second long names, switches that take no value, and numbers.

#include "tools/flags/flags.h"

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace gpushare::flags {
namespace {

using ::gpushare::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A small program: --name (also --alias), repeatable --item, switches --on
// and --off, --ratio in 0..1, --count of any size, and FILE arguments.
struct Program {
  std::string name;
  std::vector<std::string> items;  // --item and FILE alike, in the order given.
  std::vector<std::string> switches;
  double ratio = 0.5;
  int64_t count = 0;
  FlagSet flags{"prog", "usage: prog [flags] FILE...", "About prog."};

  Program() {
    flags.Add("Flags", "--name,--alias", "NAME", "a name", SetString("--name", &name));
    auto add = [this](const char* v) -> std::string {
      if (v == nullptr) return "--item takes a value";
      items.push_back(v);
      return "";
    };
    flags.AddRepeated("Flags", "--item", "X", "an item", add);
    flags.AddPositionals("FILE", "files", add);
    flags.AddSwitch("Flags", "--on", "on", [this] { switches.push_back("on"); });
    flags.AddSwitch("Flags", "--off", "off", [this] { switches.push_back("off"); });
    flags.Add("Numbers", "--ratio", "R", "a ratio", SetDouble("--ratio", "a ratio", 0, 1, &ratio));
    flags.Add("Numbers", "--count", "N", "a count", SetInt("--count", &count));
  }

  absl::Status Parse(std::initializer_list<const char*> args) {
    std::vector<const char*> argv = {"prog"};
    argv.insert(argv.end(), args.begin(), args.end());
    return flags.Parse(static_cast<int>(argv.size()), argv.data());
  }
};

TEST(FlagSetTest, RepeatedFlagsAndArgumentsKeepTheirOrder) {
  Program p;
  ASSERT_OK(p.Parse({"a", "--item", "b", "c", "--item=d", "--name", "n", "e"}));
  EXPECT_THAT(p.items, ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_EQ(p.name, "n");
}

TEST(FlagSetTest, ARepeatedFlagTakesOneValueEachTime) {
  Program p;
  // "--item b c": c is an argument of its own, not a second value of --item.
  ASSERT_OK(p.Parse({"--item", "b", "c"}));
  EXPECT_THAT(p.items, ElementsAre("b", "c"));
  Program q;
  ASSERT_OK(q.Parse({"--item=", "--item", "--on"}));
  EXPECT_THAT(q.items, ElementsAre("", "--on"));
  EXPECT_TRUE(q.switches.empty());
  EXPECT_EQ(Program().Parse({"x", "--item"}).message(), "--item takes a value");
}

TEST(FlagSetTest, EveryLongNameOfAFlagWorks) {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"--alias", "x"}, {"--alias=x"}, {"--name", "y", "--alias", "x"}}) {
    Program p;
    std::vector<const char*> argv = {"prog"};
    argv.insert(argv.end(), args.begin(), args.end());
    ASSERT_OK(p.flags.Parse(static_cast<int>(argv.size()), argv.data()));
    EXPECT_EQ(p.name, "x");
  }
  Program p;
  ASSERT_OK(p.Parse({"--name", "y", "--alias="}));
  EXPECT_EQ(p.name, "");
  EXPECT_EQ(Program().Parse({"--alias"}).message(), "--name takes a value");
}

TEST(FlagSetTest, SwitchesTakeNoValueAndTheLaterWins) {
  Program p;
  ASSERT_OK(p.Parse({"--off", "--on", "--off"}));
  EXPECT_THAT(p.switches, ElementsAre("off", "on", "off"));
  EXPECT_THAT(Program().Parse({"--on=yes"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--on takes no value, got '--on=yes'"));
  EXPECT_EQ(Program().Parse({"--on=true"}).message(), "--on takes no value, got '--on=true'");
  EXPECT_EQ(Program().Parse({"--on="}).message(), "--on takes no value, got '--on='");
  EXPECT_EQ(Program().Parse({"--help=x"}).message(), "--help takes no value, got '--help=x'");
  // As the value of a flag, "--on=yes" is only text.
  Program q;
  ASSERT_OK(q.Parse({"--name", "--on=yes"}));
  EXPECT_EQ(q.name, "--on=yes");
  EXPECT_TRUE(q.switches.empty());
}

TEST(FlagSetTest, NumbersAreCheckedWhole) {
  Program p;
  ASSERT_OK(p.Parse({"--ratio", "0.25", "--count=-7"}));
  EXPECT_EQ(p.ratio, 0.25);
  EXPECT_EQ(p.count, -7);
  ASSERT_OK(p.Parse({"--ratio", "1e-1"}));
  EXPECT_EQ(p.ratio, 0.1);
  for (const char* bad : {"1.5", "-0.1", "0.5x", "nan", "", "1e999"}) {
    Program q;
    EXPECT_EQ(q.Parse({"--ratio", bad}).message(),
              std::string("--ratio takes a ratio in 0..1, not ") + bad);
    EXPECT_EQ(q.ratio, 0.5) << bad;
  }
  EXPECT_EQ(Program().Parse({"--count", "1.0"}).message(), "--count takes a whole number, not 1.0");
  EXPECT_EQ(Program().Parse({"--count=9223372036854775808"}).message(),
            "--count takes a whole number, not 9223372036854775808");
}

TEST(FlagSetTest, AnyNumberIsANumberWithoutRange) {
  double x = 0;
  FlagSet::Setter set = SetDouble("--x", &x);
  EXPECT_EQ(set("-3.5"), "");
  EXPECT_EQ(x, -3.5);
  EXPECT_EQ(set("inf"), "");
  EXPECT_TRUE(std::isinf(x));
  EXPECT_EQ(set("nan"), "--x takes a number, not nan");
  EXPECT_EQ(set(nullptr), "--x takes a number, not nothing");
  int n = 0;
  EXPECT_EQ(SetInt("--n", &n)("2147483648"), "--n takes a whole number, not 2147483648");
  EXPECT_EQ(SetInt("--n", &n)("-2147483648"), "");
  EXPECT_EQ(n, -2147483648LL);
}

TEST(FlagSetTest, LongValuesAreCutInMessages) {
  const std::string huge(5000, '7');
  Program p;
  const absl::Status s = p.Parse({"--ratio", huge.c_str()});
  EXPECT_THAT(std::string(s.message()), HasSubstr("... (5000 bytes)"));
  EXPECT_LT(s.message().size(), 200u);
  const std::string flag = "--" + huge;
  const absl::Status unknown = Program().Parse({flag.c_str()});
  EXPECT_THAT(std::string(unknown.message()), HasSubstr("unknown or incomplete flag --777"));
  EXPECT_LT(unknown.message().size(), 200u);
}

TEST(FlagSetTest, HelpListsRepeatedFlagsSwitchesAndArguments) {
  Program p;
  ASSERT_OK(p.Parse({"--item", "a", "-h"}));
  EXPECT_TRUE(p.flags.help_requested());
  const std::string help = p.flags.Help();
  EXPECT_THAT(help, ::testing::StartsWith("usage: prog [flags] FILE...\nAbout prog.\n"));
  for (const char* shown : {"--name,--alias NAME", "--item X", "--on", "--off", "FILE",
                            "--ratio R", "Numbers:", "-h,--help"}) {
    EXPECT_THAT(help, HasSubstr(shown));
  }
}

TEST(FlagSetTest, VersionIsASwitchThatNamesTheProgramAndTheBuild) {
  Program p;
  ASSERT_OK(p.Parse({"--version"}));
  EXPECT_TRUE(p.flags.version_requested());
  EXPECT_FALSE(p.flags.help_requested());
  // "prog 0.1.0 (git <describe>)\n", the git part only from a checkout.
  EXPECT_THAT(p.flags.Version(),
              ::testing::MatchesRegex("prog [0-9]+\\.[0-9]+\\.[0-9]+( \\(git [A-Za-z0-9._+-]+\\))?\n"));
  EXPECT_THAT(Program().Parse({"--version=yes"}),
              StatusIs(absl::StatusCode::kInvalidArgument, "--version takes no value"));
  Program q;
  ASSERT_OK(q.Parse({"--name", "x"}));
  EXPECT_FALSE(q.flags.version_requested());
  EXPECT_THAT(q.flags.Help(), HasSubstr("--version"));
}

}  // namespace
}  // namespace gpushare::flags
