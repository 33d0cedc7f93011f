// Speculative decoding (runtime/speculative.h) against plain decoding on the tiny golden
// models (llama_tiny: attention only, cut back by truncation; qwen35_a and qwen35_b: Gated
// DeltaNet + attention, cut back through a state copy and a second pass): the tokens, the
// finish reason and the sequence left behind must be the plain loop's, greedy and sampled,
// for every draft width; n-gram drafts must actually be kept on a repetitive prompt, so the
// comparison covers both kept and refused drafts.
#include <gtest/gtest.h>

#include <random>

#include "formats/weight_source.h"
#include "runtime/generate.h"

namespace vi {
namespace {

struct Loaded {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> model;
};

Loaded load(const std::string& name) {
  Loaded l;
  l.src = formats::open_weight_source(std::string(VI_SOURCE_DIR) + "/tests/golden/" + name);
  l.model = load_model(*l.src);
  return l;
}

struct Outcome {
  std::vector<int32_t> out, history;
  GenerateStats st;
  std::vector<float> last_logits;  // one more plain step after the run: the sequence's state
};

Outcome run(const Model& m, const std::vector<int32_t>& prompt, GenerateOptions opts, int64_t n_ctx) {
  ops::Context ctx;
  auto seq = m.new_sequence(n_ctx);
  Outcome r;
  r.st = generate(m, ctx, *seq, prompt, opts, r.history, [&](int32_t t) {
    r.out.push_back(t);
    return true;
  });
  EXPECT_EQ(seq->n_past(), static_cast<int64_t>(r.history.size()));
  if (!r.out.empty() && seq->n_past() < n_ctx) {  // what the sequence holds decides the next logits
    Tensor logits;
    const int32_t t = r.out.back();
    m.forward(ctx, {&t, 1}, *seq, logits, false);
    r.last_logits.assign(logits.ptr<float>(), logits.ptr<float>() + logits.numel());
  }
  return r;
}

std::vector<int32_t> repetitive_prompt(std::mt19937& rng, int64_t vocab) {
  std::vector<int32_t> unit(7), p;
  for (auto& x : unit) x = static_cast<int32_t>(rng() % vocab);
  for (int i = 0; i < 4; ++i) p.insert(p.end(), unit.begin(), unit.end());
  return p;
}

class Speculative : public ::testing::TestWithParam<const char*> {};

TEST_P(Speculative, NgramDraftsGiveThePlainLoopsTokens) {
  Loaded L = load(GetParam());
  const int64_t V = L.model->info().n_vocab;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  int64_t kept = 0, refused = 0;
  for (int trial = 0; trial < 4; ++trial) {
    const auto prompt = repetitive_prompt(rng, V);
    GenerateOptions plain;
    plain.n_predict = 160;
    plain.n_batch = 16;  // several prefill chunks
    if (trial % 2 == 1) {
      plain.sampling.temperature = 0.9f;
      plain.sampling.seed = rng();
    } else {
      plain.sampling.temperature = 0;
    }
    const Outcome a = run(*L.model, prompt, plain, 256);
    for (int k : {1, 3, 7}) {
      GenerateOptions spec = plain;
      spec.spec.kind = SpecKind::kNgram;
      spec.spec.draft_max = k;
      const Outcome b = run(*L.model, prompt, spec, 256);
      SCOPED_TRACE(::testing::Message() << "trial " << trial << ", draft_max " << k);
      EXPECT_EQ(b.out, a.out);
      EXPECT_EQ(b.history, a.history);
      EXPECT_EQ(b.st.finish, a.st.finish);
      EXPECT_EQ(b.st.generated_tokens, a.st.generated_tokens);
      EXPECT_EQ(b.last_logits, a.last_logits);
      EXPECT_LE(b.st.spec.accepted, b.st.spec.drafted);
      kept += b.st.spec.accepted;
      refused += b.st.spec.drafted - b.st.spec.accepted;
    }
  }
  EXPECT_GT(kept, 0) << "no draft was ever kept: the comparison did not cover kept drafts";
  EXPECT_GT(refused, 0) << "no draft was ever refused: the comparison did not cover cutting back";
}

TEST_P(Speculative, StopsWhereThePlainLoopStops) {
  Loaded L = load(GetParam());
  const int64_t V = L.model->info().n_vocab;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  const auto prompt = repetitive_prompt(rng, V);
  GenerateOptions plain;
  plain.n_predict = 40;
  plain.sampling.temperature = 0;
  const Outcome free_run = run(*L.model, prompt, plain, 256);
  ASSERT_GE(free_run.out.size(), 20u);
  // A stop token the plain loop meets mid-way; a context that fills mid-way; n_predict short.
  GenerateOptions stop = plain;
  stop.stop_tokens = {free_run.out[17]};
  GenerateOptions full = plain;
  GenerateOptions shortn = plain;
  shortn.n_predict = 5;
  const int64_t full_ctx = static_cast<int64_t>(prompt.size()) + 11;
  struct Case {
    GenerateOptions o;
    int64_t n_ctx;
  };
  for (const Case& c : {Case{stop, 256}, Case{full, full_ctx}, Case{shortn, 256}}) {
    const Outcome a = run(*L.model, prompt, c.o, c.n_ctx);
    GenerateOptions s = c.o;
    s.spec.kind = SpecKind::kNgram;
    s.spec.draft_max = 7;
    const Outcome b = run(*L.model, prompt, s, c.n_ctx);
    EXPECT_EQ(b.out, a.out);
    EXPECT_EQ(b.history, a.history);
    EXPECT_EQ(b.st.finish, a.st.finish);
    EXPECT_EQ(b.last_logits, a.last_logits);
  }
}

TEST_P(Speculative, MtpNeedsADraftHead) {
  Loaded L = load(GetParam());  // the golden models come from transformers, which keeps no MTP head
  SpecOptions o;
  o.kind = SpecKind::kMtp;
  EXPECT_THROW(check_spec_options(*L.model, o), Error);
  o.kind = SpecKind::kNgram;
  o.draft_max = 8;  // a pass holds at most Model::kMaxRecordedRows tokens
  EXPECT_THROW(check_spec_options(*L.model, o), Error);
  EXPECT_THROW(spec_kind_from_name("eagle"), Error);
}

INSTANTIATE_TEST_SUITE_P(Golden, Speculative, ::testing::Values("llama_tiny", "qwen35_a", "qwen35_b"));

}  // namespace
}  // namespace vi
