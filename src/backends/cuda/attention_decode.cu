// Split-KV decode attention (attention_decode.cuh): the split kernel and the combine kernel.
//
// Work split inside a block (8 warps): the R query rows form row groups of 8 (one per warp
// row), the warps of a row group share the keys of the split round-robin in batches of 8.
// A lane owns 8 consecutive head dims (D <= 256), so one batch is one 16-byte (f16) load
// per lane per key; warps of other row groups read the same rows again from L1.
// Per batch and row: the 8 partial dot products are reduced with a reduce-scatter
// (9 shuffles for 8 keys instead of 40), after which lane l holds the score of key l / 4.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/kv_quant.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/workspace.cuh"

namespace vi::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 8;
constexpr int kBatch = 8;  // keys a warp scores at once (one per 4-lane group after the reduce)

// One lane's DPL elements of a K/V row, kept as raw 32-bit words so they stay in registers
// (an address-taken local array of halves could be placed in local memory).
template <class TKV, int DPL>
struct Seg {
  static constexpr int kWords = DPL * static_cast<int>(sizeof(TKV)) / 4;
  uint32_t w[kWords];
  __device__ __forceinline__ float get(int i) const {
    if constexpr (sizeof(TKV) == 4) {
      return __uint_as_float(w[i]);
    } else if constexpr (sizeof(TKV) == 2) {
      return __half2float(__ushort_as_half(static_cast<unsigned short>(w[i / 2] >> (16 * (i % 2)))));
    } else {
      return s8_biased_to_f32(w[i / 4] ^ 0x80808080u, i % 4);
    }
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < kWords; ++i) w[i] = 0;
  }
};

__device__ __forceinline__ uint32_t raw_bits(float x) { return __float_as_uint(x); }
__device__ __forceinline__ uint32_t raw_bits(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ uint32_t raw_bits(int8_t x) { return static_cast<uint8_t>(x); }

// Loads this lane's DPL elements (dims lane*DPL ..) of one K/V row; zeros where d >= D.
// vec: the row and D allow aligned vector loads.
template <class TKV, int DPL>
__device__ __forceinline__ void load_seg(const TKV* __restrict__ row, int lane, int D, bool vec, Seg<TKV, DPL>& s) {
  constexpr int NW = Seg<TKV, DPL>::kWords;
  const int d0 = lane * DPL;
  if (vec && d0 + DPL <= D) {
    const uint32_t* p = reinterpret_cast<const uint32_t*>(row + d0);
    if constexpr (NW % 4 == 0) {
#pragma unroll
      for (int i = 0; i < NW / 4; ++i) {
        const uint4 x = __ldg(reinterpret_cast<const uint4*>(p) + i);
        s.w[4 * i] = x.x, s.w[4 * i + 1] = x.y, s.w[4 * i + 2] = x.z, s.w[4 * i + 3] = x.w;
      }
    } else if constexpr (NW == 2) {
      const uint2 x = __ldg(reinterpret_cast<const uint2*>(p));
      s.w[0] = x.x, s.w[1] = x.y;
    } else {
      s.w[0] = __ldg(p);
    }
  } else {
    constexpr int per = 4 / static_cast<int>(sizeof(TKV)) > 0 ? 4 / static_cast<int>(sizeof(TKV)) : 1;
    s.zero();
#pragma unroll
    for (int i = 0; i < DPL; ++i)
      if (d0 + i < D) s.w[i / per] |= raw_bits(row[d0 + i]) << (8 * sizeof(TKV) * (i % per));
  }
}

// Reduce-scatter of 8 per-lane partial sums over the warp: afterwards every lane holds the
// full sum of element (lane >> 2).
__device__ __forceinline__ float reduce_scatter8(float (&p)[8], int lane) {
  const bool b4 = lane & 16, b3 = lane & 8, b2 = lane & 4;
  float h[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float send = b4 ? p[i] : p[i + 4], keep = b4 ? p[i + 4] : p[i];
    h[i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
  }
  float q2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float send = b3 ? h[i] : h[i + 2], keep = b3 ? h[i + 2] : h[i];
    q2[i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
  }
  const float send = b2 ? q2[0] : q2[1], keep = b2 ? q2[1] : q2[0];
  float x = keep + __shfl_xor_sync(0xffffffffu, send, 4);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x;
}

// Over the 8 keys of a batch (lane bits 2..4), each value replicated on 4 lanes.
__device__ __forceinline__ float batch_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 16));
}
__device__ __forceinline__ float batch_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  v += __shfl_xor_sync(0xffffffffu, v, 8);
  return v + __shfl_xor_sync(0xffffffffu, v, 16);
}

