// Internal: the cluster's placements by request id. Not part of the public
// API.
//
// Placements live in slots of one vector. A released slot goes on a free
// list and is the next one filled, so a place that follows a release writes
// into memory still in cache, and copy-assignment into the slot keeps the
// capacity of its strings and GPU list (no allocation). The id -> slot
// lookup is a hash set of 4-byte slot numbers whose equality reads the id
// stored in the slot: the table is about a tenth of the size of a map keyed
// by std::string holding whole placements, and each id is stored once. Each
// slot keeps its id's hash beside its node position, so that erasing,
// growing and copying the table hash no string again, and two slot numbers
// are equal only when they are the same slot (the index never holds two
// slots with one id).
//
//   PlacementStore store;
//   if (!store.contains(p.request_id)) store.Insert(p);
//   if (const Placement* q = store.Find("pod-1")) std::string id = store.Erase(*q);

#ifndef GPUSHARE_INTERNAL_PLACEMENT_STORE_H_
#define GPUSHARE_INTERNAL_PLACEMENT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "gpushare/types.h"
#include "src/internal/status_macros.h"

namespace gpushare::internal {

class PlacementStore {
 public:
  PlacementStore();
  PlacementStore(const PlacementStore& other);
  PlacementStore& operator=(const PlacementStore& other);
  ~PlacementStore();

  size_t size() const { return index_.size(); }
  bool contains(std::string_view id) const { return index_.contains(id); }
  // The stored placement of `id`, or nullptr. Valid until the next Insert()
  // or Erase().
  const Placement* Find(std::string_view id) const;
  // Stores `placement`, whose id must not be stored yet, on the node at
  // position `node` of the cluster's node list, and returns the stored copy.
  Placement& Insert(const Placement& placement, uint32_t node);
  Placement& Insert(Placement&& placement, uint32_t node);
  // The node position `stored` (a placement this store returned) was
  // inserted with, as renumbered by NodeRemoved().
  uint32_t NodeOf(const Placement& stored) const { return (*meta_)[SlotOf(stored)].node; }
  // The node at position `node` left the node list (holding no placement):
  // the positions above it move down by one.
  void NodeRemoved(uint32_t node);
  // Removes `stored` (a placement this store returned) and gives back its id.
  std::string Erase(const Placement& stored);
  // These fetch ahead what the next Insert() writes when it fills a free
  // slot: PrefetchNextSlot() the slot itself; PrefetchNextSlotBuffers(),
  // once the slot is in cache, its node name's and GPU list's buffers, which
  // the copy-assignment reuses. Place() calls the first at its start and the
  // second once it has chosen its node.
  void PrefetchNextSlot() const {
    if (free_.empty()) return;
    const char* p = reinterpret_cast<const char*>(slots_->data() + free_.back());
    for (size_t b = 0; b < sizeof(Placement); b += 64) __builtin_prefetch(p + b, 1);
    __builtin_prefetch(meta_->data() + free_.back(), 1);
  }
  void PrefetchNextSlotBuffers() const {
    if (free_.empty()) return;
    const Placement& p = (*slots_)[free_.back()];
    __builtin_prefetch(p.node.data(), 1);
    __builtin_prefetch(p.gpus.data(), 1);
  }
  // Makes room for `n` more placements.
  void Reserve(size_t n);

  // Calls f(const Placement&) for every stored placement, in no fixed order.
  template <typename F>
  void ForEach(F&& f) const {
    for (uint32_t slot : index_) f((*slots_)[slot]);
  }

 private:
  // What a slot keeps beside its placement.
  struct SlotMeta {
    size_t hash = 0;    // Of the id (HashOf()), while the slot is in use.
    uint32_t node = 0;  // Position in the cluster's node list.
  };
  // Through absl::string_view (Sv()): this Abseil hashes std::string_view
  // with std::hash, which is slower on short ids.
  static size_t HashOf(std::string_view id) { return absl::Hash<absl::string_view>{}(Sv(id)); }
  // Hash and equality of slot numbers by the id in the slot; transparent, so
  // that lookups take the id itself.
  struct SlotHash {
    using is_transparent = void;
    const std::vector<SlotMeta>* meta;
    size_t operator()(uint32_t slot) const { return (*meta)[slot].hash; }
    size_t operator()(std::string_view id) const { return HashOf(id); }
  };
  struct SlotEq {
    using is_transparent = void;
    const std::vector<Placement>* slots;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t slot, std::string_view id) const {
      return (*slots)[slot].request_id == id;
    }
    bool operator()(std::string_view id, uint32_t slot) const { return (*this)(slot, id); }
  };
  using Index = absl::flat_hash_set<uint32_t, SlotHash, SlotEq>;

  template <typename P>
  Placement& InsertImpl(P&& placement, uint32_t node);
  uint32_t SlotOf(const Placement& stored) const {
    return static_cast<uint32_t>(&stored - slots_->data());
  }

  // On the heap so that its address, which the index's functors hold, stays
  // fixed for the store's life.
  std::unique_ptr<std::vector<Placement>> slots_;
  std::unique_ptr<std::vector<SlotMeta>> meta_;  // Parallel to *slots_.
  std::vector<uint32_t> free_;  // Slots not in use, most recently freed last.
  Index index_;
};

}  // namespace gpushare::internal

#endif  // GPUSHARE_INTERNAL_PLACEMENT_STORE_H_
