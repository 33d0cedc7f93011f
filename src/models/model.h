// The model interface every architecture implements, and the loader entry point.
// A model owns its weights (views into the mapped file, or repacked copies) and runs
// forward passes over a SequenceState that holds the sequence's caches.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

// --- paged KV cache ---
// KV storage shared by sequences: for every attention layer a K and a V pool of
// n_blocks fixed-size blocks. A sequence reaches its rows through its block table
// (position p sits in pool row block_table[p / block_size] * block_size + p % block_size),
// so sequences with a common prefix can share blocks (runtime/kv_cache.h manages them).
struct KvPool {
  int64_t block_size = 0;  // tokens per block
  int64_t n_blocks = 0;
  // Two per attention layer, in layer order (K then V): [n_blocks * block_size, Hkv*hd] in
  // the cache dtype (f32, f16, or i8: ops/kv_quant.h).
  std::vector<Tensor> tensors;
  // Per i8 tensor its scale [n_blocks * block_size, Hkv] f32 (an empty Tensor for a float
  // one); empty when no tensor is i8. Rows move with the tensors' rows.
  std::vector<Tensor> scales;
};

// Element types of the KV cache: f32, f16 or i8 (K and V separately); unset: the
// activation dtype of the device.
struct KvCacheTypes {
  std::optional<DType> k, v;
};

constexpr int64_t kDefaultKvBlockSize = 16;

// Per-sequence state: block table into a KV pool, recurrent states, scratch buffers.
class SequenceState {
 public:
  virtual ~SequenceState() = default;
  int64_t n_past() const { return n_past_; }
  int64_t capacity() const { return capacity_; }
  // Forgets tokens from position n on (n <= n_past). Models with recurrent layers keep
  // only the state after the last token, so they can go back only to 0 (a reset).
  virtual void truncate(int64_t n) = 0;
  virtual bool can_truncate_to(int64_t n) const { return n >= 0 && n <= n_past_; }

  KvPool& kv_pool() const { return *pool_; }
  const std::shared_ptr<KvPool>& kv_pool_owner() const { return pool_; }  // to share the pool
  // Pool block of each run of block_size positions; must cover n_past + new tokens before
  // a forward pass. Sequences made by Model::new_sequence(n_ctx) own a private pool and a
  // full identity table; engine sequences get theirs from the cache manager.
  std::vector<int32_t>& block_table() { return block_table_; }
  const std::vector<int32_t>& block_table() const { return block_table_; }
  // Views of the tensors that carry the recurrent state after the last token (GDN conv
  // and delta-rule states), in a fixed order; empty for pure attention models. The cache
  // manager snapshots and restores them.
  virtual std::vector<Tensor> recurrent_state() const { return {}; }
  // The caller has put valid KV (through the block table) for tokens [0, n) and the
  // recurrent state after token n-1 in place (a prefix-cache hit): continue from there.
  void resume_at(int64_t n);

  // --- going back inside the last pass (speculative decoding) ---
  // Goes back to n tokens, where n is the length before the last pass plus 1 .. its tokens,
  // or any length truncate() takes. A model with recurrent state can do the former only
  // for a pass whose item asked for checkpoints (BatchItem::checkpoints). Returns false
  // (nothing changed) where it cannot.
  bool rollback(int64_t n);
  // Buffers for the recurrent state after each of up to n tokens of one pass (made before a
  // pass that asks for them, so that nothing allocates inside a recorded step).
  virtual void reserve_checkpoints(int64_t n) { (void)n; }
  // Those buffers, in a fixed order (a recorded step writes them: part of its key).
  virtual std::vector<Tensor> checkpoint_state() const { return {}; }

 protected:
  friend class Model;
  void advance(int64_t t) { n_past_ += t; }  // after a forward pass appended t tokens
  // Makes checkpoint j (the recurrent state after token j + 1 of the last pass) current.
  virtual void restore_checkpoint(int64_t j) { (void)j; }

  int64_t n_past_ = 0;
  // The last pass with checkpoints: its start and how many checkpoints it left (0: none valid).
  int64_t ckpt_base_ = 0, ckpt_count_ = 0;
  int64_t capacity_ = 0;
  std::shared_ptr<KvPool> pool_;
  std::vector<int32_t> block_table_;
};
// --- end paged KV cache ---

