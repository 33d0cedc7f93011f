// One request's life on its HTTP thread: submit typed token ids to the engine, then turn
// the engine's token events into API-level deltas — incremental UTF-8-safe detokenizing,
// stop strings (with hold-back), then the reasoning/tool-call parser. A stop-string match
// or a vanished client sets the request's cancelled flag; the engine frees the sequence
// at its next step.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/output_parser.h"
#include "server/stop_strings.h"
#include "tokenizer/stream_decoder.h"

namespace vi::server {

// What the HTTP side decided about one generation (from JSON, template and tokenizer).
struct GenerationSpec {
  std::vector<int32_t> prompt;  // [n_prompt] token ids, template applied
  RequestParams params;
  std::vector<std::string> stop;  // stop strings
  ParserOptions parser;
  bool logprobs = false;
  // When the HTTP request came in (time to first token is measured from here).
  std::optional<std::chrono::steady_clock::time_point> arrived;
};

// One token's log-probability record for the APIs' logprobs fields.
struct TokenLogprobs {
  int32_t token = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

enum class Finish { kNone, kStop, kLength, kStopString, kToolCalls, kCancelled, kError };

class Generation {
 public:
  Generation(Engine& engine, const Tokenizer& tok, GenerationSpec spec);
  ~Generation();  // cancels a generation still running (the client went away)

  // Queues the request; throws HttpError (400 too long, 503 queue full).
  void submit();

  struct Update {
    std::vector<OutputDelta> deltas;
    std::vector<TokenLogprobs> logprobs;  // tokens received in this update (when asked)
    bool done = false;
  };
  // Waits up to `timeout` for events and processes every one available.
  Update poll(std::chrono::milliseconds timeout);
  void cancel();

  Finish finish() const { return finish_; }
  const std::string& error() const { return error_; }
  const std::string& matched_stop() const { return matched_stop_; }
  int64_t prompt_tokens() const { return static_cast<int64_t>(spec_.prompt.size()); }
  int64_t completion_tokens() const { return completion_tokens_; }
  // Prompt tokens the engine took from the prefix cache instead of computing them.
  int64_t cached_tokens() const { return cached_tokens_; }
  const OutputParser& parser() const { return parser_; }
  bool done() const { return finish_ != Finish::kNone; }

 private:
  void end(Update& u, Finish why);

  Engine& engine_;
  GenerationSpec spec_;
  std::shared_ptr<Request> req_;
  StreamDecoder decoder_;
  StopStringFilter stops_;
  OutputParser parser_;
  Finish finish_ = Finish::kNone;
  std::string error_, matched_stop_;
  int64_t completion_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  bool submitted_ = false;
};

}  // namespace vi::server
