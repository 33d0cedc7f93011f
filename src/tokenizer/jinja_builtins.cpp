// Built-in filters, tests, str/list/dict methods and globals of the chat-template
// interpreter, following jinja2/filters.py, jinja2/tests.py and transformers'
// overrides (tojson without HTML escaping and with json.dumps options,
// raise_exception, strftime_now, a namespace that rejects "_" attributes).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_interp.h"
#include "tokenizer/jinja_strings.h"

namespace vi::jinja {
namespace {

// Binds positional and keyword arguments to a Python-style parameter list.
class Params {
 public:
  Params(const std::string& fname, CallArgs& a, std::initializer_list<const char*> names) : vals_(names.size()) {
    std::vector<std::string> ns(names.begin(), names.end());
    if (a.pos.size() > ns.size())
      throw Error(fmt::format("{}() takes at most {} argument(s) ({} given)", fname, ns.size(), a.pos.size()));
    for (size_t i = 0; i < a.pos.size(); ++i) vals_[i] = a.pos[i];
    for (auto& [k, v] : a.kw) {
      auto it = std::find(ns.begin(), ns.end(), k);
      if (it == ns.end()) throw Error(fmt::format("{}() got an unexpected keyword argument '{}'", fname, k));
      vals_[static_cast<size_t>(it - ns.begin())] = v;
    }
  }
  bool has(size_t i) const { return vals_[i].has_value(); }
  Value get(size_t i, Value dflt = Value::none()) const { return vals_[i] ? *vals_[i] : dflt; }
  std::optional<std::string> opt_str(size_t i, const char* what) const {
    if (!vals_[i] || vals_[i]->is_none()) return std::nullopt;
    if (!vals_[i]->is_string()) throw Error(fmt::format("{} must be a string, not {}", what, type_name(*vals_[i])));
    return vals_[i]->str();
  }
  int64_t int_or(size_t i, int64_t dflt) const {
    if (!vals_[i] || vals_[i]->is_none()) return dflt;
    if (!vals_[i]->is_int() && !vals_[i]->is_bool())
      throw Error(fmt::format("an integer is required, got {}", type_name(*vals_[i])));
    return vals_[i]->as_int();
  }
  bool bool_or(size_t i, bool dflt) const { return vals_[i] ? truthy(*vals_[i]) : dflt; }

