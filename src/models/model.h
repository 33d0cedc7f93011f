// The model interface every architecture implements, and the loader entry point.
// A model owns its weights (views into the mapped file, or repacked copies) and runs
// forward passes over a SequenceState that holds the sequence's caches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "core/tensor.h"
#include "core/weights.h"
#include "ops/registry.h"

namespace vi {

struct ModelInfo {
  std::string arch;        // "llama", "qwen2", "qwen3", "qwen3_5"
  std::string name;        // human-readable, from the file
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;  // context length the model was trained for
  int64_t n_layer = 0;
  int64_t d_model = 0;
  int64_t n_params = 0;     // parameters in the loaded weights (excl. unused tensors)
  size_t weight_bytes = 0;  // bytes of weights a forward pass reads
};

// Per-sequence state: KV caches, recurrent states, scratch buffers.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }
  // Forgets tokens from position n on (n <= n_past). Models with recurrent layers keep
  // only the state after the last token, so they can go back only to 0 (a reset).
  virtual void truncate(int64_t n) = 0;
  virtual bool can_truncate_to(int64_t n) const { return n >= 0 && n <= n_past_; }

 protected:
  int64_t n_past_ = 0;
  int64_t capacity_ = 0;
};

// One sequence's part of a batched forward pass.
struct BatchItem {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;  // fed at positions seq->n_past() ...
  bool all_logits = false;          // logits for every token, or only the last
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // A fresh sequence able to hold n_ctx tokens.
  virtual std::unique_ptr<SequenceState> new_sequence(int64_t n_ctx) const = 0;
  // Runs `tokens` at positions seq.n_past() .. n_past+T-1 and appends them to seq.
  // logits: [T, n_vocab] f32 when all_logits, else [1, n_vocab] for the last token.
  // Throws vi::Error (nothing appended) if the tokens do not fit in the sequence's context.
  void forward(ops::Context& ctx, std::span<const int32_t> tokens, SequenceState& seq, Tensor& logits,
               bool all_logits) const {
    BatchItem item{&seq, tokens, all_logits};
    forward_batch(ctx, {&item, 1}, logits);
  }
  // Several sequences in one pass (continuous batching: prefill chunks and decode steps
  // side by side). The weight matmuls run once over all rows; attention and recurrent
  // layers run per sequence. logits: f32 rows in item order — all of an item's tokens
  // when all_logits, else its last one. Validates every item before touching any state.
  virtual void forward_batch(ops::Context& ctx, std::span<const BatchItem> items, Tensor& logits) const = 0;
};

struct LoadOptions {
  // Where weights, caches and activations live (the device the model runs on).
  ops::Context ctx;
  // Called as tensors are prepared: (bytes done, bytes total), for a progress bar.
  std::function<void(size_t, size_t)> progress;
};

// Picks the architecture from the file (GGUF general.architecture or HF model_type /
// architectures) and loads it; throws vi::Error for an unsupported architecture.
std::unique_ptr<Model> load_model(const WeightSource& src, const LoadOptions& opts = {});

}  // namespace vi
