// Expression evaluation and statement execution for chat templates (see jinja_interp.h).
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_strings.h"

namespace vi::jinja {
namespace {

// An error that already names its line; statement-level handlers pass it through.
class PositionedError : public Error {
 public:
  using Error::Error;
};

constexpr int kMaxMacroDepth = 200;

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

// Jinja's message for a missing attribute (string name) or element (other key).
Value missing(const Value& obj, const Value& key) {
  if (key.is_string())
    return Value::undefined(fmt::format("'{}' has no attribute {}", object_type_repr(obj), py_repr_str(key.str())));
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
}

[[noreturn]] void fail_undefined(const Value& v) {
  throw Error(v.undefined_hint().empty() ? std::string("value is undefined") : v.undefined_hint());
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Value arith(const std::string& op, const Value& l, const Value& r) {
  if (l.is_undefined()) fail_undefined(l);
  if (r.is_undefined()) fail_undefined(r);
  const bool nums = l.is_number() && r.is_number();
  const bool floats = nums && (l.is_float() || r.is_float());
  auto type_error = [&]() -> Error {
    return Error(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(l), type_name(r)));
  };
  if (op == "+") {
    if (nums) return floats ? Value(l.as_double() + r.as_double()) : Value(l.as_int() + r.as_int());
    if (l.is_string() && r.is_string()) {
      // markupsafe: Markup + str escapes the plain side and stays Markup.
      if (l.is_safe() && !r.is_safe()) return Value(l.str() + html_escape(r.str()), true);
      if (!l.is_safe() && r.is_safe()) return Value(html_escape(l.str()) + r.str(), true);
      return Value(l.str() + r.str(), l.is_safe());
    }
    if (l.is_list() && r.is_list() && l.is_tuple() == r.is_tuple()) {
      List xs = l.items();
      xs.insert(xs.end(), r.items().begin(), r.items().end());
      return Value::list(std::move(xs), l.is_tuple());
    }
    if (l.is_string() || l.is_list())
      throw Error(fmt::format("can only concatenate {} (not \"{}\") to {}", type_name(l), type_name(r), type_name(l)));
    throw type_error();
  }
  if (op == "-") {
    if (!nums) throw type_error();
    return floats ? Value(l.as_double() - r.as_double()) : Value(l.as_int() - r.as_int());
  }
  if (op == "*") {
    if (nums) return floats ? Value(l.as_double() * r.as_double()) : Value(l.as_int() * r.as_int());
    const Value* seq = (l.is_string() || l.is_list()) ? &l : (r.is_string() || r.is_list()) ? &r : nullptr;
    const Value* cnt = seq == &l ? &r : &l;
    if (seq && (cnt->is_int() || cnt->is_bool())) {
      const int64_t n = cnt->as_int();
      if (seq->is_string()) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += seq->str();
        return Value(std::move(out));
      }
      List xs;
      for (int64_t i = 0; i < n; ++i) xs.insert(xs.end(), seq->items().begin(), seq->items().end());
      return Value::list(std::move(xs), seq->is_tuple());
    }
    throw type_error();
  }
  if (op == "/") {
    if (!nums) throw type_error();
    if (r.as_double() == 0.0) throw Error("ZeroDivisionError: division by zero");
    return Value(l.as_double() / r.as_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) throw type_error();
    if (floats) {
      const double a = l.as_double(), b = r.as_double();
      if (b == 0.0) throw Error("ZeroDivisionError: float floor division by zero");
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return op == "%" ? Value(m) : Value(std::floor(a / b));
    }
    const int64_t a = l.as_int(), b = r.as_int();
    if (b == 0) throw Error("ZeroDivisionError: integer division or modulo by zero");
    const int64_t q = floor_div(a, b);
    return op == "//" ? Value(q) : Value(a - q * b);
  }
  if (op == "**") {
    if (!nums) throw type_error();
    if (!floats && r.as_int() >= 0) {
      int64_t out = 1, base = l.as_int();
      for (int64_t e = r.as_int(); e > 0; --e) out *= base;
      return Value(out);
    }
    return Value(std::pow(l.as_double(), r.as_double()));
  }
  throw Error(fmt::format("unknown operator {}", op));
}

void Interpreter::fail_at(size_t pos, const std::string& msg) const {
  int line, col;
  line_col(tpl_.source, pos, line, col);
  throw PositionedError(fmt::format("chat template error at line {}: {}", line, msg));
}

// ---------------------------------------------------------------- attribute / item access

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict: {
      if (has_method(obj, name)) break;  // Python attribute (d.items) wins over the key
      if (const Value* v = obj.dict().find(name)) return *v;
      return missing(obj, Value(name));
    }
    case Value::Kind::Namespace: {
      if (const Value* v = obj.dict().find(name)) return *v;
      return Value::undefined(fmt::format("'Namespace' object has no attribute '{}'", name));
    }
    default: break;
  }
  if (has_method(obj, name) || is_unsafe_method(obj, name)) {
    // A bound method value; calls through Expr::Call go to builtin_method directly.
    auto c = std::make_shared<Callable>();
    c->name = name;
    Value self = obj;
    c->fn = [this, self, name](CallArgs& args) {
      bool found = false;
      Value r = builtin_method(*this, self, name, args, found);
      if (!found) throw Error(fmt::format("'{}' object has no attribute '{}'", type_name(self), name));
      return r;
    };
    return Value::callable(std::move(c));
  }
  return missing(obj, Value(name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  switch (obj.kind()) {
    case Value::Kind::Undefined: fail_undefined(obj);
    case Value::Kind::Dict:
    case Value::Kind::Namespace:
      if (key.is_string()) {
        if (const Value* v = obj.dict().find(key.str())) return *v;
        return get_attr(obj, key.str());
      }
      return missing(obj, key);
    case Value::Kind::List:
    case Value::Kind::String: {
      if (key.is_string()) return get_attr(obj, key.str());
      if (!key.is_int() && !key.is_bool()) return missing(obj, key);
      const bool is_str = obj.is_string();
      const std::u32string cps = is_str ? utf8_decode(obj.str()) : std::u32string();
      const int64_t n = is_str ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.items().size());
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i < 0 || i >= n) return missing(obj, key);
      if (is_str) return Value(utf8_encode(std::u32string(1, cps[static_cast<size_t>(i)])));
      return obj.items()[static_cast<size_t>(i)];
    }
    default:
      if (key.is_string()) return get_attr(obj, key.str());
      return missing(obj, key);
  }
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw Error(fmt::format("'{}' object is not callable", type_name(callee)));
  return callee.fn().fn(args);
}

