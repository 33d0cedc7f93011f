// SIMD decoders of one weight block into fp32, for every weight dtype. Each decoder calls
// emit(c, v) once per 16-value chunk c of the block, with v = those 16 values in fp32:
// the caller (matmul, the kernel bench) FMAs them straight from registers, so a block is
// never written out. Values equal core/quant.cpp's dequantize_row up to FMA rounding
// (d*q - m is computed as one fused operation here).
// Layout facts: core/quant.cpp and ggml's block formats (core/dtype.h).
#pragma once

#include <cstring>

#include "backends/cpu/simd.h"
#include "core/dtype.h"
#include "core/half.h"

namespace vi::cpu {

using simd::VecF;
using simd::VecI;

struct DecF32 {
  static constexpr int kValues = 16, kBytes = 64;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(0, VecF::load(reinterpret_cast<const float*>(p)));
  }
};

struct DecF16 {
  static constexpr int kValues = 16, kBytes = 32;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(0, VecF::load_f16(reinterpret_cast<const uint16_t*>(p)));
  }
};

struct DecBF16 {
  static constexpr int kValues = 16, kBytes = 32;
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    emit(0, simd::load_bf16(reinterpret_cast<const uint16_t*>(p)));
  }
};

struct DecQ8_0 {
  static constexpr int kValues = kQK, kBytes = sizeof(BlockQ8_0);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
    const VecF d = VecF::set1(simd::half_to_float(b->d));
    emit(0, VecF::from_int(VecI::load_i8(b->qs)) * d);
    emit(1, VecF::from_int(VecI::load_i8(b->qs + 16)) * d);
  }
};

struct DecQ4_0 {
  static constexpr int kValues = kQK, kBytes = sizeof(BlockQ4_0);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
    const VecF d = VecF::set1(simd::half_to_float(b->d));
    const VecI q = VecI::load_u8(b->qs);
    emit(0, VecF::from_int((q & 0xF) - 8) * d);
    emit(1, VecF::from_int((q >> 4) - 8) * d);
  }
};

struct DecQ4_1 {
  static constexpr int kValues = kQK, kBytes = sizeof(BlockQ4_1);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(p);
    const VecF d = VecF::set1(simd::half_to_float(b->d));
    const VecF m = VecF::set1(simd::half_to_float(b->m));
    const VecI q = VecI::load_u8(b->qs);
    emit(0, simd::fma(VecF::from_int(q & 0xF), d, m));
    emit(1, simd::fma(VecF::from_int(q >> 4), d, m));
  }
};

// The 8 (scale, min) pairs of a Q4_K/Q5_K super-block as fp32: dl[j] = d * scale_j and
// ml[j] = -(dmin * min_j), written to out[0..8) and out[8..16). The 6-bit fields are
// regrouped with 32-bit word operations (bytes 0-7: scales, bytes 8-15: mins), then
// widened and scaled as one 16-lane vector: per 256 weights this is a handful of
// instructions instead of ~50 scalar ones, which showed in decode (T = 1) speed.
inline void k_scales(const uint8_t* s, float d, float dmin, float* out) {
  uint32_t w[4];
  std::memcpy(w, s, 12);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  w[3] = ((w[2] >> 4) & k4) | (((w[1] >> 6) & k2) << 4);  // mins 4-7
  const uint32_t mins_lo = w[1] & k6;                       // mins 0-3
  w[1] = (w[2] & k4) | (((w[0] >> 6) & k2) << 4);          // scales 4-7
  w[2] = mins_lo;
  w[0] &= k6;                                               // scales 0-3
  const VecF v = VecF::from_int(VecI::load_u8(reinterpret_cast<const uint8_t*>(w)));
  (v * VecF::set_halves(d, -dmin)).store(out);
}

// Q4_K: sub-blocks 2p (low nibbles) and 2p+1 (high nibbles) share qs[32p, 32p+32).
struct DecQ4_K {
  static constexpr int kValues = kQKK, kBytes = sizeof(BlockQ4_K);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ4_K*>(p);
    alignas(64) float sm[16];
    k_scales(b->scales, simd::half_to_float(b->d), simd::half_to_float(b->dmin), sm);
    const float* dl = sm;
    const float* ml = sm + 8;
    for (int pr = 0; pr < 4; ++pr) {
      const VecF d0 = VecF::set1(dl[2 * pr]), m0 = VecF::set1(ml[2 * pr]);
      const VecF d1 = VecF::set1(dl[2 * pr + 1]), m1 = VecF::set1(ml[2 * pr + 1]);
      for (int h = 0; h < 2; ++h) {
        const VecI q = VecI::load_u8(b->qs + 32 * pr + 16 * h);
        emit(4 * pr + h, simd::fma(VecF::from_int(q & 0xF), d0, m0));
        emit(4 * pr + 2 + h, simd::fma(VecF::from_int(q >> 4), d1, m1));
      }
    }
  }
};

