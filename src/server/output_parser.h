// Splits a model's streamed reply text into what the APIs report separately, following
// the Qwen conventions:
//   <think> reasoning </think>  -> reasoning (OpenAI reasoning_content, Anthropic thinking)
//   <tool_call> ... </tool_call> -> tool calls, in either of Qwen's two forms:
//       XML  <function=NAME><parameter=P>VALUE</parameter>...</function>   (Qwen3.5, Qwen3-Coder)
//       JSON {"name": NAME, "arguments": {...}}                            (Qwen2.5, Qwen3)
//   everything else             -> content.
// Text arrives in arbitrary pieces (token by token); a marker split across pieces is
// held back until it is decided, so no partial "<tool_" ever reaches the client.
// Deltas come out in order; their concatenation per kind equals the final result.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>
#include <vector>

namespace vi::server {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};

struct OutputDelta {
  enum class Kind { kContent, kReasoning, kToolStart, kToolArgs };
  Kind kind = Kind::kContent;
  std::string text;    // kContent/kReasoning: text; kToolStart: function name; kToolArgs: JSON fragment
  int tool_index = -1; // kToolStart/kToolArgs: which tool call (0, 1, ...)
  std::string id;      // kToolStart: the tool call's id
};

struct ParserOptions {
  bool reasoning = true;            // recognise <think> ... </think>
  bool start_in_reasoning = false;  // the prompt already opened <think> (template pre-fill)
  bool tools = false;               // recognise <tool_call> blocks (tools were offered)
  // Tool name -> JSON schema of its parameters, to type XML parameter values
  // (a "string" parameter stays a string; numbers, booleans, objects are parsed).
  nlohmann::json tool_parameters = nlohmann::json::object();
  // Non-empty: only calls to this tool are calls (a named tool_choice); a call to any other
  // name stays content.
  std::string only_tool;
  std::string id_prefix = "call_";  // "toolu_" for Anthropic
};

class OutputParser {
 public:
  explicit OutputParser(ParserOptions opts);

  std::vector<OutputDelta> push(std::string_view text);
  // End of generation: releases held text; a tool call cut off is closed so its
  // arguments stay valid JSON.
  std::vector<OutputDelta> finish();

  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::vector<ToolCall>& tool_calls() const { return calls_; }
  bool in_reasoning() const { return mode_ == Mode::kReasoning; }

 private:
  enum class Mode { kStart, kReasoning, kContent, kToolCall };
  enum class ToolState { kOpen, kJson, kParams, kValue, kClose };

  void run(std::vector<OutputDelta>& out, bool final);
  bool step_start(std::vector<OutputDelta>& out, bool final);
  bool step_reasoning(std::vector<OutputDelta>& out, bool final);
  bool step_content(std::vector<OutputDelta>& out, bool final);
  bool step_tool(std::vector<OutputDelta>& out, bool final);

  void emit_content(std::vector<OutputDelta>& out, std::string_view s);
  void emit_reasoning(std::vector<OutputDelta>& out, std::string_view s);
  void start_call(std::vector<OutputDelta>& out, std::string name);
  void emit_args(std::vector<OutputDelta>& out, std::string_view s);
  void abandon_tool(std::vector<OutputDelta>& out);
  std::string typed_value(const std::string& param, std::string value) const;

  ParserOptions opts_;
  Mode mode_;
  ToolState tool_ = ToolState::kOpen;
  std::string buf_;          // undecided text
  std::string raw_call_;     // text of the current <tool_call> block, for malformed fallback
  std::string param_;        // XML parameter being read
  int n_params_ = 0;         // parameters emitted in the current call
  bool call_started_ = false;
  bool strip_ws_ = false;    // drop whitespace at the start of content (after </think>, </tool_call>)
  std::string content_, reasoning_;
  std::vector<ToolCall> calls_;
};

// A random id such as "call_8f3a..." (24 hex digits after the prefix).
std::string random_id(std::string_view prefix);

}  // namespace vi::server
