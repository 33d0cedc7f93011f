// Qwen3.5 forward pass (HF Qwen3_5ForCausalLM semantics), composed of ops only.
//   full-attention layer: q|gate = q_proj(n) (per-head interleaved), q/k per-head (1+w)
//     RMSNorm, partial NeoX RoPE, causal GQA attention, out = o_proj(attn * sigmoid(gate))
//   Gated DeltaNet layer: q,k,v = silu(causal_conv(in_proj_qkv(n))), L2-normed q/k (one
//     op for a decode token), g/beta gates, delta rule with fp32 state, gated RMSNorm
//     with z, out_proj
// Loading folds format differences away: the q_proj query/gate interleave and the
// in_proj_qkv q|k|v blocks are split into separate weights (row gathers work on
// quantized rows), then the projections that read the same input are stacked again into
// one weight each (attention q|gate|k|v, GDN q|k|v|z|b|a, MLP gate|up) so that one-row
// steps run one GEMV where they would run several; HF's 1+w norms get w_offset = 1 (GGUF already added the 1), HF's
// A_log becomes -exp(A_log) (GGUF stores that), and the GVA head order is passed to
// the delta-rule op (HF groups value heads, llama.cpp's converter tiles them).
// Split over a tensor-parallel group (LoadOptions::tp), each rank holds whole KV heads with their
// query heads, whole GDN key heads with their value heads (in the file's head order, so a rank's
// heads keep it), a slice of the MLP rows and of the vocabulary; o_proj, out_proj and down are cut
// by input columns and their outputs summed over the ranks (two all-reduces a layer).
#include "models/qwen3_5.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "models/attention_block.h"
#include "models/dense_blocks.h"
#include "models/batch.h"
#include "models/hparams.h"
#include "models/loader.h"
#include "models/tensor_parallel.h"
#include "ops/attention.h"
#include "ops/copy.h"
#include "ops/deferred_norm.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"
#include "ops/gdn_decode_step.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/norm.h"

namespace vi {

namespace {

struct Qwen35HParams {
  int64_t n_vocab, d_model, n_layer, d_ff, n_ctx_train;
  int64_t n_head, n_kv_head, head_dim, rot_dim;      // full attention
  int64_t gdn_k_heads, gdn_v_heads, gdn_dk, gdn_dv;  // Gated DeltaNet
  int64_t conv_kernel;
  int64_t n_mtp;
  float rope_theta, norm_eps;
  std::vector<bool> is_full;  // per layer: full attention (true) or GDN
};

struct AttnWeights {  // gated full attention
  Tensor wq, wgate;   // [Hq*hd, d] each (split from q_proj's per-head interleave)
  Tensor wk, wv;      // [Hkv*hd, d]
  // The four above stacked, [2*Hq*hd + 2*Hkv*hd, d], when they share a dtype (then they
  // are row views of it): a one-row forward pass runs them as one GEMV.
  Tensor w_in;
  Tensor wo;          // [d, Hq*hd]
  Tensor q_norm, k_norm;  // [hd] f32
};

struct GdnWeights {
  Tensor wq, wk, wv;        // [key_dim, d], [key_dim, d], [value_dim, d] (row blocks of in_proj_qkv)
  Tensor wz;                // [value_dim, d]
  Tensor wb, wa;            // [Hv, d]
  // The six above stacked, [2*key_dim + 2*value_dim + 2*Hv, d], when they share a dtype
  // (then they are row views of it): a one-row forward pass runs them as one GEMV.
  Tensor w_in;
  Tensor conv_q, conv_k, conv_v;  // [key_dim, K], [key_dim, K], [value_dim, K] f32
  Tensor neg_exp_A, dt_bias;      // [Hv] f32
  Tensor norm;              // [dv] f32 (used directly, no +1)
  Tensor wout;              // [d, value_dim]
};

struct Layer {
  Tensor in_norm, post_norm;  // [d] f32
  bool full = false;
  AttnWeights attn;
  GdnWeights gdn;
  SwigluWeights mlp;
};

// One rank's part of the model (the whole model when it is not split).
struct Qwen35Shard {
  ops::Context ctx;                  // the rank's device and worker pool
  int64_t Hq = 0, Hkv = 0, d_ff = 0;  // its attention query and KV heads, its MLP rows
  int64_t Hk = 0, Hv = 0;            // its GDN key and value heads
  std::vector<Layer> layers;
  std::vector<Layer> mtp_layers;  // the MTP head's blocks (empty: no draft head)
  Tensor lm_head;  // [its vocabulary rows, d] (the embedding when tied and not split)
  bool gdn_in_fused = false;   // every GDN layer has its input projections stacked (w_in)
  bool attn_in_fused = false;  // every full-attention layer has q|gate|k|v stacked (w_in)
};

// The widths of one rank's GDN states.
struct GdnStateDims {
  int64_t key_dim, value_dim, Hv;
};

// --- paged KV cache ---
// Full-attention K/V live in the (possibly shared) pool, GDN states in the sequence.
class Qwen35State final : public SequenceState {
 public:
  // ranks: each rank's state widths (one entry when the model is not split).
  Qwen35State(ops::Context& ctx, const Qwen35HParams& hp, const std::vector<GdnStateDims>& ranks,
              std::shared_ptr<KvPool> pool, int64_t n_ctx)
      : ctx_(ctx) {
    capacity_ = n_ctx;
    pool_ = std::move(pool);
    n_gdn_ = std::count(hp.is_full.begin(), hp.is_full.end(), false);
    const int64_t km1 = hp.conv_kernel - 1;
    for (const GdnStateDims& dims : ranks) {
      RankState& rs = rank_.emplace_back();
      for (int64_t l = 0; l < hp.n_layer; ++l) {
        if (hp.is_full[l]) {
          rs.conv_q.emplace_back(), rs.conv_k.emplace_back(), rs.conv_v.emplace_back(), rs.ssm.emplace_back();
        } else {
          rs.conv_q.push_back(ops::empty(ctx, DType::F32, {km1, dims.key_dim}));  // previous K-1 inputs
          rs.conv_k.push_back(ops::empty(ctx, DType::F32, {km1, dims.key_dim}));
          rs.conv_v.push_back(ops::empty(ctx, DType::F32, {km1, dims.value_dim}));
          rs.ssm.push_back(ops::empty(ctx, DType::F32, {dims.Hv, hp.gdn_dk, hp.gdn_dv}));  // fp32 state
        }
      }
    }
    reset();
  }
  void truncate(int64_t n) override {
    VI_CHECK(can_truncate_to(n),
             "a Qwen3.5 sequence keeps only its recurrent state after the last token: it can be cut back to 0 "
             "or kept at {}, not cut to {}", n_past_, n);
    if (n == 0) reset();
  }
  bool can_truncate_to(int64_t n) const override { return n == 0 || n == n_past_; }
  // Rank after rank, layer after layer.
  std::vector<Tensor> recurrent_state() const override {
    std::vector<Tensor> out;
    for (const RankState& rs : rank_)
      for (size_t l = 0; l < rs.ssm.size(); ++l)
        if (rs.ssm[l].data()) out.insert(out.end(), {rs.conv_q[l], rs.conv_k[l], rs.conv_v[l], rs.ssm[l]});
    return out;
  }

  // One tensor per part of each GDN layer's state, [n, ...the part's shape]: checkpoint j is row
  // j (made again, larger, when a pass asks for more; a pass's checkpoints are used before the
  // next pass reserves).
  void reserve_checkpoints(int64_t n) override {
    if (n <= ckpt_cap_) return;
    ckpt_.clear();
    for (const Tensor& t : recurrent_state()) {
      std::vector<int64_t> shape = t.shape();
      shape.insert(shape.begin(), n);
      ckpt_.push_back(ops::empty(ctx_, t.dtype(), shape));
    }
    ckpt_cap_ = n;
  }
  std::vector<Tensor> checkpoint_state() const override { return ckpt_; }
  // Rank r's checkpoints of GDN layer g's (the g-th GDN layer's) part `part` (conv q, k, v
  // windows, ssm): [capacity, ...], what ops::gdn_conv_step's `after` and gdn_decode_step's
  // checkpoints take.
  Tensor ckpt(int r, size_t g, int part) const {
    return ckpt_[4 * (static_cast<size_t>(r * n_gdn_) + g) + static_cast<size_t>(part)];
  }

