// Element and block types. Quantized types are stored as blocks of `block_elems`
// values packed into `block_bytes` bytes, bit-compatible with the GGUF/ggml layouts
// (Q8_0, Q4_0, Q4_1: 32 values; Q4_K, Q5_K, Q6_K: 256-value super-blocks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace vi {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  I8,
  Q8_0,
  Q4_0,
  Q4_1,
  Q4_K,
  Q5_K,
  Q6_K,
  // Device layouts made at load by ops::prepare_matmul_weight (never in a file):
  Q8_0R,  // Q8_0 regrouped by 8 blocks (BlockQ8_0R): aligned 16-byte loads for the GEMV
  kCount
};

struct DTypeInfo {
  const char* name;
  int block_elems;  // values per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;
};

const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
inline bool dtype_is_quantized(DType t) { return dtype_info(t).quantized; }
// Parses "f32", "q4_k", ... (case-insensitive); throws vi::Error on an unknown name.
DType dtype_from_name(std::string_view name);

// Bytes needed for `n` values of type t laid out in one row; throws vi::Error if n is
// not a multiple of the block size.
size_t dtype_row_bytes(DType t, int64_t n);

// ggml block structs (layout facts from the GGUF format, shared by the readers,
// the quantizers and the kernels). fp16 fields are raw IEEE half bits.
constexpr int kQK = 32;   // values per Q8_0/Q4_0/Q4_1 block
constexpr int kQKK = 256;  // values per K-quant super-block

struct BlockQ8_0 {
  uint16_t d;          // scale (fp16)
  int8_t qs[kQK];      // values
};
struct BlockQ4_0 {
  uint16_t d;              // scale (fp16); value = d * (q - 8)
  uint8_t qs[kQK / 2];     // low nibbles: values 0..15, high nibbles: values 16..31
};
struct BlockQ4_1 {
  uint16_t d;              // scale (fp16); value = d * q + m
  uint16_t m;              // min (fp16)
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  uint16_t d;              // super-block scale for the 6-bit scales (fp16)
  uint16_t dmin;           // super-block scale for the 6-bit mins (fp16)
  uint8_t scales[12];      // 8 (scale, min) pairs of 6 bits each
  uint8_t qs[kQKK / 2];    // 4-bit values
};
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];    // high bit of each value
  uint8_t qs[kQKK / 2];    // low 4 bits
};
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];    // low 4 bits
  uint8_t qh[kQKK / 4];    // high 2 bits
  int8_t scales[kQKK / 16];  // 8-bit scales of 16-value groups
  uint16_t d;              // super-block scale (fp16)
};
// Eight Q8_0 blocks of one row with their values first and scales after, so each block's
// 32 values start on a 16-byte boundary; same bytes per row as Q8_0 (row K % 256 == 0).
struct BlockQ8_0R {
  int8_t qs[8 * kQK];  // values of blocks 0..7
  uint16_t d[8];       // their scales (fp16)
};
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_0R) == 8 * sizeof(BlockQ8_0));
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace vi
