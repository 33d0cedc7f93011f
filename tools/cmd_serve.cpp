// `voltinfer serve`: the OpenAI- and Anthropic-compatible HTTP server. Loads the model,
// starts the engine thread (continuous batching over -np sequences) and the HTTP threads;
// SIGINT/SIGTERM stop it cleanly. Flag names follow llama-server.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

struct ServeArgs {
  ModelFlags model;
  server::ServerOptions server;
  std::string alias;
  int parallel = 4;
  int64_t batch = 0;  // 0: 2048 on a GPU, 256 on the CPU
  int max_queue = 64;
  double cache_ram = 0;  // GB
  bool no_prefix_cache = false;
  int64_t kv_blocks = 0;
  SpecFlags spec;
};

std::string model_name(const std::string& path) {
  std::filesystem::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "folder/" -> "folder"
  return p.filename().string();
}

void run_serve(ServeArgs& a) {
  // Signals go to one waiting thread, not to whichever engine/HTTP thread they hit: block
  // them here, before any thread exists, so every later thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a vanished client must not kill the server

  a.model.draft_head = a.spec.kind == "mtp";
  Loaded L = load(a.model);
  EngineOptions eo;
  eo.max_seqs = a.parallel;
  eo.n_ctx = L.n_ctx;
  // A GPU runs a prompt's matrices on tensor cores near peak only with long chunks (an 8K
  // prompt on the H200: 3518 tok/s in chunks of 512, 4509 in chunks of 2048); the CPU gains
  // nothing from them and would hold decoding sequences up for longer.
  eo.step_tokens = a.batch > 0 ? a.batch : L.ctx.device == Device::CPU ? 256 : 2048;
  eo.max_queue = a.max_queue;
  eo.cache_ram_gb = a.cache_ram;
  eo.prefix_cache = !a.no_prefix_cache;
  eo.kv_blocks = a.kv_blocks;
  eo.spec = a.spec.options();
  // On a GPU, steps of decoding sequences keep their drafts within what one recorded step takes.
  if (L.ctx.device != Device::CPU) eo.spec_step_rows = Model::kMaxRecordedRows;
  Engine engine(*L.model, L.ctx, eo);

  a.server.model_id = !a.alias.empty() ? a.alias
                      : model_name(a.model.model.empty() ? default_model_path() : a.model.model);
  server::HttpServer http(engine, *L.tokenizer, L.chat_template, a.server);
  int port = http.bind();
  const std::string drafts = eo.spec.kind == SpecKind::kOff
                                 ? ""
                                 : fmt::format(", {} drafts (up to {} a sequence{})", spec_kind_name(eo.spec.kind),
                                               eo.spec.draft_max,
                                               eo.spec_step_rows > 0
                                                   ? fmt::format(", {} rows a decoding step", eo.spec_step_rows)
                                                   : "");
  std::fprintf(stderr, "serving '%s' on http://%s:%d (%d parallel sequences, context %lld tokens each%s%s)\n",
               a.server.model_id.c_str(), a.server.host.c_str(), port, eo.max_seqs,
               static_cast<long long>(eo.n_ctx), drafts.c_str(),
               a.server.api_key.empty() ? "" : ", API key required");
  std::fflush(stderr);

  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "signal %d: stopping\n", sig);
    http.stop();
  });
  bool ok = http.run();
  if (waiter.joinable()) {
    // run() ended without a signal (listen failed): wake the waiter so it can be joined.
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
  }
  VI_CHECK(ok, "the HTTP server stopped unexpectedly on {}:{}", a.server.host, port);
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the model over HTTP: OpenAI (/v1/chat/completions, /v1/completions, /v1/models) and\n"
               "Anthropic (/v1/messages) APIs, streaming, /health, /metrics");
  a->model.log_level = "info";  // a server logs each request (prompt tokens reused/computed)
  a->model.add(*cmd);
  cmd->add_option("--host", a->server.host, "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: all)");
  cmd->add_option("--port", a->server.port, "Port to listen on (0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", a->server.api_key,
                  "Require this key (Authorization: Bearer KEY, or x-api-key: KEY) on every route but /health");
  cmd->add_option("--parallel", a->parallel, "Sequences decoded together (also -np)")->check(CLI::Range(1, 1024));
  cmd->add_option("--alias", a->alias, "Model id reported by /v1/models and expected in requests (default: file name)");
  cmd->add_option("--max-body", a->server.max_body, "Largest request body in bytes (HTTP 413 above)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-b,--batch-size", a->batch,
                  "Tokens per forward pass: decode tokens plus prompt chunks (chunked prefill); default 2048 on a GPU, 256 on the CPU")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->add_option("--max-queue", a->max_queue, "Requests that may wait when every sequence is busy; one more gets HTTP 503 (0: none wait)")
      ->check(CLI::Range(0, 1 << 20));
  // KV cache.
  cmd->add_option("--cache-ram", a->cache_ram,
                  "Host RAM in GB for KV blocks and state snapshots evicted from the device pool (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-prefix-cache", a->no_prefix_cache, "Compute every prompt in full (no prefix reuse)");
  cmd->add_option("--kv-blocks", a->kv_blocks,
                  "KV pool size in blocks of 16 tokens (0: -np full contexts, the minimum); the part no "
                  "running sequence uses caches prefixes")
      ->check(CLI::NonNegativeNumber);
  a->spec.add(*cmd);
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace vi::cli
