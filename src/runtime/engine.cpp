#include "runtime/engine.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "models/kv_budget.h"
#include "models/loader.h"
#include "ops/copy.h"
#include "ops/memory.h"

namespace vi {

using Clock = std::chrono::steady_clock;

void EventChannel::push(Event e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(e));
  }
  cv_.notify_one();
}

std::optional<Event> EventChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return std::nullopt;
  Event e = std::move(q_.front());
  q_.pop_front();
  return e;
}

// One sequence slot: its cache state lives as long as the engine; a request borrows it.
struct Engine::Slot {
  std::unique_ptr<SequenceState> seq;
  std::shared_ptr<Request> req;  // null when free
  std::optional<Sampler> sampler;
  std::vector<int32_t> history;  // tokens held in seq
  size_t prompt_fed = 0;
  int64_t generated = 0;
  int32_t pending = -1;  // sampled, not yet fed
  Clock::time_point arrived, admitted, last_token;
  bool first_token_seen = false;
  bool begun = false;    // the KV cache has installed the request's cached prefix
  int64_t reused = 0;    // prompt tokens served from the prefix cache
  // Speculative decoding (EngineOptions::spec): the slot's session (kept across its requests)
  // and this step's decode tokens (the pending token, then its drafts).
  std::unique_ptr<SpecSession> spec;
  std::vector<int32_t> fed;
};

namespace {
void observe(std::vector<uint64_t>& counts, const double* bounds, size_t n_bounds, double v, double& sum,
             uint64_t& n) {
  size_t i = 0;
  while (i < n_bounds && v > bounds[i]) ++i;
  counts[i]++;
  sum += v;
  n++;
}
}  // namespace

Engine::Engine(const Model& model, ops::Context ctx, EngineOptions opts)
    : model_(model), ctx_(ctx), opts_(opts) {
  VI_CHECK(opts_.max_seqs >= 1, "at least one parallel sequence is needed (got {})", opts_.max_seqs);
  VI_CHECK(opts_.n_ctx >= 2, "context of {} tokens is too small", opts_.n_ctx);
  opts_.step_tokens = std::max<int64_t>(opts_.step_tokens, opts_.max_seqs);
  // One paged KV pool for all slots: at least a full context per slot, so a running
  // sequence never waits for blocks; what running sequences do not use caches prefixes.
  VI_CHECK(opts_.kv_block_size >= 1 && opts_.kv_block_size <= 1024, "KV block size {} is outside [1, 1024]",
           opts_.kv_block_size);
  const int64_t bs = opts_.kv_block_size;
  const int64_t min_blocks = opts_.max_seqs * ((opts_.n_ctx + bs - 1) / bs);
  if (opts_.kv_blocks == 0) opts_.kv_blocks = min_blocks;
  VI_CHECK(opts_.kv_blocks >= min_blocks,
           "a KV pool of {} blocks cannot hold {} sequences of {} tokens (needs at least {} blocks of {})",
           opts_.kv_blocks, opts_.max_seqs, opts_.n_ctx, min_blocks, bs);
  VI_CHECK(opts_.kv_blocks <= INT32_MAX, "KV pool of {} blocks is too large", opts_.kv_blocks);
  VI_CHECK(opts_.cache_ram_gb >= 0, "--cache-ram must not be negative (got {})", opts_.cache_ram_gb);
  check_spec_options(model_, opts_.spec);
  auto pool = new_kv_pool_checked(model_, opts_.kv_blocks, bs, opts_.n_ctx, opts_.max_seqs);
  for (int i = 0; i < opts_.max_seqs; ++i) {
    auto s = std::make_unique<Slot>();
    s->seq = model_.new_paged_sequence(opts_.n_ctx, pool);
    if (opts_.spec.kind != SpecKind::kOff) s->spec = std::make_unique<SpecSession>(model_, opts_.spec, *s->seq);
    slots_.push_back(std::move(s));
  }
  KvCacheOptions ko;
  ko.prefix_reuse = opts_.prefix_cache;
  ko.host_bytes = static_cast<int64_t>(opts_.cache_ram_gb * 1e9);
  ko.device_snapshots = opts_.cache_snapshots > 0 ? opts_.cache_snapshots : -1;
  ko.snapshot_interval = opts_.snapshot_interval;
  kv_ = std::make_unique<KvCache>(ctx_, pool, slots_[0]->seq->recurrent_state(), ko);
  stats_.cache = kv_->stats();
  stats_.ttft_counts.assign(std::size(EngineStats::kTtftBuckets) + 1, 0);
  stats_.tpot_counts.assign(std::size(EngineStats::kTpotBuckets) + 1, 0);
  stats_.queue_counts.assign(std::size(EngineStats::kQueueBuckets) + 1, 0);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Event e;
  e.kind = Event::Kind::kError;
  e.error = "the server is shutting down";
  for (auto& r : queue_) r->events->push(e);
  for (auto& s : slots_)
    if (s->req) s->req->events->push(e);
}

