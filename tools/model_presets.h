// What `voltinfer make-model` builds: the size presets of each architecture (real model
// shapes: Qwen3.5 0.8B..27B, Llama-3-class 1B..70B, plus tiny ones for tests) and the list
// of tensors a model of that shape holds in each file format — names, shapes, how each is
// initialised and how the llama.cpp converter transforms it on the way into GGUF.
// What does not live here: random numbers, quantization and file writing (cmd_make_model.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vi::cli {

struct ModelShape {
  std::string arch;    // "qwen3_5" | "llama"
  std::string preset;  // "27b", "tiny", ...
  int64_t vocab = 0, d_model = 0, n_layer = 0, d_ff = 0;
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0;
  int64_t rot_dim = 0;  // rotated dims per head (qwen3_5: head_dim * partial_rotary_factor)
  int64_t n_ctx = 0;    // trained context
  double rope_theta = 0, norm_eps = 0;
  bool tied = false;    // lm_head shares the embedding
  // qwen3_5 only (zero for llama)
  int64_t gdn_k_heads = 0, gdn_v_heads = 0, gdn_dk = 0, gdn_dv = 0, conv_kernel = 0;
  int64_t full_interval = 0;         // layer i is full attention iff (i + 1) % interval == 0
  int64_t n_mtp = 0;                 // MTP blocks (written after the main layers)
  std::vector<int64_t> mrope_sections;  // [3], sums to rot_dim / 2

  bool is_full(int64_t layer) const { return arch != "qwen3_5" || (layer + 1) % full_interval == 0; }
  int64_t key_dim() const { return gdn_k_heads * gdn_dk; }
  int64_t value_dim() const { return gdn_v_heads * gdn_dv; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
};

// The preset, or a vi::Error listing the architectures / presets that exist.
ModelShape find_preset(const std::string& arch, const std::string& name);
std::vector<std::string> preset_names(const std::string& arch);
const std::vector<std::string>& known_archs();

// How a tensor's logical (Hugging Face) values are drawn. n ~ a bell-shaped unit variate.
enum class Init : uint8_t {
  kNormal,     // scale * n
  kNormOffset, // scale * n: Qwen3.5 stores RMSNorm weights as w in (1 + w)
  kNormOne,    // 1 + scale * n: norms used as plain multipliers
  kALog,       // log(A), A ~ U(1, 16) (Mamba-style decay rates)
  kDtBias,     // softplus^-1(dt), log dt ~ U(log 1e-3, log 1e-1)
};

// What the writer stores for a logical value v (the llama.cpp converter's transforms).
enum class Store : uint8_t { kAsIs, kPlusOne, kNegExp };

enum class OutFormat : uint8_t { kGguf, kSafetensors };

struct TensorSpec {
  std::string name;            // in the output file
  std::string key;             // Hugging Face name: seeds the values, so GGUF and safetensors
                               // files of one seed hold the same model
  std::vector<int64_t> shape;  // as written, PyTorch order (GGUF conv: [C, K]; HF: [C, 1, K])
  bool matrix = true;          // GGUF: in the requested weight dtype (else f32, as llama.cpp keeps
                               // norms, conv, decay); safetensors: everything in its one dtype
  Init init = Init::kNormal;
  float scale = 1.0f;
  Store store = Store::kAsIs;
  std::vector<int64_t> row_src;  // written row r holds logical row row_src[r] (empty: same row)
  std::vector<int64_t> col_src;  // written column c holds logical column col_src[c] (empty: same)

  int64_t cols() const { return shape.back(); }
  int64_t rows() const;  // product of the outer dimensions
};

// Every tensor of the model in file order.
std::vector<TensorSpec> tensor_plan(const ModelShape& m, OutFormat f);

}  // namespace vi::cli
