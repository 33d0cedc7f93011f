// Device-side decoding of one weight value from a row of any weight dtype (F32, F16, BF16,
// the ggml blocks Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, and the device layouts Q8_0R and Q4_KR
// that ops::prepare_matmul_weight makes; layouts in core/dtype.h and the reference dequantizers
// in core/quant.cpp). Shared by embedding and matmul.
#pragma once

#include <type_traits>

#include "backends/cuda/cuda_util.cuh"
#include "core/dtype.h"

namespace vi::cuda {

__device__ __forceinline__ void k4_scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Value i of a row of type W starting at `row` (i counts values, not bytes).
template <DType W>
__device__ __forceinline__ float dq(const uint8_t* row, int64_t i) {
  if constexpr (W == DType::F32) {
    return reinterpret_cast<const float*>(row)[i];
  } else if constexpr (W == DType::F16) {
    return half_bits_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else if constexpr (W == DType::BF16) {
    return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[i]) << 16);
  } else if constexpr (W == DType::Q8_0) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + i / kQK;
    return half_bits_to_f32(b->d) * static_cast<float>(b->qs[i % kQK]);
  } else if constexpr (W == DType::Q8_0R) {
    const BlockQ8_0R* b = reinterpret_cast<const BlockQ8_0R*>(row) + i / (8 * kQK);
    const int v = static_cast<int>(i % (8 * kQK));
    return half_bits_to_f32(b->d[v / kQK]) * static_cast<float>(b->qs[v]);
  } else if constexpr (W == DType::Q4_KR) {
    const BlockQ4_KR* b = reinterpret_cast<const BlockQ4_KR*>(row) + i / (4 * kQKK);
    const int v = static_cast<int>(i % (4 * kQKK)), sb = v / kQKK, j = (v % kQKK) / 32, l = v % 32;
    const int p = l % 8, n = (p >> 1) + 4 * (p & 1);  // the value's nibble in its word
    const uint8_t byte = b->qs[128 * sb + 16 * j + 4 * (l / 8) + n / 2];
    const int q = (byte >> (4 * (n & 1))) & 0xF;
    const uint8_t* sm = b->sm[sb];
    const int sc = sm[8 * (j / 4) + j % 4], m = sm[8 * (j / 4) + 4 + j % 4];
    return half_bits_to_f32(b->dm[sb][0]) * static_cast<float>(sc) * static_cast<float>(q) -
           half_bits_to_f32(b->dm[sb][1]) * static_cast<float>(m);
  } else if constexpr (W == DType::Q4_0) {
    const BlockQ4_0* b = reinterpret_cast<const BlockQ4_0*>(row) + i / kQK;
    const int l = static_cast<int>(i % kQK);
    const int q = l < 16 ? (b->qs[l] & 0xF) : (b->qs[l - 16] >> 4);
    return half_bits_to_f32(b->d) * static_cast<float>(q - 8);
  } else if constexpr (W == DType::Q4_1) {
    const BlockQ4_1* b = reinterpret_cast<const BlockQ4_1*>(row) + i / kQK;
    const int l = static_cast<int>(i % kQK);
    const int q = l < 16 ? (b->qs[l] & 0xF) : (b->qs[l - 16] >> 4);
    return static_cast<float>(q) * half_bits_to_f32(b->d) + half_bits_to_f32(b->m);
  } else if constexpr (W == DType::Q4_K || W == DType::Q5_K) {
    using B = std::conditional_t<W == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
    const B* b = reinterpret_cast<const B*>(row) + i / kQKK;
    const int v = static_cast<int>(i % kQKK), j = v / 32, l = v % 32;
    int sc, m;
    k4_scale_min(j, b->scales, sc, m);
    int q = (b->qs[32 * (j / 2) + l] >> ((j % 2) * 4)) & 0xF;
    if constexpr (W == DType::Q5_K) q |= ((b->qh[l] >> j) & 1) << 4;
    return half_bits_to_f32(b->d) * static_cast<float>(sc) * static_cast<float>(q) -
           half_bits_to_f32(b->dmin) * static_cast<float>(m);
  } else {
    static_assert(W == DType::Q6_K, "no device decoder for this dtype");
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + i / kQKK;
    const int v = static_cast<int>(i % kQKK), n = v / 128, k = (v % 128) / 32, l = v % 32;
    const int lo = (b->ql[64 * n + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
    const int hi = (b->qh[32 * n + l] >> (2 * k)) & 3;
    return half_bits_to_f32(b->d) * static_cast<float>(b->scales[v / 16]) * static_cast<float>((lo | (hi << 4)) - 32);
  }
}


// Eight bytes at p, whose address is a multiple of A (2, 4 or 8), in as few loads as that
// allows (the ggml blocks of 18, 20, 34 and 210 bytes only keep their runs 2- or 4-aligned).
template <int A>
__device__ __forceinline__ uint2 load8(const uint8_t* p) {
  if constexpr (A >= 8) {
    return *reinterpret_cast<const uint2*>(p);
  } else if constexpr (A == 4) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
    return make_uint2(q[0], q[1]);
  } else {
    static_assert(A == 2, "load8: alignment 2, 4 or 8");
    const uint16_t* q = reinterpret_cast<const uint16_t*>(p);
    return make_uint2(q[0] | (uint32_t(q[1]) << 16), q[2] | (uint32_t(q[3]) << 16));
  }
}
__device__ __forceinline__ int byte_of(uint2 v, int k) { return ((k < 4 ? v.x : v.y) >> (8 * (k & 3))) & 0xFF; }