struct SplitParams {
  const int32_t* table;
  int64_t block_size;
  const float* k_scale;
  const float* v_scale;
  int T, Hq, Hkv, D, G, R;
  const int32_t* q_pos;  // device position of query 0 (null: q_pos0)
  int64_t q_pos0, keys_per_split;
  float scale;
  int row_groups;  // 1, 2, 4 or 8; the other warps split the keys
  bool rotate_q, vec;
  bool batch_in_block;  // the kBatch keys of a batch sit in one cache block (consecutive rows)
  float* part_acc;  // [n_splits, T * Hq, D] unnormalised (null: one split, write out)
  float* part_ml;   // [n_splits, T * Hq, 2] (max, sum)
};

// Dynamic shared memory: qs [R][32 * DPL] f32 (the pre-scaled, maybe rotated queries),
// reused at the end for the combined accumulator.
template <class TQ, class TK, class TV, int DPL>
__global__ void __launch_bounds__(kThreads) decode_split_kernel(const TQ* __restrict__ q, const TK* __restrict__ k,
                                                                const TV* __restrict__ v, TQ* __restrict__ out,
                                                                SplitParams P) {
  extern __shared__ float qs[];
  __shared__ float sm_m[kWarps][kDecodeMaxRows], sm_l[kWarps][kDecodeMaxRows];
  pdl_wait();
  pdl_trigger();
  constexpr int LD = 32 * DPL;
  const int split = blockIdx.x, hk = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int R = P.R, D = P.D;
  const int kg = kWarps / P.row_groups, rgi = warp / kg, kgi = warp % kg;

  // Query rows r = t * G + g (token t, query head hk * G + g), pre-scaled, zero-padded to LD.
  for (int idx = threadIdx.x; idx < R * LD; idx += kThreads) {
    const int r = idx / LD, d = idx % LD, t = r / P.G, g = r % P.G;
    qs[idx] = d < D ? to_f32(q[(int64_t(t) * P.Hq + hk * P.G + g) * D + d]) * P.scale : 0.0f;
  }
  __syncthreads();
  if (P.rotate_q) hadamard_rows_smem(qs, R, LD, D);

  // The true key count comes from the device position; a split past it reads nothing and
  // leaves an empty partial (max -inf, sum 0) that the combine weighs 0.
  const int64_t q_pos0 = P.q_pos ? int64_t(P.q_pos[0]) : P.q_pos0;
  const int64_t n_keys = q_pos0 + P.T;
  const int64_t s_begin = int64_t(split) * P.keys_per_split;
  const int64_t s_end = min(n_keys, s_begin + P.keys_per_split);
  const int64_t kv_stride = int64_t(P.Hkv) * D;
  // Positions fit in 32 bits (checked on the host): 32-bit division, once per batch when a
  // batch of keys never straddles two blocks (block size a multiple of kBatch).
  const int bs = static_cast<int>(P.block_size);
  auto kv_row = [&](int64_t s) -> int64_t {
    if (!P.table) return s;
    const int s32 = static_cast<int>(s), b = s32 / bs;
    return int64_t(P.table[b]) * bs + (s32 - b * bs);
  };

  float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][DPL];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[r][i] = 0.0f;
  }
  const int r0 = rgi * kRowsPerWarp;

  for (int64_t kb = s_begin + int64_t(kgi) * kBatch; kb < s_end; kb += int64_t(kg) * kBatch) {
    Seg<TK, DPL> kseg[kBatch];
    Seg<TV, DPL> vseg[kBatch];
    const int64_t row0 = P.batch_in_block ? kv_row(kb) : 0;  // cache row of key kb
    float ks_j = 1.0f, vs_j = 1.0f;  // scales of key kb + lane / 4 (i8)
    {
      const int64_t sj = kb + (lane >> 2);
      if (sj < s_end && (P.k_scale || P.v_scale)) {
        const int64_t row = (P.batch_in_block ? row0 + (lane >> 2) : kv_row(sj)) * P.Hkv + hk;
        if (P.k_scale) ks_j = P.k_scale[row];
        if (P.v_scale) vs_j = P.v_scale[row];
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (kb + j < s_end) {
        const int64_t base = (P.batch_in_block ? row0 + j : kv_row(kb + j)) * kv_stride + int64_t(hk) * D;
        load_seg<TK, DPL>(k + base, lane, D, P.vec, kseg[j]);
        load_seg<TV, DPL>(v + base, lane, D, P.vec, vseg[j]);
      } else {
        kseg[j].zero();
        vseg[j].zero();
      }
    }
    const int64_t s_lane = kb + (lane >> 2);  // the key whose score this lane ends up with
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const int r = r0 + rr;
      if (r >= R) break;  // warp-uniform
      const int t = r / P.G;
      const float* qr = qs + r * LD + lane * DPL;
      float qv[DPL];
#pragma unroll
      for (int i = 0; i < DPL; ++i) qv[i] = qr[i];
      float part[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) s = fmaf(qv[i], kseg[j].get(i), s);
        part[j] = s;
      }
      const float dot = reduce_scatter8(part, lane) * ks_j;
      const bool valid = s_lane < s_end && s_lane <= q_pos0 + t;
      const float sc = valid ? dot : -INFINITY;
      const float m_new = fmaxf(m[rr], batch_max(sc));
      if (m_new == -INFINITY) continue;  // nothing visible yet for this row (warp-uniform)
      const float corr = __expf(m[rr] - m_new);
      const float p = valid ? __expf(sc - m_new) : 0.0f;
      l[rr] = l[rr] * corr + batch_sum(p);
      m[rr] = m_new;
      const float pv = p * vs_j;
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[rr][i] *= corr;
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const float pj = __shfl_sync(0xffffffffu, pv, j * 4);
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[rr][i] = fmaf(pj, vseg[j].get(i), acc[rr][i]);
      }
    }
  }

  // Combine the kg warps of each row group in shared memory (fixed order: deterministic).
  if (lane == 0)
    for (int rr = 0; rr < kRowsPerWarp && r0 + rr < R; ++rr) sm_m[kgi][r0 + rr] = m[rr], sm_l[kgi][r0 + rr] = l[rr];
  __syncthreads();  // also: every warp is done reading qs
  for (int kw = 0; kw < kg; ++kw) {
    if (kgi == kw) {
      for (int rr = 0; rr < kRowsPerWarp && r0 + rr < R; ++rr) {
        const int r = r0 + rr;
        float M = -INFINITY;
        for (int w = 0; w < kg; ++w) M = fmaxf(M, sm_m[w][r]);
        const float wgt = m[rr] == -INFINITY ? 0.0f : __expf(m[rr] - M);
        float* dst = qs + r * LD + lane * DPL;
#pragma unroll
        for (int i = 0; i < DPL; ++i) dst[i] = (kw == 0 ? 0.0f : dst[i]) + wgt * acc[rr][i];
      }
    }
    __syncthreads();
  }
  // Row totals, then write: the final output (one split) or this split's partial.
  for (int idx = threadIdx.x; idx < R * D; idx += kThreads) {
    const int r = idx / D, d = idx % D, t = r / P.G, g = r % P.G;
    float M = -INFINITY, L = 0.0f;
    for (int w = 0; w < kg; ++w) M = fmaxf(M, sm_m[w][r]);
    if (M != -INFINITY)
      for (int w = 0; w < kg; ++w) L += sm_m[w][r] == -INFINITY ? 0.0f : sm_l[w][r] * __expf(sm_m[w][r] - M);
    const int64_t orow = int64_t(t) * P.Hq + hk * P.G + g;
    const float a = qs[r * LD + d];
    if (P.part_acc == nullptr) {
      out[orow * D + d] = from_f32<TQ>(a / L);
    } else {
      const int64_t n_rows = int64_t(P.T) * P.Hq;
      P.part_acc[(int64_t(split) * n_rows + orow) * D + d] = a;
      if (d == 0) {
        P.part_ml[(int64_t(split) * n_rows + orow) * 2] = M;
        P.part_ml[(int64_t(split) * n_rows + orow) * 2 + 1] = L;
      }
    }
  }
}

