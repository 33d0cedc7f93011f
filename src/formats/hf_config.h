// Hugging Face config.json loading and field lookup. Multimodal checkpoints (Qwen3.5)
// nest the language model's settings under "text_config"; hf_find looks there first,
// then at the top level, so callers read one field name for both layouts.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace vi::formats {

// Loads `path` (a config.json file, or a folder holding one). Throws vi::FormatError naming
// the file if it is missing, not JSON, or not a JSON object.
nlohmann::json load_hf_config(const std::string& path);

// The value of `key` in cfg["text_config"] if present there, else in cfg; null if absent.
const nlohmann::json* hf_find(const nlohmann::json& cfg, const std::string& key);

// Typed lookup; throws vi::FormatError naming `where` (the file) and the key when the field is
// missing or has another type.
template <class T>
T hf_get(const nlohmann::json& cfg, const std::string& key, const std::string& where = "config.json") {
  const nlohmann::json* v = hf_find(cfg, key);
  if (!v || v->is_null())
    throw FormatError(fmt::format("{}: field '{}' is missing (looked in text_config and top level)", where, key));
  // nlohmann would silently truncate 1e-6 to an integer 0; a wrong type is an error here.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!v->is_number_integer())
      throw FormatError(fmt::format("{}: field '{}' is a {}, expected an integer", where, key, v->type_name()));
  }
  try {
    return v->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw FormatError(fmt::format("{}: field '{}' has the wrong type ({})", where, key, v->type_name()));
  }
}

template <class T>
std::optional<T> hf_opt(const nlohmann::json& cfg, const std::string& key, const std::string& where = "config.json") {
  const nlohmann::json* v = hf_find(cfg, key);
  if (!v || v->is_null()) return std::nullopt;
  return hf_get<T>(cfg, key, where);
}

}  // namespace vi::formats