  struct RankState {
    std::vector<Tensor> conv_q, conv_k, conv_v, ssm;  // per layer; empty tensors for full attention
  };
  RankState& rank(int r) { return rank_[static_cast<size_t>(r)]; }

 protected:
  void restore_checkpoint(int64_t j) override {
    const std::vector<Tensor> live = recurrent_state();
    std::vector<Tensor> from;
    for (size_t i = 0; i < live.size(); ++i) from.push_back(ckpt_[i].slice_rows(j, j + 1).reshape(live[i].shape()));
    ops::copy_batch(ctx_, from, live);  // 4 tensors a GDN layer: one launch, not 4 x 48
  }

 private:
  std::vector<Tensor> ckpt_;  // recurrent_state()'s order: [ckpt_cap_, ...] each
  int64_t ckpt_cap_ = 0;
  int64_t n_gdn_ = 0;  // GDN layers
  std::vector<RankState> rank_;
  ops::Context ctx_;  // the device the states live on
  void reset() {
    n_past_ = 0;
    for (RankState& rs : rank_)
      for (auto* group : {&rs.conv_q, &rs.conv_k, &rs.conv_v, &rs.ssm})
        for (Tensor& t : *group)
          zero_fill(ctx_, t);  // host or device memory
  }
};
// --- end paged KV cache ---

// The MTP head's view of a main sequence: the same pool and blocks (the head's layers are the
// pool's last ones), its own length. No recurrent state, so it can be cut back to any length
// (how a round forgets its recursive drafts) and resumed at the main sequence's length.
class Qwen35DraftState final : public SequenceState {
 public:
  explicit Qwen35DraftState(const SequenceState& main) : main_(main) {
    capacity_ = main.capacity();
    pool_ = main.kv_pool_owner();
  }
  void truncate(int64_t n) override {
    VI_CHECK(can_truncate_to(n), "cannot cut a draft-head sequence of {} slots back to {}", n_past_, n);
    n_past_ = n;
  }
  // Before a pass: the main sequence's blocks as they are now (the cache manager grows them).
  void follow_main() { block_table() = main_.block_table(); }

 private:
  const SequenceState& main_;
};

class Qwen35Model final : public Model {
 public:
  Qwen35Model(const WeightSource& src, const LoadOptions& opts);
  const ModelInfo& info() const override { return info_; }
  // --- paged KV cache ---
  // The full-attention layers' K/V, then the MTP head's (zeroed: a slot the head has not
  // written reads as nothing rather than as whatever the memory held).
  // Split: each rank's KV heads in pools of their own, rank after rank (rank r's attention layer
  // i is the pool's layer r * (full-attention layers + MTP layers) + i).
  std::shared_ptr<KvPool> new_kv_pool(int64_t n_blocks, int64_t block_size) const override {
    const int64_t n_full = std::count(hp_.is_full.begin(), hp_.is_full.end(), true);
    const int64_t n_mtp = n_mtp_layers();
    std::vector<std::shared_ptr<KvPool>> pools;
    for (const Qwen35Shard& S : shards_) {
      ops::Context ctx = S.ctx;
      auto pool = new_attention_kv_pool(ctx, n_full + n_mtp, n_blocks, block_size, S.Hkv, hp_.head_dim, kv_types_);
      for (size_t t = static_cast<size_t>(2 * n_full); t < pool->tensors.size(); ++t) {
        ops::zero(ctx, pool->tensors[t]);
        if (!pool->scales.empty() && pool->scales[t].data() != nullptr) ops::zero(ctx, pool->scales[t]);
      }
      pools.push_back(std::move(pool));
    }
    if (tp_) tp_->synchronize();
    return pools.size() == 1 ? pools.front() : merge_kv_pools(pools);
  }
  std::unique_ptr<SequenceState> new_paged_sequence(int64_t n_ctx, std::shared_ptr<KvPool> pool) const override {
    const auto n_attn = std::count(hp_.is_full.begin(), hp_.is_full.end(), true) +
                        n_mtp_layers();
    VI_CHECK(pool && pool->tensors.size() == static_cast<size_t>(2 * n_attn) * shards_.size(),
             "KV pool was not made by this model");
    ops::Context ctx = ctx_;
    std::vector<GdnStateDims> dims;
    for (const Qwen35Shard& S : shards_) dims.push_back({S.Hk * hp_.gdn_dk, S.Hv * hp_.gdn_dv, S.Hv});
    return std::make_unique<Qwen35State>(ctx, hp_, dims, std::move(pool), n_ctx);
  }
  // --- end paged KV cache ---
  bool has_draft_head() const override { return n_mtp_layers() > 0; }
  std::unique_ptr<SequenceState> new_draft_sequence(const SequenceState& main) const override;

 protected:
  bool recordable() const override { return tp_ == nullptr; }
  void draft_begin(const ops::Context& ctx, SequenceState& dseq, int64_t T, const Tensor& hidden) const override;
  void draft_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items, const Tensor& hidden,
                  Tensor* logits, Tensor& head_out, LogitsOn where) const override;
  void forward_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items, Tensor& logits,
                    LogitsOn where, Tensor* hidden) const override;

 private:
  // Rank r's part of a pass: its shard's layers (all-reducing after each output projection and
  // down when split) and its slice of the logits, gathered on rank 0. logits and hidden: rank 0's
  // (null elsewhere).
  void forward_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                    Tensor* logits, LogitsOn where, Tensor* hidden) const;
  // Rank r's cut of a whole loaded layer, and the shard of rank r of `world`.
  Layer shard_layer(const Layer& L, int world, int r) const;
  // Rank r's part of a draft pass (draft_plan's): the fc on every rank, the head's blocks split
  // as the model's layers are. want_logits: the same on every rank (the pass has an LM head);
  // logits, head_out: rank 0's (null elsewhere).
  void draft_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                  const Tensor& hidden, bool want_logits, Tensor* logits, Tensor* head_out, LogitsOn where) const;
  int64_t n_mtp_layers() const { return static_cast<int64_t>(shards_.front().mtp_layers.size()); }
  // The first of rank r's attention layers in a KV pool: after the lower ranks' (new_kv_pool).
  int64_t pool_base(int r) const {
    return r * (std::count(hp_.is_full.begin(), hp_.is_full.end(), true) + n_mtp_layers());
  }
  void load_attention(WeightLoader& w, const std::string& g, const std::string& h, AttnWeights& a);
  void load_gdn(WeightLoader& w, const std::string& g, const std::string& h, GdnWeights& a);
  void load_mtp(WeightLoader& w);

  Qwen35HParams hp_;
  ModelInfo info_;
  ops::Context ctx_;  // device of the weights; sequences are allocated there too
  KvCacheTypes kv_types_;  // element types of the KV pools it makes
  float norm_offset_ = 0;        // 1 for HF (1+w stored as w), 0 for GGUF (1 folded in)
  ops::GvaLayout gva_ = ops::GvaLayout::kGrouped;
  Tensor tok_embd_, out_norm_;  // every rank reads them whole
  std::vector<Qwen35Shard> shards_;  // one per rank
  std::unique_ptr<TpGroup> tp_;      // the ranks' group; null when not split
  // MTP head (full-attention blocks after an fc over [embedding | hidden]); the draft head of
  // speculative decoding. The fc's two column blocks are kept apart (mtp_fc_e_ on the normed
  // embedding, mtp_fc_h_ on the normed hidden state), so no concatenated input is built.
  Tensor mtp_enorm_, mtp_hnorm_, mtp_fc_e_, mtp_fc_h_, mtp_norm_;
  std::vector<Layer> mtp_layers_;  // as loaded, whole (moved or cut into the shards)
  std::vector<int64_t> gdn_index_;  // layer -> its index among the GDN layers (-1: full attention)
};

