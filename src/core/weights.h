// WeightSource: the format-neutral view of a model file that models/ loads from.
// formats/ implements it for GGUF files and Hugging Face safetensors folders, so that
// models never depend on a file format (DESIGN.md: the original format never leaks
// past formats/ — except through the names and metadata keys a model chooses to read).
#pragma once

#include <string>
#include <vector>

#include "core/metadata.h"
#include "core/tensor.h"

namespace vi {

enum class WeightFormat : uint8_t { kGguf, kSafetensors };

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual const std::string& path() const = 0;
  virtual WeightFormat format() const = 0;
  // GGUF: the file's KV pairs. Hugging Face: config.json flattened to dotted keys
  // ("hidden_size", "text_config.hidden_size", "rope_parameters.rope_theta", ...).
  virtual const Metadata& metadata() const = 0;
  virtual bool has(const std::string& name) const = 0;
  // Throws vi::FormatError naming the file and the tensor when it is missing.
  virtual const Tensor& get(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;

  // get() plus a shape check; the error names file, tensor, expected and actual shape.
  const Tensor& require(const std::string& name, const std::vector<int64_t>& shape) const;
};

}  // namespace vi
