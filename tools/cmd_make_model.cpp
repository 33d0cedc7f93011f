// `voltinfer make-model`: writes a model of a real architecture and size with seeded random
// weights, as a GGUF file (llama.cpp's names, metadata and converter transforms; any weight
// dtype) or a Hugging Face folder (config.json, model.safetensors, tokenizer.json), so that
// a 27B-shaped model can be loaded and benchmarked where the real one cannot be downloaded.
//
// Values: each logical (Hugging Face) element is a pure function of (seed, tensor name, row,
// column) — a counter-based splitmix64 hash — so the bytes do not depend on the thread
// count, and GGUF and safetensors files of one seed hold the same model (the GGUF one after
// llama.cpp's transforms: +1 on norms, -exp(A_log), v-head re-tiling, llama q/k interleave).
// Rows are generated, converted and quantized in parallel chunks and streamed to disk while
// the next chunk is computed; nothing close to the model's size is ever held in memory.
// What does not live here: preset tables and tensor lists (model_presets.cpp).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "core/metadata.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"
#include "tokenizer/byte_level.h"
#include "tools/commands.h"
#include "tools/model_presets.h"

namespace fs = std::filesystem;

namespace vi::cli {

namespace {

struct MakeModelArgs {
  std::string arch, preset, dtype = "f16", format = "gguf", out;
  uint64_t seed = 0;
  int64_t vocab = 0, layers = 0;
  bool mtp = false, no_mtp = false;
  int threads = 0;
};

// ---- counter-based random values ----

inline uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

uint64_t name_hash(const std::string& s) {  // FNV-1a
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Logical row `row` of tensor `key`: out[j] for j in [0, n), drawn from its Init.
void logical_row(const TensorSpec& t, uint64_t tensor_key, int64_t row, float* out, int64_t n) {
  const uint64_t base = mix64(tensor_key ^ mix64(static_cast<uint64_t>(row) * kGolden + 1));
  if (t.init == Init::kALog || t.init == Init::kDtBias) {
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t w = mix64(base + static_cast<uint64_t>(j + 1) * kGolden);
      const double u = (static_cast<double>(w >> 11) + 0.5) * 0x1.0p-53;  // (0, 1)
      if (t.init == Init::kALog) {
        out[j] = static_cast<float>(std::log(1.0 + 15.0 * u));  // A ~ U(1, 16)
      } else {
        const double dt = std::exp(std::log(1e-3) + u * (std::log(1e-1) - std::log(1e-3)));
        out[j] = static_cast<float>(dt + std::log(-std::expm1(-dt)));  // softplus(out) = dt
      }
    }
    return;
  }
  // Irwin-Hall: the sum of four 16-bit uniforms, centred and scaled to unit variance — bell
  // shaped, bounded at ±3.46, and one hash per value.
  const float k = t.scale * (1.7320508f / 65536.0f);
  const float add = t.init == Init::kNormOne ? 1.0f : 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const uint64_t w = mix64(base + static_cast<uint64_t>(j + 1) * kGolden);
    const int64_t s = static_cast<int64_t>(w & 0xffff) + static_cast<int64_t>((w >> 16) & 0xffff) +
                      static_cast<int64_t>((w >> 32) & 0xffff) + static_cast<int64_t>(w >> 48);
    out[j] = static_cast<float>(s - 131070) * k + add;
  }
}

// Written row r of t (after the format's row/column permutations and transforms), as f32.
void written_row(const TensorSpec& t, uint64_t tensor_key, int64_t r, float* out, float* scratch) {
  const int64_t n = t.cols();
  const int64_t lr = t.row_src.empty() ? r : t.row_src[static_cast<size_t>(r)];
  if (t.col_src.empty()) {
    logical_row(t, tensor_key, lr, out, n);
  } else {
    logical_row(t, tensor_key, lr, scratch, n);
    for (int64_t c = 0; c < n; ++c) out[c] = scratch[t.col_src[static_cast<size_t>(c)]];
  }
  if (t.store == Store::kPlusOne) {
    for (int64_t c = 0; c < n; ++c) out[c] += 1.0f;
  } else if (t.store == Store::kNegExp) {
    for (int64_t c = 0; c < n; ++c) out[c] = -std::exp(out[c]);
  }
}

// ---- dtypes ----

// The dtype a tensor is stored in: matrices in the requested one, unless their rows are not
// whole blocks of it (then Q8_0, as llama.cpp falls back to a simpler type, else F16);
// norms, biases, the conv and the decay parameters stay F32 in GGUF as llama.cpp keeps them.
DType tensor_dtype(const TensorSpec& t, DType want, OutFormat f) {
  if (f == OutFormat::kSafetensors) return want;
  if (!t.matrix) return DType::F32;
  const int64_t be = dtype_info(want).block_elems;
  if (t.cols() % be == 0) return want;
  return t.cols() % kQK == 0 ? DType::Q8_0 : DType::F16;
}

// llama.cpp's general.file_type for a model whose matrices are `t`.
int64_t llama_ftype(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q4_1: return 3;
    case DType::Q8_0: return 7;
    case DType::Q4_K: return 14;  // Q4_K_S: every matrix Q4_K
    case DType::Q5_K: return 16;  // Q5_K_S
    case DType::Q6_K: return 18;
    case DType::BF16: return 32;
    default: return 0;
  }
}

