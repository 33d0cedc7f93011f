// Anthropic route /v1/messages: Messages API requests (system, content blocks,
// tool_use / tool_result, thinking) into a Job, and the message / SSE event sequence the
// official `anthropic` SDK parses: message_start, content_block_start/delta/stop per
// block (thinking, text, tool_use with input_json_delta), message_delta with stop_reason
// and usage, message_stop.
#include <fmt/format.h>

#include "server/chat_prompt.h"
#include "server/formatter.h"
#include "server/http_error.h"
#include "server/request_fields.h"
#include "server/tool_choice.h"

namespace vi::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

const char* stop_reason(Finish f) {
  switch (f) {
    case Finish::kLength: return "max_tokens";
    case Finish::kToolCalls: return "tool_use";
    case Finish::kStopString: return "stop_sequence";
    default: return "end_turn";
  }
}

json tool_input(const std::string& arguments) {
  json in = json::parse(arguments, nullptr, false);
  return in.is_object() ? in : json::object();
}

class MessagesFormatter : public Formatter {
 public:
  explicit MessagesFormatter(const ServerContext& ctx) : model_(ctx.opts.model_id), id_(random_id("msg_")) {}

  std::string stream_begin(const Generation& g) override {
    json msg = base();
    msg["content"] = json::array();
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = {{"input_tokens", g.prompt_tokens()}, {"output_tokens", 0}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", msg}});
  }

  std::string stream_update(const Generation&, const Generation::Update& u) override {
    std::string out;
    for (const auto& d : u.deltas) {
      switch (d.kind) {
        case OutputDelta::Kind::kReasoning:
          out += open_block(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
          out += delta({{"type", "thinking_delta"}, {"thinking", d.text}});
          break;
        case OutputDelta::Kind::kContent:
          out += open_block(Block::kText, {{"type", "text"}, {"text", ""}});
          out += delta({{"type", "text_delta"}, {"text", d.text}});
          break;
        case OutputDelta::Kind::kToolStart:
          out += close_block();
          out += open_block(Block::kTool, {{"type", "tool_use"}, {"id", d.id}, {"name", d.text}, {"input", json::object()}});
          break;
        case OutputDelta::Kind::kToolArgs:
          out += delta({{"type", "input_json_delta"}, {"partial_json", d.text}});
          break;
      }
    }
    return out;
  }

  std::string stream_end(const Generation& g) override {
    std::string out = close_block();
    json d = {{"stop_reason", stop_reason(g.finish())}, {"stop_sequence", nullptr}};
    if (g.finish() == Finish::kStopString) d["stop_sequence"] = g.matched_stop();
    out += sse_event("message_delta", {{"type", "message_delta"}, {"delta", d},
                                       {"usage", {{"output_tokens", g.completion_tokens()}}}});
    out += sse_event("message_stop", {{"type", "message_stop"}});
    return out;
  }

  std::string stream_error(const std::string& message) override {
    return sse_event("error", error_body(ApiFlavor::kAnthropic, 500, message));
  }

  json full_response(const Generation& g) override {
    const OutputParser& p = g.parser();
    json content = json::array();
    if (!p.reasoning().empty()) content.push_back({{"type", "thinking"}, {"thinking", p.reasoning()}, {"signature", ""}});
    if (!p.content().empty() || (p.tool_calls().empty() && p.reasoning().empty()))
      content.push_back({{"type", "text"}, {"text", p.content()}});
    for (const auto& c : p.tool_calls())
      content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", tool_input(c.arguments)}});
    json msg = base();
    msg["content"] = content;
    msg["stop_reason"] = stop_reason(g.finish());
    msg["stop_sequence"] = g.finish() == Finish::kStopString ? json(g.matched_stop()) : json(nullptr);
    msg["usage"] = {{"input_tokens", g.prompt_tokens()}, {"output_tokens", g.completion_tokens()}};
    return msg;
  }

 private:
  enum class Block { kNone, kThinking, kText, kTool };

  json base() const { return {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_}}; }

  std::string open_block(Block kind, json start) {
    if (block_ == kind && kind != Block::kTool) return "";
    std::string out = close_block();
    block_ = kind;
    out += sse_event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", start}});
    return out;
  }
  std::string close_block() {
    if (block_ == Block::kNone) return "";
    block_ = Block::kNone;
    return sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_++}});
  }
  std::string delta(json d) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }

  std::string model_, id_;
  Block block_ = Block::kNone;
  int index_ = 0;
};

