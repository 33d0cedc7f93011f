// The per-super-block steps of the Q4_K tensor-core decode GEMVs (gemv_q4kr.cu on the row
// layout Q4_KR, gemv_q4kt.cu on the tiled layout Q4_KT): a lane (g, c) of a warp holds, for
// rows g and g + 8 of a 16-row tile, sub-block c of each half of a super-block (32 quant bytes
// per row), its scale and min bytes and the rows' d and dmin, and multiplies them on tensor
// cores (mma.m16n8k16, fp32 accumulators) with the activations of up to 8 tokens:
//   A = sc·q exactly in f16 from the nibble pair under 0x6400 by one f16 FMA; t = Σ sc·q·x;
//   the mins by a second mma whose A is m: u = Σ m·x; acc += d·t − dmin·u per super-block.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/q4kr_bits.cuh"

namespace vi::cuda {

// Half h of a super-block as lane (g, c) uses it: the 32 values of its sub-block 4h + c of
// rows g (q[0]) and g + 8 (q[1]).
struct HalfSb {
  uint4 q[2];
};
// A super-block's scales and mins of rows g (sm[0]) and g + 8 (sm[1]): .x, .y the 4 scale and 4
// min bytes of half 0, .z, .w those of half 1 (the lane's own: byte c); dd: the rows' (d, dmin).
struct SbScales {
  uint4 sm[2];
  uint32_t dd[2];
};

// q0/q1: this lane's 16 bytes of half 0 of rows g / g + 8 (half 1 is 64 bytes on). Global
// memory (streamed once: evict-first) or shared memory.
template <int H, bool GLOBAL>
__device__ __forceinline__ void load_half(const uint8_t* q0, const uint8_t* q1, HalfSb& st) {
  auto q = [](const uint8_t* p) {
    return GLOBAL ? __ldcs(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
  };
  st.q[0] = q(q0 + 64 * H);
  st.q[1] = q(q1 + 64 * H);
}
// sm0/sm1: the super-block's 16 scale and min bytes of rows g / g + 8; dm0/dm1: their d, dmin.
template <bool GLOBAL>
__device__ __forceinline__ void load_scales(const uint8_t* sm0, const uint8_t* sm1, const uint8_t* dm0,
                                            const uint8_t* dm1, SbScales& sc) {
  auto v4 = [](const uint8_t* p) {
    return GLOBAL ? __ldcs(reinterpret_cast<const uint4*>(p)) : *reinterpret_cast<const uint4*>(p);
  };
  auto u32 = [](const uint8_t* p) {
    return GLOBAL ? __ldcs(reinterpret_cast<const uint32_t*>(p)) : *reinterpret_cast<const uint32_t*>(p);
  };
  sc.sm[0] = v4(sm0);
  sc.sm[1] = v4(sm1);
  sc.dd[0] = u32(dm0);
  sc.dd[1] = u32(dm1);
}

// t (+)= Σ sc·q·x and u (+)= Σ m·x over one half for rows g, g + 8 and tokens 2c, 2c + 1.
//   A = sc·q exactly in f16 (≤ 945) from 1024 + q (or 1024 + 16q) by one f16 FMA; the mins
//   through a second mma whose A is m everywhere. d and dmin follow once per super-block.
// xs: token g's 32 activations at this lane's sub-block; scw/mnw: the half's scale and min words
// of rows g, g + 8; sel / sel_mn pick the lane's scale / min byte of such a word (byte c of the
// row layout's words; bytes 0..3 of the tiled layout's one word per row).
//
// P super-blocks at once (P = 2: their halves of the same index, mma_half_pair): the steps of the P
// interleaved, so a warp has 2P independent mma chains; each super-block's t and u get the same
// products in the same order as alone, so the sums are the same bits. scw[p], mnw[p]: super-block
// p's scale and min words of rows g, g + 8. MINS false: t only (u untouched; mins_from_sums
// computes it once per super-block from the activations' sums). XG false: xs points into shared
// memory (plain loads instead of the read-only global path).
template <bool FIRST, int P, bool MINS = true, bool XG = true>
__device__ __forceinline__ void mma_halves(const HalfSb* const st[P], const uint32_t scw[P][2],
                                           const uint32_t mnw[P][2], const __half* const xs[P], uint32_t sel,
                                           uint32_t sel_mn, uint32_t magic, float t[P][4], float u[P][4]) {
  uint4 xv[P][4];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      xv[p][i] = XG ? __ldg(reinterpret_cast<const uint4*>(xs[p] + 8 * i)) : *reinterpret_cast<const uint4*>(xs[p] + 8 * i);
  const __half2 k1024 = __float2half2_rn(1024.0f), kNeg1024 = __float2half2_rn(-1024.0f);
  const __half2 kSixteenth = __float2half2_rn(0.0625f);
  __half2 sc[P][2], sc16[P][2], neg[P][2], neg16[P][2];
  uint32_t mn[P][2];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // byte c under 0x64 is 1024 + byte; minus 1024 is the byte, exactly.
      sc[p][r] = __hsub2(as_h2(__byte_perm(scw[p][r], 0x64u, sel)), k1024);
      if constexpr (MINS) mn[p][r] = as_u32(__hsub2(as_h2(__byte_perm(mnw[p][r], 0x64u, sel_mn)), k1024));
      neg[p][r] = __hmul2(sc[p][r], kNeg1024);     // −1024·sc: exact (≤ 64512)
      sc16[p][r] = __hmul2(sc[p][r], kSixteenth);  // for the 1024 + 16q pairs: exact
      neg16[p][r] = __hmul2(sc16[p][r], kNeg1024);
    }
  uint32_t a[P][2][4];
  auto scaled = [&](int p, uint32_t w, int r) {  // the word's four pairs as sc·q
    const uint32_t w8 = w >> 8;
    a[p][r][0] = as_u32(__hfma2(as_h2(and_or<0x000F000Fu>(w, magic)), sc[p][r], neg[p][r]));       // values 0, 1
    a[p][r][1] = as_u32(__hfma2(as_h2(and_or<0x00F000F0u>(w, magic)), sc16[p][r], neg16[p][r]));   // values 2, 3
    a[p][r][2] = as_u32(__hfma2(as_h2(and_or<0x000F000Fu>(w8, magic)), sc[p][r], neg[p][r]));      // values 4, 5
    a[p][r][3] = as_u32(__hfma2(as_h2(and_or<0x00F000F0u>(w8, magic)), sc16[p][r], neg16[p][r]));  // values 6, 7
  };
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      scaled(p, word(st[p]->q[0], i), 0);
      scaled(p, word(st[p]->q[1], i), 1);
    }
    // Values 8i .. 8i+7 of the sub-block: pairs (0,1), (2,3) meet xv[i].x, .y in one mma,
    // (4,5), (6,7) meet .z, .w in the next.
#pragma unroll
    for (int p = 0; p < P; ++p) {
      if (FIRST && i == 0) {
        mma_16816_z(t[p], a[p][0][0], a[p][1][0], a[p][0][1], a[p][1][1], xv[p][i].x, xv[p][i].y);
        if constexpr (MINS) mma_16816_z(u[p], mn[p][0], mn[p][1], mn[p][0], mn[p][1], xv[p][i].x, xv[p][i].y);
      } else {
        mma_16816(t[p], a[p][0][0], a[p][1][0], a[p][0][1], a[p][1][1], xv[p][i].x, xv[p][i].y);
        if constexpr (MINS) mma_16816(u[p], mn[p][0], mn[p][1], mn[p][0], mn[p][1], xv[p][i].x, xv[p][i].y);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p) {
      mma_16816(t[p], a[p][0][2], a[p][1][2], a[p][0][3], a[p][1][3], xv[p][i].z, xv[p][i].w);
      if constexpr (MINS) mma_16816(u[p], mn[p][0], mn[p][1], mn[p][0], mn[p][1], xv[p][i].z, xv[p][i].w);
    }
  }
}

