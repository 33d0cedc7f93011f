// KvCache: the paged KV cache manager with exact prefix reuse. It owns the book-keeping
// of a model's KV pool (runtime/block_allocator.h), the prefix index
// (runtime/prefix_cache.h), a pool of recurrent-state snapshots on the device, and a
// bounded host-RAM tier for KV blocks and snapshots evicted from the device. It moves
// data only through ops (copy/upload/download), so the same logic serves every backend;
// on the CPU the "device" pools are host memory too, but still separate, bounded pools.
//
// Life of a sequence: begin() installs the longest cached prefix of the prompt (shared
// blocks by reference, a snapshot's tail KV and recurrent state by copy) and says how
// many tokens it covers; reserve() adds private blocks before each forward pass;
// commit() after it publishes newly full blocks and takes the policy's state snapshots;
// end() takes the end-of-turn snapshot and drops the sequence's references (its blocks
// stay cached, least recently used first out).
//
// Snapshot policy for models with recurrent state (Qwen3.5 GDN layers): along a prompt,
// every `snapshot_interval` tokens, at the last block boundary before its final token, and
// where the prompt leaves the cached blocks it matched (the end of a shared system prompt:
// the next conversation sharing it resumes there); at the end of every turn. A sequence resumes only exactly where a snapshot was taken,
// so its state is exactly the state the uncached run would have had there.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "models/model.h"
#include "ops/registry.h"
#include "runtime/block_allocator.h"
#include "runtime/prefix_cache.h"

namespace vi {

struct KvCacheOptions {
  bool prefix_reuse = true;          // false: blocks are private and nothing is looked up
  int64_t host_bytes = 0;            // host-RAM tier (--cache-ram); 0: evicted data is dropped
  // Snapshot slots in device memory; < 0: auto, a quarter of the KV pool's bytes, 8 .. 64.
  int64_t device_snapshots = -1;
  int64_t snapshot_interval = 256;   // tokens between prompt snapshots (rounded to blocks)
};

struct KvCacheStats {
  int64_t block_size = 0;
  int64_t device_blocks = 0, device_blocks_used = 0, device_blocks_cached = 0;
  int64_t host_blocks = 0, host_blocks_used = 0;
  int64_t device_snapshots = 0, device_snapshots_used = 0;
  int64_t host_snapshots = 0, host_snapshots_used = 0;
  int64_t device_bytes = 0, host_bytes = 0;  // capacity of the pools
  uint64_t lookups = 0, hits = 0;            // sequences begun; those that reused tokens
  uint64_t prompt_tokens = 0, reused_tokens = 0;
  uint64_t blocks_to_host = 0, blocks_from_host = 0, snapshots_to_host = 0;
};

class KvCache {
 public:
  // state_proto: one sequence's recurrent_state() (shapes to snapshot; empty for pure
  // attention models).
  KvCache(ops::Context ctx, std::shared_ptr<KvPool> pool, const std::vector<Tensor>& state_proto,
          KvCacheOptions opts);
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Starts `seq` (any previous contents dropped) on `prompt`: installs the longest cached
  // prefix covering at most prompt.size() - 1 tokens and returns its length; the sequence
  // is then at n_past() == that length.
  int64_t begin(SequenceState& seq, std::span<const int32_t> prompt);
  // Blocks for n_new more tokens after n_past(). Throws vi::Error when the pool is
  // exhausted by referenced blocks (the pool is too small for the sequences).
  void reserve(SequenceState& seq, int64_t n_new);
  // After a forward pass; `tokens` are all n_past() tokens the sequence holds.
  void commit(SequenceState& seq, std::span<const int32_t> tokens);
  // Where a prompt chunk starting at n_past() should end at the latest so that commit()
  // can take a policy snapshot (prompt.size() when none is due).
  int64_t next_stop(const SequenceState& seq) const;
  // Ends the turn: snapshot at n_past() (keyed by `tokens`, all the sequence holds), then
  // release. release() alone drops the references without a snapshot (failed steps).
  void end(SequenceState& seq, std::span<const int32_t> tokens);
  void release(SequenceState& seq);

  KvCacheStats stats() const;
  int64_t block_size() const { return bs_; }
  bool has_state() const { return !state_shapes_.empty(); }

 private:
  struct SeqInfo {
    std::vector<uint64_t> keys;  // keys[j]: chained key of the first j blocks (keys[0] = root)
    int64_t prompt_len = 0;
    int64_t resume_pos = 0;
    int64_t match_end = 0;  // end of the cached blocks the prompt matched (a divergence point)
  };
  SeqInfo& info(const SequenceState& seq);
  int32_t alloc_device_block();
  void evict_device_block(int32_t slot, uint64_t key);
  void evict_device_snapshot(int32_t slot, uint64_t id);
  void take_snapshot(SequenceState& seq, uint64_t parent, int64_t pos, std::span<const int32_t> tail);
  void restore_snapshot(SequenceState& seq, const PrefixIndex::Snapshot& s, int32_t tail_block);
  bool is_policy_point(const SeqInfo& in, int64_t pos) const;

  // Data movement between the pools (all through ops).
  void block_to_host(int32_t dev, int32_t host);
  void host_to_block(int32_t host, int32_t dev);
  void snapshot_to_host(int32_t dev, int32_t host);

  ops::Context ctx_;
  std::shared_ptr<KvPool> pool_;
  std::vector<Tensor> rows_;  // views of the pool's tensors and i8 scales: [n_blocks * bs, width] each
  KvCacheOptions opts_;
  int64_t bs_ = 0;
  std::vector<std::vector<int64_t>> state_shapes_;
  std::vector<DType> state_dtypes_;
  std::vector<int64_t> kv_widths_;  // per pool tensor
  size_t block_bytes_ = 0, snap_bytes_ = 0;

  BlockAllocator dev_blocks_;
  BlockAllocator host_blocks_{0};
  BlockAllocator dev_snaps_{0};
  BlockAllocator host_snaps_{0};
  std::unique_ptr<uint8_t[]> host_block_mem_, host_snap_mem_;
  // Device snapshot pool: per state tensor [n_slots, numel]; per KV pool tensor the tail
  // rows [n_slots * bs, width].
  std::vector<Tensor> dev_snap_state_, dev_snap_tail_;

  PrefixIndex index_;
  std::unordered_map<const SequenceState*, SeqInfo> seqs_;
  KvCacheStats counters_;
};

}  // namespace vi
