// CUDA gdn_decode_step: one block per (value head, sequence). The output norm needs the
// whole head's output, so a block covers all dv value columns (the separate recurrent kernel
// splits a head into blocks of 32 columns): cols = dv rounded up to a warp, at most 128,
// times kDeltaRowGroups row groups; a head wider than 128 columns takes several passes.
// Per pass, as delta_rule_kernel does, token after token of the sequence: each thread holds
// rows rg, rg+4, ... of its column of the fp32 state in registers, decays them, Sᵀk and Sᵀq
// are reduced over the row groups through shared memory; the state goes back after the
// last token. The decay and beta come from a and b through gates_kernel's formula; each
// token's head output is rounded to T (what gated_delta_rule would have stored) into shared
// memory, then normalised, weighted and gated as gated_rms_norm_kernel does, by the thread
// that reads z[e] (so y may alias z).
//
// A decode round (one token per sequence) takes the token kernels (gdn_decode_token_kernel and
// its cluster form), which hold no token loop. More tokens per sequence (the drafts of a verify
// round) take the chunked kernels, whose tokens run in chunks
// of kDecodeStepTokens: the chunk's k, q and gates (and in the cluster kernel v and z) are
// loaded together after pdl_wait, so a verify round pays one round trip per chunk rather
// than per token, and the state (3 MB a layer for the 27B model) is read and written once
// per step, not once per token as separate recurrent launches would.
//
// On sm_90 the cluster kernels split a head over a thread-block cluster of
// kDecodeClusterBlocks blocks instead, each taking a slice of the value columns (the delta
// rule is independent per column), so a round with few heads x sequences (48 for the 27B
// model at one sequence) is spread over more SMs: the state traffic, not arithmetic, bounds
// the step. Per column it runs the same instructions as the single-block kernel (the state
// and the rounded outputs are bit for bit the same); only the norm's sums of squares are
// added in another order: per block, then the blocks' sums in rank order, read from each
// other's shared memory, one pair of cluster barriers per chunk for all its tokens. For the
// head shape of the Qwen3.5 family (dk = dv = 128) the lean kernels further below do the same
// work with a shorter chain after pdl_wait.
#include "backends/cuda/gdn_decode_step.cuh"

#include <algorithm>
#include <atomic>

#include "backends/cuda/device.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn_decode_step.h"

namespace vi::cuda {
namespace {

struct StatePtrs {
  float* p[kDecodeMaxSeqs];  // [Hv, dk, dv] f32 of each sequence of the launch
};

// Columns [e0, e0 + ne) of the rows [0, dk) of a head's state S [dk, dv] f32 into L2, spread
// over the block, before pdl_wait: the state was last touched by this layer a round ago and a
// round of weight streaming has evicted it, so without this its DRAM latency sits on the
// critical path after the wait. prefetch_l2 reads no value (pdl.cuh), so it may run before
// the wait.
__device__ __forceinline__ void prefetch_state(const float* S, int dk, int dv, int e0, int ne) {
  for (int l = 0; l < ne; l += 32)  // the 128-byte lines of a row's slice (32 floats each)
    for (int i = threadIdx.x; i < dk; i += blockDim.x) prefetch_l2(S + int64_t(i) * dv + e0 + l);
}

// One token per sequence (a decode round): the kernels of before the chunked ones below took
// T tokens; at T = 1 those measured 8.3 against these kernels' 6.1 µs a launch (kernel
// trace, 27B shapes, H200), their token loop and staging through shared memory costing
// more than it saves for one token. Same math and results per column.
// The thread's part of column e of a head's state S [dk, dv] f32: rows rg, rg + kDeltaRowGroups,
// ... (R of them) into s, 0 past dk or for a column past dv (live false); and back. Every decode
// step kernel holds the state this way (delta_rule_token's layout).
template <int R>
__device__ __forceinline__ void load_state_column(float (&s)[R], const float* S, int rg, int e, int dk, int dv,
                                                  bool live) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    s[r] = (live && i < dk) ? S[int64_t(i) * dv + e] : 0.0f;
  }
}
template <int R>
__device__ __forceinline__ void store_state_column(const float (&s)[R], float* S, int rg, int e, int dk, int dv,
                                                   bool live) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int i = rg + kDeltaRowGroups * r;
    if (live && i < dk) S[int64_t(i) * dv + e] = s[r];
  }
}

#if CUDART_VERSION >= 12000  // the cluster kernels only
// Before the wait (overlapping the kernel before, gdn_conv_step in a decode round), in both
// cluster kernels: block `part`'s slice of head j's state S and the lines of its constants (the
// head's gate constants, the norm weights of its columns) into L2; all of them were last read a
// round ago. After the wait every load of the block (a, b, k, q, v, z, the state, the
// constants) is issued together and meets L2. Prefetches rather than loads into registers: at
// R = 32 the kernels are at their 128-register bound, and values held across the wait spilled.
[[maybe_unused]] __device__ __forceinline__ void prefetch_cluster_block(const float* S, const float* dt_bias,
                                                                        const float* neg_exp_A, const float* norm_w,
                                                                        int j, int dk, int dv, int part, int cols) {
  prefetch_state(S, dk, dv, part * cols, min(cols, dv - part * cols));
  if (threadIdx.x == 0) {
    prefetch_l2(dt_bias + j);
    prefetch_l2(neg_exp_A + j);
  }
  if (threadIdx.x < cols && threadIdx.x % 32 == 0 && part * cols + static_cast<int>(threadIdx.x) < dv)
    prefetch_l2(norm_w + part * cols + threadIdx.x);
}
#endif

// R: state rows per thread (ceil(dk / kDeltaRowGroups), rounded up to a template size).
// Rows n0 + blockIdx.y of q, k: [N, Hk, dk]; v, z, y: [N, Hv, dv]; a, b: [N, Hv].
template <class T, int R>
__global__ void __launch_bounds__(kDecodeMaxCols* kDeltaRowGroups)
    gdn_decode_token_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ neg_exp_A,
                           const float* __restrict__ dt_bias, const T* z, const float* __restrict__ norm_w, float eps,
                           StatePtrs states, int64_t n0, T* y, int Hk, int Hv, int dk, int dv, int cols, bool tiled) {
  __shared__ float kq[2][kDeltaMaxDk];  // the token's k and q head, fp32
  __shared__ float red_kv[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red_o[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float o_sh[kDecodeMaxDv];  // the head's output, rounded to T
  __shared__ float red[32];
  const int j = blockIdx.x;  // value head
  // Before the wait: the head's state and gate constants (last read a round ago) into L2, as
  // the cluster kernel does.
  float* S = states.p[blockIdx.y] + int64_t(j) * dk * dv;
  prefetch_state(S, dk, dv, 0, dv);
  if (threadIdx.x == 0) {
    prefetch_l2(dt_bias + j);
    prefetch_l2(neg_exp_A + j);
  }
  pdl_wait();
  pdl_trigger();
  const int64_t n = n0 + blockIdx.y;  // token (= sequence) row
  const int col = threadIdx.x % cols, rg = threadIdx.x / cols;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int64_t hj = n * Hv + j;
  const float decay = expf(gdn_decay_gate(to_f32(a[hj]), dt_bias[j], neg_exp_A[j]));
  const float bt = sigmoid_f(to_f32(b[hj]));
  const int64_t qk_off = (n * Hk + hk) * dk;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) {
    kq[0][i] = to_f32(k[qk_off + i]);
    kq[1][i] = to_f32(q[qk_off + i]);
  }
  __syncthreads();
  const T* vh = v + hj * dv;
  for (int c0 = 0; c0 < dv; c0 += cols) {
    const int e = c0 + col;  // value column
    const bool live = e < dv;
    float s[R];
    load_state_column(s, S, rg, e, dk, dv, live);
    delta_rule_token(s, kq, red_kv, red_o, rg, col, dk, decay, [&](float kv) {
      const float vv = live ? to_f32(vh[e]) : 0.0f;
      return bt * (vv - kv);
    });
    // Every read of red_kv comes before the barrier above and every read of red_o before the
    // next pass's first barrier, and the next pass writes each only after that barrier: two
    // barriers per pass suffice.
    if (rg == 0 && live) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
      o_sh[e] = to_f32(from_f32<T>(o));
    }
    store_state_column(s, S, rg, e, dk, dv, live);
  }
  __syncthreads();  // o_sh holds the whole head
  float ss = 0.0f;
  for (int e = threadIdx.x; e < dv; e += blockDim.x) ss += o_sh[e] * o_sh[e];
  const float f = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(dv) + eps);
  const T* zh = z + hj * dv;
  T* yh = y + hj * dv;
  for (int e = threadIdx.x; e < dv; e += blockDim.x)
    yh[e] = from_f32<T>(norm_w[e] * (o_sh[e] * f) * silu_f(to_f32(zh[e])));
}

