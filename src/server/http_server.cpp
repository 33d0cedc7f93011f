// Routes, authentication, error shapes and the streaming/non-streaming plumbing that
// drives a Generation for every API (see http_server.h).
#include "server/http_server.h"

#include <httplib.h>

#include <fmt/format.h>

#include <chrono>

#include "core/log.h"
#include "server/connection_watch.h"
#include "server/formatter.h"
#include "server/http_error.h"
#include "server/metrics.h"
#include "server/request_fields.h"

namespace vi::server {

using nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr auto kPollInterval = 50ms;  // how often a waiting request checks its client

ApiFlavor flavor_of(const httplib::Request& req) {
  return req.path.rfind("/v1/messages", 0) == 0 ? ApiFlavor::kAnthropic : ApiFlavor::kOpenAI;
}

void send_error(httplib::Response& res, ApiFlavor flavor, int status, const std::string& message,
                const std::string& param = {}, const std::string& code = {}) {
  res.status = status;
  res.set_content(dump_json(error_body(flavor, status, message, param, code)), "application/json");
}

// Constant-time comparison, so the key cannot be guessed byte by byte from timings.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/models", "/health", "/metrics"})
    if (path == r) return r;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& engine, Tokenizer tok, const std::string& tmpl, ServerOptions opts)
      : ctx{engine, std::move(tok), std::nullopt, std::move(opts), unix_now(), {}} {
    if (!tmpl.empty()) ctx.chat_template.emplace(tmpl);
    setup();
  }

  void setup();
  void generate(Job (*parse)(const ServerContext&, const json&), const httplib::Request& req,
                httplib::Response& res);
  void models(const httplib::Request& req, httplib::Response& res, const std::string* id);

  // Wraps a handler: client errors in the route's API shape, anything else a 500.
  template <typename F>
  httplib::Server::Handler guarded(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const HttpError& e) {
        send_error(res, flavor_of(req), e.status, e.what(), e.param, e.code);
      } catch (const std::exception& e) {
        VI_LOG_ERROR("{} {}: {}", req.method, req.path, e.what());
        send_error(res, flavor_of(req), 500, std::string("internal error: ") + e.what());
      }
    };
  }

  ServerContext ctx;
  httplib::Server http;
  int port = -1;
};

void HttpServer::Impl::setup() {
  const EngineOptions& eo = ctx.engine.options();
  // One thread per request the engine can hold (running + queued) and a few for
  // /health and /metrics: a waiting request must never block a probe.
  const size_t threads = ctx.opts.http_threads > 0 ? static_cast<size_t>(ctx.opts.http_threads)
                                                   : static_cast<size_t>(eo.max_seqs + eo.max_queue + 8);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(ctx.opts.max_body);
  http.set_tcp_nodelay(true);  // SSE chunks are small and latency matters

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ctx.opts.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    std::string key;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    else if (req.has_header("x-api-key")) key = req.get_header_value("x-api-key");
    if (same_key(key, ctx.opts.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, flavor_of(req), 401,
               key.empty() ? "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                           : "invalid API key",
               {}, "invalid_api_key");
    return httplib::Server::HandlerResponse::Handled;
  });

  // Errors httplib produces itself (413 body too large, 404 no route) get a JSON body.
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg = res.status == 413 ? fmt::format("the request body is larger than the limit of {} bytes "
                                                      "(--max-body)", ctx.opts.max_body)
                      : res.status == 404 ? fmt::format("no route {} {}", req.method, req.path)
                                          : fmt::format("HTTP error {}", res.status);
    send_error(res, flavor_of(req), res.status, msg);
    return httplib::Server::HandlerResponse::Handled;
  }));

  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    std::lock_guard<std::mutex> lock(ctx.counters.mu);
    ctx.counters.http[{route_label(req.path), res.status}]++;
  });

  http.Get("/health", guarded([this](const httplib::Request&, httplib::Response& res) {
             EngineStats s = ctx.engine.stats();
             res.set_content(dump_json({{"status", "ok"}, {"running", s.running}, {"queued", s.queue_depth}}),
                             "application/json");
           }));
  http.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
             res.set_content(render_metrics(ctx), "text/plain; version=0.0.4; charset=utf-8");
           }));
  http.Get("/v1/models", guarded([this](const httplib::Request& req, httplib::Response& res) {
             models(req, res, nullptr);
           }));
  http.Get(R"(/v1/models/(.+))", guarded([this](const httplib::Request& req, httplib::Response& res) {
             std::string id = req.matches[1];
             models(req, res, &id);
           }));
  http.Post("/v1/chat/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
              generate(&parse_openai_chat, req, res);
            }));
  http.Post("/v1/completions", guarded([this](const httplib::Request& req, httplib::Response& res) {
              generate(&parse_openai_completion, req, res);
            }));
  http.Post("/v1/messages", guarded([this](const httplib::Request& req, httplib::Response& res) {
              generate(&parse_anthropic_messages, req, res);
            }));
}

