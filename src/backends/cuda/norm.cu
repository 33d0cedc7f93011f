// CUDA kernels of rms_norm, add_rms_norm, l2_norm and gated_rms_norm. Each output is written
// by the thread that read its input, after the row's reduction, so y may alias x (or z; for
// add_rms_norm, o).
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q8kx.cuh"
#include "ops/norm.h"

namespace vi::cuda {
namespace {

template <class T>
__global__ void rms_norm_kernel(const T* x, const float* __restrict__ w, float eps, float w_offset, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float inv = rms_inv(row_sum_sq(xr, n, red), n, eps);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>((to_f32(xr[i]) * inv) * (w[i] + w_offset));
}

// x += o, then y = rms_norm(x). The sum is rounded to T before it is squared or stored,
// as the add kernel rounds it, so y equals rms_norm of what ops::add would have left in x.
// The second loop reads back x[i] that the same thread wrote in the first (no other thread
// touches it), from L1/L2: one DRAM pass over x, o and y.
template <class T>
__global__ void add_rms_norm_kernel(T* x, const T* o, const float* __restrict__ w, float eps, float w_offset, T* y,
                                    int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  T* xr = x + blockIdx.x * n;
  const T* orow = o + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  float ss = 0.0f;
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const T s = from_f32<T>(to_f32(xr[i]) + to_f32(orow[i]));
    xr[i] = s;
    const float v = to_f32(s);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, red) / static_cast<float>(n) + eps);
#pragma unroll 4
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>((to_f32(xr[i]) * inv) * (w[i] + w_offset));
}

// 16 bytes of T as floats, and back (rounded to T as from_f32 rounds each element).
template <class T>
struct Vec16 {
  static constexpr int N = 16 / static_cast<int>(sizeof(T));  // 8 halves or 4 floats
};
template <class T>
__device__ __forceinline__ void unpack16(const uint4& r, float (&f)[Vec16<T>::N]) {
  const T* e = reinterpret_cast<const T*>(&r);
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) f[i] = to_f32(e[i]);
}
template <class T>
__device__ __forceinline__ uint4 pack16(const float (&f)[Vec16<T>::N]) {
  uint4 r;
  T* e = reinterpret_cast<T*>(&r);
#pragma unroll
  for (int i = 0; i < Vec16<T>::N; ++i) e[i] = from_f32<T>(f[i]);
  return r;
}

// add_rms_norm_kernel's function with the row held in registers: a decode round calls it 128
// times on one row of 5120 between two GEMVs, so its latency, not its bytes, is what counts.
// The old kernel's critical path after pdl_wait was: scalar loads of x and o, the block sum,
// then a second round of loads (x back and the norm weights, which a round of weight
// streaming has evicted from L2) before y. Here the weights (+ w_offset) are loaded into
// registers BEFORE pdl_wait (constants: they overlap the GEMV's tail), x's lines are
// prefetched into L2 there too, and after the wait each thread makes one 16-byte load of x
// and of o per vector, so one round trip and the block sum remain.
// Layout: n % V == 0 (V = Vec16<T>::N), every row and w 16-byte aligned; thread t of a block
// of blockDim.x (a warp multiple, <= 1024) owns vectors t, t + blockDim.x, ... (C of them at
// most). Same function as add_rms_norm_kernel: s = T(x + o) stored to x, y = T((s * inv) *
// (w + w_offset)) with inv = 1 / sqrt(sum(s^2) / n + eps); only the order in which the
// squares are added differs (each thread's V * C contiguous ones, then block_sum), so y may
// differ from the old kernel's in the last bit of inv.
// Q8: y is Q8_KX blocks (T = __half: a warp's 32 vectors are one 256-value block) for a Q4_KI
// GEMV (gemv_q4ki.cuh): the f16 output, rounded as it would be stored, quantized per block.
template <class T, int C, bool Q8 = false>
__global__ void add_rms_norm_vec_kernel(T* x, const T* o, const float* __restrict__ w, float eps, float w_offset,
                                        void* y_out, int64_t n) {
  constexpr int V = Vec16<T>::N;
  __shared__ float red[32];
  const int64_t nv = n / V;
  T* xr = x + blockIdx.x * n;
  const T* orow = o + blockIdx.x * n;
  T* yr = static_cast<T*>(y_out) + blockIdx.x * n;
  float wv[C][V];  // w + w_offset of the thread's vectors
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t v = threadIdx.x + int64_t(c) * blockDim.x;
    if (v >= nv) continue;
#pragma unroll
    for (int i = 0; i < V; i += 4) {
      const float4 q = *reinterpret_cast<const float4*>(w + v * V + i);
      wv[c][i] = q.x + w_offset;
      wv[c][i + 1] = q.y + w_offset;
      wv[c][i + 2] = q.z + w_offset;
      wv[c][i + 3] = q.w + w_offset;
    }
  }
  // x is the residual stream, last written a GEMV or two ago; its lines (128 bytes each) may
  // have been evicted by that GEMV's weights.
  const int64_t lines = (n * int64_t(sizeof(T)) + 127) / 128;
  for (int64_t l = threadIdx.x; l < lines; l += blockDim.x) prefetch_l2(reinterpret_cast<const char*>(xr) + l * 128);
  pdl_wait();
  pdl_trigger();
  uint4 xraw[C], oraw[C];
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t v = threadIdx.x + int64_t(c) * blockDim.x;
    if (v >= nv) continue;
    xraw[c] = reinterpret_cast<const uint4*>(xr)[v];
    oraw[c] = reinterpret_cast<const uint4*>(orow)[v];
  }
  float s[C][V];
  float ss = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t v = threadIdx.x + int64_t(c) * blockDim.x;
    if (v >= nv) continue;
    float a[V], b[V];
    unpack16<T>(xraw[c], a);
    unpack16<T>(oraw[c], b);
