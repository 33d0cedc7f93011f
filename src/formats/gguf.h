// GGUF (llama.cpp model file, versions 2 and 3) reader over a memory mapping or a buffer.
// Metadata goes into vi::Metadata (each value keeps its GGUF type code for writers);
// tensors become vi::Tensor views into the mapping with PyTorch-order shapes (GGUF's ne
// reversed). Every malformed input throws vi::FormatError naming the file (and tensor).
// The writer lives in gguf_writer.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/metadata.h"
#include "core/tensor.h"
#include "formats/mapped_file.h"

namespace vi::formats {

// GGUF metadata value type codes (gguf_type in vi::MetaValue).
// For a kArray MetaValue read from GGUF, MetaValue::i holds the element type code, so that
// empty arrays also round-trip with their type.
enum GgufType : int {
  kGgufU8 = 0,
  kGgufI8 = 1,
  kGgufU16 = 2,
  kGgufI16 = 3,
  kGgufU32 = 4,
  kGgufI32 = 5,
  kGgufF32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufU64 = 10,
  kGgufI64 = 11,
  kGgufF64 = 12,
};
const char* gguf_type_name(int t);

// ggml tensor type ids <-> vi::DType (F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 8, Q4_K 12,
// Q5_K 13, Q6_K 14, I8 24, I32 26, BF16 30).
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
uint32_t ggml_from_dtype(DType t);
const char* ggml_type_name(uint32_t ggml_type);  // "q5_1", ... or "unknown"

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufFile {
  std::string path;
  uint32_t version = 0;
  uint32_t alignment = kGgufDefaultAlignment;  // general.alignment or 32
  size_t data_offset = 0;                      // start of the tensor data section
  Metadata meta;
  std::vector<std::string> key_order;  // metadata keys in file order
  std::vector<Tensor> tensors;         // file order, names set; views into the source
};

// Parses a GGUF file held in `src`. Uint64 values above INT64_MAX are stored as their
// two's-complement int64 bits (gguf_type tells them apart).
GgufFile parse_gguf(const ByteSource& src);
// Maps `path` and parses it; the tensors keep the mapping alive.
GgufFile read_gguf(const std::string& path);

}  // namespace vi::formats