// ---- tokenizer: a byte-level BPE vocabulary of the model's size ----

struct Vocab {
  std::vector<std::string> tokens;  // byte-level text
  std::vector<int64_t> types;       // llama.cpp token types: 1 normal, 3 control
  std::vector<std::pair<std::string, std::string>> merges;
  int64_t bos = -1, eos = -1, eot = -1;
  bool add_bos = false;
};

// Ids 0..255: the 256 byte tokens (GPT-2's byte-to-unicode text, in byte order); 256..258:
// control tokens; then two-character tokens over space+letters with their merges (so text
// really goes through BPE); the rest filler pieces no merge produces.
Vocab make_vocab(const ModelShape& m) {
  Vocab v;
  const auto& b2u = tok::byte_to_utf8_table();
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(b2u[static_cast<size_t>(b)]);
    v.types.push_back(1);
  }
  const bool llama = m.arch == "llama";
  const std::vector<std::string> specials =
      llama ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}
            : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (const auto& s : specials) {
    v.tokens.push_back(s);
    v.types.push_back(3);
  }
  if (llama) {
    v.bos = 256, v.eos = 257, v.eot = 258, v.add_bos = true;
  } else {
    v.eos = 256, v.eot = 258;
  }
  std::vector<std::string> chars = {b2u[' ']};
  for (char c = 'a'; c <= 'z'; ++c) chars.push_back(b2u[static_cast<unsigned char>(c)]);
  for (const auto& a : chars) {
    for (const auto& b : chars) {
      if (static_cast<int64_t>(v.tokens.size()) >= m.vocab) break;
      v.tokens.push_back(a + b);
      v.types.push_back(1);
      v.merges.emplace_back(a, b);
    }
  }
  while (static_cast<int64_t>(v.tokens.size()) < m.vocab) {
    v.tokens.push_back(fmt::format("<|filler_{}|>", v.tokens.size()));
    v.types.push_back(1);
  }
  return v;
}

// ---- GGUF metadata ----

MetaValue u32(int64_t v) { return Metadata::make_int(v, formats::kGgufU32); }
MetaValue f32(double v) { return Metadata::make_float(v, formats::kGgufF32); }
MetaValue array_of(std::vector<MetaValue> items, int elem_type) {
  MetaValue a;
  a.kind = MetaValue::Kind::kArray;
  a.gguf_type = formats::kGgufArray;
  a.i = elem_type;  // element type of an empty array
  a.arr = std::move(items);
  return a;
}

