// The prefix index: which token prefixes have cached KV blocks and recurrent-state
// snapshots, and where they are (device pool or host-RAM pool). Pure book-keeping, no
// tensors. Blocks are keyed by a chained hash of their tokens (key of block j = hash of
// the key of block j-1 and block j's tokens), so one key names a whole prefix; every
// entry also keeps its tokens and parent key, and a lookup compares them, so a hash
// collision is a miss, never wrong reuse.
//
// A snapshot is the state of a sequence after `pos` tokens: it hangs off the key of the
// last full block before pos (its parent) and holds the tail tokens after that block
// (0 .. block_size-1 of them; their KV is stored in the snapshot, since no full block
// holds it). For hybrid models it also holds the recurrent state.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace vi {

enum class Tier : uint8_t { kDevice, kHost };

struct Location {
  Tier tier = Tier::kDevice;
  int32_t slot = -1;
};

// Key of the empty prefix, and the chained key of a block of tokens after `parent`
// (never 0, which allocators use for "no key").
constexpr uint64_t kRootKey = 0x6a09e667f3bcc908ull;
uint64_t chain_key(uint64_t parent, std::span<const int32_t> tokens);

class PrefixIndex {
 public:
  struct Block {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    Location loc;
  };
  struct Snapshot {
    uint64_t id = 0;      // never 0
    uint64_t parent = 0;  // key of the prefix of pos - tail.size() tokens
    int64_t pos = 0;      // tokens covered
    std::vector<int32_t> tail;
    Location loc;
  };

  // The block under `key` if its parent and tokens are exactly these.
  Block* find_block(uint64_t key, uint64_t parent, std::span<const int32_t> tokens);
  Block* block(uint64_t key);
  // False (nothing changed) when the key is taken.
  bool add_block(uint64_t key, uint64_t parent, std::span<const int32_t> tokens, Location loc);
  void erase_block(uint64_t key);

  const Snapshot* find_snapshot(uint64_t parent, std::span<const int32_t> tail) const;
  Snapshot* snapshot(uint64_t id);
  uint64_t add_snapshot(uint64_t parent, int64_t pos, std::span<const int32_t> tail, Location loc);
  void erase_snapshot(uint64_t id);

  size_t n_blocks() const { return blocks_.size(); }
  size_t n_snapshots() const { return snaps_.size(); }

  // The longest cached prefix of `prompt` a sequence can resume from, covering at most
  // max_pos tokens. Full blocks are matched along the chain (any tier); the resume point
  // is a block boundary (when the model has no recurrent state) or a snapshot hanging off
  // one of the matched blocks whose tail tokens match the prompt.
  struct Match {
    int64_t pos = 0;                 // tokens to reuse
    std::vector<uint64_t> keys;      // keys[j]: key of the first j matched blocks (keys[0] = root)
    const Snapshot* snap = nullptr;  // the snapshot to restore (null: blocks only, or pos 0)
  };
  Match longest_match(std::span<const int32_t> prompt, int64_t block_size, int64_t max_pos, bool need_state);

 private:
  std::unordered_map<uint64_t, Block> blocks_;
  std::unordered_map<uint64_t, Snapshot> snaps_;
  std::unordered_multimap<uint64_t, uint64_t> snaps_by_parent_;  // parent key -> snapshot id
  uint64_t next_snap_id_ = 1;
};

}  // namespace vi
