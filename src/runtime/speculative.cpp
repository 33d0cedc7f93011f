#include "runtime/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "ops/copy.h"
#include "ops/memory.h"
#include "runtime/sampler.h"

namespace vi {

SpecKind spec_kind_from_name(std::string_view name) {
  if (name == "off") return SpecKind::kOff;
  if (name == "ngram") return SpecKind::kNgram;
  if (name == "mtp") return SpecKind::kMtp;
  VI_FAIL("unknown speculative decoding kind '{}' (choices: off, ngram, mtp)", name);
}

const char* spec_kind_name(SpecKind k) {
  switch (k) {
    case SpecKind::kNgram: return "ngram";
    case SpecKind::kMtp: return "mtp";
    case SpecKind::kCustom: return "custom";
    default: return "off";
  }
}

void check_spec_options(const Model& model, const SpecOptions& opts) {
  if (opts.kind == SpecKind::kOff) return;
  const int max_drafts = static_cast<int>(Model::kMaxRecordedRows) - 1;
  VI_CHECK(opts.draft_max >= 1 && opts.draft_max <= max_drafts,
           "--draft-max {}: a round verifies 1 to {} draft tokens", opts.draft_max, max_drafts);
  if (opts.kind == SpecKind::kNgram)
    VI_CHECK(opts.ngram_min >= 1 && opts.ngram_min <= opts.ngram_max,
             "n-gram drafts need 1 <= ngram_min <= ngram_max (got {} and {})", opts.ngram_min, opts.ngram_max);
  if (opts.kind == SpecKind::kCustom) VI_CHECK(opts.custom != nullptr, "custom drafts need a drafter function");
  if (opts.kind == SpecKind::kMtp)
    VI_CHECK(model.has_draft_head(),
             "--spec mtp: model '{}' ({}) has no MTP head loaded (a Qwen3.5 file with its mtp.* / nextn weights has "
             "one, loaded with LoadOptions::draft_head); --spec ngram needs none", model.info().name,
             model.info().arch);
}

namespace {

// [a; b]: the rows of b below those of a, in a new tensor on ctx's device (a may be empty).
Tensor cat_rows(ops::Context& ctx, const Tensor& a, const Tensor& b) {
  if (a.data() == nullptr || a.rows() == 0) {
    Tensor out = ops::empty(ctx, b.dtype(), {b.rows(), b.cols()});
    ops::copy(ctx, b, out);
    return out;
  }
  Tensor out = ops::empty(ctx, b.dtype(), {a.rows() + b.rows(), b.cols()});
  Tensor top = out.slice_rows(0, a.rows()), bottom = out.slice_rows(a.rows(), a.rows() + b.rows());
  ops::copy(ctx, a, top);
  ops::copy(ctx, b, bottom);
  return out;
}

}  // namespace

SpecSession::SpecSession(const Model& model, const SpecOptions& opts, const SequenceState& seq)
    : model_(model), opts_(opts), ngrams_(opts.ngram_min, opts.ngram_max) {
  check_spec_options(model, opts);
  if (opts.kind == SpecKind::kMtp) dseq_ = model.new_draft_sequence(seq);
}

SpecSession::~SpecSession() = default;

void SpecSession::sync(const SequenceState& seq, std::span<const int32_t> history) {
  VI_CHECK(static_cast<int64_t>(history.size()) == seq.n_past(),
           "speculative decoding: the history holds {} tokens but the sequence {}", history.size(), seq.n_past());
  if (!dseq_) return;
  const int64_t have = dseq_->n_past() + (pending_.data() != nullptr ? pending_.rows() : 0);
  if (have != seq.n_past()) restart(seq);
}

void SpecSession::restart(const SequenceState& seq) {
  if (!dseq_) return;
  // The head goes on from here; the slots before it keep what their blocks hold.
  pending_ = Tensor();
  dseq_->block_table() = seq.block_table();
  dseq_->resume_at(seq.n_past());
}

void SpecSession::finish(ops::Context& ctx, std::span<const int32_t> history, int32_t next) {
  if (!dseq_ || pending_.data() == nullptr || next < 0) return;
  if (dseq_->n_past() + pending_.rows() != static_cast<int64_t>(history.size())) return;
  keep_head_current(ctx, history, next);
}

void SpecSession::feed_head(ops::Context& ctx, int64_t n, std::span<const int32_t> tail, Tensor* logits,
                            Tensor& head_out) {
  Tensor rows = pending_.slice_rows(0, n);
  model_.draft_forward(ctx, *dseq_, tail.subspan(0, static_cast<size_t>(n)), rows, logits, head_out,
                       LogitsOn::kDevice);
  if (n == pending_.rows()) {
    pending_ = Tensor();
  } else {  // keep the rest in a tensor of its own (the pass's buffers are reused)
    Tensor rest = pending_.slice_rows(n, pending_.rows()), own = ops::empty(ctx, rest.dtype(), {rest.rows(), rest.cols()});
    ops::copy(ctx, rest, own);
    pending_ = own;
  }
}

void SpecSession::observe(ops::Context& ctx, const Tensor& hidden, int64_t keep, std::span<const int32_t> history) {
  if (!wants_hidden()) return;
  VI_CHECK(hidden.data() != nullptr && keep >= 1 && keep <= hidden.rows(),
           "speculative decoding: a pass returned no final hidden states for the MTP head");
  pending_ = cat_rows(ctx, pending_, hidden.slice_rows(0, keep));
  // Pending row i is position P0 + i; the token after it is history[P0 + i + 1], known for
  // every row but the last (whose next token is still to be sampled).
  const int64_t p0 = dseq_->n_past(), n = pending_.rows() - 1;
  VI_CHECK(p0 + pending_.rows() == static_cast<int64_t>(history.size()),
           "speculative decoding: the MTP head holds {} + {} positions of a sequence of {}", p0, pending_.rows(),
           history.size());
  if (n <= 0) return;
  Tensor head_out;
  feed_head(ctx, n, history.subspan(static_cast<size_t>(p0 + 1)), nullptr, head_out);
}

void SpecSession::record(int64_t drafted, int64_t kept) {
  if (drafted <= 0) return;
  stats_.rounds++;
  stats_.drafted += drafted;
  stats_.accepted += kept;
  if (kept < drafted) stats_.rollbacks++;
  recent_drafted_ = 0.9 * recent_drafted_ + static_cast<double>(drafted);
  recent_kept_ = 0.9 * recent_kept_ + static_cast<double>(kept);
}

std::vector<int32_t> SpecSession::propose(ops::Context& ctx, std::span<const int32_t> history, int32_t next, int k) {
  if (k <= 0) return {};
  constexpr double kLowKeep = 0.2;  // kept / proposed below which drafting pauses
  constexpr int kProbeEvery = 8;    // rounds: one of them still drafts, to notice a change
  if (opts_.adaptive && recent_drafted_ >= 4.0 && recent_kept_ < kLowKeep * recent_drafted_) {
    if (++idle_rounds_ < kProbeEvery) {
      // The draft head still reads every position (its cache must stay whole); it just proposes nothing.
      if (opts_.kind == SpecKind::kMtp) keep_head_current(ctx, history, next);
      return {};
    }
    idle_rounds_ = 0;
  }
  if (opts_.kind == SpecKind::kNgram) return ngrams_.propose(history, next, k);
  if (opts_.kind == SpecKind::kMtp) return propose_mtp(ctx, history, next, k);
  if (opts_.kind == SpecKind::kCustom) {
    std::vector<int32_t> d = opts_.custom(history, next, k);
    if (static_cast<int>(d.size()) > k) d.resize(static_cast<size_t>(k));
    return d;
  }
  return {};
}

std::vector<int32_t> SpecSession::pending_tail(std::span<const int32_t> history, int32_t next) const {
  std::vector<int32_t> tail(history.begin() + dseq_->n_past() + 1, history.end());
  tail.push_back(next);
  VI_CHECK(static_cast<int64_t>(tail.size()) == pending_.rows(),
           "speculative decoding: {} pending MTP rows for {} tokens", pending_.rows(), tail.size());
  return tail;
}

void SpecSession::keep_head_current(ops::Context& ctx, std::span<const int32_t> history, int32_t next) {
  if (!dseq_ || pending_.data() == nullptr || pending_.rows() == 0) return;
  Tensor head_out;
  feed_head(ctx, pending_.rows(), pending_tail(history, next), nullptr, head_out);
}

std::vector<int32_t> SpecSession::propose_mtp(ops::Context& ctx, std::span<const int32_t> history, int32_t next,
                                              int k) {
  if (pending_.data() == nullptr || pending_.rows() == 0) return {};
  const int64_t n = pending_.rows();
  const std::vector<int32_t> tail = pending_tail(history, next);
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  Sampler pick(greedy);  // drafts are the head's argmax: deterministic, as exactness needs
  Tensor logits, head_out;
  feed_head(ctx, n, tail, &logits, head_out);
  const int64_t kept = dseq_->n_past();  // the head's cache now ends where the sequence will
  std::vector<int32_t> drafts;
  drafts.push_back(pick.sample(ctx, logits, 0, {}).token);
  while (static_cast<int>(drafts.size()) < k && dseq_->n_past() < dseq_->capacity()) {
    // Recursive step: the head's own output is the next slot's hidden input.
    Tensor h = head_out, l2, out2;
    const int32_t d = drafts.back();
    model_.draft_forward(ctx, *dseq_, {&d, 1}, h, &l2, out2, LogitsOn::kDevice);
    head_out = out2;
    drafts.push_back(pick.sample(ctx, l2, 0, {}).token);
  }
  dseq_->truncate(kept);  // the recursive slots were guesses: the next round writes them for real
  return drafts;
}

}  // namespace vi