constexpr int kCombineThreads = 128;

// One block per output row: weights exp(M_s - M) per split, then the weighted sum.
template <class TQ>
__global__ void __launch_bounds__(kCombineThreads)
    decode_combine_kernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml, int n_splits,
                          int64_t n_rows, int D, TQ* __restrict__ out) {
  extern __shared__ float w[];  // [n_splits]
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  float M = -INFINITY;
  for (int s = threadIdx.x; s < n_splits; s += kCombineThreads) M = fmaxf(M, part_ml[(s * n_rows + row) * 2]);
  M = block_max(M, red);
  float L = 0.0f;
  for (int s = threadIdx.x; s < n_splits; s += kCombineThreads) {
    const float ms = part_ml[(s * n_rows + row) * 2];
    const float ws = ms == -INFINITY ? 0.0f : __expf(ms - M);
    w[s] = ws;
    L += ws * part_ml[(s * n_rows + row) * 2 + 1];
  }
  L = block_sum(L, red);  // its barriers also publish w
  const float inv = 1.0f / L;
  for (int d = threadIdx.x; d < D; d += kCombineThreads) {
    float a = 0.0f;
    for (int s = 0; s < n_splits; ++s) a = fmaf(w[s], part_acc[(s * n_rows + row) * D + d], a);
    out[row * D + d] = from_f32<TQ>(a * inv);
  }
}

