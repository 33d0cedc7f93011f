// Models split over a tensor-parallel group of CPU ranks (models/tensor_parallel.h) against the
// same model on one rank: the weight cuts (columns of a quantized matrix on and off its blocks,
// the SwiGLU MLP's rows and columns), the merged KV pool's order, and the logits of whole
// llama-family models (llama, qwen2 with q/k/v biases, qwen3 with per-head q/k norms) over
// prefill, decode steps and a two-sequence batch, and Qwen3.5 (GDN heads and states split too, and
// its MTP head);
// and the cases that must be refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "unit/cpu/cpu_test_util.h"
#include "unit/golden_model.h"
#include "models/attention_block.h"
#include "models/dense_blocks.h"
#include "models/loader.h"
#include "models/tensor_parallel.h"

namespace vi {
namespace {

using test::random_f32;

Tensor quantize(const Tensor& f, DType t) {
  Tensor q = Tensor::empty(t, f.shape());
  for (int64_t r = 0; r < f.rows(); ++r) quantize_row(t, f.row<float>(r), q.row(r), f.cols());
  return q;
}

TEST(TensorParallel, ColumnCutsKeepTheBlocksOrFallBackToF32) {
  std::mt19937 rng(test::test_seed());
  const Tensor w = quantize(random_f32(rng, {6, 128}, 1.0f), DType::Q8_0);
  const Tensor whole = to_f32(w);
  // On the blocks: the dtype and the bytes stay.
  Tensor a = shard_cols(w, {32, 96});
  ASSERT_EQ(a.dtype(), DType::Q8_0);
  ASSERT_EQ(a.cols(), 64);
  for (int64_t r = 0; r < 6; ++r)
    EXPECT_EQ(std::memcmp(a.row(r), w.row(r) + dtype_row_bytes(DType::Q8_0, 32), a.row_bytes()), 0) << r;
  // Off them: f32, the same values.
  Tensor b = shard_cols(w, {16, 80});
  ASSERT_EQ(b.dtype(), DType::F32);
  for (int64_t r = 0; r < 6; ++r)
    for (int64_t c = 0; c < 64; ++c) ASSERT_EQ(b.row<float>(r)[c], whole.row<float>(r)[16 + c]) << r << "," << c;
}

TEST(TensorParallel, SwigluShardsSumToTheWholeMlp) {
  std::mt19937 rng(test::test_seed());
  ops::Context ctx;
  const int64_t d = 64, F = 160;  // 5 blocks of 32: cut 3 + 2 over two ranks, 2 + 2 + 1 over three
  for (int64_t N : {int64_t{1}, int64_t{11}}) {
    SwigluWeights m;
    m.gate = quantize(random_f32(rng, {F, d}, 0.2f), DType::Q8_0);
    m.up = quantize(random_f32(rng, {F, d}, 0.2f), DType::Q8_0);
    m.down = quantize(random_f32(rng, {d, F}, 0.2f), DType::Q8_0);
    m.gate_up = concat_rows({&m.gate, &m.up});
    stacked_views(m.gate_up, {&m.gate, &m.up});
    const Tensor n = random_f32(rng, {N, d}, 1.0f);
    Tensor gu = Tensor::empty(DType::F32, {N, 2 * F}), h = swiglu_scratch(ctx, N, F);
    Tensor want = Tensor::empty(DType::F32, {N, d});
    swiglu_mlp(ctx, n, m, gu, h, want);
    for (int world : {2, 3}) {
      std::vector<float> sum(static_cast<size_t>(N * d), 0.0f);
      int64_t covered = 0;
      for (int r = 0; r < world; ++r) {
        const parallel::Range f = split_mlp(m, F, world, r);
        EXPECT_EQ(f.begin, covered);
        covered = f.end;
        const SwigluWeights s = shard_swiglu(m, f);
        ASSERT_NE(s.gate_up.data(), nullptr);
        EXPECT_EQ(s.gate.data(), s.gate_up.data());  // stacked again, parts as views
        EXPECT_EQ(s.down.dtype(), DType::Q8_0);       // cut on its blocks
        Tensor sgu = Tensor::empty(DType::F32, {N, 2 * f.size()}), sh = swiglu_scratch(ctx, N, f.size());
        Tensor o = Tensor::empty(DType::F32, {N, d});
        swiglu_mlp(ctx, n, s, sgu, sh, o);
        for (int64_t i = 0; i < N * d; ++i) sum[i] += o.ptr<float>()[i];
      }
      EXPECT_EQ(covered, F);
      for (int64_t i = 0; i < N * d; ++i) {
        const float w = want.ptr<float>()[i];
        ASSERT_NEAR(sum[i], w, 1e-4f * (1.0f + std::fabs(w))) << "world " << world << ", N " << N << ", element " << i;
      }
    }
  }
}

TEST(TensorParallel, MergedPoolHoldsTheRanksPoolsInRankOrder) {
  ops::Context ctx;
  std::vector<std::shared_ptr<KvPool>> pools;
  for (int64_t hkv : {2, 1}) pools.push_back(new_attention_kv_pool(ctx, 3, 4, 16, hkv, 8, KvCacheTypes{}));
  const auto m = merge_kv_pools(pools);
  ASSERT_EQ(m->tensors.size(), 12u);
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_EQ(m->tensors[j].data(), pools[0]->tensors[j].data());
    EXPECT_EQ(m->tensors[6 + j].data(), pools[1]->tensors[j].data());
  }
  EXPECT_EQ(m->tensors[6].cols(), 8);  // rank 1's single KV head
  pools.push_back(new_attention_kv_pool(ctx, 3, 5, 16, 1, 8, KvCacheTypes{}));
  EXPECT_THROW(merge_kv_pools(pools), Error);  // another block count
}

struct PassLogits {
  std::vector<float> prefill;  // [T, vocab] every row
  std::vector<float> decode;   // the decode steps' logits, one row each
  std::vector<float> batch;    // a two-sequence batch's last rows
};

std::vector<float> values_of(const Tensor& t) { return {t.ptr<float>(), t.ptr<float>() + t.numel()}; }

// threads > 0: the pass's worker pool (shared out among the ranks); else the global one. int8_kv:
// K and V cached in int8 with their scales (ops/kv_quant.h), which the merged pool carries rank by rank.
PassLogits run_model(const std::string& name, int tp, int threads = 0, bool int8_kv = false) {
  auto src = formats::open_weight_source((test::golden_dir() / name).string());
  std::unique_ptr<ThreadPool> pool = threads > 0 ? std::make_unique<ThreadPool>(threads) : nullptr;
  LoadOptions opts;
  opts.tp = tp;
  opts.ctx.pool = pool.get();
  if (int8_kv) opts.kv_types = {DType::I8, DType::I8};
  auto model = load_model(*src, opts);
  ops::Context ctx;
  ctx.pool = pool.get();
  PassLogits out;
  const std::vector<int32_t> prompt{1, 17, 42, 99, 5, 63, 7, 120, 31};
  auto seq = model->new_sequence(64);
  Tensor logits;
  model->forward(ctx, prompt, *seq, logits, true);
  out.prefill = values_of(logits);
  for (int32_t t : {11, 12, 13}) {
    model->forward(ctx, std::vector<int32_t>{t}, *seq, logits, false);
    const auto row = values_of(logits);
    out.decode.insert(out.decode.end(), row.begin(), row.end());
  }
  // Two sequences in one pass: a decode step of the first beside a prefill of another.
  auto other = model->new_sequence(64);
  const std::vector<int32_t> one{14}, two{3, 4, 5, 6};
  BatchItem items[2] = {{seq.get(), one, false}, {other.get(), two, false}};
  model->forward_batch(ctx, items, logits);
  out.batch = values_of(logits);
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what, int tp) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0.0f;
  for (float w : want) scale = std::max(scale, std::fabs(w));
  // f32 throughout; the ranks' partial sums are added in another order than one rank's dot
  // products, so the last bits differ: 1e-5 of the largest logit.
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * scale) << what << ", tp " << tp << ", element " << i;
}

