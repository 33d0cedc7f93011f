// Value constructors and Python semantics (see jinja_value.h).
#include "tokenizer/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace vi::jinja {

Value::Value() = default;
Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int v) : kind_(Kind::Int), i_(v) {}
Value::Value(int64_t v) : kind_(Kind::Int), i_(v) {}
Value::Value(double v) : kind_(Kind::Float), f_(v) {}
Value::Value(std::string s, bool safe)
    : kind_(Kind::String), flag_(safe), p_(std::make_shared<std::string>(std::move(s))) {}
Value::Value(const char* s) : Value(std::string(s)) {}

Value Value::undefined(std::string hint) {
  Value v;
  v.p_ = std::make_shared<std::string>(std::move(hint));
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::list(List items, bool tuple) {
  Value v;
  v.kind_ = Kind::List;
  v.flag_ = tuple;
  v.p_ = std::make_shared<List>(std::move(items));
  return v;
}
Value Value::dict(std::shared_ptr<const Dict> d) {
  Value v;
  v.kind_ = Kind::Dict;
  v.p_ = std::const_pointer_cast<Dict>(std::move(d));
  return v;
}
Value Value::name_space(std::shared_ptr<Dict> d) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.p_ = std::move(d);
  return v;
}
Value Value::callable(std::shared_ptr<const Callable> c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.p_ = std::const_pointer_cast<Callable>(std::move(c));
  return v;
}

double Value::as_double() const {
  if (kind_ == Kind::Float) return f_;
  return static_cast<double>(as_int());
}
const std::string& Value::str() const { return *static_cast<const std::string*>(p_.get()); }
const List& Value::items() const { return *static_cast<const List*>(p_.get()); }
const Dict& Value::dict() const { return *static_cast<const Dict*>(p_.get()); }
Dict& Value::ns() const { return *static_cast<Dict*>(p_.get()); }
const Callable& Value::fn() const { return *static_cast<const Callable*>(p_.get()); }
const std::string& Value::undefined_hint() const {
  static const std::string none;
  return p_ ? *static_cast<const std::string*>(p_.get()) : none;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k == key) return &v;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& [k, old] : entries) {
    if (k == key) {
      old = std::move(v);
      return;
    }
  }
  entries.emplace_back(key, std::move(v));
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.as_bool();
    case Value::Kind::Int: return v.as_int() != 0;
    case Value::Kind::Float: return v.as_double() != 0.0;
    case Value::Kind::String: return !v.str().empty();
    case Value::Kind::List: return !v.items().empty();
    case Value::Kind::Dict: return !v.dict().entries.empty();
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
  }
  return false;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.str() == b.str();
    case Value::Kind::List: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equals(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.dict().entries;
      if (x.size() != b.dict().entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* o = b.dict().find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case Value::Kind::Namespace: return &a.ns() == &b.ns();
    case Value::Kind::Callable: return &a.fn() == &b.fn();
    default: return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order equals code point order.
    const int c = a.str().compare(b.str());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  throw Error(fmt::format("'<' not supported between instances of '{}' and '{}'", type_name(a),
                          type_name(b)));
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
  }
  return "object";
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::String: return v.str();
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.as_bool() ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.as_int());
    case Value::Kind::Float: return py_repr_float(v.as_double());
    case Value::Kind::String:
      return v.is_safe() ? "Markup(" + py_repr_str(v.str()) + ")" : py_repr_str(v.str());
    case Value::Kind::List: {
      std::string out = v.is_tuple() ? "(" : "[";
      const auto& xs = v.items();
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += ", ";
        out += repr(xs[i]);
      }
      if (v.is_tuple() && xs.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return out;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict().entries) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_str(k) + ": " + repr(x);
      }
      out += "}";
      return v.is_namespace() ? "<Namespace " + out + ">" : out;
    }
    case Value::Kind::Callable: return "<function " + v.fn().name + ">";
  }
  return "";
}

