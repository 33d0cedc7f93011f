// KvCache: begin/reserve/commit/end, the snapshot policy, tier moves and eviction.
#include "runtime/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/memory.h"

namespace vi {

namespace {
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
// dst (host bytes) <- src (any device).
void download_into(ops::Context& ctx, const Tensor& src, uint8_t* dst) {
  Tensor h = ops::download(ctx, src);
  std::memcpy(dst, h.data(), h.nbytes());
}
// dst (any device) <- src (host bytes laid out as dst).
void upload_from(ops::Context& ctx, const uint8_t* src, Tensor& dst) {
  Tensor h = Tensor::view(dst.dtype(), dst.shape(), const_cast<uint8_t*>(src), nullptr);
  Tensor u = ops::upload(ctx, h);
  if (u.data() != dst.data()) ops::copy(ctx, u, dst);
}
}  // namespace

KvCache::KvCache(ops::Context ctx, std::shared_ptr<KvPool> pool, const std::vector<Tensor>& state_proto,
                 KvCacheOptions opts)
    : ctx_(ctx), pool_(std::move(pool)), opts_(opts), dev_blocks_(0) {
  VI_CHECK(pool_ && pool_->block_size > 0 && pool_->n_blocks > 0, "the KV cache needs a non-empty pool");
  bs_ = pool_->block_size;
  dev_blocks_ = BlockAllocator(static_cast<int32_t>(pool_->n_blocks));
  // Everything indexed by cache row moves together: K/V rows and the scales of i8 ones.
  rows_ = pool_->tensors;
  for (const Tensor& t : pool_->scales)
    if (t.data()) rows_.push_back(t);
  for (const Tensor& t : rows_) {
    VI_CHECK(t.ndim() == 2 && t.dim(0) == pool_->n_blocks * bs_ && !dtype_is_quantized(t.dtype()),
             "KV pool tensor {} {} does not hold {} blocks of {}", t.shape_str(), dtype_name(t.dtype()),
             pool_->n_blocks, bs_);
    kv_widths_.push_back(t.dim(1));
    block_bytes_ += t.slice_rows(0, bs_).nbytes();
  }
  for (const Tensor& t : state_proto) {
    VI_CHECK(!dtype_is_quantized(t.dtype()), "recurrent state {} {} cannot be snapshotted", t.shape_str(),
             dtype_name(t.dtype()));
    state_shapes_.push_back(t.shape());
    state_dtypes_.push_back(t.dtype());
    snap_bytes_ += t.nbytes();
  }
  snap_bytes_ += block_bytes_;  // the tail KV
  opts_.snapshot_interval = std::max<int64_t>(bs_, (opts_.snapshot_interval + bs_ - 1) / bs_ * bs_);
  if (!opts_.prefix_reuse) return;

  // Device snapshot slots.
  int64_t n_dev_snaps = opts_.device_snapshots;
  if (n_dev_snaps < 0) {
    const int64_t pool_bytes = pool_->n_blocks * static_cast<int64_t>(block_bytes_);
    n_dev_snaps = std::clamp<int64_t>(pool_bytes / 4 / static_cast<int64_t>(snap_bytes_), 8, 64);
  }
  dev_snaps_ = BlockAllocator(static_cast<int32_t>(n_dev_snaps));
  if (n_dev_snaps > 0) {
    for (size_t i = 0; i < state_shapes_.size(); ++i)
      dev_snap_state_.push_back(ops::empty(ctx_, state_dtypes_[i], {n_dev_snaps, numel_of(state_shapes_[i])}));
    for (const Tensor& t : rows_)
      dev_snap_tail_.push_back(ops::empty(ctx_, t.dtype(), {n_dev_snaps * bs_, t.dim(1)}));
  }
  // Host tier: recurrent models give half the RAM to snapshots, others a sixteenth (tails).
  const int64_t host = std::max<int64_t>(0, opts_.host_bytes);
  const int64_t snap_share = has_state() ? host / 2 : host / 16;
  const int64_t n_host_snaps = snap_share / static_cast<int64_t>(snap_bytes_);
  const int64_t n_host_blocks = (host - n_host_snaps * static_cast<int64_t>(snap_bytes_)) /
                                static_cast<int64_t>(block_bytes_);
  host_blocks_ = BlockAllocator(static_cast<int32_t>(std::min<int64_t>(n_host_blocks, INT32_MAX)));
  host_snaps_ = BlockAllocator(static_cast<int32_t>(std::min<int64_t>(n_host_snaps, INT32_MAX)));
  // Uninitialised: pages are committed only as the tier fills.
  if (host_blocks_.size() > 0) host_block_mem_.reset(new uint8_t[host_blocks_.size() * block_bytes_]);
  if (host_snaps_.size() > 0) host_snap_mem_.reset(new uint8_t[host_snaps_.size() * snap_bytes_]);

  dev_blocks_.on_evict = [this](int32_t slot, uint64_t key) { evict_device_block(slot, key); };
  host_blocks_.on_evict = [this](int32_t slot, uint64_t key) {
    PrefixIndex::Block* b = index_.block(key);
    if (b && b->loc.tier == Tier::kHost && b->loc.slot == slot) index_.erase_block(key);
  };
  dev_snaps_.on_evict = [this](int32_t slot, uint64_t id) { evict_device_snapshot(slot, id); };
  host_snaps_.on_evict = [this](int32_t, uint64_t id) { index_.erase_snapshot(id); };
}

KvCache::SeqInfo& KvCache::info(const SequenceState& seq) {
  auto it = seqs_.find(&seq);
  VI_CHECK(it != seqs_.end(), "sequence was not begun in this KV cache");
  return it->second;
}

// ---- tier moves ----

void KvCache::block_to_host(int32_t dev, int32_t host) {
  uint8_t* dst = host_block_mem_.get() + static_cast<size_t>(host) * block_bytes_;
  for (const Tensor& t : rows_) {
    Tensor rows = t.slice_rows(dev * bs_, (dev + 1) * bs_);
    download_into(ctx_, rows, dst);
    dst += rows.nbytes();
  }
}

void KvCache::host_to_block(int32_t host, int32_t dev) {
  const uint8_t* src = host_block_mem_.get() + static_cast<size_t>(host) * block_bytes_;
  for (Tensor& t : rows_) {
    Tensor rows = t.slice_rows(dev * bs_, (dev + 1) * bs_);
    upload_from(ctx_, src, rows);
    src += rows.nbytes();
  }
}

void KvCache::snapshot_to_host(int32_t dev, int32_t host) {
  uint8_t* dst = host_snap_mem_.get() + static_cast<size_t>(host) * snap_bytes_;
  for (const Tensor& t : dev_snap_state_) {
    Tensor row = t.slice_rows(dev, dev + 1);
    download_into(ctx_, row, dst);
    dst += row.nbytes();
  }
  for (const Tensor& t : dev_snap_tail_) {
    Tensor rows = t.slice_rows(dev * bs_, (dev + 1) * bs_);
    download_into(ctx_, rows, dst);
    dst += rows.nbytes();
  }
}

// A cached device block is being reclaimed: keep its data in the host tier if there is one.
void KvCache::evict_device_block(int32_t slot, uint64_t key) {
  PrefixIndex::Block* b = index_.block(key);
  if (!b || b->loc.tier != Tier::kDevice || b->loc.slot != slot) return;
  std::optional<int32_t> h = host_blocks_.size() > 0 ? host_blocks_.allocate() : std::nullopt;
  b = index_.block(key);  // the host eviction above may have rehashed the map
  if (!h || !b) {
    if (h) host_blocks_.unref(*h);
    index_.erase_block(key);
    return;
  }
  block_to_host(slot, *h);
  host_blocks_.set_key(*h, key);
  host_blocks_.unref(*h);
  b->loc = {Tier::kHost, *h};
  counters_.blocks_to_host++;
}

void KvCache::evict_device_snapshot(int32_t slot, uint64_t id) {
  std::optional<int32_t> h = host_snaps_.size() > 0 ? host_snaps_.allocate() : std::nullopt;
  PrefixIndex::Snapshot* s = index_.snapshot(id);
  if (!h || !s) {
    if (h) host_snaps_.unref(*h);
    index_.erase_snapshot(id);
    return;
  }
  snapshot_to_host(slot, *h);
  host_snaps_.set_key(*h, id);
  host_snaps_.unref(*h);
  s->loc = {Tier::kHost, *h};
  counters_.snapshots_to_host++;
}

int32_t KvCache::alloc_device_block() {
  std::optional<int32_t> b = dev_blocks_.allocate();
  VI_CHECK(b.has_value(), "the KV cache pool of {} blocks of {} tokens is exhausted by running sequences",
           dev_blocks_.size(), bs_);
  return *b;
}

// ---- snapshots ----

void KvCache::take_snapshot(SequenceState& seq, uint64_t parent, int64_t pos, std::span<const int32_t> tail) {
  if (const PrefixIndex::Snapshot* old = index_.find_snapshot(parent, tail)) {
    if (old->loc.tier == Tier::kDevice) dev_snaps_.touch(old->loc.slot);
    else host_snaps_.touch(old->loc.slot);
    return;
  }
  std::optional<int32_t> s = dev_snaps_.allocate();
  if (!s) return;  // no snapshot slots
  std::vector<Tensor> state = seq.recurrent_state();
  VI_CHECK(state.size() == state_shapes_.size(), "sequence has {} recurrent state tensors, the cache expects {}",
           state.size(), state_shapes_.size());
  std::vector<Tensor> to;
  for (size_t i = 0; i < state.size(); ++i) to.push_back(dev_snap_state_[i].slice_rows(*s, *s + 1).reshape(state_shapes_[i]));
  ops::copy_batch(ctx_, state, to);  // one launch for every layer's state
  const int64_t n_tail = static_cast<int64_t>(tail.size());
  if (n_tail > 0) {
    const int64_t src_row = static_cast<int64_t>(seq.block_table()[static_cast<size_t>(pos / bs_)]) * bs_;
    for (size_t i = 0; i < rows_.size(); ++i) {
      Tensor dst = dev_snap_tail_[i].slice_rows(*s * bs_, *s * bs_ + n_tail);
      ops::copy(ctx_, rows_[i].slice_rows(src_row, src_row + n_tail), dst);
    }
  }
  const uint64_t id = index_.add_snapshot(parent, pos, tail, {Tier::kDevice, *s});
  dev_snaps_.set_key(*s, id);
  dev_snaps_.unref(*s);
}

// Copies the snapshot's recurrent state into the sequence and its tail KV into tail_block.
void KvCache::restore_snapshot(SequenceState& seq, const PrefixIndex::Snapshot& s, int32_t tail_block) {
  std::vector<Tensor> state = seq.recurrent_state();
  VI_CHECK(state.size() == state_shapes_.size(), "sequence has {} recurrent state tensors, the cache expects {}",
           state.size(), state_shapes_.size());
  const int64_t n_tail = static_cast<int64_t>(s.tail.size());
  if (s.loc.tier == Tier::kDevice) {
    std::vector<Tensor> from;
    for (size_t i = 0; i < state.size(); ++i)
      from.push_back(dev_snap_state_[i].slice_rows(s.loc.slot, s.loc.slot + 1).reshape(state_shapes_[i]));
    ops::copy_batch(ctx_, from, state);
    for (size_t i = 0; n_tail > 0 && i < rows_.size(); ++i) {
      Tensor dst = rows_[i].slice_rows(tail_block * bs_, tail_block * bs_ + n_tail);
      ops::copy(ctx_, dev_snap_tail_[i].slice_rows(s.loc.slot * bs_, s.loc.slot * bs_ + n_tail), dst);
    }
    dev_snaps_.touch(s.loc.slot);
  } else {
    // Straight from the host tier into the sequence; the snapshot stays there.
    const uint8_t* src = host_snap_mem_.get() + static_cast<size_t>(s.loc.slot) * snap_bytes_;
    for (Tensor& t : state) {
      upload_from(ctx_, src, t);
      src += t.nbytes();
    }
    for (size_t i = 0; i < rows_.size(); ++i) {
      if (n_tail > 0) {
        Tensor dst = rows_[i].slice_rows(tail_block * bs_, tail_block * bs_ + n_tail);
        upload_from(ctx_, src, dst);
      }
      src += rows_[i].slice_rows(0, bs_).nbytes();
    }
    host_snaps_.touch(s.loc.slot);
  }
}

bool KvCache::is_policy_point(const SeqInfo& in, int64_t pos) const {
  if (!has_state() || !opts_.prefix_reuse || pos <= in.resume_pos || pos >= in.prompt_len || pos % bs_ != 0)
    return false;
  const int64_t last_boundary = (in.prompt_len - 1) / bs_ * bs_;
  return pos % opts_.snapshot_interval == 0 || pos == last_boundary || pos == in.match_end;
}

// ---- sequence life ----

int64_t KvCache::begin(SequenceState& seq, std::span<const int32_t> prompt) {
  if (seqs_.count(&seq)) release(seq);
  seq.truncate(0);
  SeqInfo& in = seqs_[&seq];
  in.keys = {kRootKey};
  in.prompt_len = static_cast<int64_t>(prompt.size());
  counters_.lookups++;
  counters_.prompt_tokens += prompt.size();
  if (!opts_.prefix_reuse || prompt.size() < 2) return 0;

  PrefixIndex::Match m = index_.longest_match(prompt, bs_, static_cast<int64_t>(prompt.size()) - 1, has_state());
  in.match_end = static_cast<int64_t>(m.keys.size() - 1) * bs_;
  if (m.pos == 0) return 0;
  const int64_t n_full = m.pos / bs_;
  const uint64_t snap_id = m.snap ? m.snap->id : 0;
  // Pin everything the restore reads first (referenced slots are never evicted), then
  // allocate device blocks for what sits in the host tier.
  std::vector<Location> locs;
  for (int64_t j = 1; j <= n_full; ++j) {
    const PrefixIndex::Block* b = index_.block(m.keys[static_cast<size_t>(j)]);
    locs.push_back(b->loc);
    if (b->loc.tier == Tier::kDevice) dev_blocks_.ref(b->loc.slot);
    else host_blocks_.ref(b->loc.slot);
  }
  Location snap_loc;
  if (snap_id) {
    snap_loc = m.snap->loc;
    if (snap_loc.tier == Tier::kDevice) dev_snaps_.ref(snap_loc.slot);
    else host_snaps_.ref(snap_loc.slot);
  }
  auto& table = seq.block_table();
  table.clear();
  for (int64_t j = 1; j <= n_full; ++j) {
    const uint64_t key = m.keys[static_cast<size_t>(j)];
    Location loc = locs[static_cast<size_t>(j - 1)];
    if (loc.tier == Tier::kHost) {
      const int32_t d = alloc_device_block();
      host_to_block(loc.slot, d);
      host_blocks_.set_key(loc.slot, BlockAllocator::kNoKey);
      host_blocks_.unref(loc.slot);  // back to the free list
      index_.block(key)->loc = {Tier::kDevice, d};
      dev_blocks_.set_key(d, key);
      counters_.blocks_from_host++;
      loc = {Tier::kDevice, d};
    } else {
      dev_blocks_.touch(loc.slot);
    }
    table.push_back(loc.slot);
    in.keys.push_back(key);
  }
  if (snap_id) {
    const PrefixIndex::Snapshot* s = index_.snapshot(snap_id);
    int32_t tail_block = -1;
    if (!s->tail.empty()) {
      tail_block = alloc_device_block();
      table.push_back(tail_block);
    }
    restore_snapshot(seq, *s, tail_block);
    if (snap_loc.tier == Tier::kDevice) dev_snaps_.unref(snap_loc.slot);
    else host_snaps_.unref(snap_loc.slot);
  }
  seq.resume_at(m.pos);
  in.resume_pos = m.pos;
  counters_.hits++;
  counters_.reused_tokens += static_cast<uint64_t>(m.pos);
  return m.pos;
}

void KvCache::reserve(SequenceState& seq, int64_t n_new) {
  info(seq);
  auto& table = seq.block_table();
  const int64_t need = (seq.n_past() + n_new + bs_ - 1) / bs_;
  while (static_cast<int64_t>(table.size()) < need) table.push_back(alloc_device_block());
}

void KvCache::commit(SequenceState& seq, std::span<const int32_t> tokens) {
  SeqInfo& in = info(seq);
  const int64_t n = seq.n_past();
  VI_CHECK(static_cast<int64_t>(tokens.size()) == n, "commit: {} tokens for a sequence holding {}", tokens.size(), n);
  if (!opts_.prefix_reuse) return;
  const auto& table = seq.block_table();
  for (int64_t j = static_cast<int64_t>(in.keys.size()) - 1; (j + 1) * bs_ <= n; ++j) {
    const uint64_t parent = in.keys.back();
    auto toks = tokens.subspan(static_cast<size_t>(j * bs_), static_cast<size_t>(bs_));
    const uint64_t key = chain_key(parent, toks);
    in.keys.push_back(key);
    const int32_t slot = table[static_cast<size_t>(j)];
    if (dev_blocks_.key(slot) != BlockAllocator::kNoKey) continue;  // a shared block from the cache
    PrefixIndex::Block* b = index_.block(key);
    if (b && b->loc.tier == Tier::kHost && b->parent == parent && std::ranges::equal(b->tokens, toks)) {
      // Recomputed what the host tier holds: the device copy wins, the host slot is freed.
      host_blocks_.set_key(b->loc.slot, BlockAllocator::kNoKey);
      b->loc = {Tier::kDevice, slot};
      dev_blocks_.set_key(slot, key);
    } else if (!b && index_.add_block(key, parent, toks, {Tier::kDevice, slot})) {
      dev_blocks_.set_key(slot, key);
    }  // else: another sequence published it first (or a hash collision): stays private
  }
  if (is_policy_point(in, n)) take_snapshot(seq, in.keys[static_cast<size_t>(n / bs_)], n, {});
}

int64_t KvCache::next_stop(const SequenceState& seq) const {
  auto it = seqs_.find(&seq);
  VI_CHECK(it != seqs_.end(), "sequence was not begun in this KV cache");
  const SeqInfo& in = it->second;
  for (int64_t p = (seq.n_past() / bs_ + 1) * bs_; p < in.prompt_len; p += bs_)
    if (is_policy_point(in, p)) return p;
  return in.prompt_len;
}

void KvCache::end(SequenceState& seq, std::span<const int32_t> tokens) {
  SeqInfo& in = info(seq);
  const int64_t n = seq.n_past();
  if (opts_.prefix_reuse && n > 0 && static_cast<int64_t>(tokens.size()) == n &&
      static_cast<int64_t>(in.keys.size()) > n / bs_) {
    const int64_t j = n / bs_;
    auto tail = tokens.subspan(static_cast<size_t>(j * bs_));
    if (!tail.empty() || has_state()) take_snapshot(seq, in.keys[static_cast<size_t>(j)], n, tail);
  }
  release(seq);
}

void KvCache::release(SequenceState& seq) {
  for (int32_t b : seq.block_table()) dev_blocks_.unref(b);
  seq.block_table().clear();
  seq.truncate(0);
  seqs_.erase(&seq);
}

KvCacheStats KvCache::stats() const {
  KvCacheStats s = counters_;
  s.block_size = bs_;
  s.device_blocks = dev_blocks_.size();
  s.device_blocks_cached = dev_blocks_.n_cached();
  s.device_blocks_used = dev_blocks_.n_referenced();
  s.host_blocks = host_blocks_.size();
  s.host_blocks_used = host_blocks_.size() - host_blocks_.n_free();
  s.device_snapshots = dev_snaps_.size();
  s.device_snapshots_used = dev_snaps_.size() - dev_snaps_.n_free();
  s.host_snapshots = host_snaps_.size();
  s.host_snapshots_used = host_snaps_.size() - host_snaps_.n_free();
  s.device_bytes = static_cast<int64_t>(dev_blocks_.size() * block_bytes_ + dev_snaps_.size() * snap_bytes_);
  s.host_bytes = static_cast<int64_t>(host_blocks_.size() * block_bytes_ + host_snaps_.size() * snap_bytes_);
  return s;
}

}  // namespace vi