// Where the cluster chunk kernel keeps element i of a head's k or q (kq_index) and its delta
// rule over them (delta_rule_token_vec): the rows a row group owns (i = rg + kDeltaRowGroups r)
// lie side by side, kDeltaRowCap apart per group, so a thread reads its rows' k and q four at
// a time (one 16-byte shared load, the same address across its warp: a broadcast) instead of
// one load per row; kFull (dk == kDeltaRowGroups R, the 27B shape) drops the row guards. The
// same products and sums in the same order as delta_rule_token (gdn.cuh), so the states stay
// bit for bit those of the one-block kernel. Only this kernel: in the token kernels the wider
// loads made ptxas spill (ptxas -v, sm_90, R = 32).
constexpr int kDeltaRowCap = kDeltaMaxDk / kDeltaRowGroups;
[[maybe_unused]] __device__ __forceinline__ int kq_index(int i) {
  return (i % kDeltaRowGroups) * kDeltaRowCap + i / kDeltaRowGroups;
}

template <bool kFull, int R, int COLS, class DeltaOf>
__device__ __forceinline__ void delta_rule_token_vec(float (&s)[R], const float (&kq)[2][kDeltaMaxDk],
                                                     float (&red_kv)[kDeltaRowGroups][COLS],
                                                     float (&red_o)[kDeltaRowGroups][COLS], int rg, int col, int dk,
                                                     float decay, DeltaOf delta_of) {
  static_assert(R % 4 == 0 && R <= kDeltaRowCap, "whole 16-byte groups of a row group's rows");
  const float4* k4 = reinterpret_cast<const float4*>(&kq[0][rg * kDeltaRowCap]);
  const float4* q4 = reinterpret_cast<const float4*>(&kq[1][rg * kDeltaRowCap]);
  float part = 0.0f;
#pragma unroll
  for (int r4 = 0; r4 < R / 4; ++r4) {
    const float4 kk = k4[r4];
    const float kr[4] = {kk.x, kk.y, kk.z, kk.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = 4 * r4 + u;
      s[r] *= decay;
      if (kFull || rg + kDeltaRowGroups * r < dk) part += s[r] * kr[u];
    }
  }
  const float delta = delta_rule_delta(part, red_kv, rg, col, delta_of);
  float po = 0.0f;
#pragma unroll
  for (int r4 = 0; r4 < R / 4; ++r4) {
    const float4 kk = k4[r4], qq = q4[r4];
    const float kr[4] = {kk.x, kk.y, kk.z, kk.w}, qr[4] = {qq.x, qq.y, qq.z, qq.w};
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int r = 4 * r4 + u;
      if (kFull || rg + kDeltaRowGroups * r < dk) {
        s[r] += kr[u] * delta;
        po += s[r] * qr[u];
      }
    }
  }
  red_o[rg][col] = po;
  __syncthreads();
}

// The chunk's k and q heads (nt <= kDecodeStepTokens tokens from row r0) into kq as fp32, for
// the cluster kernel. All tokens' loads of a channel go out before the first is converted, so
// the chunk costs one round trip: with a block's 128 threads, the loop over i < nt * dk (t =
// i / dk) of the one-block kernel put one round trip per token on the critical path (ncu,
// H200, 27B shapes, T = 4: the loads' first use was the hottest instruction; kernel trace of a
// 4-token round: 17.5 -> 12.8 us a launch).
// kVec: at kq_index (for delta_rule_token_vec), else at i (for delta_rule_token).
template <bool kVec, class T>
__device__ __forceinline__ void load_chunk_kq(float (&kq)[kDecodeStepTokens][2][kDeltaMaxDk], const T* k, const T* q,
                                              int64_t r0, int nt, int Hk, int hk, int dk) {
  for (int c = threadIdx.x; c < dk; c += blockDim.x) {
    T kr[kDecodeStepTokens], qr[kDecodeStepTokens];
#pragma unroll
    for (int t = 0; t < kDecodeStepTokens; ++t) {
      if (t < nt) {
        const int64_t off = ((r0 + t) * Hk + hk) * dk + c;
        kr[t] = k[off];
        qr[t] = q[off];
      }
    }
#pragma unroll
    for (int t = 0; t < kDecodeStepTokens; ++t) {
      if (t < nt) {
        const int at = kVec ? kq_index(c) : c;
        kq[t][0][at] = to_f32(kr[t]);
        kq[t][1][at] = to_f32(qr[t]);
      }
    }
  }
}

