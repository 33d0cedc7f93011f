// Internal to formats/: streams tensor data to a file in declared order, for the GGUF and
// safetensors writers. A caller declares every tensor first (so the header can be written),
// then hands over each tensor's bytes in order, whole or in chunks, so a model larger
// than RAM can be written one slice at a time.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace vi::formats {

class DataStream {
 public:
  DataStream(std::string path, size_t alignment);  // opens (truncates) the file
  ~DataStream();
  DataStream(const DataStream&) = delete;
  DataStream& operator=(const DataStream&) = delete;

  // Declares a tensor; returns its offset from the start of the data section.
  size_t declare(const std::string& name, size_t nbytes);
  size_t count() const { return items_.size(); }

  void write_raw(const void* p, size_t n);  // header bytes
  void pad_to(size_t alignment);            // zero bytes up to the next multiple (file offset)

  // Appends bytes of the current tensor; moves to the next one (padding first) when full.
  void write_data(const void* p, size_t n);
  // Checks the next tensor to receive data is `name` and that nothing of it is written yet.
  void expect_next(const std::string& name, size_t nbytes);
  // Throws unless every declared tensor was written in full; flushes and closes.
  void finish();

  const std::string& path() const { return path_; }

 private:
  void advance();  // skips finished (and zero-byte) tensors
  struct Item {
    std::string name;
    size_t nbytes;
    size_t offset;
  };
  std::string path_;
  size_t alignment_;
  std::FILE* f_ = nullptr;
  size_t file_pos_ = 0;
  size_t data_start_ = 0;  // file offset of the data section (set by the first data write)
  bool data_started_ = false;
  std::vector<Item> items_;
  size_t data_end_ = 0;  // end of the last declared tensor, relative to the data section
  size_t cur_ = 0;       // index of the tensor receiving data
  size_t cur_written_ = 0;
};

}  // namespace vi::formats
