// Llama-family forward pass. Pre-norm blocks:
//   x += o_proj(attn(rope(q_proj(n)), rope(k_proj(n)), v_proj(n)))   n = rms_norm(x)
//   x += down(silu(gate(n)) * up(n))                                 n = rms_norm(x)
// logits = lm_head(rms_norm(x)). qwen2 adds q/k/v biases; qwen3 RMS-normalises each
// q/k head before RoPE. Each residual add runs together with the norm after it
// (ops::add_rms_norm), and gate|up are one stacked weight where they share a dtype.
// Split over a tensor-parallel group (LoadOptions::tp), each rank holds whole KV heads with
// their query heads, a slice of the MLP rows and of the vocabulary; o_proj and down are cut by
// input columns and their outputs summed over the ranks (two all-reduces a layer), the
// logits gathered by vocabulary. This file only composes ops.
#include "models/llama.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "models/attention_block.h"
#include "models/dense_blocks.h"
#include "models/batch.h"
#include "models/hparams.h"
#include "models/loader.h"
#include "models/tensor_parallel.h"
#include "ops/attention.h"
#include "ops/bias.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace vi {

namespace {

struct LlamaHParams {
  int64_t n_vocab, d_model, n_layer, d_ff, n_head, n_kv_head, head_dim, rot_dim, n_ctx_train;
  float rope_theta, norm_eps;
  bool qkv_bias, qk_norm;
};

struct LlamaLayer {
  Tensor attn_norm;            // [d] f32
  Tensor wq, wk, wv, wo;       // [Hq*hd, d], [Hkv*hd, d], [Hkv*hd, d], [d, Hq*hd]
  Tensor bq, bk, bv;           // qwen2: [Hq*hd], [Hkv*hd], [Hkv*hd] f32
  Tensor q_norm, k_norm;       // qwen3: [hd] f32
  Tensor ffn_norm;             // [d] f32
  SwigluWeights mlp;
};

// One rank's part of the model (the whole model when it is not split).
struct LlamaShard {
  ops::Context ctx;                  // the rank's device and worker pool
  int64_t Hq = 0, Hkv = 0, d_ff = 0;  // its query and KV heads, its MLP rows
  std::vector<LlamaLayer> layers;
  Tensor lm_head;  // [its vocabulary rows, d] (all of them unsplit; the embedding when tied)
};

// --- paged KV cache ---
// K/V live in a (possibly shared) pool reached through the block table.
class LlamaState final : public SequenceState {
 public:
  LlamaState(std::shared_ptr<KvPool> pool, int64_t n_ctx) {
    capacity_ = n_ctx;
    pool_ = std::move(pool);
  }
  void truncate(int64_t n) override {
    VI_CHECK(n >= 0 && n <= n_past_, "cannot truncate a sequence of {} tokens to {}", n_past_, n);
    n_past_ = n;
  }
};
// --- end paged KV cache ---

class LlamaModel final : public Model {
 public:
  LlamaModel(const WeightSource& src, const LoadOptions& opts);
  const ModelInfo& info() const override { return info_; }
  // --- paged KV cache ---
  // Split: each rank's KV heads in pools of their own, rank after rank (rank r's layer l is the
  // pool's attention layer r * n_layer + l).
  std::shared_ptr<KvPool> new_kv_pool(int64_t n_blocks, int64_t block_size) const override {
    std::vector<std::shared_ptr<KvPool>> pools;
    for (const LlamaShard& s : shards_) {
      ops::Context ctx = s.ctx;
      pools.push_back(new_attention_kv_pool(ctx, hp_.n_layer, n_blocks, block_size, s.Hkv, hp_.head_dim, kv_types_));
    }
    if (tp_) tp_->synchronize();
    return pools.size() == 1 ? pools.front() : merge_kv_pools(pools);
  }
  std::unique_ptr<SequenceState> new_paged_sequence(int64_t n_ctx, std::shared_ptr<KvPool> pool) const override {
    VI_CHECK(pool && pool->tensors.size() == static_cast<size_t>(2 * hp_.n_layer) * shards_.size(),
             "KV pool was not made by this model");
    return std::make_unique<LlamaState>(std::move(pool), n_ctx);
  }
  // --- end paged KV cache ---

