// Preset tables and per-format tensor lists for `voltinfer make-model`.
// Qwen3.5 sizes follow MODEL_QWEN35.md §1.2-1.3; Llama sizes are those of SmolLM2-135M and
// Llama 3.x 1B/3B/8B/70B (without Llama 3's rope scaling, which our llama loader ignores).
// GGUF names and transforms follow llama.cpp's converter (MODEL_QWEN35.md §3.3, §6.3, §9).
#include "tools/model_presets.h"

#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace vi::cli {

namespace {

ModelShape qwen35(const char* name, int64_t d, int64_t layers, int64_t hq, int64_t hkv, int64_t ff, int64_t hk,
                  int64_t hv, bool tied) {
  ModelShape m;
  m.arch = "qwen3_5";
  m.preset = name;
  m.vocab = 248320;
  m.d_model = d;
  m.n_layer = layers;
  m.d_ff = ff;
  m.n_head = hq;
  m.n_kv_head = hkv;
  m.head_dim = 256;
  m.rot_dim = 64;  // 256 * partial_rotary_factor 0.25
  m.n_ctx = 262144;
  m.rope_theta = 1e7;
  m.norm_eps = 1e-6;
  m.tied = tied;
  m.gdn_k_heads = hk;
  m.gdn_v_heads = hv;
  m.gdn_dk = m.gdn_dv = 128;
  m.conv_kernel = 4;
  m.full_interval = 4;
  m.n_mtp = 1;
  m.mrope_sections = {11, 11, 10};
  return m;
}

ModelShape llama(const char* name, int64_t vocab, int64_t d, int64_t layers, int64_t hq, int64_t hkv, int64_t hd,
                 int64_t ff, bool tied, double theta, int64_t ctx) {
  ModelShape m;
  m.arch = "llama";
  m.preset = name;
  m.vocab = vocab;
  m.d_model = d;
  m.n_layer = layers;
  m.d_ff = ff;
  m.n_head = hq;
  m.n_kv_head = hkv;
  m.head_dim = hd;
  m.rot_dim = hd;
  m.n_ctx = ctx;
  m.rope_theta = theta;
  m.norm_eps = 1e-5;
  m.tied = tied;
  return m;
}

const std::vector<ModelShape>& presets() {
  static const std::vector<ModelShape> all = [] {
    std::vector<ModelShape> v;
    //                 name    hidden layers Hq Hkv  d_ff   Hk  Hv  tied
    v.push_back(qwen35("0.8b", 1024, 24, 8, 2, 3584, 16, 16, true));
    v.push_back(qwen35("2b", 2048, 24, 8, 2, 6144, 16, 16, true));
    v.push_back(qwen35("4b", 2560, 32, 16, 4, 9216, 16, 32, true));
    v.push_back(qwen35("9b", 4096, 32, 16, 4, 12288, 16, 32, false));
    v.push_back(qwen35("27b", 5120, 64, 24, 4, 17408, 16, 48, false));
    // tiny: every kind of layer and transform (GQA; H_v/H_k = 4 with H_k = 2, so the GGUF
    // v-head re-tiling is neither the identity nor its own inverse; d_k != d_v; untied head;
    // MTP), every row width a multiple of 256 so that all weight dtypes apply without fallback.
    ModelShape t = qwen35("tiny", 256, 4, 4, 2, 512, 2, 8, false);
    t.vocab = 1024;
    t.head_dim = 64;
    t.rot_dim = 16;
    t.mrope_sections = {3, 3, 2};
    t.gdn_dk = 64;
    t.gdn_dv = 32;
    t.n_ctx = 4096;
    v.push_back(t);
    //                name    vocab   hidden layers Hq  Hkv hd   d_ff   tied   theta   ctx
    v.push_back(llama("tiny", 1024, 256, 3, 4, 2, 64, 768, true, 10000.0, 4096));
    v.push_back(llama("135m", 49152, 576, 30, 9, 3, 64, 1536, true, 100000.0, 8192));
    v.push_back(llama("1b", 128256, 2048, 16, 32, 8, 64, 8192, true, 500000.0, 131072));
    v.push_back(llama("3b", 128256, 3072, 28, 24, 8, 128, 8192, true, 500000.0, 131072));
    v.push_back(llama("8b", 128256, 4096, 32, 32, 8, 128, 14336, false, 500000.0, 131072));
    v.push_back(llama("70b", 128256, 8192, 80, 64, 8, 128, 28672, false, 500000.0, 131072));
    return v;
  }();
  return all;
}

std::vector<int64_t> iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v(static_cast<size_t>(end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// llama.cpp's converter stores GDN value heads tiled (head m*Hk + g) instead of grouped by
// key head (head g*r + m), so that ggml broadcasting pairs value head j with key head j % Hk.
// Entry [n*width + i] = logical index of the element the written index holds.
std::vector<int64_t> tiled_v_heads(int64_t hk, int64_t hv, int64_t width, int64_t offset) {
  const int64_t r = hv / hk;
  std::vector<int64_t> v;
  v.reserve(static_cast<size_t>(hv * width));
  for (int64_t n = 0; n < hv; ++n) {
    const int64_t src_head = (n % hk) * r + n / hk;
    for (int64_t i = 0; i < width; ++i) v.push_back(offset + src_head * width + i);
  }
  return v;
}

// llama.cpp's converter interleaves the two RoPE halves of each llama q/k head: written row
// h*hd + 2j + half holds HF row h*hd + half*hd/2 + j.
std::vector<int64_t> llama_rope_rows(int64_t n_head, int64_t hd) {
  std::vector<int64_t> v(static_cast<size_t>(n_head * hd));
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < hd / 2; ++j)
      for (int64_t half = 0; half < 2; ++half) v[h * hd + 2 * j + half] = h * hd + half * hd / 2 + j;
  return v;
}

class PlanBuilder {
 public:
  PlanBuilder(const ModelShape& m, OutFormat f) : m_(m), gguf_(f == OutFormat::kGguf) {
    d_ = static_cast<float>(m.d_model);
    // Residual scale: tied heads read logits off the embedding, so it must be small enough
    // that logits stay O(3); untied models use unit embeddings and a separate small head.
    embd_ = m.tied ? 3.0f / std::sqrt(d_) : 1.0f;
  }

  bool gguf() const { return gguf_; }
  std::vector<TensorSpec>& out() { return out_; }

  TensorSpec& add(const std::string& gguf_name, const std::string& hf_name, std::vector<int64_t> shape,
                  bool matrix, Init init, float scale, Store gguf_store = Store::kAsIs) {
    TensorSpec t;
    t.key = hf_name;
    t.name = gguf_ ? gguf_name : hf_name;
    t.shape = std::move(shape);
    t.matrix = matrix;
    t.init = init;
    t.scale = scale;
    t.store = gguf_ ? gguf_store : Store::kAsIs;
    out_.push_back(std::move(t));
    return out_.back();
  }
  // Input projection of a normed activation (rms ~1): unit-variance outputs.
  TensorSpec& in_proj(const std::string& g, const std::string& h, int64_t out, int64_t in) {
    return add(g, h, {out, in}, true, Init::kNormal, 1.0f / std::sqrt(static_cast<float>(in)));
  }
  // Projection back into the residual stream. Its inputs have rms ~0.5 (gated), so each of
  // the 2L branches adds rms ~1/sqrt(L) and together they reach rms ~1.4, like a trained
  // model's stream outgrowing its embeddings: every layer matters, and a tied head does not
  // just echo the input token (its embedding is small next to the stream).
  TensorSpec& out_proj(const std::string& g, const std::string& h, int64_t out, int64_t in) {
    float s = 2.0f / std::sqrt(static_cast<float>(in) * static_cast<float>(std::max<int64_t>(m_.n_layer, 1)));
    return add(g, h, {out, in}, true, Init::kNormal, s);
  }
  // RMSNorm weight: Qwen3.5 stores w of (1 + w), and GGUF folds the 1 in; llama stores it as is.
  TensorSpec& norm(const std::string& g, const std::string& h, int64_t n) {
    if (m_.arch == "qwen3_5") return add(g, h, {n}, false, Init::kNormOffset, 0.05f, Store::kPlusOne);
    return add(g, h, {n}, false, Init::kNormOne, 0.05f);
  }
  float embd_scale() const { return embd_; }

 private:
  const ModelShape& m_;
  bool gguf_;
  float d_ = 0, embd_ = 1;
  std::vector<TensorSpec> out_;
};

void add_mlp(PlanBuilder& b, const ModelShape& m, const std::string& g, const std::string& h) {
  b.in_proj(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", m.d_ff, m.d_model);
  b.in_proj(g + "ffn_up.weight", h + "mlp.up_proj.weight", m.d_ff, m.d_model);
  b.out_proj(g + "ffn_down.weight", h + "mlp.down_proj.weight", m.d_model, m.d_ff);
}

// Qwen3.5 gated full attention (q_proj rows interleave query and gate per head; kept as is).
void add_qwen_attention(PlanBuilder& b, const ModelShape& m, const std::string& g, const std::string& h) {
  const int64_t d = m.d_model, hd = m.head_dim;
  b.in_proj(g + "attn_q.weight", h + "self_attn.q_proj.weight", 2 * m.n_head * hd, d);
  b.in_proj(g + "attn_k.weight", h + "self_attn.k_proj.weight", m.n_kv_head * hd, d);
  b.in_proj(g + "attn_v.weight", h + "self_attn.v_proj.weight", m.n_kv_head * hd, d);
  b.out_proj(g + "attn_output.weight", h + "self_attn.o_proj.weight", d, m.n_head * hd);
  b.norm(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", hd);
  b.norm(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", hd);
}

void add_gdn(PlanBuilder& b, const ModelShape& m, const std::string& g, const std::string& h) {
  const int64_t d = m.d_model, hk = m.gdn_k_heads, hv = m.gdn_v_heads, dv = m.gdn_dv;
  const int64_t key2 = 2 * m.key_dim(), C = m.conv_dim(), K = m.conv_kernel;
  const bool reorder = b.gguf() && hv != hk;
  // q and k channels keep their order; the value channels are re-tiled.
  std::vector<int64_t> qkv_rows;
  if (reorder) {
    qkv_rows = iota(0, key2);
    auto v = tiled_v_heads(hk, hv, dv, key2);
    qkv_rows.insert(qkv_rows.end(), v.begin(), v.end());
  }
  auto perm = [&](int64_t width) { return reorder ? tiled_v_heads(hk, hv, width, 0) : std::vector<int64_t>{}; };

  b.in_proj(g + "attn_qkv.weight", h + "linear_attn.in_proj_qkv.weight", C, d).row_src = qkv_rows;
  b.in_proj(g + "attn_gate.weight", h + "linear_attn.in_proj_z.weight", m.value_dim(), d).row_src = perm(dv);
  b.in_proj(g + "ssm_beta.weight", h + "linear_attn.in_proj_b.weight", hv, d).row_src = perm(1);
  b.in_proj(g + "ssm_alpha.weight", h + "linear_attn.in_proj_a.weight", hv, d).row_src = perm(1);
  // Depthwise conv over K taps (fan-in K); llama.cpp keeps it f32 and squeezed to [C, K].
  std::vector<int64_t> conv_shape = b.gguf() ? std::vector<int64_t>{C, K} : std::vector<int64_t>{C, 1, K};
  b.add(g + "ssm_conv1d.weight", h + "linear_attn.conv1d.weight", conv_shape, false, Init::kNormal,
        1.0f / std::sqrt(static_cast<float>(K)))
      .row_src = qkv_rows;
  b.add(g + "ssm_dt.bias", h + "linear_attn.dt_bias", {hv}, false, Init::kDtBias, 1.0f).col_src = perm(1);
  b.add(g + "ssm_a", h + "linear_attn.A_log", {hv}, false, Init::kALog, 1.0f, Store::kNegExp).col_src = perm(1);
  // The gated output norm multiplies by w directly (no 1 + w, no +1 in GGUF, shared by heads).
  b.add(g + "ssm_norm.weight", h + "linear_attn.norm.weight", {dv}, false, Init::kNormOne, 0.05f);
  b.out_proj(g + "ssm_out.weight", h + "linear_attn.out_proj.weight", d, m.value_dim()).col_src = perm(dv);
}

std::vector<TensorSpec> qwen35_plan(const ModelShape& m, OutFormat f) {
  PlanBuilder b(m, f);
  const int64_t d = m.d_model;
  b.add("token_embd.weight", "model.embed_tokens.weight", {m.vocab, d}, true, Init::kNormal, b.embd_scale());
  b.norm("output_norm.weight", "model.norm.weight", d);
  if (!m.tied) b.in_proj("output.weight", "lm_head.weight", m.vocab, d).scale = 3.0f / std::sqrt(float(d));
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string g = fmt::format("blk.{}.", i), h = fmt::format("model.layers.{}.", i);
    b.norm(g + "attn_norm.weight", h + "input_layernorm.weight", d);
    if (m.is_full(i))
      add_qwen_attention(b, m, g, h);
    else
      add_gdn(b, m, g, h);
    b.norm(g + "post_attention_norm.weight", h + "post_attention_layernorm.weight", d);
    add_mlp(b, m, g, h);
  }
  // MTP blocks follow the main layers in GGUF (blk.{n_layer + j}); HF keeps them under mtp.
  for (int64_t j = 0; j < m.n_mtp; ++j) {
    const std::string g = fmt::format("blk.{}.", m.n_layer + j), h = fmt::format("mtp.layers.{}.", j);
    if (j == 0) {
      b.norm(g + "nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", d);
      b.norm(g + "nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", d);
      b.in_proj(g + "nextn.eh_proj.weight", "mtp.fc.weight", d, 2 * d);
      b.norm(g + "nextn.shared_head_norm.weight", "mtp.norm.weight", d);
    }
    b.norm(g + "attn_norm.weight", h + "input_layernorm.weight", d);
    add_qwen_attention(b, m, g, h);
    b.norm(g + "post_attention_norm.weight", h + "post_attention_layernorm.weight", d);
    add_mlp(b, m, g, h);
  }
  return std::move(b.out());
}

std::vector<TensorSpec> llama_plan(const ModelShape& m, OutFormat f) {
  PlanBuilder b(m, f);
  const int64_t d = m.d_model, hd = m.head_dim;
  const bool gguf = f == OutFormat::kGguf;
  b.add("token_embd.weight", "model.embed_tokens.weight", {m.vocab, d}, true, Init::kNormal, b.embd_scale());
  b.norm("output_norm.weight", "model.norm.weight", d);
  if (!m.tied) b.in_proj("output.weight", "lm_head.weight", m.vocab, d).scale = 3.0f / std::sqrt(float(d));
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string g = fmt::format("blk.{}.", i), h = fmt::format("model.layers.{}.", i);
    b.norm(g + "attn_norm.weight", h + "input_layernorm.weight", d);
    b.in_proj(g + "attn_q.weight", h + "self_attn.q_proj.weight", m.n_head * hd, d).row_src =
        gguf ? llama_rope_rows(m.n_head, hd) : std::vector<int64_t>{};
    b.in_proj(g + "attn_k.weight", h + "self_attn.k_proj.weight", m.n_kv_head * hd, d).row_src =
        gguf ? llama_rope_rows(m.n_kv_head, hd) : std::vector<int64_t>{};
    b.in_proj(g + "attn_v.weight", h + "self_attn.v_proj.weight", m.n_kv_head * hd, d);
    b.out_proj(g + "attn_output.weight", h + "self_attn.o_proj.weight", d, m.n_head * hd);
    b.norm(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", d);
    add_mlp(b, m, g, h);
  }
  return std::move(b.out());
}

}  // namespace

int64_t TensorSpec::rows() const {
  int64_t r = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

const std::vector<std::string>& known_archs() {
  static const std::vector<std::string> a = {"qwen3_5", "llama"};
  return a;
}

std::vector<std::string> preset_names(const std::string& arch) {
  std::vector<std::string> v;
  for (const ModelShape& m : presets())
    if (m.arch == arch) v.push_back(m.preset);
  return v;
}

ModelShape find_preset(const std::string& arch, const std::string& name) {
  auto names = preset_names(arch);
  if (names.empty())
    throw Error(fmt::format("unknown architecture '{}' (known: {})", arch, fmt::join(known_archs(), ", ")));
  for (const ModelShape& m : presets())
    if (m.arch == arch && m.preset == name) return m;
  throw Error(fmt::format("architecture {} has no preset '{}' (presets: {})", arch, name, fmt::join(names, ", ")));
}

std::vector<TensorSpec> tensor_plan(const ModelShape& m, OutFormat f) {
  if (m.arch == "qwen3_5") return qwen35_plan(m, f);
  if (m.arch == "llama") return llama_plan(m, f);
  throw Error(fmt::format("unknown architecture '{}'", m.arch));
}

}  // namespace vi::cli