// One super-block's half.
template <bool FIRST, bool MINS = true, bool XG = true>
__device__ __forceinline__ void mma_half(const HalfSb& st, uint32_t scw0, uint32_t scw1, uint32_t mnw0, uint32_t mnw1,
                                         const __half* xs, uint32_t sel, uint32_t sel_mn, uint32_t magic, float t[4],
                                         float u[4]) {
  const HalfSb* s[1] = {&st};
  const uint32_t scw[1][2] = {{scw0, scw1}}, mnw[1][2] = {{mnw0, mnw1}};
  const __half* x[1] = {xs};
  mma_halves<FIRST, 1, MINS, XG>(s, scw, mnw, x, sel, sel_mn, magic, reinterpret_cast<float(*)[4]>(t),
                       reinterpret_cast<float(*)[4]>(u));
}

// Two super-blocks' halves of the same index, interleaved (the tiled layout: one word per row
// holds a sub-block's scale and min, so sw serves as both).
template <bool FIRST, bool MINS = true>
__device__ __forceinline__ void mma_half_pair(const HalfSb* const st[2], const uint32_t sw[2][2],
                                              const __half* const xs[2], uint32_t sel, uint32_t sel_mn, uint32_t magic,
                                              float t[2][4], float u[2][4]) {
  mma_halves<FIRST, 2, MINS>(st, sw, sw, xs, sel, sel_mn, magic, t, u);
}

// The activations' sums of one super-block for lane (g, c) (ops::DeferredNorm::sums16's layout):
// ps: token g's pairs at the super-block's first; .x, .y the halves of sub-block c, .z, .w those
// of sub-block 4 + c, each the f16 pair (hi, lo) of (Σ of the half's 16 values) / 16.
__device__ __forceinline__ uint4 load_sb_sums(const __half* ps) {
  return __ldg(reinterpret_cast<const uint4*>(ps + 8 * (threadIdx.x & 3)));
}