#pragma unroll
    for (int i = 0; i < V; ++i) s[c][i] = a[i] + b[i];
    const uint4 r = pack16<T>(s[c]);  // the sum rounded to T, as ops::add stores it
    reinterpret_cast<uint4*>(xr)[v] = r;
    unpack16<T>(r, s[c]);
#pragma unroll
    for (int i = 0; i < V; ++i) ss += s[c][i] * s[c][i];
  }
  const float inv = rms_inv(block_sum(ss, red), n, eps);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const int64_t v = threadIdx.x + int64_t(c) * blockDim.x;
    if (v >= nv) continue;
    float out[V];
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = (s[c][i] * inv) * wv[c][i];
    if constexpr (Q8) {
      static_assert(V == 8, "Q8_KX output from f16 rows only");
      unpack16<T>(pack16<T>(out), out);  // the values the f16 output would hold
      uint8_t* blk = static_cast<uint8_t*>(y_out) + (blockIdx.x * (n / kQKK) + v / 32) * int64_t(sizeof(BlockQ8_KX));
      quantize_warp_q8kx(out, blk, threadIdx.x & 31);
    } else {
      reinterpret_cast<uint4*>(yr)[v] = pack16<T>(out);
    }
  }
}

template <class T>
__global__ void l2_norm_kernel(const T* x, float eps, float scale, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float f = scale / sqrtf(row_sum_sq(xr, n, red) + eps);  // eps on the sum (HF l2norm)
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_f32<T>(to_f32(xr[i]) * f);
}

template <class T>
__global__ void gated_rms_norm_kernel(const T* x, const T* z, const float* __restrict__ w, float eps, T* y, int64_t n) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const T* xr = x + blockIdx.x * n;
  const T* zr = z + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  const float f = 1.0f / sqrtf(row_sum_sq(xr, n, red) / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    yr[i] = from_f32<T>(w[i] * (to_f32(xr[i]) * f) * silu_f(to_f32(zr[i])));
}

unsigned row_grid(const char* op, const Tensor& x) {
  VI_CHECK(x.rows() <= INT32_MAX, "op '{}' on cuda: {} rows is too many", op, x.rows());
  return static_cast<unsigned>(x.rows());
}

void rms_norm_cuda(ops::Context& ctx, const Tensor& x, const Tensor& w, float eps, float w_offset, Tensor& y) {
  dispatch_act("rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(rms_norm_kernel<T>, row_grid("rms_norm", x), norm_threads(x.cols()), 0, stream_of(ctx),
                             x.ptr<T>(), w.ptr<float>(), eps, w_offset, y.ptr<T>(), x.cols()));
  });
}

