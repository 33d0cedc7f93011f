// Reasoning / tool-call / content splitting of streamed model text (see output_parser.h).
#include "server/output_parser.h"

#include <algorithm>
#include <random>

namespace vi::server {

namespace {
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kToolOpen = "<tool_call>";
constexpr std::string_view kToolClose = "</tool_call>";
constexpr std::string_view kFuncOpen = "<function=";
constexpr std::string_view kFuncClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

size_t skip_ws(std::string_view s, size_t i = 0) {
  while (i < s.size() && is_ws(s[i])) ++i;
  return i;
}

// Length of the longest tail of `s` that is a proper prefix of `marker`: text that must be
// held back because the next piece may complete the marker.
size_t partial_tail(std::string_view s, std::string_view marker) {
  for (size_t len = std::min(s.size(), marker.size() - 1); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// One leading and one trailing newline belong to the XML layout, not to the value.
std::string trim_newlines(std::string v) {
  if (!v.empty() && v.front() == '\n') v.erase(0, 1);
  if (!v.empty() && v.back() == '\n') v.pop_back();
  return v;
}
}  // namespace

std::string random_id(std::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (int i = 0; i < 24; ++i) id.push_back(kHex[rng() & 15]);
  return id;
}

OutputParser::OutputParser(ParserOptions opts) : opts_(std::move(opts)) {
  if (!opts_.reasoning) mode_ = Mode::kContent;
  else if (opts_.start_in_reasoning) mode_ = Mode::kReasoning;
  else mode_ = Mode::kStart;
}

std::vector<OutputDelta> OutputParser::push(std::string_view text) {
  std::vector<OutputDelta> out;
  buf_.append(text);
  run(out, false);
  return out;
}

std::vector<OutputDelta> OutputParser::finish() {
  std::vector<OutputDelta> out;
  run(out, true);
  while (mode_ == Mode::kToolCall) {
    if (call_started_) {
      // Cut off inside a call: keep it with the parameters completed so far (a partial
      // value is dropped) so that its arguments are valid JSON.
      emit_args(out, n_params_ == 0 ? "{}" : "}");
      call_started_ = false;
      buf_.clear();
      mode_ = Mode::kContent;
    } else if (tool_ == ToolState::kClose) {
      mode_ = Mode::kContent;
    } else {
      abandon_tool(out);  // never became a call: it was text
    }
    run(out, true);
  }
  // Whatever is still undecided at the end is what it looked like.
  if (!buf_.empty()) {
    if (mode_ == Mode::kReasoning) emit_reasoning(out, buf_);
    else if (!strip_ws_) emit_content(out, buf_);
  }
  buf_.clear();
  return out;
}

void OutputParser::run(std::vector<OutputDelta>& out, bool final) {
  for (;;) {
    bool progressed = false;
    switch (mode_) {
      case Mode::kStart: progressed = step_start(out, final); break;
      case Mode::kReasoning: progressed = step_reasoning(out, final); break;
      case Mode::kContent: progressed = step_content(out, final); break;
      case Mode::kToolCall: progressed = step_tool(out, final); break;
    }
    if (!progressed) return;
  }
}

// Before any text is decided: does the reply open with <think> (after whitespace)?
bool OutputParser::step_start(std::vector<OutputDelta>& out, bool final) {
  std::string_view rest = std::string_view(buf_).substr(skip_ws(buf_));
  if (starts_with(rest, kThinkOpen)) {
    buf_.erase(0, buf_.size() - rest.size() + kThinkOpen.size());
    mode_ = Mode::kReasoning;
    return true;
  }
  if (!final && kThinkOpen.substr(0, rest.size()) == rest) return false;  // could still be <think>
  mode_ = Mode::kContent;
  return true;
}

bool OutputParser::step_reasoning(std::vector<OutputDelta>& out, bool final) {
  size_t at = buf_.find(kThinkClose);
  if (at != std::string::npos) {
    emit_reasoning(out, std::string_view(buf_).substr(0, at));
    buf_.erase(0, at + kThinkClose.size());
    mode_ = Mode::kContent;
    strip_ws_ = true;  // the template writes "</think>\n\n" before the answer
    return true;
  }
  size_t keep = final ? 0 : partial_tail(buf_, kThinkClose);
  emit_reasoning(out, std::string_view(buf_).substr(0, buf_.size() - keep));
  buf_.erase(0, buf_.size() - keep);
  return false;
}

bool OutputParser::step_content(std::vector<OutputDelta>& out, bool final) {
  if (strip_ws_) {
    size_t n = skip_ws(buf_);
    buf_.erase(0, n);
    if (buf_.empty()) return false;
    strip_ws_ = false;
  }
  if (!opts_.tools) {
    emit_content(out, buf_);
    buf_.clear();
    return false;
  }
  size_t at = buf_.find(kToolOpen);
  if (at != std::string::npos) {
    // Whitespace between the answer and the call is layout, not content.
    std::string_view before = std::string_view(buf_).substr(0, at);
    size_t end = before.size();
    while (end > 0 && is_ws(before[end - 1])) --end;
    emit_content(out, before.substr(0, end));
    raw_call_ = std::string(kToolOpen);
    buf_.erase(0, at + kToolOpen.size());
    mode_ = Mode::kToolCall;
    tool_ = ToolState::kOpen;
    n_params_ = 0;
    call_started_ = false;
    return true;
  }
  size_t keep = 0;
  if (!final) {
    // Hold a possible start of <tool_call>, and the whitespace before it, which is
    // dropped if a call follows.
    keep = partial_tail(buf_, kToolOpen);
    while (keep < buf_.size() && is_ws(buf_[buf_.size() - keep - 1])) ++keep;
  }
  emit_content(out, std::string_view(buf_).substr(0, buf_.size() - keep));
  buf_.erase(0, buf_.size() - keep);
  return false;
}

// Inside <tool_call>: each state consumes a complete element or waits for more text.
bool OutputParser::step_tool(std::vector<OutputDelta>& out, bool final) {
  auto consume = [&](size_t n) {
    raw_call_.append(buf_, 0, n);
    buf_.erase(0, n);
  };
  size_t ws = skip_ws(buf_);
  std::string_view rest = std::string_view(buf_).substr(ws);
  switch (tool_) {
    case ToolState::kOpen: {
      if (rest.empty()) return false;
      if (rest[0] == '{') {
        tool_ = ToolState::kJson;
        return true;
      }
      if (starts_with(rest, kFuncOpen)) {
        size_t gt = rest.find('>');
        if (gt == std::string_view::npos) return false;
        std::string name(rest.substr(kFuncOpen.size(), gt - kFuncOpen.size()));
        if (!opts_.only_tool.empty() && name != opts_.only_tool) {
          abandon_tool(out);
          return true;
        }
        consume(ws + gt + 1);
        start_call(out, std::move(name));
        tool_ = ToolState::kParams;
        return true;
      }
      if (kFuncOpen.substr(0, rest.size()) == rest) return false;
      abandon_tool(out);
      return true;
    }
    case ToolState::kJson: {
      size_t at = buf_.find(kToolClose);
      if (at == std::string::npos) return false;
      std::string body = buf_.substr(0, at);
      auto j = nlohmann::json::parse(body, nullptr, false);
      if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
          (!opts_.only_tool.empty() && j["name"] != opts_.only_tool)) {
        abandon_tool(out);
        return true;
      }
      consume(at + kToolClose.size());
      start_call(out, j["name"].get<std::string>());
      const nlohmann::json* args = nullptr;
      if (j.contains("arguments")) args = &j["arguments"];
      else if (j.contains("parameters")) args = &j["parameters"];
      std::string text = "{}";
      if (args && args->is_string()) text = args->get<std::string>();
      else if (args && !args->is_null()) text = args->dump();
      emit_args(out, text);
      call_started_ = false;
      mode_ = Mode::kContent;
      strip_ws_ = true;
      return true;
    }
    case ToolState::kParams: {
      if (starts_with(rest, kParamOpen)) {
        size_t gt = rest.find('>');
        if (gt == std::string_view::npos) return false;
        param_ = std::string(rest.substr(kParamOpen.size(), gt - kParamOpen.size()));
        consume(ws + gt + 1);
        tool_ = ToolState::kValue;
        return true;
      }
      if (starts_with(rest, kFuncClose) || starts_with(rest, kToolClose)) {
        if (starts_with(rest, kFuncClose)) consume(ws + kFuncClose.size());
        emit_args(out, n_params_ == 0 ? "{}" : "}");
        call_started_ = false;
        tool_ = ToolState::kClose;
        return true;
      }
      if (rest.empty() || kParamOpen.substr(0, rest.size()) == rest || kFuncClose.substr(0, rest.size()) == rest ||
          kToolClose.substr(0, rest.size()) == rest)
        return false;
      // Stray text between parameters: skip it (models sometimes add a comment).
      size_t next = rest.find('<', 1);
      if (next == std::string_view::npos) {
        if (final) return false;
        consume(buf_.size());
        return false;
      }
      consume(ws + next);
      return true;
    }
    case ToolState::kValue: {
      // A value ends at </parameter>; a model that forgets it ends it at the next element.
      size_t end = std::string::npos, skip = 0;
      for (auto [marker, eat] : {std::pair{kParamClose, true}, std::pair{kParamOpen, false},
                                 std::pair{kFuncClose, false}}) {
        size_t at = buf_.find(marker);
        if (at != std::string::npos && at < end) {
          end = at;
          skip = eat ? marker.size() : 0;
        }
      }
      if (end == std::string::npos) {
        if (!final) return false;
        return false;  // cut off mid-value: finish() closes the call without it
      }
      std::string value = trim_newlines(buf_.substr(0, end));
      consume(end + skip);
      std::string frag = n_params_ == 0 ? "{" : ", ";
      frag += nlohmann::json(param_).dump() + ": " + typed_value(param_, std::move(value));
      emit_args(out, frag);
      ++n_params_;
      tool_ = ToolState::kParams;
      return true;
    }
    case ToolState::kClose: {
      if (starts_with(rest, kToolClose)) {
        consume(ws + kToolClose.size());
      } else if (rest.empty() || kToolClose.substr(0, rest.size()) == rest) {
        if (!final) return false;
      }
      // Missing </tool_call>: the call is complete anyway; go on with content.
      mode_ = Mode::kContent;
      strip_ws_ = true;
      return true;
    }
  }
  return false;
}

std::string OutputParser::typed_value(const std::string& param, std::string value) const {
  std::string type;
  const auto& schemas = opts_.tool_parameters;
  if (!calls_.empty() && schemas.is_object()) {
    auto it = schemas.find(calls_.back().name);
    if (it != schemas.end() && it->is_object() && it->contains("properties") && (*it)["properties"].is_object()) {
      const auto& props = (*it)["properties"];
      auto p = props.find(param);
      if (p != props.end() && p->is_object() && p->contains("type")) {
        const auto& t = (*p)["type"];
        if (t.is_string()) type = t.get<std::string>();
        else if (t.is_array() && std::find(t.begin(), t.end(), "string") != t.end()) type = "string";
        else if (t.is_array() && !t.empty() && t[0].is_string()) type = t[0].get<std::string>();
      }
    }
  }
  // Without a schema a value is a string, as Qwen's reference parser does.
  if (!type.empty() && type != "string") {
    auto j = nlohmann::json::parse(value, nullptr, false);
    if (!j.is_discarded()) return j.dump();
  }
  return nlohmann::json(value).dump();
}

void OutputParser::emit_content(std::vector<OutputDelta>& out, std::string_view s) {
  if (s.empty()) return;
  content_.append(s);
  if (!out.empty() && out.back().kind == OutputDelta::Kind::kContent) out.back().text.append(s);
  else out.push_back({OutputDelta::Kind::kContent, std::string(s), -1, {}});
}

void OutputParser::emit_reasoning(std::vector<OutputDelta>& out, std::string_view s) {
  if (s.empty()) return;
  reasoning_.append(s);
  if (!out.empty() && out.back().kind == OutputDelta::Kind::kReasoning) out.back().text.append(s);
  else out.push_back({OutputDelta::Kind::kReasoning, std::string(s), -1, {}});
}

void OutputParser::start_call(std::vector<OutputDelta>& out, std::string name) {
  ToolCall c;
  c.id = random_id(opts_.id_prefix);
  c.name = std::move(name);
  out.push_back({OutputDelta::Kind::kToolStart, c.name, static_cast<int>(calls_.size()), c.id});
  calls_.push_back(std::move(c));
  call_started_ = true;
}

void OutputParser::emit_args(std::vector<OutputDelta>& out, std::string_view s) {
  calls_.back().arguments.append(s);
  int idx = static_cast<int>(calls_.size()) - 1;
  if (!out.empty() && out.back().kind == OutputDelta::Kind::kToolArgs && out.back().tool_index == idx)
    out.back().text.append(s);
  else
    out.push_back({OutputDelta::Kind::kToolArgs, std::string(s), idx, {}});
}

// Not a tool call after all: the text read so far is content.
void OutputParser::abandon_tool(std::vector<OutputDelta>& out) {
  std::string text = raw_call_ + buf_;
  raw_call_.clear();
  buf_.clear();
  mode_ = Mode::kContent;
  // Emit the opening marker now, and let the rest be scanned again (it may hold a real call).
  emit_content(out, std::string_view(text).substr(0, kToolOpen.size()));
  buf_ = text.substr(kToolOpen.size());
}

}  // namespace vi::server
