// Kubernetes quantities ("500m", "8Gi", "1.5", "1e3") as exact integers.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gpushare/kubernetes.h"
#include "gpushare/types.h"
#include "src/internal/status_macros.h"
#include "src/internal/text.h"

namespace gpushare::k8s {
namespace {

using ::gpushare::internal::Sv;

// value = mantissa * 10^exp10 * 2^exp2.
struct Parsed {
  absl::uint128 mantissa = 0;
  int exp10 = 0;
  int exp2 = 0;
};

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("quantity '", ::gpushare::internal::Echo(text), "' is invalid: ", Sv(why)));
}

absl::StatusOr<Parsed> Parse(std::string_view text) {
  Parsed p;
  size_t i = 0;
  if (text.empty()) return Bad(text, "empty");
  if (text[0] == '-') return Bad(text, "negative");
  if (text[0] == '+') ++i;
  int digits = 0, significant = 0;
  bool point = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (point) return Bad(text, "two decimal points");
      point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (point) --p.exp10;
    if (significant > 0 || c != '0') {
      if (++significant > 30) return Bad(text, "more than 30 significant digits");
      p.mantissa = p.mantissa * 10 + static_cast<uint64_t>(c - '0');
    }
  }
  if (digits == 0) return Bad(text, "no digits");
  const std::string_view suffix = text.substr(i);
  struct Suffix {
    const char* name;
    int exp10;
    int exp2;
  };
  static constexpr Suffix kSuffixes[] = {
      {"", 0, 0},    {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40},
      {"Pi", 0, 50}, {"Ei", 0, 60}, {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},
      {"k", 3, 0},   {"M", 6, 0},   {"G", 9, 0},   {"T", 12, 0},  {"P", 15, 0},
      {"E", 18, 0},
  };
  for (const Suffix& s : kSuffixes) {
    if (suffix == s.name) {
      p.exp10 += s.exp10;
      p.exp2 += s.exp2;
      return p;
    }
  }
  if (suffix[0] == 'e' || suffix[0] == 'E') {
    size_t j = 1;
    bool negative = false;
    if (j < suffix.size() && (suffix[j] == '+' || suffix[j] == '-')) {
      negative = suffix[j] == '-';
      ++j;
    }
    if (j == suffix.size()) return Bad(text, "exponent without digits");
    int exp = 0;
    for (; j < suffix.size(); ++j) {
      if (suffix[j] < '0' || suffix[j] > '9') return Bad(text, "malformed exponent");
      exp = exp * 10 + (suffix[j] - '0');
      if (exp > 1000) return Bad(text, "exponent out of range");
    }
    p.exp10 += negative ? -exp : exp;
    return p;
  }
  return Bad(text, absl::StrCat("unknown suffix '", Sv(suffix), "'"));
}

// ceil(value * 10^scale10 * 2^scale2), or exactly when `exact`.
absl::StatusOr<int64_t> Scale(std::string_view text, int scale10, int scale2, bool exact) {
  GPUSHARE_ASSIGN_OR_RETURN(Parsed p, Parse(text));
  if (p.mantissa == 0) return 0;
  const absl::uint128 kLimit = absl::uint128(1) << 120;
  absl::uint128 num = p.mantissa, den = 1;
  bool tiny = false;
  auto mul = [&](absl::uint128& x, int factor, int times, bool is_num) -> absl::Status {
    for (int k = 0; k < times; ++k) {
      if (x > kLimit / factor) {
        if (is_num) {
          return Bad(text, absl::StrCat("out of range (more than ", kMaxQuantity, ")"));
        }
        tiny = true;
        return absl::OkStatus();
      }
      x *= factor;
    }
    return absl::OkStatus();
  };
  const int e10 = p.exp10 + scale10, e2 = p.exp2 + scale2;
  GPUSHARE_RETURN_IF_ERROR(mul(e10 >= 0 ? num : den, 10, e10 >= 0 ? e10 : -e10, e10 >= 0));
  if (!tiny) {
    GPUSHARE_RETURN_IF_ERROR(mul(e2 >= 0 ? num : den, 2, e2 >= 0 ? e2 : -e2, e2 >= 0));
  }
  if (tiny) {
    if (exact) return Bad(text, "not a whole number");
    return 1;
  }
  absl::uint128 q = num / den;
  if (num % den != 0) {
    if (exact) return Bad(text, "not a whole number");
    q += 1;
  }
  if (q > static_cast<uint64_t>(kMaxQuantity)) {
    return Bad(text, absl::StrCat("out of range (more than ", kMaxQuantity, ")"));
  }
  return static_cast<int64_t>(absl::Uint128Low64(q));
}

}  // namespace

absl::StatusOr<int64_t> QuantityMilli(std::string_view text) {
  return Scale(text, 3, 0, false);
}

absl::StatusOr<int64_t> QuantityMiB(std::string_view text) {
  return Scale(text, 0, -20, false);
}

absl::StatusOr<int64_t> QuantityInteger(std::string_view text) {
  return Scale(text, 0, 0, true);
}

}  // namespace gpushare::k8s