// add_rms_norm_vec_kernel for rows of n = V·nv values (nv <= 4096 vectors): threads = the vectors
// / C, rounded up to a warp, with the fewest vectors per thread C that fits (f16 5120: 640
// threads of one vector each). y: T elements, or Q8_KX blocks with Q8.
template <class T, bool Q8>
void launch_add_rms_norm_vec(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps,
                             float w_offset, void* y, int64_t n) {
  const int64_t nv = n / Vec16<T>::N;
  const int C = nv <= 1024 ? 1 : nv <= 2048 ? 2 : 4;
  const int threads = static_cast<int>((nv + C - 1) / C + 31) / 32 * 32;
  auto kernel = C == 1   ? add_rms_norm_vec_kernel<T, 1, Q8>
                : C == 2 ? add_rms_norm_vec_kernel<T, 2, Q8>
                         : add_rms_norm_vec_kernel<T, 4, Q8>;
  VI_CUDA_CHECK(pdl_launch(kernel, row_grid("add_rms_norm", x), threads, 0, stream_of(ctx), x.ptr<T>(), o.ptr<T>(),
                           w.ptr<float>(), eps, w_offset, y, n));
}

// y as Q8_KX blocks: the vector kernel's Q8 form (f16 rows of whole 256-value blocks).
void add_rms_norm_q8kx(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset,
                       Tensor& y) {
  const int64_t n = x.cols(), nv = n / 8;
  VI_CHECK(x.dtype() == DType::F16 && n % kQKK == 0 && nv <= 4 * 1024 && is_aligned(x.data(), 16) &&
               is_aligned(o.data(), 16) && is_aligned(y.data(), 16) && is_aligned(w.data(), 16),
           "op 'add_rms_norm' on cuda: Q8_KX output needs f16 rows of whole 256-value blocks (at most 32768, 16-byte "
           "aligned), got x {} {}",
           dtype_name(x.dtype()), x.shape_str());
  if (x.numel() == 0) return;
  launch_add_rms_norm_vec<__half, true>(ctx, x, o, w, eps, w_offset, y.data(), n);
}

void add_rms_norm_cuda(ops::Context& ctx, Tensor& x, const Tensor& o, const Tensor& w, float eps, float w_offset,
                       Tensor& y) {
  if (y.dtype() == DType::Q8_KX) return add_rms_norm_q8kx(ctx, x, o, w, eps, w_offset, y);
  dispatch_act("add_rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    const int64_t n = x.cols();
    const unsigned grid = row_grid("add_rms_norm", x);
    // The register kernel where rows split into 16-byte vectors and fit 1024 threads x 4
    // vectors (f16 rows up to 32768; launch_add_rms_norm_vec picks the threads).
    constexpr int V = Vec16<T>::N;
    const bool vec = n % V == 0 && n / V <= 4 * 1024 && is_aligned(x.data(), 16) && is_aligned(o.data(), 16) &&
                     is_aligned(y.data(), 16) && is_aligned(w.data(), 16);
    if (vec) {
      launch_add_rms_norm_vec<T, false>(ctx, x, o, w, eps, w_offset, static_cast<void*>(y.ptr<T>()), n);
      return;
    }
    VI_CUDA_CHECK(pdl_launch(add_rms_norm_kernel<T>, grid, norm_threads(n), 0, stream_of(ctx), x.ptr<T>(), o.ptr<T>(),
                             w.ptr<float>(), eps, w_offset, y.ptr<T>(), n));
  });
}

void l2_norm_cuda(ops::Context& ctx, const Tensor& x, float eps, float scale, Tensor& y) {
  dispatch_act("l2_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(l2_norm_kernel<T>, row_grid("l2_norm", x), norm_threads(x.cols()), 0, stream_of(ctx),
                             x.ptr<T>(), eps, scale, y.ptr<T>(), x.cols()));
  });
}

void gated_rms_norm_cuda(ops::Context& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  dispatch_act("gated_rms_norm", x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.numel() == 0) return;
    VI_CUDA_CHECK(pdl_launch(gated_rms_norm_kernel<T>, row_grid("gated_rms_norm", x), norm_threads(x.cols()), 0,
                             stream_of(ctx), x.ptr<T>(), z.ptr<T>(), w.ptr<float>(), eps, y.ptr<T>(), x.cols()));
  });
}

[[maybe_unused]] const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) {
    ops::rms_norm_table().add(Device::CUDA, t, rms_norm_cuda);
    ops::add_rms_norm_table().add(Device::CUDA, t, add_rms_norm_cuda);
    ops::l2_norm_table().add(Device::CUDA, t, l2_norm_cuda);
    ops::gated_rms_norm_table().add(Device::CUDA, t, gated_rms_norm_cuda);
  }
  return true;
}();

}  // namespace
}  // namespace vi::cuda
