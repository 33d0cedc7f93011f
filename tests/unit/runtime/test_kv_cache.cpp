// KvCache with a fake model: a "forward pass" writes into every KV row a value that is a
// function of the whole prefix up to that position, and sets the recurrent state to a
// function of the whole prefix. A resumed sequence is then correct exactly when every
// row it can see and its state equal the values of ITS prompt's prefixes, which the test
// recomputes independently. Covers multi-turn reuse, shared system prompts, eviction
// with and without a host tier, divergence mid-block, and the snapshot policy.
#include <gtest/gtest.h>

#include <random>

#include "ops/memory.h"
#include "runtime/kv_cache.h"

namespace vi {
namespace {

constexpr int64_t kWidths[] = {3, 5};  // two KV pool tensors of different widths

class FakeSeq final : public SequenceState {
 public:
  FakeSeq(std::shared_ptr<KvPool> pool, int64_t n_ctx, bool recurrent) {
    pool_ = std::move(pool);
    capacity_ = n_ctx;
    if (recurrent) state_ = Tensor::empty(DType::F32, {2, 3});
  }
  void truncate(int64_t n) override { n_past_ = n; }
  std::vector<Tensor> recurrent_state() const override {
    return state_.data() ? std::vector<Tensor>{state_} : std::vector<Tensor>{};
  }
  void advance(int64_t t) { n_past_ += t; }
  Tensor state_;
};

// Value of element e of pool tensor i at the position after prefix `toks` (a hash).
float prefix_value(std::span<const int32_t> toks, size_t i, int64_t e) {
  uint64_t h = 1469598103934665603ull ^ (i * 7919 + static_cast<uint64_t>(e) * 104729);
  for (int32_t t : toks) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<float>(h % 1000003) / 1000003.0f;
}

std::shared_ptr<KvPool> make_pool(int64_t n_blocks, int64_t bs) {
  auto p = std::make_shared<KvPool>();
  p->block_size = bs;
  p->n_blocks = n_blocks;
  for (int64_t w : kWidths) {
    p->tensors.push_back(Tensor::empty(DType::F32, {n_blocks * bs, w}));
    std::fill(p->tensors.back().ptr<float>(), p->tensors.back().ptr<float>() + n_blocks * bs * w, -1.0f);
  }
  return p;
}

// The fake forward: feeds tokens [n_past, end) of `toks` in chunks that stop where the
// cache asks, committing after each; returns how many chunks ran.
int feed(KvCache& kv, FakeSeq& seq, const std::vector<int32_t>& toks, int64_t end) {
  int chunks = 0;
  while (seq.n_past() < end) {
    const int64_t stop = std::min<int64_t>(end, std::max(kv.next_stop(seq), seq.n_past() + 1));
    const int64_t n = stop - seq.n_past(), bs = kv.block_size();
    kv.reserve(seq, n);
    for (int64_t p = seq.n_past(); p < stop; ++p) {
      const int64_t row = static_cast<int64_t>(seq.block_table()[p / bs]) * bs + p % bs;
      for (size_t i = 0; i < seq.kv_pool().tensors.size(); ++i)
        for (int64_t e = 0; e < kWidths[i]; ++e)
          seq.kv_pool().tensors[i].ptr<float>()[row * kWidths[i] + e] =
              prefix_value({toks.data(), static_cast<size_t>(p + 1)}, i, e);
    }
    seq.advance(n);
    if (seq.state_.data())
      for (int64_t e = 0; e < 6; ++e)
        seq.state_.ptr<float>()[e] = prefix_value({toks.data(), static_cast<size_t>(stop)}, 99, e);
    kv.commit(seq, {toks.data(), static_cast<size_t>(stop)});
    ++chunks;
  }
  return chunks;
}

// Every row the sequence can see and its state match the prompt's own prefixes.
void expect_exact(const FakeSeq& seq, const std::vector<int32_t>& prompt) {
  const int64_t n = seq.n_past(), bs = seq.kv_pool().block_size;
  ASSERT_GE(static_cast<int64_t>(seq.block_table().size()) * bs, n);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t row = static_cast<int64_t>(seq.block_table()[p / bs]) * bs + p % bs;
    for (size_t i = 0; i < seq.kv_pool().tensors.size(); ++i)
      for (int64_t e = 0; e < kWidths[i]; ++e)
        ASSERT_EQ(seq.kv_pool().tensors[i].ptr<float>()[row * kWidths[i] + e],
                  prefix_value({prompt.data(), static_cast<size_t>(p + 1)}, i, e))
            << "position " << p << " tensor " << i;
  }
  if (seq.state_.data() && n > 0) {
    for (int64_t e = 0; e < 6; ++e) {
      ASSERT_EQ(seq.state_.ptr<float>()[e], prefix_value({prompt.data(), static_cast<size_t>(n)}, 99, e))
          << "recurrent state after " << n << " tokens";
    }
  }
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % 50000);
  return t;
}