// R: state rows per thread (ceil(dk / kDeltaRowGroups), rounded up to a template size).
// Sequence n0 + blockIdx.y, its rows n T_ .. n T_ + T_ - 1 of q, k: [rows, Hk, dk];
// v, z, y: [rows, Hv, dv]; a, b: [rows, Hv]. The tokens run in chunks of kDecodeStepTokens:
// per chunk, every token's k, q and gates are loaded together, then per pass of columns the
// state slice is read once, advanced by the chunk's tokens in registers and written once;
// then the chunk's outputs are normalised.
template <class T, int R>
__global__ void __launch_bounds__(kDecodeMaxCols* kDeltaRowGroups)
    gdn_decode_step_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                           const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ neg_exp_A,
                           const float* __restrict__ dt_bias, const T* z, const float* __restrict__ norm_w, float eps,
                           StatePtrs states, StatePtrs ckpts, int64_t n0, int T_, T* y, int Hk, int Hv, int dk, int dv,
                           int cols, bool tiled) {
  __shared__ float kq[kDecodeStepTokens][2][kDeltaMaxDk];  // the chunk's k and q heads, fp32
  __shared__ float red_kv[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red_o[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float o_sh[kDecodeStepTokens][kDecodeMaxDv];  // the chunk's outputs, rounded to T
  __shared__ float gate[2][kDecodeStepTokens];             // per token: the decay exp(g), beta
  __shared__ float ss_sh[kDecodeStepTokens];               // per token: the head's sum of squares
  const int j = blockIdx.x;  // value head
  // Before the wait: the head's state and gate constants (last read a round ago) into L2, as
  // the cluster kernel does.
  float* S = states.p[blockIdx.y] + int64_t(j) * dk * dv;
  // Checkpoints (ops/gdn_decode_step.h): the state after token t at CK + t Hv dk dv, or none.
  float* CK = ckpts.p[blockIdx.y] != nullptr ? ckpts.p[blockIdx.y] + int64_t(j) * dk * dv : nullptr;
  prefetch_state(S, dk, dv, 0, dv);
  if (threadIdx.x == 0) {
    prefetch_l2(dt_bias + j);
    prefetch_l2(neg_exp_A + j);
  }
  pdl_wait();
  pdl_trigger();
  const int64_t row0 = (n0 + blockIdx.y) * T_;  // the sequence's first row
  const int col = threadIdx.x % cols, rg = threadIdx.x / cols;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  for (int t0 = 0; t0 < T_; t0 += kDecodeStepTokens) {
    const int nt = min(kDecodeStepTokens, T_ - t0);
    const int64_t r0 = row0 + t0;  // the chunk's first row
    // 512 threads over nt * dk <= 8 * 128 (k, q) pairs: one round trip at the 27B shape (the
    // cluster kernel's 128 threads take load_chunk_kq instead).
    for (int i = threadIdx.x; i < nt * dk; i += blockDim.x) {
      const int t = i / dk, c = i % dk;
      const int64_t off = ((r0 + t) * Hk + hk) * dk + c;
      kq[t][0][c] = to_f32(k[off]);
      kq[t][1][c] = to_f32(q[off]);
    }
    if (threadIdx.x < nt) {
      const int64_t hj = (r0 + threadIdx.x) * Hv + j;
      gate[0][threadIdx.x] = expf(gdn_decay_gate(to_f32(a[hj]), dt_bias[j], neg_exp_A[j]));
      gate[1][threadIdx.x] = sigmoid_f(to_f32(b[hj]));
    }
    __syncthreads();
    for (int c0 = 0; c0 < dv; c0 += cols) {
      const int e = c0 + col;  // value column
      const bool live = e < dv;
      float s[R];
      load_state_column(s, S, rg, e, dk, dv, live);
      for (int t = 0; t < nt; ++t) {
        const T* vh = v + ((r0 + t) * Hv + j) * dv;
        delta_rule_token(s, kq[t], red_kv, red_o, rg, col, dk, gate[0][t], [&](float kv) {
          const float vv = live ? to_f32(vh[e]) : 0.0f;
          return gate[1][t] * (vv - kv);
        });
        // Every read of red_kv comes before the barrier above and every read of red_o before
        // the next token's (or pass's) first barrier, and the next token writes each only after
        // that barrier: two barriers per token suffice.
        if (rg == 0 && live) {
          float o = 0.0f;
#pragma unroll
          for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
          o_sh[t][e] = to_f32(from_f32<T>(o));
        }
        if (CK != nullptr && t0 + t + 1 < T_)  // the state after this token, aside
          store_state_column(s, CK + int64_t(t0 + t) * Hv * dk * dv, rg, e, dk, dv, live);
      }
      store_state_column(s, S, rg, e, dk, dv, live);
    }
    __syncthreads();  // o_sh holds the chunk's outputs
    // Each token's sum of squares by one warp (at least 4 warps for at most 8 tokens).
    for (int t = warp; t < nt; t += nwarps) {
      float ss = 0.0f;
      for (int e = lane; e < dv; e += 32) ss += o_sh[t][e] * o_sh[t][e];
      ss = warp_sum(ss);
      if (lane == 0) ss_sh[t] = ss;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * dv; i += blockDim.x) {
      const int t = i / dv, e = i % dv;
      const float f = 1.0f / sqrtf(ss_sh[t] / static_cast<float>(dv) + eps);
      const int64_t at = ((r0 + t) * Hv + j) * dv + e;  // z is read by the thread that writes y (y may alias z)
      y[at] = from_f32<T>(norm_w[e] * (o_sh[t][e] * f) * silu_f(to_f32(z[at])));
    }
    __syncthreads();  // the next chunk overwrites kq, gate, o_sh and ss_sh
  }
}

#if CUDART_VERSION >= 12000
static_assert(kDecodeClusterBlocks == 2 || kDecodeClusterBlocks == 4 || kDecodeClusterBlocks == 8,
              "a portable cluster has at most 8 blocks");

// The cluster helpers exist for sm_90 code and the host pass only: elsewhere the kernel below
// is a trap and they would go unused.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// Thread-block cluster barrier, split in two: arrive (release: this thread's shared-memory
// writes become visible to the cluster) and wait (acquire: returns once every thread of every
// block of the cluster has arrived). Not .aligned: the kernel reaches them right after
// branches that may split a warp (the last block's columns past dv).
__device__ __forceinline__ void cluster_arrive() {
#ifdef __CUDA_ARCH__
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

// The float at p (this block's shared memory) in the block of cluster rank `rank`.
__device__ __forceinline__ float cluster_load(const float* p, unsigned rank) {
  float v = 0.0f;
#ifdef __CUDA_ARCH__
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
#endif
  return v;
}
#endif

// Grid (Hv x kDecodeClusterBlocks, sequences), clusters of kDecodeClusterBlocks along x:
// cluster = (value head j, sequence), block rank p takes value columns [p cols, (p+1) cols),
// cols a multiple of 32 with kDecodeClusterBlocks x cols >= dv (columns past dv idle).
// Block: cols x kDeltaRowGroups threads. Tensors as gdn_decode_step_kernel's. The state slice
// stays in registers across all the sequence's tokens (read once, written once); per chunk
// of kDecodeStepTokens tokens every input (k, q, gates, v, z) is loaded together, the tokens
// run, and one pair of cluster barriers serves the norms of all of them.
template <class T, int R>
__global__ void __launch_bounds__(kDecodeMaxCols* kDeltaRowGroups)
    gdn_decode_step_cluster_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   const T* __restrict__ a, const T* __restrict__ b,
                                   const float* __restrict__ neg_exp_A, const float* __restrict__ dt_bias, const T* z,
                                   const float* __restrict__ norm_w, float eps, StatePtrs states, StatePtrs ckpts,
                                   int64_t n0, int T_, T* y, int Hk, int Hv, int dk, int dv, int cols, bool tiled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: gdn_decode_uses_cluster asks for sm_90 code
#else
  // kVec: the delta rule by delta_rule_token_vec, where ptxas keeps it spill-free (sm_90: R 16
  // and 64 spilled 28 and 204 bytes with it, none without).
  constexpr bool kVec = R == 8 || R == 32;
  // The chunk's k and q heads, fp32 (kVec: at kq_index; 16-byte aligned for its loads).
  __shared__ __align__(16) float kq[kDecodeStepTokens][2][kDeltaMaxDk];
  __shared__ float red_kv[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red_o[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float v_sh[kDecodeStepTokens][kDecodeMaxCols];  // the chunk's v of this block's columns
  __shared__ float z_sh[kDecodeStepTokens][kDecodeMaxCols];  // z, likewise
  __shared__ float o_sh[kDecodeStepTokens][kDecodeMaxCols];  // the outputs, rounded to T
  __shared__ float gate[2][kDecodeStepTokens];                // per token: the decay exp(g), beta
  // This block's part of each token's sum of squares; the cluster reads it.
  __shared__ float ss_part[kDecodeStepTokens];
  const int j = blockIdx.x / kDecodeClusterBlocks;  // value head
  const int part = blockIdx.x % kDecodeClusterBlocks;  // the block's rank in its cluster
  const int col = threadIdx.x % cols, rg = threadIdx.x / cols;
  const int e = part * cols + col;  // value column
  const bool live = e < dv;
  float* S = states.p[blockIdx.y] + int64_t(j) * dk * dv;
  float* CK = ckpts.p[blockIdx.y] != nullptr ? ckpts.p[blockIdx.y] + int64_t(j) * dk * dv : nullptr;
  prefetch_cluster_block(S, dt_bias, neg_exp_A, norm_w, j, dk, dv, part, cols);
  pdl_wait();
  pdl_trigger();
  const int64_t row0 = (n0 + blockIdx.y) * T_;  // the sequence's first row
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  float s[R];
  for (int t0 = 0; t0 < T_; t0 += kDecodeStepTokens) {
    const int nt = min(kDecodeStepTokens, T_ - t0);
    const int64_t r0 = row0 + t0;  // the chunk's first row
    load_chunk_kq<kVec>(kq, k, q, r0, nt, Hk, hk, dk);
    if (threadIdx.x < nt) {
      const int64_t hj = (r0 + threadIdx.x) * Hv + j;
      gate[0][threadIdx.x] = expf(gdn_decay_gate(to_f32(a[hj]), dt_bias[j], neg_exp_A[j]));
      gate[1][threadIdx.x] = sigmoid_f(to_f32(b[hj]));
    }
    // v and z of token t and column e by row group t % kDeltaRowGroups, so their latency
    // overlaps the state's; z's thread is the one that writes y[t, e] (y may alias z).
    static_assert(kDecodeStepTokens % kDeltaRowGroups == 0, "a chunk's tokens over the row groups");
#pragma unroll
    for (int u = 0; u < kDecodeStepTokens / kDeltaRowGroups; ++u) {  // unrolled: one round trip
      const int t = rg + kDeltaRowGroups * u;
      if (t < nt) {
        const int64_t at = ((r0 + t) * Hv + j) * dv + e;
        v_sh[t][col] = live ? to_f32(v[at]) : 0.0f;
        z_sh[t][col] = live ? to_f32(z[at]) : 0.0f;
      }
    }
    if (t0 == 0) {
      load_state_column(s, S, rg, e, dk, dv, live);
    }
    __syncthreads();  // kq, gate, v_sh, z_sh
    const bool full = dk == kDeltaRowGroups * R;  // the same for the whole block
    for (int t = 0; t < nt; ++t) {
      auto delta_of = [&](float kv) { return gate[1][t] * (v_sh[t][col] - kv); };
      if constexpr (!kVec) delta_rule_token(s, kq[t], red_kv, red_o, rg, col, dk, gate[0][t], delta_of);
      else if (full) delta_rule_token_vec<true>(s, kq[t], red_kv, red_o, rg, col, dk, gate[0][t], delta_of);
      else delta_rule_token_vec<false>(s, kq[t], red_kv, red_o, rg, col, dk, gate[0][t], delta_of);
      if (rg == 0) {  // column e's output rounded to T (0 past dv)
        float o = 0.0f;
        if (live) {
#pragma unroll
          for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
          o = to_f32(from_f32<T>(o));
        }
        o_sh[t][col] = o;
      }
      if (CK != nullptr && t0 + t + 1 < T_)  // the state after this token, aside (checkpoints)
        store_state_column(s, CK + int64_t(t0 + t) * Hv * dk * dv, rg, e, dk, dv, live);
    }
    if (t0 + nt >= T_) {  // the last chunk: the state goes back
      store_state_column(s, S, rg, e, dk, dv, live);
    }
    __syncthreads();  // o_sh holds the chunk's outputs
    // Each token's sum of squares over this block's columns by one warp (at least 4 warps).
    for (int t = warp; t < nt; t += nwarps) {
      float ss = 0.0f;
      for (int c = lane; c < cols; c += 32) ss += o_sh[t][c] * o_sh[t][c];
      ss = warp_sum(ss);
      if (lane == 0) ss_part[t] = ss;
    }
    // Every thread of the cluster passes both barriers.
    // The first: each block's ss_part is written and visible before anyone reads it (and every
    // block of the cluster has started, as shared::cluster accesses require).
    cluster_arrive();
    cluster_wait();
    for (int t = rg; t < nt; t += kDeltaRowGroups) {
      if (!live) continue;
      float total = 0.0f;  // in rank order, so all blocks of the head get the same f
      for (int p = 0; p < kDecodeClusterBlocks; ++p) total += cluster_load(&ss_part[t], static_cast<unsigned>(p));
      const float f = 1.0f / sqrtf(total / static_cast<float>(dv) + eps);
      y[((r0 + t) * Hv + j) * dv + e] = from_f32<T>(norm_w[e] * (o_sh[t][col] * f) * silu_f(z_sh[t][col]));
    }
    // The second: no block exits (its shared memory gone) or starts the next chunk (rewriting
    // ss_part) while another may still read its ss_part. Arriving only after the reads above
    // have returned their values. It is a barrier of this block too, so the next chunk may
    // overwrite kq, gate, v_sh, z_sh and o_sh.
    cluster_arrive();
    cluster_wait();
  }
#endif
}

// Grid, clusters and blocks as gdn_decode_step_cluster_kernel's; tensors as
// gdn_decode_token_kernel's (one token per sequence).
template <class T, int R>
__global__ void __launch_bounds__(kDecodeMaxCols* kDeltaRowGroups)
    gdn_decode_token_cluster_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   const T* __restrict__ a, const T* __restrict__ b,
                                   const float* __restrict__ neg_exp_A, const float* __restrict__ dt_bias, const T* z,
                                   const float* __restrict__ norm_w, float eps, StatePtrs states, int64_t n0, T* y,
                                   int Hk, int Hv, int dk, int dv, int cols, bool tiled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: gdn_decode_uses_cluster asks for sm_90 code
#else
  __shared__ float kq[2][kDeltaMaxDk];  // the token's k and q head, fp32
  __shared__ float red_kv[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red_o[kDeltaRowGroups][kDecodeMaxCols];
  __shared__ float red[32];
  __shared__ float ss_part;  // this block's part of the head's sum of squares; the cluster reads it
  const int j = blockIdx.x / kDecodeClusterBlocks;  // value head
  const int part = blockIdx.x % kDecodeClusterBlocks;  // the block's rank in its cluster
  const int col = threadIdx.x % cols, rg = threadIdx.x / cols;
  const int e = part * cols + col;  // value column
  const bool live = e < dv;
  float* S = states.p[blockIdx.y] + int64_t(j) * dk * dv;
  prefetch_cluster_block(S, dt_bias, neg_exp_A, norm_w, j, dk, dv, part, cols);
  pdl_wait();
  pdl_trigger();
  const int64_t n = n0 + blockIdx.y;  // token (= sequence) row
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int64_t hj = n * Hv + j;
  const float decay = expf(gdn_decay_gate(to_f32(a[hj]), dt_bias[j], neg_exp_A[j]));
  const float bt = sigmoid_f(to_f32(b[hj]));
  const int64_t qk_off = (n * Hk + hk) * dk;
  for (int i = threadIdx.x; i < dk; i += blockDim.x) {
    kq[0][i] = to_f32(k[qk_off + i]);
    kq[1][i] = to_f32(q[qk_off + i]);
  }
  // v[e] and z[e] now, so their latency overlaps the state's; z only by the thread that
  // writes y[e] (y may alias z).
  const float vv = live ? to_f32(v[hj * dv + e]) : 0.0f;
  const float zz = (rg == 0 && live) ? to_f32(z[hj * dv + e]) : 0.0f;
  float s[R];
  load_state_column(s, S, rg, e, dk, dv, live);
  __syncthreads();  // kq
  delta_rule_token(s, kq, red_kv, red_o, rg, col, dk, decay, [&](float kv) { return bt * (vv - kv); });
  float o = 0.0f;  // column e's output rounded to T (row group 0's threads)
  if (rg == 0 && live) {
#pragma unroll
    for (int w = 0; w < kDeltaRowGroups; ++w) o += red_o[w][col];
    o = to_f32(from_f32<T>(o));
  }
  store_state_column(s, S, rg, e, dk, dv, live);
  const float ss = block_sum(o * o, red);
  if (threadIdx.x == 0) ss_part = ss;
  // Every thread of the cluster passes both barriers.
  // The first: each block's ss_part is written and visible before anyone reads it (and every
  // block of the cluster has started, as shared::cluster accesses require).
  cluster_arrive();
  cluster_wait();
  if (rg == 0 && live) {
    float total = 0.0f;  // in rank order, so all blocks of the head get the same f
    for (int p = 0; p < kDecodeClusterBlocks; ++p) total += cluster_load(&ss_part, static_cast<unsigned>(p));
    const float f = 1.0f / sqrtf(total / static_cast<float>(dv) + eps);
    y[hj * dv + e] = from_f32<T>(norm_w[e] * (o * f) * silu_f(zz));
  }
  // The second: no block exits (its shared memory gone) while another may still read its
  // ss_part. Arriving only after the reads above have returned their values.
  cluster_arrive();
  cluster_wait();
#endif
}

// The lean token kernel: the token cluster kernel's work for the head shape of the Qwen3.5
// family (dk = dv = 128), with what a general shape needs taken out of the chain after
// pdl_wait. Per column it runs the same products and sums in the same order as
// delta_rule_token, so the state stays bit for bit the one-block kernel's. What differs:
// - The state slice, the gate constants and the norm weight are loaded into registers before
//   pdl_wait. The constants are weights; the state is written only by this layer's GDN
//   kernels of earlier steps (and by copies, which end any programmatic overlap), and with
//   every kernel waiting before it triggers at most two grids overlap, so those are complete
//   (pdl.cuh). 128-thread blocks get the registers for it (the other kernels are bounded for
//   512 threads, 128 registers, where values held across the wait spilled).
// - The four row groups of a column are lanes of one warp, not warps: lane = 4 c + g holds
//   rows g, g + 4, .. of column 8 warp + c, so Sᵀk and qᵀS are summed over the row groups by
//   shuffles in row-group order, not through shared memory with two block barriers.
// - The norm's partial sums are pushed into every block of the cluster (one value per warp),
//   so one cluster barrier serves them: no block reads another's shared memory after it, and
//   none has to wait for the others before exiting. The barrier that makes sure every block
//   has started arrives at the top and waits only before the pushes.
// The norm's sum of squares runs in another order than the other kernels' (per warp, then
// the cluster's 16 warps in rank order), as the cluster kernels' already does.
constexpr int kLeanD = 128;                                // dk = dv
constexpr int kLeanCols = kLeanD / kDecodeClusterBlocks;   // 32 value columns a block
constexpr int kLeanR = kLeanD / kDeltaRowGroups;           // 32 state rows a thread
constexpr int kLeanThreads = kLeanCols * kDeltaRowGroups;  // 128: a thread per (column, row group)
constexpr int kLeanWarps = kLeanThreads / 32;
static_assert(kLeanThreads == kLeanD, "one thread per k and q element when staging them");
static_assert(kLeanCols == 8 * kLeanWarps, "8 columns a warp");
static_assert(kLeanR % 4 == 0, "a row group's k and q in 16-byte loads");

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// A row group's k (or q) values side by side, padded by 4 floats so the four groups' 16-byte
// loads of one warp fall in different banks.
constexpr int kLeanKqStride = kLeanR + 4;

__device__ __forceinline__ void cluster_arrive_relaxed() {
#ifdef __CUDA_ARCH__
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
#endif
}

// v into the float at p (this block's shared memory) of the cluster block of rank `rank`.
__device__ __forceinline__ void cluster_store(float* p, unsigned rank, float v) {
#ifdef __CUDA_ARCH__
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
#endif
}

// The sum of the four row groups' values of this lane's column (lanes 4 c .. 4 c + 3), in
// row-group order from 0 as delta_rule_delta and the caller of delta_rule_token add them.
__device__ __forceinline__ float row_group_sum(float v, int lane) {
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kDeltaRowGroups; ++w) sum += __shfl_sync(0xffffffffu, v, (lane & ~3) | w);
  return sum;
}

// One token of delta_rule_token for a lean kernel's thread (rows g, g + 4, .. of its column in
// s): kg and qg are its row group's k and q (kLeanR floats side by side, 16-byte aligned,
// shared). Returns the column's output qᵀS, not yet rounded.
__device__ __forceinline__ float lean_delta_token(float (&s)[kLeanR], const float* kg, const float* qg, float decay,
                                                  float bt, float vv, int lane) {
  float kr[kLeanR], qr[kLeanR];
  const float4* k4 = reinterpret_cast<const float4*>(kg);
  const float4* q4 = reinterpret_cast<const float4*>(qg);
#pragma unroll
  for (int r4 = 0; r4 < kLeanR / 4; ++r4) {
    const float4 kk = k4[r4], qq = q4[r4];
    kr[4 * r4] = kk.x, kr[4 * r4 + 1] = kk.y, kr[4 * r4 + 2] = kk.z, kr[4 * r4 + 3] = kk.w;
    qr[4 * r4] = qq.x, qr[4 * r4 + 1] = qq.y, qr[4 * r4 + 2] = qq.z, qr[4 * r4 + 3] = qq.w;
  }
  // delta_rule_token's steps: decay, Sᵀk, delta, S += k deltaᵀ and qᵀS.
  float part_kv = 0.0f;
#pragma unroll
  for (int r = 0; r < kLeanR; ++r) {
    s[r] *= decay;
    part_kv += s[r] * kr[r];
  }
  const float delta = bt * (vv - row_group_sum(part_kv, lane));
  float part_o = 0.0f;
#pragma unroll
  for (int r = 0; r < kLeanR; ++r) {
    s[r] += kr[r] * delta;
    part_o += s[r] * qr[r];
  }
  return row_group_sum(part_o, lane);
}

// The sum of the cluster's kDecodeClusterBlocks x kLeanWarps pushed values at ss (this
// block's shared memory), in slot order: every block of the head gets the same sum.
__device__ __forceinline__ float lean_cluster_total(const float* ss) {
  float total = 0.0f;
  const float4* ss4 = reinterpret_cast<const float4*>(ss);
#pragma unroll
  for (int i = 0; i < kDecodeClusterBlocks * kLeanWarps / 4; ++i) {
    const float4 t = ss4[i];
    total += t.x;
    total += t.y;
    total += t.z;
    total += t.w;
  }
  return total;
}

// The warp's 8 columns' sum of o² (xor steps over the column bits of the lane: every lane ends
// with the same value).
__device__ __forceinline__ float lean_warp_squares(float o) {
  float ss = o * o;
  ss += __shfl_xor_sync(0xffffffffu, ss, 4);
  ss += __shfl_xor_sync(0xffffffffu, ss, 8);
  ss += __shfl_xor_sync(0xffffffffu, ss, 16);
  return ss;
}

// A lean kernel thread's place and what it loads before pdl_wait.
struct LeanThread {
  int j, part;     // value head; the block's rank in its cluster
  int lane, warp;
  int g, e;        // row group (state rows g, g + 4, ..) and value column
  float* S;        // row g of column e of the head's state
  float dtb, nea;  // the head's gate constants dt_bias, neg_exp_A
  float nw;        // norm weight of column e
};

// The start of both lean kernels: the first cluster barrier phase arrived at (this block has
// started), the thread's state rows into s and the constants loaded, then the wait.
__device__ __forceinline__ LeanThread lean_start(const StatePtrs& states, const float* dt_bias,
                                                 const float* neg_exp_A, const float* norm_w, float (&s)[kLeanR]) {
  cluster_arrive_relaxed();
  LeanThread t;
  t.j = blockIdx.x / kDecodeClusterBlocks;
  t.part = blockIdx.x % kDecodeClusterBlocks;
  t.lane = threadIdx.x & 31;
  t.warp = threadIdx.x >> 5;
  t.g = t.lane & 3;
  t.e = t.part * kLeanCols + t.warp * 8 + (t.lane >> 2);
  t.S = states.p[blockIdx.y] + int64_t(t.j) * kLeanD * kLeanD + t.g * kLeanD + t.e;
#pragma unroll
  for (int r = 0; r < kLeanR; ++r) s[r] = t.S[r * kDeltaRowGroups * kLeanD];
  t.dtb = dt_bias[t.j];
  t.nea = neg_exp_A[t.j];
  t.nw = norm_w[t.e];
  pdl_wait();
  pdl_trigger();
  return t;
}

__device__ __forceinline__ void lean_store_state(const float (&s)[kLeanR], float* S) {
#pragma unroll
  for (int r = 0; r < kLeanR; ++r) S[r * kDeltaRowGroups * kLeanD] = s[r];
}
#endif

// Grid (Hv x kDecodeClusterBlocks, sequences), clusters of kDecodeClusterBlocks along x, blocks
// of kLeanThreads; tensors as gdn_decode_token_kernel's with dk = dv = kLeanD.
template <class T>
__global__ void __launch_bounds__(kLeanThreads)
    gdn_decode_token_lean_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                 const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ neg_exp_A,
                                 const float* __restrict__ dt_bias, const T* z, const float* __restrict__ norm_w,
                                 float eps, StatePtrs states, int64_t n0, T* y, int Hk, int Hv, bool tiled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: gdn_decode_uses_cluster asks for sm_90 code
#else
  __shared__ __align__(16) float kq[2][kDeltaRowGroups * kLeanKqStride];  // k, q by row group
  // Every warp's sum of squares in the cluster, at rank x kLeanWarps + warp.
  __shared__ __align__(16) float ss_all[kDecodeClusterBlocks * kLeanWarps];
  float s[kLeanR];
  const LeanThread th = lean_start(states, dt_bias, neg_exp_A, norm_w, s);
  const int j = th.j, part = th.part, lane = th.lane, warp = th.warp, g = th.g, e = th.e;
  const int64_t n = n0 + blockIdx.y;  // token (= sequence) row
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int64_t hj = n * Hv + j;
  const int64_t qk_off = (n * Hk + hk) * kLeanD;
  const int ti = static_cast<int>(threadIdx.x);  // the k and q element this thread stages
  const float kt = to_f32(k[qk_off + ti]), qt = to_f32(q[qk_off + ti]);
  const float av = to_f32(a[hj]), bv = to_f32(b[hj]);
  const float vv = to_f32(v[hj * kLeanD + e]);
  const float zz = g == 0 ? to_f32(z[hj * kLeanD + e]) : 0.0f;  // only the thread that writes y[e] (y may alias z)
  kq[0][(ti % kDeltaRowGroups) * kLeanKqStride + ti / kDeltaRowGroups] = kt;
  kq[1][(ti % kDeltaRowGroups) * kLeanKqStride + ti / kDeltaRowGroups] = qt;
  const float decay = expf(gdn_decay_gate(av, th.dtb, th.nea));
  const float bt = sigmoid_f(bv);
  __syncthreads();  // kq
  // Column e's output rounded to T.
  const float o = to_f32(
      from_f32<T>(lean_delta_token(s, &kq[0][g * kLeanKqStride], &kq[1][g * kLeanKqStride], decay, bt, vv, lane)));
  // The warp's sum of squares, pushed to slot (rank, warp) of every block.
  const float ss = lean_warp_squares(o);
  cluster_wait();  // phase 1: every block of the cluster has started
  if (lane < kDecodeClusterBlocks) cluster_store(&ss_all[part * kLeanWarps + warp], static_cast<unsigned>(lane), ss);
  cluster_arrive();  // phase 2: the pushes are visible once every block has arrived
  cluster_wait();
  // The state goes back after the barrier: the arrive's release would wait for these global
  // stores to complete too (ncu: the ERRBAR before it held 8% of the kernel's stall samples).
  lean_store_state(s, th.S);
  const float total = lean_cluster_total(ss_all);
  if (g == 0) {
    const float f = 1.0f / sqrtf(total / static_cast<float>(kLeanD) + eps);
    y[hj * kLeanD + e] = from_f32<T>(th.nw * (o * f) * silu_f(zz));
  }
#endif
}

// The lean kernel of a verify round (T_ > 1 tokens per sequence): the lean token kernel's
// layout and barriers over the tokens, in chunks of kDecodeStepTokens as the chunk cluster
// kernel runs them. Per chunk every token's k, q, gates, v and z are loaded together; the
// tokens advance the state in registers; then each token's sum of squares is pushed as the
// token kernel pushes its one, all of the chunk's with one cluster barrier. The pushed sums are
// double-buffered by chunk: a block can push chunk c + 2 only after every block has arrived at
// chunk c + 1's barrier, i.e. after it has read chunk c's sums. Tensors as
// gdn_decode_step_kernel's with dk = dv = kLeanD.
template <class T>
__global__ void __launch_bounds__(kLeanThreads)
    gdn_decode_step_lean_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                const T* __restrict__ a, const T* __restrict__ b, const float* __restrict__ neg_exp_A,
                                const float* __restrict__ dt_bias, const T* z, const float* __restrict__ norm_w,
                                float eps, StatePtrs states, StatePtrs ckpts, int64_t n0, int T_, T* y, int Hk, int Hv,
                                bool tiled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: gdn_decode_uses_cluster asks for sm_90 code
#else
  constexpr int TOK = kDecodeStepTokens;
  __shared__ __align__(16) float kq[TOK][2][kDeltaRowGroups * kLeanKqStride];  // the chunk's k, q by row group
  __shared__ float gate[2][TOK];                                                // per token: the decay exp(g), beta
  // Per chunk parity and token: every warp's sum of squares in the cluster, at rank x kLeanWarps + warp.
  __shared__ __align__(16) float ss_all[2][TOK][kDecodeClusterBlocks * kLeanWarps];
  float s[kLeanR];
  const LeanThread th = lean_start(states, dt_bias, neg_exp_A, norm_w, s);
  const int j = th.j, part = th.part, lane = th.lane, warp = th.warp, g = th.g, e = th.e;
  const int64_t row0 = (n0 + blockIdx.y) * T_;  // the sequence's first row
  // Checkpoints: this thread's rows of the state after token t at CK + t Hv D², or none.
  float* CK = ckpts.p[blockIdx.y] != nullptr ? ckpts.p[blockIdx.y] + (th.S - states.p[blockIdx.y]) : nullptr;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int ti = static_cast<int>(threadIdx.x);  // the k and q element this thread stages
  const int kq_at = (ti % kDeltaRowGroups) * kLeanKqStride + ti / kDeltaRowGroups;
  for (int t0 = 0, chunk = 0; t0 < T_; t0 += TOK, ++chunk) {
    const int nt = min(TOK, T_ - t0);
    const int64_t r0 = row0 + t0;  // the chunk's first row
    // Every input of the chunk first (one round trip).
    T kt[TOK], qt[TOK], vt[TOK], zt[TOK];
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      if (t < nt) {
        const int64_t qk = ((r0 + t) * Hk + hk) * kLeanD + ti;
        const int64_t at = ((r0 + t) * Hv + j) * kLeanD + e;
        kt[t] = k[qk];
        qt[t] = q[qk];
        vt[t] = v[at];
        if (g == 0) zt[t] = z[at];  // only the thread that writes y[t, e] (y may alias z)
      }
    }
    if (ti < nt) {
      const int64_t hj = (r0 + ti) * Hv + j;
      gate[0][ti] = expf(gdn_decay_gate(to_f32(a[hj]), th.dtb, th.nea));
      gate[1][ti] = sigmoid_f(to_f32(b[hj]));
    }
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      if (t < nt) {
        kq[t][0][kq_at] = to_f32(kt[t]);
        kq[t][1][kq_at] = to_f32(qt[t]);
      }
    }
    __syncthreads();  // kq, gate
    float o[TOK];  // column e's outputs rounded to T
#pragma unroll
    for (int t = 0; t < TOK; ++t) {
      if (t < nt) {
        o[t] = to_f32(from_f32<T>(lean_delta_token(s, &kq[t][0][g * kLeanKqStride], &kq[t][1][g * kLeanKqStride],
                                                   gate[0][t], gate[1][t], to_f32(vt[t]), lane)));
        if (CK != nullptr && t0 + t + 1 < T_) lean_store_state(s, CK + int64_t(t0 + t) * Hv * kLeanD * kLeanD);
      }
    }
    float (&ss_chunk)[TOK][kDecodeClusterBlocks * kLeanWarps] = ss_all[chunk & 1];
    float ss[TOK];
#pragma unroll
    for (int t = 0; t < TOK; ++t)
      if (t < nt) ss[t] = lean_warp_squares(o[t]);
    if (chunk == 0) cluster_wait();  // phase 1: every block of the cluster has started
    if (lane < kDecodeClusterBlocks) {
#pragma unroll
      for (int t = 0; t < TOK; ++t)
        if (t < nt) cluster_store(&ss_chunk[t][part * kLeanWarps + warp], static_cast<unsigned>(lane), ss[t]);
    }
    // The pushes are visible once every block has arrived; this is also the block's barrier
    // before the next chunk overwrites kq and gate.
    cluster_arrive();
    cluster_wait();
    // The last chunk: the state goes back, after the barrier (see the token kernel).
    if (t0 + nt >= T_) lean_store_state(s, th.S);
    if (g == 0) {
#pragma unroll
      for (int t = 0; t < TOK; ++t) {
        if (t < nt) {
          const float f = 1.0f / sqrtf(lean_cluster_total(ss_chunk[t]) / static_cast<float>(kLeanD) + eps);
          y[((r0 + t) * Hv + j) * kLeanD + e] = from_f32<T>(th.nw * (o[t] * f) * silu_f(to_f32(zt[t])));
        }
      }
    }
  }