// A verify pass that keeps each token's recurrent state, cut back to its second token, then a step:
// what speculative decoding does with refused drafts. Split, every rank's GDN states are
// checkpointed and restored.
std::vector<float> verify_and_rollback(const std::string& name, int tp) {
  auto src = formats::open_weight_source((test::golden_dir() / name).string());
  LoadOptions opts;
  opts.tp = tp;
  auto model = load_model(*src, opts);
  ops::Context ctx;
  auto seq = model->new_sequence(64);
  Tensor logits;
  model->forward(ctx, std::vector<int32_t>{1, 17, 42, 99, 5}, *seq, logits, false);
  const std::vector<int32_t> drafts{6, 7, 8, 9};
  BatchItem verify{seq.get(), drafts, true, /*checkpoints=*/true};
  model->forward_batch(ctx, {&verify, 1}, logits);
  std::vector<float> out = values_of(logits);
  EXPECT_TRUE(seq->rollback(7));
  model->forward(ctx, std::vector<int32_t>{21}, *seq, logits, false);
  const std::vector<float> step = values_of(logits);
  out.insert(out.end(), step.begin(), step.end());
  return out;
}

TEST(TensorParallel, VerifyPassRollsBackEveryRanksState) {
  const std::vector<float> one = verify_and_rollback("qwen35_a", 1);
  expect_close(verify_and_rollback("qwen35_a", 2), one, "verify + rollback", 2);
}

