// The one entry point the engine uses to open model weights: a .gguf file, a .safetensors
// file, or a Hugging Face folder (config.json + model.safetensors, sharded or not).
// Tensors are views into memory-mapped files, kept alive by their owners; the original
// file format does not leak past this header except through `format`.
#pragma once

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/metadata.h"
#include "core/tensor.h"

namespace vi::formats {

enum class FileFormat { kGguf, kSafetensors };
const char* file_format_name(FileFormat f);

// Called with (bytes done, bytes total) while the weights are paged in.
using LoadProgress = std::function<void(size_t done, size_t total)>;

struct ModelFile {
  FileFormat format = FileFormat::kGguf;
  std::string path;                 // what was opened (file or folder)
  std::vector<std::string> files;   // the weight files actually mapped
  Metadata meta;                    // GGUF key/values; empty for safetensors
  nlohmann::json config;            // HF config.json; null for GGUF (and a bare .safetensors file)
  std::map<std::string, Tensor> tensors;  // name -> view (names set)

  bool has(const std::string& name) const { return tensors.count(name) != 0; }
  // Throws vi::FormatError naming the file and the tensor when it is missing.
  const Tensor& get(const std::string& name) const;
  // get() plus a shape check (PyTorch order); the error names expected and actual shapes.
  const Tensor& require(const std::string& name, const std::vector<int64_t>& shape) const;
  size_t total_bytes() const;
};

// Opens `path`. With `prefault`, every page of tensor data is read once (so the first
// forward pass does not stall on disk) and `progress` is called as bytes are touched.
ModelFile open_model_file(const std::string& path, const LoadProgress& progress = nullptr,
                          bool prefault = true);

}  // namespace vi::formats

namespace vi {
using formats::FileFormat;
using formats::ModelFile;
using formats::open_model_file;
}  // namespace vi