#endif
}

#endif  // CUDART_VERSION >= 12000

#if CUDART_VERSION >= 12000
// VI_GDN_LEAN=0 keeps the lean kernels off (the cluster kernels run instead), so a run can be
// compared with and without them.
bool lean_env_allows() {
  static const bool on = env_switch_on("VI_GDN_LEAN");
  return on;
}
#endif

template <class T, int R>
void launch_decode_step(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                        const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                        const Tensor& norm_w, float eps, const std::vector<Tensor>& states,
                        const std::vector<Tensor>& checkpoints, bool tiled, Tensor& y) {
  // N sequences (states) of T_ tokens each: rows q.dim(0) = N T_.
  const int64_t N = static_cast<int64_t>(states.size()), T_ = q.dim(0) / N;
  const int64_t Hk = q.dim(1), dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  const bool cluster = gdn_decode_uses_cluster(ctx, dv);
  // Columns per block: the whole head (a pass of at most 128), or the cluster block's slice.
  const int64_t want = cluster ? (dv + kDecodeClusterBlocks - 1) / kDecodeClusterBlocks : dv;
  const int cols = static_cast<int>(std::min<int64_t>(kDecodeMaxCols, (want + 31) / 32 * 32));
  // More sequences than one launch's state pointers: the next launches take the rest.
  for (int64_t n0 = 0; n0 < N; n0 += kDecodeMaxSeqs) {
    const int64_t ns = std::min<int64_t>(kDecodeMaxSeqs, N - n0);
    StatePtrs ptrs{};
    StatePtrs ck{};  // null where a sequence keeps no checkpoints
    for (int64_t i = 0; i < ns; ++i) {
      const auto at = static_cast<size_t>(n0 + i);
      ptrs.p[i] = states[at].ptr<float>();
      if (!checkpoints.empty() && checkpoints[at].data() != nullptr) ck.p[i] = checkpoints[at].ptr<float>();
    }
#if CUDART_VERSION >= 12000
    if (cluster && T_ == 1 && dk == kLeanD && dv == kLeanD && lean_env_allows()) {
      const dim3 grid(static_cast<unsigned>(Hv * kDecodeClusterBlocks), static_cast<unsigned>(ns));
      VI_CUDA_CHECK(pdl_launch_cluster(gdn_decode_token_lean_kernel<T>, grid, kLeanThreads, 0, stream_of(ctx),
                                       kDecodeClusterBlocks, q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), a.ptr<T>(),
                                       b.ptr<T>(), neg_exp_A.ptr<float>(), dt_bias.ptr<float>(), z.ptr<T>(),
                                       norm_w.ptr<float>(), eps, ptrs, n0, y.ptr<T>(), static_cast<int>(Hk),
                                       static_cast<int>(Hv), tiled));
      continue;
    }
    if (cluster && T_ > 1 && dk == kLeanD && dv == kLeanD && lean_env_allows()) {
      const dim3 grid(static_cast<unsigned>(Hv * kDecodeClusterBlocks), static_cast<unsigned>(ns));
      VI_CUDA_CHECK(pdl_launch_cluster(gdn_decode_step_lean_kernel<T>, grid, kLeanThreads, 0, stream_of(ctx),
                                       kDecodeClusterBlocks, q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), a.ptr<T>(),
                                       b.ptr<T>(), neg_exp_A.ptr<float>(), dt_bias.ptr<float>(), z.ptr<T>(),
                                       norm_w.ptr<float>(), eps, ptrs, ck, n0, static_cast<int>(T_), y.ptr<T>(),
                                       static_cast<int>(Hk), static_cast<int>(Hv), tiled));
      continue;
    }
    if (cluster && T_ == 1) {
      const dim3 grid(static_cast<unsigned>(Hv * kDecodeClusterBlocks), static_cast<unsigned>(ns));
      VI_CUDA_CHECK(pdl_launch_cluster(gdn_decode_token_cluster_kernel<T, R>, grid, cols * kDeltaRowGroups, 0,
                                       stream_of(ctx), kDecodeClusterBlocks, q.ptr<T>(), k.ptr<T>(), v.ptr<T>(),
                                       a.ptr<T>(), b.ptr<T>(), neg_exp_A.ptr<float>(), dt_bias.ptr<float>(),
                                       z.ptr<T>(), norm_w.ptr<float>(), eps, ptrs, n0, y.ptr<T>(),
                                       static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk),
                                       static_cast<int>(dv), cols, tiled));
      continue;
    }
    if (cluster) {
      const dim3 grid(static_cast<unsigned>(Hv * kDecodeClusterBlocks), static_cast<unsigned>(ns));
      VI_CUDA_CHECK(pdl_launch_cluster(gdn_decode_step_cluster_kernel<T, R>, grid, cols * kDeltaRowGroups, 0,
                                       stream_of(ctx), kDecodeClusterBlocks, q.ptr<T>(), k.ptr<T>(), v.ptr<T>(),
                                       a.ptr<T>(), b.ptr<T>(), neg_exp_A.ptr<float>(), dt_bias.ptr<float>(),
                                       z.ptr<T>(), norm_w.ptr<float>(), eps, ptrs, ck, n0, static_cast<int>(T_), y.ptr<T>(),
                                       static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk),
                                       static_cast<int>(dv), cols, tiled));
      continue;
    }
