// Internal: erasing one value from an Abseil B-tree set of unique values.
// Not part of the public API.
//
// absl::btree_set::erase(key) serves multisets too: it finds the range of
// values equal to `key` (two descents), counts it by walking it, then erases
// the range. For a set of unique values one descent and one erase at the
// iterator do the same work, which matters where a place or release moves a
// key in an index.
//
//   if (EraseUnique(tree, key) == 0) ...;  // Was not there.

#ifndef GPUSHARE_INTERNAL_BTREE_ERASE_H_
#define GPUSHARE_INTERNAL_BTREE_ERASE_H_

#include <cstddef>

namespace gpushare::internal {

// Removes `value` from `set` (unique values); returns how many were removed,
// 0 or 1.
template <typename Set, typename Value>
size_t EraseUnique(Set& set, const Value& value) {
  const auto it = set.find(value);
  if (it == set.end()) return 0;
  set.erase(it);
  return 1;
}

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_BTREE_ERASE_H_
