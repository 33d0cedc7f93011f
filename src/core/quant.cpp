// Scalar fp32 <-> weight-dtype row conversions in the ggml/GGUF block layouts.
// Layout facts (which nibble holds which value, how K-quant 6-bit scales pack into 12
// bytes) follow ggml's reference dequantizers; the code is our own.
#include "core/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"

// Bit-exactness with ggml's reference (and gguf-py's numpy port) needs every multiply and
// add rounded separately: -march=native would otherwise fuse `d * q + m` into one FMA (and
// clang contracts within an expression by default).
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif

namespace vi {

namespace {

// ---- K-quant 6-bit scale/min packing (8 pairs in 12 bytes) ----
// Bytes 0-3: low 6 bits = scale 0-3, top 2 bits = high bits of scale 4-7.
// Bytes 4-7: low 6 bits = min 0-3,   top 2 bits = high bits of min 4-7.
// Bytes 8-11: low nibble = low 4 bits of scale 4-7, high nibble = low 4 bits of min 4-7.
inline void get_scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

inline void set_scale_min_k4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] |= ls[j] & 63;
      q[j + 4] |= lm[j] & 63;
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

inline int nearest_int(float f) { return static_cast<int>(std::lrintf(f)); }

// ---- dequantizers: one block each ----

void deq_q8_0(const BlockQ8_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < kQK; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}

void deq_q4_0(const BlockQ4_0& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int i = 0; i < kQK / 2; ++i) {
    y[i] = static_cast<float>((b.qs[i] & 0xF) - 8) * d;
    y[i + kQK / 2] = static_cast<float>((b.qs[i] >> 4) - 8) * d;
  }
}

void deq_q4_1(const BlockQ4_1& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float m = fp16_to_fp32(b.m);
  for (int i = 0; i < kQK / 2; ++i) {
    y[i] = static_cast<float>(b.qs[i] & 0xF) * d + m;
    y[i + kQK / 2] = static_cast<float>(b.qs[i] >> 4) * d + m;
  }
}

// Q4_K: 8 sub-blocks of 32; sub-blocks 2p and 2p+1 share qs[32p..32p+32) (low/high nibble).
void deq_q4_k(const BlockQ4_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    get_scale_min_k4(j, b.scales, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) y[32 * j + l] = dl * static_cast<float>((q[l] >> shift) & 0xF) - ml;
  }
}

// Q5_K: as Q4_K plus a fifth bit per value: bit j of qh[l] belongs to value 32j + l.
void deq_q5_k(const BlockQ5_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  const float dmin = fp16_to_fp32(b.dmin);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    get_scale_min_k4(j, b.scales, &sc, &m);
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const uint8_t* q = b.qs + 32 * (j / 2);
    const int shift = (j % 2) * 4;
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) | (((b.qh[l] >> j) & 1) << 4);
      y[32 * j + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

// Q6_K: two halves of 128; in half n, value 128n + 32k + l takes its low nibble from
// ql[64n + l + 32(k&1)] (low nibble for k < 2, high for k >= 2) and its top 2 bits from
// bits 2k..2k+1 of qh[32n + l]; group scale scales[(value index) / 16].
void deq_q6_k(const BlockQ6_K& b, float* y) {
  const float d = fp16_to_fp32(b.d);
  for (int n = 0; n < 2; ++n) {
    const uint8_t* ql = b.ql + 64 * n;
    const uint8_t* qh = b.qh + 32 * n;
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[l + 32 * (k & 1)] >> (4 * (k >> 1))) & 0xF;
        const int hi = (qh[l] >> (2 * k)) & 3;
        const int idx = 128 * n + 32 * k + l;
        const float dl = d * static_cast<float>(b.scales[idx / 16]);
        y[idx] = dl * static_cast<float>((lo | (hi << 4)) - 32);
      }
    }
  }
}

// ---- quantizers: one block each ----

void q_q8_0(const float* x, BlockQ8_0& b) {
  float amax = 0.0f;
  for (int i = 0; i < kQK; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = fp32_to_fp16(d);
  for (int i = 0; i < kQK; ++i) b.qs[i] = static_cast<int8_t>(std::roundf(x[i] * id));
}

void q_q4_0(const float* x, BlockQ4_0& b) {
  float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest-magnitude value
  for (int i = 0; i < kQK; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = fp32_to_fp16(d);
  auto q = [&](float v) {
    const float s = v * id;
    return static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s + 8.5f))));
  };
  for (int i = 0; i < kQK / 2; ++i) b.qs[i] = q(x[i]) | static_cast<uint8_t>(q(x[i + kQK / 2]) << 4);
}

void q_q4_1(const float* x, BlockQ4_1& b) {
  float mn = x[0], mx = x[0];
  for (int i = 1; i < kQK; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = fp32_to_fp16(d);
  b.m = fp32_to_fp16(mn);
  auto q = [&](float v) {
    const float s = (v - mn) * id;
    return static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(s + 0.5f))));
  };
  for (int i = 0; i < kQK / 2; ++i) b.qs[i] = q(x[i]) | static_cast<uint8_t>(q(x[i + kQK / 2]) << 4);
}

