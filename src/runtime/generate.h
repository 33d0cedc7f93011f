// The single-sequence generation loop: prefill the prompt in chunks, then sample one
// token per forward pass until a stop token, the token budget or the callback ends it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace vi {

struct GenerateOptions {
  int64_t n_predict = 256;        // < 0: until a stop token or the context is full
  int64_t n_batch = 512;          // prompt tokens per forward pass during prefill
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // end-of-generation ids (EOS, end of turn)
  // Speculative decoding (runtime/speculative.h): the same tokens in fewer passes. spec_session:
  // the sequence's session, kept across calls (chat turns); null: one for this call only.
  SpecOptions spec;
  SpecSession* spec_session = nullptr;
};

enum class FinishReason { kStop, kLength, kContextFull, kCancelled };

struct GenerateStats {
  int64_t prompt_tokens = 0;     // tokens fed in this call
  int64_t generated_tokens = 0;  // tokens sampled (incl. a final stop token)
  double prefill_ms = 0;         // time to the first sampled token
  double decode_ms = 0;          // time for the remaining tokens
  FinishReason finish = FinishReason::kStop;
  SpecStats spec;                // this call's speculation (all zero without it)
};

// Appends `prompt` to `seq`, then generates. on_token(id) is called for every sampled
// token except stop tokens; it returns false to stop (FinishReason::kCancelled).
// Sampled tokens are fed back, except the last one (a stop token, or the one that used
// up n_predict), which needs no forward pass. `history` receives exactly the tokens
// appended to `seq`, so the two stay in step across calls (multi-turn chat).
GenerateStats generate(const Model& model, ops::Context& ctx, SequenceState& seq,
                       std::span<const int32_t> prompt, const GenerateOptions& opts,
                       std::vector<int32_t>& history, const std::function<bool(int32_t)>& on_token);

// Feeds tokens without sampling (prefill in chunks); returns the logits of the last one
// (host f32, or left on the model's device).
Tensor prefill(const Model& model, ops::Context& ctx, SequenceState& seq, std::span<const int32_t> tokens,
               int64_t n_batch, LogitsOn where = LogitsOn::kHostF32);

}  // namespace vi
