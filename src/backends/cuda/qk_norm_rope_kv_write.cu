// CUDA qk_norm_rope_kv_write (ops/qk_norm_rope_kv_write.h): a full-attention layer's q/k
// head norms, their RoPE and the K/V cache append in one launch. One block per (token,
// head) over the Hq + 2 * Hkv heads of a token: q heads are normalised and rotated in place;
// k heads as well, then written to the K pool; v heads are only written to the V pool. The
// norm sums squares as rms_norm's row_sum_sq does with norm_threads(D) threads, angles and
// rotation come from rope.cuh, the int8 write is kv_write_i8_kernel's arithmetic (its
// Hadamard rotation and max are exact whatever the thread count), and every value is stored
// in T where the unfused ops store it: the result is those ops' bits.
// Two kernels: up to D 256 (norm_threads(D) = 64) one warp does a head in registers and
// shuffles, no barrier and no shared memory; above that, a block of norm_threads(D) threads
// with the head in shared memory.
#include "backends/cuda/kv_quant.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/qk_norm_rope_warp.cuh"
#include "backends/cuda/rope.cuh"
#include "ops/qk_norm_rope_kv_write.h"

namespace vi::cuda {
namespace {

// The head vector waits in shared memory as f32 (32 KB here; 48 KB is the limit without an opt-in).
constexpr int64_t kMaxHeadDim = 8192;

template <class T>
struct Args {
  T* q;          // [N, Hq, D]
  T* k;          // [N, Hkv, D]
  const T* v;    // [N, Hkv, D]
  const float* q_norm;  // [D]
  const float* k_norm;  // [D]
  const int32_t* pos;   // [N]
  const int32_t* rows;  // [N] pool row of each token
  CachePtrs kc, vc;
  int Hq, Hkv, D, rot_dim;
  float eps, w_offset, theta;
};

// Elements per thread held in registers: norm_threads(D) threads give each at most 4 up to
// D 4096 and 8 at the bound kMaxHeadDim.
constexpr int kHeadRegs = 8;
static_assert(kMaxHeadDim <= 1024 * kHeadRegs, "a head must fit the registers of 1024 threads");

// hadamard_rows_smem(x, 1, D, D) for D a power of two: the same butterflies in the same stage
// order (a + c, a - c, then the 1/sqrt(D) scale), so the same bits, with the pair index
// taken by shifts instead of hadamard_rows_smem's divisions by run-time sizes (at D 256 and
// 64 threads: 8 stages of two pairs per thread, each behind a barrier, on the K head's
// critical path). Ends with a barrier.
__device__ void hadamard_pow2_smem(float* x, int D) {
  int lh = 0;  // log2 h
  for (int h = 1; h < D; h *= 2, ++lh) {
    for (int i = threadIdx.x; i < D / 2; i += blockDim.x) {
      const int j = ((i >> lh) << (lh + 1)) | (i & (h - 1));
      const float a = x[j], c = x[j + h];
      x[j] = a + c;
      x[j + h] = a - c;
    }
    __syncthreads();
  }
  const float norm = 1.0f / sqrtf(static_cast<float>(D));  // as the CPU computes it
  for (int d = threadIdx.x; d < D; d += blockDim.x) x[d] *= norm;
  __syncthreads();
}

// x[D] (shared, every thread past a barrier since it was last written; values of T) to the
// head vector hk of pool row r. Ends with a barrier when it quantizes.
template <class T>
__device__ void store_head(float* x, float* red, const CachePtrs& c, int64_t r, int Hkv, int hk, int D, bool rotate) {
  const int64_t off = (r * Hkv + hk) * D;
  if (c.scale == nullptr) {
    T* dst = static_cast<T*>(c.data) + off;
    for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = from_f32<T>(x[d]);
    return;
  }
  if (rotate) {
    if ((D & (D - 1)) == 0) hadamard_pow2_smem(x, D);
    else hadamard_rows_smem(x, 1, D, D);
  }
  float amax = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) amax = fmaxf(amax, fabsf(x[d]));
  amax = block_max(amax, red);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int8_t* dst = static_cast<int8_t*>(c.data) + off;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    dst[d] = static_cast<int8_t>(fminf(fmaxf(rintf(x[d] * inv), -127.0f), 127.0f));
  if (threadIdx.x == 0) c.scale[r * Hkv + hk] = amax / 127.0f;
}

// Critical path of a k head block (the longest) was, after pdl_wait: the head's loads, the
// block sum, then the norm weights' loads (from DRAM: a round of weight streaming evicts
// them), the rope angle's powf and the position's load, the Hadamard stages, the block max,
// then the pool row's load before the int8 store: four dependent memory round trips. Now the
// norm weights (+ w_offset) and the rope frequency are computed before the wait (constants),
// and the position, the pool row and the head are loaded together right after it: one round
// trip. Same arithmetic in the same order as before (row_sum_sq's sum, rope_cos_sin's
// angle), so the same bits.
template <class T>
__global__ void qk_norm_rope_kv_write_kernel(Args<T> a) {
  extern __shared__ float x[];  // [D] the head vector in f32
  __shared__ float red[32];
  const int nh = a.Hq + 2 * a.Hkv, D = a.D;
  const int64_t t = blockIdx.x / nh;
  const int h = static_cast<int>(blockIdx.x % nh);
  const bool is_v = h >= a.Hq + a.Hkv, is_q = h < a.Hq;
  const int half = a.rot_dim / 2;
  // Before the wait: constants only.
  float wr[kHeadRegs];  // w[d] + w_offset for d = threadIdx.x + k blockDim.x
  if (!is_v) {
    const float* w = is_q ? a.q_norm : a.k_norm;
#pragma unroll
    for (int k = 0; k < kHeadRegs; ++k) {
      const int d = threadIdx.x + k * blockDim.x;
      wr[k] = d < D ? w[d] + a.w_offset : 0.0f;
    }
  }
  const float inv_freq0 = static_cast<int>(threadIdx.x) < half ? rope_inv_freq(threadIdx.x, a.rot_dim, a.theta) : 0.0f;
  pdl_wait();
  pdl_trigger();
  const int64_t row = a.rows[t];  // the pool row (q heads do not use it)
  if (is_v) {  // a v head: to the V pool as it is
    const int hk = h - a.Hq - a.Hkv;
    const T* src = a.v + (t * a.Hkv + hk) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) x[d] = to_f32(src[d]);
    __syncthreads();
    store_head<T>(x, red, a.vc, row, a.Hkv, hk, D, /*rotate=*/false);
    return;
  }
  const int32_t pos = a.pos[t];
  T* head = is_q ? a.q + (t * a.Hq + h) * D : a.k + (t * a.Hkv + (h - a.Hq)) * D;
  // rms_norm: row_sum_sq's sum (same elements per thread, same order) over values kept in
  // registers; y rounded to T, as its kernel stores it for rope to read.
  float hv[kHeadRegs];
  float ss = 0.0f;
#pragma unroll
  for (int k = 0; k < kHeadRegs; ++k) {
    const int d = threadIdx.x + k * blockDim.x;
    hv[k] = d < D ? to_f32(head[d]) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kHeadRegs; ++k)
    if (threadIdx.x + k * blockDim.x < D) ss += hv[k] * hv[k];
  const float inv = rms_inv(block_sum(ss, red), D, a.eps);
#pragma unroll
  for (int k = 0; k < kHeadRegs; ++k) {
    const int d = threadIdx.x + k * blockDim.x;
    if (d < D) x[d] = to_f32(from_f32<T>((hv[k] * inv) * wr[k]));
  }
  __syncthreads();
  // rope over the first rot_dim dims, each pair rounded to T as the rope kernel stores it.
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float c, s;
    rope_cos_sin_at(pos, j == static_cast<int>(threadIdx.x) ? inv_freq0 : rope_inv_freq(j, a.rot_dim, a.theta), c, s);
    const float2 y = rope_rotate(x[j], x[j + half], c, s);
    x[j] = to_f32(from_f32<T>(y.x));
    x[j + half] = to_f32(from_f32<T>(y.y));
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) head[d] = from_f32<T>(x[d]);
  if (is_q) return;
  __syncthreads();  // others may still read x above when the rotation rewrites it
  store_head<T>(x, red, a.kc, row, a.Hkv, h - a.Hq, D, /*rotate=*/true);
}

