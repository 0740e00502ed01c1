// Kubernetes object-name rules (see kubernetes.h, "Names").

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gpushare/kubernetes.h"
#include "src/internal/text.h"

namespace gpushare::k8s {
namespace {

constexpr size_t kMaxLabel = 63;
constexpr size_t kMaxSubdomain = 253;

bool AlphaNum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

// One DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63 characters.
bool IsLabel(std::string_view s) {
  if (s.empty() || s.size() > kMaxLabel) return false;
  if (!AlphaNum(s.front()) || !AlphaNum(s.back())) return false;
  for (char c : s) {
    if (!AlphaNum(c) && c != '-') return false;
  }
  return true;
}

absl::Status NameError(std::string_view field, std::string_view value, std::string_view rule) {
  // CHexEscape shows CR, LF, NUL and other bytes as escapes, so the message
  // itself cannot carry them into a log line or a reply header.
  const std::string shown = absl::CHexEscape(::gpushare::internal::Echo(value));
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(field), " \"", shown, "\" is not a valid Kubernetes name: ",
                   std::string(rule)));
}

}  // namespace

absl::Status ValidateDns1123Label(std::string_view field, std::string_view value) {
  if (IsLabel(value)) return absl::OkStatus();
  return NameError(field, value,
                   "it must be lower-case letters, digits and '-' (a DNS-1123 label), at most 63 "
                   "characters, starting and ending with a letter or digit");
}

absl::Status ValidateDns1123Subdomain(std::string_view field, std::string_view value) {
  bool ok = !value.empty() && value.size() <= kMaxSubdomain;
  for (size_t start = 0; ok;) {
    const size_t dot = value.find('.', start);
    const std::string_view part =
        value.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    // Parts of a subdomain may be longer than 63; only the whole is bounded.
    ok = !part.empty() && AlphaNum(part.front()) && AlphaNum(part.back());
    for (char c : part) ok = ok && (AlphaNum(c) || c == '-');
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (ok) return absl::OkStatus();
  return NameError(field, value,
                   "it must be lower-case letters, digits, '-' and '.' (a DNS-1123 subdomain), "
                   "at most 253 characters, each '.'-separated part starting and ending with a "
                   "letter or digit");
}

}  // namespace gpushare::k8s
