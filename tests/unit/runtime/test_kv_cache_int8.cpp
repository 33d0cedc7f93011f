// KvCache with an int8 KV pool: the per-(row, head) scales are cache rows too, so they must
// travel with the int8 rows through every move (device -> host tier on eviction, host ->
// device on reuse, snapshot tails). A fake forward writes into each row values and scales
// that are a function of the whole prefix; a sequence that reuses a prefix after its blocks
// went through the host tier must see exactly its prompt's values and scales.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/kv_cache.h"

namespace vi {
namespace {

constexpr int64_t kHkv = 2, kD = 4, kBs = 4;

class FakeSeq final : public SequenceState {
 public:
  FakeSeq(std::shared_ptr<KvPool> pool, int64_t n_ctx) {
    pool_ = std::move(pool);
    capacity_ = n_ctx;
  }
  void truncate(int64_t n) override { n_past_ = n; }
  void advance(int64_t t) { n_past_ += t; }
};

uint64_t prefix_hash(std::span<const int32_t> toks, uint64_t salt) {
  uint64_t h = 1469598103934665603ull ^ (salt * 0x9E3779B97F4A7C15ull);
  for (int32_t t : toks) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}
int8_t value_of(std::span<const int32_t> toks, size_t i, int64_t e) {
  return static_cast<int8_t>(static_cast<int>(prefix_hash(toks, i * 131 + e) % 255) - 127);
}
float scale_of(std::span<const int32_t> toks, size_t i, int64_t h) {
  return 1e-3f * static_cast<float>(1 + prefix_hash(toks, 7000 + i * 13 + h) % 997);
}

// K and V of one layer in i8 [rows, Hkv * D] with scales [rows, Hkv].
std::shared_ptr<KvPool> make_pool(int64_t n_blocks) {
  auto p = std::make_shared<KvPool>();
  p->block_size = kBs;
  p->n_blocks = n_blocks;
  for (int kv = 0; kv < 2; ++kv) {
    p->tensors.push_back(Tensor::empty(DType::I8, {n_blocks * kBs, kHkv * kD}));
    p->scales.push_back(Tensor::empty(DType::F32, {n_blocks * kBs, kHkv}));
  }
  return p;
}

void feed(KvCache& kv, FakeSeq& seq, const std::vector<int32_t>& toks) {
  const int64_t end = static_cast<int64_t>(toks.size());
  while (seq.n_past() < end) {
    const int64_t stop = std::min<int64_t>(end, std::max(kv.next_stop(seq), seq.n_past() + 1));
    kv.reserve(seq, stop - seq.n_past());
    for (int64_t p = seq.n_past(); p < stop; ++p) {
      const int64_t row = static_cast<int64_t>(seq.block_table()[p / kBs]) * kBs + p % kBs;
      std::span<const int32_t> prefix{toks.data(), static_cast<size_t>(p + 1)};
      for (size_t i = 0; i < 2; ++i) {
        for (int64_t e = 0; e < kHkv * kD; ++e)
          seq.kv_pool().tensors[i].ptr<int8_t>()[row * kHkv * kD + e] = value_of(prefix, i, e);
        for (int64_t h = 0; h < kHkv; ++h) seq.kv_pool().scales[i].ptr<float>()[row * kHkv + h] = scale_of(prefix, i, h);
      }
    }
    seq.advance(stop - seq.n_past());
    kv.commit(seq, {toks.data(), static_cast<size_t>(stop)});
  }
}

void expect_rows(const FakeSeq& seq, const std::vector<int32_t>& toks, int64_t n) {
  for (int64_t p = 0; p < n; ++p) {
    const int64_t row = static_cast<int64_t>(seq.block_table()[p / kBs]) * kBs + p % kBs;
    std::span<const int32_t> prefix{toks.data(), static_cast<size_t>(p + 1)};
    for (size_t i = 0; i < 2; ++i) {
      for (int64_t e = 0; e < kHkv * kD; ++e)
        ASSERT_EQ(seq.kv_pool().tensors[i].ptr<int8_t>()[row * kHkv * kD + e], value_of(prefix, i, e))
            << "position " << p << " tensor " << i;
      for (int64_t h = 0; h < kHkv; ++h)
        ASSERT_EQ(seq.kv_pool().scales[i].ptr<float>()[row * kHkv + h], scale_of(prefix, i, h))
            << "scale at position " << p << " tensor " << i;
    }
  }
}

std::vector<int32_t> tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + static_cast<int32_t>(i * 7 % 101);
  return t;
}

TEST(KvCacheInt8, ScalesTravelThroughTheHostTier) {
  ops::Context ctx;
  auto pool = make_pool(12);
  KvCacheOptions opts;
  opts.host_bytes = 1 << 20;
  KvCache kv(ctx, pool, {}, opts);
  const std::vector<int32_t> a = tokens(1, 41), b = tokens(500, 41);
  {
    FakeSeq s(pool, 64);
    kv.begin(s, a);
    feed(kv, s, a);
    kv.end(s, a);
  }
  {
    FakeSeq s(pool, 64);  // a different prompt needs most of the pool: a's blocks go to the host
    kv.begin(s, b);
    feed(kv, s, b);
    kv.end(s, b);
  }
  EXPECT_GT(kv.stats().blocks_to_host, 0u);
  std::vector<int32_t> a2 = a;
  for (int32_t t : tokens(900, 6)) a2.push_back(t);
  FakeSeq s(pool, 64);
  const int64_t reused = kv.begin(s, a2);
  EXPECT_GE(reused, 40);
  EXPECT_GT(kv.stats().blocks_from_host, 0u);
  expect_rows(s, a2, reused);  // a's values and scales, back from the host tier
  feed(kv, s, a2);
  expect_rows(s, a2, static_cast<int64_t>(a2.size()));
}

}  // namespace
}  // namespace vi