// The combine with every split load of a thread in flight at once (DecodeTuning::fast_combine).
// Why: the kernel above gives each thread a head dim and walks the splits one after another,
// a chain of dependent-issue L2 reads (64 splits at 8K) on 24 blocks for T = 1: ~8 us on the
// H200 for 1.5 MB that sits in L2. Here block `row` has SG x D4 threads: thread (sg, dq)
// holds dims 4 dq .. 4 dq + 3 (float4) of splits sg, sg + SG, .., loads 8 of them (acc and
// max/sum) before using any, and keeps its own running max, sum and sum of weighted acc; the
// SG groups are merged once in shared memory. D % 4 == 0 (the host checks), so every acc row
// (D floats) starts on 16 bytes. Empty partials (max -inf) weigh 0. Dynamic shared memory:
// float4 acc [SG][D4], then float max [SG], sum [SG].
// gate (or null): out = the row's value rounded to TQ, times sigmoid(gate), rounded again:
// binary_kernel's sigmoid_mul on what this kernel would have stored, so the same bits as the
// two kernels, one launch fewer. Its 4 values a storing thread loads with the partials.
// trigger_early: the next kernel may launch right after this one's wait. A combine that applies
// the gate does not (false): its successor is then the output projection, whose 320 blocks,
// launched beside the combine's, made the combine and two GEMVs after it slower (H100, 2026-12-06:
// +0.10 ms a round); launched as the combine exits, as after the sigmoid_mul kernel, they did not.
template <class TQ>
__global__ void __launch_bounds__(512)
    decode_combine_fast_kernel(const float* __restrict__ part_acc, const float* __restrict__ part_ml, int n_splits,
                               int64_t n_rows, int D, int SG, TQ* __restrict__ out, const TQ* __restrict__ gate,
                               bool trigger_early) {
  extern __shared__ float4 sm_a[];
  pdl_wait();
  if (trigger_early) pdl_trigger();
  constexpr int U = 8;  // splits in flight per thread
  const int D4 = D / 4, tid = threadIdx.x, dq = tid % D4, sg = tid / D4;
  float gv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (gate != nullptr && tid < D4) {
    const TQ* g = gate + blockIdx.x * int64_t(D) + 4 * tid;
#pragma unroll
    for (int i = 0; i < 4; ++i) gv[i] = to_f32(g[i]);
  }
  float* sm_m = reinterpret_cast<float*>(sm_a + SG * D4);
  float* sm_l = sm_m + SG;
  const int64_t row = blockIdx.x;
  const float4* acc4 = reinterpret_cast<const float4*>(part_acc);
  const float2* ml2 = reinterpret_cast<const float2*>(part_ml);
  float m = -INFINITY, l = 0.0f;
  float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int s0 = sg; s0 < n_splits; s0 += U * SG) {
    float4 x[U];
    float2 ml[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int s = s0 + u * SG;
      if (s < n_splits) {
        const int64_t r = int64_t(s) * n_rows + row;
        ml[u] = __ldg(ml2 + r);
        x[u] = __ldg(acc4 + r * D4 + dq);
      } else {
        ml[u] = make_float2(-INFINITY, 0.0f);
        x[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float ms = ml[u].x;
      if (ms == -INFINITY) continue;  // an empty partial (also: past n_splits)
      const float mn = fmaxf(m, ms);
      const float cf = __expf(m - mn), w = __expf(ms - mn);  // m -inf: cf 0
      a.x = a.x * cf + w * x[u].x;
      a.y = a.y * cf + w * x[u].y;
      a.z = a.z * cf + w * x[u].z;
      a.w = a.w * cf + w * x[u].w;
      l = l * cf + w * ml[u].y;
      m = mn;
    }
  }
  // m and l depend on sg only (the same splits in the same order for every dq).
  if (dq == 0) sm_m[sg] = m, sm_l[sg] = l;
  sm_a[sg * D4 + dq] = a;
  __syncthreads();
  if (tid < D4) {
    float M = -INFINITY;
    for (int j = 0; j < SG; ++j) M = fmaxf(M, sm_m[j]);
    float L = 0.0f;
    float4 A = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int j = 0; j < SG; ++j) {
      const float f = sm_m[j] == -INFINITY ? 0.0f : __expf(sm_m[j] - M);
      const float4 aj = sm_a[j * D4 + tid];
      L += f * sm_l[j];
      A.x += f * aj.x, A.y += f * aj.y, A.z += f * aj.z, A.w += f * aj.w;
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
    const float r[4] = {A.x * inv, A.y * inv, A.z * inv, A.w * inv};
    TQ* o = out + row * D + 4 * tid;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[i] = gate != nullptr ? from_f32<TQ>(to_f32(from_f32<TQ>(r[i])) * sigmoid_f(gv[i])) : from_f32<TQ>(r[i]);
  }
}

template <class F>
void dispatch_kv(DType t, const char* which, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(__half{}); break;
    case DType::I8: f(int8_t{}); break;
    default: VI_FAIL("decode attention on cuda: {} dtype {} is not supported (f32, f16, i8)", which, dtype_name(t));
  }
}