Qwen35HParams read_hparams(const WeightSource& src) {
  HParamReader r(src, "qwen3_5");
  const bool gguf = src.format() == WeightFormat::kGguf;
  Qwen35HParams hp{};
  hp.d_model = r.get_int("embedding_length", "hidden_size");
  hp.n_mtp = r.opt_int("nextn_predict_layers", "mtp_num_hidden_layers").value_or(0);
  int64_t blocks = r.get_int("block_count", "num_hidden_layers");
  hp.n_layer = gguf ? blocks - hp.n_mtp : blocks;  // GGUF counts the MTP blocks in block_count
  hp.d_ff = r.get_int("feed_forward_length", "intermediate_size");
  hp.n_head = r.get_int("attention.head_count", "num_attention_heads");
  hp.n_kv_head = r.get_int("attention.head_count_kv", "num_key_value_heads");
  hp.head_dim = r.opt_int("attention.key_length", "head_dim").value_or(hp.d_model / hp.n_head);
  if (gguf) {
    hp.rot_dim = r.get_int("rope.dimension_count", "");
  } else {
    double f = r.opt_float("", "rope_parameters.partial_rotary_factor")
                   .value_or(r.opt_float("", "partial_rotary_factor").value_or(1.0));
    hp.rot_dim = static_cast<int64_t>(static_cast<double>(hp.head_dim) * f);
  }
  hp.rope_theta = static_cast<float>(
      r.opt_float("rope.freq_base", "rope_parameters.rope_theta").value_or(r.opt_float("", "rope_theta").value_or(1e7)));
  hp.norm_eps = static_cast<float>(r.opt_float("attention.layer_norm_rms_epsilon", "rms_norm_eps").value_or(1e-6));
  hp.n_ctx_train = r.opt_int("context_length", "max_position_embeddings").value_or(262144);
  hp.gdn_k_heads = r.get_int("ssm.group_count", "linear_num_key_heads");
  hp.gdn_v_heads = r.get_int("ssm.time_step_rank", "linear_num_value_heads");
  hp.gdn_dk = r.get_int("ssm.state_size", "linear_key_head_dim");
  hp.gdn_dv = gguf ? r.get_int("ssm.inner_size", "") / hp.gdn_v_heads : r.get_int("", "linear_value_head_dim");
  hp.conv_kernel = r.get_int("ssm.conv_kernel", "linear_conv_kernel_dim");
  VI_CHECK(hp.gdn_v_heads % hp.gdn_k_heads == 0, "{}: {} GDN value heads cannot share {} key heads", src.path(),
           hp.gdn_v_heads, hp.gdn_k_heads);
  VI_CHECK(hp.n_head % hp.n_kv_head == 0, "{}: {} attention heads cannot be grouped over {} KV heads", src.path(),
           hp.n_head, hp.n_kv_head);
  VI_CHECK(hp.rot_dim > 0 && hp.rot_dim <= hp.head_dim && hp.rot_dim % 2 == 0,
           "{}: rotary dimension {} does not fit head dimension {}", src.path(), hp.rot_dim, hp.head_dim);

  // Layer pattern: HF layer_types, else every `interval`-th layer is full attention.
  hp.is_full.assign(static_cast<size_t>(hp.n_layer), false);
  std::string lt_key = r.key("", "layer_types");
  if (!lt_key.empty()) {
    auto types = src.metadata().get_string_array(lt_key);
    VI_CHECK(static_cast<int64_t>(types.size()) == hp.n_layer, "{}: layer_types has {} entries for {} layers",
             src.path(), types.size(), hp.n_layer);
    for (int64_t i = 0; i < hp.n_layer; ++i) {
      VI_CHECK(types[i] == "full_attention" || types[i] == "linear_attention", "{}: unknown layer type '{}'",
               src.path(), types[i]);
      hp.is_full[i] = types[i] == "full_attention";
    }
  } else {
    int64_t interval = r.opt_int("full_attention_interval", "full_attention_interval").value_or(4);
    for (int64_t i = 0; i < hp.n_layer; ++i) hp.is_full[i] = (i + 1) % interval == 0;
  }
  return hp;
}

// Outputs of a layer's input projections when they may run as one stacked matmul. One row:
// each output is a [1, w] view of `all` ([1, width]), which matmul() writes. More rows (up to
// kStackedMlpMaxRows: verify and batched decode steps): each output has its own [N, w] buffer,
// which matmul() fills through ops::matmul_split (one kernel where the GEMV writes the parts
// itself; else the matmul into `all` and a copy of its column blocks, instead of one matmul per
// part). Not stacked: own buffers, `all` unused.
class ProjOutputs {
 public:
  ProjOutputs(ops::Context& ctx, bool stacked, int64_t n_rows, int64_t width)
      : ctx_(ctx), stacked_(stacked), n_rows_(n_rows), width_(width) {
    if (stacked) all = ops::empty(ctx, ctx.act, {n_rows, width});
  }
  // The next output, w wide.
  Tensor next(int64_t w) {
    Tensor b;
    if (stacked_ && n_rows_ == 1) {
      b = all.reshape({width_, 1}).slice_rows(off_, off_ + w).reshape({1, w});
    } else {
      b = ops::empty(ctx_, ctx_.act, {n_rows_, w});
      parts_.push_back(b);
    }
    off_ += w;
    return b;
  }
  // The stacked projection x · wᵀ into the outputs (stacked only).
  void matmul(const Tensor& x, const Tensor& w) {
    if (n_rows_ == 1) {
      ops::matmul(ctx_, x, w, all);
      return;
    }
    std::vector<Tensor*> dsts;
    for (Tensor& t : parts_) dsts.push_back(&t);
    ops::matmul_split(ctx_, x, w, all, dsts);
  }
  // The same from a deferred norm (ops/deferred_norm.h).
  void matmul(const ops::DeferredNorm& x, const Tensor& w) {
    if (n_rows_ == 1) {
      ops::matmul_deferred(ctx_, x, w, all);
      return;
    }
    std::vector<Tensor*> dsts;
    for (Tensor& t : parts_) dsts.push_back(&t);
    ops::matmul_split_deferred(ctx_, x, w, all, dsts);
  }
  Tensor all;  // [N, width] when stacked

 private:
  ops::Context& ctx_;
  bool stacked_;
  int64_t n_rows_, width_, off_ = 0;
  std::vector<Tensor> parts_;  // outputs with buffers of their own (the same storage next() returned)
};