struct Fixture {
  Fixture(int64_t n_blocks, int64_t bs, bool recurrent, KvCacheOptions o, int n_seqs = 2, int64_t n_ctx = 4096)
      : pool(make_pool(n_blocks, bs)) {
    for (int i = 0; i < n_seqs; ++i) seqs.push_back(std::make_unique<FakeSeq>(pool, n_ctx, recurrent));
    kv = std::make_unique<KvCache>(ops::Context{}, pool, seqs[0]->recurrent_state(), o);
  }
  // One turn: begin, check the reused part, compute the rest and `gen` "generated" tokens
  // (appended to the conversation), end. Returns the reused count.
  int64_t turn(int s, std::vector<int32_t>& conv, int64_t gen, std::mt19937& rng) {
    FakeSeq& seq = *seqs[s];
    const int64_t reused = kv->begin(seq, conv);
    EXPECT_EQ(seq.n_past(), reused);
    expect_exact(seq, conv);
    feed(*kv, seq, conv, static_cast<int64_t>(conv.size()));
    // Decode one token at a time; as in the engine, the last sampled token is never fed.
    auto g = random_tokens(rng, static_cast<size_t>(gen));
    for (size_t i = 0; i < g.size(); ++i) {
      conv.push_back(g[i]);
      if (i + 1 < g.size()) feed(*kv, seq, conv, static_cast<int64_t>(conv.size()));
    }
    expect_exact(seq, conv);
    kv->end(seq, {conv.data(), static_cast<size_t>(seq.n_past())});
    return reused;
  }
  std::shared_ptr<KvPool> pool;
  std::vector<std::unique_ptr<FakeSeq>> seqs;
  std::unique_ptr<KvCache> kv;
};

class KvCacheTest : public ::testing::TestWithParam<bool> {};  // param: recurrent state

TEST_P(KvCacheTest, MultiTurnReusesEverythingButTheNewTokens) {
  const bool rec = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  KvCacheOptions o;
  o.snapshot_interval = 32;
  Fixture f(64, 8, rec, o, 1);
  auto conv = random_tokens(rng, 37);
  EXPECT_EQ(f.turn(0, conv, 5, rng), 0);
  for (int t = 0; t < 6; ++t) {
    // The sequence held every token but the last generated one: that is what is reused.
    const int64_t held = static_cast<int64_t>(conv.size()) - 1;
    auto user = random_tokens(rng, 3 + rng() % 20);
    conv.insert(conv.end(), user.begin(), user.end());
    EXPECT_EQ(f.turn(0, conv, 1 + static_cast<int64_t>(rng() % 9), rng), held) << "turn " << t;
  }
  const KvCacheStats st = f.kv->stats();
  EXPECT_EQ(st.lookups, 7u);
  EXPECT_EQ(st.hits, 6u);
}

TEST_P(KvCacheTest, SharedSystemPromptSharesBlocks) {
  const bool rec = GetParam();
  std::mt19937 rng(std::random_device{}());
  KvCacheOptions o;
  o.snapshot_interval = 16;
  Fixture f(64, 8, rec, o, 2);
  auto system = random_tokens(rng, 50);
  auto a = system, b = system;
  auto ua = random_tokens(rng, 11), ub = random_tokens(rng, 13);
  a.insert(a.end(), ua.begin(), ua.end());
  b.insert(b.end(), ub.begin(), ub.end());
  // a runs (and stays running) while b begins: b must reference a's blocks.
  FakeSeq& sa = *f.seqs[0];
  FakeSeq& sb = *f.seqs[1];
  EXPECT_EQ(f.kv->begin(sa, a), 0);
  feed(*f.kv, sa, a, static_cast<int64_t>(a.size()));
  const int64_t rb = f.kv->begin(sb, b);
  // Attention-only: every full block of the system prompt (48); hybrid: the last snapshot
  // inside it (the interval points 16, 32, 48).
  EXPECT_EQ(rb, 48);
  expect_exact(sb, b);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(sa.block_table()[j], sb.block_table()[j]) << "block " << j;
  EXPECT_NE(sa.block_table()[6], sb.block_table()[6]);
  feed(*f.kv, sb, b, static_cast<int64_t>(b.size()));
  expect_exact(sa, a);  // b's writes did not touch a's rows
  expect_exact(sb, b);
  f.kv->end(sa, a);
  f.kv->end(sb, b);
}

TEST(KvCache, HybridSnapshotsWhereAPromptLeavesTheSharedBlocks) {
  std::mt19937 rng(std::random_device{}());
  KvCacheOptions o;
  o.snapshot_interval = 1024;  // no interval snapshot inside the system prompt
  Fixture f(64, 8, true, o, 1);
  auto system = random_tokens(rng, 45);
  std::vector<std::vector<int32_t>> convs;
  for (int i = 0; i < 3; ++i) {
    convs.push_back(system);
    auto u = random_tokens(rng, 10 + i);
    convs.back().insert(convs.back().end(), u.begin(), u.end());
  }
  EXPECT_EQ(f.turn(0, convs[0], 0, rng), 0);
  // The second matches 5 blocks but finds no snapshot there: computes all, snapshots at 40.
  EXPECT_EQ(f.turn(0, convs[1], 0, rng), 0);
  EXPECT_EQ(f.turn(0, convs[2], 0, rng), 40);
}

