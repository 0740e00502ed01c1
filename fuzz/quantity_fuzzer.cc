// k8s::QuantityMilli / QuantityMiB / QuantityInteger on arbitrary text.
// Properties (kubernetes.h):
//  - an accepted value is within 0..kMaxQuantity; an error is InvalidArgument
//    and names the text (past 100 bytes shortened, as every message does);
//  - a plain integer string ("+"? digits) is accepted by QuantityInteger iff
//    it is at most kMaxQuantity, with exactly its value;
//  - when QuantityInteger gives v: QuantityMilli gives 1000 v (or fails past
//    kMaxQuantity) and QuantityMiB gives ceil(v / 2^20);
//  - QuantityMilli rounds up, so a result that is not a multiple of 1000
//    means a fraction, which QuantityInteger must refuse;
//  - "<text>Ki" is 1024 times an integer "<text>" (when both are in range).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "gpushare/kubernetes.h"
#include "gpushare/types.h"
#include "src/internal/text.h"

namespace {

using gpushare::kMaxQuantity;

void CheckResult(const absl::StatusOr<int64_t>& r, const std::string& text, const char* fn) {
  if (r.ok()) {
    FUZZ_CHECK(*r >= 0 && *r <= kMaxQuantity,
               absl::StrCat(fn, "(\"", text, "\") = ", *r, " is outside 0..", kMaxQuantity));
    return;
  }
  FUZZ_CHECK(absl::IsInvalidArgument(r.status()), r.status().ToString());
  // Long text is echoed shortened, as every error message does (Echo()).
  FUZZ_CHECK(r.status().message().find(gpushare::internal::Echo(text)) != absl::string_view::npos,
             absl::StrCat(fn, ": the error does not name the text: ", r.status().ToString()));
}

// The value of a plain integer string, or -1 if it is not one or is larger
// than 2^62 (far past kMaxQuantity).
int64_t PlainInteger(std::string_view text) {
  size_t i = text.size() > 0 && text[0] == '+' ? 1 : 0;
  if (i == text.size()) return -1;
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return -1;
    v = v * 10 + (text[i] - '0');
    if (v > (int64_t{1} << 62) / 10) v = (int64_t{1} << 62) / 10 + 1;  // Saturate.
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 256) return 0;  // Quantities are short; longer adds nothing.
  const std::string text(reinterpret_cast<const char*>(data), size);
  namespace k8s = gpushare::k8s;
  const absl::StatusOr<int64_t> milli = k8s::QuantityMilli(text);
  const absl::StatusOr<int64_t> mib = k8s::QuantityMiB(text);
  const absl::StatusOr<int64_t> integer = k8s::QuantityInteger(text);
  CheckResult(milli, text, "QuantityMilli");
  CheckResult(mib, text, "QuantityMiB");
  CheckResult(integer, text, "QuantityInteger");

  const int64_t plain = PlainInteger(text);
  if (plain >= 0) {
    FUZZ_CHECK(integer.ok() == (plain <= kMaxQuantity),
               absl::StrCat("\"", text, "\": ", integer.status().ToString()));
    if (integer.ok()) FUZZ_CHECK(*integer == plain, absl::StrCat("\"", text, "\" -> ", *integer));
  }
  if (integer.ok()) {
    const int64_t v = *integer;
    if (v * 1000 <= kMaxQuantity) {
      FUZZ_CHECK(milli.ok() && *milli == v * 1000,
                 absl::StrCat("\"", text, "\": integer ", v, ", milli ", milli.status().ToString(),
                              milli.ok() ? absl::StrCat(" ", *milli) : ""));
    } else {
      FUZZ_CHECK(!milli.ok(), absl::StrCat("\"", text, "\": milli past the maximum accepted"));
    }
    const int64_t want_mib = (v + (int64_t{1} << 20) - 1) >> 20;
    FUZZ_CHECK(mib.ok() && *mib == want_mib,
               absl::StrCat("\"", text, "\": integer ", v, ", MiB ", mib.status().ToString(),
                            mib.ok() ? absl::StrCat(" ", *mib) : ""));
    if (plain >= 0 && v * 1024 <= kMaxQuantity) {
      const absl::StatusOr<int64_t> ki = k8s::QuantityInteger(absl::StrCat(text, "Ki"));
      FUZZ_CHECK(ki.ok() && *ki == v * 1024, absl::StrCat("\"", text, "Ki\""));
    }
  }
  if (milli.ok() && *milli % 1000 != 0) {
    FUZZ_CHECK(!integer.ok(),
               absl::StrCat("\"", text, "\": milli ", *milli, " but integer ", *integer));
  }
  return 0;
}
