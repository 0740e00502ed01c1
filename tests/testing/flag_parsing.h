// Helpers for the tests of a program's flag parsing (tests/cli/,
// tests/extender/config_test.cc): each program's parser takes argv and
// returns its configuration or an InvalidArgument naming the bad flag.
//
//   auto Parse = [](auto args) { return ParseFlags(ParseSweepFlags, "sweep", args); };
//   EXPECT_THAT(FlagError(Parse({"--seeds", "x"})), HasSubstr("--seeds"));

#ifndef GPUSHARE_TESTS_TESTING_FLAG_PARSING_H_
#define GPUSHARE_TESTS_TESTING_FLAG_PARSING_H_

#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace gpushare::testing {

// `parse` (a ParseXxxFlags function) on {program, args...}.
template <class Parser>
auto ParseFlags(Parser parse, const char* program, std::initializer_list<const char*> args) {
  std::vector<const char*> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  return parse(static_cast<int>(argv.size()), argv.data());
}

// The message of a parse that must fail with InvalidArgument; "(accepted)"
// when it succeeded, so that a comparison with the expected message fails.
template <class Config>
std::string FlagError(const absl::StatusOr<Config>& parsed) {
  if (parsed.ok()) return "(accepted)";
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  return std::string(parsed.status().message());
}

}  // namespace gpushare::testing

#endif  // GPUSHARE_TESTS_TESTING_FLAG_PARSING_H_