void HttpServer::Impl::models(const httplib::Request& req, httplib::Response& res, const std::string* id) {
  const std::string& name = ctx.opts.model_id;
  if (id && *id != name)
    throw HttpError(404, fmt::format("the model '{}' does not exist; this server serves '{}'", *id, name), "model",
                    "model_not_found");
  json entry;
  if (req.has_header("anthropic-version")) {  // the Anthropic SDK's models.list()
    entry = {{"type", "model"}, {"id", name}, {"display_name", name}, {"created_at", "1970-01-01T00:00:00Z"}};
    if (!id) entry = {{"data", json::array({entry})}, {"has_more", false}, {"first_id", name}, {"last_id", name}};
  } else {
    entry = {{"id", name}, {"object", "model"}, {"created", ctx.created}, {"owned_by", "voltinfer"},
             {"meta", {{"n_ctx", ctx.engine.options().n_ctx}, {"n_vocab", ctx.tokenizer.n_vocab()}}}};
    if (!id) entry = {{"object", "list"}, {"data", json::array({entry})}};
  }
  res.set_content(dump_json(entry), "application/json");
}

void HttpServer::Impl::generate(Job (*parse)(const ServerContext&, const json&), const httplib::Request& req,
                                httplib::Response& res) {
  const auto arrived = std::chrono::steady_clock::now();  // before template and tokenizer
  json body = parse_body(req.body);
  Job job = parse(ctx, body);
  job.spec.arrived = arrived;
  auto gen = std::make_shared<Generation>(ctx.engine, ctx.tokenizer, std::move(job.spec));
  gen->submit();  // 400 too long / 503 queue full, before any byte of the answer
  auto watch = std::make_shared<ConnectionWatch>(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  std::shared_ptr<Formatter> fmt(std::move(job.formatter));

  if (!job.stream) {
    while (!gen->done()) {
      auto u = gen->poll(kPollInterval);
      fmt->stream_update(*gen, u);
      if (!gen->done() && watch->closed()) {
        gen->cancel();
        ctx.counters.client_disconnects++;
        res.status = 499;  // nobody reads it; keeps the log honest
        return;
      }
    }
    if (gen->finish() == Finish::kError) throw HttpError(500, "generation failed: " + gen->error());
    if (gen->finish() == Finish::kStopString) ctx.counters.stop_string_matches++;
    res.set_content(dump_json(fmt->full_response(*gen)), "application/json");
    return;
  }

  struct Stream {
    std::shared_ptr<Generation> gen;
    std::shared_ptr<Formatter> fmt;
    std::shared_ptr<ConnectionWatch> watch;
    bool begun = false, ended = false, gone = false;
  };
  auto st = std::make_shared<Stream>(Stream{gen, fmt, watch});
  auto client_gone = [this, st] {
    if (st->gone || st->ended) return;
    st->gone = true;
    st->gen->cancel();
    ctx.counters.client_disconnects++;
  };
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, st, client_gone](size_t, httplib::DataSink& sink) {
        std::string out;
        if (!st->begun) {
          out = st->fmt->stream_begin(*st->gen);
          st->begun = true;
        } else {
          auto u = st->gen->poll(kPollInterval);
          out = st->fmt->stream_update(*st->gen, u);
          if (u.done) {
            if (st->gen->finish() == Finish::kError) out += st->fmt->stream_error("generation failed: " + st->gen->error());
            else out += st->fmt->stream_end(*st->gen);
            if (st->gen->finish() == Finish::kStopString) ctx.counters.stop_string_matches++;
          }
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          client_gone();
          return false;
        }
        if (st->gen->done()) {
          st->ended = true;
          sink.done();
          return true;
        }
        if (st->watch->closed()) {
          client_gone();
          return false;
        }
        return true;
      },
      [client_gone](bool success) {
        if (!success) client_gone();
      });
}

HttpServer::HttpServer(Engine& engine, Tokenizer tokenizer, const std::string& chat_template, ServerOptions opts)
    : impl_(std::make_unique<Impl>(engine, std::move(tokenizer), chat_template, std::move(opts))) {}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  auto& I = *impl_;
  if (I.ctx.opts.port == 0) {
    I.port = I.http.bind_to_any_port(I.ctx.opts.host);
    VI_CHECK(I.port > 0, "cannot listen on {} (any port)", I.ctx.opts.host);
  } else {
    if (!I.http.bind_to_port(I.ctx.opts.host, I.ctx.opts.port))
      throw Error(fmt::format("cannot listen on {}:{} (address in use, or not an address of this machine?)",
                              I.ctx.opts.host, I.ctx.opts.port));
    I.port = I.ctx.opts.port;
  }
  return I.port;
}

bool HttpServer::run() { return impl_->http.listen_after_bind(); }

void HttpServer::stop() { impl_->http.stop(); }

}  // namespace vi::server