Engine::SubmitStatus Engine::submit(std::shared_ptr<Request> req) {
  if (req->prompt.empty()) return SubmitStatus::kEmpty;
  if (static_cast<int64_t>(req->prompt.size()) >= opts_.n_ctx) return SubmitStatus::kTooLong;
  if (!req->arrived) req->arrived = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Queued requests that a free slot will take at the next step are not waiting; only
    // those beyond the free slots count against max_queue (so max_queue 0 still serves).
    const auto free_slots = std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return !s->req; });
    if (static_cast<int64_t>(queue_.size()) >= opts_.max_queue + free_slots) return SubmitStatus::kQueueFull;
    queue_.push_back(std::move(req));
  }
  cv_.notify_one();
  return SubmitStatus::kOk;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Engine::wait_idle() const {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] {
    return queue_.empty() &&
           std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->req != nullptr; });
  });
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        if (stop_ || !queue_.empty()) return true;
        return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->req != nullptr; });
      });
      if (stop_) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A failed step cannot tell which sequence broke it: end every running request
      // with the error rather than risk silently wrong output.
      VI_LOG_ERROR("engine step failed: {}", e.what());
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& s : slots_) {
        if (!s->req) continue;
        Event ev;
        ev.kind = Event::Kind::kError;
        ev.error = e.what();
        s->req->events->push(ev);
        s->req.reset();
        if (s->begun) kv_->release(*s->seq);  // no snapshot: the state may be half-updated
        s->begun = false;
        stats_.requests_failed++;
      }
      stats_.running = 0;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.cache = kv_->stats();
      // Here rather than at the end of step(), which returns early when no row samples (the
      // last running sequence cancelled mid-step): the gauge must not keep a freed slot.
      stats_.running = static_cast<int>(
          std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->req != nullptr; }));
    }
    idle_cv_.notify_all();
  }
}

void Engine::finish(Slot& s, FinishReason why) {
  Event ev;
  ev.kind = Event::Kind::kDone;
  ev.finish = why;
  ev.prompt_tokens = static_cast<int64_t>(s.req->prompt.size());
  ev.cached_tokens = s.reused;
  ev.completion_tokens = s.generated;
  // End of turn: the cache snapshots the sequence so the next turn resumes here.
  if (s.begun) kv_->end(*s.seq, s.history);
  s.begun = false;
  s.req->events->push(ev);
  if (why == FinishReason::kCancelled) stats_.requests_cancelled++;
  else stats_.requests_finished++;
  s.req.reset();
  s.sampler.reset();
}

