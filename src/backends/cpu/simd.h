// A 16-lane fp32 / int32 vector for the CPU kernels, so that each weight-block decoder and
// each row kernel is written once. Three builds of the same interface:
//   AVX-512F: one zmm register;  AVX2 (+FMA, F16C): two ymm registers;  otherwise: plain
//   arrays (the portable path; the compiler may still auto-vectorise it).
// Only what the kernels need lives here: loads from bytes/halves, integer bit ops for
// unpacking quantized values, conversion to float, FMA and a horizontal sum.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/half.h"

// GCC 12 warns about the self-initialised "undefined" vectors inside its own AVX-512
// intrinsics (a false positive); the warnings land on header lines within this range.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__AVX512F__)
#define VI_SIMD_AVX512 1
#include <immintrin.h>
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define VI_SIMD_AVX2 1
#include <immintrin.h>
#elif defined(__F16C__)
#include <immintrin.h>  // scalar path, but the F16C scale conversion is still there
#endif
#pragma GCC diagnostic pop

namespace vi::cpu::simd {

constexpr int kLanes = 16;

#if defined(VI_SIMD_AVX512)

inline const char* isa_name() { return "avx512"; }

struct VecI {
  __m512i v;
  static VecI load_u8(const uint8_t* p) { return {_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}; }
  static VecI load_i8(const int8_t* p) { return {_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))}; }
  static VecI load_u16(const uint16_t* p) { return {_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
  VecI operator&(int m) const { return {_mm512_and_si512(v, _mm512_set1_epi32(m))}; }
  VecI operator|(VecI o) const { return {_mm512_or_si512(v, o.v)}; }
  VecI operator-(int c) const { return {_mm512_sub_epi32(v, _mm512_set1_epi32(c))}; }
  VecI operator>>(int n) const { return {_mm512_srl_epi32(v, _mm_cvtsi32_si128(n))}; }
  VecI operator<<(int n) const { return {_mm512_sll_epi32(v, _mm_cvtsi32_si128(n))}; }
};

struct VecF {
  __m512 v;
  static VecF zero() { return {_mm512_setzero_ps()}; }
  static VecF set1(float f) { return {_mm512_set1_ps(f)}; }
  static VecF set_halves(float lo, float hi) { return {_mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(lo), _mm512_set1_ps(hi))}; }
  static VecF load(const float* p) { return {_mm512_loadu_ps(p)}; }
  static VecF load_f16(const uint16_t* p) { return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))}; }
  static VecF from_int(VecI i) { return {_mm512_cvtepi32_ps(i.v)}; }
  static VecF from_bits(VecI i) { return {_mm512_castsi512_ps(i.v)}; }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
  VecF operator+(VecF o) const { return {_mm512_add_ps(v, o.v)}; }
  VecF operator-(VecF o) const { return {_mm512_sub_ps(v, o.v)}; }
  VecF operator*(VecF o) const { return {_mm512_mul_ps(v, o.v)}; }
  float hsum() const { return _mm512_reduce_add_ps(v); }
};
inline VecF fma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline VecF max(VecF a, VecF b) { return {_mm512_max_ps(a.v, b.v)}; }
inline float hmax(VecF a) { return _mm512_reduce_max_ps(a.v); }

#elif defined(VI_SIMD_AVX2)

inline const char* isa_name() { return "avx2"; }

