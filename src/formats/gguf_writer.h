// GGUF v3 writer. Streams: declare metadata and every tensor (name, dtype, shape), call
// write_header(), then give each tensor's bytes in declared order (whole, or in chunks for
// tensors too big to hold), then finish(). Used by `voltinfer make-model` and the tests.
//
//   GgufWriter w(path);
//   w.set("general.architecture", Metadata::make_string("llama"));
//   w.add_tensor_info("token_embd.weight", DType::Q8_0, {49152, 576});   // PyTorch order
//   w.write_header();
//   w.write_tensor_data(bytes, n);  // as many calls as needed, in order
//   w.finish();
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/metadata.h"
#include "core/tensor.h"

namespace vi::formats {

class DataStream;

class GgufWriter {
 public:
  explicit GgufWriter(const std::string& path, uint32_t alignment = 32);
  ~GgufWriter();

  // Adds or replaces a metadata value. The GGUF type is v.gguf_type when set (>= 0);
  // otherwise ints are written as i32 (i64 if they do not fit), floats as f32, arrays
  // with the element type of their elements. "general.alignment" also sets the alignment.
  void set(const std::string& key, const MetaValue& v);
  void set_all(const Metadata& m);  // every key of m (std::map order)

  // Declares a tensor; shape in PyTorch order, innermost dimension a multiple of the block size.
  void add_tensor_info(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  void add_tensor_info(const Tensor& t) { add_tensor_info(t.name(), t.dtype(), t.shape()); }

  void write_header();
  // Appends bytes of the current tensor (in declared order); padding is inserted between tensors.
  void write_tensor_data(const void* data, size_t nbytes);
  // Writes a whole tensor; it must be the next declared one (same name and size).
  void write_tensor(const Tensor& t);
  // Checks every tensor was written in full and closes the file.
  void finish();

  // One call for small files: metadata, then every tensor (names set) in order.
  static void write_file(const std::string& path, const Metadata& meta,
                         const std::vector<Tensor>& tensors, uint32_t alignment = 32);

 private:
  struct Info {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t offset;
  };
  std::string path_;
  uint32_t alignment_;
  std::vector<std::pair<std::string, MetaValue>> kv_;  // insertion order
  std::vector<Info> tensors_;
  bool header_written_ = false;
  std::unique_ptr<DataStream> out_;
};

}  // namespace vi::formats
