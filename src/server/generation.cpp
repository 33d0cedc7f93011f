// The per-request token -> text -> deltas pipeline (see generation.h).
#include "server/generation.h"

#include <algorithm>

#include <fmt/format.h>

#include "server/http_error.h"

namespace vi::server {

Generation::Generation(Engine& engine, const Tokenizer& tok, GenerationSpec spec)
    : engine_(engine),
      spec_(std::move(spec)),
      decoder_(tok, /*skip_special=*/true),
      stops_(spec_.stop),
      parser_(spec_.parser) {}

Generation::~Generation() {
  if (submitted_ && finish_ == Finish::kNone) req_->cancelled->store(true);
}

void Generation::submit() {
  req_ = std::make_shared<Request>();
  req_->prompt = spec_.prompt;
  req_->params = spec_.params;
  req_->arrived = spec_.arrived;
  const int64_t n_ctx = engine_.options().n_ctx;
  switch (engine_.submit(req_)) {
    case Engine::SubmitStatus::kOk: submitted_ = true; return;
    case Engine::SubmitStatus::kTooLong:
      throw HttpError(400,
                      fmt::format("the prompt is {} tokens long, but the context holds {} tokens (prompt and "
                                  "output together); shorten the prompt or start the server with a larger "
                                  "-c/--ctx-size",
                                  spec_.prompt.size(), n_ctx),
                      "messages", "context_length_exceeded");
    case Engine::SubmitStatus::kQueueFull:
      throw HttpError(503, "the server is overloaded (request queue full); retry later");
    case Engine::SubmitStatus::kEmpty: throw HttpError(400, "the prompt is empty", "prompt");
  }
}

void Generation::cancel() {
  if (req_) req_->cancelled->store(true);
  if (finish_ == Finish::kNone) finish_ = Finish::kCancelled;
}

void Generation::end(Update& u, Finish why) {
  // Text still held back (part of a possible stop string, a possible marker) is released.
  std::string tail = stops_.matched() ? std::string() : decoder_.flush();
  tail = stops_.push(tail);
  if (!stops_.matched()) tail += stops_.flush();
  for (auto& d : parser_.push(tail)) u.deltas.push_back(std::move(d));
  for (auto& d : parser_.finish()) u.deltas.push_back(std::move(d));
  if ((why == Finish::kStop || why == Finish::kStopString) && !parser_.tool_calls().empty()) why = Finish::kToolCalls;
  finish_ = why;
  u.done = true;
}

Generation::Update Generation::poll(std::chrono::milliseconds timeout) {
  Update u;
  if (finish_ != Finish::kNone) {
    u.done = true;
    return u;
  }
  std::string text;
  auto flush_text = [&] {
    if (text.empty()) return;
    for (auto& d : parser_.push(text)) u.deltas.push_back(std::move(d));
    text.clear();
  };
  for (auto ev = req_->events->pop(timeout); ev; ev = req_->events->pop(std::chrono::milliseconds(0))) {
    cached_tokens_ = std::max(cached_tokens_, ev->cached_tokens);
    if (ev->kind == Event::Kind::kToken) {
      ++completion_tokens_;
      if (spec_.logprobs) u.logprobs.push_back({ev->token, ev->logprob, std::move(ev->top)});
      text += stops_.push(decoder_.push(ev->token));
      if (stops_.matched()) {
        matched_stop_ = stops_.matched_stop();
        req_->cancelled->store(true);  // the engine stops at its next step
        flush_text();
        end(u, Finish::kStopString);
        return u;
      }
      continue;
    }
    flush_text();
    if (ev->kind == Event::Kind::kError) {
      error_ = ev->error;
      finish_ = Finish::kError;
      u.done = true;
      return u;
    }
    switch (ev->finish) {
      case FinishReason::kStop: end(u, Finish::kStop); break;
      case FinishReason::kLength:
      case FinishReason::kContextFull: end(u, Finish::kLength); break;
      case FinishReason::kCancelled: end(u, Finish::kCancelled); break;
    }
    return u;
  }
  flush_text();
  return u;
}

}  // namespace vi::server