TEST_P(KvCacheTest, DivergenceMidBlockResumesAtTheRightBoundary) {
  const bool rec = GetParam();
  std::mt19937 rng(std::random_device{}());
  KvCacheOptions o;
  o.snapshot_interval = 16;
  Fixture f(64, 8, rec, o, 1);
  auto first = random_tokens(rng, 70);
  auto conv = first;
  f.turn(0, conv, 0, rng);
  for (int64_t d : {69, 53, 40, 39, 17, 8, 3}) {
    auto p = first;
    p[static_cast<size_t>(d)] += 1;  // diverges at token d
    FakeSeq& s = *f.seqs[0];
    const int64_t r = f.kv->begin(s, p);
    // Attention-only: the block containing d starts at d/8*8. Hybrid: the last snapshot
    // at or before it (interval 16, the prompt's last boundary 64, end of turn 70).
    const int64_t want = rec ? d / 16 * 16 : d / 8 * 8;
    EXPECT_EQ(r, want) << "diverging at " << d;
    expect_exact(s, p);
    f.kv->release(s);
  }
}

TEST_P(KvCacheTest, SmallPoolEvictsAndStaysExact) {
  const bool rec = GetParam();
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (int64_t host : {int64_t{0}, int64_t{1} << 16}) {
    std::mt19937 rng(seed);
    KvCacheOptions o;
    o.snapshot_interval = 16;
    o.host_bytes = host;
    o.device_snapshots = 3;
    Fixture f(12, 8, rec, o, 1, 96);  // room for one 96-token context only
    std::vector<std::vector<int32_t>> convs;
    for (int c = 0; c < 4; ++c) convs.push_back(random_tokens(rng, 40 + rng() % 30));
    for (int round = 0; round < 3; ++round)
      for (auto& c : convs) {
        if (c.size() > 80) c.resize(40);
        f.turn(0, c, 2, rng);  // checks exactness of whatever was reused
      }
    const KvCacheStats st = f.kv->stats();
    EXPECT_EQ(st.device_blocks, 12);
    if (host > 0) {
      EXPECT_GT(st.host_blocks, 0);
      EXPECT_GT(st.blocks_to_host, 0u) << "the small device pool should have spilled to the host tier";
      EXPECT_GT(st.blocks_from_host, 0u) << "revisited conversations should come back from the host tier";
      EXPECT_GT(st.reused_tokens, 0u);
    }
  }
}

TEST_P(KvCacheTest, SnapshotPolicyCutsPromptChunks) {
  const bool rec = GetParam();
  std::mt19937 rng(std::random_device{}());
  KvCacheOptions o;
  o.snapshot_interval = 20;  // rounded up to 24 (blocks of 8)
  Fixture f(64, 8, rec, o, 1);
  auto p = random_tokens(rng, 61);
  FakeSeq& s = *f.seqs[0];
  f.kv->begin(s, p);
  // Hybrid: stops at 24, 48 and the last boundary before token 60 (56); else one chunk.
  EXPECT_EQ(feed(*f.kv, s, p, 61), rec ? 4 : 1);
  f.kv->release(s);
  const KvCacheStats st = f.kv->stats();
  EXPECT_EQ(st.device_snapshots_used, rec ? 3 : 0);
}

TEST_P(KvCacheTest, DisabledReuseComputesEverything) {
  std::mt19937 rng(std::random_device{}());
  KvCacheOptions o;
  o.prefix_reuse = false;
  Fixture f(64, 8, GetParam(), o, 1);
  auto conv = random_tokens(rng, 30);
  EXPECT_EQ(f.turn(0, conv, 3, rng), 0);
  conv.push_back(5);
  EXPECT_EQ(f.turn(0, conv, 3, rng), 0);
  EXPECT_EQ(f.kv->stats().device_blocks_cached, 0);
}

INSTANTIATE_TEST_SUITE_P(AttentionAndHybrid, KvCacheTest, ::testing::Bool(),
                         [](const auto& i) { return i.param ? "Hybrid" : "AttentionOnly"; });

TEST(KvCache, ExhaustedPoolIsAnError) {
  auto pool = make_pool(2, 4);
  FakeSeq s(pool, 100, false);
  KvCache kv(ops::Context{}, pool, {}, {});
  std::vector<int32_t> p(20, 1);
  kv.begin(s, p);
  EXPECT_THROW(kv.reserve(s, 20), Error);
}

}  // namespace
}  // namespace vi