std::vector<int64_t> iota_rows(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

Qwen35Model::Qwen35Model(const WeightSource& src, const LoadOptions& opts)
    : ctx_(opts.ctx), kv_types_(opts.kv_types) {
  const int world = opts.tp;
  VI_CHECK(world >= 1, "tensor parallel over {} ranks: give 1 or more", world);
  hp_ = read_hparams(src);
  gdn_index_.assign(static_cast<size_t>(hp_.n_layer), -1);
  for (int64_t l = 0, gi = 0; l < hp_.n_layer; ++l)
    if (!hp_.is_full[l]) gdn_index_[l] = gi++;
  WeightLoader w(src, opts.progress);
  const bool gguf = w.gguf();
  norm_offset_ = gguf ? 0.0f : 1.0f;
  gva_ = gguf ? ops::GvaLayout::kTiled : ops::GvaLayout::kGrouped;
  // Official checkpoints nest the text model under model.language_model.
  w.set_hf_prefix(src.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.");
  const int64_t d = hp_.d_model;
  std::string embd = gguf ? "token_embd.weight" : w.hf_prefix() + "embed_tokens.weight";
  hp_.n_vocab = src.get(embd).dim(0);
  tok_embd_ = w.load("token_embd.weight", "embed_tokens.weight", {hp_.n_vocab, d});
  out_norm_ = w.load_f32("output_norm.weight", "norm.weight", {d});
  Tensor lm_head;  // [vocab, d]
  if (auto head = w.load_optional_exact(gguf ? "output.weight" : "lm_head.weight", {hp_.n_vocab, d}))
    lm_head = *head;
  else
    lm_head = tok_embd_;  // tied

  std::vector<Layer> layers;  // whole, as loaded
  for (int64_t i = 0; i < hp_.n_layer; ++i) {
    std::string g = fmt::format("blk.{}.", i), h = fmt::format("layers.{}.", i);
    Layer L;
    L.full = hp_.is_full[i];
    L.in_norm = w.load_f32(g + "attn_norm.weight", h + "input_layernorm.weight", {d});
    L.post_norm = w.load_f32(g + "post_attention_norm.weight", h + "post_attention_layernorm.weight", {d});
    if (L.full)
      load_attention(w, g, h + "self_attn.", L.attn);
    else
      load_gdn(w, g, h + "linear_attn.", L.gdn);
    L.mlp = load_swiglu(w, g, h, d, hp_.d_ff);
    layers.push_back(std::move(L));
  }
  if (opts.draft_head) load_mtp(w);
  w.finish();

  if (world == 1) {
    Qwen35Shard S;
    S.ctx = ctx_;
    S.Hq = hp_.n_head, S.Hkv = hp_.n_kv_head, S.d_ff = hp_.d_ff, S.Hk = hp_.gdn_k_heads, S.Hv = hp_.gdn_v_heads;
    S.layers = std::move(layers);
    S.mtp_layers = std::move(mtp_layers_);
    S.lm_head = lm_head;
    shards_.push_back(std::move(S));
  } else {
    tp_ = make_tp_group(ctx_, world, src.path());
    for (int r = 0; r < world; ++r) {
      Qwen35Shard S;
      S.ctx = tp_->ctx[static_cast<size_t>(r)];
      const parallel::HeadShard heads = parallel::split_heads(hp_.n_head, hp_.n_kv_head, world, r);
      S.Hq = heads.q_heads.size(), S.Hkv = heads.kv_heads.size();
      S.Hk = parallel::split_range(hp_.gdn_k_heads, world, r, "GDN key heads").size();
      S.Hv = S.Hk * (hp_.gdn_v_heads / hp_.gdn_k_heads);
      S.d_ff = split_mlp(layers.front().mlp, hp_.d_ff, world, r).size();
      for (const Layer& L : layers) S.layers.push_back(shard_layer(L, world, r));
      for (const Layer& L : mtp_layers_) S.mtp_layers.push_back(shard_layer(L, world, r));
      S.lm_head = shard_rows(lm_head, parallel::split_range(hp_.n_vocab, world, r, "vocabulary rows"));
      shards_.push_back(std::move(S));
    }
  }
  layers.clear();  // the shards hold what they need
  mtp_layers_.clear();
  for (Qwen35Shard& S : shards_) {
    S.gdn_in_fused = std::all_of(S.layers.begin(), S.layers.end(),
                                 [](const Layer& L) { return L.full || L.gdn.w_in.data() != nullptr; });
    S.attn_in_fused = std::all_of(S.layers.begin(), S.layers.end(),
                                  [](const Layer& L) { return !L.full || L.attn.w_in.data() != nullptr; });
  }

  // Weights the forward pass reads go to the model's device (nothing happens on the CPU).
  const bool tied = lm_head.data() == tok_embd_.data() && world == 1;
  to_device(ctx_, {&tok_embd_, &out_norm_});
  to_device(ctx_, {&mtp_enorm_, &mtp_hnorm_, &mtp_fc_e_, &mtp_fc_h_, &mtp_norm_});
  std::vector<std::pair<ops::Context*, Layer*>> all_layers;  // each with its rank's context
  for (Qwen35Shard& S : shards_) {
    if (tied) {
      S.lm_head = tok_embd_;
    } else {
      to_device(S.ctx, {&S.lm_head});
    }
    for (Layer& L : S.layers) all_layers.emplace_back(&S.ctx, &L);
    for (Layer& L : S.mtp_layers) all_layers.emplace_back(&S.ctx, &L);
  }
  for (auto [lctx, Lp] : all_layers) {
    ops::Context& lc = *lctx;
    Layer& L = *Lp;
    AttnWeights& A = L.attn;
    GdnWeights& G = L.gdn;
    to_device(lc, {&L.in_norm, &L.post_norm, &A.wo, &A.q_norm, &A.k_norm, &G.conv_q, &G.conv_k, &G.conv_v,
                   &G.neg_exp_A, &G.dt_bias, &G.norm, &G.wout});
    swiglu_to_device(lc, L.mlp);
    // One copy of the input projections: with a stack, the weights become row views of it.
    if (A.w_in.data() != nullptr) {
      to_device_stacked(lc, A.w_in, {&A.wq, &A.wgate, &A.wk, &A.wv}, ops::MatmulInput::kNorm);
    } else {
      to_device(lc, {&A.wq, &A.wgate, &A.wk, &A.wv});
    }
    if (G.w_in.data() != nullptr) {
      to_device_stacked(lc, G.w_in, {&G.wq, &G.wk, &G.wv, &G.wz, &G.wb, &G.wa}, ops::MatmulInput::kNorm);
    } else {
      to_device(lc, {&G.wq, &G.wk, &G.wv, &G.wz, &G.wb, &G.wa});
    }
  }

  if (tp_) tp_->synchronize();
  info_.arch = "qwen3_5";
  info_.name = model_display_name(src);
  info_.n_vocab = hp_.n_vocab;
  info_.n_ctx_train = hp_.n_ctx_train;
  info_.n_layer = hp_.n_layer;
  info_.d_model = d;
  info_.n_params = w.n_params();
  info_.weight_bytes = w.bytes();
}

void Qwen35Model::load_attention(WeightLoader& w, const std::string& g, const std::string& h, AttnWeights& a) {
  const int64_t d = hp_.d_model, hd = hp_.head_dim, Hq = hp_.n_head, kv_w = hp_.n_kv_head * hd;
  // q_proj rows are [head][query (hd) | gate (hd)]: gather the two halves apart.
  Tensor qg = w.load(g + "attn_q.weight", h + "q_proj.weight", {2 * Hq * hd, d});
  std::vector<int64_t> qrows, grows;
  for (int64_t head = 0; head < Hq; ++head)
    for (int64_t j = 0; j < hd; ++j) {
      qrows.push_back(head * 2 * hd + j);
      grows.push_back(head * 2 * hd + hd + j);
    }
  a.wq = gather_rows(qg, qrows);
  a.wgate = gather_rows(qg, grows);
  a.wk = w.load(g + "attn_k.weight", h + "k_proj.weight", {kv_w, d});
  a.wv = w.load(g + "attn_v.weight", h + "v_proj.weight", {kv_w, d});
  if (a.wk.dtype() == qg.dtype() && a.wv.dtype() == qg.dtype()) {
    a.w_in = concat_rows({&a.wq, &a.wgate, &a.wk, &a.wv});
    a.w_in.set_name(g + "attn_in_fused.weight");
    stacked_views(a.w_in, {&a.wq, &a.wgate, &a.wk, &a.wv});  // the gathered and loaded originals go
  }
  a.wo = w.load(g + "attn_output.weight", h + "o_proj.weight", {d, Hq * hd});
  a.q_norm = w.load_f32(g + "attn_q_norm.weight", h + "q_norm.weight", {hd});
  a.k_norm = w.load_f32(g + "attn_k_norm.weight", h + "k_norm.weight", {hd});
}

void Qwen35Model::load_gdn(WeightLoader& w, const std::string& g, const std::string& h, GdnWeights& a) {
  const int64_t d = hp_.d_model, Hv = hp_.gdn_v_heads, key_dim = hp_.gdn_k_heads * hp_.gdn_dk,
                value_dim = Hv * hp_.gdn_dv, conv_dim = 2 * key_dim + value_dim, K = hp_.conv_kernel;
  Tensor qkv = w.load(g + "attn_qkv.weight", h + "in_proj_qkv.weight", {conv_dim, d});
  a.wq = qkv.slice_rows(0, key_dim);
  a.wk = qkv.slice_rows(key_dim, 2 * key_dim);
  a.wv = qkv.slice_rows(2 * key_dim, conv_dim);
  a.wz = w.load(g + "attn_gate.weight", h + "in_proj_z.weight", {value_dim, d});
  a.wb = w.load(g + "ssm_beta.weight", h + "in_proj_b.weight", {Hv, d});
  a.wa = w.load(g + "ssm_alpha.weight", h + "in_proj_a.weight", {Hv, d});
  if (a.wz.dtype() == qkv.dtype() && a.wb.dtype() == qkv.dtype() && a.wa.dtype() == qkv.dtype()) {
    a.w_in = concat_rows({&qkv, &a.wz, &a.wb, &a.wa});
    a.w_in.set_name(g + "gdn_in_fused.weight");
  }
  // Depthwise conv weight: HF [C, 1, K], GGUF [C, K]; the q/k/v channel blocks get their own.
  Tensor conv = w.gguf() ? w.load_f32(g + "ssm_conv1d.weight", "", {conv_dim, K})
                         : w.load_f32("", h + "conv1d.weight", {conv_dim, 1, K}).reshape({conv_dim, K});
  a.conv_q = gather_rows(conv, iota_rows(0, key_dim));
  a.conv_k = gather_rows(conv, iota_rows(key_dim, 2 * key_dim));
  a.conv_v = gather_rows(conv, iota_rows(2 * key_dim, conv_dim));
  a.dt_bias = w.load_f32(g + "ssm_dt.bias", h + "dt_bias", {Hv});
  if (w.gguf()) {
    a.neg_exp_A = w.load_f32(g + "ssm_a", "", {Hv});  // already -exp(A_log)
  } else {
    a.neg_exp_A = w.load_f32("", h + "A_log", {Hv});
    float* p = a.neg_exp_A.ptr<float>();
    for (int64_t j = 0; j < Hv; ++j) p[j] = -std::exp(p[j]);
  }
  a.norm = w.load_f32(g + "ssm_norm.weight", h + "norm.weight", {hp_.gdn_dv});
  a.wout = w.load(g + "ssm_out.weight", h + "out_proj.weight", {d, value_dim});
}

void Qwen35Model::load_mtp(WeightLoader& w) {
  if (hp_.n_mtp == 0) return;
  const int64_t d = hp_.d_model;
  const WeightSource& src = w.source();
  const bool gguf = w.gguf();
  // HF keeps MTP weights at the top level ("mtp."); checkpoints saved without them
  // (e.g. by transformers, which ignores MTP) simply have no MTP head.
  std::string probe = gguf ? fmt::format("blk.{}.nextn.eh_proj.weight", hp_.n_layer) : "mtp.fc.weight";
  if (!src.has(probe)) return;
  std::string saved = w.hf_prefix();
  w.set_hf_prefix("");
  std::string g = fmt::format("blk.{}.", hp_.n_layer);
  mtp_enorm_ = w.load_f32(g + "nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", {d});
  mtp_hnorm_ = w.load_f32(g + "nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", {d});
  const Tensor fc = w.load(g + "nextn.eh_proj.weight", "mtp.fc.weight", {d, 2 * d});
  mtp_fc_e_ = slice_cols(fc, 0, d);  // input columns 0..d-1 act on the embedding, d..2d-1 on the hidden state
  mtp_fc_h_ = slice_cols(fc, d, 2 * d);
  mtp_norm_ = w.load_f32(g + "nextn.shared_head_norm.weight", "mtp.norm.weight", {d});
  for (int64_t m = 0; m < hp_.n_mtp; ++m) {
    std::string gm = fmt::format("blk.{}.", hp_.n_layer + m), hm = fmt::format("mtp.layers.{}.", m);
    Layer L;
    L.full = true;
    L.in_norm = w.load_f32(gm + "attn_norm.weight", hm + "input_layernorm.weight", {d});
    L.post_norm = w.load_f32(gm + "post_attention_norm.weight", hm + "post_attention_layernorm.weight", {d});
    load_attention(w, gm, hm + "self_attn.", L.attn);
    L.mlp = load_swiglu(w, gm, hm, d, hp_.d_ff);
    mtp_layers_.push_back(std::move(L));
  }
  w.set_hf_prefix(saved);
}

Layer Qwen35Model::shard_layer(const Layer& L, int world, int r) const {
  Layer s;
  s.full = L.full, s.in_norm = L.in_norm, s.post_norm = L.post_norm;  // [d]: whole
  if (L.full) {
    const AttnWeights& A = L.attn;
    AttnWeights& B = s.attn;
    const parallel::HeadShard heads = parallel::split_heads(hp_.n_head, hp_.n_kv_head, world, r);
    const int64_t hd = hp_.head_dim;
    const parallel::Range q{heads.q_heads.begin * hd, heads.q_heads.end * hd};
    const parallel::Range kv{heads.kv_heads.begin * hd, heads.kv_heads.end * hd};
    B.wq = shard_rows(A.wq, q), B.wgate = shard_rows(A.wgate, q);
    B.wk = shard_rows(A.wk, kv), B.wv = shard_rows(A.wv, kv);
    if (A.w_in.data() != nullptr) {
      B.w_in = concat_rows({&B.wq, &B.wgate, &B.wk, &B.wv});
      B.w_in.set_name(A.w_in.name());
      stacked_views(B.w_in, {&B.wq, &B.wgate, &B.wk, &B.wv});
    }
    B.wo = shard_cols(A.wo, q);
    B.q_norm = A.q_norm, B.k_norm = A.k_norm;  // per head: whole
  } else {
    const GdnWeights& G = L.gdn;
    GdnWeights& H = s.gdn;
    const int64_t dk = hp_.gdn_dk, dv = hp_.gdn_dv, Hk = hp_.gdn_k_heads, ratio = hp_.gdn_v_heads / Hk;
    const parallel::Range kh = parallel::split_range(Hk, world, r, "GDN key heads");
    // The rank's value heads in the file's order. Grouped (HF): key head k's are k * ratio ..
    // (k + 1) * ratio - 1. Tiled (llama.cpp's converter): value head j belongs to key head j % Hk, so
    // the rank's are ratio runs, and in the rank's own numbering they are tiled again over its key heads.
    std::vector<parallel::Range> vheads;
    if (gva_ == ops::GvaLayout::kGrouped) {
      vheads.push_back({kh.begin * ratio, kh.end * ratio});
    } else {
      for (int64_t m = 0; m < ratio; ++m) vheads.push_back({m * Hk + kh.begin, m * Hk + kh.end});
    }
    std::vector<parallel::Range> vrows;  // their channels
    for (const parallel::Range& h : vheads) vrows.push_back({h.begin * dv, h.end * dv});
    const parallel::Range krows{kh.begin * dk, kh.end * dk};
    H.wq = shard_rows(G.wq, krows), H.wk = shard_rows(G.wk, krows);
    H.wv = shard_row_runs(G.wv, vrows), H.wz = shard_row_runs(G.wz, vrows);
    H.wb = shard_row_runs(G.wb, vheads), H.wa = shard_row_runs(G.wa, vheads);
    if (G.w_in.data() != nullptr) {  // made row views of it by to_device_stacked, as when loaded
      H.w_in = concat_rows({&H.wq, &H.wk, &H.wv, &H.wz, &H.wb, &H.wa});
      H.w_in.set_name(G.w_in.name());
    }
    H.conv_q = shard_row_runs(G.conv_q, {krows}), H.conv_k = shard_row_runs(G.conv_k, {krows});
    H.conv_v = shard_row_runs(G.conv_v, vrows);
    auto per_head = [&](const Tensor& v) {  // [Hv] f32 -> the rank's heads
      const Tensor t = shard_row_runs(v.reshape({v.numel(), 1}), vheads);
      return t.reshape({t.rows()});
    };
    H.neg_exp_A = per_head(G.neg_exp_A), H.dt_bias = per_head(G.dt_bias);
    H.norm = G.norm;  // [dv]: per head, whole
    H.wout = shard_col_runs(G.wout, vrows);
  }
  s.mlp = shard_swiglu(L.mlp, split_mlp(L.mlp, hp_.d_ff, world, r));
  return s;
}

void Qwen35Model::forward_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                               Tensor& logits, LogitsOn where, Tensor* hidden) const {
  for (const BatchItem& it : items)
    VI_CHECK(dynamic_cast<Qwen35State*>(it.seq) != nullptr, "sequence state was not made by this model");
  on_ranks(tp_.get(), ctx, [&](ops::Context& rctx, int r) {
    forward_rank(rctx, r, plan, items, r == 0 ? &logits : nullptr, where, r == 0 ? hidden : nullptr);
  });
}

void Qwen35Model::forward_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                               Tensor* logits, LogitsOn where, Tensor* hidden) const {
  const Qwen35Shard& S = shards_[static_cast<size_t>(r)];
  parallel::Communicator* comm = tp_ ? tp_->comm.get() : nullptr;
  const int64_t N = plan.n_rows;
  // The rank's heads and MLP rows from here to the output projections.
  const int64_t d = hp_.d_model, hd = hp_.head_dim, Hq = S.Hq, Hkv = S.Hkv, kv_w = Hkv * hd;
  const int64_t Hk = S.Hk, Hv = S.Hv, dk = hp_.gdn_dk, dv = hp_.gdn_dv;
  const int64_t key_dim = Hk * dk, value_dim = Hv * dv;
  const float off = norm_offset_, eps = hp_.norm_eps;
  const int64_t pool_base = this->pool_base(r);

  Tensor x = ops::empty(ctx, ctx.act, {N, d});  // [N, d] residual stream (every rank holds it whole)
  Tensor n = ops::empty(ctx, ctx.act, {N, d});  // [N, d] the stream through the next norm
  Tensor o = ops::empty(ctx, ctx.act, {N, d});  // [N, d] a block's output (a rank's partial sum until all-reduced)
  Tensor ff_gu = ops::empty(ctx, ctx.act, {N, 2 * S.d_ff});  // MLP gate|up products
  Tensor ff_h = swiglu_scratch(ctx, N, S.d_ff);               // MLP SwiGLU output (decode, verify)
  const Tensor out_logits = logits_scratch(ctx, plan, S.lm_head.dim(0));
  // Full-attention scratch: q, gate, k, v in the stack's order.
  const bool attn_fused = N <= kStackedMlpMaxRows && S.attn_in_fused;
  ProjOutputs attn_in(ctx, attn_fused, N, 2 * Hq * hd + 2 * kv_w);
  Tensor q = attn_in.next(Hq * hd), gate = attn_in.next(Hq * hd), k = attn_in.next(kv_w), v = attn_in.next(kv_w);
  Tensor att = ops::empty(ctx, ctx.act, {N, Hq * hd});
  // GDN scratch: the six input projections in the stack's order (q k v z b a).
  const bool fused_in = N <= kStackedMlpMaxRows && S.gdn_in_fused;
  ProjOutputs gdn_in(ctx, fused_in, N, 2 * key_dim + 2 * value_dim + 2 * Hv);
  Tensor lq = gdn_in.next(key_dim), lk = gdn_in.next(key_dim), lv = gdn_in.next(value_dim), lz = gdn_in.next(value_dim);
  Tensor lb = gdn_in.next(Hv), la = gdn_in.next(Hv);
  Tensor cq = ops::empty(ctx, ctx.act, {N, key_dim}), ck = ops::empty(ctx, ctx.act, {N, key_dim});
  Tensor cv = ops::empty(ctx, ctx.act, {N, value_dim});
  Tensor y = ops::empty(ctx, ctx.act, {N, value_dim});
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
  // Every sequence brings the same T tokens, 1 <= T <= kMaxFusedGdnRows (a decode round: 1;
  // a verify round: the draft tokens): the GDN layers take the fused step ops, whose core
  // holds the sequences' recurrent states in gdn_states ([Hv, dk, dv] f32 each) and needs no
  // gate or core scratch. A verify round otherwise ran ~8 kernels per layer (gates, 3 convs,
  // 2 norms, the chunked delta rule, the gated norm) instead of 2. Steps with a prefill chunk
  // or with sequences of different T keep the unfused core (gdn_decode_step takes one T);
  // their sequences of at most kMaxFusedGdnRows rows still take the fused conv step.
  // Items that ask for checkpoints (a verify pass that may go back, BatchItem::checkpoints) take
  // the fused step ops whatever the step, which write the state after each token but the last
  // into the sequence's checkpoint buffers: with the others where the core is fused, in a core
  // op of their own where it is not.
  // An item keeps checkpoints when it asks and brings more than one token (the state after
  // its last token is the live one).
  auto keeps = [&](size_t i) { return items[i].checkpoints && plan.rows_of(i) > 1; };
  bool fused_core = !items.empty(), ckpt_any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const int64_t T = plan.rows_of(i);
    fused_core = fused_core && T >= 1 && T <= ops::kMaxFusedGdnRows && T == plan.rows_of(0);
    ckpt_any = ckpt_any || keeps(i);
  }
  Tensor g, beta, core;  // the unfused path's gates ([N, Hv] f32 each) and core ([N, value_dim])
  if (!fused_core) {
    g = ops::empty(ctx, DType::F32, {N, Hv});
    beta = ops::empty(ctx, DType::F32, {N, Hv});
    core = ops::empty(ctx, ctx.act, {N, value_dim});
  }
  std::vector<Tensor> gdn_states, gdn_ckpts;  // the fused core's states, and their checkpoints (or empty)
  gdn_states.reserve(items.size());
  gdn_ckpts.reserve(items.size());

  // The norm each layer's residual stream goes through next: the next layer's input norm,
  // after the last layer the output norm.
  auto norm_after = [&](int64_t l) -> const Tensor& {
    return l + 1 < hp_.n_layer ? S.layers[l + 1].in_norm : out_norm_;
  };

  // The stacked projections a norm feeds may take its output as int8 blocks (Q4_KI on CUDA,
  // ops::matmul_input_dtype): add_rms_norm then writes nq instead of n, and the GEMV needs no
  // conversion of its own.
  auto stacked_input = [&](int64_t l) -> const Tensor* {  // layer l's stacked input projection, if it runs
    if (l >= hp_.n_layer) return nullptr;
    const Layer& L = S.layers[l];
    if (L.full) return attn_fused ? &L.attn.w_in : nullptr;
    return fused_in ? &L.gdn.w_in : nullptr;
  };
  auto wants_q8 = [&](const Tensor* w) {
    return w != nullptr && w->data() != nullptr && ops::matmul_input_dtype(ctx, *w, N) == DType::Q8_KX;
  };
  Tensor nq;  // [N, d] Q8_KX: the norm's output for such a projection
  auto norm_out = [&](const Tensor* consumer) -> Tensor& {
    if (!wants_q8(consumer)) return n;
    if (nq.data() == nullptr) nq = ops::empty(ctx, DType::Q8_KX, {N, d});
    return nq;
  };

  // Where the device fuses both sides of a norm (ops/deferred_norm.h; VI_DEFER_NORM=0 turns it off):
  // the output projection into the post-attention norm into the fused gate|up (defer_post), and
  // the down projection into the next layer's input norm into its stacked input projection
  // (defer_next). There the residual add and the norm's 1/rms ride in the two GEMVs and no norm
  // kernel runs between them. Not where the ranks split the model: the residual add waits for
  // the all-reduce.
  std::vector<char> defer_post(hp_.n_layer, 0), defer_next(hp_.n_layer, 0);
  const bool mlp_stacked_all = N <= kStackedMlpMaxRows && comm == nullptr;
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const Layer& L = S.layers[l];
    const Tensor& wo = L.full ? L.attn.wo : L.gdn.wout;
    const Tensor& gu = L.mlp.gate_up;
    defer_post[l] = mlp_stacked_all && gu.data() != nullptr && !wants_q8(&gu) &&
                    ops::deferred_norm_fused(ctx, wo, gu, ops::DeferredConsumer::kSwiglu, N);
    const Tensor* next = stacked_input(l + 1);
    // ProjOutputs::matmul's op: one row a matmul into the stack, more a split.
    const auto next_kind = N == 1 ? ops::DeferredConsumer::kMatmul : ops::DeferredConsumer::kSplit;
    defer_next[l] = comm == nullptr && next != nullptr && !wants_q8(next) &&
                    ops::deferred_norm_fused(ctx, L.mlp.down, *next, next_kind, N);
  }
  // The deferred norms' scratch (allocated with the other scratch): one u, and a zeroed set of
  // sums per site (layer l's post norm: site 2 l, its next norm: 2 l + 1), since a set is added to
  // by its producer and never cleared inside the step. dn: the site in flight.
  ops::DeferredNorm dn_all, dn;
  if (std::find(defer_post.begin(), defer_post.end(), 1) != defer_post.end() ||
      std::find(defer_next.begin(), defer_next.end(), 1) != defer_next.end())
    dn_all = ops::deferred_norm_scratch(ctx, N, d, eps, 2 * hp_.n_layer);

  ops::embedding(ctx, tok_embd_, plan.dev.ids, x);
  ops::rms_norm(ctx, x, norm_after(-1), eps, off, n);
  const Tensor* in = &n;  // the layer's normed input: n, or nq where its projection takes int8 blocks
  bool in_deferred = false;  // the layer's input is dn instead (the previous layer's defer_next)
  size_t attn_idx = 0;  // index of the full-attention layer in the KV pool
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    const Layer& L = S.layers[l];
    // *in = in_norm(x) here (the previous layer's last add_rms_norm made it), or dn holds it
    // deferred (in_deferred: the previous layer's down projection made it).
    if (L.full) {
      const AttnWeights& A = L.attn;
      if (attn_fused && in_deferred) {
        attn_in.matmul(dn, A.w_in);
      } else if (attn_fused) {
        attn_in.matmul(*in, A.w_in);
      } else {
        ops::matmul(ctx, *in, A.wq, q);
        ops::matmul(ctx, *in, A.wgate, gate);
        ops::matmul(ctx, *in, A.wk, k);
        ops::matmul(ctx, *in, A.wv, v);
      }
      // q, k = RoPE(RMSNorm1p(q)), RoPE(RMSNorm1p(k)) per head; K/V cache append; attention.
      Tensor qh = q.reshape({N, Hq, hd});
      const QkNormRope nr{A.q_norm, A.k_norm, eps, off, static_cast<int>(hp_.rot_dim), hp_.rope_theta};
      // out = attention · sigmoid(gate): the op applies the gate (on a GPU as it stores out).
      norm_rope_paged_attention_block(ctx, plan, items, pool_base + attn_idx++, nr, qh, k, v, attn_scale, att, &gate);
    } else {
      const GdnWeights& G = L.gdn;
      if (fused_in && in_deferred) {
        gdn_in.matmul(dn, G.w_in);
      } else if (fused_in) {
        gdn_in.matmul(*in, G.w_in);
      } else {
        ops::matmul(ctx, *in, G.wq, lq);
        ops::matmul(ctx, *in, G.wk, lk);
        ops::matmul(ctx, *in, G.wv, lv);
        ops::matmul(ctx, *in, G.wz, lz);
        ops::matmul(ctx, *in, G.wb, lb);
        ops::matmul(ctx, *in, G.wa, la);
      }
      if (!fused_core) ops::gdn_gates(ctx, la, lb, G.neg_exp_A, G.dt_bias, g, beta);
      gdn_states.clear();
      gdn_ckpts.clear();
      for (size_t i = 0; i < items.size(); ++i) {
        auto& seq = static_cast<Qwen35State&>(*items[i].seq);
        Qwen35State::RankState& rs = seq.rank(r);
        const int64_t r0 = plan.row0[i], T = plan.rows_of(i), r1 = r0 + T;
        Tensor cqi = cq.slice_rows(r0, r1), cki = ck.slice_rows(r0, r1), cvi = cv.slice_rows(r0, r1);
        const bool keep = keeps(i);
        const size_t gl = static_cast<size_t>(gdn_index_[l]);
        auto after = [&](int part) { return keep ? seq.ckpt(r, gl, part) : Tensor(); };
        if ((T >= 1 && T <= ops::kMaxFusedGdnRows) || keep) {  // decode or verify tokens: the five steps below in one op
          ops::gdn_conv_step(ctx, ops::ConvGroup{lq.slice_rows(r0, r1), G.conv_q, rs.conv_q[l], cqi, after(0)},
                             ops::ConvGroup{lk.slice_rows(r0, r1), G.conv_k, rs.conv_k[l], cki, after(1)},
                             ops::ConvGroup{lv.slice_rows(r0, r1), G.conv_v, rs.conv_v[l], cvi, after(2)}, dk, 1e-6f,
                             q_scale);
        } else {
          ops::conv1d_causal(ctx, lq.slice_rows(r0, r1), G.conv_q, rs.conv_q[l], /*silu=*/true, cqi);
          ops::conv1d_causal(ctx, lk.slice_rows(r0, r1), G.conv_k, rs.conv_k[l], true, cki);
          ops::conv1d_causal(ctx, lv.slice_rows(r0, r1), G.conv_v, rs.conv_v[l], true, cvi);
          Tensor qn = cqi.reshape({T * Hk, dk}), kn = cki.reshape({T * Hk, dk});
          ops::l2_norm(ctx, qn, 1e-6f, q_scale, qn);
          ops::l2_norm(ctx, kn, 1e-6f, 1.0f, kn);
        }
        if (fused_core) {  // the delta rule runs for all sequences at once below
          gdn_states.push_back(rs.ssm[l]);
          gdn_ckpts.push_back(after(3));
          continue;
        }
        if (keep) {  // this item's gates, delta rule and output norm alone, with its checkpoints
          Tensor yi = y.slice_rows(r0, r1).reshape({T, Hv, dv});
          ops::gdn_decode_step(ctx, cqi.reshape({T, Hk, dk}), cki.reshape({T, Hk, dk}), cvi.reshape({T, Hv, dv}),
                               la.slice_rows(r0, r1), lb.slice_rows(r0, r1), G.neg_exp_A, G.dt_bias,
                               lz.slice_rows(r0, r1).reshape({T, Hv, dv}), G.norm, eps, {rs.ssm[l]}, gva_, yi,
                               {after(3)});
          continue;
        }
        // HF's split: the chunked form for multi-token calls, the recurrent one per token.
        const auto form = T > 1 ? ops::DeltaRuleForm::kChunked : ops::DeltaRuleForm::kRecurrent;
        Tensor core_i = core.slice_rows(r0, r1).reshape({T, Hv, dv});
        ops::gated_delta_rule(ctx, cqi.reshape({T, Hk, dk}), cki.reshape({T, Hk, dk}), cvi.reshape({T, Hv, dv}),
                              g.slice_rows(r0, r1), beta.slice_rows(r0, r1), rs.ssm[l], gva_, form, core_i);
      }
      if (fused_core) {  // gates, recurrent delta rule and output norm of every sequence's T rows: one op
        Tensor y3 = y.reshape({N, Hv, dv});
        ops::gdn_decode_step(ctx, cq.reshape({N, Hk, dk}), ck.reshape({N, Hk, dk}), cv.reshape({N, Hv, dv}), la, lb,
                             G.neg_exp_A, G.dt_bias, lz.reshape({N, Hv, dv}), G.norm, eps, gdn_states, gva_, y3,
                             ckpt_any ? gdn_ckpts : std::vector<Tensor>{});
      } else if (!ckpt_any) {
        Tensor yr = y.reshape({N * Hv, dv});
        ops::gated_rms_norm(ctx, core.reshape({N * Hv, dv}), lz.reshape({N * Hv, dv}), G.norm, eps, yr);
      } else {  // the rows the checkpointing items wrote stay
        for (size_t i = 0; i < items.size(); ++i) {
          if (keeps(i)) continue;
          const int64_t r0 = plan.row0[i], r1 = r0 + plan.rows_of(i), R = (r1 - r0) * Hv;
          Tensor yr = y.slice_rows(r0, r1).reshape({R, dv});
          ops::gated_rms_norm(ctx, core.slice_rows(r0, r1).reshape({R, dv}), lz.slice_rows(r0, r1).reshape({R, dv}),
                              G.norm, eps, yr);
        }
      }
    }
    const Tensor& o_in = L.full ? att : y;  // the block's output projection: o = o_in · woᵀ
    const Tensor& wo = L.full ? L.attn.wo : L.gdn.wout;
    Tensor hidden;  // silu(gate) * up, the down projection's input
    if (defer_post[l]) {
      dn = ops::deferred_norm_site(dn_all, 2 * l);
      ops::matmul_add_deferred_norm(ctx, o_in, wo, x, L.post_norm, off, dn);  // x += o; dn = post_norm(x), deferred
      ops::matmul_swiglu_deferred(ctx, dn, L.mlp.gate_up, ff_gu, ff_h);
      hidden = ff_h;
    } else {
      ops::matmul(ctx, o_in, wo, o);
      if (comm) comm->all_reduce_sum(r, o, ctx.stream);
      const bool mlp_stacked = L.mlp.gate_up.data() != nullptr && N <= kStackedMlpMaxRows;
      Tensor& mlp_in = norm_out(mlp_stacked ? &L.mlp.gate_up : nullptr);
      ops::add_rms_norm(ctx, x, o, L.post_norm, eps, off, mlp_in);  // x += block(x); mlp_in = post_norm(x)
      hidden = swiglu_hidden(ctx, mlp_in, L.mlp, ff_gu, ff_h);
    }
    if (defer_next[l]) {
      dn = ops::deferred_norm_site(dn_all, 2 * l + 1);
      ops::matmul_add_deferred_norm(ctx, hidden, L.mlp.down, x, norm_after(l), off, dn);  // x += mlp; dn = next norm
      in_deferred = true;
    } else {
      ops::matmul(ctx, hidden, L.mlp.down, o);
      if (comm) comm->all_reduce_sum(r, o, ctx.stream);
      Tensor& next_in = norm_out(stacked_input(l + 1));
      ops::add_rms_norm(ctx, x, o, norm_after(l), eps, off, next_in);  // x += mlp; next_in = next norm(x)
      in = &next_in;
      in_deferred = false;
    }
  }
  rank_output_logits(ctx, comm, r, plan, n, S.lm_head, where, out_logits, hp_.n_vocab, logits);
  if (hidden != nullptr) *hidden = n;  // the output norm's output, every row
}

