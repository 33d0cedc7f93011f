#include "core/metadata.h"

#include "core/error.h"

namespace vi {

namespace {
const char* kind_name(MetaValue::Kind k) {
  switch (k) {
    case MetaValue::Kind::kInt: return "integer";
    case MetaValue::Kind::kFloat: return "float";
    case MetaValue::Kind::kBool: return "bool";
    case MetaValue::Kind::kString: return "string";
    case MetaValue::Kind::kArray: return "array";
  }
  return "?";
}

const MetaValue& need(const Metadata& m, const std::string& key, MetaValue::Kind kind) {
  const MetaValue* v = m.find(key);
  VI_CHECK(v != nullptr, "metadata key '{}' is missing", key);
  bool ok = v->kind == kind || (kind == MetaValue::Kind::kFloat && v->kind == MetaValue::Kind::kInt);
  VI_CHECK(ok, "metadata key '{}' is a {}, expected a {}", key, kind_name(v->kind), kind_name(kind));
  return *v;
}
}  // namespace

const MetaValue* Metadata::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

int64_t Metadata::get_int(const std::string& key) const {
  return need(*this, key, MetaValue::Kind::kInt).i;
}
double Metadata::get_float(const std::string& key) const {
  const MetaValue& v = need(*this, key, MetaValue::Kind::kFloat);
  return v.kind == MetaValue::Kind::kInt ? static_cast<double>(v.i) : v.f;
}
bool Metadata::get_bool(const std::string& key) const {
  return need(*this, key, MetaValue::Kind::kBool).b;
}
const std::string& Metadata::get_string(const std::string& key) const {
  return need(*this, key, MetaValue::Kind::kString).s;
}

std::vector<std::string> Metadata::get_string_array(const std::string& key) const {
  const MetaValue& v = need(*this, key, MetaValue::Kind::kArray);
  std::vector<std::string> out;
  out.reserve(v.arr.size());
  for (const MetaValue& e : v.arr) {
    VI_CHECK(e.kind == MetaValue::Kind::kString, "metadata key '{}' is not an array of strings", key);
    out.push_back(e.s);
  }
  return out;
}

std::vector<int64_t> Metadata::get_int_array(const std::string& key) const {
  const MetaValue& v = need(*this, key, MetaValue::Kind::kArray);
  std::vector<int64_t> out;
  out.reserve(v.arr.size());
  for (const MetaValue& e : v.arr) {
    VI_CHECK(e.kind == MetaValue::Kind::kInt, "metadata key '{}' is not an array of integers", key);
    out.push_back(e.i);
  }
  return out;
}

std::vector<double> Metadata::get_float_array(const std::string& key) const {
  const MetaValue& v = need(*this, key, MetaValue::Kind::kArray);
  std::vector<double> out;
  out.reserve(v.arr.size());
  for (const MetaValue& e : v.arr) {
    VI_CHECK(e.kind == MetaValue::Kind::kFloat || e.kind == MetaValue::Kind::kInt,
             "metadata key '{}' is not an array of numbers", key);
    out.push_back(e.kind == MetaValue::Kind::kInt ? static_cast<double>(e.i) : e.f);
  }
  return out;
}

std::optional<int64_t> Metadata::opt_int(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}
std::optional<double> Metadata::opt_float(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}
std::optional<bool> Metadata::opt_bool(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_bool(key);
}
std::optional<std::string> Metadata::opt_string(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

MetaValue Metadata::make_int(int64_t v, int gguf_type) {
  MetaValue m;
  m.kind = MetaValue::Kind::kInt;
  m.i = v;
  m.gguf_type = gguf_type;
  return m;
}
MetaValue Metadata::make_float(double v, int gguf_type) {
  MetaValue m;
  m.kind = MetaValue::Kind::kFloat;
  m.f = v;
  m.gguf_type = gguf_type;
  return m;
}
MetaValue Metadata::make_bool(bool v) {
  MetaValue m;
  m.kind = MetaValue::Kind::kBool;
  m.b = v;
  return m;
}
MetaValue Metadata::make_string(std::string v) {
  MetaValue m;
  m.kind = MetaValue::Kind::kString;
  m.s = std::move(v);
  return m;
}

}  // namespace vi