static void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  auto esc_u = [&](uint32_t c) { out += fmt::format("\\u{:04x}", c); };
  if (!ensure_ascii) {
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) esc_u(c);
          else out.push_back(ch);
      }
    }
  } else {
    for (char32_t c : utf8_decode(s)) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20) {
            esc_u(c);
          } else if (c < 0x80) {
            out.push_back(static_cast<char>(c));
          } else if (c < 0x10000) {
            esc_u(c);
          } else {  // astral plane: a UTF-16 surrogate pair, as Python writes it
            const uint32_t u = c - 0x10000;
            esc_u(0xD800 + (u >> 10));
            esc_u(0xDC00 + (u & 0x3FF));
          }
      }
    }
  }
  out.push_back('"');
}

static void json_value(std::string& out, const Value& v, const JsonOptions& o, int level) {
  auto newline = [&](int lvl) {
    if (!o.indent) return;
    out.push_back('\n');
    for (int i = 0; i < lvl; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::None: out += "null"; return;
    case Value::Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Kind::Int: out += std::to_string(v.as_int()); return;
    case Value::Kind::Float: {
      const double d = v.as_double();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += py_repr_float(d);
      return;
    }
    case Value::Kind::String: json_string(out, v.str(), o.ensure_ascii); return;
    case Value::Kind::List: {
      const auto& xs = v.items();
      if (xs.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < xs.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_value(out, xs[i], o, level + 1);
      }
      newline(level);
      out.push_back(']');
      return;
    }
    case Value::Kind::Dict: {
      std::vector<const std::pair<std::string, Value>*> es;
      for (const auto& e : v.dict().entries) es.push_back(&e);
      if (es.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(es.begin(), es.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out.push_back('{');
      for (size_t i = 0; i < es.size(); ++i) {
        if (i) out += o.item_sep;
        newline(level + 1);
        json_string(out, es[i]->first, o.ensure_ascii);
        out += o.key_sep;
        json_value(out, es[i]->second, o, level + 1);
      }
      newline(level);
      out.push_back('}');
      return;
    }
    default:
      throw Error(fmt::format("Object of type {} is not JSON serializable", type_name(v)));
  }
}

std::string to_json_text(const Value& v, const JsonOptions& opt) {
  std::string out;
  json_value(out, v, opt, 0);
  return out;
}

static Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using J = nlohmann::ordered_json;
  // Deeper input would only exhaust the stack in the recursive printers below.
  if (depth > 256) throw Error("chat template: context JSON nests deeper than 256 levels");
  switch (j.type()) {
    case J::value_t::null: return Value::none();
    case J::value_t::boolean: return Value(j.get<bool>());
    case J::value_t::number_integer: return Value(j.get<int64_t>());
    case J::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case J::value_t::number_float: return Value(j.get<double>());
    case J::value_t::string: return Value(j.get<std::string>());
    case J::value_t::array: {
      List xs;
      xs.reserve(j.size());
      for (const auto& e : j) xs.push_back(from_json_at(e, depth + 1));
      return Value::list(std::move(xs));
    }
    case J::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->entries.reserve(j.size());
      for (const auto& [k, e] : j.items()) d->entries.emplace_back(k, from_json_at(e, depth + 1));
      return Value::dict(std::move(d));
    }
    default: throw Error("chat template: context holds a JSON value of unsupported type (binary)");
  }
}

Value from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

List iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return v.items();
    case Value::Kind::Dict: {
      List keys;
      for (const auto& [k, x] : v.dict().entries) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (char32_t c : utf8_decode(v.str())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
      return chars;
    }
    default: throw Error(fmt::format("'{}' object is not iterable", type_name(v)));
  }
}

int64_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::List: return static_cast<int64_t>(v.items().size());
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return static_cast<int64_t>(v.dict().entries.size());
    default: throw Error(fmt::format("object of type '{}' has no len()", type_name(v)));
  }
}

}  // namespace vi::jinja