std::unique_ptr<SequenceState> Qwen35Model::new_draft_sequence(const SequenceState& main) const {
  if (!has_draft_head()) return Model::new_draft_sequence(main);  // the error
  VI_CHECK(dynamic_cast<const Qwen35State*>(&main) != nullptr, "sequence state was not made by this model");
  return std::make_unique<Qwen35DraftState>(main);
}

// MODEL_QWEN35.md section 7.2: slot i (main position p = n_past + i) takes the token after p
// and the hidden state at p:
//   u = fc([enorm(embed(token)) | hnorm(hidden)]); u = MTP block(u) at RoPE position p, over
//   the head's cache (its layer of the main sequence's KV pool); h' = mtp.norm(u);
//   logits = lm_head(h').
// The blocks run as the main model's full-attention layers without the deferred norms (a
// draft pass is a few rows, once per round).
void Qwen35Model::draft_begin(const ops::Context& ctx, SequenceState& dseq, int64_t T, const Tensor& hidden) const {
  VI_CHECK(has_draft_head(), "model '{}' has no MTP head", info_.name);
  auto* draft = dynamic_cast<Qwen35DraftState*>(&dseq);
  VI_CHECK(draft != nullptr, "draft sequence was not made by this model");
  const int64_t d = hp_.d_model;
  VI_CHECK(T >= 1 && hidden.rows() == T && hidden.cols() == d && hidden.dtype() == ctx.act,
           "draft_forward: {} tokens need hidden [{}, {}] in {}, got {} {}", T, T, d, dtype_name(ctx.act),
           hidden.shape_str(), dtype_name(hidden.dtype()));
  draft->follow_main();
}

