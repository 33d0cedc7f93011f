// tool_choice parsing and application (see tool_choice.h).
#include "server/tool_choice.h"

#include <fmt/format.h>

#include "server/http_error.h"

namespace vi::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {
constexpr const char* kNoForcing =
    "this server cannot force a tool call (it does not constrain decoding); use \"auto\", \"none\" or name "
    "one function, which offers the model only that tool";
}  // namespace

ToolChoice parse_openai_tool_choice(const json& body) {
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return {};
  const json& v = *it;
  if (v == "auto") return {};
  if (v == "none") return {ToolChoice::Mode::kNone, {}};
  if (v == "required") bad_field("tool_choice", std::string("\"required\" is not supported: ") + kNoForcing);
  if (v.is_object() && v.value("type", "") == "function" && v.contains("function") && v["function"].is_object() &&
      v["function"].contains("name") && v["function"]["name"].is_string())
    return {ToolChoice::Mode::kNamed, v["function"]["name"].get<std::string>()};
  if (v.is_object() && v.value("type", "") == "allowed_tools")
    bad_field("tool_choice", "{\"type\": \"allowed_tools\"} is not supported; send only the allowed tools instead");
  bad_field("tool_choice", fmt::format("must be \"none\", \"auto\" or {{\"type\": \"function\", \"function\": "
                                       "{{\"name\": ...}}}} (got {})",
                                       v.dump()));
}

ToolChoice parse_anthropic_tool_choice(const json& body) {
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return {};
  const json& v = *it;
  const std::string type = v.is_object() && v.contains("type") && v["type"].is_string() ? v["type"].get<std::string>()
                                                                                         : "";
  if (type == "auto") return {};
  if (type == "none") return {ToolChoice::Mode::kNone, {}};
  if (type == "any") bad_field("tool_choice", std::string("{\"type\": \"any\"} is not supported: ") + kNoForcing);
  if (type == "tool") {
    if (!v.contains("name") || !v["name"].is_string()) bad_field("tool_choice.name", "must be a string");
    return {ToolChoice::Mode::kNamed, v["name"].get<std::string>()};
  }
  bad_field("tool_choice", fmt::format("must be {{\"type\": \"auto\" | \"none\" | \"tool\"}} (got {})", v.dump()));
}

ordered_json apply_tool_choice(const ToolChoice& choice, ordered_json tools) {
  switch (choice.mode) {
    case ToolChoice::Mode::kAuto: return tools;
    case ToolChoice::Mode::kNone: return nullptr;
    case ToolChoice::Mode::kNamed: break;
  }
  if (tools.is_array()) {
    for (const auto& t : tools) {
      if (t["function"]["name"] == choice.name) return ordered_json::array({t});
    }
  }
  bad_field("tool_choice", fmt::format("names the function '{}', which is not among the request's tools", choice.name));
}

}  // namespace vi::server
