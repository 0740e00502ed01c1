// Bearer tokens checked by the API server (see token_review.h).

#include "extender/token_review.h"

#include <openssl/evp.h>

#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/escaping.h"

namespace gpushare::extender {
namespace {

using Json = nlohmann::json;

std::string Sha256(const std::string& s) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(s.data(), s.size(), md, &n, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), n);
}

// A reply's JSON object, or an Unavailable naming what was asked.
absl::StatusOr<Json> Object(const absl::StatusOr<std::string>& reply, const char* what) {
  if (!reply.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot check the token: the ", what, " failed: ", reply.status().message()));
  }
  Json j = Json::parse(*reply, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("status") || !j["status"].is_object()) {
    return absl::UnavailableError(
        absl::StrCat("cannot check the token: the ", what, " answered without a status"));
  }
  return j;
}

}  // namespace

std::string BearerToken(std::string_view authorization) {
  const std::string v(absl::StripAsciiWhitespace(std::string(authorization)));
  if (v.size() <= 7 || !absl::StartsWithIgnoreCase(v, "bearer ")) return "";
  return std::string(absl::StripLeadingAsciiWhitespace(v.substr(7)));
}

absl::Status TokenReviewer::Ask(const std::string& token, const std::string& verb,
                                const std::string& path) {
  const Json review = {{"apiVersion", "authentication.k8s.io/v1"},
                       {"kind", "TokenReview"},
                       {"spec", {{"token", token}}}};
  absl::StatusOr<Json> tr =
      Object(post_("/apis/authentication.k8s.io/v1/tokenreviews", review.dump()), "TokenReview");
  if (!tr.ok()) return tr.status();
  const Json& ts = (*tr)["status"];
  if (!ts.value("authenticated", false) || !ts.contains("user") || !ts["user"].is_object()) {
    std::string why = ts.value("error", "");
    return absl::UnauthenticatedError(
        absl::StrCat("the bearer token is not valid", why.empty() ? "" : ": " + why));
  }
  const Json& user = ts["user"];
  Json spec = {{"user", user.value("username", "")},
               {"nonResourceAttributes", {{"path", path}, {"verb", verb}}}};
  if (user.contains("uid")) spec["uid"] = user["uid"];
  if (user.contains("groups")) spec["groups"] = user["groups"];
  if (user.contains("extra")) spec["extra"] = user["extra"];
  const Json access = {{"apiVersion", "authorization.k8s.io/v1"},
                       {"kind", "SubjectAccessReview"},
                       {"spec", std::move(spec)}};
  absl::StatusOr<Json> sar = Object(
      post_("/apis/authorization.k8s.io/v1/subjectaccessreviews", access.dump()),
      "SubjectAccessReview");
  if (!sar.ok()) return sar.status();
  if (!(*sar)["status"].value("allowed", false)) {
    return absl::PermissionDeniedError(absl::StrCat("user \"", user.value("username", ""),
                                                    "\" may not ", verb, " ", path));
  }
  return absl::OkStatus();
}

absl::Status TokenReviewer::Review(const std::string& token, const std::string& verb,
                                   const std::string& path) {
  if (token.empty()) return absl::UnauthenticatedError("no bearer token");
  const std::string key = absl::StrCat(Sha256(token), "\n", verb, "\n", path);
  {
    std::lock_guard lock(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end() && it->second.expires > now_()) return it->second.verdict;
    api_calls_ += 1;
  }
  // Asked outside the lock: a slow API server holds up only this request.
  absl::Status verdict = Ask(token, verb, path);
  if (absl::IsUnavailable(verdict)) return verdict;  // Not the token's fault: not kept.
  std::lock_guard lock(mu_);
  const Clock::time_point now = now_();
  if (cache_.size() >= kMaxCacheEntries) {
    // Expired entries go first; if that is not enough, everything.
    for (auto it = cache_.begin(); it != cache_.end();) {
      it = it->second.expires <= now ? cache_.erase(it) : std::next(it);
    }
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  }
  cache_[key] = Entry{verdict, now + kCacheTtl};
  return verdict;
}

int TokenReviewer::api_calls() const {
  std::lock_guard lock(mu_);
  return api_calls_;
}

}  // namespace gpushare::extender