// u = Σ_j m_j·S_j over the super-block's 8 sub-blocks (S_j: Σ x over sub-block j) by two mmas in
// place of the 16 that multiply m by every activation: A = rows g, g + 8's (16 m, 16 m) of
// sub-block c (then 4 + c) in all four of the lane's k, B = the (hi, lo) pairs of the two halves
// (sw: the tiled layout's word per row, m_c in byte 1, m_{4+c} in byte 3). 16 m = 16 (1024 + m) −
// 16384 by one f16 FMA, exact (f16 spacing in [16384, 32768) is 16), so A·B = m·S with every
// product exact in fp32 (10 x 11 bits). u's layout is mma_halves'.
__device__ __forceinline__ void mins_from_sums(uint32_t sw_g, uint32_t sw_g8, uint4 s, float u[4]) {
  const __half2 k16 = __float2half2_rn(16.0f), kNeg16384 = __float2half2_rn(-16384.0f);
  auto mins16 = [&](uint32_t w, uint32_t sel) {
    return as_u32(__hfma2(as_h2(__byte_perm(w, 0x64u, sel)), k16, kNeg16384));
  };
  const uint32_t mc_g = mins16(sw_g, 0x4141u), mc_g8 = mins16(sw_g8, 0x4141u);    // sub-block c
  const uint32_t m4c_g = mins16(sw_g, 0x4343u), m4c_g8 = mins16(sw_g8, 0x4343u);  // sub-block 4 + c
  mma_16816_z(u, mc_g, mc_g8, mc_g, mc_g8, s.x, s.y);
  mma_16816(u, m4c_g, m4c_g8, m4c_g, m4c_g8, s.z, s.w);
}

// Half 0 of a super-block from st0, half 1 from st1 (xs: half 0's activations), with its scales.
__device__ __forceinline__ void mma_sb(const HalfSb& st0, const HalfSb& st1, const SbScales& sc, const __half* xs,
                                       uint32_t sel, uint32_t magic, float t[4], float u[4]) {
  mma_half<true>(st0, sc.sm[0].x, sc.sm[1].x, sc.sm[0].y, sc.sm[1].y, xs, sel, sel, magic, t, u);
  mma_half<false>(st1, sc.sm[0].z, sc.sm[1].z, sc.sm[0].w, sc.sm[1].w, xs + 128, sel, sel, magic, t, u);
}

// acc += d·t − dmin·u for rows g (acc[0..1]) and g + 8 (acc[2..3]); dd: each row's (d, dmin).
__device__ __forceinline__ void apply_scales(const uint32_t dd[2], const float t[4], const float u[4], float acc[4]) {
  const float2 dm0 = __half22float2(as_h2(dd[0])), dm1 = __half22float2(as_h2(dd[1]));
  acc[0] = fmaf(dm0.x, t[0], fmaf(-dm0.y, u[0], acc[0]));
  acc[1] = fmaf(dm0.x, t[1], fmaf(-dm0.y, u[1], acc[1]));
  acc[2] = fmaf(dm1.x, t[2], fmaf(-dm1.y, u[2], acc[2]));
  acc[3] = fmaf(dm1.x, t[3], fmaf(-dm1.y, u[3], acc[3]));
}


// The end of a kernel whose 4 warps split one 16-row tile's K (the deep kernels of gemv_q4kr.cu
// and gemv_q4kt.cu): y[tok * ld + row] gets the tile's sums for its rows from row0 (those < N),
// or with SWIGLU (rows g: gate rows 8 blockIdx.x + g, rows g + 8: the matching up rows of a
// stacked gate|up [N, K]) the SwiGLU output h [T, N / 2] its rows 8 blockIdx.x ..
// (write_swiglu_sums; row0 and ld unused). Every thread calls it. blk: the block's work index
// (blockIdx.x, or the tile a block that takes several is at). tok_scale: store_tile_sums'.
template <bool SWIGLU>
__device__ __forceinline__ void finish_split_k_tile(const float acc[4], __half* y, int64_t N, int n_tok,
                                                    int64_t row0, int64_t ld, int64_t blk,
                                                    const float* tok_scale = nullptr) {
  __shared__ float red[4][4][32];
  if constexpr (SWIGLU) {  // one tile: red is write_swiglu_sums' [4][1][4][32]
    stash_tile_sums(acc, red);
    write_swiglu_sums<4, 1>(reinterpret_cast<const float (*)[1][4][32]>(red), y, blk * 8, N / 2, n_tok, tok_scale);
  } else {
    store_tile_sums<4>(acc, red, y, row0, N, n_tok, ld, tok_scale);
  }
}

}  // namespace vi::cuda