// Values i0 .. i0+7 of a row (i0 a multiple of 8, so all eight share one block and one
// scale group): the block header and scales are decoded once for the eight. STREAM: the quant
// words of the GEMV layouts (Q8_0R, Q4_KR) are loaded evict-first (read once: they should not
// push the activations out of L1); the same values.
template <DType W, bool STREAM = false>
__device__ __forceinline__ void dq8(const uint8_t* row, int64_t i0, float* out) {
  if constexpr (W == DType::F32 || W == DType::F16 || W == DType::BF16) {
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = dq<W>(row, i0 + k);
  } else if constexpr (W == DType::Q8_0) {
    const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row) + i0 / kQK;
    const int l0 = static_cast<int>(i0 % kQK);
    const float d = half_bits_to_f32(b->d);
    const uint2 q = load8<2>(reinterpret_cast<const uint8_t*>(b->qs) + l0);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>(static_cast<int8_t>(byte_of(q, k)));
  } else if constexpr (W == DType::Q8_0R) {
    const BlockQ8_0R* b = reinterpret_cast<const BlockQ8_0R*>(row) + i0 / (8 * kQK);
    const int v0 = static_cast<int>(i0 % (8 * kQK));
    const float d = half_bits_to_f32(b->d[v0 / kQK]);
    // Eight int8 values on an 8-byte boundary: one load; converted without I2F (s8_biased_to_f32,
    // exact, so out[k] is d * q[k] bit for bit; H200, volta profile: the Q8_0R GEMVs 3-6% faster
    // at one token, the same at four; docs/PERFORMANCE.md).
    const int2* pq = reinterpret_cast<const int2*>(b->qs + v0);
    const int2 q = STREAM ? __ldcs(pq) : *pq;
    const uint32_t w[2] = {static_cast<uint32_t>(q.x) ^ 0x80808080u, static_cast<uint32_t>(q.y) ^ 0x80808080u};
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = d * s8_biased_to_f32(w[k >> 2], k & 3);
  } else if constexpr (W == DType::Q4_KR) {
    // Eight values = one aligned 32-bit word.
    const BlockQ4_KR* b = reinterpret_cast<const BlockQ4_KR*>(row) + i0 / (4 * kQKK);
    const int v0 = static_cast<int>(i0 % (4 * kQKK)), sb = v0 / kQKK, j = (v0 % kQKK) / 32, i = (v0 % 32) / 8;
    const uint32_t* pq = reinterpret_cast<const uint32_t*>(b->qs + 128 * sb + 16 * j + 4 * i);
    const uint32_t wq = STREAM ? __ldcs(pq) : *pq;
    const uint8_t* sm = b->sm[sb];
    const float dl = half_bits_to_f32(b->dm[sb][0]) * static_cast<float>(sm[8 * (j / 4) + j % 4]);
    const float ml = half_bits_to_f32(b->dm[sb][1]) * static_cast<float>(sm[8 * (j / 4) + 4 + j % 4]);
#pragma unroll
    for (int k = 0; k < 8; ++k) out[k] = dl * static_cast<float>((wq >> (4 * ((k >> 1) + 4 * (k & 1)))) & 0xF) - ml;
  } else if constexpr (W == DType::Q4_0 || W == DType::Q4_1) {
    using B = std::conditional_t<W == DType::Q4_0, BlockQ4_0, BlockQ4_1>;
    const B* b = reinterpret_cast<const B*>(row) + i0 / kQK;
    const int l0 = static_cast<int>(i0 % kQK);
    const float d = half_bits_to_f32(b->d);
    const uint2 q = load8<W == DType::Q4_0 ? 2 : 4>(b->qs + (l0 < 16 ? l0 : l0 - 16));
    const int shift = l0 < 16 ? 0 : 4;
    float m = -8.0f * d;
    if constexpr (W == DType::Q4_1) m = half_bits_to_f32(b->m);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const float qv = static_cast<float>((byte_of(q, k) >> shift) & 0xF);
      if constexpr (W == DType::Q4_1) out[k] = qv * d + m;
      else out[k] = d * (qv - 8.0f);
    }
  } else if constexpr (W == DType::Q4_K || W == DType::Q5_K) {
    using B = std::conditional_t<W == DType::Q4_K, BlockQ4_K, BlockQ5_K>;
    const B* b = reinterpret_cast<const B*>(row) + i0 / kQKK;
    const int v0 = static_cast<int>(i0 % kQKK), j = v0 / 32, l0 = v0 % 32;
    int sc, m;
    k4_scale_min(j, b->scales, sc, m);
    const float dl = half_bits_to_f32(b->d) * static_cast<float>(sc);
    const float ml = half_bits_to_f32(b->dmin) * static_cast<float>(m);
    const uint2 q = load8<8>(b->qs + 32 * (j / 2) + l0);
    uint2 qh = make_uint2(0, 0);
    if constexpr (W == DType::Q5_K) qh = load8<8>(b->qh + l0);
    const int shift = (j % 2) * 4;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      int qv = (byte_of(q, k) >> shift) & 0xF;
      if constexpr (W == DType::Q5_K) qv |= ((byte_of(qh, k) >> j) & 1) << 4;
      out[k] = dl * static_cast<float>(qv) - ml;
    }
  } else {
    const BlockQ6_K* b = reinterpret_cast<const BlockQ6_K*>(row) + i0 / kQKK;
    const int v0 = static_cast<int>(i0 % kQKK), n = v0 / 128, kk = (v0 % 128) / 32, l0 = v0 % 32;
    const float dl = half_bits_to_f32(b->d) * static_cast<float>(b->scales[v0 / 16]);
    const uint2 ql = load8<2>(b->ql + 64 * n + l0 + 32 * (kk & 1));
    const uint2 qh = load8<2>(b->qh + 32 * n + l0);
    const int lshift = 4 * (kk >> 1), hshift = 2 * kk;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int qv = ((byte_of(ql, k) >> lshift) & 0xF) | (((byte_of(qh, k) >> hshift) & 3) << 4);
      out[k] = dl * static_cast<float>(qv - 32);
    }
  }
}

