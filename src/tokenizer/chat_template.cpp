// ChatTemplate: parse once, render many times (see chat_template.h). render_chat
// reproduces what transformers does to messages before the template sees them.
#include "tokenizer/chat_template.h"

#include <fmt/format.h>

#include <map>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_interp.h"

namespace vi {

using ojson = nlohmann::ordered_json;

ChatTemplate::ChatTemplate(std::string source) : source_(std::move(source)) {
  tpl_ = jinja::parse_template(source_);
}

std::string ChatTemplate::render(const ojson& context) const {
  if (!context.is_object()) throw Error("chat template: render() context must be a JSON object");
  jinja::Interpreter interp(*tpl_);
  return interp.render(jinja::from_json(context));
}

std::string ChatTemplate::render(const nlohmann::json& context) const { return render(ojson(context)); }

namespace {

// transformers' _normalize_chat_messages + _alias_reasoning_fields: keys whose value is
// null are dropped; the first non-null of reasoning_content / thinking / reasoning is
// exposed as `thinking` (placed first) and `reasoning_content`.
ojson normalize_message(const ojson& m, size_t index) {
  if (!m.is_object()) throw Error(fmt::format("chat template: message {} is not a JSON object", index));
  ojson clean = ojson::object();
  for (const auto& [k, v] : m.items())
    if (!v.is_null()) clean[k] = v;
  const ojson* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto it = clean.find(key);
    if (it != clean.end()) {
      reasoning = &*it;
      break;
    }
  }
  if (!reasoning) return clean;
  const ojson r = *reasoning;
  ojson out = ojson::object();
  out["thinking"] = r;
  for (const auto& [k, v] : clean.items()) out[k] = v;  // an own `thinking` keeps its value
  out["reasoning_content"] = r;
  return out;
}

}  // namespace

std::string ChatTemplate::render_chat(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                      const ojson& extra) const {
  if (!messages.is_array()) throw Error("chat template: messages must be a JSON array");
  if (!tools.is_null() && !tools.is_array()) throw Error("chat template: tools must be a JSON array or null");
  if (!extra.is_null() && !extra.is_object()) throw Error("chat template: extra variables must be a JSON object");
  ojson ctx = ojson::object();
  if (extra.is_object()) {
    for (const auto& [k, v] : extra.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        throw Error(fmt::format("chat template: extra variable '{}' collides with a fixed one", k));
      ctx[k] = v;
    }
  }
  ojson msgs = ojson::array();
  for (size_t i = 0; i < messages.size(); ++i) msgs.push_back(normalize_message(messages[i], i));
  ctx["messages"] = std::move(msgs);
  ctx["tools"] = tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  return render(ctx);
}

std::string pick_chat_template(const nlohmann::json& field, bool with_tools) {
  if (field.is_string()) return field.get<std::string>();
  std::map<std::string, std::string> named;
  if (field.is_array()) {
    for (const auto& e : field) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
          !e["template"].is_string())
        throw Error("chat_template list entries must be {\"name\": str, \"template\": str}");
      named[e["name"].get<std::string>()] = e["template"].get<std::string>();
    }
  } else if (field.is_object()) {
    for (const auto& [k, v] : field.items()) {
      if (!v.is_string()) throw Error(fmt::format("chat_template '{}' is not a string", k));
      named[k] = v.get<std::string>();
    }
  } else {
    throw Error("chat_template must be a string, a list of named templates, or an object");
  }
  if (with_tools && named.count("tool_use")) return named["tool_use"];
  if (named.count("default")) return named["default"];
  throw Error("chat_template has several named templates but none called 'default'");
}

}  // namespace vi