 private:
  std::vector<std::optional<Value>> vals_;
};

const std::string& need_str(const Value& v, const char* what) {
  if (v.is_undefined()) {
    static const std::string empty;
    return empty;
  }
  if (!v.is_string()) throw Error(fmt::format("{} expects a string, got {}", what, type_name(v)));
  return v.str();
}

// Jinja's make_attrgetter: "a.b.0" walks items (then attributes) one part at a time.
Value attr_path(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t b = 0;
  while (b <= path.size()) {
    size_t e = path.find('.', b);
    if (e == std::string::npos) e = path.size();
    const std::string part = path.substr(b, e - b);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? in.get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : in.get_item(v, Value(part));
    b = e + 1;
  }
  return v;
}

Value ignore_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

List sorted(List xs, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) keyed.emplace_back(key(xs[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
  List out;
  out.reserve(xs.size());
  for (auto& [k, i] : keyed) out.push_back(std::move(xs[i]));
  return out;
}

Value tuple2(Value a, Value b) { return Value::list({std::move(a), std::move(b)}, true); }

List dict_items(const Value& v) {
  List out;
  for (const auto& [k, x] : v.dict().entries) out.push_back(tuple2(Value(k), x));
  return out;
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
std::optional<int64_t> parse_int(const std::string& s0, int base) {
  const std::string s = py_strip(s0, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '+' || s[0] == '-') {
    neg = s[0] == '-';
    i = 1;
  }
  if (i >= s.size()) return std::nullopt;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    else if (c == '_' && prev_digit && i + 1 < s.size()) {
      prev_digit = false;
      continue;
    }
    if (d < 0 || d >= base) return std::nullopt;
    v = v * base + d;
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  return neg ? -v : v;
}

std::optional<double> parse_float(const std::string& s0) {
  const std::string s = py_strip(s0, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  try {
    size_t used = 0;
    const double d = std::stod(s, &used);
    if (used != s.size()) return std::nullopt;
    return d;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string tojson(const Value& v, CallArgs& a) {
  Params p("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = p.bool_or(0, false);
  const Value indent = p.get(1);
  if (indent.is_int()) o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  else if (indent.is_string()) o.indent = indent.str();
  else if (!indent.is_none()) throw Error(fmt::format("tojson indent must be an int or str, not {}", type_name(indent)));
  if (o.indent) o.item_sep = ",";
  const Value seps = p.get(2);
  if (!seps.is_none()) {
    if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() || !seps.items()[1].is_string())
      throw Error("tojson separators must be a pair of strings");
    o.item_sep = seps.items()[0].str();
    o.key_sep = seps.items()[1].str();
  }
  o.sort_keys = p.bool_or(3, false);
  return to_json_text(v, o);
}

std::string do_indent(const std::string& s0, CallArgs& a) {
  Params p("indent", a, {"width", "first", "blank"});
  const Value w = p.get(0, Value(4));
  const std::string ind = w.is_string() ? w.str() : std::string(static_cast<size_t>(std::max<int64_t>(0, w.as_int())), ' ');
  const bool first = p.bool_or(1, false), blank = p.bool_or(2, false);
  const std::string s = s0 + "\n";  // as Jinja does, so the last line is handled like the others
  std::vector<std::string> lines = py_splitlines(s);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return rv;
}

Value select_like(Interpreter& in, const Value& v, CallArgs& a, bool attr_mode, bool keep_if) {
  List out;
  std::string attr;
  size_t k = 0;
  if (attr_mode) {
    if (a.pos.empty() || !a.pos[0].is_string()) throw Error("selectattr/rejectattr need an attribute name");
    attr = a.pos[0].str();
    k = 1;
  }
  std::string test;
  if (k < a.pos.size()) {
    if (!a.pos[k].is_string()) throw Error("test name must be a string");
    test = a.pos[k].str();
    ++k;
  }
  for (const Value& item : iterate(v)) {
    Value x = attr_mode ? attr_path(in, item, attr) : item;
    bool r;
    if (test.empty()) {
      r = truthy(x);
    } else {
      CallArgs targs;
      targs.pos.assign(a.pos.begin() + static_cast<std::ptrdiff_t>(k), a.pos.end());
      targs.kw = a.kw;
      r = in.test(test, x, targs);
    }
    if (r == keep_if) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value minmax(Interpreter& in, const Value& v, CallArgs& a, bool is_max) {
  Params p(is_max ? "max" : "min", a, {"case_sensitive", "attribute"});
  const bool cs = p.bool_or(0, false);
  const auto attr = p.opt_str(1, "attribute");
  List xs = iterate(v);
  if (xs.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  Value bk = ignore_case(attr ? attr_path(in, xs[0], *attr) : xs[0], cs);
  for (size_t i = 1; i < xs.size(); ++i) {
    Value k = ignore_case(attr ? attr_path(in, xs[i], *attr) : xs[i], cs);
    const int c = compare(k, bk);
    if (is_max ? c > 0 : c < 0) {
      best = i;
      bk = k;
    }
  }
  return xs[best];
}

}  // namespace

// ---------------------------------------------------------------- filters

Value builtin_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  const std::string& n = name;
  if (n == "safe") return v.is_string() ? Value(v.str(), true) : Value(to_str(v), true);
  if (n == "string") return v.is_string() ? v : Value(to_str(v));
  if (n == "length" || n == "count") return Value(length(v));
  if (n == "tojson") return Value(tojson(v, a));
  if (n == "trim") {
    Params p("trim", a, {"chars"});
    return Value(py_strip(to_str(v), p.opt_str(0, "trim chars"), true, true));
  }
  if (n == "upper") return Value(py_upper(to_str(v)));
  if (n == "lower") return Value(py_lower(to_str(v)));
  if (n == "capitalize") return Value(py_capitalize(to_str(v)));
  if (n == "title") return Value(py_title(to_str(v)));
  if (n == "replace") {
    Params p("replace", a, {"old", "new", "count"});
    if (!p.has(0) || !p.has(1)) throw Error("replace() needs old and new");
    return Value(py_replace(to_str(v), to_str(p.get(0)), to_str(p.get(1)), p.int_or(2, -1)));
  }
  if (n == "default" || n == "d") {
    Params p("default", a, {"default_value", "boolean"});
    const bool boolean = p.bool_or(1, false);
    if (v.is_undefined() || (boolean && !truthy(v))) return p.get(0, Value(""));
    return v;
  }
  if (n == "first" || n == "last") {
    if (v.is_string() || v.is_list()) {
      List xs = iterate(v);
      if (xs.empty()) return Value::undefined(n == "first" ? "No first item, sequence was empty." : "No last item, sequence was empty.");
      return n == "first" ? xs.front() : xs.back();
    }
    List xs = iterate(v);
    if (xs.empty()) return Value::undefined("sequence was empty");
    return n == "first" ? xs.front() : xs.back();
  }
  if (n == "list") return Value::list(iterate(v));
  if (n == "join") {
    Params p("join", a, {"d", "attribute"});
    const std::string sep = p.has(0) ? to_str(p.get(0)) : "";
    const auto attr = p.opt_str(1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& x : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr ? attr_path(in, x, *attr) : x);
    }
    return Value(std::move(out));
  }
  if (n == "items") {
    if (v.is_undefined()) return Value::list({});
    if (!v.is_dict()) throw Error("TypeError: Can only get item pairs from a mapping.");
    return Value::list(dict_items(v));
  }
  if (n == "dictsort") {
    Params p("dictsort", a, {"case_sensitive", "by", "reverse"});
    if (!v.is_dict()) throw Error("dictsort expects a mapping");
    const bool cs = p.bool_or(0, false);
    const std::string by = p.has(1) ? to_str(p.get(1)) : "key";
    if (by != "key" && by != "value") throw Error("You can only sort by either \"key\" or \"value\"");
    const size_t pos = by == "key" ? 0 : 1;
    return Value::list(sorted(dict_items(v), [&](const Value& t) { return ignore_case(t.items()[pos], cs); },
                              p.bool_or(2, false)));
  }
  if (n == "sort") {
    Params p("sort", a, {"reverse", "case_sensitive", "attribute"});
    const bool cs = p.bool_or(1, false);
    const auto attr = p.opt_str(2, "attribute");
    return Value::list(sorted(iterate(v), [&](const Value& x) { return ignore_case(attr ? attr_path(in, x, *attr) : x, cs); },
                              p.bool_or(0, false)));
  }
  if (n == "reverse") {
    if (v.is_string()) {
      std::u32string cps = utf8_decode(v.str());
      std::reverse(cps.begin(), cps.end());
      return Value(utf8_encode(cps));
    }
    List xs = iterate(v);
    std::reverse(xs.begin(), xs.end());
    return Value::list(std::move(xs));
  }
  if (n == "unique") {
    Params p("unique", a, {"case_sensitive", "attribute"});
    const bool cs = p.bool_or(0, false);
    const auto attr = p.opt_str(1, "attribute");
    List out, seen;
    for (const Value& x : iterate(v)) {
      Value k = ignore_case(attr ? attr_path(in, x, *attr) : x, cs);
      if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::list(std::move(out));
  }
  if (n == "min" || n == "max") return minmax(in, v, a, n == "max");
  if (n == "sum") {
    Params p("sum", a, {"attribute", "start"});
    const auto attr = p.opt_str(0, "attribute");
    Value acc = p.get(1, Value(0));
    for (const Value& x : iterate(v)) acc = arith("+", acc, attr ? attr_path(in, x, *attr) : x);
    return acc;
  }
  if (n == "map") {
    List out;
    const Value* attr = nullptr;
    const Value* dflt = nullptr;
    for (const auto& [k, x] : a.kw) {
      if (k == "attribute") attr = &x;
      else if (k == "default") dflt = &x;
    }
    if (attr) {
      for (const Value& x : iterate(v)) {
        Value r = attr_path(in, x, to_str(*attr));
        if (r.is_undefined() && dflt) r = *dflt;
        out.push_back(std::move(r));
      }
      return Value::list(std::move(out));
    }
    if (a.pos.empty() || !a.pos[0].is_string()) throw Error("map() needs a filter name or attribute=");
    const std::string fname = a.pos[0].str();
    CallArgs rest;
    rest.pos.assign(a.pos.begin() + 1, a.pos.end());
    rest.kw = a.kw;
    for (const Value& x : iterate(v)) {
      CallArgs fa = rest;
      out.push_back(in.filter(fname, x, fa));
    }
    return Value::list(std::move(out));
  }
  if (n == "select") return select_like(in, v, a, false, true);
  if (n == "reject") return select_like(in, v, a, false, false);
  if (n == "selectattr") return select_like(in, v, a, true, true);
  if (n == "rejectattr") return select_like(in, v, a, true, false);
  if (n == "attr") {
    // Python getattr only (never an item lookup): on plain data only methods exist.
    Params p("attr", a, {"name"});
    const std::string attr = to_str(p.get(0));
    if (v.is_namespace() || has_method(v, attr)) return in.get_attr(v, attr);
    return Value::undefined(fmt::format("'{} object' has no attribute '{}'", type_name(v), attr));
  }
  if (n == "int") {
    Params p("int", a, {"default", "base"});
    const Value dflt = p.get(0, Value(0));
    if (v.is_int() || v.is_bool()) return Value(v.as_int());
    if (v.is_float()) return std::isfinite(v.as_double()) ? Value(static_cast<int64_t>(v.as_double())) : dflt;
    if (v.is_string()) {
      if (auto i = parse_int(v.str(), static_cast<int>(p.int_or(1, 10)))) return Value(*i);
      if (auto f = parse_float(v.str()); f && std::isfinite(*f)) return Value(static_cast<int64_t>(*f));
    }
    return dflt;
  }
  if (n == "float") {
    Params p("float", a, {"default"});
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string())
      if (auto f = parse_float(v.str())) return Value(*f);
    return p.get(0, Value(0.0));
  }
  if (n == "abs") {
    if (v.is_float()) return Value(std::fabs(v.as_double()));
    if (v.is_int() || v.is_bool()) return Value(static_cast<int64_t>(std::llabs(v.as_int())));
    throw Error(fmt::format("bad operand type for abs(): '{}'", type_name(v)));
  }
  if (n == "round") {
    Params p("round", a, {"precision", "method"});
    const int64_t prec = p.int_or(0, 0);
    const std::string method = p.has(1) ? to_str(p.get(1)) : "common";
    const double scale = std::pow(10.0, static_cast<double>(prec));
    const double x = v.as_double() * scale;
    double r;
    if (method == "common") r = std::nearbyint(x);  // Python round(): half to even
    else if (method == "ceil") r = std::ceil(x);
    else if (method == "floor") r = std::floor(x);
    else throw Error("method must be common, ceil or floor");
    return Value(r / scale);
  }
  if (n == "escape" || n == "e") {
    if (v.is_safe()) return v;
    return Value(html_escape(to_str(v)), true);
  }
  if (n == "indent") return Value(do_indent(to_str(v), a));
  if (n == "wordcount") return Value(static_cast<int64_t>(py_split(to_str(v), std::nullopt, -1).size()));
  throw Error(fmt::format("No filter named '{}'.", name));
}

// ---------------------------------------------------------------- tests

bool builtin_test(Interpreter& in, const std::string& n, const Value& v, CallArgs& a) {
  auto arg = [&](const char* what) -> const Value& {
    if (a.pos.empty()) {
      if (!a.kw.empty()) return a.kw[0].second;
      throw Error(fmt::format("test '{}' needs an argument", what));
    }
    return a.pos[0];
  };
  if (n == "defined") return !v.is_undefined();
  if (n == "undefined") return v.is_undefined();
  if (n == "none") return v.is_none();
  if (n == "boolean") return v.is_bool();
  if (n == "true") return v.is_bool() && v.as_bool();
  if (n == "false") return v.is_bool() && !v.as_bool();
  if (n == "integer") return v.is_int();
  if (n == "float") return v.is_float();
  if (n == "number") return v.is_number();
  if (n == "string") return v.is_string();
  if (n == "mapping") return v.is_dict();
  // Jinja's Undefined is iterable and has a length, so both hold for it, as in Python.
  if (n == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (n == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (n == "callable") return v.is_callable();
  if (n == "escaped") return v.is_safe();
  if (n == "odd" || n == "even") {
    if (!v.is_int() && !v.is_bool()) throw Error(fmt::format("test '{}' needs an integer", n));
    const bool odd = (v.as_int() % 2) != 0;
    return n == "odd" ? odd : !odd;
  }
  if (n == "divisibleby") {
    const Value& d = arg("divisibleby");
    if (!v.is_number() || !d.is_number()) throw Error("divisibleby needs numbers");
    if (d.as_double() == 0) throw Error("ZeroDivisionError: integer division or modulo by zero");
    return truthy(arith("%", v, d)) == false;
  }
  if (n == "eq" || n == "equalto" || n == "==") return equals(v, arg("eq"));
  if (n == "ne" || n == "!=") return !equals(v, arg("ne"));
  if (n == "sameas") {
    const Value& o = arg("sameas");
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    return equals(v, o) && (v.is_int() || v.is_string());
  }
  if (n == "lt" || n == "lessthan" || n == "<") return compare(v, arg("lt")) < 0;
  if (n == "le" || n == "<=") return compare(v, arg("le")) <= 0;
  if (n == "gt" || n == "greaterthan" || n == ">") return compare(v, arg("gt")) > 0;
  if (n == "ge" || n == ">=") return compare(v, arg("ge")) >= 0;
  if (n == "lower") return v.is_string() && py_lower(v.str()) == v.str();
  if (n == "upper") return v.is_string() && py_upper(v.str()) == v.str();
  if (n == "in") {
    const Value& seq = arg("in");
    switch (seq.kind()) {
      case Value::Kind::Undefined: return false;
      case Value::Kind::String:
        if (!v.is_string())
          throw Error(fmt::format("TypeError: 'in <string>' requires string as left operand, not {}", type_name(v)));
        return seq.str().find(v.str()) != std::string::npos;
      case Value::Kind::List:
        return std::any_of(seq.items().begin(), seq.items().end(), [&](const Value& x) { return equals(x, v); });
      case Value::Kind::Dict: return v.is_string() && seq.dict().find(v.str()) != nullptr;
      default:
        throw Error(fmt::format("TypeError: argument of type '{}' is not iterable", type_name(seq)));
    }
  }
  (void)in;
  throw Error(fmt::format("No test named '{}'.", n));
}

// ---------------------------------------------------------------- methods

static const char* const kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "replace", "upper", "lower", "title",
    "capitalize", "startswith", "endswith", "find", "rfind", "index", "count", "join", "isdigit", "isalpha",
    "isalnum", "isspace", "isupper", "islower", "removeprefix", "removesuffix", "format"};
static const char* const kListMethods[] = {"index", "count"};
static const char* const kDictMethods[] = {"get", "items", "keys", "values", "copy"};
static const char* const kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};
static const char* const kDictUnsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};

template <size_t N>
static bool in_list(const char* const (&xs)[N], const std::string& n) {
  return std::any_of(std::begin(xs), std::end(xs), [&](const char* x) { return n == x; });
}

bool has_method(const Value& obj, const std::string& name) {
  if (obj.is_string()) return in_list(kStrMethods, name);
  if (obj.is_list()) return in_list(kListMethods, name);
  if (obj.is_dict()) return in_list(kDictMethods, name);
  return false;
}

bool is_unsafe_method(const Value& obj, const std::string& name) {
  if (obj.is_list()) return in_list(kListUnsafe, name);
  if (obj.is_dict()) return in_list(kDictUnsafe, name);
  return false;
}

static bool starts_or_ends(const std::string& s, const Value& arg, bool starts) {
  auto one = [&](const Value& x) {
    if (!x.is_string()) throw Error(fmt::format("{} arg must be str or a tuple of str, not {}", starts ? "startswith" : "endswith", type_name(x)));
    const std::string& p = x.str();
    if (p.size() > s.size()) return false;
    return starts ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (arg.is_list()) return std::any_of(arg.items().begin(), arg.items().end(), one);
  return one(arg);
}

static bool all_cps(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string cps = utf8_decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

Value builtin_method(Interpreter& in, const Value& obj, const std::string& n, CallArgs& a, bool& found) {
  found = true;
  (void)in;
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (n == "strip" || n == "lstrip" || n == "rstrip") {
      Params p(n, a, {"chars"});
      return Value(py_strip(s, p.opt_str(0, "chars"), n != "rstrip", n != "lstrip"));
    }
    if (n == "split" || n == "rsplit") {
      Params p(n, a, {"sep", "maxsplit"});
      const auto parts = n == "split" ? py_split(s, p.opt_str(0, "sep"), p.int_or(1, -1))
                                      : py_rsplit(s, p.opt_str(0, "sep"), p.int_or(1, -1));
      List out(parts.begin(), parts.end());
      return Value::list(std::move(out));
    }
    if (n == "splitlines") {
      const auto parts = py_splitlines(s);
      return Value::list(List(parts.begin(), parts.end()));
    }
    if (n == "replace") {
      Params p(n, a, {"old", "new", "count"});
      return Value(py_replace(s, need_str(p.get(0), "replace"), need_str(p.get(1), "replace"), p.int_or(2, -1)));
    }
    if (n == "upper") return Value(py_upper(s));
    if (n == "lower") return Value(py_lower(s));
    if (n == "title") return Value(py_title(s));
    if (n == "capitalize") return Value(py_capitalize(s));
    if (n == "startswith" || n == "endswith") {
      if (a.pos.size() != 1) throw Error(fmt::format("{}() takes exactly one argument here", n));
      return Value(starts_or_ends(s, a.pos[0], n == "startswith"));
    }
    if (n == "find" || n == "rfind" || n == "index" || n == "count") {
      if (a.pos.size() != 1 || !a.pos[0].is_string()) throw Error(fmt::format("{}() needs one string argument", n));
      const std::string& sub = a.pos[0].str();
      if (n == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
        int64_t c = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++c;
        return Value(c);
      }
      const size_t p = n == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (n == "index") throw Error("ValueError: substring not found");
        return Value(static_cast<int64_t>(-1));
      }
      return Value(static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, p))));
    }
    if (n == "join") {
      if (a.pos.size() != 1) throw Error("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& x : iterate(a.pos[0])) {
        if (!x.is_string()) throw Error(fmt::format("sequence item: expected str instance, {} found", type_name(x)));
        if (!first) out += s;
        first = false;
        out += x.str();
      }
      return Value(std::move(out));
    }
    if (n == "isdigit") return Value(all_cps(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
    if (n == "isalpha")
      return Value(all_cps(s, [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xC0 && c != 0xD7 && c != 0xF7); }));
    if (n == "isalnum")
      return Value(all_cps(s, [](char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c >= 0xC0 && c != 0xD7 && c != 0xF7); }));
    if (n == "isspace") return Value(all_cps(s, py_isspace));
    if (n == "isupper") return Value(py_upper(s) == s && py_lower(s) != s);
    if (n == "islower") return Value(py_lower(s) == s && py_upper(s) != s);
    if (n == "removeprefix" || n == "removesuffix") {
      if (a.pos.size() != 1 || !a.pos[0].is_string()) throw Error(fmt::format("{}() needs one string argument", n));
      const std::string& x = a.pos[0].str();
      if (n == "removeprefix") return Value(s.compare(0, x.size(), x) == 0 ? s.substr(x.size()) : s);
      return Value(x.size() <= s.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 ? s.substr(0, s.size() - x.size()) : s);
    }
    if (n == "format") throw Error("str.format() is not supported in chat templates here");
  } else if (obj.is_list()) {
    if (n == "index" || n == "count") {
      if (a.pos.size() != 1) throw Error(fmt::format("{}() takes exactly one argument", n));
      int64_t c = 0;
      for (size_t i = 0; i < obj.items().size(); ++i) {
        if (!equals(obj.items()[i], a.pos[0])) continue;
        if (n == "index") return Value(static_cast<int64_t>(i));
        ++c;
      }
      if (n == "index") throw Error("ValueError: value is not in list");
      return Value(c);
    }
  } else if (obj.is_dict()) {
    if (n == "get") {
      Params p("get", a, {"key", "default"});
      const Value k = p.get(0);
      if (k.is_string())
        if (const Value* v = obj.dict().find(k.str())) return *v;
      return p.get(1);
    }
    if (n == "items") return Value::list(dict_items(obj));
    if (n == "keys" || n == "values") {
      List out;
      for (const auto& [k, v] : obj.dict().entries) out.push_back(n == "keys" ? Value(k) : v);
      return Value::list(std::move(out));
    }
    if (n == "copy") return obj;
  }
  found = false;
  return Value();
}

// ---------------------------------------------------------------- globals

static Value make_fn(const std::string& name, std::function<Value(CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->fn = std::move(fn);
  return Value::callable(std::move(c));
}

static std::shared_ptr<Dict> dict_from_args(CallArgs& a, const char* what) {
  auto d = std::make_shared<Dict>();
  for (const Value& x : a.pos) {
    if (!x.is_dict() && !x.is_namespace()) throw Error(fmt::format("{}() positional arguments must be mappings", what));
    for (const auto& [k, v] : x.dict().entries) d->set(k, v);
  }
  for (auto& [k, v] : a.kw) d->set(k, v);
  return d;
}

void install_globals(Scope& s) {
  s.vars["raise_exception"] = make_fn("raise_exception", [](CallArgs& a) -> Value {
    throw ChatTemplateRaise(a.pos.empty() ? std::string() : to_str(a.pos[0]));
  });
  s.vars["range"] = make_fn("range", [](CallArgs& a) -> Value {
    if (a.pos.empty() || a.pos.size() > 3) throw Error("range expected 1 to 3 arguments");
    for (const Value& x : a.pos)
      if (!x.is_int() && !x.is_bool()) throw Error(fmt::format("'{}' object cannot be interpreted as an integer", type_name(x)));
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) stop = a.pos[0].as_int();
    else {
      start = a.pos[0].as_int();
      stop = a.pos[1].as_int();
      if (a.pos.size() == 3) step = a.pos[2].as_int();
    }
    if (step == 0) throw Error("range() arg 3 must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      out.emplace_back(i);
      if (out.size() > 100000) throw Error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    }
    return Value::list(std::move(out));
  });
  s.vars["dict"] = make_fn("dict", [](CallArgs& a) -> Value { return Value::dict(dict_from_args(a, "dict")); });
  s.vars["namespace"] = make_fn("namespace", [](CallArgs& a) -> Value {
    auto d = dict_from_args(a, "namespace");
    for (const auto& [k, v] : d->entries)
      if (!k.empty() && k[0] == '_')
        throw Error(fmt::format("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '{}'.", k));
    return Value::name_space(std::move(d));
  });
  s.vars["strftime_now"] = make_fn("strftime_now", [](CallArgs& a) -> Value {
    if (a.pos.size() != 1 || !a.pos[0].is_string()) throw Error("strftime_now() takes one format string");
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    const size_t n = std::strftime(buf, sizeof(buf), a.pos[0].str().c_str(), &tm);
    return Value(std::string(buf, n));
  });
}

}  // namespace vi::jinja