int row_groups_for(int R) {
  int rg = 1;
  while (rg * kRowsPerWarp < R) rg *= 2;
  return rg;
}

}  // namespace

namespace {
// DecodeTuning: all on unless VI_DECODE_TUNING=0; VI_DECODE_NARROW=0 turns narrow_rows off
// alone, VI_DECODE_PRE_WAIT=0 pre_wait_copies, VI_DECODE_SPLIT_V=0 split_v, VI_DECODE_RUNS=0
// run_copies; split_k is off unless VI_DECODE_SPLIT_K=1 (read once, at the first use).
DecodeTuning initial_tuning() {
  const bool on = env_switch_on("VI_DECODE_TUNING");
  return DecodeTuning{on,
                      on,
                      on,
                      on,
                      on && env_switch_on("VI_DECODE_NARROW"),
                      on && env_switch_on("VI_DECODE_PRE_WAIT"),
                      on && env_switch_on("VI_DECODE_SPLIT_V"),
                      on && env_switch_forced("VI_DECODE_SPLIT_K") == 1,
                      on && env_switch_on("VI_DECODE_RUNS")};
}
uint16_t tuning_to_bits(const DecodeTuning& t) {
  return static_cast<uint16_t>(t.balanced_splits | (t.fast_combine << 1) | (t.pdl << 2) | (t.lean_share_step << 3) |
                               (t.narrow_rows << 4) | (t.pre_wait_copies << 5) | (t.split_v << 6) |
                               (t.split_k << 7) | (t.run_copies << 8));
}
std::atomic<uint16_t>& tuning_bits() {
  static std::atomic<uint16_t> bits{tuning_to_bits(initial_tuning())};
  return bits;
}
std::atomic<int> g_tc_min_rows{kDecodeTcMinRowsDefault};
// VI_DECODE_TC_MIN_KEYS=N in the environment (read once, at the first use) replaces both
// default key thresholds (A/B runs).
int64_t env_tc_min_keys(int64_t fallback) {
  const char* e = std::getenv("VI_DECODE_TC_MIN_KEYS");
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  VI_CHECK(end != nullptr && *end == '\0' && v >= 0, "VI_DECODE_TC_MIN_KEYS='{}' is not a key count", e);
  return static_cast<int64_t>(v);
}
// The key thresholds (decode_tc_min_keys): initialised at the first use, so a malformed
// VI_DECODE_TC_MIN_KEYS fails that call with its message rather than the program's start.
std::atomic<int64_t>& tc_min_keys(bool warps) {
  static std::atomic<int64_t> keys{env_tc_min_keys(kDecodeTcMinKeysDefault)};
  static std::atomic<int64_t> keys_warps{env_tc_min_keys(kDecodeTcMinKeysWarpsDefault)};
  return warps ? keys_warps : keys;
}
}  // namespace

