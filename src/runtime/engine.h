// The engine: one thread that owns the model and runs continuous batching.
// HTTP threads submit typed Requests (token ids + parameters) and read typed Events
// (token ids, finish, errors) from a per-request channel; the engine never sees JSON or
// text, the server never touches the model (DESIGN.md, data flow).
//
// Each step the scheduler (1) drops cancelled requests, (2) admits queued requests into
// free sequence slots, (3) gives every decoding sequence one token and fills the rest of
// the step's token budget with prompt chunks (chunked prefill, so a long prompt never
// stalls the running streams), (4) runs one batched forward pass and samples. With drafts
// (EngineOptions::spec) a decoding sequence's share of the pass is its token and its drafts,
// its rows are sampled in turn while they agree with the drafts, and the sequence is cut back
// to what was kept.
// Sequences keep their KV in one paged pool managed by runtime/kv_cache.h: a request
// whose prompt starts like an earlier one resumes from the longest cached prefix.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

namespace vi {

struct RequestParams {
  SamplingParams sampling;
  int64_t max_tokens = -1;                 // -1: until a stop token or the context is full
  std::vector<int32_t> stop_tokens;        // end generation (EOS/EOT of the model, added by the server)
  bool ignore_stop_tokens = false;
  int top_logprobs = 0;                    // 0: none; n > 0: the n most likely alternatives per token
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct Event {
  enum class Kind : uint8_t { kToken, kDone, kError };
  Kind kind = Kind::kToken;
  int32_t token = -1;                  // kToken
  float logprob = 0;                   // kToken: log p(token) under the sampling distribution
  std::vector<TokenLogprob> top;       // kToken, when top_logprobs > 0 (from the raw logits)
  FinishReason finish = FinishReason::kStop;  // kDone
  std::string error;                   // kError: a message for the client
  int64_t prompt_tokens = 0;           // kDone
  int64_t cached_tokens = 0;           // kToken, kDone: prompt tokens served from the prefix cache
  int64_t completion_tokens = 0;       // kDone
};

// A single-consumer channel of events for one request.
class EventChannel {
 public:
  void push(Event e);
  // Waits up to `timeout` for the next event; nullopt on timeout.
  std::optional<Event> pop(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
};

struct Request {
  std::vector<int32_t> prompt;
  RequestParams params;
  std::shared_ptr<EventChannel> events = std::make_shared<EventChannel>();
  // Set by the HTTP side (client gone, stop string matched); the engine frees the
  // sequence at its next step and sends no further events.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  // When the request arrived: Engine::submit stamps it unless the caller already did (the
  // server stamps it when the HTTP request came in, so template and tokenizer time count).
  // Time to first token and time in the queue are measured from here.
  std::optional<std::chrono::steady_clock::time_point> arrived;
};

struct EngineOptions {
  int max_seqs = 4;          // sequences decoded together (-np/--parallel)
  int64_t n_ctx = 4096;      // context per sequence (prompt + output)
  int64_t step_tokens = 256;  // token budget of one forward pass (decode tokens + prefill chunk)
  int max_queue = 64;        // requests waiting for a slot (all slots busy) beyond which submit() refuses (HTTP 503)
  // KV cache (runtime/kv_cache.h).
  bool prefix_cache = true;           // reuse cached prompt prefixes across requests
  int64_t kv_block_size = kDefaultKvBlockSize;  // tokens per KV block
  int64_t kv_blocks = 0;              // device KV pool; 0: max_seqs full contexts (the minimum)
  double cache_ram_gb = 0;            // host-RAM tier for evicted blocks/snapshots (--cache-ram)
  int64_t cache_snapshots = 0;        // state snapshot slots on the device; 0: auto (KvCacheOptions)
  int64_t snapshot_interval = 256;    // tokens between prompt snapshots (hybrid models)
  // Speculative decoding (runtime/speculative.h): each decoding sequence's pass also takes its
  // drafts; the tokens are those of decoding without them.
  SpecOptions spec;
  // A step whose sequences all decode keeps their tokens and drafts within this many rows (0: only
  // step_tokens binds), the drafts shared out evenly. `serve` sets Model::kMaxRecordedRows on a
  // GPU: larger steps are not recorded and their projections leave the decode GEMVs for the
  // prefill path.
  int64_t spec_step_rows = 0;
};

// Counters and distributions for /metrics; a consistent snapshot.
struct EngineStats {
  uint64_t requests_finished = 0;
  uint64_t requests_cancelled = 0;
  uint64_t requests_failed = 0;
  uint64_t prompt_tokens = 0;
  uint64_t generated_tokens = 0;
  uint64_t steps = 0;
  int queue_depth = 0;
  int running = 0;
  // Histograms: counts per bucket with these upper bounds (seconds); last bucket +Inf.
  // TTFT runs from the request's arrival (Request::arrived) to its first token, so it
  // includes the time spent waiting for a sequence slot; queue time is that wait alone
  // (arrival to admission).
  static constexpr double kTtftBuckets[] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  static constexpr double kTpotBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
  static constexpr double kQueueBuckets[] = {0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60};
  std::vector<uint64_t> ttft_counts, tpot_counts, queue_counts;
  double ttft_sum = 0, tpot_sum = 0, queue_sum = 0;
  uint64_t ttft_n = 0, tpot_n = 0, queue_n = 0;
  // Prefix cache and KV pools: cache.reused_tokens / cache.prompt_tokens is the token hit
  // rate, cache.hits / cache.lookups the request hit rate; pool sizes in blocks and bytes.
  uint64_t prompt_tokens_cached = 0;  // of prompt_tokens, those served from the cache
  KvCacheStats cache;
  SpecStats spec;  // drafts proposed and kept (EngineOptions::spec)
  int64_t decode_step_rows_max = 0;  // the most rows a step of decoding sequences only has taken
};

class Engine {
 public:
  Engine(const Model& model, ops::Context ctx, EngineOptions opts);
  ~Engine();  // stops the thread; pending requests get an error event
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  enum class SubmitStatus { kOk, kQueueFull, kTooLong, kEmpty };
  // Validates and queues. kTooLong when the prompt leaves no room in the context (the
  // server answers 400 with both numbers); kQueueFull -> 503.
  SubmitStatus submit(std::shared_ptr<Request> req);

  const EngineOptions& options() const { return opts_; }
  // Waits until no request is queued or running (tests, benchmarks).
  void wait_idle() const;
  const Model& model() const { return model_; }
  EngineStats stats() const;

 private:
  struct Slot;
  void loop();
  void step();
  void finish(Slot& s, FinishReason why);
  // Emits a sampled token of `s` (logits: its row); returns why the request ends with it, if it does.
  std::optional<FinishReason> emit(Slot& s, const SampleResult& r, const Tensor& logits, int64_t held,
                                   std::chrono::steady_clock::time_point now);

  const Model& model_;
  ops::Context ctx_;
  EngineOptions opts_;
  std::vector<std::unique_ptr<Slot>> slots_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  bool stop_ = false;
  EngineStats stats_;
  std::unique_ptr<KvCache> kv_;
  mutable std::condition_variable idle_cv_;
  std::thread thread_;
};

}  // namespace vi
