// Internal: early-return helpers for absl::Status (Debian's Abseil 20220623
// has no RETURN_IF_ERROR / ASSIGN_OR_RETURN). Not part of the public API.

#ifndef GPUSHARE_INTERNAL_STATUS_MACROS_H_
#define GPUSHARE_INTERNAL_STATUS_MACROS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#define GPUSHARE_RETURN_IF_ERROR(expr)                 \
  do {                                                 \
    ::absl::Status gpushare_status_ = (expr);          \
    if (!gpushare_status_.ok()) return gpushare_status_; \
  } while (0)

#define GPUSHARE_CONCAT_INNER_(a, b) a##b
#define GPUSHARE_CONCAT_(a, b) GPUSHARE_CONCAT_INNER_(a, b)

// GPUSHARE_ASSIGN_OR_RETURN(auto x, MakeX());
#define GPUSHARE_ASSIGN_OR_RETURN(lhs, expr) \
  GPUSHARE_ASSIGN_OR_RETURN_IMPL_(GPUSHARE_CONCAT_(gpushare_or_, __LINE__), lhs, expr)
#define GPUSHARE_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return tmp.status();                  \
  lhs = std::move(*tmp)

namespace gpushare::internal {
// Debian's Abseil defines its own absl::string_view, which std::string_view
// does not convert to; public signatures take std::string_view.
inline absl::string_view Sv(std::string_view s) { return {s.data(), s.size()}; }
}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_STATUS_MACROS_H_
