// Speculative decoding of one sequence. Each round a drafter proposes up to k tokens; the
// model runs the last sampled token and the drafts in one pass (logits for every row), and
// the sampler walks the rows: row i is sampled exactly as an ordinary decode step would
// sample it (same history, same draw of the generator), the walk goes on while the sampled
// token equals the draft it will be followed by, and the first token that differs ends the
// round. The output is therefore the ordinary decoder's, token for token, for any sampling
// settings (for deterministic drafts this is speculative sampling: a draft d is kept with
// probability p(d), otherwise the token comes from p without d); only the number of
// forward passes changes. The sequence is then cut back to the tokens kept
// (SequenceState::rollback): attention-only models truncate; models with recurrent layers
// (Qwen3.5's GDN) run the pass's recurrent steps token by token, keep the state after each
// (BatchItem::checkpoints) and make the kept one current.
//
// Drafters:
//   ngram: prompt lookup — the longest recent suffix (ngram_max .. ngram_min tokens) that
//          occurred before in the sequence proposes what followed it then. No model needed.
//   mtp:   the model's draft head (Qwen3.5's MTP block, Model::draft_forward) from the final
//          hidden state, its own drafts fed back for k > 1 (MODEL_QWEN35.md section 7.3).
//   custom: a function the caller gives (SpecOptions::custom; not a command-line choice).
// Drafts must be a function of the sequence (no draws of their own) for the output to be the
// plain loop's.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "models/model.h"
#include "runtime/ngram_index.h"

namespace vi {

enum class SpecKind { kOff, kNgram, kMtp, kCustom };

// "off", "ngram", "mtp"; throws vi::Error naming the choices for anything else.
SpecKind spec_kind_from_name(std::string_view name);
const char* spec_kind_name(SpecKind k);

// A drafter: up to k tokens to follow `next`, which follows `history`.
using DraftFn = std::function<std::vector<int32_t>(std::span<const int32_t> history, int32_t next, int k)>;

struct SpecOptions {
  SpecKind kind = SpecKind::kOff;
  DraftFn custom;     // kCustom's drafter
  int draft_max = 3;  // drafts per round, 1 .. Model::kMaxRecordedRows - 1 (a round's pass: 1 + drafts)
  int ngram_min = 2;  // ngram: suffix lengths tried, longest first
  int ngram_max = 4;
  // While fewer than 1 in 5 recent drafts are kept, draft only every 8th round: a refused
  // draft costs its share of the pass (and the draft head's passes) for nothing.
  bool adaptive = true;
};

struct SpecStats {
  int64_t rounds = 0;    // passes that verified drafts (rounds without drafts are not counted)
  int64_t drafted = 0;   // draft tokens proposed
  int64_t accepted = 0;  // of them, kept
  int64_t rollbacks = 0; // rounds that cut the sequence back (some drafts refused)
};
inline SpecStats operator-(const SpecStats& a, const SpecStats& b) {
  return {a.rounds - b.rounds, a.drafted - b.drafted, a.accepted - b.accepted, a.rollbacks - b.rollbacks};
}

// Throws vi::Error when opts cannot run on `model` (mtp without a draft head, draft_max out of range).
void check_spec_options(const Model& model, const SpecOptions& opts);

// What speculation keeps between generate() calls on one sequence (the turns of a chat, the
// requests of an engine slot): the draft head's view of the sequence and the final hidden
// states of the positions whose next token it has not seen yet. One per sequence (which must
// outlive it); generate() makes a private one when given none.
class SpecSession {
 public:
  SpecSession(const Model& model, const SpecOptions& opts, const SequenceState& seq);
  ~SpecSession();
  SpecSession(const SpecSession&) = delete;
  SpecSession& operator=(const SpecSession&) = delete;

  const SpecOptions& options() const { return opts_; }
  const SpecStats& stats() const { return stats_; }
  // After a round's walk: `drafted` drafts were proposed, the first `kept` of them kept.
  void record(int64_t drafted, int64_t kept);

  // --- used by generate() ---
  // Whether the model should return its final hidden states with each pass.
  bool wants_hidden() const { return opts_.kind == SpecKind::kMtp; }
  // Before a call's first pass on `seq` holding `history`: when the sequence holds other
  // tokens than the head last saw (emptied, cut back, or resumed from a cached prefix) the head
  // goes on from the sequence's length; its cache for those tokens is what their blocks hold
  // (a cached prefix's blocks hold the head's K/V from the run that made them).
  void sync(const SequenceState& seq, std::span<const int32_t> history);
  // The same when the sequence was refilled, whatever its length (an engine slot's new request).
  void restart(const SequenceState& seq);
  // At the end of a call: the head reads the last position with `next` (the last sampled token,
  // not in the sequence) as what follows it, so that the sequence's blocks hold the head's K/V
  // for every position when they are cached.
  void finish(ops::Context& ctx, std::span<const int32_t> history, int32_t next);
  // After a pass that appended rows with final hidden states `hidden` ([rows, d], the first
  // `keep` of them kept): the head catches up on every kept position whose next token is in
  // `history` (the sequence's tokens).
  void observe(ops::Context& ctx, const Tensor& hidden, int64_t keep, std::span<const int32_t> history);
  // Up to k drafts to follow `next` (sampled, not yet in the sequence whose tokens are `history`).
  std::vector<int32_t> propose(ops::Context& ctx, std::span<const int32_t> history, int32_t next, int k);

 private:
  std::vector<int32_t> propose_mtp(ops::Context& ctx, std::span<const int32_t> history, int32_t next, int k);
  // The tokens that follow the pending positions: the history's, then `next` after the last.
  std::vector<int32_t> pending_tail(std::span<const int32_t> history, int32_t next) const;
  // Feeds the head every pending position (the last one followed by `next`) without drafting.
  void keep_head_current(ops::Context& ctx, std::span<const int32_t> history, int32_t next);
  // Runs the head over pending_ rows [0, n) with the tokens that follow them in `tail`
  // (tail[i] follows pending row i); drops them from pending_. logits (not null): the last
  // slot's.
  void feed_head(ops::Context& ctx, int64_t n, std::span<const int32_t> tail, Tensor* logits, Tensor& head_out);

  const Model& model_;
  SpecOptions opts_;
  SpecStats stats_;
  std::unique_ptr<SequenceState> dseq_;  // the draft head's cache (mtp)
  NgramIndex ngrams_;                    // the history's n-grams (ngram)
  Tensor pending_;  // [p, d] final hidden states of positions dseq_->n_past() .. + p - 1 (mtp)
  // opts_.adaptive: recent drafts proposed and kept (each round's counts added to 0.9 x the
  // sums before), and rounds since drafting was last tried while they run low.
  double recent_drafted_ = 0, recent_kept_ = 0;
  int idle_rounds_ = 0;
};

}  // namespace vi