#endif
    const dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>(ns));
    if (T_ == 1) {
      VI_CUDA_CHECK(pdl_launch(gdn_decode_token_kernel<T, R>, grid, cols * kDeltaRowGroups, 0, stream_of(ctx),
                               q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), a.ptr<T>(), b.ptr<T>(), neg_exp_A.ptr<float>(),
                               dt_bias.ptr<float>(), z.ptr<T>(), norm_w.ptr<float>(), eps, ptrs, n0, y.ptr<T>(),
                               static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk),
                               static_cast<int>(dv), cols, tiled));
      continue;
    }
    VI_CUDA_CHECK(pdl_launch(gdn_decode_step_kernel<T, R>, grid, cols * kDeltaRowGroups, 0, stream_of(ctx),
                             q.ptr<T>(), k.ptr<T>(), v.ptr<T>(), a.ptr<T>(), b.ptr<T>(), neg_exp_A.ptr<float>(),
                             dt_bias.ptr<float>(), z.ptr<T>(), norm_w.ptr<float>(), eps, ptrs, ck, n0, static_cast<int>(T_), y.ptr<T>(),
                             static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk), static_cast<int>(dv),
                             cols, tiled));
  }
}

void gdn_decode_step_cuda(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& a,
                          const Tensor& b, const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z,
                          const Tensor& norm_w, float eps, const std::vector<Tensor>& states, ops::GvaLayout layout,
                          Tensor& y, const std::vector<Tensor>& checkpoints) {
  const int64_t dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  VI_CHECK(dk <= kDeltaMaxDk, "op 'gdn_decode_step' on cuda: key head dim {} exceeds {}", dk, kDeltaMaxDk);
  VI_CHECK(dv <= kDecodeMaxDv, "op 'gdn_decode_step' on cuda: value head dim {} exceeds {}", dv, kDecodeMaxDv);
  VI_CHECK(Hv <= INT32_MAX, "op 'gdn_decode_step' on cuda: {} value heads is too many", Hv);
  if (q.dim(0) == 0) return;
  VI_CHECK(q.dim(0) / static_cast<int64_t>(states.size()) <= INT32_MAX,
           "op 'gdn_decode_step' on cuda: {} tokens per sequence is too many", q.dim(0) / states.size());
  const bool tiled = layout == ops::GvaLayout::kTiled;
  dispatch_act("gdn_decode_step", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const int64_t rows = (dk + kDeltaRowGroups - 1) / kDeltaRowGroups;
    if (rows <= 8) launch_decode_step<T, 8>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, checkpoints, tiled, y);
    else if (rows <= 16) launch_decode_step<T, 16>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, checkpoints, tiled, y);
    else if (rows <= 32) launch_decode_step<T, 32>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, checkpoints, tiled, y);
    else launch_decode_step<T, 64>(ctx, q, k, v, a, b, neg_exp_A, dt_bias, z, norm_w, eps, states, checkpoints, tiled, y);
  });
}