Value Interpreter::filter(const std::string& name, const Value& in, CallArgs& args) {
  return builtin_filter(*this, name, in, args);
}

bool Interpreter::test(const std::string& name, const Value& in, CallArgs& args) {
  return builtin_test(*this, name, in, args);
}

// ---------------------------------------------------------------- expressions

void Interpreter::eval_args(const std::vector<Arg>& args, const ScopePtr& s, CallArgs& out) {
  for (const auto& a : args) {
    if (a.name.empty()) out.pos.push_back(eval(*a.value, s));
    else out.kw.emplace_back(a.name, eval(*a.value, s));
  }
}

Value Interpreter::eval_call(const Expr& e, const ScopePtr& s) {
  CallArgs args;
  if (e.a->type == Expr::Type::GetAttr) {
    // obj.method(...): call str/list/dict methods without materialising a bound method.
    Value obj = eval(*e.a->a, s);
    const std::string& name = e.a->name;
    if (!obj.is_undefined() && !obj.is_namespace() && !(obj.is_dict() && !has_method(obj, name) && obj.dict().find(name))) {
      if (is_unsafe_method(obj, name))
        throw Error(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
      if (has_method(obj, name)) {
        eval_args(e.args, s, args);
        bool found = false;
        Value r = builtin_method(*this, obj, name, args, found);
        if (found) return r;
      }
    }
    Value callee = get_attr(obj, name);
    eval_args(e.args, s, args);
    return call(callee, args);
  }
  Value callee = eval(*e.a, s);
  eval_args(e.args, s, args);
  return call(callee, args);
}

Value Interpreter::eval_compare(const Expr& e, const ScopePtr& s) {
  Value left = eval(*e.items[0], s);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.items[i + 1], s);
    const std::string& op = e.ops[i];
    bool ok;
    if (op == "==") ok = equals(left, right);
    else if (op == "!=") ok = !equals(left, right);
    else if (op == "in" || op == "notin") {
      CallArgs a;
      a.pos.push_back(right);
      ok = builtin_test(*this, "in", left, a);
      if (op == "notin") ok = !ok;
    } else {
      if (left.is_undefined()) fail_undefined(left);
      if (right.is_undefined()) fail_undefined(right);
      const int c = compare(left, right);
      ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
    }
    if (!ok) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval(const Expr& e, const ScopePtr& s) {
  switch (e.type) {
    case Expr::Type::Const: return e.value;
    case Expr::Type::Name: {
      if (const Value* v = s->find(e.name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", e.name));
    }
    case Expr::Type::GetAttr: return get_attr(eval(*e.a, s), e.name);
    case Expr::Type::GetItem: {
      Value obj = eval(*e.a, s);
      if (e.b->type == Expr::Type::Slice) {
        const Expr& sl = *e.b;
        auto bound = [&](const ExprPtr& x) -> std::optional<int64_t> {
          if (!x) return std::nullopt;
          Value v = eval(*x, s);
          if (v.is_none()) return std::nullopt;
          if (!v.is_int() && !v.is_bool()) throw Error("slice indices must be integers or None");
          return v.as_int();
        };
        const auto start = bound(sl.a), stop = bound(sl.b), step = bound(sl.c);
        if (obj.is_undefined()) fail_undefined(obj);
        if (obj.is_string()) {
          const std::u32string cps = utf8_decode(obj.str());
          std::u32string out;
          for (int64_t i : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step))
            out.push_back(cps[static_cast<size_t>(i)]);
          return Value(utf8_encode(out));
        }
        if (obj.is_list()) {
          List out;
          for (int64_t i : slice_indices(static_cast<int64_t>(obj.items().size()), start, stop, step))
            out.push_back(obj.items()[static_cast<size_t>(i)]);
          return Value::list(std::move(out), obj.is_tuple());
        }
        throw Error(fmt::format("'{}' object is not subscriptable", type_name(obj)));
      }
      return get_item(obj, eval(*e.b, s));
    }
    case Expr::Type::Slice: throw Error("slice outside of a subscript");
    case Expr::Type::Call: return eval_call(e, s);
    case Expr::Type::Filter: {
      Value in = eval(*e.a, s);
      CallArgs args;
      eval_args(e.args, s, args);
      return filter(e.name, in, args);
    }
    case Expr::Type::Test: {
      Value in = eval(*e.a, s);
      CallArgs args;
      eval_args(e.args, s, args);
      const bool r = test(e.name, in, args);
      return Value(e.negated ? !r : r);
    }
    case Expr::Type::Not: return Value(!truthy(eval(*e.a, s)));
    case Expr::Type::Neg:
    case Expr::Type::Pos: {
      Value v = eval(*e.a, s);
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_number()) throw Error(fmt::format("bad operand type for unary {}: '{}'", e.type == Expr::Type::Neg ? '-' : '+', type_name(v)));
      if (e.type == Expr::Type::Pos) return v.is_bool() ? Value(v.as_int()) : v;
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case Expr::Type::Binary: {
      if (e.name == "and") {
        Value l = eval(*e.a, s);
        return truthy(l) ? eval(*e.b, s) : l;
      }
      if (e.name == "or") {
        Value l = eval(*e.a, s);
        return truthy(l) ? l : eval(*e.b, s);
      }
      Value l = eval(*e.a, s);
      Value r = eval(*e.b, s);
      return arith(e.name, l, r);
    }
    case Expr::Type::Concat: {
      std::string out;
      for (const auto& x : e.items) out += to_str(eval(*x, s));
      return Value(std::move(out));
    }
    case Expr::Type::Compare: return eval_compare(e, s);
    case Expr::Type::CondExpr: {
      if (truthy(eval(*e.a, s))) return eval(*e.b, s);
      if (e.c) return eval(*e.c, s);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
    }
    case Expr::Type::List: {
      List xs;
      xs.reserve(e.items.size());
      for (const auto& x : e.items) xs.push_back(eval(*x, s));
      return Value::list(std::move(xs), e.tuple);
    }
    case Expr::Type::Dict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        Value k = eval(*e.items[i], s);
        if (!k.is_string()) throw Error(fmt::format("dict literal keys must be strings here, got {}", type_name(k)));
        d->set(k.str(), eval(*e.items[i + 1], s));
      }
      return Value::dict(std::move(d));
    }
  }
  throw Error("unknown expression");
}

