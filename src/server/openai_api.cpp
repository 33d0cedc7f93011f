// OpenAI routes: /v1/chat/completions and /v1/completions — request parsing into a Job
// and the response/chunk shapes the official `openai` SDK parses (chat.completion,
// chat.completion.chunk with role/content/reasoning_content/tool_calls deltas,
// text_completion, usage in a last chunk with empty choices when
// stream_options.include_usage is set, then "data: [DONE]").
#include <fmt/format.h>

#include <chrono>

#include "server/chat_prompt.h"
#include "server/formatter.h"
#include "server/http_error.h"
#include "server/request_fields.h"
#include "server/tool_choice.h"

namespace vi::server {

using nlohmann::json;
using nlohmann::ordered_json;

std::string sse_data(const json& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_event(const std::string& name, const json& j) {
  return "event: " + name + "\ndata: " + dump_json(j) + "\n\n";
}
int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

const char* openai_finish(Finish f) {
  switch (f) {
    case Finish::kLength: return "length";
    case Finish::kToolCalls: return "tool_calls";
    default: return "stop";
  }
}

json usage_json(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens()},
          {"completion_tokens", g.completion_tokens()},
          {"total_tokens", g.prompt_tokens() + g.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens()}}}};
}

json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat logprobs: {"token", "logprob", "bytes", "top_logprobs": [...]} per token.
json chat_logprob_entries(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps) {
  json out = json::array();
  for (const auto& lp : lps) {
    const std::string& piece = tok.token_to_piece(lp.token);
    json top = json::array();
    for (const auto& t : lp.top) {
      const std::string& p = tok.token_to_piece(t.token);
      top.push_back({{"token", p}, {"logprob", t.logprob}, {"bytes", byte_list(p)}});
    }
    out.push_back({{"token", piece}, {"logprob", lp.logprob}, {"bytes", byte_list(piece)}, {"top_logprobs", top}});
  }
  return out;
}

// The end of an OpenAI stream: the chunk with the finish reason, then (when the client asked for
// usage) a chunk of the response's fields with no choices and the usage, then [DONE].
std::string openai_stream_end(const json& finish_chunk, json usage_chunk, bool include_usage, const Generation& g) {
  std::string out = sse_data(finish_chunk);
  if (include_usage) {
    usage_chunk["choices"] = json::array();
    usage_chunk["usage"] = usage_json(g);
    out += sse_data(usage_chunk);
  }
  return out + "data: [DONE]\n\n";
}

// A failure after the stream began: an error event, then [DONE].
std::string openai_stream_error(const std::string& message) {
  return sse_data(error_body(ApiFlavor::kOpenAI, 500, message)) + "data: [DONE]\n\n";
}

class ChatFormatter : public Formatter {
 public:
  ChatFormatter(const ServerContext& ctx, bool include_usage, bool logprobs)
      : tok_(ctx.tokenizer), model_(ctx.opts.model_id), include_usage_(include_usage), logprobs_(logprobs),
        id_(random_id("chatcmpl-")), created_(unix_now()) {}