// Where a forward pass leaves its logits.
enum class LogitsOn { kHostF32, kDevice };

// One sequence's part of a batched forward pass.
struct BatchItem {
  SequenceState* seq = nullptr;
  std::span<const int32_t> tokens;  // fed at positions seq->n_past() ...
  bool all_logits = false;          // logits for every token, or only the last
  // Keep the recurrent state after each token but the last, so that SequenceState::rollback
  // can go back to any length inside this pass (speculative decoding's verify pass).
  bool checkpoints = false;
};

struct BatchPlan;
struct StepRunner;  // the step arena and recorded decode steps (models/step_runner.h)

class Model {
 public:
  Model();
  virtual ~Model();
  virtual const ModelInfo& info() const = 0;
  // A fresh sequence able to hold n_ctx tokens, with a private KV pool.
  std::unique_ptr<SequenceState> new_sequence(int64_t n_ctx) const;
  // --- paged KV cache ---
  // A KV pool of n_blocks blocks of block_size tokens on the model's device.
  virtual std::shared_ptr<KvPool> new_kv_pool(int64_t n_blocks, int64_t block_size) const = 0;
  // A sequence of up to n_ctx tokens whose KV lives in `pool` (empty block table: the
  // caller fills it before each forward pass).
  virtual std::unique_ptr<SequenceState> new_paged_sequence(int64_t n_ctx, std::shared_ptr<KvPool> pool) const = 0;
  // --- end paged KV cache ---
  // Runs `tokens` at positions seq.n_past() .. n_past+T-1 and appends them to seq.
  // logits: [T, n_vocab] f32 when all_logits, else [1, n_vocab] for the last token.
  // Throws vi::Error (nothing appended) if the tokens do not fit in the sequence's context.
  void forward(ops::Context& ctx, std::span<const int32_t> tokens, SequenceState& seq, Tensor& logits,
               bool all_logits, LogitsOn where = LogitsOn::kHostF32) const {
    BatchItem item{&seq, tokens, all_logits};
    forward_batch(ctx, {&item, 1}, logits, where);
  }
  // Several sequences in one pass (continuous batching: prefill chunks and decode steps
  // side by side). The weight matmuls run once over all rows; attention and recurrent
  // layers run per sequence. logits: rows in item order — all of an item's tokens when
  // all_logits, else its last one — as host f32, or (LogitsOn::kDevice) left on the
  // model's device in its activation dtype, for ops::sample there. Validates every item
  // before touching any state.
  //
  // Small steps (decode, verification: up to kMaxRecordedRows rows) with device logits on a
  // device that records (ops/graph.h) and ctx.graphs set are recorded once per shape —
  // sequences, tokens per sequence, key-length bucket — and replayed after: one launch, no
  // host work between kernels. Their device logits are then the recording's output buffer,
  // valid until the next step of that shape.
  void forward_batch(ops::Context& ctx, std::span<const BatchItem> items, Tensor& logits) const {
    forward_batch(ctx, items, logits, LogitsOn::kHostF32);
  }
  // hidden (not null): also the final hidden state of every row, [n_rows, d_model] in the
  // activation dtype on the model's device — the output norm's output, what the LM head
  // multiplies; a draft head's input. From a recorded step it is the recording's buffer, valid
  // until the next step of that shape (as the device logits are).
  void forward_batch(ops::Context& ctx, std::span<const BatchItem> items, Tensor& logits, LogitsOn where,
                     Tensor* hidden = nullptr) const;

  // Recorded steps so far: made (recordings) and run (replays).
  struct StepStats {
    int64_t recorded = 0, replayed = 0, eager = 0;
    // The latest recording's kernels behind memory (ops::GraphShape): 0 for a well-formed step.
    int64_t kernels_behind_memory = 0;
  };
  StepStats step_stats() const;
  StepStats draft_step_stats() const;  // the draft head's passes (draft_forward)

  static constexpr int64_t kMaxRecordedRows = 8;

