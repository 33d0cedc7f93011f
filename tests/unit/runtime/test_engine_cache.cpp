// The engine with the prefix cache on tiny golden models (llama_tiny: attention only;
// qwen35_a: Gated DeltaNet + full attention), against the same engine with the cache
// off: greedy outputs must be identical, and the cached-token counts must be exactly
// what the cache can know (the previous turn's tokens, the shared system prompt's
// blocks, the boundary before a divergence).
#include <gtest/gtest.h>

#include <random>

#include "formats/weight_source.h"
#include "unit/golden_model.h"
#include "runtime/engine.h"

namespace vi {
namespace {

using Loaded = test::GoldenModel;
Loaded load(const std::string& name) { return test::load_golden(name); }

struct Result {
  std::vector<int32_t> tokens;
  int64_t cached = -1;
};

Result run(Engine& e, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto req = std::make_shared<Request>();
  req->prompt = prompt;
  req->params.sampling.temperature = 0;  // greedy
  req->params.max_tokens = max_tokens;
  req->params.ignore_stop_tokens = true;
  EXPECT_EQ(e.submit(req), Engine::SubmitStatus::kOk);
  Result r;
  for (;;) {
    auto ev = req->events->pop(std::chrono::seconds(60));
    if (!ev) {
      ADD_FAILURE() << "no event within 60 s";
      return r;
    }
    if (ev->kind == Event::Kind::kToken) r.tokens.push_back(ev->token);
    if (ev->kind == Event::Kind::kError) {
      ADD_FAILURE() << ev->error;
      return r;
    }
    if (ev->kind == Event::Kind::kDone) {
      r.cached = ev->cached_tokens;
      return r;
    }
  }
}

std::vector<int32_t> random_tokens(std::mt19937& rng, size_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

EngineOptions options(bool cache) {
  EngineOptions o;
  o.max_seqs = 2;
  o.n_ctx = 1024;
  o.step_tokens = 64;  // several prefill chunks per prompt
  o.prefix_cache = cache;
  o.snapshot_interval = 32;
  return o;
}

class EngineCache : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineCache, MultiTurnComputesOnlyNewTokensAndMatchesNoCache) {
  Loaded L = load(GetParam());
  const int64_t V = L.model->info().n_vocab;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  Engine on(*L.model, {}, options(true)), off(*L.model, {}, options(false));
  auto conv = random_tokens(rng, 70, V);
  int64_t held = 0;
  for (int turn = 0; turn < 6; ++turn) {
    const int64_t gen = 3 + static_cast<int64_t>(rng() % 6);
    Result a = run(on, conv, gen), b = run(off, conv, gen);
    EXPECT_EQ(a.tokens, b.tokens) << "turn " << turn;
    EXPECT_EQ(b.cached, 0);
    // Everything the previous turn's sequence held (its prompt and all generated tokens
    // but the last, which was never fed) is reused; only the new tokens are computed.
    EXPECT_EQ(a.cached, held) << "turn " << turn;
    held = static_cast<int64_t>(conv.size() + a.tokens.size()) - 1;
    conv.insert(conv.end(), a.tokens.begin(), a.tokens.end());
    auto user = random_tokens(rng, 5 + rng() % 30, V);
    conv.insert(conv.end(), user.begin(), user.end());
  }
  on.wait_idle();
  const EngineStats st = on.stats();
  EXPECT_EQ(st.cache.lookups, 6u);
  EXPECT_EQ(st.cache.hits, 5u);
  EXPECT_EQ(st.prompt_tokens_cached, st.cache.reused_tokens);
  EXPECT_GT(st.cache.device_blocks_cached, 0);
}

TEST_P(EngineCache, SharedSystemPromptAndDivergenceMidBlock) {
  Loaded L = load(GetParam());
  const int64_t V = L.model->info().n_vocab;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  Engine on(*L.model, {}, options(true)), off(*L.model, {}, options(false));
  auto system = random_tokens(rng, 100, V);
  auto a = system, b = system;
  auto ua = random_tokens(rng, 20, V), ub = random_tokens(rng, 25, V);
  a.insert(a.end(), ua.begin(), ua.end());
  b.insert(b.end(), ub.begin(), ub.end());
  Result ra = run(on, a, 4), rb = run(on, b, 4);
  EXPECT_EQ(ra.cached, 0);
  // b shares the system prompt's full blocks (96 tokens; for the hybrid model the
  // snapshot at 96, a multiple of the 32-token interval).
  EXPECT_EQ(rb.cached, 96);
  EXPECT_EQ(ra.tokens, run(off, a, 4).tokens);
  EXPECT_EQ(rb.tokens, run(off, b, 4).tokens);
  // A prompt that diverges from a inside block 3 (token 57) resumes at 48 for the
  // attention model (the block boundary) and at 32 for the hybrid one (the snapshot).
  auto c = a;
  c[57] = (c[57] + 1) % static_cast<int32_t>(V);
  Result rc = run(on, c, 4);
  const bool hybrid = L.model->info().arch == "qwen3_5";
  EXPECT_EQ(rc.cached, hybrid ? 32 : 48);
  EXPECT_EQ(rc.tokens, run(off, c, 4).tokens);
}

TEST_P(EngineCache, SmallPoolEvictionKeepsAnswersCorrect) {
  Loaded L = load(GetParam());
  const int64_t V = L.model->info().n_vocab;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (double ram : {0.0, 0.001}) {  // no host tier; a 1 MB host tier
    std::mt19937 rng(seed);
    EngineOptions o = options(true);
    o.max_seqs = 1;
    o.n_ctx = 160;  // a pool of 10 blocks: every conversation evicts the others
    o.cache_snapshots = 2;
    o.cache_ram_gb = ram;
    EngineOptions o_off = o;
    o_off.prefix_cache = false;
    Engine on(*L.model, {}, o), off(*L.model, {}, o_off);
    std::vector<std::vector<int32_t>> convs;
    for (int i = 0; i < 3; ++i) convs.push_back(random_tokens(rng, 40 + rng() % 40, V));
    int64_t reused = 0;
    for (int round = 0; round < 3; ++round)
      for (auto& conv : convs) {
        Result a = run(on, conv, 3), b = run(off, conv, 3);
        EXPECT_EQ(a.tokens, b.tokens) << "round " << round;
        reused += a.cached;
        conv.insert(conv.end(), a.tokens.begin(), a.tokens.end());
        conv.push_back(static_cast<int32_t>(rng() % V));
      }
    on.wait_idle();
    const EngineStats st = on.stats();
    EXPECT_EQ(st.cache.device_blocks, 10);
    if (ram > 0) {
      EXPECT_GT(st.cache.blocks_to_host + st.cache.snapshots_to_host, 0u);
      EXPECT_GT(reused, 0) << "the host tier should bring evicted prefixes back";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, EngineCache, ::testing::Values("llama_tiny", "qwen35_a"),
                         [](const auto& i) { return std::string(i.param); });

TEST(EngineCacheOptions, PoolTooSmallIsAnError) {
  Loaded L = load("llama_tiny");
  EngineOptions o = options(true);
  o.kv_blocks = 10;  // 2 sequences of 1024 tokens need 128 blocks of 16
  EXPECT_THROW(Engine(*L.model, {}, o), Error);
}

}  // namespace
}  // namespace vi
