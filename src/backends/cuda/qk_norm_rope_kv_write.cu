// CUDA qk_norm_rope_kv_write (ops/qk_norm_rope_kv_write.h): a full-attention layer's q/k
// head norms, their RoPE and the K/V cache append in one launch. One block per (token,
// head) over the Hq + 2 * Hkv heads of a token: q heads are normalised and rotated in place;
// k heads as well, then written to the K pool; v heads are only written to the V pool. The
// block has norm_threads(D) threads and sums squares with rms_norm's row_sum_sq, angles and
// rotation come from rope.cuh, the int8 write is kv_write_i8_kernel's arithmetic (its
// Hadamard rotation and max are exact whatever the thread count), and every value is stored
// in T where the unfused ops store it: the result is those ops' bits.
#include "backends/cuda/kv_quant.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/rope.cuh"
#include "ops/qk_norm_rope_kv_write.h"

namespace vi::cuda {
namespace {

// The head vector waits in shared memory as f32 (32 KB here; 48 KB is the limit without an opt-in).
constexpr int64_t kMaxHeadDim = 8192;

// A K or V pool: [n_rows, Hkv, D] of T (scale null) or of int8 with scale [n_rows, Hkv] f32.
struct CachePtrs {
  void* data;
  float* scale;
};

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
  if (rotate) hadamard_rows_smem(x, 1, D, D);
  float amax = 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) amax = fmaxf(amax, fabsf(x[d]));
  amax = block_max(amax, red);
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  int8_t* dst = static_cast<int8_t*>(c.data) + off;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    dst[d] = static_cast<int8_t>(fminf(fmaxf(rintf(x[d] * inv), -127.0f), 127.0f));
  if (threadIdx.x == 0) c.scale[r * Hkv + hk] = amax / 127.0f;
}

template <class T>
__global__ void qk_norm_rope_kv_write_kernel(Args<T> a) {
  extern __shared__ float x[];  // [D] the head vector in f32
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int nh = a.Hq + 2 * a.Hkv, D = a.D;
  const int64_t t = blockIdx.x / nh;
  const int h = static_cast<int>(blockIdx.x % nh);
  if (h >= a.Hq + a.Hkv) {  // a v head: to the V pool as it is
    const int hk = h - a.Hq - a.Hkv;
    const T* src = a.v + (t * a.Hkv + hk) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) x[d] = to_f32(src[d]);
    __syncthreads();
    store_head<T>(x, red, a.vc, a.rows[t], a.Hkv, hk, D, /*rotate=*/false);
    return;
  }
  const bool is_q = h < a.Hq;
  T* head = is_q ? a.q + (t * a.Hq + h) * D : a.k + (t * a.Hkv + (h - a.Hq)) * D;
  const float* w = is_q ? a.q_norm : a.k_norm;
  // rms_norm: y rounded to T, as its kernel stores it for rope to read.
  const float inv = rms_inv(row_sum_sq(head, D, red), D, a.eps);
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    x[d] = to_f32(from_f32<T>((to_f32(head[d]) * inv) * (w[d] + a.w_offset)));
  __syncthreads();
  // rope over the first rot_dim dims, each pair rounded to T as the rope kernel stores it.
  const int half = a.rot_dim / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    float c, s;
    rope_cos_sin(a.pos[t], j, a.rot_dim, a.theta, c, s);
    const float2 y = rope_rotate(x[j], x[j + half], c, s);
    x[j] = to_f32(from_f32<T>(y.x));
    x[j + half] = to_f32(from_f32<T>(y.y));
  }
  __syncthreads();
  for (int d = threadIdx.x; d < D; d += blockDim.x) head[d] = from_f32<T>(x[d]);
  if (is_q) return;
  __syncthreads();  // others may still read x above when the rotation rewrites it
  store_head<T>(x, red, a.kc, a.rows[t], a.Hkv, h - a.Hq, D, /*rotate=*/true);
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
    VI_CUDA_CHECK(pdl_launch(qk_norm_rope_kv_write_kernel<T>, static_cast<unsigned>(blocks), norm_threads(D),
                             static_cast<size_t>(D) * sizeof(float), stream_of(ctx), a));
  });
}

const bool registered = [] {
  ops::qk_norm_rope_kv_write_table().add(Device::CUDA, DType::F32, qk_norm_rope_kv_write_cuda);
  ops::qk_norm_rope_kv_write_table().add(Device::CUDA, DType::F16, qk_norm_rope_kv_write_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
