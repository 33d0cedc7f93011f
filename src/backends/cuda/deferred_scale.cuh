// A deferred norm's scale of one token on the GPU (ops/deferred_norm.h): s = unit · rsqrt(Σx² / d +
// eps) from the token's fixed-point totals, as every Q4_KT consumer computes it (the same bits in
// each, so a GEMV's outputs do not depend on which kernel form consumed the norm).
#pragma once

#include "ops/deferred_norm.h"

namespace vi::cuda {

// a, b: the token's kDeferredNormSlots (fine, coarse) u64 pairs as two 16-byte words each
// ((lo, hi) of fine, then of coarse).
__device__ __forceinline__ float deferred_norm_scale(uint4 a, uint4 b, float inv_d, float eps) {
  auto u64 = [](uint32_t lo, uint32_t hi) { return static_cast<unsigned long long>(hi) << 32 | lo; };
  const unsigned long long fine = u64(a.x, a.y) + u64(b.x, b.y), coarse = u64(a.z, a.w) + u64(b.z, b.w);
  const float total = __ull2float_rn(fine) * (1.0f / ops::kDeferredNormFineScale) +
                      __ull2float_rn(coarse) * (1.0f / ops::kDeferredNormCoarseScale);
  return ops::kDeferredNormUnit * rsqrtf(total * inv_d + eps);
}

}  // namespace vi::cuda