[[maybe_unused]] const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) ops::gdn_decode_step_table().add(Device::CUDA, t, gdn_decode_step_cuda);
  return true;
}();

std::atomic<bool> g_cluster_allowed{true};

#if CUDART_VERSION >= 12000
// VI_GDN_CLUSTER=0 turns the cluster kernel off, so a run can be compared with and without it.
bool cluster_env_allows() {
  static const bool on = env_switch_on("VI_GDN_CLUSTER");
  return on;
}
#endif

}  // namespace

bool gdn_decode_uses_cluster(const ops::Context& ctx, int64_t dv) {
#if CUDART_VERSION >= 12000
  if (!g_cluster_allowed.load(std::memory_order_relaxed) || !cluster_env_allows() || volta_profile(ctx)) return false;
  const DeviceInfo& d = current_device();
  // code_cc: the kernel's cluster instructions are compiled in only for sm_90 code.
  return d.cc >= 90 && d.code_cc >= 90 && dv >= 1 && dv <= int64_t{kDecodeClusterBlocks} * kDecodeMaxCols;
#else
  (void)ctx;
  (void)dv;
  return false;
#endif
}

void set_gdn_decode_cluster_allowed(bool allowed) { g_cluster_allowed.store(allowed, std::memory_order_relaxed); }

}  // namespace vi::cuda