// The one-warp kernel, for D <= 256 where norm_threads(D) is 64: a head per warp with
// qk_norm_rope_warp.cuh's code (the 64-thread block's sums and rotation in registers and
// shuffles). The 64-thread block it replaces waited at 16 barriers on a k head with an int8
// pool (block sum 2, the normalised head to shared memory 1, RoPE 1, the head read back 1, 8
// Hadamard stages and the scale 9, block max 2) and at 4 on a q head; this kernel waits at
// none. H200, 2026-12-01, the 27B decode shape (one token, f16, rot 64), each launch after a
// 2 us kernel with PDL as in a round: 3.44 -> 2.47 us a launch with int8 pools, 1.87 -> 1.54
// us with f16 ones; same bits.
constexpr int kWarpMaxHeadDim = 256;  // norm_threads(D) = 64 up to here

template <class T, int M>
__global__ void __launch_bounds__(32) qk_norm_rope_kv_write_warp_kernel(Args<T> a) {
  static_assert(M % 2 == 0 && 32 * M <= kWarpMaxHeadDim, "slots come in pairs of the 64-thread block's threads");
  const int nh = a.Hq + 2 * a.Hkv, D = a.D;
  const int64_t t = blockIdx.x / nh;
  const int h = static_cast<int>(blockIdx.x % nh);
  const bool is_v = h >= a.Hq + a.Hkv, is_q = h < a.Hq;
  // Before the wait, constants only.
  float wr[M], wp[M], freq[M];
  if (!is_v) norm_rope_consts<M>(is_q ? a.q_norm : a.k_norm, D, a.rot_dim, a.theta, wr, wp, freq);
  const float hnorm = 1.0f / sqrtf(static_cast<float>(D));  // as hadamard_rows_smem computes it
  pdl_wait();
  pdl_trigger();
  const int64_t row = a.rows[t];  // the pool row (q heads do not use it)
  float x[M];
  if (is_v) {  // a v head: to the V pool as it is
    const int hk = h - a.Hq - a.Hkv;
    load_head_warp<T, M>(a.v + (t * a.Hkv + hk) * D, D, x);
    store_head_warp<T, M>(x, a.vc, row, a.Hkv, hk, D, /*rotate=*/false, hnorm);
    return;
  }
  const int32_t pos = a.pos[t];
  T* head = is_q ? a.q + (t * a.Hq + h) * D : a.k + (t * a.Hkv + (h - a.Hq)) * D;
  norm_rope_head<T, M>(head, wr, wp, freq, D, a.rot_dim, a.eps, a.w_offset, pos, x);
  __syncwarp();  // every lane has read its partners before any lane overwrites them
  const int lane = threadIdx.x;
#pragma unroll
  for (int m = 0; m < M; ++m)
    if (lane + 32 * m < D) head[lane + 32 * m] = from_f32<T>(x[m]);
  if (is_q) return;
  store_head_warp<T, M>(x, a.kc, row, a.Hkv, h - a.Hq, D, /*rotate=*/true, hnorm);
}