// ---------------------------------------------------------------- statements

void Interpreter::assign(const Target& t, const Value& v, const ScopePtr& s) {
  if (!t.ns_attr.empty()) {
    const Value* ns = s->find(t.names[0]);
    if (!ns || !ns->is_namespace()) throw Error("cannot assign attribute on non-namespace object");
    if (!t.ns_attr.empty() && t.ns_attr[0] == '_')
      throw Error(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'.", t.ns_attr));
    ns->ns().set(t.ns_attr, v);
    return;
  }
  if (!t.tuple) {
    s->vars[t.names[0]] = v;
    return;
  }
  const List xs = iterate(v);
  if (xs.size() < t.names.size())
    throw Error(fmt::format("not enough values to unpack (expected {}, got {})", t.names.size(), xs.size()));
  if (xs.size() > t.names.size())
    throw Error(fmt::format("too many values to unpack (expected {})", t.names.size()));
  for (size_t i = 0; i < xs.size(); ++i) s->vars[t.names[i]] = xs[i];
}

Interpreter::~Interpreter() {
  for (const ScopePtr& s : closure_scopes_) s->vars.clear();
}

Value Interpreter::make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                              const ScopePtr& def_scope) {
  closure_scopes_.push_back(def_scope);
  auto c = std::make_shared<Callable>();
  c->name = name;
  const std::vector<MacroParam>* ps = &params;
  const Body* b = &body;
  c->fn = [this, name, ps, b, def_scope](CallArgs& args) -> Value {
    if (depth_ >= kMaxMacroDepth) throw Error(fmt::format("macro '{}' recursed too deeply", name));
    auto scope = std::make_shared<Scope>();
    scope->parent = def_scope;
    if (args.pos.size() > ps->size())
      throw Error(fmt::format("macro '{}' takes not more than {} argument(s)", name, ps->size()));
    std::vector<bool> bound(ps->size(), false);
    for (size_t i = 0; i < args.pos.size(); ++i) {
      scope->vars[(*ps)[i].name] = args.pos[i];
      bound[i] = true;
    }
    for (auto& [k, v] : args.kw) {
      size_t i = 0;
      while (i < ps->size() && (*ps)[i].name != k) ++i;
      if (i == ps->size()) {
        if (k == "caller") {
          scope->vars["caller"] = v;
          continue;
        }
        throw Error(fmt::format("macro '{}' takes no keyword argument '{}'", name, k));
      }
      if (bound[i]) throw Error(fmt::format("macro '{}' got multiple values for argument '{}'", name, k));
      scope->vars[k] = v;
      bound[i] = true;
    }
    for (size_t i = 0; i < ps->size(); ++i) {
      if (bound[i]) continue;
      const MacroParam& p = (*ps)[i];
      scope->vars[p.name] = p.default_value ? eval(*p.default_value, scope)
                                            : Value::undefined(fmt::format("parameter '{}' was not provided", p.name));
    }
    std::string out;
    ++depth_;
    try {
      exec(*b, scope, out);
    } catch (...) {
      --depth_;
      throw;
    }
    --depth_;
    return Value(std::move(out));
  };
  return Value::callable(std::move(c));
}

