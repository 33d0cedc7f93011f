// BlockAllocator: book-keeping for one bounded pool of fixed-size slots (KV blocks on
// the device, KV blocks in host RAM, recurrent-state snapshots). No memory of its own:
// it hands out slot ids. A slot is free, referenced (ref > 0), or cached: unreferenced but
// holding data under a key, kept in least-recently-used order and reclaimed (reported
// through on_evict) only when no free slot is left.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <vector>

namespace vi {

class BlockAllocator {
 public:
  static constexpr uint64_t kNoKey = 0;

  explicit BlockAllocator(int32_t n_slots);

  // A slot with ref 1 and no key: a free one, else the least recently used cached one
  // (on_evict(slot, key) runs first so its owner can move or drop the data). nullopt
  // when every slot is referenced.
  std::optional<int32_t> allocate();
  void ref(int32_t slot);    // a free slot may not be referenced; a cached one leaves the LRU
  void unref(int32_t slot);  // at 0: keyed -> cached (most recent), unkeyed -> free
  // Marks the slot's data as reusable under `key` (!= kNoKey); kNoKey forgets it (a cached
  // slot then becomes free).
  void set_key(int32_t slot, uint64_t key);
  void touch(int32_t slot);  // a cached slot becomes the most recently used

  uint64_t key(int32_t slot) const { return slots_[check(slot)].key; }
  int32_t refs(int32_t slot) const { return slots_[check(slot)].refs; }
  bool is_cached(int32_t slot) const { return slots_[check(slot)].in_lru; }
  int32_t size() const { return static_cast<int32_t>(slots_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t n_cached() const { return static_cast<int32_t>(lru_.size()); }
  int32_t n_referenced() const { return size() - n_free() - n_cached(); }
  uint64_t evictions() const { return evictions_; }

  std::function<void(int32_t slot, uint64_t key)> on_evict;

 private:
  struct Slot {
    int32_t refs = 0;
    uint64_t key = kNoKey;
    bool in_lru = false;
    bool is_free = true;
    std::list<int32_t>::iterator lru_it;
  };
  size_t check(int32_t slot) const;
  void make_free(int32_t slot);
  void leave_lru(int32_t slot);

  std::vector<Slot> slots_;
  std::vector<int32_t> free_;  // LIFO: recently freed slots are warm in cache
  std::list<int32_t> lru_;     // front: least recently used
  uint64_t evictions_ = 0;
};

}  // namespace vi
