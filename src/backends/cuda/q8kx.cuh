// Writing Q8_KX activation blocks (core/dtype.h) from a warp: shared by the quantize kernel of
// gemv_q4ki.cu and the norm kernels that write a Q4_KI GEMV's input directly (norm.cu).
#pragma once

#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace vi::cuda {

constexpr int kQ8kxSumOff = static_cast<int>(offsetof(BlockQ8_KX, s));
constexpr int kQ8kxScaleOff = static_cast<int>(offsetof(BlockQ8_KX, d));
static_assert(kQ8kxSumOff == 256 && kQ8kxScaleOff == 288, "BlockQ8_KX offsets the kernels use");

// Lane L (all 32 lanes call it) holds values 8L .. 8L + 7 of a 256-value block (sub-block L / 4),
// as the activation dtype stores them; writes the block (blk 16-byte aligned): d = max|v| / 127,
// q = round-to-nearest-even(v · 127 / max|v|), the sub-block sums in two exact f16 parts. Equals
// core/quant.cpp's quantize_row(Q8_KX) bit for bit.
__device__ __forceinline__ void quantize_warp_q8kx(const float v[8], uint8_t* blk, int lane) {
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = amax / 127.0f, inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t words[2] = {0, 0};
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int q = max(-127, min(127, __float2int_rn(v[j] * inv)));
    sum += q;
    words[j >> 2] |= (uint32_t(q) & 0xFFu) << (8 * (j & 3));
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  const int s = lane >> 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {  // values j0 .. j0 + 3 of sub-block s go where GEMV lane c = (j0 % 16) / 4 reads them
    const int j0 = 8 * (lane & 3) + 4 * i, h = j0 >> 4, c = (j0 & 15) >> 2;
    *reinterpret_cast<uint32_t*>(blk + 64 * c + 16 * (s & 3) + 4 * (2 * (s >> 2) + h)) = words[i];
  }
  if ((lane & 3) == 0) {  // the sum as a multiple of 32 plus 0..31
    const int hi = sum & ~31, lo = sum - hi;
    __half* sums = reinterpret_cast<__half*>(blk + kQ8kxSumOff);
    sums[4 * (s >> 1) + (s & 1)] = __int2half_rn(hi);
    sums[4 * (s >> 1) + 2 + (s & 1)] = __int2half_rn(lo);
  }
  if (lane == 0) *reinterpret_cast<uint4*>(blk + kQ8kxScaleOff) = make_uint4(__float_as_uint(d), 0u, 0u, 0u);
}

}  // namespace vi::cuda