// The MTP head's draft logits and output over a prefill's hidden states, split and not.
std::vector<float> draft_pass(const std::string& dir, int tp) {
  auto src = formats::open_weight_source(dir);
  LoadOptions opts;
  opts.tp = tp;
  opts.draft_head = true;
  auto model = load_model(*src, opts);
  EXPECT_TRUE(model->has_draft_head());
  ops::Context ctx;
  const std::vector<int32_t> p{5, 9, 2, 7, 31, 4, 4, 18, 3, 60};
  const int64_t n = static_cast<int64_t>(p.size());
  auto main = model->new_sequence(64);
  Tensor logits, hidden;
  BatchItem item{main.get(), p, false};
  model->forward_batch(ctx, {&item, 1}, logits, LogitsOn::kHostF32, &hidden);
  auto draft = model->new_draft_sequence(*main);
  Tensor dl, out;
  model->draft_forward(ctx, *draft, std::span<const int32_t>(p.data() + 1, n - 1), hidden.slice_rows(0, n - 1), &dl,
                       out, LogitsOn::kHostF32);
  std::vector<float> v = values_of(dl);
  v.insert(v.end(), out.ptr<float>(), out.ptr<float>() + out.numel());
  // A pass without an LM head (the head's cache only) must not leave the ranks out of step.
  Tensor out2;
  model->draft_forward(ctx, *draft, std::span<const int32_t>(p.data() + n - 1, 1), hidden.slice_rows(n - 1, n), nullptr,
                       out2, LogitsOn::kHostF32);
  v.insert(v.end(), out2.ptr<float>(), out2.ptr<float>() + out2.numel());
  return v;
}

TEST(TensorParallel, MtpHeadSplitMatchesOneRank) {
  test::ScratchDir dir;
  const std::string folder = test::with_mtp_head("qwen35_a", dir.path);
  expect_close(draft_pass(folder, 2), draft_pass(folder, 1), "MTP draft", 2);
}

class TensorParallelModel : public ::testing::TestWithParam<const char*> {};

TEST_P(TensorParallelModel, LogitsMatchOneRank) {
  const PassLogits one = run_model(GetParam(), 1);
  const PassLogits two = run_model(GetParam(), 2);
  expect_close(two.prefill, one.prefill, "prefill", 2);
  expect_close(two.decode, one.decode, "decode", 2);
  expect_close(two.batch, one.batch, "batch", 2);
}

// Each rank with a worker of its own besides its thread (4 threads over 2 ranks): the ranks' ops
// run in parallel inside each rank too.
TEST_P(TensorParallelModel, LogitsMatchOneRankWithWorkersInEachRank) {
  const PassLogits one = run_model(GetParam(), 1, 4);
  const PassLogits two = run_model(GetParam(), 2, 4);
  expect_close(two.prefill, one.prefill, "prefill", 2);
  expect_close(two.decode, one.decode, "decode", 2);
  expect_close(two.batch, one.batch, "batch", 2);
}

TEST_P(TensorParallelModel, Int8KvCacheMatchesOneRank) {
  const PassLogits one = run_model(GetParam(), 1, 0, true);
  const PassLogits two = run_model(GetParam(), 2, 0, true);
  expect_close(two.prefill, one.prefill, "prefill", 2);
  expect_close(two.decode, one.decode, "decode", 2);
  expect_close(two.batch, one.batch, "batch", 2);
}

// llama (tied head), qwen2 (q/k/v biases), qwen3 (per-head q/k norms), each with 2 KV heads; Qwen3.5
// (2 KV heads, 2 GDN key heads with 2 value heads each, HF's grouped head order; the GGUF form's
// tiled order is compared with transformers in tests/e2e/test_golden.py).
// qwen35_b (4 query heads) and qwen35_c (3) have one KV head, which both ranks then hold, each with
// a share of its query heads; qwen35_c's GDN has 3 value heads per key head, qwen35_b's 3 key heads
// (2 + 1 over the ranks).
INSTANTIATE_TEST_SUITE_P(Golden, TensorParallelModel,
                         ::testing::Values("llama_tiny", "qwen2_tiny", "qwen3_tiny", "qwen35_a", "qwen35_b", "qwen35_c"));

TEST(TensorParallel, RefusesWhatItCannotSplit) {
  auto llama = formats::open_weight_source((test::golden_dir() / "llama_tiny").string());
  LoadOptions opts;
  opts.tp = 3;  // 2 KV heads
  try {
    load_model(*llama, opts);
    FAIL() << "3 ranks over 2 KV heads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV heads"), std::string::npos) << e.what();
  }
  auto qwen35_c = formats::open_weight_source((test::golden_dir() / "qwen35_c").string());
  opts.tp = 4;  // 1 KV head with 3 query heads, 2 GDN key heads
  EXPECT_THROW(load_model(*qwen35_c, opts), Error);
  ops::Context gpu;  // this binary has no CUDA backend, so no mailbox communicator for GPU ranks
  gpu.device = Device::CUDA;
  try {
    make_tp_group(gpu, 2, "m");
    FAIL() << "GPU ranks were made without a CUDA build";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("built without CUDA"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace vi