Value Interpreter::apply_filters(const std::vector<ExprPtr>& filters, Value v, const ScopePtr& s) {
  for (const auto& f : filters) {
    CallArgs args;
    eval_args(f->args, s, args);
    v = filter(f->name, v, args);
  }
  return v;
}

Flow Interpreter::exec(const Body& body, const ScopePtr& s, std::string& out) {
  for (const auto& st : body) {
    Flow f;
    try {
      f = exec_stmt(*st, s, out);
    } catch (const ChatTemplateRaise&) {
      throw;
    } catch (const PositionedError&) {
      throw;
    } catch (const Error& e) {
      fail_at(st->pos, e.what());
    } catch (const std::exception& e) {
      fail_at(st->pos, e.what());
    }
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Flow Interpreter::exec_for(const Stmt& st, const ScopePtr& s, std::string& out) {
  List items = iterate(eval(*st.expr, s));
  if (st.cond) {
    List kept;
    for (auto& x : items) {
      auto fs = std::make_shared<Scope>();
      fs->parent = s;
      assign(st.target, x, fs);
      if (truthy(eval(*st.cond, fs))) kept.push_back(std::move(x));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (!st.else_body.empty()) {
      auto es = std::make_shared<Scope>();
      es->parent = s;
      exec(st.else_body, es, out);
    }
    return Flow::Normal;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    auto ls = std::make_shared<Scope>();
    ls->parent = s;
    assign(st.target, items[static_cast<size_t>(i)], ls);
    auto loop = std::make_shared<Dict>();
    loop->entries.reserve(12);
    loop->entries.emplace_back("index", Value(i + 1));
    loop->entries.emplace_back("index0", Value(i));
    loop->entries.emplace_back("revindex", Value(n - i));
    loop->entries.emplace_back("revindex0", Value(n - i - 1));
    loop->entries.emplace_back("first", Value(i == 0));
    loop->entries.emplace_back("last", Value(i == n - 1));
    loop->entries.emplace_back("length", Value(n));
    loop->entries.emplace_back("depth", Value(1));
    loop->entries.emplace_back("depth0", Value(0));
    if (i > 0) loop->entries.emplace_back("previtem", items[static_cast<size_t>(i - 1)]);
    if (i < n - 1) loop->entries.emplace_back("nextitem", items[static_cast<size_t>(i + 1)]);
    auto cyc = std::make_shared<Callable>();
    cyc->name = "cycle";
    cyc->fn = [i](CallArgs& a) -> Value {
      if (a.pos.empty()) throw Error("no items for cycling given");
      return a.pos[static_cast<size_t>(i) % a.pos.size()];
    };
    loop->entries.emplace_back("cycle", Value::callable(std::move(cyc)));
    ls->vars["loop"] = Value::dict(std::move(loop));
    if (exec(st.body, ls, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

Flow Interpreter::exec_stmt(const Stmt& st, const ScopePtr& s, std::string& out) {
  switch (st.type) {
    case Stmt::Type::Text: out += st.text; return Flow::Normal;
    case Stmt::Type::Print: out += to_str(eval(*st.expr, s)); return Flow::Normal;
    case Stmt::Type::If:
      for (const auto& [cond, body] : st.branches)
        if (truthy(eval(*cond, s))) return exec(body, s, out);
      return exec(st.else_body, s, out);
    case Stmt::Type::For: return exec_for(st, s, out);
    case Stmt::Type::Set: assign(st.target, eval(*st.expr, s), s); return Flow::Normal;
    case Stmt::Type::SetBlock: {
      std::string buf;
      exec(st.body, s, buf);
      assign(st.target, apply_filters(st.filters, Value(std::move(buf)), s), s);
      return Flow::Normal;
    }
    case Stmt::Type::FilterBlock: {
      std::string buf;
      exec(st.body, s, buf);
      out += to_str(apply_filters(st.filters, Value(std::move(buf)), s));
      return Flow::Normal;
    }
    case Stmt::Type::Macro:
      s->vars[st.name] = make_macro(st.name, st.params, st.body, s);
      return Flow::Normal;
    case Stmt::Type::CallBlock: {
      Value caller = make_macro("caller", st.params, st.body, s);
      const Expr& call_expr = *st.expr;
      Value callee = call_expr.a->type == Expr::Type::GetAttr ? get_attr(eval(*call_expr.a->a, s), call_expr.a->name)
                                                               : eval(*call_expr.a, s);
      CallArgs args;
      eval_args(call_expr.args, s, args);
      args.kw.emplace_back("caller", caller);
      out += to_str(call(callee, args));
      return Flow::Normal;
    }
    case Stmt::Type::With: {
      auto ws = std::make_shared<Scope>();
      ws->parent = s;
      for (const auto& [t, e] : st.assigns) assign(t, eval(*e, s), ws);
      return exec(st.body, ws, out);
    }
    case Stmt::Type::Scope: {
      auto cs = std::make_shared<Scope>();
      cs->parent = s;
      return exec(st.body, cs, out);
    }
    case Stmt::Type::Break: return Flow::Break;
    case Stmt::Type::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

std::string Interpreter::render(const Value& context) {
  auto globals = std::make_shared<Scope>();
  install_globals(*globals);
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  if (context.is_dict())
    for (const auto& [k, v] : context.dict().entries) root->vars[k] = v;
  std::string out;
  exec(tpl_.body, root, out);
  return out;
}

}  // namespace vi::jinja
