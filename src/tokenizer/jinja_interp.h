// The tree-walking renderer of parsed chat templates, and the built-in filters, tests,
// methods and globals it calls. Semantics follow Jinja2 in transformers' sandbox:
// undefined names are Jinja's default Undefined (falsy, print empty, fail when used as a
// value), for-loop bodies and macros get their own scopes, namespaces are shared.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace vi::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

class Interpreter {
 public:
  explicit Interpreter(const Template& tpl) : tpl_(tpl) {}
  // Macros hold their defining scope and scopes hold macros: that cycle is broken here.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // `context` must be a dict; its keys become template variables.
  std::string render(const Value& context);

  // Jinja's `obj.name` (attribute first, then item) and `obj[key]` (item first).
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value call(const Value& callee, CallArgs& args);
  Value filter(const std::string& name, const Value& in, CallArgs& args);
  bool test(const std::string& name, const Value& in, CallArgs& args);

 private:
  Value eval(const Expr& e, const ScopePtr& s);
  Value eval_call(const Expr& e, const ScopePtr& s);
  void eval_args(const std::vector<Arg>& args, const ScopePtr& s, CallArgs& out);
  Value eval_compare(const Expr& e, const ScopePtr& s);
  Flow exec(const Body& body, const ScopePtr& s, std::string& out);
  Flow exec_stmt(const Stmt& st, const ScopePtr& s, std::string& out);
  Flow exec_for(const Stmt& st, const ScopePtr& s, std::string& out);
  void assign(const Target& t, const Value& v, const ScopePtr& s);
  Value make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const ScopePtr& def_scope);
  Value apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& s);
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const;

  const Template& tpl_;
  int depth_ = 0;  // macro recursion guard
  std::vector<ScopePtr> closure_scopes_;  // scopes captured by macros, cleared at the end
};

// ---- built-ins (jinja_builtins.cpp); they throw vi::Error with a plain message ----
Value builtin_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
bool builtin_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
// A method of a str / list / dict value (s.strip(), d.items(), ...); `found` is false if
// the type has no such method.
Value builtin_method(Interpreter& in, const Value& obj, const std::string& name, CallArgs& args,
                     bool& found);
bool has_method(const Value& obj, const std::string& name);
// Methods the immutable sandbox refuses (list.append, dict.update, ...).
bool is_unsafe_method(const Value& obj, const std::string& name);
// range, dict, namespace, raise_exception, strftime_now.
void install_globals(Scope& s);

// Python arithmetic for + - * / // % **.
Value arith(const std::string& op, const Value& l, const Value& r);

}  // namespace vi::jinja