// Calls f(std::integral_constant<DType, W>{}) for a weight dtype with a device decoder.
// Values k0 .. k0 + 7 (k0 % 8 == 0) of row r of a Q4_KT matrix w (core/dtype.h; n_sb
// super-blocks per row), as dq8<Q4_KR> decodes them from the row layout. Q4_KT rows are not
// addressable by a row pointer, so it is not one of the row-wise weight dtypes below.
__device__ __forceinline__ void dq8_q4kt(const uint8_t* w, int64_t n_sb, int64_t r, int64_t k0, float out[8]) {
  const int rr = static_cast<int>(r % 16), g = rr % 8, hi = rr / 8;
  const int v = static_cast<int>(k0 % kQKK), j = v / 32, h = j / 4, c = j % 4, i = (v % 32) / 8;
  const uint8_t* u = w + ((r / 16) * n_sb + k0 / kQKK) * kQ4ktUnitBytes;
  const int lane = 4 * g + c;
  const uint32_t wq = *reinterpret_cast<const uint32_t*>(u + 512 * (2 * h + hi) + 16 * lane + 4 * i);
  const uint32_t sw = *reinterpret_cast<const uint32_t*>(u + 2048 + 8 * lane + 4 * hi);
  const uint32_t dd = *reinterpret_cast<const uint32_t*>(u + 2304 + 8 * g + 4 * hi);
  const float dl = half_bits_to_f32(static_cast<uint16_t>(dd & 0xFFFF)) * static_cast<float>((sw >> (16 * h)) & 0xFF);
  const float ml = half_bits_to_f32(static_cast<uint16_t>(dd >> 16)) * static_cast<float>((sw >> (16 * h + 8)) & 0xFF);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = dl * static_cast<float>((wq >> (4 * ((k >> 1) + 4 * (k & 1)))) & 0xF) - ml;
}

