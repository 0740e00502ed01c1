// Test helpers: gMock matchers for absl::Status / absl::StatusOr (Debian's
// Abseil ships none) and a macro to unwrap a StatusOr in a test.

#ifndef GPUSHARE_TESTS_TESTING_STATUS_MATCHERS_H_
#define GPUSHARE_TESTS_TESTING_STATUS_MATCHERS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace gpushare::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, substring,
           "has status code " + absl::StatusCodeToString(code) + " and a message containing '" +
               std::string(substring) + "'") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code && std::string(s.message()).find(substring) != std::string::npos;
}

// A StatusOr<T> that is OK and whose value equals `value`.
MATCHER_P(IsOkAndHolds, value, "is OK and holds " + ::testing::PrintToString(value)) {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  *result_listener << "holds " << ::testing::PrintToString(*arg);
  return *arg == value;
}

}  // namespace gpushare::testing

// ASSERT_OK_AND_ASSIGN(auto x, MakeX());
#define GPUSHARE_TEST_CONCAT_INNER_(a, b) a##b
#define GPUSHARE_TEST_CONCAT_(a, b) GPUSHARE_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                     \
  auto GPUSHARE_TEST_CONCAT_(statusor_, __LINE__) = (expr);                 \
  ASSERT_TRUE(GPUSHARE_TEST_CONCAT_(statusor_, __LINE__).ok())              \
      << GPUSHARE_TEST_CONCAT_(statusor_, __LINE__).status();               \
  lhs = std::move(*GPUSHARE_TEST_CONCAT_(statusor_, __LINE__))

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::gpushare::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::gpushare::testing::IsOk())

#endif  // GPUSHARE_TESTS_TESTING_STATUS_MATCHERS_H_