 protected:
  bool recordable() const override { return tp_ == nullptr; }
  void forward_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items, Tensor& logits,
                    LogitsOn where, Tensor* hidden) const override;

 private:
  // Rank r's part of a pass: its shard's layers (all-reducing after o_proj and down when split)
  // and its slice of the logits, gathered on rank 0. logits and hidden: rank 0's (null elsewhere).
  void forward_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                    Tensor* logits, LogitsOn where, Tensor* hidden) const;
  // Rank r's cut of a whole loaded layer.
  LlamaLayer shard_layer(const LlamaLayer& L, const parallel::HeadShard& heads, parallel::Range f) const;

  LlamaHParams hp_;
  ModelInfo info_;
  ops::Context ctx_;  // device of the weights; sequences are allocated there too
  KvCacheTypes kv_types_;  // element types of the KV pools it makes
  Tensor tok_embd_;  // [vocab, d] (every rank reads it whole)
  Tensor out_norm_;  // [d] f32
  std::vector<LlamaShard> shards_;  // one per rank
  std::unique_ptr<TpGroup> tp_;     // the ranks' group; null when not split
};

LlamaHParams read_hparams(const WeightSource& src, const std::string& arch) {
  HParamReader r(src, arch);
  LlamaHParams hp{};
  hp.d_model = r.get_int("embedding_length", "hidden_size");
  hp.n_layer = r.get_int("block_count", "num_hidden_layers");
  hp.d_ff = r.get_int("feed_forward_length", "intermediate_size");
  hp.n_head = r.get_int("attention.head_count", "num_attention_heads");
  hp.n_kv_head = r.opt_int("attention.head_count_kv", "num_key_value_heads").value_or(hp.n_head);
  hp.head_dim = r.opt_int("attention.key_length", "head_dim").value_or(hp.d_model / hp.n_head);
  hp.rot_dim = r.opt_int("rope.dimension_count", "").value_or(hp.head_dim);
  hp.rope_theta = static_cast<float>(
      r.opt_float("rope.freq_base", "rope_theta").value_or(r.opt_float("", "rope_parameters.rope_theta").value_or(10000.0)));
  hp.norm_eps = static_cast<float>(r.opt_float("attention.layer_norm_rms_epsilon", "rms_norm_eps").value_or(1e-6));
  hp.n_ctx_train = r.opt_int("context_length", "max_position_embeddings").value_or(4096);
  hp.qkv_bias = arch == "qwen2" || r.opt_bool("", "attention_bias").value_or(false);
  hp.qk_norm = arch == "qwen3";
  VI_CHECK(hp.n_head > 0 && hp.n_kv_head > 0 && hp.n_head % hp.n_kv_head == 0,
           "{}: {} attention heads cannot be grouped over {} KV heads", src.path(), hp.n_head, hp.n_kv_head);
  VI_CHECK(hp.rot_dim > 0 && hp.rot_dim <= hp.head_dim && hp.rot_dim % 2 == 0,
           "{}: rotary dimension {} does not fit head dimension {}", src.path(), hp.rot_dim, hp.head_dim);
  return hp;
}

// llama.cpp's converter reorders the rows of each llama q/k head so that RoPE can pair
// adjacent dims; within a head, GGUF row 2j+h holds HF row h*hd/2 + j. Undo it so that
// the single NeoX-pairing rope op serves GGUF and HF weights alike.
std::vector<int64_t> unpermute_heads(int64_t n_head, int64_t head_dim) {
  std::vector<int64_t> perm(static_cast<size_t>(n_head * head_dim));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t half = 0; half < 2; ++half)
      for (int64_t j = 0; j < head_dim / 2; ++j)
        perm[h * head_dim + half * head_dim / 2 + j] = h * head_dim + 2 * j + half;
  return perm;
}

