// Model / SequenceState helpers shared by every architecture: sequences with a private
// KV pool (CLI generate/chat/logits/perplexity) and resuming from a cached prefix.
#include "models/model.h"

#include <numeric>

#include "core/error.h"
#include "core/log.h"
#include "models/batch.h"
#include "models/kv_budget.h"
#include "models/step_runner.h"
#include "ops/copy.h"
#include "ops/memory.h"

namespace vi {

Model::Model() : runner_(std::make_unique<StepRunner>()), draft_runner_(std::make_unique<StepRunner>()) {}
Model::~Model() = default;

namespace {

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  }
  void add(const void* p) { add(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p))); }
};

// Everything a recording bakes in: the launch shapes (rows per sequence, logits rows, key
// bounds, dtypes, profile) and every device address it touches outside its own memory — the
// step arena, the KV pools and each sequence's recurrent state. A sequence freed and another
// made at the same address with its state elsewhere gets a new key, never a stale replay.
uint64_t step_key(const ops::Context& ctx, const StepArena& arena, const BatchPlan& plan,
                  std::span<const BatchItem> items, bool hidden) {
  Fnv f;
  f.add(static_cast<uint64_t>(hidden));
  f.add(arena.generation);
  f.add(arena.buf.data());
  f.add(static_cast<uint64_t>(ctx.act));
  f.add(static_cast<uint64_t>(ctx.profile));
  f.add(static_cast<uint64_t>(plan.n_rows));
  for (size_t i = 0; i < items.size(); ++i) {
    const SequenceState& s = *items[i].seq;
    f.add(static_cast<uint64_t>(plan.rows_of(i)));
    f.add(static_cast<uint64_t>(items[i].all_logits));
    f.add(static_cast<uint64_t>(plan.kv_bound[i]));
    f.add(static_cast<uint64_t>(s.kv_pool().block_size));
    for (const Tensor& t : s.kv_pool().tensors) f.add(t.data());
    for (const Tensor& t : s.kv_pool().scales) f.add(t.data());
    for (const Tensor& t : s.recurrent_state()) f.add(t.data());
    f.add(static_cast<uint64_t>(items[i].checkpoints));
    if (items[i].checkpoints)
      for (const Tensor& t : s.checkpoint_state()) f.add(t.data());
  }
  return f.h;
}

constexpr size_t kMaxRecordings = 64;  // a full cache starts over (recording costs ~ms)

}  // namespace

void Model::forward_batch(ops::Context& ctx, std::span<const BatchItem> items, Tensor& logits, LogitsOn where,
                          Tensor* hidden) const {
  BatchPlan plan = BatchPlan::make(items, info().n_vocab);
  for (const BatchItem& it : items) {
    it.seq->ckpt_count_ = 0;  // this pass moves the state: earlier checkpoints no longer apply
    if (it.checkpoints) it.seq->reserve_checkpoints(static_cast<int64_t>(it.tokens.size()) - 1);
  }
  StepRunner& r = *runner_;
  std::lock_guard<std::mutex> lock(r.mu);
  const bool recordable = ctx.graphs && this->recordable() && !r.disabled && where == LogitsOn::kDevice &&
                          ctx.profiler == nullptr &&
                          plan.n_rows <= kMaxRecordedRows && ops::graphs_supported(ctx);
  plan.stage(ctx, items, r.arena, recordable);
  bool done = false;
  std::string record_error;
  if (recordable) {
    const uint64_t key = step_key(ctx, r.arena, plan, items, hidden != nullptr);
    auto it = r.steps.find(key);
    if (it == r.steps.end()) {
      if (r.steps.size() >= kMaxRecordings) r.steps.clear();
      RecordedStep st;
      st.logits = ops::empty(ctx, ctx.act, {static_cast<int64_t>(plan.out_rows.size()), info().n_vocab});
      if (hidden != nullptr) st.hidden = ops::empty(ctx, ctx.act, {plan.n_rows, info().d_model});
      try {
        st.graph = ops::record(ctx, [&](ops::Context& rctx) {
          Tensor out, h;  // made and freed inside: the recording's own memory
          forward_plan(rctx, plan, items, out, LogitsOn::kDevice, hidden != nullptr ? &h : nullptr);
          ops::copy(rctx, out, st.logits);
          if (hidden != nullptr) ops::copy(rctx, h, st.hidden);
        });
        r.stats.kernels_behind_memory = st.graph->shape().kernels_behind_memory;
        it = r.steps.emplace(key, std::move(st)).first;
        ++r.stats.recorded;
      } catch (const std::exception& e) {
        record_error = e.what();
      }
    } else {
      ++r.stats.replayed;
    }
    if (it != r.steps.end()) {
      it->second.graph->launch(ctx);
      logits = it->second.logits;
      if (hidden != nullptr) *hidden = it->second.hidden;
      done = true;
    }
  }
  if (!done) {
    forward_plan(ctx, plan, items, logits, where, hidden);
    ++r.stats.eager;
    // A step that runs eagerly but could not be recorded: stop trying (an input error
    // would have failed the eager run too and left recording on).
    if (!record_error.empty()) {
      r.disabled = true;
      VI_LOG_WARN("recording a decode step failed ({}); steps run op by op from now on", record_error);
    }
  }
  for (const BatchItem& it : items) {
    if (it.checkpoints) {
      it.seq->ckpt_base_ = it.seq->n_past();
      it.seq->ckpt_count_ = static_cast<int64_t>(it.tokens.size()) - 1;
    }
    it.seq->advance(static_cast<int64_t>(it.tokens.size()));
  }
}

