// Reading hyper-parameters from either a GGUF file ("<arch>.<key>") or a Hugging Face
// config.json flattened to dotted keys ("text_config." first, then the top level).
#pragma once

#include <optional>
#include <string>

#include "core/weights.h"

namespace vi {

class HParamReader {
 public:
  HParamReader(const WeightSource& src, const std::string& arch);

  // gguf_key is relative to the architecture prefix; an empty key means "this format has
  // no such field". get_* throw vi::FormatError naming the file and both keys.
  int64_t get_int(const std::string& gguf_key, const std::string& hf_key) const;
  double get_float(const std::string& gguf_key, const std::string& hf_key) const;
  std::optional<int64_t> opt_int(const std::string& gguf_key, const std::string& hf_key) const;
  std::optional<double> opt_float(const std::string& gguf_key, const std::string& hf_key) const;
  std::optional<bool> opt_bool(const std::string& gguf_key, const std::string& hf_key) const;
  // The resolved metadata key, or "" if absent.
  std::string key(const std::string& gguf_key, const std::string& hf_key) const;

 private:
  const WeightSource& src_;
  std::string prefix_;
};

// Our architecture name: "llama", "qwen2", "qwen3", "qwen3_5" (GGUF "qwen35" and HF
// "qwen3_5_text" map to "qwen3_5"); throws vi::FormatError when the file names none.
std::string model_arch(const WeightSource& src);
// The raw GGUF architecture string (the metadata key prefix), "" for HF files.
std::string gguf_arch(const WeightSource& src);
std::string model_display_name(const WeightSource& src);

}  // namespace vi
