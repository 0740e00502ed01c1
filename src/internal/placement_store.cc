#include "src/internal/placement_store.h"

#include <utility>

namespace gpushare::internal {

PlacementStore::PlacementStore()
    : slots_(std::make_unique<std::vector<Placement>>()),
      meta_(std::make_unique<std::vector<SlotMeta>>()),
      index_(0, SlotHash{meta_.get()}, SlotEq{slots_.get()}) {}

PlacementStore::PlacementStore(const PlacementStore& other)
    : slots_(std::make_unique<std::vector<Placement>>(*other.slots_)),
      meta_(std::make_unique<std::vector<SlotMeta>>(*other.meta_)),
      free_(other.free_),
      index_(other.index_.size(), SlotHash{meta_.get()}, SlotEq{slots_.get()}) {
  // The other index's functors read the other slots: insert afresh.
  for (uint32_t slot : other.index_) index_.insert(slot);
}

PlacementStore& PlacementStore::operator=(const PlacementStore& other) {
  if (this != &other) {
    PlacementStore copy(other);
    slots_ = std::move(copy.slots_);
    meta_ = std::move(copy.meta_);
    free_ = std::move(copy.free_);
    // The moved set keeps functors that point at the moved vector, now ours.
    index_ = std::move(copy.index_);
  }
  return *this;
}

PlacementStore::~PlacementStore() = default;

const Placement* PlacementStore::Find(std::string_view id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &(*slots_)[*it];
}

template <typename P>
Placement& PlacementStore::InsertImpl(P&& placement, uint32_t node) {
  const SlotMeta meta{HashOf(placement.request_id), node};
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
    (*slots_)[slot] = std::forward<P>(placement);
    (*meta_)[slot] = meta;
  } else {
    slot = static_cast<uint32_t>(slots_->size());
    slots_->push_back(std::forward<P>(placement));
    meta_->push_back(meta);
  }
  // The hash is beside the slot before the index asks for it.
  index_.insert(slot);
  return (*slots_)[slot];
}

Placement& PlacementStore::Insert(const Placement& placement, uint32_t node) {
  return InsertImpl(placement, node);
}
Placement& PlacementStore::Insert(Placement&& placement, uint32_t node) {
  return InsertImpl(std::move(placement), node);
}

void PlacementStore::NodeRemoved(uint32_t node) {
  for (uint32_t slot : index_) {
    if ((*meta_)[slot].node > node) --(*meta_)[slot].node;
  }
}

std::string PlacementStore::Erase(const Placement& stored) {
  const uint32_t slot = SlotOf(stored);
  index_.erase(slot);  // By its kept hash and number: the id is not read.
  Placement& p = (*slots_)[slot];
  std::string id = std::move(p.request_id);
  p.request_id.clear();
  free_.push_back(slot);
  return id;
}

void PlacementStore::Reserve(size_t n) {
  const size_t new_slots = n > free_.size() ? n - free_.size() : 0;
  slots_->reserve(slots_->size() + new_slots);
  meta_->reserve(slots_->size() + new_slots);
  index_.reserve(index_.size() + n);
}

}  // namespace gpushare::internal