DecodeTuning decode_tuning() {
  const uint16_t b = tuning_bits().load(std::memory_order_relaxed);
  return DecodeTuning{(b & 1) != 0,  (b & 2) != 0,  (b & 4) != 0,   (b & 8) != 0,  (b & 16) != 0,
                      (b & 32) != 0, (b & 64) != 0, (b & 128) != 0, (b & 256) != 0};
}
void set_decode_tuning(const DecodeTuning& t) {
  tuning_bits().store(tuning_to_bits(t), std::memory_order_relaxed);
}

int decode_tc_min_rows() { return g_tc_min_rows.load(std::memory_order_relaxed); }
int64_t decode_tc_min_keys(bool warps) { return tc_min_keys(warps).load(std::memory_order_relaxed); }
void set_decode_tc_min_rows(int rows) { g_tc_min_rows.store(rows, std::memory_order_relaxed); }
void set_decode_tc_min_keys(int64_t keys) {
  tc_min_keys(false).store(keys, std::memory_order_relaxed);
  tc_min_keys(true).store(keys, std::memory_order_relaxed);
}
void reset_decode_tc_min_keys() {
  tc_min_keys(false).store(env_tc_min_keys(kDecodeTcMinKeysDefault), std::memory_order_relaxed);
  tc_min_keys(true).store(env_tc_min_keys(kDecodeTcMinKeysWarpsDefault), std::memory_order_relaxed);
}

bool decode_tc_takes(const ops::Context& ctx, const DecodeArgs& a) {
  if (!decode_tc_fits(a)) return false;
  if (a.T * (a.Hq / a.Hkv) >= decode_tc_min_rows()) return true;  // verification rows, any bound
  const int64_t n_keys = a.kv_bound > 0 ? a.kv_bound : a.q_pos0 + a.T;  // the launch's bound
  return n_keys >= decode_tc_min_keys(decode_tc_warps_fits(ctx, a));
}

bool decode_attention_fits(int64_t T, int64_t Hq, int64_t Hkv, int64_t D) {
  return T >= 1 && T <= kDecodeMaxT && Hkv > 0 && Hq % Hkv == 0 && T * (Hq / Hkv) <= kDecodeMaxRows &&
         D >= 1 && D <= kDecodeMaxDim;
}

namespace {
std::atomic<int>& gate_fused_forced() {
  static std::atomic<int> forced{-1};
  return forced;
}
std::atomic<uint64_t> g_gate_fused_calls{0};
}  // namespace