LlamaModel::LlamaModel(const WeightSource& src, const LoadOptions& opts)
    : ctx_(opts.ctx), kv_types_(opts.kv_types) {
  info_.arch = model_arch(src);
  hp_ = read_hparams(src, info_.arch);
  WeightLoader w(src, opts.progress);
  w.set_hf_prefix("model.");
  const int64_t d = hp_.d_model, hd = hp_.head_dim, q_w = hp_.n_head * hd, kv_w = hp_.n_kv_head * hd;

  // The vocabulary size is whatever the embedding holds (configs sometimes disagree).
  std::string embd_name = w.gguf() ? "token_embd.weight" : "model.embed_tokens.weight";
  VI_CHECK(src.has(embd_name), "{}: tensor '{}' is missing", src.path(), embd_name);
  hp_.n_vocab = src.get(embd_name).dim(0);
  tok_embd_ = w.load("token_embd.weight", "embed_tokens.weight", {hp_.n_vocab, d});
  out_norm_ = w.load_f32("output_norm.weight", "norm.weight", {d});
  // The HF head sits outside the "model." prefix.
  Tensor lm_head;  // [vocab, d]
  if (auto head = w.load_optional_exact(w.gguf() ? "output.weight" : "lm_head.weight", {hp_.n_vocab, d})) {
    lm_head = *head;
  } else {
    lm_head = tok_embd_;  // tied embeddings
  }
  const bool unpermute = w.gguf() && info_.arch == "llama";
  std::vector<LlamaLayer> layers;  // whole, as loaded
  for (int64_t i = 0; i < hp_.n_layer; ++i) {
    auto g = [&](const char* n) { return fmt::format("blk.{}.{}", i, n); };
    auto h = [&](const char* n) { return fmt::format("layers.{}.{}", i, n); };
    LlamaLayer L;
    L.attn_norm = w.load_f32(g("attn_norm.weight"), h("input_layernorm.weight"), {d});
    L.wq = w.load(g("attn_q.weight"), h("self_attn.q_proj.weight"), {q_w, d});
    L.wk = w.load(g("attn_k.weight"), h("self_attn.k_proj.weight"), {kv_w, d});
    L.wv = w.load(g("attn_v.weight"), h("self_attn.v_proj.weight"), {kv_w, d});
    L.wo = w.load(g("attn_output.weight"), h("self_attn.o_proj.weight"), {d, q_w});
    if (unpermute) {
      L.wq = permute_rows(L.wq, unpermute_heads(hp_.n_head, hd));
      L.wk = permute_rows(L.wk, unpermute_heads(hp_.n_kv_head, hd));
    }
    if (hp_.qkv_bias) {
      L.bq = w.load_f32(g("attn_q.bias"), h("self_attn.q_proj.bias"), {q_w});
      L.bk = w.load_f32(g("attn_k.bias"), h("self_attn.k_proj.bias"), {kv_w});
      L.bv = w.load_f32(g("attn_v.bias"), h("self_attn.v_proj.bias"), {kv_w});
    }
    if (hp_.qk_norm) {
      L.q_norm = w.load_f32(g("attn_q_norm.weight"), h("self_attn.q_norm.weight"), {hd});
      L.k_norm = w.load_f32(g("attn_k_norm.weight"), h("self_attn.k_norm.weight"), {hd});
    }
    L.ffn_norm = w.load_f32(g("ffn_norm.weight"), h("post_attention_layernorm.weight"), {d});
    L.mlp = load_swiglu(w, g(""), h(""), d, hp_.d_ff);
    layers.push_back(std::move(L));
  }
  w.finish();

  const int world = opts.tp;
  VI_CHECK(world >= 1, "tensor parallel over {} ranks: give 1 or more", world);
  if (world == 1) {
    LlamaShard s{ctx_, hp_.n_head, hp_.n_kv_head, hp_.d_ff, std::move(layers), lm_head};
    shards_.push_back(std::move(s));
  } else {
    tp_ = make_tp_group(ctx_, world, src.path());
    for (int r = 0; r < world; ++r) {
      const parallel::HeadShard heads = parallel::split_heads(hp_.n_head, hp_.n_kv_head, world, r);
      const parallel::Range f = split_mlp(layers.front().mlp, hp_.d_ff, world, r);
      LlamaShard s{tp_->ctx[static_cast<size_t>(r)], heads.q_heads.size(), heads.kv_heads.size(), f.size(), {},
                   shard_rows(lm_head, parallel::split_range(hp_.n_vocab, world, r, "vocabulary rows"))};
      for (const LlamaLayer& L : layers) s.layers.push_back(shard_layer(L, heads, f));
      shards_.push_back(std::move(s));
    }
  }
  layers.clear();  // the shards hold what they need

  // Weights go to the model's device (nothing happens on the CPU).
  const bool tied = lm_head.data() == tok_embd_.data() && world == 1;
  to_device(ctx_, {&tok_embd_, &out_norm_});
  for (LlamaShard& s : shards_) {
    if (tied) {
      s.lm_head = tok_embd_;
    } else {
      to_device(s.ctx, {&s.lm_head});
    }
    for (LlamaLayer& L : s.layers) {
      to_device(s.ctx, {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm,
                        &L.ffn_norm});
      swiglu_to_device(s.ctx, L.mlp);
    }
  }
  if (tp_) tp_->synchronize();

  info_.name = model_display_name(src);
  info_.n_vocab = hp_.n_vocab;
  info_.n_ctx_train = hp_.n_ctx_train;
  info_.n_layer = hp_.n_layer;
  info_.d_model = d;
  info_.n_params = w.n_params();
  info_.weight_bytes = w.bytes();
}

