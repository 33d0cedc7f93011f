// BlockAllocator: reference counts, LRU order of cached slots, eviction callbacks, and a
// seeded random sequence of operations checked against a plain reference model.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <random>

#include "core/error.h"
#include "runtime/block_allocator.h"

namespace vi {
namespace {

TEST(BlockAllocator, EvictsLeastRecentlyUsedCachedSlotOnly) {
  BlockAllocator a(3);
  std::vector<std::pair<int32_t, uint64_t>> evicted;
  a.on_evict = [&](int32_t s, uint64_t k) { evicted.push_back({s, k}); };
  int32_t b0 = *a.allocate(), b1 = *a.allocate(), b2 = *a.allocate();
  EXPECT_FALSE(a.allocate().has_value());  // all referenced
  a.set_key(b0, 100);
  a.set_key(b1, 101);
  a.unref(b1);  // cached first
  a.unref(b0);  // cached second
  a.unref(b2);  // no key: free
  EXPECT_EQ(a.n_free(), 1);
  EXPECT_EQ(a.n_cached(), 2);
  EXPECT_EQ(*a.allocate(), b2);  // free slots before cached ones
  EXPECT_TRUE(evicted.empty());
  a.touch(b1);                     // b1 becomes most recent: b0 goes first
  EXPECT_EQ(*a.allocate(), b0);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0], (std::pair<int32_t, uint64_t>{b0, 100}));
  EXPECT_EQ(a.key(b0), BlockAllocator::kNoKey);
  a.ref(b1);  // a hit takes it out of the LRU
  EXPECT_FALSE(a.allocate().has_value());
  EXPECT_EQ(a.refs(b1), 1);
  EXPECT_EQ(a.evictions(), 1u);
}

TEST(BlockAllocator, MisuseIsAnError) {
  BlockAllocator a(2);
  EXPECT_THROW(a.unref(0), Error);  // free
  EXPECT_THROW(a.ref(1), Error);    // free
  EXPECT_THROW(a.ref(2), Error);    // out of range
  int32_t b = *a.allocate();
  a.unref(b);
  EXPECT_THROW(a.unref(b), Error);
  EXPECT_THROW(BlockAllocator(-1), Error);
}

// Random operations vs a reference: slots with refs and keys, an explicit LRU deque.
TEST(BlockAllocator, RandomOperationsMatchReference) {
  const unsigned seed = std::random_device{}();
  std::printf("[ seed     ] %u\n", seed);
  std::mt19937 rng(seed);
  for (int n : {1, 5, 17}) {
    BlockAllocator a(n);
    struct Ref {
      int refs = 0;
      uint64_t key = 0;
      bool free = true;
    };
    std::vector<Ref> ref(static_cast<size_t>(n));
    std::deque<int32_t> lru;
    int32_t expect_evicted = -1;
    a.on_evict = [&](int32_t s, uint64_t k) {
      EXPECT_EQ(s, expect_evicted) << "seed " << seed;
      EXPECT_EQ(k, ref[s].key) << "seed " << seed;
    };
    uint64_t next_key = 1;
    for (int step = 0; step < 4000; ++step) {
      const int op = static_cast<int>(rng() % 5);
      const int32_t s = static_cast<int32_t>(rng() % n);
      if (op == 0) {
        const bool any_free = std::any_of(ref.begin(), ref.end(), [](const Ref& r) { return r.free; });
        expect_evicted = !any_free && !lru.empty() ? lru.front() : -1;
        auto got = a.allocate();
        if (any_free) {
          ASSERT_TRUE(got.has_value());
          ASSERT_TRUE(ref[*got].free) << "seed " << seed;
        } else if (!lru.empty()) {
          ASSERT_TRUE(got.has_value());
          ASSERT_EQ(*got, lru.front()) << "seed " << seed;
          lru.pop_front();
        } else {
          ASSERT_FALSE(got.has_value());
          continue;
        }
        ref[*got] = Ref{1, 0, false};
      } else if (op == 1 && !ref[s].free) {
        a.ref(s);
        if (ref[s].refs == 0) lru.erase(std::find(lru.begin(), lru.end(), s));
        ref[s].refs++;
      } else if (op == 2 && ref[s].refs > 0) {
        a.unref(s);
        if (--ref[s].refs == 0) {
          if (ref[s].key) lru.push_back(s);
          else ref[s].free = true;
        }
      } else if (op == 3 && !ref[s].free) {
        const uint64_t k = rng() % 3 == 0 ? 0 : next_key++;
        a.set_key(s, k);
        ref[s].key = k;
        if (k == 0 && ref[s].refs == 0) {
          lru.erase(std::find(lru.begin(), lru.end(), s));
          ref[s].free = true;
        }
      } else if (op == 4) {
        a.touch(s);
        auto it = std::find(lru.begin(), lru.end(), s);
        if (it != lru.end()) {
          lru.erase(it);
          lru.push_back(s);
        }
      }
      int n_free = 0;
      for (const Ref& r : ref) n_free += r.free;
      ASSERT_EQ(a.n_free(), n_free) << "seed " << seed << " step " << step;
      ASSERT_EQ(a.n_cached(), static_cast<int32_t>(lru.size())) << "seed " << seed << " step " << step;
    }
  }
}

}  // namespace
}  // namespace vi
