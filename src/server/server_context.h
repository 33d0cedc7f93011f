// What every route handler shares: the engine, tokenizer, chat template, options and
// the server's own counters (the engine keeps the token-level ones).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "runtime/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace vi::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;            // empty: no authentication
  size_t max_body = 8u << 20;     // bytes of a request body (HTTP 413 above)
  std::string model_id;           // reported by /v1/models and required of "model" fields
  int http_threads = 0;           // 0: enough for every sequence plus waiting clients
};

struct ServerCounters {
  std::atomic<uint64_t> client_disconnects{0};  // clients gone before their answer was complete
  std::atomic<uint64_t> stop_string_matches{0};
  std::mutex mu;
  std::map<std::pair<std::string, int>, uint64_t> http;  // (route, status) -> responses
};

struct ServerContext {
  Engine& engine;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;  // absent: the model has none (chat routes answer 400)
  ServerOptions opts;
  int64_t created = 0;  // unix time the server started (the model's "created")
  ServerCounters counters;
};

}  // namespace vi::server
