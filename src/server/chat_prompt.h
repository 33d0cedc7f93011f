// Turns a conversation into prompt token ids with the model's chat template: the API's
// messages are first brought to the form Hugging Face templates expect (text-only
// content as strings, tool-call arguments as objects, tool results as role "tool"),
// then rendered with tools and template switches (enable_thinking, ...), then tokenized.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "server/server_context.h"

namespace vi::server {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> tokens;
  // The template left the reply inside <think> (Qwen3.5 with thinking on: the prompt ends
  // with "<think>\n"), so the reply starts as reasoning.
  bool opens_reasoning = false;
};

// OpenAI chat messages -> template messages (400 naming the message on a bad one).
nlohmann::ordered_json normalize_openai_messages(const nlohmann::json& messages);

// OpenAI tools ([{type: function, function: {...}}]) validated; null when absent/empty.
nlohmann::ordered_json normalize_openai_tools(const nlohmann::json& tools);

// Renders and tokenizes. `kwargs` are extra template variables (enable_thinking, ...).
// 400 when the model has no template or the template rejects the conversation.
ChatPrompt build_chat_prompt(const ServerContext& ctx, const nlohmann::ordered_json& messages,
                             const nlohmann::ordered_json& tools, const nlohmann::ordered_json& kwargs);

// name -> parameters schema, for typing XML tool-call values.
nlohmann::json tool_parameter_schemas(const nlohmann::ordered_json& tools);

// Concatenated text of an OpenAI/Anthropic content value (string or text parts);
// `where` names the message in the 400 for an unsupported part (images).
std::string content_text(const nlohmann::json& content, const std::string& where);

}  // namespace vi::server
