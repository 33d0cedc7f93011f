// Format-neutral key/value metadata (GGUF KV pairs, or values a loader derived from a
// Hugging Face config.json). Lives in core so that tokenizer/ and models/ can read it
// without depending on formats/.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace vi {

struct MetaValue {
  enum class Kind : uint8_t { kInt, kFloat, kBool, kString, kArray };
  Kind kind = Kind::kInt;
  // The GGUF value type code it was read as (0..12), or -1 when not from GGUF;
  // writers use it to round-trip the exact type.
  int gguf_type = -1;
  int64_t i = 0;
  double f = 0;
  bool b = false;
  std::string s;
  std::vector<MetaValue> arr;  // kArray: elements (may themselves be arrays)
};

class Metadata {
 public:
  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const MetaValue* find(const std::string& key) const;
  void set(const std::string& key, MetaValue v) { kv_[key] = std::move(v); }

  // Typed getters throw vi::Error naming the key when it is missing or of another kind.
  // Integers convert to float where a float is asked for.
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;

  std::optional<int64_t> opt_int(const std::string& key) const;
  std::optional<double> opt_float(const std::string& key) const;
  std::optional<bool> opt_bool(const std::string& key) const;
  std::optional<std::string> opt_string(const std::string& key) const;

  const std::map<std::string, MetaValue>& items() const { return kv_; }

  static MetaValue make_int(int64_t v, int gguf_type = -1);
  static MetaValue make_float(double v, int gguf_type = -1);
  static MetaValue make_bool(bool v);
  static MetaValue make_string(std::string v);

 private:
  std::map<std::string, MetaValue> kv_;
};

}  // namespace vi