uint64_t decode_gate_fused_calls() { return g_gate_fused_calls.load(std::memory_order_relaxed); }

bool decode_gate_fused() {
  static const bool by_default = env_switch_on("VI_DECODE_GATE");
  const int f = gate_fused_forced().load(std::memory_order_relaxed);
  return f < 0 ? by_default : f != 0;
}
void set_decode_gate_fused(int on) { gate_fused_forced().store(on < 0 ? -1 : on != 0, std::memory_order_relaxed); }

bool decode_attention(const ops::Context& ctx, const DecodeArgs& a) {
  VI_CHECK(decode_attention_fits(a.T, a.Hq, a.Hkv, a.D),
           "decode attention on cuda: T={} Hq={} Hkv={} D={} is outside T <= {}, T*Hq/Hkv <= {}, D <= {}", a.T,
           a.Hq, a.Hkv, a.D, kDecodeMaxT, kDecodeMaxRows, kDecodeMaxDim);
  VI_CHECK((a.k_dtype == DType::I8) == (a.k_scale != nullptr) && (a.v_dtype == DType::I8) == (a.v_scale != nullptr),
           "decode attention on cuda: i8 K/V need their scales (and only i8 has them)");
  const int G = static_cast<int>(a.Hq / a.Hkv), R = static_cast<int>(a.T) * G;
  const int rg = row_groups_for(R), kg = kWarps / rg;
  const int64_t n_keys = a.kv_bound > 0 ? a.kv_bound : a.q_pos0 + a.T;  // the launch's bound
  VI_CHECK(n_keys >= a.T && n_keys < INT32_MAX, "decode attention on cuda: {} keys do not fit 32-bit positions",
           n_keys);
  const bool tc = decode_tc_takes(ctx, a);

  // Splits: about two blocks per SM over all KV heads, but each split long enough that its
  // partial (R * D floats written, then read) stays a few percent of the K/V it reads. The
  // tensor-core kernels work in tiles of 32 keys, and their cost per key does not grow with
  // R; splits of 128 keys (4 tiles; the partial ~10% of an i8 split's bytes at T = 1) let an
  // 8K context fill two blocks on each of the H200's 132 SMs (256 blocks of 4 KV heads).
  const int64_t align = tc ? 32 : kBatch;
  int n_splits = a.n_splits;
  if (n_splits <= 0) {
    const int64_t want = std::max<int64_t>(1, (2 * current_device().sm_count + a.Hkv - 1) / a.Hkv);
    const int64_t min_keys =
        tc ? 128 : std::max<int64_t>({int64_t(4) * kBatch * kg, int64_t(16) * R, 128});
    n_splits = static_cast<int>(std::clamp<int64_t>((n_keys + min_keys - 1) / min_keys, 1, want));
  }
  int64_t keys_per_split = (n_keys + n_splits - 1) / n_splits;
  keys_per_split = (keys_per_split + align - 1) / align * align;
  n_splits = static_cast<int>((n_keys + keys_per_split - 1) / keys_per_split);

  const DecodeTuning tuning = decode_tuning();
  const int64_t n_rows = a.T * a.Hq;
  // One split writes the output itself: no partials. More go to this thread's workspace, not to
  // a Scratch: in a recorded step an allocation and its free are graph nodes on both sides of
  // attention, where the kernels before and after could not overlap it (workspace.cuh).
  const size_t part_floats = n_splits > 1 ? static_cast<size_t>(n_splits) * n_rows * (a.D + 2) : 0;
  float* part = part_floats ? static_cast<float*>(thread_workspace(ctx, WorkspaceSlot::kDecodeAttentionPartials,
                                                                   part_floats * sizeof(float)))
                            : nullptr;
  float* part_acc = part;
  float* part_ml = part ? part + static_cast<size_t>(n_splits) * n_rows * a.D : nullptr;
  // The fast combine applies the gate where there is one (and the switch lets it).
  const bool gate_here = a.gate != nullptr && n_splits > 1 && tuning.fast_combine && a.D % 4 == 0 &&
                         decode_gate_fused();
  if (gate_here) g_gate_fused_calls.fetch_add(1, std::memory_order_relaxed);
  auto combine = [&]() {
    if (n_splits <= 1) return;
    dispatch_act("paged_attention", a.q_dtype, [&](auto qtag) {
      using TQ = decltype(qtag);
      if (tuning.fast_combine && a.D % 4 == 0) {
        // Threads: the D / 4 float4 columns times SG split groups, about 512 in all (8 loads
        // in flight per thread cover 8 * SG splits: 64 at D 256).
        const int D4 = static_cast<int>(a.D / 4);
        const int SG = std::max(1, std::min(512 / D4, n_splits));
        const size_t smem = static_cast<size_t>(SG) * (D4 * sizeof(float4) + 2 * sizeof(float));
        VI_CUDA_CHECK(pdl_launch(decode_combine_fast_kernel<TQ>, static_cast<unsigned>(n_rows),
                                 static_cast<unsigned>(SG * D4), smem, stream_of(ctx), part_acc, part_ml, n_splits,
                                 n_rows, static_cast<int>(a.D), SG, static_cast<TQ*>(a.out),
                                 gate_here ? static_cast<const TQ*>(a.gate) : nullptr,
                                 /*trigger_early=*/!gate_here));
        return;
      }
      VI_CUDA_CHECK(pdl_launch(decode_combine_kernel<TQ>, static_cast<unsigned>(n_rows), kCombineThreads,
                               n_splits * sizeof(float), stream_of(ctx), part_acc, part_ml, n_splits, n_rows,
                               static_cast<int>(a.D), static_cast<TQ*>(a.out)));
    });
  };
  if (tc) {
    decode_split_tc(ctx, a,
                    DecodeSplitPlan{n_splits, keys_per_split, part_acc, part_ml, tuning.balanced_splits});
    combine();
    return gate_here;
  }

  SplitParams P{};
  P.table = a.table;
  P.block_size = a.block_size;
  P.k_scale = a.k_scale;
  P.v_scale = a.v_scale;
  P.T = static_cast<int>(a.T);
  P.Hq = static_cast<int>(a.Hq);
  P.Hkv = static_cast<int>(a.Hkv);
  P.D = static_cast<int>(a.D);
  P.G = G;
  P.R = R;
  P.q_pos = a.q_pos;
  P.q_pos0 = a.q_pos0;
  P.keys_per_split = keys_per_split;
  P.scale = a.scale;
  P.row_groups = rg;
  P.rotate_q = a.k_dtype == DType::I8;
  P.batch_in_block = a.table == nullptr || a.block_size % kBatch == 0;
  P.part_acc = part_acc;
  P.part_ml = part_ml;

  const int DPL = a.D <= 128 ? 4 : 8;
  auto aligned = [&](const void* p, DType t) {
    return reinterpret_cast<uintptr_t>(p) % dtype_row_bytes(t, DPL) == 0;
  };
  P.vec = a.D % DPL == 0 && aligned(a.k, a.k_dtype) && aligned(a.v, a.v_dtype);
  const size_t smem = static_cast<size_t>(R) * 32 * DPL * sizeof(float);
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>(a.Hkv));
  dispatch_act("paged_attention", a.q_dtype, [&](auto qtag) {
    using TQ = decltype(qtag);
    dispatch_kv(a.k_dtype, "K", [&](auto ktag) {
      using TK = decltype(ktag);
      dispatch_kv(a.v_dtype, "V", [&](auto vtag) {
        using TV = decltype(vtag);
        auto launch = [&](auto kernel) {
          opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));
          VI_CUDA_CHECK(pdl_launch(kernel, grid, kThreads, smem, stream_of(ctx), static_cast<const TQ*>(a.q),
                                   static_cast<const TK*>(a.k), static_cast<const TV*>(a.v), static_cast<TQ*>(a.out),
                                   P));
        };
        if (DPL == 4) launch(decode_split_kernel<TQ, TK, TV, 4>);
        else launch(decode_split_kernel<TQ, TK, TV, 8>);
      });
    });
  });
  combine();
  return gate_here;
}

}  // namespace vi::cuda
