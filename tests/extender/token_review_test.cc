// TokenReviewer against a scripted API server: what it asks, what it
// concludes, and what it keeps.

#include "extender/token_review.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/status_matchers.h"

namespace gpushare::extender {
namespace {

using ::gpushare::testing::IsOk;
using ::gpushare::testing::StatusIs;
using Json = nlohmann::json;

// An API server that knows tokens by value and a set of users allowed in.
struct FakeApi {
  std::map<std::string, std::string> users;  // token -> username
  std::set<std::string> allowed;             // usernames
  absl::Status fail;                         // Answers every request with this when set.
  std::vector<std::pair<std::string, Json>> requests;

  absl::StatusOr<std::string> Post(const std::string& path, const std::string& body) {
    requests.emplace_back(path, Json::parse(body));
    if (!fail.ok()) return fail;
    const Json req = Json::parse(body);
    if (path == "/apis/authentication.k8s.io/v1/tokenreviews") {
      auto it = users.find(req["spec"]["token"].get<std::string>());
      Json status = {{"authenticated", it != users.end()}};
      if (it != users.end()) {
        status["user"] = {{"username", it->second},
                          {"uid", "uid-" + it->second},
                          {"groups", {"system:serviceaccounts", "system:authenticated"}}};
      } else {
        status["error"] = "invalid bearer token";
      }
      return Json{{"kind", "TokenReview"}, {"status", status}}.dump();
    }
    if (path == "/apis/authorization.k8s.io/v1/subjectaccessreviews") {
      const bool ok = allowed.count(req["spec"]["user"].get<std::string>()) > 0 &&
                      req["spec"]["nonResourceAttributes"]["path"] == "/metrics" &&
                      req["spec"]["nonResourceAttributes"]["verb"] == "get";
      return Json{{"kind", "SubjectAccessReview"}, {"status", {{"allowed", ok}}}}.dump();
    }
    return absl::NotFoundError(path);
  }
};

class TokenReviewTest : public ::testing::Test {
 protected:
  TokenReviewTest()
      : reviewer_([this](const std::string& p, const std::string& b) { return api_.Post(p, b); },
                  [this] { return now_; }) {
    api_.users = {{"prom-token", "system:serviceaccount:monitoring:prometheus"},
                  {"other-token", "system:serviceaccount:default:other"}};
    api_.allowed = {"system:serviceaccount:monitoring:prometheus"};
  }
  FakeApi api_;
  TokenReviewer::Clock::time_point now_{};
  TokenReviewer reviewer_;
};

TEST_F(TokenReviewTest, AllowsAnAuthorisedUserAndAsksAsKubernetesDoes) {
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"), IsOk());
  ASSERT_EQ(api_.requests.size(), 2u);
  EXPECT_EQ(api_.requests[0].second["spec"]["token"], "prom-token");
  EXPECT_EQ(api_.requests[0].second["apiVersion"], "authentication.k8s.io/v1");
  const Json& sar = api_.requests[1].second;
  EXPECT_EQ(sar["apiVersion"], "authorization.k8s.io/v1");
  EXPECT_EQ(sar["spec"]["user"], "system:serviceaccount:monitoring:prometheus");
  EXPECT_EQ(sar["spec"]["uid"], "uid-system:serviceaccount:monitoring:prometheus");
  EXPECT_EQ(sar["spec"]["groups"][0], "system:serviceaccounts");
  EXPECT_EQ(sar["spec"]["nonResourceAttributes"], (Json{{"path", "/metrics"}, {"verb", "get"}}));
}

TEST_F(TokenReviewTest, RefusesUnknownTokensAndUnauthorisedUsers) {
  EXPECT_THAT(reviewer_.Review("made-up", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated, "invalid bearer token"));
  EXPECT_EQ(api_.requests.size(), 1u);  // No SubjectAccessReview for a bad token.
  EXPECT_THAT(reviewer_.Review("other-token", "get", "/metrics"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       "user \"system:serviceaccount:default:other\" may not get /metrics"));
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/inspect"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(reviewer_.Review("", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST_F(TokenReviewTest, CachesVerdictsForTheirTimeToLiveOnly) {
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"), IsOk());
  EXPECT_THAT(reviewer_.Review("made-up", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(reviewer_.api_calls(), 2);
  now_ += TokenReviewer::kCacheTtl - std::chrono::seconds(1);
  // The user lost the role meanwhile: still allowed until the entry expires.
  api_.allowed.clear();
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"), IsOk());
  EXPECT_THAT(reviewer_.Review("made-up", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(reviewer_.api_calls(), 2);
  now_ += std::chrono::seconds(2);
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(reviewer_.api_calls(), 3);
}

TEST_F(TokenReviewTest, AnApiFailureIsUnavailableAndNotKept) {
  api_.fail = absl::UnavailableError("connection refused");
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnavailable, "the TokenReview failed: connection refused"));
  api_.fail = absl::OkStatus();
  EXPECT_THAT(reviewer_.Review("prom-token", "get", "/metrics"), IsOk());
  EXPECT_EQ(reviewer_.api_calls(), 2);
}

TEST_F(TokenReviewTest, AFloodOfTokensKeepsTheCacheBounded) {
  for (size_t i = 0; i < TokenReviewer::kMaxCacheEntries + 10; ++i) {
    EXPECT_THAT(reviewer_.Review("junk-" + std::to_string(i), "get", "/metrics"),
                StatusIs(absl::StatusCode::kUnauthenticated));
  }
  // The cache was emptied once full: an early token is asked again.
  const int before = reviewer_.api_calls();
  EXPECT_THAT(reviewer_.Review("junk-0", "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(reviewer_.api_calls(), before + 1);
  // A recent one is still cached.
  EXPECT_THAT(reviewer_.Review("junk-" + std::to_string(TokenReviewer::kMaxCacheEntries + 5),
                               "get", "/metrics"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(reviewer_.api_calls(), before + 1);
}

TEST(BearerTokenTest, TakesTheTokenOfABearerHeaderOnly) {
  EXPECT_EQ(BearerToken("Bearer abc.def"), "abc.def");
  EXPECT_EQ(BearerToken("bearer   abc "), "abc");
  EXPECT_EQ(BearerToken("Basic dXNlcjpwYXNz"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken(""), "");
}

}  // namespace
}  // namespace gpushare::extender
