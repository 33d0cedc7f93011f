// One head of qk_norm_rope_kv_write (ops/qk_norm_rope_kv_write.h) done by one warp: the
// per-head RMSNorm and partial RoPE of a q or k head, and the store of a k or v head to its
// pool row (int8 with the K Hadamard rotation, or a copy): the op's warp kernel
// (qk_norm_rope_kv_write.cu). Kept in a header of its own so that a kernel folding this work
// into another (tried in decode attention, docs/notes/decode_attention.md) produces the op's bits.
//
// Lane l holds d = l + 32 m for slots m < M (32 M >= D, D <= 256): slot m is element m / 2 of
// thread l + 32 (m % 2) of the 64-thread block of the op's block kernel (norm_threads(D) = 64
// up to D 256), so the lane sums the squares of both of its threads in their order and the two
// warp_sums and their sum are block_sum's: the same bits. Past D the slots hold 0 (they add
// 0 * 0 to a sum >= +0, and the rotation keeps them 0), so any M with 32 M >= D gives the
// same values.
//
// Loads, shuffles and their uses run over all M slots without branches (indices clamped into
// the head, values past D selected away): a branch per slot puts each load's or shuffle's use
// in its own basic block, and the warp then waits out one latency per slot (measured: with a
// branch per slot the op's warp kernel was slower than its block kernel). The frequencies and
// angles run in rolled loops: unrolled per slot, their code made up half the op's kernel (M 8,
// f16, sm_70: 4864 SASS instructions against 2568), and the rolled form ran 0.4-0.55 us a
// launch faster on the H200 (instruction fetch, presumably; not profiled).
#pragma once

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/rope.cuh"

namespace vi::cuda {

// A K or V pool: [n_rows, Hkv, D] of T (scale null) or of int8 with scale [n_rows, Hkv] f32.
struct CachePtrs {
  void* data;
  float* scale;
};

// The size of the power-of-two block of hadamard_rows_smem's split of D (powers of two
// greedily from the front) that holds element d < D: the highest bit where d and D differ,
// which is set in D. 0 past D.
__device__ __forceinline__ int hadamard_block_of(int d, int D) { return d < D ? 1 << (31 - __clz(D ^ d)) : 0; }

// hadamard_rows_smem(x, 1, D, D) on a head held as one warp's slots (see above): each
// element sees the butterflies of its block in hadamard_rows_smem's stage order, a + c and
// a - c of the same operands (h < 32 across lanes by shuffles, h >= 32 between a lane's
// slots), then the same 1/sqrt(n) scale, so the same bits. hnorm: 1/sqrtf(D) computed as
// hadamard_rows_smem computes it, used when D is a power of two (one block).
template <int M>
__device__ __forceinline__ void hadamard_warp(float (&x)[M], int D, float hnorm) {
  const int lane = threadIdx.x & 31;
  int blk[M];
#pragma unroll
  for (int m = 0; m < M; ++m) blk[m] = hadamard_block_of(lane + 32 * m, D);
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    if (h >= D) break;  // between stages: the same for every lane
    float o[M];  // all shuffles first, then their uses: their latencies overlap
#pragma unroll
    for (int m = 0; m < M; ++m) o[m] = __shfl_xor_sync(0xffffffffu, x[m], h);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float y = (lane & h) ? o[m] - x[m] : x[m] + o[m];
      x[m] = h < blk[m] ? y : x[m];
    }
  }
#pragma unroll
  for (int hm = 1; hm < M; hm *= 2) {  // h = 32 hm: slot m with slot m + hm
    if (64 * hm > D) break;           // no block of 2 h
#pragma unroll
    for (int m = 0; m < M; ++m)
      if ((m & hm) == 0) {
        const float a = x[m], c = x[m + hm];
        const bool on = 32 * hm < blk[m];
        x[m] = on ? a + c : a;
        x[m + hm] = on ? a - c : c;
      }
  }
  if ((D & (D - 1)) == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) x[m] *= hnorm;
  } else {
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (blk[m] > 0) x[m] *= 1.0f / sqrtf(static_cast<float>(blk[m]));  // as the CPU computes it
  }
}