// The same of logical row r of a Q4_KTS stacked gate|up [2F, K] (core/dtype.h): gate row r < F is
// row r % 8 of tile r / 8, up row F + i row 8 + i % 8 of tile i / 8.
__device__ __forceinline__ void dq8_q4kts(const uint8_t* w, int64_t n_sb, int64_t F, int64_t r, int64_t k0,
                                          float out[8]) {
  const int64_t i = r < F ? r : r - F;
  dq8_q4kt(w, n_sb, 16 * (i / 8) + (r < F ? 0 : 8) + i % 8, k0, out);
}

// Values k0 .. k0 + 7 (k0 % 8 == 0) of row r of a Q4_KI matrix w (core/dtype.h; n_sb
// super-blocks per row): d·sc·q − dmin·m of Q4_K, from the words of lanes 4g + c and 4g + c + 1.
__device__ __forceinline__ void dq8_q4ki(const uint8_t* w, int64_t n_sb, int64_t r, int64_t k0, float out[8]) {
  const int rr = static_cast<int>(r % 16), g = rr % 8, hi = rr / 8;
  const int v = static_cast<int>(k0 % kQKK), j = v / 32, vv = v % 32, p = j & 3, h = vv >> 4;
  const int c0 = (vv & 15) >> 2, shift = 4 * (j >> 2);
  const uint8_t* u = w + ((r / 16) * n_sb + k0 / kQKK) * kQ4ktUnitBytes;
  const uint8_t* words = u + 512 * (2 * (p >> 1) + hi) + 4 * (2 * (p & 1) + h);
  const uint8_t* sm = u + 2048 + 16 * rr;
  const uint32_t dd = *reinterpret_cast<const uint32_t*>(u + 2304 + 8 * g + 4 * hi);
  const float dl = half_bits_to_f32(static_cast<uint16_t>(dd & 0xFFFF)) * static_cast<float>(sm[j]);
  const float ml = half_bits_to_f32(static_cast<uint16_t>(dd >> 16)) * static_cast<float>(sm[8 + j]);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const uint32_t wd = *reinterpret_cast<const uint32_t*>(words + 16 * (4 * g + c0 + half));
#pragma unroll
    for (int k = 0; k < 4; ++k) out[4 * half + k] = dl * static_cast<float>((wd >> (8 * k + shift)) & 0xF) - ml;
  }
}

// Values k0 .. k0 + 7 (k0 % 8 == 0) of row r of a Q8_0T matrix w (core/dtype.h; K values per
// row), as dq8<Q8_0R> decodes them from the row layout.
__device__ __forceinline__ void dq8_q8t(const uint8_t* w, int64_t K, int64_t r, int64_t k0, float out[8]) {
  const int rr = static_cast<int>(r % 16), g = rr % 8, hi = rr / 8;
  const int v = static_cast<int>(k0 % 128), c = v / 32, l = v % 32;  // block c of the unit, value l
  const uint8_t* u = w + ((r / 16) * (K / 128) + k0 / 128) * kQ8tUnitBytes;
  const int lane = 4 * g + c;
  const int2 q = *reinterpret_cast<const int2*>(u + 512 * (hi + 2 * (l / 16)) + 16 * lane + l % 16);
  const float d = half_bits_to_f32(*reinterpret_cast<const uint16_t*>(u + 2048 + 4 * lane + 2 * hi));
  const int8_t* qv = reinterpret_cast<const int8_t*>(&q);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = d * static_cast<float>(qv[k]);
}

template <class F>
void dispatch_weight(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::F32: f(std::integral_constant<DType, DType::F32>{}); break;
    case DType::F16: f(std::integral_constant<DType, DType::F16>{}); break;
    case DType::BF16: f(std::integral_constant<DType, DType::BF16>{}); break;
    case DType::Q8_0: f(std::integral_constant<DType, DType::Q8_0>{}); break;
    case DType::Q4_0: f(std::integral_constant<DType, DType::Q4_0>{}); break;
    case DType::Q4_1: f(std::integral_constant<DType, DType::Q4_1>{}); break;
    case DType::Q4_K: f(std::integral_constant<DType, DType::Q4_K>{}); break;
    case DType::Q5_K: f(std::integral_constant<DType, DType::Q5_K>{}); break;
    case DType::Q6_K: f(std::integral_constant<DType, DType::Q6_K>{}); break;
    case DType::Q8_0R: f(std::integral_constant<DType, DType::Q8_0R>{}); break;
    case DType::Q4_KR: f(std::integral_constant<DType, DType::Q4_KR>{}); break;
    default: VI_FAIL("op '{}' on cuda: no kernel for weight dtype {}", op, dtype_name(t));
  }
}

constexpr DType kWeightDTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                                   DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0R,
                                   DType::Q4_KR};

}  // namespace vi::cuda