void Engine::step() {
  // 1. Admit queued requests into free slots; drop cancelled ones (under the lock).
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancelled->load()) {
        Event ev;
        ev.kind = Event::Kind::kDone;
        ev.finish = FinishReason::kCancelled;
        (*it)->events->push(ev);
        stats_.requests_cancelled++;
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto& s : slots_) {
      if (s->req) {
        if (s->req->cancelled->load()) finish(*s, FinishReason::kCancelled);
        continue;
      }
      if (queue_.empty()) continue;
      s->req = queue_.front();
      queue_.pop_front();
      s->begun = false;  // the cache lookup runs below, outside the lock
      s->reused = 0;
      s->history.clear();
      s->prompt_fed = 0;
      s->generated = 0;
      s->pending = -1;
      s->first_token_seen = false;
      s->admitted = Clock::now();
      s->arrived = *s->req->arrived;
      observe(stats_.queue_counts, EngineStats::kQueueBuckets, std::size(EngineStats::kQueueBuckets),
              std::chrono::duration<double>(s->admitted - s->arrived).count(), stats_.queue_sum, stats_.queue_n);
      s->sampler.emplace(s->req->params.sampling);
    }
    stats_.queue_depth = static_cast<int>(queue_.size());
    stats_.running = static_cast<int>(
        std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s->req != nullptr; }));
  }

  // Newly admitted requests: install the longest cached prefix of the prompt.
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.begun) continue;
    const auto& prompt = s.req->prompt;
    s.reused = kv_->begin(*s.seq, prompt);
    s.begun = true;
    s.history.assign(prompt.begin(), prompt.begin() + s.reused);
    s.prompt_fed = static_cast<size_t>(s.reused);
    // The draft head goes on from the reused prefix (its K/V for it came with the blocks).
    if (s.spec) s.spec->restart(*s.seq);
  }

  // 2. Plan: one token (and its drafts) for every decoding sequence, then prompt chunks in
  // admission order.
  std::vector<BatchItem> items;
  std::vector<Slot*> owners;
  std::vector<char> decoding;  // per item: a decode step (else a prompt chunk)
  int64_t budget = opts_.step_tokens;
  int64_t n_decoding = 0;
  for (auto& sp : slots_) n_decoding += sp->req && sp->pending >= 0 ? 1 : 0;
  int64_t spare = std::max<int64_t>(budget - n_decoding, 0);  // step tokens drafts may take
  bool prefilling = false;  // a prompt chunk will join the step
  for (auto& sp : slots_) prefilling = prefilling || (sp->req && sp->pending < 0);
  if (opts_.spec_step_rows > 0 && !prefilling)
    spare = std::min<int64_t>(spare, std::max<int64_t>(opts_.spec_step_rows - n_decoding, 0));
  int64_t left = n_decoding;  // decoding sequences not planned yet, this one included
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.pending < 0) continue;
    s.fed.assign(1, s.pending);
    if (s.spec) {
      // An even share of what is left, so that a tight step does not give every draft to the
      // first sequences.
      int64_t k = std::min<int64_t>(s.spec->options().draft_max, spare / std::max<int64_t>(left, 1));
      k = std::min<int64_t>(k, s.seq->capacity() - s.seq->n_past() - 1);
      if (s.req->params.max_tokens >= 0) k = std::min<int64_t>(k, s.req->params.max_tokens - s.generated - 1);
      k = std::max<int64_t>(k, 0);
      kv_->reserve(*s.seq, 1 + k);  // the draft head writes its recursive slots there before the pass does
      const std::vector<int32_t> drafts = s.spec->propose(ctx_, s.history, s.pending, static_cast<int>(k));
      s.fed.insert(s.fed.end(), drafts.begin(), drafts.end());
      spare -= static_cast<int64_t>(drafts.size());
    }
    kv_->reserve(*s.seq, static_cast<int64_t>(s.fed.size()));
    const bool drafted = s.fed.size() > 1;
    items.push_back({s.seq.get(), s.fed, /*all_logits=*/drafted,
                     /*checkpoints=*/drafted && kv_->has_state()});
    owners.push_back(&s);
    decoding.push_back(1);
    budget -= static_cast<int64_t>(s.fed.size());
    --left;
  }
  for (auto& sp : slots_) {
    Slot& s = *sp;
    if (!s.req || s.pending >= 0 || budget <= 0) continue;
    const auto& prompt = s.req->prompt;
    // Chunks end where the cache wants a recurrent-state snapshot.
    const size_t stop = static_cast<size_t>(kv_->next_stop(*s.seq));
    size_t n = std::min<size_t>(stop - s.prompt_fed, static_cast<size_t>(budget));
    if (n == 0) continue;
    kv_->reserve(*s.seq, static_cast<int64_t>(n));
    items.push_back({s.seq.get(), {prompt.data() + s.prompt_fed, n}, false});
    owners.push_back(&s);
    decoding.push_back(0);
    budget -= static_cast<int64_t>(n);
  }
  if (items.empty()) return;

  // 3. One forward pass for all of them; the logits stay on the model's device. Where a draft
  // head reads them, the final hidden states too.
  bool want_hidden = false;
  for (Slot* s : owners) want_hidden = want_hidden || (s->spec && s->spec->wants_hidden());
  Tensor logits, hidden;  // [logits rows, vocab]; [rows, d]
  model_.forward_batch(ctx_, items, logits, LogitsOn::kDevice, want_hidden ? &hidden : nullptr);
  const int64_t V = model_.info().n_vocab;
  // Each item's first row in the pass (hidden) and in the logits (all of its rows with drafts).
  std::vector<int64_t> hrow0, lrow0;
  for (size_t k = 0, h = 0, l = 0; k < items.size(); ++k) {
    hrow0.push_back(static_cast<int64_t>(h));
    lrow0.push_back(static_cast<int64_t>(l));
    h += items[k].tokens.size();
    l += items[k].all_logits ? items[k].tokens.size() : 1;
  }

  // 4. Book-keeping, then sampling: every item that ends in a new token samples its first row;
  // a decoding item with drafts goes on to its next row while the sampled token is the draft
  // that follows (one sampling call per round of rows).
  std::lock_guard<std::mutex> lock(mu_);
  stats_.steps++;
  if (std::find(decoding.begin(), decoding.end(), 0) == decoding.end())
    stats_.decode_step_rows_max = std::max<int64_t>(stats_.decode_step_rows_max, static_cast<int64_t>(hrow0.back()) +
                                                    static_cast<int64_t>(items.back().tokens.size()));
  const auto now = Clock::now();
  std::vector<size_t> walking;  // items whose rows are sampled
  for (size_t k = 0; k < items.size(); ++k) {
    Slot& s = *owners[k];
    const auto& prompt = s.req->prompt;
    if (decoding[k]) {
      s.history.push_back(s.pending);  // the drafts join as they are kept; commit() waits for that
      s.pending = -1;
    } else {
      s.history.insert(s.history.end(), items[k].tokens.begin(), items[k].tokens.end());
      s.prompt_fed += items[k].tokens.size();
      kv_->commit(*s.seq, s.history);
      if (s.spec && s.spec->wants_hidden()) {
        const int64_t T = static_cast<int64_t>(items[k].tokens.size());
        s.spec->observe(ctx_, hidden.slice_rows(hrow0[k], hrow0[k] + T), T, s.history);
      }
      if (s.prompt_fed < prompt.size()) continue;  // more prompt to feed next step
      // Prompt done: every prompt token is counted, reused ones as cached.
      stats_.prompt_tokens += prompt.size();
      stats_.prompt_tokens_cached += static_cast<uint64_t>(s.reused);
      const double ms = std::chrono::duration<double, std::milli>(now - s.admitted).count();
      const double queued_ms = std::chrono::duration<double, std::milli>(s.admitted - s.arrived).count();
      VI_LOG_INFO("prompt {} tokens = {} reused + {} computed in {:.1f} ms (after {:.1f} ms in the queue)",
                  prompt.size(), s.reused, static_cast<int64_t>(prompt.size()) - s.reused, ms, queued_ms);
    }
    walking.push_back(k);
  }
  std::vector<int64_t> keep(items.size(), 0);       // decode items: tokens of the pass kept
  std::vector<std::optional<FinishReason>> ends(items.size());
  std::vector<int32_t> last(items.size(), -1);      // the last sampled token, the next pending one
  for (int64_t r = 0; !walking.empty(); ++r) {
    std::vector<SampleResult> sampled;
    {
      Tensor picked = logits;  // every item's one row, in order: the logits as they are
      bool all = r == 0 && walking.size() == items.size();
      for (size_t k : walking) all = all && !items[k].all_logits;
      if (!all) {
        picked = ops::empty(ctx_, logits.dtype(), {static_cast<int64_t>(walking.size()), V});
        for (size_t j = 0; j < walking.size(); ++j) {
          const int64_t src = lrow0[walking[j]] + r;
          Tensor dst = picked.slice_rows(static_cast<int64_t>(j), static_cast<int64_t>(j) + 1);
          ops::copy(ctx_, logits.slice_rows(src, src + 1), dst);
        }
      }
      std::vector<Sampler*> samplers;
      std::vector<std::span<const int32_t>> hist;
      for (size_t k : walking) {
        samplers.push_back(&*owners[k]->sampler);
        hist.emplace_back(owners[k]->history);
      }
      sampled = sample_rows(ctx_, picked, samplers, hist);
    }
    std::vector<size_t> next;
    for (size_t j = 0; j < walking.size(); ++j) {
      const size_t k = walking[j];
      Slot& s = *owners[k];
      if (decoding[k]) keep[k] = r + 1;  // fed[0 .. r] precede this token
      // What the sequence holds once cut back to the kept tokens.
      const int64_t held = s.seq->n_past() - (decoding[k] ? static_cast<int64_t>(s.fed.size()) - keep[k] : 0);
      const int64_t row = lrow0[k] + r;
      if (s.req->cancelled->load()) {
        ends[k] = FinishReason::kCancelled;
        continue;
      }
      ends[k] = emit(s, sampled[j], logits.slice_rows(row, row + 1), held, now);
      last[k] = sampled[j].token;
      const bool draft_kept = decoding[k] && !ends[k] && static_cast<size_t>(r + 1) < s.fed.size() &&
                              s.fed[static_cast<size_t>(r + 1)] == sampled[j].token;
      if (!draft_kept) continue;
      s.history.push_back(sampled[j].token);
      next.push_back(k);
    }
    walking = std::move(next);
  }

  // 5. Cut each decoding sequence back to the tokens it kept (attention-only models truncate,
  // models with recurrent state take the checkpoint their pass left), then commit.
  for (size_t k = 0; k < items.size(); ++k) {
    Slot& s = *owners[k];
    if (!decoding[k]) continue;
    const int64_t n_pass = static_cast<int64_t>(s.fed.size());
    if (n_pass > 1) s.spec->record(n_pass - 1, keep[k] - 1);
    if (keep[k] == n_pass) continue;
    const int64_t to = s.seq->n_past() - n_pass + keep[k];
    VI_CHECK(s.seq->rollback(to), "speculative decoding: cannot take a sequence back from {} to {} tokens",
             s.seq->n_past(), to);
  }
  for (size_t k = 0; k < items.size(); ++k) {
    Slot& s = *owners[k];
    if (decoding[k]) {
      kv_->commit(*s.seq, s.history);
      if (s.spec && s.spec->wants_hidden())
        s.spec->observe(ctx_, hidden.slice_rows(hrow0[k], hrow0[k] + keep[k]), keep[k], s.history);
    }
    if (ends[k]) {
      if (s.spec) s.spec->finish(ctx_, s.history, last[k]);  // before end() caches the blocks
      finish(s, *ends[k]);
    } else if (last[k] >= 0) {
      s.pending = last[k];
    }
  }
  SpecStats total;
  for (auto& sp : slots_) {
    if (!sp->spec) continue;
    const SpecStats& t = sp->spec->stats();
    total.rounds += t.rounds, total.drafted += t.drafted, total.accepted += t.accepted, total.rollbacks += t.rollbacks;
  }
  stats_.spec = total;
}

