// The bit steps the Q4_KR GEMVs (gemv_q4kr.cu, gemv_q4kr_volta.cu) share to turn a word of
// packed nibbles into f16 pairs (core/dtype.h, BlockQ4_KR: masking the word with 0x000F000F or
// 0x00F000F0 and putting 0x6400 above gives 1024 + q or 1024 + 16q as an f16 pair).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace vi::cuda {

// Byte offsets in a BlockQ4_KR (1024 values of a row): its scales and mins, its d and dmin.
constexpr int kQ4krSmOff = static_cast<int>(offsetof(BlockQ4_KR, sm));
constexpr int kQ4krDmOff = static_cast<int>(offsetof(BlockQ4_KR, dm));
constexpr int kQ4krBlkBytes = static_cast<int>(sizeof(BlockQ4_KR));
static_assert(kQ4krSmOff % 16 == 0, "one 16-byte load per super-block's scales and mins");

// f16 0x64XX = 1024 + XX: the exponent both halves of a pair get.
constexpr uint32_t kQ4krMagic = 0x64006400u;

// Word i (0..3) of a 16-byte load.
__device__ __forceinline__ uint32_t word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// (v & MASK) | magic as one LOP3 (lut 0xEA = (a & b) | c). Written in C++ the compiler emits
// two LOP3s, since an instruction holds one immediate; here magic comes in a register.
template <uint32_t MASK>
__device__ __forceinline__ uint32_t and_or(uint32_t v, uint32_t magic) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(v), "n"(MASK), "r"(magic));
  return r;
}

}  // namespace vi::cuda
