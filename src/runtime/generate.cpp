#include "runtime/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"

namespace vi {

Tensor prefill(const Model& model, ops::Context& ctx, SequenceState& seq, std::span<const int32_t> tokens,
               int64_t n_batch, LogitsOn where) {
  VI_CHECK(!tokens.empty(), "prefill needs at least one token");
  VI_CHECK(seq.n_past() + static_cast<int64_t>(tokens.size()) <= seq.capacity(),
           "the prompt needs {} tokens but the context holds {} ({} already used); raise -c/--ctx-size",
           tokens.size(), seq.capacity(), seq.n_past());
  Tensor logits;
  n_batch = std::max<int64_t>(n_batch, 1);
  for (size_t i = 0; i < tokens.size(); i += n_batch) {
    size_t n = std::min<size_t>(n_batch, tokens.size() - i);
    model.forward(ctx, tokens.subspan(i, n), seq, logits, /*all_logits=*/false, where);
  }
  return logits;
}

GenerateStats generate(const Model& model, ops::Context& ctx, SequenceState& seq,
                       std::span<const int32_t> prompt, const GenerateOptions& opts,
                       std::vector<int32_t>& history, const std::function<bool(int32_t)>& on_token) {
  GenerateStats st;
  Timer timer;
  Sampler sampler(opts.sampling);
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  // Logits stay on the model's device: only the sampled token comes back.
  Tensor logits = prefill(model, ctx, seq, prompt, opts.n_batch, LogitsOn::kDevice);
  history.insert(history.end(), prompt.begin(), prompt.end());

  for (int64_t i = 0; opts.n_predict < 0 || i < opts.n_predict; ++i) {
    SampleResult s = sampler.sample(ctx, logits, 0, history);
    ++st.generated_tokens;
    if (i == 0) {
      st.prefill_ms = timer.ms();
      timer.reset();
    }
    if (std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), s.token) != opts.stop_tokens.end()) {
      st.finish = FinishReason::kStop;
      st.decode_ms = timer.ms();
      return st;
    }
    if (!on_token(s.token)) {
      st.finish = FinishReason::kCancelled;
      st.decode_ms = timer.ms();
      return st;
    }
    if (seq.n_past() >= seq.capacity()) {
      st.finish = FinishReason::kContextFull;
      st.decode_ms = timer.ms();
      return st;
    }
    if (opts.n_predict >= 0 && i + 1 >= opts.n_predict) break;  // the last token needs no forward
    history.push_back(s.token);
    int32_t tok = s.token;
    model.forward(ctx, {&tok, 1}, seq, logits, false, LogitsOn::kDevice);
  }
  st.finish = FinishReason::kLength;
  st.decode_ms = timer.ms();
  return st;
}

}  // namespace vi