void set_gguf_metadata(formats::GgufWriter& w, const ModelShape& m, const Vocab& v, DType dtype, uint64_t seed) {
  const bool qwen = m.arch == "qwen3_5";
  const std::string a = qwen ? "qwen35" : "llama";
  w.set("general.architecture", Metadata::make_string(a));
  w.set("general.name", Metadata::make_string(fmt::format("random-{}-{}", m.arch, m.preset)));
  w.set("general.description",
        Metadata::make_string(fmt::format("random weights written by voltinfer make-model --seed {}", seed)));
  w.set("general.file_type", u32(llama_ftype(dtype)));
  if (dtype_is_quantized(dtype)) w.set("general.quantization_version", u32(2));
  w.set(a + ".context_length", u32(m.n_ctx));
  w.set(a + ".embedding_length", u32(m.d_model));
  w.set(a + ".block_count", u32(m.n_layer + m.n_mtp));  // llama.cpp counts the MTP blocks
  w.set(a + ".feed_forward_length", u32(m.d_ff));
  w.set(a + ".attention.head_count", u32(m.n_head));
  w.set(a + ".attention.head_count_kv", u32(m.n_kv_head));
  w.set(a + ".attention.key_length", u32(m.head_dim));
  w.set(a + ".attention.value_length", u32(m.head_dim));
  w.set(a + ".attention.layer_norm_rms_epsilon", f32(m.norm_eps));
  w.set(a + ".rope.freq_base", f32(m.rope_theta));
  w.set(a + ".rope.dimension_count", u32(m.rot_dim));
  if (qwen) {
    std::vector<MetaValue> sec;
    for (int64_t s : m.mrope_sections) sec.push_back(Metadata::make_int(s, formats::kGgufI32));
    sec.push_back(Metadata::make_int(0, formats::kGgufI32));
    w.set(a + ".rope.dimension_sections", array_of(std::move(sec), formats::kGgufI32));
    w.set(a + ".ssm.conv_kernel", u32(m.conv_kernel));
    w.set(a + ".ssm.state_size", u32(m.gdn_dk));
    w.set(a + ".ssm.group_count", u32(m.gdn_k_heads));
    w.set(a + ".ssm.time_step_rank", u32(m.gdn_v_heads));
    w.set(a + ".ssm.inner_size", u32(m.value_dim()));
    w.set(a + ".full_attention_interval", u32(m.full_interval));
    if (m.n_mtp > 0) w.set(a + ".nextn_predict_layers", u32(m.n_mtp));
  } else {
    w.set(a + ".vocab_size", u32(m.vocab));
  }
  w.set("tokenizer.ggml.model", Metadata::make_string("gpt2"));
  w.set("tokenizer.ggml.pre", Metadata::make_string(qwen ? "qwen35" : "llama-bpe"));
  std::vector<MetaValue> toks, types, merges;
  toks.reserve(v.tokens.size());
  for (const auto& t : v.tokens) toks.push_back(Metadata::make_string(t));
  for (int64_t t : v.types) types.push_back(Metadata::make_int(t, formats::kGgufI32));
  for (const auto& [l, r] : v.merges) merges.push_back(Metadata::make_string(l + " " + r));
  w.set("tokenizer.ggml.tokens", array_of(std::move(toks), formats::kGgufString));
  w.set("tokenizer.ggml.token_type", array_of(std::move(types), formats::kGgufI32));
  w.set("tokenizer.ggml.merges", array_of(std::move(merges), formats::kGgufString));
  if (v.bos >= 0) w.set("tokenizer.ggml.bos_token_id", u32(v.bos));
  w.set("tokenizer.ggml.eos_token_id", u32(v.eos));
  w.set("tokenizer.ggml.eot_token_id", u32(v.eot));
  w.set("tokenizer.ggml.padding_token_id", u32(v.eos));
  w.set("tokenizer.ggml.add_bos_token", Metadata::make_bool(v.add_bos));
}

// ---- Hugging Face side files ----

