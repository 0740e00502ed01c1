#include "src/internal/fast_json.h"

#include <string_view>

namespace gpushare::internal {

bool MayHoldMinusZero(std::string_view text) {
  for (size_t at = text.find("-0"); at != std::string_view::npos; at = text.find("-0", at + 1)) {
    size_t before = at;
    auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (before > 0 && blank(text[before - 1])) --before;
    if (before == 0) return true;
    const char c = text[before - 1];
    if (c == ':' || c == '[' || c == ',') return true;
  }
  return false;
}

}  // namespace gpushare::internal
