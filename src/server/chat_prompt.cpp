// Conversation -> template messages -> prompt text -> token ids (see chat_prompt.h).
#include "server/chat_prompt.h"

#include <fmt/format.h>

#include "server/http_error.h"

namespace vi::server {

using nlohmann::json;
using nlohmann::ordered_json;

std::string content_text(const json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_field(where + ".content", "must be a string or an array of content parts");
  std::string text;
  for (const auto& part : content) {
    if (part.is_string()) {
      text += part.get<std::string>();
      continue;
    }
    std::string type = part.is_object() && part.contains("type") && part["type"].is_string()
                           ? part["type"].get<std::string>() : "";
    if ((type == "text" || type.empty()) && part.is_object() && part.contains("text") && part["text"].is_string()) {
      text += part["text"].get<std::string>();
    } else {
      bad_field(where + ".content",
                fmt::format("content part of type '{}' is not supported (this server takes text only)", type));
    }
  }
  return text;
}

ordered_json normalize_openai_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) bad_field("messages", "must be a non-empty array");
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      bad_field(where, "must be an object with a string 'role'");
    std::string role = m["role"].get<std::string>();
    if (role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      bad_field(where + ".role", fmt::format("unknown role '{}'", role));
    ordered_json msg = {{"role", role}, {"content", content_text(m.value("content", json()), where)}};
    for (const char* key : {"reasoning_content", "reasoning"}) {
      if (m.contains(key) && m[key].is_string()) msg["reasoning_content"] = m[key];
    }
    if (role == "tool") {
      if (m.contains("tool_call_id") && m["tool_call_id"].is_string()) msg["tool_call_id"] = m["tool_call_id"];
      if (m.contains("name") && m["name"].is_string()) msg["name"] = m["name"];
    }
    if (role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) bad_field(where + ".tool_calls", "must be an array");
      ordered_json tc = ordered_json::array();
      for (size_t k = 0; k < calls.size(); ++k) {
        const json& c = calls[k];
        const std::string cw = fmt::format("{}.tool_calls[{}]", where, k);
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          bad_field(cw, "must be an object with a 'function'");
        const json& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string()) bad_field(cw + ".function.name", "must be a string");
        // Templates iterate the arguments as a mapping; the API sends them as JSON text.
        ordered_json args = ordered_json::object();
        if (f.contains("arguments") && f["arguments"].is_string()) {
          args = ordered_json::parse(f["arguments"].get<std::string>(), nullptr, false);
          if (args.is_discarded() || !args.is_object())
            bad_field(cw + ".function.arguments", "must be a JSON object encoded as a string");
        } else if (f.contains("arguments") && f["arguments"].is_object()) {
          args = f["arguments"];
        }
        ordered_json call = {{"type", "function"},
                             {"function", {{"name", f["name"]}, {"arguments", args}}}};
        if (c.contains("id") && c["id"].is_string()) call["id"] = c["id"];
        tc.push_back(std::move(call));
      }
      msg["tool_calls"] = std::move(tc);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

ordered_json normalize_openai_tools(const json& tools) {
  if (tools.is_null()) return nullptr;
  if (!tools.is_array()) bad_field("tools", "must be an array");
  if (tools.empty()) return nullptr;
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object() ||
        !t["function"].contains("name") || !t["function"]["name"].is_string())
      bad_field(fmt::format("tools[{}]", i), "must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    if (t.contains("type") && t["type"] != "function")
      bad_field(fmt::format("tools[{}].type", i), "only \"function\" tools are supported");
  }
  // Re-parse to keep the client's key order (the template prints the tools as JSON).
  return ordered_json::parse(tools.dump());
}

json tool_parameter_schemas(const ordered_json& tools) {
  json out = json::object();
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    const auto& f = t.contains("function") ? t["function"] : t;
    if (f.contains("name") && f["name"].is_string() && f.contains("parameters"))
      out[f["name"].get<std::string>()] = json::parse(f["parameters"].dump());
  }
  return out;
}

ChatPrompt build_chat_prompt(const ServerContext& ctx, const ordered_json& messages, const ordered_json& tools,
                             const ordered_json& kwargs) {
  if (!ctx.chat_template)
    throw HttpError(400, "the model has no chat template; use /v1/completions with a plain prompt");
  const Tokenizer& tok = ctx.tokenizer;
  ordered_json extra = ordered_json::object();
  if (tok.bos() >= 0) extra["bos_token"] = tok.token_to_piece(tok.bos());
  if (tok.eos() >= 0) extra["eos_token"] = tok.token_to_piece(tok.eos());
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) extra[it.key()] = it.value();
  ChatPrompt p;
  try {
    p.text = ctx.chat_template->render_chat(messages, tools, /*add_generation_prompt=*/true, extra);
  } catch (const ChatTemplateRaise& e) {
    throw HttpError(400, std::string("the chat template rejected the conversation: ") + e.what(), "messages");
  } catch (const Error& e) {
    throw HttpError(400, std::string("the chat template failed on this conversation: ") + e.what(), "messages");
  }
  std::string_view t = p.text;
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.remove_suffix(1);
  p.opens_reasoning = t.ends_with("<think>");
  p.tokens = tok.encode(p.text, /*add_special=*/false, /*parse_special=*/true);
  return p;
}

}  // namespace vi::server
