// Pieces shared by the WMMA attention kernels (attention_prefill.cu, attention_decode_tc.cu):
// the tile constants, K/V "pieces" (8 elements of a row) loaded and converted to f16, the
// accumulator-row discovery that lets a warp rescale O, and the per-row online softmax step.
// Device code only; sm_70 features (WMMA 16x16x16).
#pragma once

#include <cuda_fp16.h>
#include <mma.h>

#include <cstdint>

namespace vi::cuda::attn_wmma {

using namespace nvcuda;

constexpr int kBN = 32;  // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdS = kBN + 4;  // floats per S row
constexpr int kLdP = kBN + 8;  // halves per P row
constexpr float kLog2e = 1.4426950408889634f;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int kAccElems = FragC::num_elements;

// A piece: 8 consecutive elements of a K/V row as raw words (16 bytes f16, 8 bytes i8).
template <class T>
struct PieceOf;
template <>
struct PieceOf<__half> {
  using type = uint4;  // 8 halves
};
template <>
struct PieceOf<int8_t> {
  using type = uint2;  // 8 int8
};

// Elements d0 .. d0+8 of a row with D valid values (zeros past D): one vector load when
// `vec` (aligned rows, D % 8 == 0), else element by element.
template <class T>
__device__ __forceinline__ typename PieceOf<T>::type load_piece(const T* __restrict__ row, int d0, int D, bool vec) {
  using P = typename PieceOf<T>::type;
  if (vec && d0 + 8 <= D) return __ldg(reinterpret_cast<const P*>(row + d0));
  __align__(16) T e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = d0 + i < D ? row[d0 + i] : T{};
  return *reinterpret_cast<const P*>(e);
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// A piece as 8 halves: f16 as it is; i8 as scale * int8, the int8 -> float conversion exact
// by byte permute into the mantissa of 2^23 (as the CUDA-core decode kernel does).
__device__ __forceinline__ uint4 piece_to_half(uint4 p, float) { return p; }
__device__ __forceinline__ float i8_at(uint32_t w, int i) {
  const uint32_t x = w ^ 0x80808080u;
  return __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7540u + i)) - 8388736.0f;
}
__device__ __forceinline__ uint4 piece_to_half(uint2 p, float s) {
  return make_uint4(pack_half2(s * i8_at(p.x, 0), s * i8_at(p.x, 1)), pack_half2(s * i8_at(p.x, 2), s * i8_at(p.x, 3)),
                    pack_half2(s * i8_at(p.y, 0), s * i8_at(p.y, 1)), pack_half2(s * i8_at(p.y, 2), s * i8_at(p.y, 3)));
}

// rid[i] = row of element i in every 16x16 fp32 accumulator fragment on this GPU. WMMA leaves
// the layout unspecified (sm_70 and sm_80+ differ): the block writes a matrix of row indices
// into `scratch` (256 floats of shared memory) and each warp loads it as a fragment. Call
// from every thread of the block; scratch is free again when it returns.
__device__ __forceinline__ void accumulator_rows(float* scratch, int rid[kAccElems]) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) scratch[i] = static_cast<float>(i / 16);
  __syncthreads();
  FragC f;
  wmma::load_matrix_sync(f, scratch, 16, wmma::mem_row_major);
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) rid[i] = static_cast<int>(f.x[i]);
}

// One online-softmax step of a row whose 32 keys of the tile are spread 8 per thread over 4
// adjacent lanes: x (scores in exp2 units, masked keys -inf) become exp2(x - m_new), the row's
// running max m_run and sum l_run move on, and the factor that rescales the row's O returns.
// A row that has seen no key yet (m_new = -inf) adds nothing and keeps O as it is; callers
// whose every row sees a key from the first tile on (prefill: key 0 is visible to every row)
// pass NO_KEY_GUARD = false and skip that test (fewer registers in the prefill kernel).
template <bool NO_KEY_GUARD = true>
__device__ __forceinline__ float online_softmax8(float x[8], float& m_run, float& l_run) {
  float mx = -INFINITY;
#pragma unroll
  for (int e = 0; e < 8; ++e) mx = fmaxf(mx, x[e]);
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(m_run, mx);
  const bool none = NO_KEY_GUARD && m_new == -INFINITY;
  const float corr = none ? 1.0f : exp2f(m_run - m_new);
  float sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    x[e] = none ? 0.0f : exp2f(x[e] - m_new);
    sum += x[e];
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  l_run = l_run * corr + sum;
  m_run = m_new;
  return corr;
}

}  // namespace vi::cuda::attn_wmma
