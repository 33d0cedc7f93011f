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
  Q4_KR,  // Q4_K regrouped by 4 super-blocks (BlockQ4_KR): nibbles in mma fragment order
  Q4_KT,  // Q4_KR regrouped by 16-row tiles (kQ4ktUnitBytes per tile and super-block): rows
          // are not addressable one by one, only whole tiles (row slices at multiples of 16)
  Q8_0T,  // Q8_0R regrouped by 16-row tiles (kQ8tUnitBytes per tile and 128 values), likewise
  Q4_KI,  // Q4_K in 16-row tiles for the int8-activation GEMV (kQ4ktUnitBytes per tile and
          // super-block, arranged for mma.m16n8k32), likewise whole tiles only
  Q4_KTS,  // a stacked SwiGLU gate|up [2F, K] in Q4_KT units whose tiles pair gate and up rows
           // (below): no row slices at all, only the whole matrix
  // Activations, made on the device by the ops that write a GEMV's input (never in a file):
  Q8_KX,  // int8 activations in 256-value blocks (BlockQ8_KX) for the Q4_KI GEMV
  I64,    // 64-bit integers (the deferred norm's fixed-point sums, ops/deferred_norm.h)
  kCount
};

struct DTypeInfo {
  const char* name;
  int block_elems;  // values per block (1 for plain types)
  int block_bytes;  // bytes per block
  bool quantized;
  int row_tile = 1;  // rows stored together (row slices begin and end at multiples of it; 0: the
                     // rows are not stored in order, so only the whole matrix is a view)
};

const DTypeInfo& dtype_info(DType t);
inline const char* dtype_name(DType t) { return dtype_info(t).name; }
inline bool dtype_is_quantized(DType t) { return dtype_info(t).quantized; }
// Parses "f32", "q4_k", ... (case-insensitive); throws vi::Error on an unknown name.
DType dtype_from_name(std::string_view name);

