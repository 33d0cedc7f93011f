// The dynamic value type of the chat-template interpreter and its Python semantics:
// truthiness, ==, ordering, str(), repr() and json.dumps() as transformers' tojson
// calls it. Lists and dicts are immutable and shared (the sandbox transformers uses
// forbids mutating them); namespaces are the one mutable, reference-typed value.
// Dicts keep insertion order, like Python dicts, because tojson output depends on it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vi::jinja {

class Value;
using List = std::vector<Value>;
struct Dict;
struct Callable;

// Arguments of a call: positional, then keyword in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };

  Value();  // undefined, with no hint
  Value(bool b);
  Value(int v);
  Value(int64_t v);
  Value(double v);
  Value(std::string s, bool safe = false);
  Value(const char* s);

  // `hint` is the message an operation that needs a real value fails with,
  // e.g. "'x' is undefined" or "'dict object' has no attribute 'y'".
  static Value undefined(std::string hint);
  static Value none();
  static Value list(List items, bool tuple = false);
  static Value dict(std::shared_ptr<const Dict> d);
  static Value name_space(std::shared_ptr<Dict> d);
  static Value callable(std::shared_ptr<const Callable> c);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  bool is_int() const { return kind_ == Kind::Int; }
  bool is_float() const { return kind_ == Kind::Float; }
  bool is_number() const { return kind_ == Kind::Int || kind_ == Kind::Float || kind_ == Kind::Bool; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_list() const { return kind_ == Kind::List; }
  bool is_tuple() const { return kind_ == Kind::List && flag_; }
  bool is_dict() const { return kind_ == Kind::Dict; }
  bool is_namespace() const { return kind_ == Kind::Namespace; }
  bool is_callable() const { return kind_ == Kind::Callable; }
  bool is_safe() const { return kind_ == Kind::String && flag_; }  // markupsafe.Markup

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::Bool ? (b_ ? 1 : 0) : i_; }  // Int or Bool
  double as_double() const;                                                  // any number
  const std::string& str() const;  // String only
  const List& items() const;       // List only
  const Dict& dict() const;        // Dict or Namespace
  Dict& ns() const;                // Namespace only (mutable)
  const Callable& fn() const;
  const std::string& undefined_hint() const;

 private:
  Kind kind_ = Kind::Undefined;
  bool flag_ = false;  // String: safe (Markup); List: tuple
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<void> p_;  // string / list / dict / callable / undefined hint
};

// An insertion-ordered string-keyed map (Python dict with str keys).
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value v);  // replaces in place or appends
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

// Python truthiness.
bool truthy(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python <, as -1/0/1; throws vi::Error (Python's TypeError) for unorderable types.
int compare(const Value& a, const Value& b);
// Python type name, for error messages ("str", "int", "dict", ...).
std::string type_name(const Value& v);
// Python str() / repr(). Undefined prints as "".
std::string to_str(const Value& v);
std::string repr(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) byte for byte; throws vi::Error for values JSON cannot hold.
std::string to_json_text(const Value& v, const JsonOptions& opt);

Value from_json(const nlohmann::ordered_json& j);

// Code-point-wise elements of an iterable, as a `for` loop sees them (dict -> keys,
// str -> characters, undefined -> nothing). Throws vi::Error for non-iterables.
List iterate(const Value& v);
// Python len(); throws for values without a length.
int64_t length(const Value& v);

}  // namespace vi::jinja
