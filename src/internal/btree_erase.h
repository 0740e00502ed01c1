// Internal: erasing one value from an Abseil B-tree set of unique values,
// and renumbering the node slots of a set's keys when a node leaves. Not
// part of the public API.
//
// absl::btree_set::erase(key) serves multisets too: it finds the range of
// values equal to `key` (two descents), counts it by walking it, then erases
// the range. For a set of unique values one descent and one erase at the
// iterator do the same work, which matters where a place or release moves a
// key in an index.
//
//   if (EraseUnique(tree, key) == 0) ...;  // Was not there.
//   RenumberAfterRemoval(tree, slot);       // Node `slot` left; its keys are gone.

#ifndef GPUSHARE_INTERNAL_BTREE_ERASE_H_
#define GPUSHARE_INTERNAL_BTREE_ERASE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

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

// The node in `slot` left the cluster (`set` holds none of its keys), and
// the slots after it moved down by one: so do the `slot` members of the
// keys of `set`. The indexes order their keys by the slot last, so the
// order stays, and the keys go into a new set in it, each at the end: one
// pass, where erasing and inserting each key would search for both.
template <typename Set>
void RenumberAfterRemoval(Set& set, uint32_t slot) {
  std::vector<typename Set::value_type> keys(set.begin(), set.end());
  for (auto& k : keys) k.slot -= k.slot > slot;
  set = Set(keys.begin(), keys.end());
}

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_BTREE_ERASE_H_