void Qwen35Model::draft_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                             const Tensor& hidden, Tensor* logits, Tensor& head_out, LogitsOn where) const {
  on_ranks(tp_.get(), ctx, [&](ops::Context& rctx, int r) {
    draft_rank(rctx, r, plan, items, hidden, logits != nullptr, r == 0 ? logits : nullptr, r == 0 ? &head_out : nullptr,
               where);
  });
}

void Qwen35Model::draft_rank(ops::Context& ctx, int r, const BatchPlan& plan, std::span<const BatchItem> items,
                             const Tensor& hidden, bool want_logits, Tensor* logits, Tensor* head_out,
                             LogitsOn where) const {
  const Qwen35Shard& S = shards_[static_cast<size_t>(r)];
  parallel::Communicator* comm = tp_ ? tp_->comm.get() : nullptr;
  const int64_t T = plan.n_rows;
  const int64_t d = hp_.d_model, hd = hp_.head_dim, Hq = S.Hq, kv_w = S.Hkv * hd;
  const float off = norm_offset_, eps = hp_.norm_eps;
  // The head's layers follow the rank's full-attention layers in the pool.
  const int64_t head_base = pool_base(r) + std::count(hp_.is_full.begin(), hp_.is_full.end(), true);
  Tensor e = ops::empty(ctx, ctx.act, {T, d}), en = ops::empty(ctx, ctx.act, {T, d});
  Tensor hn = ops::empty(ctx, ctx.act, {T, d});
  Tensor x = ops::empty(ctx, ctx.act, {T, d}), o = ops::empty(ctx, ctx.act, {T, d});
  Tensor n = ops::empty(ctx, ctx.act, {T, d});
  ops::embedding(ctx, tok_embd_, plan.dev.ids, e);
  ops::rms_norm(ctx, e, mtp_enorm_, eps, off, en);
  ops::rms_norm(ctx, hidden, mtp_hnorm_, eps, off, hn);
  ops::matmul(ctx, en, mtp_fc_e_, x);  // the fc is whole on every rank
  ops::matmul(ctx, hn, mtp_fc_h_, o);
  ops::add(ctx, x, o, x);  // x = fc([en | hn])

  Tensor q = ops::empty(ctx, ctx.act, {T, Hq * hd}), gate = ops::empty(ctx, ctx.act, {T, Hq * hd});
  Tensor k = ops::empty(ctx, ctx.act, {T, kv_w}), v = ops::empty(ctx, ctx.act, {T, kv_w});
  Tensor att = ops::empty(ctx, ctx.act, {T, Hq * hd});
  Tensor ff_gu = ops::empty(ctx, ctx.act, {T, 2 * S.d_ff});
  Tensor ff_h = swiglu_scratch(ctx, T, S.d_ff);
  const Tensor out_logits = want_logits ? logits_scratch(ctx, plan, S.lm_head.dim(0)) : Tensor();
  const float attn_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ops::rms_norm(ctx, x, S.mtp_layers.front().in_norm, eps, off, n);
  for (size_t m = 0; m < S.mtp_layers.size(); ++m) {
    const Layer& L = S.mtp_layers[m];
    const AttnWeights& A = L.attn;
    ops::matmul(ctx, n, A.wq, q);
    ops::matmul(ctx, n, A.wgate, gate);
    ops::matmul(ctx, n, A.wk, k);
    ops::matmul(ctx, n, A.wv, v);
    Tensor qh = q.reshape({T, Hq, hd});
    const QkNormRope nr{A.q_norm, A.k_norm, eps, off, static_cast<int>(hp_.rot_dim), hp_.rope_theta};
    norm_rope_paged_attention_block(ctx, plan, items, head_base + static_cast<int64_t>(m), nr, qh, k, v, attn_scale,
                                    att, &gate);
    ops::matmul(ctx, att, A.wo, o);
    if (comm) comm->all_reduce_sum(r, o, ctx.stream);
    ops::add_rms_norm(ctx, x, o, L.post_norm, eps, off, n);  // x += attn; n = post_norm(x)
    Tensor h = swiglu_hidden(ctx, n, L.mlp, ff_gu, ff_h);
    ops::matmul(ctx, h, L.mlp.down, o);
    if (comm) comm->all_reduce_sum(r, o, ctx.stream);
    const Tensor& next = m + 1 < S.mtp_layers.size() ? S.mtp_layers[m + 1].in_norm : mtp_norm_;
    ops::add_rms_norm(ctx, x, o, next, eps, off, n);  // x += mlp; n = the next norm(x): after the last, mtp.norm
  }
  if (head_out != nullptr) *head_out = n.slice_rows(T - 1, T);
  if (want_logits) rank_output_logits(ctx, comm, r, plan, n, S.lm_head, where, out_logits, hp_.n_vocab, logits);
}

}  // namespace

std::unique_ptr<Model> load_qwen3_5(const WeightSource& src, const LoadOptions& opts) {
  return std::make_unique<Qwen35Model>(src, opts);
}

}  // namespace vi