nlohmann::json hf_config(const ModelShape& m, DType dtype, const Vocab& v) {
  using nlohmann::json;
  const char* torch_dtype = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  json c;
  c["hidden_size"] = m.d_model;
  c["num_hidden_layers"] = m.n_layer;
  c["intermediate_size"] = m.d_ff;
  c["num_attention_heads"] = m.n_head;
  c["num_key_value_heads"] = m.n_kv_head;
  c["head_dim"] = m.head_dim;
  c["hidden_act"] = "silu";
  c["vocab_size"] = m.vocab;
  c["max_position_embeddings"] = m.n_ctx;
  c["rms_norm_eps"] = m.norm_eps;
  c["tie_word_embeddings"] = m.tied;
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["initializer_range"] = 0.02;
  c["use_cache"] = true;
  c["dtype"] = torch_dtype;
  if (v.bos >= 0) c["bos_token_id"] = v.bos;
  c["eos_token_id"] = v.eos;
  if (m.arch == "qwen3_5") {
    const double factor = static_cast<double>(m.rot_dim) / static_cast<double>(m.head_dim);
    c["architectures"] = json::array({"Qwen3_5ForCausalLM"});
    c["model_type"] = "qwen3_5_text";
    c["partial_rotary_factor"] = factor;
    c["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", m.rope_theta},
                            {"partial_rotary_factor", factor},
                            {"mrope_section", m.mrope_sections},
                            {"mrope_interleaved", true}};
    json types = json::array();
    for (int64_t i = 0; i < m.n_layer; ++i) types.push_back(m.is_full(i) ? "full_attention" : "linear_attention");
    c["layer_types"] = types;
    c["full_attention_interval"] = m.full_interval;
    c["attn_output_gate"] = true;
    c["linear_conv_kernel_dim"] = m.conv_kernel;
    c["linear_num_key_heads"] = m.gdn_k_heads;
    c["linear_num_value_heads"] = m.gdn_v_heads;
    c["linear_key_head_dim"] = m.gdn_dk;
    c["linear_value_head_dim"] = m.gdn_dv;
    c["mamba_ssm_dtype"] = "float32";
    c["mtp_num_hidden_layers"] = m.n_mtp;
    c["mtp_use_dedicated_embeddings"] = false;
  } else {
    c["architectures"] = json::array({"LlamaForCausalLM"});
    c["model_type"] = "llama";
    c["rope_theta"] = m.rope_theta;
    c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", m.rope_theta}};
    c["mlp_bias"] = false;
    c["pretraining_tp"] = 1;
  }
  return c;
}