  // --- draft head (speculative decoding; runtime/speculative.h) ---
  // A model may carry a head that proposes the token after next from the final hidden state
  // (Qwen3.5's MTP block). Its attention layers are the last layers of the model's KV pools,
  // so its cache lives in the main sequence's blocks (and a cached prefix brings it along);
  // a draft sequence made by new_draft_sequence reads them through the main sequence's block
  // table, slot t holding the head's K/V for main position t.
  virtual bool has_draft_head() const { return false; }
  // The draft-head sequence of `main` (made by this model; it must outlive the draft
  // sequence). Throws vi::Error when the model has no draft head.
  virtual std::unique_ptr<SequenceState> new_draft_sequence(const SequenceState& main) const;
  // Runs the head over T slots appended to dseq at positions dseq.n_past() ..: slot i takes
  // hidden[i] (a final hidden state, or the head's own output for a recursive draft) and
  // tokens[i] (the token that follows that position). logits (not null): [1, n_vocab] of the
  // last slot (where: host f32 or the device; null when only the cache is wanted: no LM head);
  // head_out: [1, d_model] the head's normed output of the last slot (the hidden input of a
  // recursive step), activation dtype, on the device.
  // Passes of up to kMaxRecordedRows slots whose logits (if any) stay on the device are recorded
  // and replayed as forward_batch's steps are (the hidden input is copied into the recording's
  // input buffer first); logits and head_out are then the recording's buffers, valid until the
  // next draft pass of that shape.
  void draft_forward(ops::Context& ctx, SequenceState& dseq, std::span<const int32_t> tokens, const Tensor& hidden,
                     Tensor* logits, Tensor& head_out, LogitsOn where) const;

 protected:
  // Whether passes may be recorded (ops/graph.h). A model split over GPU ranks says no: a
  // recording would have to follow every rank's stream, and its passes wait for the GPU.
  virtual bool recordable() const { return true; }
  // The architecture's forward pass over a validated, staged plan (inputs in plan.dev). With
  // device logits it must only queue device work (no host waits or reads of device data,
  // nothing kept past the call but the logits), so that it can be recorded. Does not advance
  // the sequences. hidden (not null): the final hidden state of every row into *hidden
  // ([n_rows, d_model], activation dtype).
  virtual void forward_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                            Tensor& logits, LogitsOn where, Tensor* hidden) const = 0;
  // The draft head's part of draft_forward. draft_begin: checks the call (T slots, hidden [T,
  // d_model]) and readies dseq (throws vi::Error where the model has no draft head); draft_plan:
  // the head's pass over the staged plan, with forward_plan's rules (only device work when the
  // logits stay on the device; null logits: no LM head), head_out as draft_forward's.
  virtual void draft_begin(const ops::Context& ctx, SequenceState& dseq, int64_t T, const Tensor& hidden) const;
  virtual void draft_plan(ops::Context& ctx, const BatchPlan& plan, std::span<const BatchItem> items,
                          const Tensor& hidden, Tensor* logits, Tensor& head_out, LogitsOn where) const;

 private:
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<StepRunner> draft_runner_;  // the draft head's passes: their arena and recordings
};

struct LoadOptions {
  // Where weights, caches and activations live (the device the model runs on).
  ops::Context ctx;
  // Called as tensors are prepared: (bytes done, bytes total), for a progress bar.
  std::function<void(size_t, size_t)> progress;
  KvCacheTypes kv_types;  // the KV pools the model makes
  // Load the model's draft head (Qwen3.5's MTP block), if the file has one, for speculative
  // decoding: its weights on the device and its layer in every KV pool. Off: the model has none.
  bool draft_head = false;
  // Ranks of a tensor-parallel group the model is split over (models/tensor_parallel.h); 1: not
  // split. Llama-family and Qwen3.5 models on CPU ranks so far; other cases are refused with the
  // reason.
  int tp = 1;
};

// Picks the architecture from the file (GGUF general.architecture or HF model_type /
// architectures) and loads it; throws vi::Error for an unsupported architecture.
std::unique_ptr<Model> load_model(const WeightSource& src, const LoadOptions& opts = {});

}  // namespace vi