// Shared by Q4_K/Q5_K: per 32-value sub-block an affine map x ≈ dl*q - ml with q in
// [0, nmax] and ml >= 0; the 6-bit sub-block scales are rounded up so that the top of
// each sub-block's range stays representable. Returns the integer values in q[256].
void q_affine_k(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales12,
                uint8_t* q) {
  float scale[8], mins[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float mn = 0.0f, mx = 0.0f;  // the range always contains 0: ml = -min is stored unsigned
    for (int l = 0; l < 32; ++l) {
      mn = std::min(mn, x[32 * j + l]);
      mx = std::max(mx, x[32 * j + l]);
    }
    scale[j] = (mx - mn) / static_cast<float>(nmax);
    mins[j] = -mn;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mins[j]);
  }
  *d_out = fp32_to_fp16(max_scale / 63.0f);
  *dmin_out = fp32_to_fp16(max_min / 63.0f);
  const float d = fp16_to_fp32(*d_out);
  const float dmin = fp16_to_fp32(*dmin_out);
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = d > 0.0f ? static_cast<uint8_t>(std::clamp(static_cast<int>(std::ceil(scale[j] / d)), 0, 63)) : 0;
    lm[j] = dmin > 0.0f ? static_cast<uint8_t>(std::clamp(nearest_int(mins[j] / dmin), 0, 63)) : 0;
  }
  set_scale_min_k4(ls, lm, scales12);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(ls[j]);
    const float ml = dmin * static_cast<float>(lm[j]);
    for (int l = 0; l < 32; ++l) {
      const int v = dl > 0.0f ? nearest_int((x[32 * j + l] + ml) / dl) : 0;
      q[32 * j + l] = static_cast<uint8_t>(std::clamp(v, 0, nmax));
    }
  }
}

void q_q4_k(const float* x, BlockQ4_K& b) {
  uint8_t q[kQKK];
  q_affine_k(x, 15, &b.d, &b.dmin, b.scales, q);
  for (int p = 0; p < 4; ++p)
    for (int l = 0; l < 32; ++l)
      b.qs[32 * p + l] = static_cast<uint8_t>(q[64 * p + l] | (q[64 * p + 32 + l] << 4));
}

void q_q5_k(const float* x, BlockQ5_K& b) {
  uint8_t q[kQKK];
  q_affine_k(x, 31, &b.d, &b.dmin, b.scales, q);
  std::memset(b.qh, 0, sizeof(b.qh));
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t a = q[64 * p + l], c = q[64 * p + 32 + l];
      b.qs[32 * p + l] = static_cast<uint8_t>((a & 0xF) | ((c & 0xF) << 4));
      b.qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * p)) | ((c >> 4) << (2 * p + 1)));
    }
  }
}

// Q6_K: symmetric per 16-value group, q in [-31, 31] (+32 stored); the 8-bit group scales
// are rounded up for the same reason as in q_affine_k.
void q_q6_k(const float* x, BlockQ6_K& b) {
  float scale[16];
  float max_scale = 0.0f;
  for (int g = 0; g < 16; ++g) {
    float amax = 0.0f;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * g + l]));
    scale[g] = amax / 31.0f;
    max_scale = std::max(max_scale, scale[g]);
  }
  b.d = fp32_to_fp16(max_scale / 127.0f);
  const float d = fp16_to_fp32(b.d);
  uint8_t q[kQKK];
  for (int g = 0; g < 16; ++g) {
    const int sc = d > 0.0f ? std::clamp(static_cast<int>(std::ceil(scale[g] / d)), 0, 127) : 0;
    b.scales[g] = static_cast<int8_t>(sc);
    const float dl = d * static_cast<float>(sc);
    for (int l = 0; l < 16; ++l) {
      const int v = dl > 0.0f ? nearest_int(x[16 * g + l] / dl) : 0;
      q[16 * g + l] = static_cast<uint8_t>(std::clamp(v, -32, 31) + 32);
    }
  }
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = q[128 * n + l], q2 = q[128 * n + 32 + l];
      const uint8_t q3 = q[128 * n + 64 + l], q4 = q[128 * n + 96 + l];
      b.ql[64 * n + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
      b.ql[64 * n + 32 + l] = static_cast<uint8_t>((q2 & 0xF) | ((q4 & 0xF) << 4));
      b.qh[32 * n + l] = static_cast<uint8_t>((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
    }
  }
}

// ---- Q8_KX: int8 activations for the int8-activation GEMV (core/dtype.h) ----

// Byte of BlockQ8_KX::qs that holds value v (0..31) of sub-block s.
inline int q8kx_pos(int s, int v) {
  const int h = v >> 4, c = (v & 15) >> 2;
  return 64 * c + 16 * (s & 3) + 4 * (2 * (s >> 2) + h) + (v & 3);
}

