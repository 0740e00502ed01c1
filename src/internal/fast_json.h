// Internal: reading large JSON inputs (snapshots, Kubernetes lists) with
// simdjson's DOM, for readers that have a slower nlohmann::json twin.
//
// The contract of such a fast reader: it either succeeds with exactly the
// result of its reference twin, or it fails without saying why, and the
// caller runs the reference, which then gives the result or the error (with
// the message naming the bad value and where). So these helpers never build
// messages, and whatever the fast reader cannot judge cheaply (duplicate keys
// it would read differently, numbers it cannot tell apart) it refuses.
// Not part of the public API.

#ifndef GPUSHARE_INTERNAL_FAST_JSON_H_
#define GPUSHARE_INTERNAL_FAST_JSON_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "simdjson.h"

namespace gpushare::internal {

namespace sj = simdjson::dom;

// The array or object that `v` is (its type checked first), by value: a
// range-for over it then holds no reference into a temporary result.
inline sj::array ArrayOf(sj::element v) { return v.get_array().value_unsafe(); }
inline sj::object ObjectOf(sj::element v) { return v.get_object().value_unsafe(); }

// The members of object `obj` named in `names`: values[i] and present[i] for
// names[i]. A key given twice yields its last value, as nlohmann::json keeps
// it. Other members are ignored. One pass over the object.
template <size_t N>
void Members(sj::object obj, const std::array<std::string_view, N>& names,
             std::array<sj::element, N>* values, std::array<bool, N>* present) {
  present->fill(false);
  for (sj::key_value_pair kv : obj) {
    for (size_t i = 0; i < N; ++i) {
      if (kv.key == names[i]) {
        (*values)[i] = kv.value;
        (*present)[i] = true;
        break;
      }
    }
  }
}

// An integer as the reference readers take it: a non-negative one only has to
// be at most `max` (nlohmann holds it unsigned), a negative one must lie in
// [min, max]. False for anything else (floats, other types).
inline bool FastInt(sj::element v, int64_t min, int64_t max, int64_t* out) {
  switch (v.type()) {
    case sj::element_type::INT64: {
      const int64_t i = v.get_int64().value_unsafe();
      if (i > max || (i < 0 && i < min)) return false;
      *out = i;
      return true;
    }
    case sj::element_type::UINT64: {
      const uint64_t u = v.get_uint64().value_unsafe();
      if (max < 0 || u > static_cast<uint64_t>(max)) return false;
      *out = static_cast<int64_t>(u);
      return true;
    }
    default:
      return false;
  }
}

inline bool FastString(sj::element v, std::string_view* out) {
  if (v.type() != sj::element_type::STRING) return false;
  *out = v.get_string().value_unsafe();
  return true;
}

inline bool FastBool(sj::element v, bool* out) {
  if (v.type() != sj::element_type::BOOL) return false;
  *out = v.get_bool().value_unsafe();
  return true;
}

// Whether `text` may hold the number -0 (which simdjson reads as the integer
// 0 while nlohmann keeps it signed): a '-' followed by '0' and preceded,
// after blanks, by ':', '[' or ','. Conservative: such bytes inside a string
// count too.
bool MayHoldMinusZero(std::string_view text);

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_FAST_JSON_H_