// The head vector hk of pool row r from a head held as one warp's slots (values of T, 0 past
// D): a copy, or int8 with its scale after the K rotation (rotate); the rotation and the max in
// registers (fmaxf of the same values in any order, and of the zeros past D, which the
// rotation keeps: the same max as the op's block kernel).
template <class T, int M>
__device__ __forceinline__ void store_head_warp(float (&x)[M], const CachePtrs& c, int64_t r, int Hkv, int hk, int D,
                                                bool rotate, float hnorm) {
  const int lane = threadIdx.x & 31;
  const int64_t off = (r * Hkv + hk) * D;
  if (c.scale == nullptr) {
    T* dst = static_cast<T*>(c.data) + off;
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (lane + 32 * m < D) dst[lane + 32 * m] = from_f32<T>(x[m]);
    return;
  }
  if (rotate) hadamard_warp<M>(x, D, hnorm);
  float amax = 0.0f;
#pragma unroll
  for (int m = 0; m < M; ++m) amax = fmaxf(amax, fabsf(x[m]));
  amax = warp_max(amax);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int8_t q[M];
#pragma unroll
  for (int m = 0; m < M; ++m) q[m] = static_cast<int8_t>(fminf(fmaxf(rintf(x[m] * inv), -127.0f), 127.0f));
  int8_t* dst = static_cast<int8_t*>(c.data) + off;
#pragma unroll
  for (int m = 0; m < M; ++m)
    if (lane + 32 * m < D) dst[lane + 32 * m] = q[m];
  if (lane == 0) c.scale[r * Hkv + hk] = amax / 127.0f;
}

// A head of D values of T into the warp's slots (0 past D), as it is (a v head).
template <class T, int M>
__device__ __forceinline__ void load_head_warp(const T* src, int D, float (&x)[M]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const float xv = to_f32(src[min(lane + 32 * m, D - 1)]);
    x[m] = lane + 32 * m < D ? xv : 0.0f;
  }
}

// The RoPE partner (d ± rot_dim/2) of a rotated element d < 2 half.
__device__ __forceinline__ int rope_partner(int d, int half) { return d < half ? d + half : d - half; }

// What norm_rope_head needs that depends on no input, for norm weights w [D] (loaded before a
// PDL wait: nothing a kernel of the step writes): the weight of each slot (wr) and, for rotated
// slots, of the RoPE partner (wp; w_offset is added later, so these loads overlap the wait),
// and the frequencies of the pairs (freq). Plain arrays, not a struct: ptxas kept a struct of
// them in local memory.
// Angle slots: where the pairs are a multiple of 32 (the 27B's rot 64), slot m + hs has slot
// m's pairs and only the first hs slots compute angles (one a lane at rot 64); else each of
// the slots that hold rotated dims computes its own.
__device__ __forceinline__ int rope_angle_shift(int rot_dim) { return (rot_dim / 2) % 32 == 0 ? rot_dim / 64 : 0; }
__device__ __forceinline__ int rope_angle_slots(int rot_dim) {
  const int hs = rope_angle_shift(rot_dim);
  return hs > 0 ? hs : (rot_dim + 31) / 32;
}

template <int M>
__device__ __forceinline__ void norm_rope_consts(const float* w, int D, int rot_dim, float theta, float (&wr)[M],
                                                 float (&wp)[M], float (&freq)[M]) {
  const int lane = threadIdx.x & 31, half = rot_dim / 2, R = 2 * half;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int d = lane + 32 * m;
    wr[m] = w[min(d, D - 1)];
    wp[m] = 32 * m < R ? w[rope_partner(min(d, R - 1), half)] : 0.0f;
    freq[m] = 0.0f;
  }
  const int n_ang = rope_angle_slots(rot_dim);