void deq_q8_kx(const BlockQ8_KX& b, float* y) {
  for (int s = 0; s < 8; ++s)
    for (int v = 0; v < 32; ++v) y[32 * s + v] = static_cast<float>(b.qs[q8kx_pos(s, v)]) * b.d;
}

void q_q8_kx(const float* x, BlockQ8_KX& b) {
  float amax = 0.0f;
  for (int i = 0; i < kQKK; ++i) amax = std::max(amax, std::fabs(x[i]));
  b.d = amax / 127.0f;
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  std::memset(b.pad, 0, sizeof(b.pad));
  for (int s = 0; s < 8; ++s) {
    int sum = 0;
    for (int v = 0; v < 32; ++v) {
      const int q = std::clamp(nearest_int(x[32 * s + v] * inv), -127, 127);
      b.qs[q8kx_pos(s, v)] = static_cast<int8_t>(q);
      sum += q;
    }
    // The sum as a multiple of 32 plus 0..31: both exact in fp16.
    const int hi = sum & ~31, lo = sum - hi;
    b.s[4 * (s >> 1) + (s & 1)] = fp32_to_fp16(static_cast<float>(hi));
    b.s[4 * (s >> 1) + 2 + (s & 1)] = fp32_to_fp16(static_cast<float>(lo));
  }
}

template <class Block, int kN>
void deq_blocks(void (*fn)(const Block&, float*), const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kN; ++i) fn(b[i], dst + i * kN);
}

template <class Block, int kN>
void q_blocks(void (*fn)(const float*, Block&), const float* src, void* dst, int64_t n) {
  auto* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kN; ++i) fn(src + i * kN, b[i]);
}

void check_row(const char* what, DType t, int64_t n) {
  VI_CHECK(quant_supported(t), "{}: dtype {} is not a weight dtype (supported: f32 f16 bf16 q8_0 q4_0 q4_1 q4_k q5_k q6_k)",
           what, dtype_name(t));
  const int be = dtype_info(t).block_elems;
  VI_CHECK(n >= 0 && n % be == 0, "{}: a row of {} values is not a whole number of {} blocks ({} values each)",
           what, n, dtype_name(t), be);
}

}  // namespace

bool quant_supported(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0:
    case DType::Q4_1: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  if (t == DType::Q8_KX) {  // activations, not a weight dtype
    VI_CHECK(n % kQKK == 0, "dequantize_row: a Q8_KX row of {} values is not whole blocks of {}", n, kQKK);
    return deq_blocks<BlockQ8_KX, kQKK>(deq_q8_kx, src, dst, n);
  }
  check_row("dequantize_row", t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return;
    }
    case DType::BF16: {
      const auto* h = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return;
    }
    case DType::Q8_0: return deq_blocks<BlockQ8_0, kQK>(deq_q8_0, src, dst, n);
    case DType::Q4_0: return deq_blocks<BlockQ4_0, kQK>(deq_q4_0, src, dst, n);
    case DType::Q4_1: return deq_blocks<BlockQ4_1, kQK>(deq_q4_1, src, dst, n);
    case DType::Q4_K: return deq_blocks<BlockQ4_K, kQKK>(deq_q4_k, src, dst, n);
    case DType::Q5_K: return deq_blocks<BlockQ5_K, kQKK>(deq_q5_k, src, dst, n);
    case DType::Q6_K: return deq_blocks<BlockQ6_K, kQKK>(deq_q6_k, src, dst, n);
    default: break;
  }
  VI_FAIL("dequantize_row: unhandled dtype {}", dtype_name(t));
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  if (t == DType::Q8_KX) {
    VI_CHECK(n % kQKK == 0, "quantize_row: a Q8_KX row of {} values is not whole blocks of {}", n, kQKK);
    return q_blocks<BlockQ8_KX, kQKK>(q_q8_kx, src, dst, n);
  }
  check_row("quantize_row", t, n);
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
      return;
    }
    case DType::Q8_0: return q_blocks<BlockQ8_0, kQK>(q_q8_0, src, dst, n);
    case DType::Q4_0: return q_blocks<BlockQ4_0, kQK>(q_q4_0, src, dst, n);
    case DType::Q4_1: return q_blocks<BlockQ4_1, kQK>(q_q4_1, src, dst, n);
    case DType::Q4_K: return q_blocks<BlockQ4_K, kQKK>(q_q4_k, src, dst, n);
    case DType::Q5_K: return q_blocks<BlockQ5_K, kQKK>(q_q5_k, src, dst, n);
    case DType::Q6_K: return q_blocks<BlockQ6_K, kQKK>(q_q6_k, src, dst, n);
    default: break;
  }
  VI_FAIL("quantize_row: unhandled dtype {}", dtype_name(t));
}

}  // namespace vi