std::optional<FinishReason> Engine::emit(Slot& s, const SampleResult& r, const Tensor& logits, int64_t held,
                                         Clock::time_point now) {
  const int64_t V = model_.info().n_vocab;
  Event ev;
  ev.kind = Event::Kind::kToken;
  ev.cached_tokens = s.reused;  // known from the first token on (a stop string may end the stream early)
  ev.token = r.token;
  if (s.req->params.top_logprobs >= 0) {
    // Log-probabilities under the model's own distribution (raw logits): this row only
    // comes to the host.
    Tensor host = logits_to_host_f32(ctx_, logits);
    std::span<const float> row(host.ptr<float>(), static_cast<size_t>(V));
    double mx = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float l : row) sum += std::exp(static_cast<double>(l) - mx);
    const double lse = mx + std::log(sum);
    ev.logprob = static_cast<float>(row[r.token] - lse);
    int n_top = std::min<int>(s.req->params.top_logprobs, static_cast<int>(V));
    if (n_top > 0) {
      std::vector<int32_t> idx(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) idx[v] = static_cast<int32_t>(v);
      std::partial_sort(idx.begin(), idx.begin() + n_top, idx.end(),
                        [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
      for (int t = 0; t < n_top; ++t) ev.top.push_back({idx[t], static_cast<float>(row[idx[t]] - lse)});
    }
  }
  const double since = std::chrono::duration<double>(now - (s.first_token_seen ? s.last_token : s.arrived)).count();
  if (!s.first_token_seen) {
    observe(stats_.ttft_counts, EngineStats::kTtftBuckets, std::size(EngineStats::kTtftBuckets), since,
            stats_.ttft_sum, stats_.ttft_n);
    s.first_token_seen = true;
  } else {
    observe(stats_.tpot_counts, EngineStats::kTpotBuckets, std::size(EngineStats::kTpotBuckets), since,
            stats_.tpot_sum, stats_.tpot_n);
  }
  s.last_token = now;
  const auto& stops = s.req->params.stop_tokens;
  const bool is_stop =
      !s.req->params.ignore_stop_tokens && std::find(stops.begin(), stops.end(), r.token) != stops.end();
  if (is_stop) return FinishReason::kStop;
  s.req->events->push(std::move(ev));
  s.generated++;
  stats_.generated_tokens++;
  const int64_t max_tokens = s.req->params.max_tokens;
  if ((max_tokens >= 0 && s.generated >= max_tokens) || held >= s.seq->capacity()) return FinishReason::kLength;
  return std::nullopt;
}

}  // namespace vi