#pragma unroll 1  // one copy of powf, the result selected into its slot (see above)
  for (int i = 0; i < n_ang; ++i) {
    const int d = lane + 32 * i;
    const float f = rope_inv_freq(d < half ? d : d - half, rot_dim, theta);
#pragma unroll
    for (int m = 0; m < M; ++m) freq[m] = m == i ? f : freq[m];
  }
}

// A q or k head [D] of T normed (rms_norm with weights + w_offset, stored in T) and rotated
// over its first rot_dim dims at position pos (each pair stored in T, as rope stores it): the
// values of the unfused rms_norm then rope, in the warp's slots (0 past D).
// RoPE without a barrier: a lane loads the partners of its rotated elements from memory along
// with its own (the same round trip) and normalises them itself, with the same arithmetic as
// their owners, then computes only its own half of the pair with rope_rotate. The angle of
// pair j is computed as the rope kernel computes it (rope_inv_freq, then rope_cos_sin_at).
// wr, wp, freq: norm_rope_consts' for the head's weights.
template <class T, int M>
__device__ __forceinline__ void norm_rope_head(const T* head, const float (&wr)[M], const float (&wp)[M],
                                               const float (&freq)[M], int D, int rot_dim, float eps, float w_offset,
                                               int32_t pos, float (&x)[M]) {
  const int lane = threadIdx.x & 31, half = rot_dim / 2, R = 2 * half;
  const int hs = rope_angle_shift(rot_dim), n_ang = rope_angle_slots(rot_dim);
  T hr[M], pr[M];  // the head's values, and the rotated slots' partners
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int d = lane + 32 * m;
    hr[m] = head[min(d, D - 1)];
    if (32 * m < R) pr[m] = head[rope_partner(min(d, R - 1), half)];
  }
  float cs[M] = {}, sn[M] = {};
#pragma unroll 1
  for (int i = 0; i < n_ang; ++i) {  // one copy of the angle code, as for the frequencies
    float f = freq[0], c, sv;
#pragma unroll
    for (int m = 1; m < M; ++m) f = m == i ? freq[m] : f;
    rope_cos_sin_at(pos, f, c, sv);
#pragma unroll
    for (int m = 0; m < M; ++m) cs[m] = m == i ? c : cs[m], sn[m] = m == i ? sv : sn[m];
  }
#pragma unroll
  for (int H = 1; H < M; ++H)  // H constant: a run-time hs would index the arrays (local memory)
    if (hs == H) {
#pragma unroll
      for (int m = H; m < M; ++m) cs[m] = cs[m - H], sn[m] = sn[m - H];
    }
  // rms_norm: the 64-thread block's sums (slot m is element m / 2 of thread lane + 32 (m % 2)).
  float hv[M];
#pragma unroll
  for (int m = 0; m < M; ++m) hv[m] = lane + 32 * m < D ? to_f32(hr[m]) : 0.0f;
  float ss0 = 0.0f, ss1 = 0.0f;
#pragma unroll
  for (int j = 0; j < M / 2; ++j) {
    ss0 += hv[2 * j] * hv[2 * j];
    ss1 += hv[2 * j + 1] * hv[2 * j + 1];
  }
  // block_sum's second step over its two warp sums (the other 30 lanes add +0.0f: exact).
  const float inv = rms_inv(warp_sum(ss0) + warp_sum(ss1), D, eps);
  // y rounded to T as rms_norm stores it; rotated pairs rounded to T as rope stores them.
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int d = lane + 32 * m;
    const float y = to_f32(from_f32<T>((hv[m] * inv) * (wr[m] + w_offset)));
    x[m] = d < D ? y : 0.0f;
    if (32 * m < R) {  // the same for every lane
      const float yp = to_f32(from_f32<T>((to_f32(pr[m]) * inv) * (wp[m] + w_offset)));
      const float yr =
          to_f32(from_f32<T>(d < half ? rope_rotate(y, yp, cs[m], sn[m]).x : rope_rotate(yp, y, cs[m], sn[m]).y));
      x[m] = d < R ? yr : x[m];
    }
  }
}

}  // namespace vi::cuda
