// The per-API half of a route: a Formatter turns a Generation's updates into the bytes
// that API's clients expect — SSE events while streaming, one JSON body otherwise. The
// HTTP plumbing (http_server.cpp) drives it the same way for every API.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "server/generation.h"
#include "server/server_context.h"

namespace vi::server {

class Formatter {
 public:
  virtual ~Formatter() = default;
  // SSE text sent as soon as the request is accepted (e.g. the role chunk).
  virtual std::string stream_begin(const Generation& g) = 0;
  // SSE text for one update (also called when not streaming, to collect logprobs).
  virtual std::string stream_update(const Generation& g, const Generation::Update& u) = 0;
  // SSE text after the last update (finish reason, usage, terminator).
  virtual std::string stream_end(const Generation& g) = 0;
  // SSE text for an error after the stream began.
  virtual std::string stream_error(const std::string& message) = 0;
  // The whole non-streaming response.
  virtual nlohmann::json full_response(const Generation& g) = 0;
};

// A parsed request: what to generate, how to answer.
struct Job {
  GenerationSpec spec;
  bool stream = false;
  std::unique_ptr<Formatter> formatter;
};

Job parse_openai_chat(const ServerContext& ctx, const nlohmann::json& body);
Job parse_openai_completion(const ServerContext& ctx, const nlohmann::json& body);
Job parse_anthropic_messages(const ServerContext& ctx, const nlohmann::json& body);

// "data: <json>\n\n" / "event: <name>\ndata: <json>\n\n".
std::string sse_data(const nlohmann::json& j);
std::string sse_event(const std::string& name, const nlohmann::json& j);

int64_t unix_now();

}  // namespace vi::server