// The file dtype a device layout is made from (Q8_0R and Q8_0T: Q8_0, Q4_KR, Q4_KT, Q4_KI and
// Q4_KTS: Q4_K); t itself otherwise.
DType dtype_file_form(DType t);

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
// Four Q4_K super-blocks of one row (1024 values) for the tensor-core GEMV, 4 bytes more per
// super-block than Q4_K (148 instead of 144: 8-bit scales and mins instead of the 6-bit
// packing, whose unpacking cost the GEMV more than the bytes). value = d·sc·q − dmin·m as in
// Q4_K, with the same d, dmin, sc, m and q.
//   qs: super-block b (0..3), sub-block j (0..7) at byte 128b + 16j: word i (0..3, 32 bits)
//       holds values 8i .. 8i+7 of the sub-block, value 8i + p in nibble (p >> 1) + 4 (p & 1)
//       (bits 4n .. 4n+3), so masking the word (and the word shifted by 8) with 0x000F000F /
//       0x00F000F0 gives value pairs (0,1), (2,3), (4,5), (6,7) as f16 halves under 0x6400.
//   sm: super-block b's sc[0..3], m[0..3], sc[4..7], m[4..7] (bytes), 16-byte aligned so the
//       GEMV reads a row's scales and mins of a super-block with one 16-byte load (in 20-byte
//       per-super-block headers with d and dmin they took five 4-byte loads, each of which
//       touches the cache lines of 8 rows per warp).
//   dm: super-block b's d, dmin (fp16 bits).
struct BlockQ4_KR {
  uint8_t qs[4 * kQKK / 2];
  uint8_t sm[4][16];
  uint16_t dm[4][2];
};
static_assert(sizeof(BlockQ4_KR) == 4 * 148);
// Q4_KT: a Q4_KR matrix [N, K] (N % 16 == 0) regrouped so that the bytes one warp of the decode
// GEMV loads for a 16-row tile and one super-block are contiguous, in the order of its lanes
// (lane L = 4g + c: rows g and g + 8, sub-blocks c and 4 + c). Units [N / 16][K / 256], each:
//   [0, 2048)     load k (0..3) of lane L at 512k + 16L: the 16 bytes of BlockQ4_KR qs of row
//                 g + 8 (k & 1), sub-block 4 (k >> 1) + c (four words of 8 values, as in Q4_KR);
//   [2048, 2304)  lane L's 8 bytes at 2048 + 8L: for row g, then row g + 8, the word
//                 (sc, m of sub-block c; sc, m of sub-block 4 + c), one byte each;
//   [2304, 2368)  (d, dmin) of rows g and g + 8 (fp16 bits) at 2304 + 8g.
// 148 bytes per 256 values, as Q4_KR; the rows of a tile are 16 x (K / 256) x 148 bytes on.
// Q4_KTS: a stacked gate|up [2F, K] (F % 8 == 0; rows 0..F-1 gate, F..2F-1 up) in Q4_KT units
// [F / 8][K / 256] where tile t holds gate rows 8t..8t+7 as its rows 0..7 and up rows
// F+8t..F+8t+7 as its rows 8..15, so that the fused gate|up + SwiGLU GEMV reads each block's
// gate and up rows as one contiguous unit (in Q4_KT they are two half units F·K·148/256 bytes
// apart). Logical row r of the matrix is still gate or up row r, but no row slice is a view: the
// ops read it whole (matmul_swiglu, matmul) or by its two halves (matmul_split).
constexpr int kTiledRows = 16;  // the rows of a tile of the tiled layouts (Q4_KT, Q8_0T)
constexpr int kQ4ktUnitBytes = 16 * 148;
// Q8_0T: a Q8_0R matrix [N, K] (N % 16 == 0, K % 128 == 0) regrouped the same way for the step
// GEMV of gemv_mma.cu, whose lane (g, c) reads block c of each 128 values of rows g and g + 8.
// Units [N / 16][K / 128], each:
//   [0, 2048)     load k (0..3) of lane L at 512k + 16L: bytes 16 (k >> 1) .. + 15 of the 32
//                 int8 values of block c of row g + 8 (k & 1);
//   [2048, 2176)  lane L's 4 bytes at 2048 + 4L: the scales d (fp16 bits) of block c of rows g
//                 and g + 8.
// 34 bytes per 32 values, as Q8_0.
constexpr int kQ8tUnitBytes = 16 * 4 * 34;
// Q4_KI: a Q4_K matrix [N, K] (N % 16 == 0) in 16-row tiles for the int8-activation GEMV
// (gemv_q4ki.cu), whose mma.m16n8k32 multiplies one 32-value sub-block of 16 rows at a time:
// lane L = 4g + c holds values 4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3 of every sub-block of
// rows g and g + 8. Word W(r, p, h) (p = 0..3, h = 0, 1) of row r: byte j holds value
// 16h + 4c + j of sub-block p in its low nibble and of sub-block p + 4 in its high nibble, so
// masking the word with 0x0F0F0F0F gives four of sub-block p's values as u8 and with 0xF0F0F0F0
// four of sub-block p + 4's, times 16. Units [N / 16][K / 256], each:
//   [0, 2048)     load k (0..3) of lane L at 512k + 16L: for row g + 8 (k & 1) and p = 2 (k >> 1),
//                 the words W(r, p, 0), W(r, p, 1), W(r, p + 1, 0), W(r, p + 1, 1);
//   [2048, 2304)  row r (0..15) at 2048 + 16r: its 8 scales sc, then its 8 mins m (bytes);
//   [2304, 2368)  (d, dmin) of rows g and g + 8 (fp16 bits) at 2304 + 8g.
// 148 bytes per 256 values, as Q4_KT. value = d·sc·q − dmin·m as in Q4_K.
static_assert(kQ4ktUnitBytes == 2368);
// Q8_KX: 256 activations of one token as int8 for the Q4_KI GEMV: x ≈ d·q with d = max|x| / 127
// and q = round(x / d); each sub-block's integer sum s = Σ q (|s| ≤ 4064) split into s_hi (a
// multiple of 32) + s_lo (0..31), both exact in fp16, so one f16 mma makes Σ m·s exactly.
//   qs: lane c (= L % 4) of the GEMV reads 64 bytes at 64c: for p = 0..3 at 64c + 16p, values
//       4c .. 4c + 3 and 16 + 4c .. 16 + 4c + 3 of sub-block p, then the same of sub-block p + 4;
//   s:  at 4c (halves): s_hi of sub-blocks 2c, 2c + 1, then s_lo of both (fp16 bits);
//   d:  the scale (f32).
struct BlockQ8_KX {
  int8_t qs[kQKK];
  uint16_t s[16];
  float d;
  uint8_t pad[12];  // 16-byte blocks
};
static_assert(sizeof(BlockQ8_KX) == 304);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_0R) == 8 * sizeof(BlockQ8_0));
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace vi