  std::string stream_begin(const Generation&) override {
    return sse_data(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
  }

  std::string stream_update(const Generation&, const Generation::Update& u) override {
    for (const auto& lp : u.logprobs) all_logprobs_.push_back(lp);
    pending_logprobs_.insert(pending_logprobs_.end(), u.logprobs.begin(), u.logprobs.end());
    std::string out;
    for (const auto& d : u.deltas) {
      json delta;
      switch (d.kind) {
        case OutputDelta::Kind::kContent: delta = {{"content", d.text}}; break;
        case OutputDelta::Kind::kReasoning: delta = {{"reasoning_content", d.text}}; break;
        case OutputDelta::Kind::kToolStart:
          delta = {{"tool_calls", json::array({{{"index", d.tool_index}, {"id", d.id}, {"type", "function"},
                                               {"function", {{"name", d.text}, {"arguments", ""}}}}})}};
          break;
        case OutputDelta::Kind::kToolArgs:
          delta = {{"tool_calls", json::array({{{"index", d.tool_index}, {"function", {{"arguments", d.text}}}}})}};
          break;
      }
      out += sse_data(chunk(delta, nullptr));
    }
    return out;
  }

  std::string stream_end(const Generation& g) override {
    return openai_stream_end(chunk(json::object(), openai_finish(g.finish())), base("chat.completion.chunk"),
                             include_usage_, g);
  }

  std::string stream_error(const std::string& message) override { return openai_stream_error(message); }

  json full_response(const Generation& g) override {
    const OutputParser& p = g.parser();
    json msg = {{"role", "assistant"}, {"content", p.content()}};
    if (!p.reasoning().empty()) msg["reasoning_content"] = p.reasoning();
    if (!p.tool_calls().empty()) {
      json calls = json::array();
      for (const auto& c : p.tool_calls())
        calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      msg["tool_calls"] = calls;
      if (p.content().empty()) msg["content"] = nullptr;
    }
    json choice = {{"index", 0}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", openai_finish(g.finish())}};
    if (logprobs_) choice["logprobs"] = {{"content", chat_logprob_entries(tok_, all_logprobs_)}};
    json r = base("chat.completion");
    r["choices"] = json::array({choice});
    r["usage"] = usage_json(g);
    return r;
  }

 private:
  json base(const char* object) const {
    return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_}, {"system_fingerprint", "voltinfer"}};
  }
  json chunk(json delta, const char* finish) {
    json choice = {{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish) choice["finish_reason"] = finish;
    // Logprobs ride on the next chunk after their tokens (tokens held back by a
    // possible stop string or marker have no chunk of their own).
    if (logprobs_ && (!pending_logprobs_.empty() || finish)) {
      choice["logprobs"] = {{"content", chat_logprob_entries(tok_, pending_logprobs_)}};
      pending_logprobs_.clear();
    }
    json c = base("chat.completion.chunk");
    c["choices"] = json::array({choice});
    if (include_usage_) c["usage"] = nullptr;
    return c;
  }

  const Tokenizer& tok_;
  std::string model_;
  bool include_usage_, logprobs_;
  std::string id_;
  int64_t created_;
  std::vector<TokenLogprobs> pending_logprobs_, all_logprobs_;
};

// Legacy completions logprobs: parallel arrays.
json completion_logprobs(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps, size_t offset0) {
  json tokens = json::array(), lp = json::array(), top = json::array(), offs = json::array();
  size_t off = offset0;
  for (const auto& t : lps) {
    const std::string& piece = tok.token_to_piece(t.token);
    tokens.push_back(piece);
    lp.push_back(t.logprob);
    json alt = json::object();
    for (const auto& a : t.top) alt[tok.token_to_piece(a.token)] = a.logprob;
    top.push_back(alt);
    offs.push_back(off);
    off += piece.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", offs}};
}

class CompletionFormatter : public Formatter {
 public:
  CompletionFormatter(const ServerContext& ctx, bool include_usage, bool logprobs)
      : tok_(ctx.tokenizer), model_(ctx.opts.model_id), include_usage_(include_usage), logprobs_(logprobs),
        id_(random_id("cmpl-")), created_(unix_now()) {}

  std::string stream_begin(const Generation&) override { return ""; }

  std::string stream_update(const Generation&, const Generation::Update& u) override {
    all_logprobs_.insert(all_logprobs_.end(), u.logprobs.begin(), u.logprobs.end());
    pending_.insert(pending_.end(), u.logprobs.begin(), u.logprobs.end());
    std::string text;
    for (const auto& d : u.deltas)
      if (d.kind == OutputDelta::Kind::kContent) text += d.text;
    if (text.empty()) return "";
    return sse_data(chunk(text, nullptr));
  }

  std::string stream_end(const Generation& g) override {
    return openai_stream_end(chunk("", openai_finish(g.finish())), base(), include_usage_, g);
  }

  std::string stream_error(const std::string& message) override { return openai_stream_error(message); }

  json full_response(const Generation& g) override {
    json choice = {{"text", g.parser().content()}, {"index", 0}, {"logprobs", nullptr},
                   {"finish_reason", openai_finish(g.finish())}};
    if (logprobs_) choice["logprobs"] = completion_logprobs(tok_, all_logprobs_, 0);
    json r = base();
    r["choices"] = json::array({choice});
    r["usage"] = usage_json(g);
    return r;
  }

 private:
  json base() const { return {{"id", id_}, {"object", "text_completion"}, {"created", created_}, {"model", model_}}; }
  json chunk(const std::string& text, const char* finish) {
    json choice = {{"text", text}, {"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (finish) choice["finish_reason"] = finish;
    if (logprobs_ && (!pending_.empty() || finish)) {
      choice["logprobs"] = completion_logprobs(tok_, pending_, sent_bytes_);
      for (const auto& t : pending_) sent_bytes_ += tok_.token_to_piece(t.token).size();
      pending_.clear();
    }
    json c = base();
    c["choices"] = json::array({choice});
    if (include_usage_) c["usage"] = nullptr;
    return c;
  }

  const Tokenizer& tok_;
  std::string model_;
  bool include_usage_, logprobs_;
  std::string id_;
  int64_t created_;
  size_t sent_bytes_ = 0;
  std::vector<TokenLogprobs> pending_, all_logprobs_;
};

bool include_usage(const json& body) {
  auto it = body.find("stream_options");
  if (it == body.end() || it->is_null()) return false;
  if (!it->is_object()) bad_field("stream_options", "must be an object");
  return opt_bool(*it, "include_usage").value_or(false);
}

}  // namespace

Job parse_openai_chat(const ServerContext& ctx, const json& body) {
  check_model(ctx, body);
  if (!body.contains("messages")) bad_field("messages", "is required");
  ordered_json messages = normalize_openai_messages(body["messages"]);
  const ToolChoice choice = parse_openai_tool_choice(body);
  ordered_json tools = apply_tool_choice(choice, normalize_openai_tools(body.value("tools", json())));
  if (auto rf = body.find("response_format"); rf != body.end() && !rf->is_null()) {
    if (!rf->is_object() || rf->value("type", "") != "text")
      bad_field("response_format", "only {\"type\": \"text\"} is supported");
  }

  // Template switches: chat_template_kwargs (vLLM, llama.cpp) and a top-level
  // enable_thinking (a common shortcut).
  ordered_json kwargs = ordered_json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_field("chat_template_kwargs", "must be an object");
    kwargs = ordered_json::parse(it->dump());
  }
  if (auto v = opt_bool(body, "enable_thinking")) kwargs["enable_thinking"] = *v;
  if (kwargs.contains("enable_thinking") && !kwargs["enable_thinking"].is_boolean())
    bad_field("chat_template_kwargs.enable_thinking", "must be true or false");

  Job job;
  ChatPrompt prompt = build_chat_prompt(ctx, messages, tools, kwargs);
  job.spec.prompt = std::move(prompt.tokens);
  job.spec.params.stop_tokens = ctx.tokenizer.stop_tokens();
  parse_sampling(body, ApiFlavor::kOpenAI, job.spec);
  parse_max_tokens_openai(body, job.spec);
  bool logprobs = opt_bool(body, "logprobs").value_or(false);
  if (auto n = opt_int(body, "top_logprobs", 0, 20)) {
    job.spec.params.top_logprobs = static_cast<int>(*n);
    logprobs = logprobs || *n > 0;
  }
  job.spec.logprobs = logprobs;
  job.spec.parser.reasoning = true;
  job.spec.parser.start_in_reasoning = prompt.opens_reasoning;
  job.spec.parser.tools = !tools.is_null();
  job.spec.parser.tool_parameters = tool_parameter_schemas(tools);
  if (choice.mode == ToolChoice::Mode::kNamed) job.spec.parser.only_tool = choice.name;
  job.spec.parser.id_prefix = "call_";
  job.stream = opt_bool(body, "stream").value_or(false);
  job.formatter = std::make_unique<ChatFormatter>(ctx, job.stream && include_usage(body), logprobs);
  return job;
}

Job parse_openai_completion(const ServerContext& ctx, const json& body) {
  check_model(ctx, body);
  Job job;
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad_field("prompt", "is required");
  const json* p = &*it;
  // A batch of one prompt is accepted; more would need n choices.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    job.spec.prompt = ctx.tokenizer.encode(p->get<std::string>(), /*add_special=*/true, /*parse_special=*/true);
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number_integer()) {
    for (const auto& t : *p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.tokenizer.n_vocab())
        bad_field("prompt", fmt::format("token ids must be integers in [0, {})", ctx.tokenizer.n_vocab()));
      job.spec.prompt.push_back(t.get<int32_t>());
    }
  } else {
    bad_field("prompt", "must be a string, a list of one string, or a list of token ids");
  }
  if (job.spec.prompt.empty()) bad_field("prompt", "is empty");
  if (opt_bool(body, "echo").value_or(false)) bad_field("echo", "is not supported");
  if (auto s = opt_string(body, "suffix"); s && !s->empty()) bad_field("suffix", "is not supported");
  job.spec.params.stop_tokens = ctx.tokenizer.stop_tokens();
  parse_sampling(body, ApiFlavor::kOpenAI, job.spec);
  if (auto b = opt_int(body, "max_tokens", 1, INT64_MAX)) job.spec.params.max_tokens = *b;
  else job.spec.params.max_tokens = 16;  // the API's documented default
  if (auto n = opt_int(body, "logprobs", 0, 20)) {
    job.spec.logprobs = true;
    job.spec.params.top_logprobs = static_cast<int>(*n);
  }
  job.spec.parser.reasoning = false;  // plain text in, plain text out
  job.spec.parser.tools = false;
  job.stream = opt_bool(body, "stream").value_or(false);
  job.formatter = std::make_unique<CompletionFormatter>(ctx, job.stream && include_usage(body), job.spec.logprobs);
  return job;
}

}  // namespace vi::server
