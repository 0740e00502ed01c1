// Internal: parsing JSON text with nlohmann::json without exceptions, and a
// clear error naming where the text goes wrong. Not part of the public API.

#ifndef GPUSHARE_INTERNAL_JSON_TEXT_H_
#define GPUSHARE_INTERNAL_JSON_TEXT_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace gpushare::internal {

// Parses `text` as one JSON value. Never throws (nlohmann's parse errors,
// numbers out of double's range and invalid UTF-8 all become statuses).
// Errors: InvalidArgument "<what>: <reason> at byte <n>" (the reason gives
// line and column where nlohmann knows them; a quoted token is shortened to
// its first 100 bytes).
absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view what);

// `value` as compact JSON text; never throws. Strings that are not valid
// UTF-8 have the bad bytes replaced by U+FFFD.
std::string DumpJson(const nlohmann::json& value);

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_JSON_TEXT_H_
