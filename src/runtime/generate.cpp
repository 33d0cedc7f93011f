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

namespace {

// generate() with drafts (runtime/speculative.h has the scheme). Every emitted token goes
// through the same checks, in the same order, as in the plain loop below, so the two end
// alike: a stop token, the callback, a full context, n_predict.
GenerateStats generate_speculative(const Model& model, ops::Context& ctx, SequenceState& seq,
                                   std::span<const int32_t> prompt, const GenerateOptions& opts,
                                   std::vector<int32_t>& history, const std::function<bool(int32_t)>& on_token) {
  std::unique_ptr<SpecSession> own;
  SpecSession* ss = opts.spec_session;
  if (ss == nullptr) {
    own = std::make_unique<SpecSession>(model, opts.spec, seq);
    ss = own.get();
  }
  const SpecStats before = ss->stats();
  ss->sync(seq, history);
  GenerateStats st;
  Timer timer;
  Sampler sampler(opts.sampling);
  st.prompt_tokens = static_cast<int64_t>(prompt.size());
  VI_CHECK(!prompt.empty(), "prefill needs at least one token");
  VI_CHECK(seq.n_past() + static_cast<int64_t>(prompt.size()) <= seq.capacity(),
           "the prompt needs {} tokens but the context holds {} ({} already used); raise -c/--ctx-size",
           prompt.size(), seq.capacity(), seq.n_past());
  // Prefill in chunks; with the MTP head each chunk's final hidden states feed its cache.
  Tensor logits, hidden;
  const int64_t n_batch = std::max<int64_t>(opts.n_batch, 1);
  for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(n_batch)) {
    const size_t n = std::min<size_t>(static_cast<size_t>(n_batch), prompt.size() - i);
    BatchItem item{&seq, prompt.subspan(i, n), false};
    model.forward_batch(ctx, {&item, 1}, logits, LogitsOn::kDevice, ss->wants_hidden() ? &hidden : nullptr);
    history.insert(history.end(), prompt.begin() + static_cast<std::ptrdiff_t>(i),
                   prompt.begin() + static_cast<std::ptrdiff_t>(i + n));
    if (ss->wants_hidden()) ss->observe(ctx, hidden, static_cast<int64_t>(n), history);
  }

  const bool recurrent = !seq.recurrent_state().empty();
  int64_t row = 0;  // the logits row the next token is sampled from
  std::vector<int32_t> drafts, fed;
  for (int64_t i = 0; opts.n_predict < 0 || i < opts.n_predict;) {
    // Walk the rows of the last pass: row r follows fed[r]; drafts[r] is what row r was
    // guessed to give (none past the drafts).
    int64_t keep = 0;  // tokens of the pass the sequence keeps
    int32_t next = -1;
    bool done = false;
    for (;; ++row) {
      SampleResult s = sampler.sample(ctx, logits, row, history);
      ++st.generated_tokens;
      if (i == 0) {
        st.prefill_ms = timer.ms();
        timer.reset();
      }
      ++i;
      next = s.token;
      const int64_t n_fed_kept = fed.empty() ? 0 : row + 1;  // fed[0..row] precede this token
      keep = n_fed_kept;
      if (std::find(opts.stop_tokens.begin(), opts.stop_tokens.end(), s.token) != opts.stop_tokens.end()) {
        st.finish = FinishReason::kStop;
        done = true;
      } else if (!on_token(s.token)) {
        st.finish = FinishReason::kCancelled;
        done = true;
      } else if (seq.n_past() - static_cast<int64_t>(fed.size()) + n_fed_kept >= seq.capacity()) {
        st.finish = FinishReason::kContextFull;
        done = true;
      } else if (opts.n_predict >= 0 && i >= opts.n_predict) {
        st.finish = FinishReason::kLength;
        done = true;
      }
      const bool more = static_cast<size_t>(row) < drafts.size() && drafts[static_cast<size_t>(row)] == s.token;
      if (done || !more) break;
      history.push_back(s.token);  // a draft kept: it is already in the sequence
    }
    // Cut the sequence back to the kept part of the pass.
    const int64_t n_pass = static_cast<int64_t>(fed.size());
    if (n_pass > 1) ss->record(n_pass - 1, keep - 1);
    if (keep < n_pass) {
      const int64_t to = seq.n_past() - n_pass + keep;
      VI_CHECK(seq.rollback(to), "speculative decoding: model '{}' cannot take its sequence back from {} to {} tokens",
               model.info().name, seq.n_past(), to);
    }
    if (n_pass > 0 && ss->wants_hidden()) ss->observe(ctx, hidden, keep, history);
    if (done) {
      ss->finish(ctx, history, next);  // the head reads the last position too, before the blocks are reused
      st.decode_ms = timer.ms();
      st.spec = ss->stats() - before;
      return st;
    }
    // The next pass: `next` and its drafts, as many as the context and n_predict leave room for.
    int k = ss->options().draft_max;
    k = static_cast<int>(std::min<int64_t>(k, seq.capacity() - seq.n_past() - 1));
    if (opts.n_predict >= 0) k = static_cast<int>(std::min<int64_t>(k, opts.n_predict - i - 1));
    drafts = ss->propose(ctx, history, next, k);
    fed.assign(1, next);
    fed.insert(fed.end(), drafts.begin(), drafts.end());
    history.push_back(next);
    BatchItem item{&seq, fed, /*all_logits=*/true, /*checkpoints=*/recurrent && !drafts.empty()};
    model.forward_batch(ctx, {&item, 1}, logits, LogitsOn::kDevice, ss->wants_hidden() ? &hidden : nullptr);
    row = 0;
  }
  st.finish = FinishReason::kLength;  // n_predict == 0
  st.decode_ms = timer.ms();
  return st;
}

}  // namespace

GenerateStats generate(const Model& model, ops::Context& ctx, SequenceState& seq,
                       std::span<const int32_t> prompt, const GenerateOptions& opts,
                       std::vector<int32_t>& history, const std::function<bool(int32_t)>& on_token) {
  if (opts.spec.kind != SpecKind::kOff || opts.spec_session != nullptr)
    return generate_speculative(model, ctx, seq, prompt, opts, history, on_token);
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