LlamaLayer LlamaModel::shard_layer(const LlamaLayer& L, const parallel::HeadShard& heads, parallel::Range f) const {
  const int64_t hd = hp_.head_dim;
  const parallel::Range q{heads.q_heads.begin * hd, heads.q_heads.end * hd};
  const parallel::Range kv{heads.kv_heads.begin * hd, heads.kv_heads.end * hd};
  LlamaLayer s;
  s.attn_norm = L.attn_norm, s.ffn_norm = L.ffn_norm, s.q_norm = L.q_norm, s.k_norm = L.k_norm;  // per head: whole
  s.wq = shard_rows(L.wq, q), s.wk = shard_rows(L.wk, kv), s.wv = shard_rows(L.wv, kv);
  s.wo = shard_cols(L.wo, q);
  if (hp_.qkv_bias) {
    s.bq = shard_vector(L.bq, heads.q_heads, hd);
    s.bk = shard_vector(L.bk, heads.kv_heads, hd);
    s.bv = shard_vector(L.bv, heads.kv_heads, hd);
  }
  s.mlp = shard_swiglu(L.mlp, f);
  return s;
}

void LlamaModel::forward_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                               Tensor& logits, LogitsOn where, Tensor* hidden) const {
  for (const BatchItem& it : items)
    VI_CHECK(dynamic_cast<LlamaState*>(it.seq) != nullptr, "sequence state was not made by this model");
  on_ranks(tp_.get(), ctx, [&](ops::Context& rctx, int r) {
    forward_rank(rctx, r, plan, items, r == 0 ? &logits : nullptr, where, r == 0 ? hidden : nullptr);
  });
}

