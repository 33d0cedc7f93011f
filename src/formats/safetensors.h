// safetensors reader (single file, or a sharded folder through model.safetensors.index.json)
// and a streaming single-file writer. Reader: header JSON parsed with nlohmann::json,
// tensors become vi::Tensor views into the mapping (dtypes F32, F16, BF16, I32, I8);
// every malformed input throws vi::FormatError naming the file (and tensor).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "formats/mapped_file.h"

namespace vi::formats {

struct SafetensorsFile {
  std::vector<std::string> paths;              // the file, or every shard in load order
  std::map<std::string, std::string> metadata;  // "__metadata__" string values (of the first shard)
  std::vector<Tensor> tensors;                 // sorted by data offset within each file; names set
};

// "F32" <-> DType::F32 etc.; throws vi::Error for an unsupported name.
const char* safetensors_dtype_name(DType t);

SafetensorsFile parse_safetensors(const ByteSource& src);
SafetensorsFile read_safetensors(const std::string& path);
// Reads `<dir>/model.safetensors.index.json` and every shard its weight_map names.
SafetensorsFile read_safetensors_index(const std::string& index_path);

// Writes a model.safetensors.index.json (weight_map: tensor -> shard file name) for shards
// written with SafetensorsWriter; total_size is the sum of tensor bytes, as HF records it.
void write_safetensors_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size);

// Streaming writer, same protocol as GgufWriter: declare, write_header, data in order, finish.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(const std::string& path);
  ~SafetensorsWriter();
  void set_metadata(const std::string& key, const std::string& value);  // "__metadata__"
  void add_tensor_info(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  void add_tensor_info(const Tensor& t) { add_tensor_info(t.name(), t.dtype(), t.shape()); }
  void write_header();
  void write_tensor_data(const void* data, size_t nbytes);
  void write_tensor(const Tensor& t);
  void finish();

  static void write_file(const std::string& path, const std::vector<Tensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

 private:
  struct Info {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    size_t nbytes;
  };
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::vector<Info> tensors_;
  bool header_written_ = false;
  std::unique_ptr<class DataStream> out_;
};

}  // namespace vi::formats
