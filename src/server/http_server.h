// The HTTP front end: cpp-httplib threads that authenticate, parse JSON, apply the chat
// template, tokenize, submit typed Requests to the Engine and stream its Events back as
// OpenAI / Anthropic responses. Routes:
//   POST /v1/chat/completions, /v1/completions (OpenAI), /v1/messages (Anthropic)
//   GET  /v1/models, /v1/models/{id}, /health, /metrics
// httplib stays out of this header so users of the server need none of its flags.
#pragma once

#include <memory>
#include <string>

#include "runtime/engine.h"
#include "server/server_context.h"
#include "tokenizer/tokenizer.h"

namespace vi::server {

class HttpServer {
 public:
  // chat_template: Jinja source, empty when the model has none. Throws vi::Error on a
  // template that does not parse.
  HttpServer(Engine& engine, Tokenizer tokenizer, const std::string& chat_template, ServerOptions opts);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket (port 0: any free port); returns the port. Throws
  // vi::Error naming host:port when it cannot bind.
  int bind();
  // Serves until stop() (from another thread); returns false if listening failed.
  bool run();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vi::server