struct VecI {
  __m256i a, b;
  static VecI load_u8(const uint8_t* p) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_cvtepu8_epi32(x), _mm256_cvtepu8_epi32(_mm_srli_si128(x, 8))};
  }
  static VecI load_i8(const int8_t* p) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return {_mm256_cvtepi8_epi32(x), _mm256_cvtepi8_epi32(_mm_srli_si128(x, 8))};
  }
  static VecI load_u16(const uint16_t* p) {
    return {_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  VecI operator&(int m) const {
    const __m256i k = _mm256_set1_epi32(m);
    return {_mm256_and_si256(a, k), _mm256_and_si256(b, k)};
  }
  VecI operator|(VecI o) const { return {_mm256_or_si256(a, o.a), _mm256_or_si256(b, o.b)}; }
  VecI operator-(int c) const {
    const __m256i k = _mm256_set1_epi32(c);
    return {_mm256_sub_epi32(a, k), _mm256_sub_epi32(b, k)};
  }
  VecI operator>>(int n) const {
    const __m128i s = _mm_cvtsi32_si128(n);
    return {_mm256_srl_epi32(a, s), _mm256_srl_epi32(b, s)};
  }
  VecI operator<<(int n) const {
    const __m128i s = _mm_cvtsi32_si128(n);
    return {_mm256_sll_epi32(a, s), _mm256_sll_epi32(b, s)};
  }
};

struct VecF {
  __m256 a, b;
  static VecF zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static VecF set1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
  static VecF set_halves(float lo, float hi) { return {_mm256_set1_ps(lo), _mm256_set1_ps(hi)}; }
  static VecF load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static VecF load_f16(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static VecF from_int(VecI i) { return {_mm256_cvtepi32_ps(i.a), _mm256_cvtepi32_ps(i.b)}; }
  static VecF from_bits(VecI i) { return {_mm256_castsi256_ps(i.a), _mm256_castsi256_ps(i.b)}; }
  void store(float* p) const {
    _mm256_storeu_ps(p, a);
    _mm256_storeu_ps(p + 8, b);
  }
  VecF operator+(VecF o) const { return {_mm256_add_ps(a, o.a), _mm256_add_ps(b, o.b)}; }
  VecF operator-(VecF o) const { return {_mm256_sub_ps(a, o.a), _mm256_sub_ps(b, o.b)}; }
  VecF operator*(VecF o) const { return {_mm256_mul_ps(a, o.a), _mm256_mul_ps(b, o.b)}; }
  float hsum() const {
    // Fixed pairwise order: lanes i and i+8 first, then a tree, like the other builds.
    float t[8];
    _mm256_storeu_ps(t, _mm256_add_ps(a, b));
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
  }
};
inline VecF fma(VecF x, VecF y, VecF z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
inline VecF max(VecF x, VecF y) { return {_mm256_max_ps(x.a, y.a), _mm256_max_ps(x.b, y.b)}; }
inline float hmax(VecF x) {
  float t[8];
  _mm256_storeu_ps(t, _mm256_max_ps(x.a, x.b));
  float m = t[0];
  for (int i = 1; i < 8; ++i) m = t[i] > m ? t[i] : m;
  return m;
}

#else

inline const char* isa_name() { return "scalar"; }

struct VecI {
  int32_t v[kLanes];
  static VecI load_u8(const uint8_t* p) {
    VecI r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = p[i];
    return r;
  }
  static VecI load_i8(const int8_t* p) {
    VecI r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = p[i];
    return r;
  }
  static VecI load_u16(const uint16_t* p) {
    VecI r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = p[i];
    return r;
  }
  template <class Op>
  VecI map(Op op) const {
    VecI r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = op(v[i]);
    return r;
  }
  VecI operator&(int m) const { return map([m](int32_t x) { return x & m; }); }
  VecI operator|(VecI o) const {
    VecI r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = v[i] | o.v[i];
    return r;
  }
  VecI operator-(int c) const { return map([c](int32_t x) { return x - c; }); }
  VecI operator>>(int n) const { return map([n](int32_t x) { return static_cast<int32_t>(static_cast<uint32_t>(x) >> n); }); }
  VecI operator<<(int n) const { return map([n](int32_t x) { return static_cast<int32_t>(static_cast<uint32_t>(x) << n); }); }
};

struct VecF {
  float v[kLanes];
  static VecF zero() { return set1(0.0f); }
  static VecF set1(float f) {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = f;
    return r;
  }
  static VecF set_halves(float lo, float hi) {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = i < kLanes / 2 ? lo : hi;
    return r;
  }
  static VecF load(const float* p) {
    VecF r;
    std::memcpy(r.v, p, sizeof(r.v));
    return r;
  }
  static VecF load_f16(const uint16_t* p) {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = fp16_to_fp32(p[i]);
    return r;
  }
  static VecF from_int(VecI x) {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = static_cast<float>(x.v[i]);
    return r;
  }
  static VecF from_bits(VecI x) {
    VecF r;
    std::memcpy(r.v, x.v, sizeof(r.v));
    return r;
  }
  void store(float* p) const { std::memcpy(p, v, sizeof(v)); }
  VecF operator+(VecF o) const {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = v[i] + o.v[i];
    return r;
  }
  VecF operator-(VecF o) const {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = v[i] - o.v[i];
    return r;
  }
  VecF operator*(VecF o) const {
    VecF r;
    for (int i = 0; i < kLanes; ++i) r.v[i] = v[i] * o.v[i];
    return r;
  }
  float hsum() const {
    float t[8];
    for (int i = 0; i < 8; ++i) t[i] = v[i] + v[i + 8];
    return ((t[0] + t[4]) + (t[1] + t[5])) + ((t[2] + t[6]) + (t[3] + t[7]));
  }
};
inline VecF fma(VecF a, VecF b, VecF c) {
  VecF r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = __builtin_fmaf(a.v[i], b.v[i], c.v[i]);
  return r;
}
inline VecF max(VecF a, VecF b) {
  VecF r;
  for (int i = 0; i < kLanes; ++i) r.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i];
  return r;
}
inline float hmax(VecF a) {
  float m = a.v[0];
  for (int i = 1; i < kLanes; ++i) m = a.v[i] > m ? a.v[i] : m;
  return m;
}

#endif

// One fp16 scale to fp32: the F16C instruction where there is one (block scales are read
// once per 32 values in the matmul inner loop, so the portable bit-twiddling costs).
inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  return fp16_to_fp32(h);
#endif
}

// bf16 is the top half of an fp32: widen to 32 bits and shift into place.
inline VecF load_bf16(const uint16_t* p) { return VecF::from_bits(VecI::load_u16(p) << 16); }

// Dot product and y += a*x over n floats, vectorised with a scalar tail. Fixed order for a
// given n, so results do not depend on threading.
inline float dot(const float* a, const float* b, int64_t n) {
  VecF s0 = VecF::zero(), s1 = VecF::zero();
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    s0 = fma(VecF::load(a + i), VecF::load(b + i), s0);
    s1 = fma(VecF::load(a + i + kLanes), VecF::load(b + i + kLanes), s1);
  }
  if (i + kLanes <= n) {
    s0 = fma(VecF::load(a + i), VecF::load(b + i), s0);
    i += kLanes;
  }
  float s = (s0 + s1).hsum();
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {
  const VecF va = VecF::set1(alpha);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) fma(va, VecF::load(x + i), VecF::load(y + i)).store(y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace vi::cpu::simd
