// Device helpers shared by the GDN decode-step kernels (gdn_decode_step.cu) and the fused conv +
// decode step (gdn_conv_decode_step.cu): the sequences' state pointers, the thread-block
// cluster barrier and pushes (sm_90), and the lean kernels' per-column delta rule for the head
// shape of the Qwen3.5 family (dk = dv = 128). The lean kernels run the cluster kernels' per-column
// instructions, so their states agree bit for bit (tests/unit/cuda/test_gdn_decode_step).
#pragma once

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/gdn_decode_step.cuh"
#include "backends/cuda/pdl.cuh"

namespace vi::cuda {

struct StatePtrs {
  float* p[kDecodeMaxSeqs];  // [Hv, dk, dv] f32 of each sequence of the launch
};

#if CUDART_VERSION >= 12000
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

// The lean kernels' shape: a cluster of kDecodeClusterBlocks blocks per value head, each taking
// kLeanCols columns, a thread per (column, row group) holding kLeanR state rows.
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
#endif  // CUDART_VERSION >= 12000

}  // namespace vi::cuda
