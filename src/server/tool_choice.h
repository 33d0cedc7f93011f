// The tool_choice field of both APIs, reduced to what this server can honour without
// constrained decoding: no tools at all ("none"), the model's own choice ("auto"), or one
// named tool (only that tool is rendered into the prompt and only calls to it are parsed;
// the model may still answer without calling it). Forcing some call ("required" / Anthropic
// "any") would need constrained decoding and is refused with a 400.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace vi::server {

struct ToolChoice {
  enum class Mode { kAuto, kNone, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;  // kNamed: the one tool
};

// OpenAI: "none" | "auto" | {"type": "function", "function": {"name": ...}}; absent: auto.
ToolChoice parse_openai_tool_choice(const nlohmann::json& body);
// Anthropic: {"type": "auto" | "none" | "tool", "name": ...}; absent: auto.
ToolChoice parse_anthropic_tool_choice(const nlohmann::json& body);

// The tools to render (OpenAI form, null for none): "none" drops them all, a named choice
// keeps that one tool (400 when the request offers no tool of that name).
nlohmann::ordered_json apply_tool_choice(const ToolChoice& choice, nlohmann::ordered_json tools);

}  // namespace vi::server