nlohmann::json hf_tokenizer(const Vocab& v) {
  using nlohmann::json;
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = i;
  json merges = json::array();
  for (const auto& [l, r] : v.merges) merges.push_back(json::array({l, r}));
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (v.types[i] != 3) continue;
    added.push_back({{"id", i}, {"content", v.tokens[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json post = byte_level;
  if (v.add_bos) {
    const std::string bos = v.tokens[static_cast<size_t>(v.bos)];
    json tok = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({tok, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array({tok, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, tok,
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", json::array({v.bos})}, {"tokens", json::array({bos})}}}}}};
  }
  json model = {{"type", "BPE"},           {"dropout", nullptr},
                {"unk_token", nullptr},     {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false},   {"ignore_merges", false},
                {"vocab", vocab},           {"merges", merges}};
  return {{"version", "1.0"},        {"truncation", nullptr}, {"padding", nullptr},
          {"added_tokens", added},   {"normalizer", nullptr}, {"pre_tokenizer", byte_level},
          {"post_processor", post},  {"decoder", byte_level}, {"model", model}};
}

nlohmann::json hf_tokenizer_config(const Vocab& v, const ModelShape& m) {
  nlohmann::json c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                      {"model_max_length", m.n_ctx},
                      {"eos_token", v.tokens[static_cast<size_t>(v.eos)]},
                      {"pad_token", v.tokens[static_cast<size_t>(v.eos)]},
                      {"add_bos_token", v.add_bos}};
  if (v.bos >= 0) c["bos_token"] = v.tokens[static_cast<size_t>(v.bos)];
  return c;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  VI_CHECK(f.good(), "cannot write {}", p.string());
  f << text;
  VI_CHECK(f.good(), "writing {} failed", p.string());
}

// ---- streaming the tensor data ----

class Progress {
 public:
  Progress(size_t total) : total_(total), tty_(isatty(STDERR_FILENO)), t0_(Clock::now()) {}
  void update(size_t done, const std::string& tensor) {
    const double f = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
    const double s = seconds();
    const double rate = s > 0 ? static_cast<double>(done) / s : 0;
    const double eta = rate > 0 ? static_cast<double>(total_ - done) / rate : 0;
    const int pct = static_cast<int>(f * 100);
    if (!tty_ && pct / 10 == last_ / 10) return;  // a line per 10% into logs
    if (tty_ && s - last_print_ < 0.2 && done != total_) return;
    last_ = pct;
    last_print_ = s;
    std::fprintf(stderr, "%s%3d%%  %7.2f / %.2f GB  %6.0f MB/s  ETA %4.0f s  %-40s%s", tty_ ? "\r" : "  ", pct,
                 static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9, rate / 1e6, eta,
                 tensor.c_str(), tty_ ? "" : "\n");
    std::fflush(stderr);
  }
  void done() {
    if (tty_) std::fprintf(stderr, "\n");
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  size_t total_;
  bool tty_;
  Clock::time_point t0_;
  int last_ = -100;
  double last_print_ = -1;
};

using Sink = std::function<void(const void*, size_t)>;

// Generates every tensor in order into ~32 MB chunks of rows (rows in parallel, each
// thread with its own thread_local scratch rows), handing each finished chunk to `sink` on a second
// thread while the next one is computed.
void stream_tensors(const std::vector<TensorSpec>& plan, const std::vector<DType>& dtypes, uint64_t seed,
                    const Sink& sink, Progress& progress) {
  ThreadPool& pool = ThreadPool::global();
  std::vector<uint8_t> bufs[2];
  int cur = 0;
  std::future<void> pending;
  size_t done = 0;
  constexpr size_t kChunkBytes = size_t{32} << 20;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const TensorSpec& t = plan[ti];
    const DType dt = dtypes[ti];
    const int64_t n = t.cols(), R = t.rows();
    const size_t row_bytes = dtype_row_bytes(dt, n);
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / row_bytes));
    const uint64_t key = mix64(seed ^ mix64(name_hash(t.key)));
    for (int64_t r0 = 0; r0 < R; r0 += chunk) {
      const int64_t r1 = std::min(R, r0 + chunk);
      std::vector<uint8_t>& buf = bufs[cur];
      buf.resize(static_cast<size_t>(r1 - r0) * row_bytes);
      pool.parallel_for(r1 - r0, 1, [&](int64_t a, int64_t b, int) {
        thread_local std::vector<float> row, tmp;  // scratch rows of the calling thread
        if (static_cast<int64_t>(row.size()) < n) row.resize(static_cast<size_t>(n)), tmp.resize(static_cast<size_t>(n));
        for (int64_t i = a; i < b; ++i) {
          written_row(t, key, r0 + i, row.data(), tmp.data());
          quantize_row(dt, row.data(), buf.data() + static_cast<size_t>(i) * row_bytes, n);
        }
      });
      if (pending.valid()) pending.get();
      pending = std::async(std::launch::async, [&sink, p = buf.data(), sz = buf.size()] { sink(p, sz); });
      cur ^= 1;
      done += buf.size();
      progress.update(done, t.name);
    }
  }
  if (pending.valid()) pending.get();
}

// Refuses to start when the file cannot fit, rather than failing part-way through.
void check_disk_space(const fs::path& dir, size_t need) {
  std::error_code ec;
  const fs::space_info s = fs::space(dir, ec);
  VI_CHECK(!ec, "cannot read the free space of {}: {}", dir.string(), ec.message());
  const size_t margin = size_t{64} << 20;
  if (s.available < need + margin) {
    throw Error(fmt::format("not enough free disk space in {}: the model needs {:.2f} GB, {:.2f} GB are free",
                            dir.string(), static_cast<double>(need) / 1e9, static_cast<double>(s.available) / 1e9));
  }
}

void run_make_model(const MakeModelArgs& a) {
  if (a.threads > 0) ThreadPool::set_default_threads(a.threads);
  ModelShape m = find_preset(a.arch, a.preset);
  const OutFormat fmt_out = a.format == "gguf" ? OutFormat::kGguf : OutFormat::kSafetensors;
  const DType dtype = dtype_from_name(a.dtype);
  VI_CHECK(quant_supported(dtype), "--dtype {} is not a weight dtype (f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)",
           a.dtype);
  if (fmt_out == OutFormat::kSafetensors && dtype_is_quantized(dtype))
    throw Error(fmt::format("--dtype {}: safetensors output holds f32, f16 or bf16 weights only (use --format gguf)",
                            a.dtype));
  if (a.vocab) {
    VI_CHECK(a.vocab >= 259, "--vocab {} is too small: the vocabulary needs 256 byte tokens and 3 control tokens",
             a.vocab);
    m.vocab = a.vocab;
  }
  if (a.layers) {
    VI_CHECK(a.layers >= 1, "--layers {} must be at least 1", a.layers);
    m.n_layer = a.layers;
  }
  VI_CHECK(!(a.mtp && a.no_mtp), "--mtp and --no-mtp contradict each other");
  if (a.mtp) {
    VI_CHECK(m.arch == "qwen3_5", "--mtp: architecture {} has no MTP head", m.arch);
    m.n_mtp = 1;
  }
  if (a.no_mtp) m.n_mtp = 0;

  const std::vector<TensorSpec> plan = tensor_plan(m, fmt_out);
  std::vector<DType> dtypes;
  size_t data_bytes = 0;
  int64_t n_params = 0, n_fallback = 0;
  for (const TensorSpec& t : plan) {
    DType d = tensor_dtype(t, dtype, fmt_out);
    if (t.matrix && d != dtype) ++n_fallback;
    dtypes.push_back(d);
    data_bytes += dtype_row_bytes(d, t.cols()) * static_cast<size_t>(t.rows()) + 32;
    n_params += t.rows() * t.cols();
  }
  const Vocab vocab = make_vocab(m);
  size_t vocab_bytes = 0;
  for (const auto& s : vocab.tokens) vocab_bytes += s.size() + 24;
  const size_t need = data_bytes + 2 * vocab_bytes + plan.size() * 128 + (size_t{1} << 20);

  const fs::path out(a.out);
  fs::path dir = fmt_out == OutFormat::kGguf ? out.parent_path() : out;
  if (dir.empty()) dir = ".";
  if (fmt_out == OutFormat::kSafetensors) {
    VI_CHECK(!fs::exists(out) || fs::is_directory(out), "{} exists and is not a folder (safetensors output is a folder)",
             out.string());
    fs::create_directories(out);
  } else {
    VI_CHECK(fs::is_directory(dir), "the folder of {} does not exist", out.string());
    VI_CHECK(!fs::is_directory(out), "{} is a folder; GGUF output is a file", out.string());
  }
  check_disk_space(dir, need);

  std::fprintf(stderr, "make-model: %s %s, %s %s, %lld layers%s, vocab %lld, %.3fB params, %.2f GB, seed %llu\n",
               m.arch.c_str(), m.preset.c_str(), fmt_out == OutFormat::kGguf ? "gguf" : "safetensors",
               dtype_name(dtype), static_cast<long long>(m.n_layer), m.n_mtp ? " + MTP" : "",
               static_cast<long long>(m.vocab), static_cast<double>(n_params) / 1e9,
               static_cast<double>(data_bytes) / 1e9, static_cast<unsigned long long>(a.seed));
  if (n_fallback)
    std::fprintf(stderr, "make-model: %lld matrices have rows that are not whole %s blocks: stored as q8_0/f16\n",
                 static_cast<long long>(n_fallback), dtype_name(dtype));

  // Written under a temporary name and renamed at the end, so a failed or interrupted run
  // never leaves a truncated file that looks like a model.
  const fs::path data_path = fmt_out == OutFormat::kGguf ? out : out / "model.safetensors";
  const fs::path tmp = data_path.string() + ".partial";
  Progress progress(data_bytes);
  try {
    if (fmt_out == OutFormat::kGguf) {
      formats::GgufWriter w(tmp.string());
      set_gguf_metadata(w, m, vocab, dtype, a.seed);
      for (size_t i = 0; i < plan.size(); ++i) w.add_tensor_info(plan[i].name, dtypes[i], plan[i].shape);
      w.write_header();
      stream_tensors(plan, dtypes, a.seed, [&w](const void* p, size_t n) { w.write_tensor_data(p, n); }, progress);
      w.finish();
    } else {
      formats::SafetensorsWriter w(tmp.string());
      w.set_metadata("format", "pt");
      for (size_t i = 0; i < plan.size(); ++i) w.add_tensor_info(plan[i].name, dtypes[i], plan[i].shape);
      w.write_header();
      stream_tensors(plan, dtypes, a.seed, [&w](const void* p, size_t n) { w.write_tensor_data(p, n); }, progress);
      w.finish();
    }
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  progress.done();
  fs::rename(tmp, data_path);
  if (fmt_out == OutFormat::kSafetensors) {
    write_text(out / "config.json", hf_config(m, dtype, vocab).dump(2) + "\n");
    write_text(out / "tokenizer.json", hf_tokenizer(vocab).dump() + "\n");
    write_text(out / "tokenizer_config.json", hf_tokenizer_config(vocab, m).dump(2) + "\n");
  }
  const double s = progress.seconds();
  std::fprintf(stderr, "wrote %s: %zu tensors, %.3fB params, %.2f GB in %.1f s (%.0f MB/s)\n", out.c_str(),
               plan.size(), static_cast<double>(n_params) / 1e9, static_cast<double>(fs::file_size(data_path)) / 1e9,
               s, s > 0 ? static_cast<double>(data_bytes) / s / 1e6 : 0.0);
}

}  // namespace

void register_make_model(CLI::App& app) {
  auto a = std::make_shared<MakeModelArgs>();
  CLI::App* cmd = app.add_subcommand(
      "make-model",
      "Write a model of a real architecture and size with seeded random weights (GGUF file or HF folder)");
  cmd->add_option("--arch", a->arch, "Architecture: qwen3_5 or llama")->required();
  cmd->add_option("--preset", a->preset,
                  "Size: qwen3_5 0.8b, 2b, 4b, 9b, 27b, tiny; llama 135m, 1b, 3b, 8b, 70b, tiny")
      ->required();
  cmd->add_option("--dtype", a->dtype,
                  "Weight dtype of the large matrices: f32, f16, bf16, q8_0, q4_0, q4_1, q4_k, q5_k, q6_k "
                  "(safetensors: f32, f16, bf16)")
      ->capture_default_str();
  cmd->add_option("--format", a->format, "gguf (one file) or safetensors (a Hugging Face folder)")
      ->check(CLI::IsMember({"gguf", "safetensors"}))
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Random seed; the same seed gives the same bytes")->required();
  cmd->add_option("-o,--output", a->out, "Output: a .gguf file, or a folder for safetensors")->required();
  cmd->add_option("--vocab", a->vocab, "Vocabulary size (default: the preset's)");
  cmd->add_option("--layers", a->layers, "Number of layers (default: the preset's)");
  cmd->add_flag("--mtp", a->mtp, "Add the MTP head (qwen3_5; the default for qwen3_5 presets)");
  cmd->add_flag("--no-mtp", a->no_mtp, "Leave the MTP head out");
  cmd->add_option("-t,--threads", a->threads, "CPU threads; 0 = one per hardware thread")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([a] { run_make_model(*a); });
}

}  // namespace vi::cli