CachePtrs cache_ptrs(const ops::KvRows& c) {
  return {c.data.data(), c.data.dtype() == DType::I8 ? c.scale.ptr<float>() : nullptr};
}

// pos, rows: [N] i32 on the device (check_same_device in the entry point).
void qk_norm_rope_kv_write_cuda(ops::Context& ctx, Tensor& q, Tensor& k, const Tensor& v, const Tensor& q_norm,
                                const Tensor& k_norm, float eps, float w_offset, const Tensor& pos, int rot_dim,
                                float theta, ops::KvRows& k_cache, ops::KvRows& v_cache, const Tensor& rows) {
  const int64_t N = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  VI_CHECK(D <= kMaxHeadDim, "op 'qk_norm_rope_kv_write' on cuda: head dim {} is over {}", D, kMaxHeadDim);
  const int64_t blocks = N * (Hq + 2 * Hkv);
  VI_CHECK(blocks <= INT32_MAX, "op 'qk_norm_rope_kv_write' on cuda: {} tokens x {} heads is too many", N,
           Hq + 2 * Hkv);
  dispatch_act("qk_norm_rope_kv_write", q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Args<T> a{q.ptr<T>(),
              k.ptr<T>(),
              v.ptr<T>(),
              q_norm.ptr<float>(),
              k_norm.ptr<float>(),
              pos.ptr<int32_t>(),
              rows.ptr<int32_t>(),
              cache_ptrs(k_cache),
              cache_ptrs(v_cache),
              static_cast<int>(Hq),
              static_cast<int>(Hkv),
              static_cast<int>(D),
              rot_dim,
              eps,
              w_offset,
              theta};
    const unsigned grid = static_cast<unsigned>(blocks);
    if (norm_threads(D) == 64 && D <= kWarpMaxHeadDim) {  // the sums it repeats are those of 64 threads
      auto kernel = D <= 64    ? qk_norm_rope_kv_write_warp_kernel<T, 2>
                    : D <= 128 ? qk_norm_rope_kv_write_warp_kernel<T, 4>
                               : qk_norm_rope_kv_write_warp_kernel<T, 8>;
      VI_CUDA_CHECK(pdl_launch(kernel, grid, 32, 0, stream_of(ctx), a));
    } else {
      VI_CUDA_CHECK(pdl_launch(qk_norm_rope_kv_write_kernel<T>, grid, norm_threads(D),
                               static_cast<size_t>(D) * sizeof(float), stream_of(ctx), a));
    }
  });
}

[[maybe_unused]] const bool registered = [] {
  ops::qk_norm_rope_kv_write_table().add(Device::CUDA, DType::F32, qk_norm_rope_kv_write_cuda);
  ops::qk_norm_rope_kv_write_table().add(Device::CUDA, DType::F16, qk_norm_rope_kv_write_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