std::unique_ptr<SequenceState> Model::new_draft_sequence(const SequenceState&) const {
  VI_FAIL("model '{}' ({}) has no draft head (speculative decoding with it needs one: Qwen3.5's MTP block)",
          info().name, info().arch);
}

void Model::draft_begin(const ops::Context&, SequenceState&, int64_t, const Tensor&) const {
  VI_FAIL("model '{}' ({}) has no draft head", info().name, info().arch);
}

void Model::draft_plan(ops::Context&, const BatchPlan&, std::span<const BatchItem>, const Tensor&, Tensor*, Tensor&,
                       LogitsOn) const {
  VI_FAIL("model '{}' ({}) has no draft head", info().name, info().arch);
}

void Model::draft_forward(ops::Context& ctx, SequenceState& dseq, std::span<const int32_t> tokens,
                          const Tensor& hidden, Tensor* logits, Tensor& head_out, LogitsOn where) const {
  const int64_t T = static_cast<int64_t>(tokens.size());
  draft_begin(ctx, dseq, T, hidden);
  const BatchItem item{&dseq, tokens, false};
  const std::span<const BatchItem> items(&item, 1);
  BatchPlan plan = BatchPlan::make(items, info().n_vocab);
  StepRunner& r = *draft_runner_;
  std::lock_guard<std::mutex> lock(r.mu);
  const bool recordable = ctx.graphs && this->recordable() && !r.disabled &&
                          (logits == nullptr || where == LogitsOn::kDevice) &&
                          ctx.profiler == nullptr && T <= kMaxRecordedRows && ops::graphs_supported(ctx);
  plan.stage(ctx, items, r.arena, recordable);
  bool done = false;
  std::string record_error;
  if (recordable) {
    if (r.input.data() == nullptr) r.input = ops::empty(ctx, ctx.act, {kMaxRecordedRows, info().d_model});
    Tensor in = r.input.slice_rows(0, T);
    ops::copy(ctx, hidden, in);  // the recording reads its hidden input from here
    Fnv f;
    f.add(step_key(ctx, r.arena, plan, items, false));
    f.add(static_cast<uint64_t>(logits != nullptr));
    f.add(r.input.data());
    auto it = r.steps.find(f.h);
    if (it == r.steps.end()) {
      if (r.steps.size() >= kMaxRecordings) r.steps.clear();
      RecordedStep st;
      if (logits != nullptr) st.logits = ops::empty(ctx, ctx.act, {1, info().n_vocab});
      st.hidden = ops::empty(ctx, ctx.act, {1, info().d_model});
      try {
        st.graph = ops::record(ctx, [&](ops::Context& rctx) {
          Tensor out, h;  // made and freed inside: the recording's own memory
          draft_plan(rctx, plan, items, in, logits != nullptr ? &out : nullptr, h, LogitsOn::kDevice);
          if (logits != nullptr) ops::copy(rctx, out, st.logits);
          ops::copy(rctx, h, st.hidden);
        });
        it = r.steps.emplace(f.h, std::move(st)).first;
        ++r.stats.recorded;
      } catch (const std::exception& e) {
        record_error = e.what();
      }
    } else {
      ++r.stats.replayed;
    }
    if (it != r.steps.end()) {
      it->second.graph->launch(ctx);
      if (logits != nullptr) *logits = it->second.logits;
      head_out = it->second.hidden;
      done = true;
    }
  }
  if (!done) {
    draft_plan(ctx, plan, items, hidden, logits, head_out, where);
    ++r.stats.eager;
    if (!record_error.empty()) {
      r.disabled = true;
      VI_LOG_WARN("recording a draft pass failed ({}); draft passes run op by op from now on", record_error);
    }
  }
  dseq.advance(T);
}

Model::StepStats Model::step_stats() const {
  std::lock_guard<std::mutex> lock(runner_->mu);
  return runner_->stats;
}

Model::StepStats Model::draft_step_stats() const {
  std::lock_guard<std::mutex> lock(draft_runner_->mu);
  return draft_runner_->stats;
}

std::unique_ptr<SequenceState> Model::new_sequence(int64_t n_ctx) const {
  VI_CHECK(n_ctx > 0, "a sequence needs a positive context (got {})", n_ctx);
  const int64_t bs = kDefaultKvBlockSize, n_blocks = (n_ctx + bs - 1) / bs;
  auto seq = new_paged_sequence(n_ctx, new_kv_pool_checked(*this, n_blocks, bs, n_ctx, 1));
  seq->block_table().resize(static_cast<size_t>(n_blocks));
  std::iota(seq->block_table().begin(), seq->block_table().end(), 0);  // private pool: identity
  return seq;
}

bool SequenceState::rollback(int64_t n) {
  if (n == n_past_) return true;
  if (recurrent_state().empty()) {
    if (!can_truncate_to(n)) return false;
    truncate(n);
    return true;
  }
  const int64_t j = n - ckpt_base_ - 1;  // checkpoint j: the state after token j + 1 of the pass
  if (ckpt_count_ <= 0 || n_past_ != ckpt_base_ + ckpt_count_ + 1 || j < 0 || j >= ckpt_count_) return false;
  restore_checkpoint(j);
  n_past_ = n;
  ckpt_count_ = 0;
  return true;
}

void SequenceState::resume_at(int64_t n) {
  const int64_t bs = pool_ ? pool_->block_size : 1;
  VI_CHECK(n >= 0 && n <= capacity_, "cannot resume a sequence of capacity {} at token {}", capacity_, n);
  VI_CHECK(static_cast<int64_t>(block_table_.size()) * bs >= n,
           "cannot resume at token {}: the block table covers only {} tokens", n,
           static_cast<int64_t>(block_table_.size()) * bs);
  n_past_ = n;
  ckpt_count_ = 0;
}

}  // namespace vi
