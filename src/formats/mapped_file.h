// Read-only memory mapping of a whole file, plus the byte-range type the format readers
// parse from (a mapping, or a caller's buffer — the fuzz targets parse from memory).
// Tensors read from a file keep their MappedFile alive through Tensor::owner().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace vi::formats {

class MappedFile {
 public:
  // Maps `path` read-only; throws vi::FormatError naming the file if it cannot be opened.
  // An empty file maps to data() == nullptr, size() == 0.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// A byte range to parse. `owner` keeps the bytes alive and becomes the owner of every
// tensor view into them (may be null when the caller guarantees the lifetime, e.g. fuzzing).
// `name` is what error messages call the input (the file path).
struct ByteSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;
  std::string name;
};

ByteSource source_from_file(const std::string& path);

}  // namespace vi::formats
