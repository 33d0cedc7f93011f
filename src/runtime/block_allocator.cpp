// BlockAllocator: free list, reference counts and the LRU list of cached slots.
#include "runtime/block_allocator.h"

#include "core/error.h"

namespace vi {

BlockAllocator::BlockAllocator(int32_t n_slots) {
  VI_CHECK(n_slots >= 0, "a pool cannot have {} slots", n_slots);
  slots_.resize(static_cast<size_t>(n_slots));
  for (int32_t i = n_slots - 1; i >= 0; --i) free_.push_back(i);  // slot 0 comes out first
}

size_t BlockAllocator::check(int32_t slot) const {
  VI_CHECK(slot >= 0 && slot < size(), "slot {} is outside the pool of {}", slot, size());
  return static_cast<size_t>(slot);
}

void BlockAllocator::leave_lru(int32_t slot) {
  Slot& s = slots_[check(slot)];
  if (!s.in_lru) return;
  lru_.erase(s.lru_it);
  s.in_lru = false;
}

void BlockAllocator::make_free(int32_t slot) {
  Slot& s = slots_[check(slot)];
  leave_lru(slot);
  s.key = kNoKey;
  s.refs = 0;
  s.is_free = true;
  free_.push_back(slot);
}

std::optional<int32_t> BlockAllocator::allocate() {
  int32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    slot = lru_.front();
    leave_lru(slot);
    const uint64_t key = slots_[slot].key;
    slots_[slot].key = kNoKey;
    ++evictions_;
    if (on_evict) on_evict(slot, key);
  } else {
    return std::nullopt;
  }
  Slot& s = slots_[slot];
  s.is_free = false;
  s.refs = 1;
  s.key = kNoKey;
  return slot;
}

void BlockAllocator::ref(int32_t slot) {
  Slot& s = slots_[check(slot)];
  VI_CHECK(!s.is_free, "slot {} is free and cannot be referenced", slot);
  leave_lru(slot);
  ++s.refs;
}

void BlockAllocator::unref(int32_t slot) {
  Slot& s = slots_[check(slot)];
  VI_CHECK(s.refs > 0, "slot {} is not referenced", slot);
  if (--s.refs > 0) return;
  if (s.key == kNoKey) {
    make_free(slot);
  } else {
    lru_.push_back(slot);
    s.lru_it = std::prev(lru_.end());
    s.in_lru = true;
  }
}

void BlockAllocator::set_key(int32_t slot, uint64_t key) {
  Slot& s = slots_[check(slot)];
  VI_CHECK(!s.is_free, "slot {} is free and cannot hold a key", slot);
  s.key = key;
  if (key == kNoKey && s.refs == 0) make_free(slot);
}

void BlockAllocator::touch(int32_t slot) {
  Slot& s = slots_[check(slot)];
  if (!s.in_lru) return;
  lru_.splice(lru_.end(), lru_, s.lru_it);
}

}  // namespace vi
