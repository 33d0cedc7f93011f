// Chat templates: renders a model's Jinja2 chat template (GGUF tokenizer.chat_template,
// tokenizer_config.json chat_template, chat_template.jinja) to a prompt string, byte for
// byte as transformers' apply_chat_template(tokenize=False) does with Python jinja2.
// The interpreter (jinja_*.h) supports the Jinja2 subset real chat templates use.
//
// Key order matters (tojson output, `|items`), so contexts are nlohmann::ordered_json;
// the nlohmann::json overload works too but sees object keys in sorted order.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "core/error.h"

namespace vi {

namespace jinja {
struct Template;
}

// Thrown by a template's raise_exception(msg); what() is msg verbatim, so a server can
// return it to the client as the reason a conversation was rejected.
class ChatTemplateRaise : public Error {
 public:
  using Error::Error;
};

class ChatTemplate {
 public:
  // Parses once; throws vi::Error("chat template syntax error at line L, column C: ...").
  explicit ChatTemplate(std::string source);

  // Renders with `context` (a JSON object) as the template's variables. Undefined names
  // behave as Jinja2's default Undefined. Throws ChatTemplateRaise for raise_exception(),
  // vi::Error("chat template error at line N: ...") for other failures.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  // What apply_chat_template passes: messages (None-valued keys dropped, reasoning aliased
  // to both `reasoning_content` and `thinking`), tools (null when absent), documents
  // (null), add_generation_prompt, plus `extra` (bos_token, eos_token, enable_thinking, ...).
  std::string render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                          bool add_generation_prompt,
                          const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> tpl_;
};

// Chooses the template text from tokenizer_config.json's `chat_template` value, which is a
// string or a list of {"name", "template"} (or a name -> template object): like
// transformers, "tool_use" when tools are given and it exists, else "default".
// Throws vi::Error if no template applies.
std::string pick_chat_template(const nlohmann::json& chat_template_field, bool with_tools);

}  // namespace vi
