// Internal: how error messages echo user-supplied text. Not part of the
// public API.

#ifndef GPUSHARE_INTERNAL_TEXT_H_
#define GPUSHARE_INTERNAL_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gpushare::internal {

// Longest piece of a name, id, cell or token an error message repeats.
inline constexpr size_t kMaxEchoedBytes = 100;

// `text` as an error message should echo it: unchanged up to kMaxEchoedBytes,
// else its first kMaxEchoedBytes bytes (cut back to a UTF-8 character
// boundary) followed by "... (N bytes)", so that a 10 MB token gives a short
// message. Every error message that repeats input goes through this.
inline std::string Echo(std::string_view text) {
  if (text.size() <= kMaxEchoedBytes) return std::string(text);
  size_t cut = kMaxEchoedBytes;
  // Back off over UTF-8 continuation bytes (10xxxxxx), at most 3 of them.
  for (int i = 0; i < 3 && cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80;
       ++i) {
    --cut;
  }
  return absl::StrCat(absl::string_view(text.data(), cut), "... (", text.size(), " bytes)");
}

// The same for the other string types (Debian's absl::string_view is not
// std::string_view).
inline std::string Echo(absl::string_view text) {
  return Echo(std::string_view(text.data(), text.size()));
}
inline std::string Echo(const std::string& text) { return Echo(std::string_view(text)); }
inline std::string Echo(const char* text) { return Echo(std::string_view(text)); }

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_TEXT_H_