// Q5_K: Q4_K plus bit j of qh[l] as the fifth bit of value 32j + l.
struct DecQ5_K {
  static constexpr int kValues = kQKK, kBytes = sizeof(BlockQ5_K);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ5_K*>(p);
    alignas(64) float sm[16];
    k_scales(b->scales, simd::half_to_float(b->d), simd::half_to_float(b->dmin), sm);
    const float* dl = sm;
    const float* ml = sm + 8;
    const VecI qh[2] = {VecI::load_u8(b->qh), VecI::load_u8(b->qh + 16)};
    for (int pr = 0; pr < 4; ++pr) {
      const VecF d0 = VecF::set1(dl[2 * pr]), m0 = VecF::set1(ml[2 * pr]);
      const VecF d1 = VecF::set1(dl[2 * pr + 1]), m1 = VecF::set1(ml[2 * pr + 1]);
      for (int h = 0; h < 2; ++h) {
        const VecI q = VecI::load_u8(b->qs + 32 * pr + 16 * h);
        const VecI h0 = ((qh[h] >> (2 * pr)) & 1) << 4;
        const VecI h1 = ((qh[h] >> (2 * pr + 1)) & 1) << 4;
        emit(4 * pr + h, simd::fma(VecF::from_int((q & 0xF) | h0), d0, m0));
        emit(4 * pr + 2 + h, simd::fma(VecF::from_int((q >> 4) | h1), d1, m1));
      }
    }
  }
};

// Q6_K: chunk g (= 16-value group g, scale scales[g]) of half n = g / 8, k = (g % 8) / 2,
// h = g % 2: low nibble from ql[64n + 32(k&1) + 16h ...] (high nibble when k >= 2), top two
// bits from bits 2k..2k+1 of qh[32n + 16h ...].
struct DecQ6_K {
  static constexpr int kValues = kQKK, kBytes = sizeof(BlockQ6_K);
  template <class Emit>
  static void decode(const uint8_t* p, Emit&& emit) {
    const auto* b = reinterpret_cast<const BlockQ6_K*>(p);
    const float d = simd::half_to_float(b->d);
    for (int n = 0; n < 2; ++n) {
      for (int h = 0; h < 2; ++h) {
        const VecI qh = VecI::load_u8(b->qh + 32 * n + 16 * h);
        const VecI qa = VecI::load_u8(b->ql + 64 * n + 16 * h);
        const VecI qb = VecI::load_u8(b->ql + 64 * n + 32 + 16 * h);
        for (int k = 0; k < 4; ++k) {
          const VecI lo = (k & 1) ? qb : qa;
          const VecI nib = (k >> 1) ? (lo >> 4) : (lo & 0xF);
          const VecI q = (nib | (((qh >> (2 * k)) & 3) << 4)) - 32;
          const int g = 8 * n + 2 * k + h;
          emit(g, VecF::from_int(q) * VecF::set1(d * static_cast<float>(b->scales[g])));
        }
      }
    }
  }
};

// Calls fn.template operator()<Decoder>() for a weight dtype; false if there is none.
template <class Fn>
bool with_decoder(DType t, Fn&& fn) {
  switch (t) {
    case DType::F32: fn.template operator()<DecF32>(); return true;
    case DType::F16: fn.template operator()<DecF16>(); return true;
    case DType::BF16: fn.template operator()<DecBF16>(); return true;
    case DType::Q8_0: fn.template operator()<DecQ8_0>(); return true;
    case DType::Q4_0: fn.template operator()<DecQ4_0>(); return true;
    case DType::Q4_1: fn.template operator()<DecQ4_1>(); return true;
    case DType::Q4_K: fn.template operator()<DecQ4_K>(); return true;
    case DType::Q5_K: fn.template operator()<DecQ5_K>(); return true;
    case DType::Q6_K: fn.template operator()<DecQ6_K>(); return true;
    default: return false;
  }
}

}  // namespace vi::cpu
