#include "src/internal/gpu_buckets.h"

#include <algorithm>

#include "src/internal/btree_erase.h"

namespace gpushare::internal {
namespace {

// A bucket turns into a bit set above this many positions (at most 64 bytes
// of bits per position held), and back below a quarter of it.
uint64_t DenseAbove(uint64_t universe) { return std::max<uint64_t>(64, universe / 512); }

uint64_t Ctz(uint64_t bits) { return static_cast<uint64_t>(__builtin_ctzll(bits)); }

}  // namespace

bool GpuBuckets::Bucket::Has(uint32_t position) const {
  return words_[position >> 6] >> (position & 63) & 1;
}

void GpuBuckets::Bucket::Set(uint32_t position) {
  const uint32_t w = position >> 6;
  words_[w] |= uint64_t{1} << (position & 63);
  summary_[w >> 6] |= uint64_t{1} << (w & 63);
}

void GpuBuckets::Bucket::Clear(uint32_t position) {
  const uint32_t w = position >> 6;
  words_[w] &= ~(uint64_t{1} << (position & 63));
  if (words_[w] == 0) summary_[w >> 6] &= ~(uint64_t{1} << (w & 63));
}

bool GpuBuckets::Bucket::Insert(uint32_t position, uint64_t universe) {
  if (dense()) {
    if (Has(position)) return false;
    Set(position);
  } else if (!sparse_.insert(position).second) {
    return false;
  }
  ++size_;
  if (!dense() && size_ > DenseAbove(universe)) {
    const uint64_t words = (universe + 63) / 64;
    words_.assign(words, 0);
    summary_.assign((words + 63) / 64, 0);
    for (uint32_t p : sparse_) Set(p);
    sparse_.clear();
  }
  return true;
}

bool GpuBuckets::Bucket::Erase(uint32_t position, uint64_t universe) {
  if (dense()) {
    if (position >= words_.size() * 64 || !Has(position)) return false;
    Clear(position);
  } else if (EraseUnique(sparse_, position) == 0) {
    return false;
  }
  --size_;
  if (dense() && size_ < DenseAbove(universe) / 4) {
    for (uint64_t p = LowerBound(0); p != kNone; p = LowerBound(p + 1)) {
      sparse_.insert(static_cast<uint32_t>(p));
    }
    words_ = {};
    summary_ = {};
  }
  return true;
}

uint64_t GpuBuckets::Bucket::LowerBound(uint64_t position) const {
  if (!dense()) {
    if (position > UINT32_MAX) return kNone;
    auto it = sparse_.lower_bound(static_cast<uint32_t>(position));
    return it == sparse_.end() ? kNone : *it;
  }
  const uint64_t w = position >> 6;
  if (w >= words_.size()) return kNone;
  if (const uint64_t bits = words_[w] & (~uint64_t{0} << (position & 63)); bits != 0) {
    return w << 6 | Ctz(bits);
  }
  // The next word that holds a position, from the summary.
  for (uint64_t s = w + 1; (s >> 6) < summary_.size(); s = ((s >> 6) + 1) << 6) {
    if (const uint64_t bits = summary_[s >> 6] & (~uint64_t{0} << (s & 63)); bits != 0) {
      const uint64_t word = (s >> 6) << 6 | Ctz(bits);
      return word << 6 | Ctz(words_[word]);
    }
  }
  return kNone;
}

bool GpuBuckets::Insert(uint64_t shape, uint32_t position) {
  if (position >= universe_) return false;
  if (!buckets_[shape].Insert(position, universe_)) return false;
  ++size_;
  return true;
}

bool GpuBuckets::Erase(uint64_t shape, uint32_t position) {
  auto it = buckets_.find(shape);
  if (it == buckets_.end() || !it->second.Erase(position, universe_)) return false;
  if (it->second.size() == 0) buckets_.erase(it);
  --size_;
  return true;
}

bool GpuBuckets::Next(uint64_t shape, uint64_t position, uint64_t* at_shape,
                      uint32_t* at_position) const {
  auto it = buckets_.lower_bound(shape);
  if (it != buckets_.end() && it->first == shape) {
    if (const uint64_t p = it->second.LowerBound(position); p != kNone) {
      *at_shape = shape;
      *at_position = static_cast<uint32_t>(p);
      return true;
    }
    ++it;
  }
  if (it == buckets_.end()) return false;
  *at_shape = it->first;
  *at_position = static_cast<uint32_t>(it->second.LowerBound(0));  // Not empty.
  return true;
}

}  // namespace gpushare::internal