void LlamaModel::forward_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                              Tensor* logits, LogitsOn where, Tensor* hidden) const {
  const LlamaShard& S = shards_[static_cast<size_t>(r)];
  parallel::Communicator* comm = tp_ ? tp_->comm.get() : nullptr;
  const int64_t N = plan.n_rows;
  const int64_t d = hp_.d_model, hd = hp_.head_dim, Hq = S.Hq, Hkv = S.Hkv, kv_w = Hkv * hd;
  const int64_t n_vocab = S.lm_head.dim(0);  // this rank's vocabulary rows

  Tensor x = ops::empty(ctx, ctx.act, {N, d});          // [N, d] residual stream (every rank holds it whole)
  Tensor n = ops::empty(ctx, ctx.act, {N, d});          // [N, d] the stream through the next norm
  Tensor q = ops::empty(ctx, ctx.act, {N, Hq * hd});    // this rank's heads from here to o_proj
  Tensor k = ops::empty(ctx, ctx.act, {N, kv_w});
  Tensor v = ops::empty(ctx, ctx.act, {N, kv_w});
  Tensor a = ops::empty(ctx, ctx.act, {N, Hq * hd});    // attention output
  Tensor o = ops::empty(ctx, ctx.act, {N, d});          // a projection's output (a rank's partial sum until all-reduced)
  Tensor gu = ops::empty(ctx, ctx.act, {N, 2 * S.d_ff});  // MLP gate|up products of this rank's rows
  Tensor ff_h = swiglu_scratch(ctx, N, S.d_ff);           // MLP SwiGLU output (decode, verify)
  const Tensor out_logits = logits_scratch(ctx, plan, n_vocab);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // The norm the residual stream goes through after layer l: the next layer's attention
  // norm, after the last layer the output norm.
  auto norm_after = [&](int64_t l) -> const Tensor& {
    return l + 1 < hp_.n_layer ? S.layers[l + 1].attn_norm : out_norm_;
  };

  ops::embedding(ctx, tok_embd_, plan.dev.ids, x);
  ops::rms_norm(ctx, x, norm_after(-1), hp_.norm_eps, 0.0f, n);
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const LlamaLayer& L = S.layers[l];
    const int64_t pool_layer = r * hp_.n_layer + l;  // this rank's K/V (new_kv_pool)
    // n = attn_norm(x) here (made by the previous layer's last add_rms_norm).
    ops::matmul(ctx, n, L.wq, q);
    ops::matmul(ctx, n, L.wk, k);
    ops::matmul(ctx, n, L.wv, v);
    if (hp_.qkv_bias) {
      ops::add_bias(ctx, q, L.bq, q);
      ops::add_bias(ctx, k, L.bk, k);
      ops::add_bias(ctx, v, L.bv, v);
    }
    Tensor qh = q.reshape({N, Hq, hd});
    if (hp_.qk_norm) {  // qwen3: per-head q/k norm, RoPE and the K/V append in one op
      const QkNormRope nr{L.q_norm, L.k_norm, hp_.norm_eps, 0.0f, static_cast<int>(hp_.rot_dim), hp_.rope_theta};
      norm_rope_paged_attention_block(ctx, plan, items, pool_layer, nr, qh, k, v, scale, a);
    } else {
      Tensor kh = k.reshape({N, Hkv, hd});
      ops::rope(ctx, qh, plan.dev.pos, static_cast<int>(hp_.rot_dim), hp_.rope_theta);
      ops::rope(ctx, kh, plan.dev.pos, static_cast<int>(hp_.rot_dim), hp_.rope_theta);
      paged_attention_block(ctx, plan, items, pool_layer, qh, k, v, scale, a);
    }
    ops::matmul(ctx, a, L.wo, o);
    if (comm) comm->all_reduce_sum(r, o, ctx.stream);
    ops::add_rms_norm(ctx, x, o, L.ffn_norm, hp_.norm_eps, 0.0f, n);  // x += attn; n = ffn_norm(x)
    swiglu_mlp(ctx, n, L.mlp, gu, ff_h, o);
    if (comm) comm->all_reduce_sum(r, o, ctx.stream);
    ops::add_rms_norm(ctx, x, o, norm_after(l), hp_.norm_eps, 0.0f, n);  // x += mlp; n = next norm(x)
  }
  rank_output_logits(ctx, comm, r, plan, n, S.lm_head, where, out_logits, hp_.n_vocab, logits);
  if (hidden != nullptr) *hidden = n;  // the output norm's output, every row
}

}  // namespace

std::unique_ptr<Model> load_llama(const WeightSource& src, const LoadOptions& opts) {
  return std::make_unique<LlamaModel>(src, opts);
}

}  // namespace vi