// Anthropic messages -> template messages (tool_result blocks become role "tool").
ordered_json convert_messages(const json& body) {
  ordered_json out = ordered_json::array();
  if (auto sys = body.find("system"); sys != body.end() && !sys->is_null())
    out.push_back({{"role", "system"}, {"content", content_text(*sys, "system")}});
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) bad_field("messages", "must be a non-empty array");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_field(where, "must be an object with a string 'role'");
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") bad_field(where + ".role", "must be \"user\" or \"assistant\"");
    const json content = m.value("content", json());
    if (content.is_string()) {
      out.push_back({{"role", role}, {"content", content}});
      continue;
    }
    if (!content.is_array()) bad_field(where + ".content", "must be a string or an array of content blocks");
    std::string text, thinking;
    ordered_json calls = ordered_json::array();
    for (size_t k = 0; k < content.size(); ++k) {
      const json& b = content[k];
      const std::string bw = fmt::format("{}.content[{}]", where, k);
      const std::string type = b.is_object() ? b.value("type", "") : "";
      if (type == "text") {
        text += b.value("text", "");
      } else if (type == "thinking" && role == "assistant") {
        thinking += b.value("thinking", "");
      } else if (type == "redacted_thinking") {
        // Opaque to us; nothing to render.
      } else if (type == "tool_use" && role == "assistant") {
        if (!b.contains("name") || !b["name"].is_string()) bad_field(bw + ".name", "must be a string");
        ordered_json input = b.contains("input") && b["input"].is_object() ? ordered_json::parse(b["input"].dump())
                                                                            : ordered_json::object();
        calls.push_back({{"id", b.value("id", "")}, {"type", "function"},
                         {"function", {{"name", b["name"]}, {"arguments", input}}}});
      } else if (type == "tool_result" && role == "user") {
        // Text that preceded the result in the same turn stays before it.
        if (!text.empty()) {
          out.push_back({{"role", "user"}, {"content", text}});
          text.clear();
        }
        std::string result = content_text(b.value("content", json("")), bw);
        if (b.value("is_error", false)) result = "Error: " + result;
        out.push_back({{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")}, {"content", result}});
      } else {
        bad_field(bw, fmt::format("content block of type '{}' is not supported here", type));
      }
    }
    if (role == "assistant") {
      ordered_json msg = {{"role", "assistant"}, {"content", text}};
      if (!thinking.empty()) msg["reasoning_content"] = thinking;
      if (!calls.empty()) msg["tool_calls"] = calls;
      out.push_back(std::move(msg));
    } else if (!text.empty()) {
      out.push_back({{"role", "user"}, {"content", text}});
    }
  }
  return out;
}

// Anthropic tools ({name, description, input_schema}) -> the OpenAI-style tools templates take.
ordered_json convert_tools(const json& body) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return nullptr;
  if (!it->is_array()) bad_field("tools", "must be an array");
  if (it->empty()) return nullptr;
  ordered_json tools = ordered_json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      bad_field(fmt::format("tools[{}]", i), "must be an object with a string 'name'");
    ordered_json f = {{"name", t["name"]}};
    if (t.contains("description")) f["description"] = t["description"];
    f["parameters"] = t.contains("input_schema") ? ordered_json::parse(t["input_schema"].dump())
                                                 : ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
    tools.push_back({{"type", "function"}, {"function", f}});
  }
  return tools;
}

}  // namespace

Job parse_anthropic_messages(const ServerContext& ctx, const json& body) {
  check_model(ctx, body);
  auto max_tokens = opt_int(body, "max_tokens", 1, INT64_MAX);
  if (!max_tokens) bad_field("max_tokens", "is required");
  ordered_json messages = convert_messages(body);
  const ToolChoice choice = parse_anthropic_tool_choice(body);
  ordered_json tools = apply_tool_choice(choice, convert_tools(body));

  ordered_json kwargs = ordered_json::object();
  if (auto th = body.find("thinking"); th != body.end() && !th->is_null()) {
    const std::string type = th->is_object() ? th->value("type", "") : "";
    if (type == "enabled") kwargs["enable_thinking"] = true;
    else if (type == "disabled") kwargs["enable_thinking"] = false;
    else if (type != "adaptive") bad_field("thinking.type", "must be \"enabled\", \"disabled\" or \"adaptive\"");
  }

  Job job;
  ChatPrompt prompt = build_chat_prompt(ctx, messages, tools, kwargs);
  job.spec.prompt = std::move(prompt.tokens);
  job.spec.params.stop_tokens = ctx.tokenizer.stop_tokens();
  job.spec.params.max_tokens = *max_tokens;
  parse_sampling(body, ApiFlavor::kAnthropic, job.spec);
  job.spec.parser.reasoning = true;
  job.spec.parser.start_in_reasoning = prompt.opens_reasoning;
  job.spec.parser.tools = !tools.is_null();
  job.spec.parser.tool_parameters = tool_parameter_schemas(tools);
  if (choice.mode == ToolChoice::Mode::kNamed) job.spec.parser.only_tool = choice.name;
  job.spec.parser.id_prefix = "toolu_";
  job.stream = opt_bool(body, "stream").value_or(false);
  job.formatter = std::make_unique<MessagesFormatter>(ctx);
  return job;
}

}  // namespace vi::server
