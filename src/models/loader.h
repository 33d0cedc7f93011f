// Helpers shared by the model files for loading weights: name lookup in either
// naming scheme (GGUF or Hugging Face), shape checks, parameter/byte accounting and
// load progress. Kept separate so each model file reads like its tensor list.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "core/weights.h"
#include "ops/prepare_matmul_weight.h"
#include "ops/registry.h"

namespace vi {

class WeightLoader {
 public:
  WeightLoader(const WeightSource& src, std::function<void(size_t, size_t)> progress);

  bool gguf() const { return src_.format() == WeightFormat::kGguf; }
  const WeightSource& source() const { return src_; }

  // The tensor named `gguf_name` or `hf_name` (whichever scheme the file uses), checked
  // against `shape`; faults its pages in (so the first forward pass is not the one that
  // reads the disk) and counts it.
  Tensor load(const std::string& gguf_name, const std::string& hf_name,
              const std::vector<int64_t>& shape);
  // Same, but returns nullopt when the file has no such tensor.
  std::optional<Tensor> load_optional(const std::string& gguf_name, const std::string& hf_name,
                                      const std::vector<int64_t>& shape);
  // A tensor by its exact name in the file (no prefix), or nullopt when absent.
  std::optional<Tensor> load_optional_exact(const std::string& name, const std::vector<int64_t>& shape);
  // A small tensor (norm weight, bias, ...) converted to an owned f32 copy.
  Tensor load_f32(const std::string& gguf_name, const std::string& hf_name,
                  const std::vector<int64_t>& shape);

  // Hugging Face names may carry a prefix ("model." or "model.language_model.").
  void set_hf_prefix(std::string p) { hf_prefix_ = std::move(p); }
  const std::string& hf_prefix() const { return hf_prefix_; }

  int64_t n_params() const { return n_params_; }
  size_t bytes() const { return bytes_; }
  void add_bytes(size_t b) { bytes_ += b; }
  void finish();  // reports 100% progress

 private:
  std::string resolve(const std::string& gguf_name, const std::string& hf_name) const;
  void touch(const Tensor& t);

  const WeightSource& src_;
  std::function<void(size_t, size_t)> progress_;
  std::string hf_prefix_;
  size_t total_bytes_ = 0;
  size_t done_bytes_ = 0;
  int64_t n_params_ = 0;
  size_t bytes_ = 0;
};

// Moves weights to ctx's device in place (a no-op on the CPU); tensors never loaded
// (optional weights a model lacks) are skipped. 2-D weights other than the token embedding
// are matmul weights and get the device's layout (ops::prepare_matmul_weight).
void to_device(ops::Context& ctx, std::initializer_list<Tensor*> ts);
// to_device for a stack of matmul weights (a loaded stack, skipped if not), then stacked_views
// of it: the device layout is chosen so that every part stays a row view of it. input: what
// writes the stack's activations (ops::MatmulInput; kNorm for the projections after a norm).
// use kSwiglu (a gate|up stack read only whole, ops::MatmulUse): the device may choose a layout
// without row views; the parts are then left empty (no data), and callers read the stack.
void to_device_stacked(ops::Context& ctx, Tensor& stack, std::initializer_list<Tensor*> parts,
                       ops::MatmulInput input = ops::MatmulInput::kAny, ops::MatmulUse use = ops::MatmulUse::kRows);

// Sets every byte of t to zero on whatever device it lives (recurrent states at a reset).
void zero_fill(ops::Context& ctx, Tensor& t);

// A model's logits as the runtime reads them: a host f32 tensor. Device logits (in the
// context's activation dtype) are downloaded and widened; host f32 logits pass through.
Tensor logits_to_host_f32(ops::Context& ctx, const Tensor& logits);

// Converts any tensor (f32/f16/bf16/quantized) on the host to an owned f32 tensor.
Tensor to_f32(const Tensor& t);
// Returns an owned copy whose row r is t's row idx[r] (rows over the outer dims; the
// result has idx.size() rows and t's row width). Works on quantized rows too.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& idx);
// Columns [c0, c1) of every row of a host 2-D tensor as an owned copy; for a quantized dtype
// both must fall on its block boundaries (the column blocks of a matrix whose input is a
// concatenation, e.g. the MTP head's fc over [embedding | hidden]).
Tensor slice_cols(const Tensor& t, int64_t c0, int64_t c1);
// The rows of every tensor in `parts`, in order, as one owned host tensor (one dtype and row
// width; quantized rows too).
Tensor concat_rows(const std::vector<const Tensor*>& parts);
// Makes each of `parts` (the row blocks of `stack`, in order) a row view of it, keeping
// their names: weights stacked for one matmul are then held once, wherever the stack lives
// (called again after the stack moves to a device). Their rows must add up to the stack's.
void stacked_views(const Tensor& stack, std::initializer_list<Tensor*> parts);
// gather_rows with a full permutation (same shape as t).
Tensor permute_rows(const Tensor& t, const std::vector<int64_t>& perm);

}  // namespace vi
