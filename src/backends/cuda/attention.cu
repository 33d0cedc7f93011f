// CUDA kernels of attention and paged_attention (one kernel for prefill: the paged form
// maps key position s to pool row table[s / bs] * bs + s % bs; the contiguous form uses s;
// paged decode goes to attention_decode.cu). Per block: the query row (pre-scaled, fp32) in shared memory;
// each tile of 64 keys is scored by the four warps (lanes stride over head_dim, so K rows
// are read coalesced), then exponentiated against the running max and folded into the
// per-thread output dims with the usual rescaling of the running sum and accumulators.
#include "backends/cuda/attention.cuh"

#include <algorithm>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/attention_prefill.cuh"
#include "backends/cuda/elementwise.cuh"
#include "ops/attention.h"
#include "ops/paged_attention.h"

namespace vi::cuda {
namespace {

template <class TQ, class TKV>
__global__ void __launch_bounds__(kAttnThreads)
    attention_kernel(const TQ* __restrict__ q, const TKV* __restrict__ k, const TKV* __restrict__ v, TQ* out, int Hq,
                     int Hkv, int D, int64_t q_pos0, const int32_t* __restrict__ q_pos, float scale,
                     const int32_t* __restrict__ table, int64_t block_size) {
  extern __shared__ float smem[];
  float* qs = smem;       // [D]
  float* p = smem + D;    // [kAttnTile]
  const int64_t row = blockIdx.x;  // t * Hq + h
  const int64_t t = row / Hq;
  const int h = static_cast<int>(row % Hq), hk = h / (Hq / Hkv);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Causal: keys 0 .. own position (device positions where given: the paged form).
  const int64_t n_keys = (q_pos ? int64_t(q_pos[0]) : q_pos0) + t + 1;
  const int64_t kv_stride = int64_t(Hkv) * D;
  const TKV* kh = k + int64_t(hk) * D;
  const TKV* vh = v + int64_t(hk) * D;
  auto kv_row = [&](int64_t s) -> int64_t {  // cache row of key position s
    return table ? int64_t(table[s / block_size]) * block_size + s % block_size : s;
  };

  for (int d = tid; d < D; d += kAttnThreads) qs[d] = to_f32(q[row * D + d]);
  float acc[kAttnMaxDim / kAttnThreads] = {};
  float m = -INFINITY, l = 0.0f;
  __syncthreads();

  for (int64_t s0 = 0; s0 < n_keys; s0 += kAttnTile) {
    const int nt = static_cast<int>(min(int64_t(kAttnTile), n_keys - s0));
    for (int j = warp; j < nt; j += kAttnThreads / 32) {
      const TKV* kr = kh + kv_row(s0 + j) * kv_stride;
      float dot = 0.0f;
      for (int d = lane; d < D; d += 32) dot += qs[d] * to_f32(kr[d]);
      dot = warp_sum(dot);
      if (lane == 0) p[j] = dot * scale;
    }
    __syncthreads();
    float mt = -INFINITY;
    for (int j = 0; j < nt; ++j) mt = fmaxf(mt, p[j]);
    const float m_new = fmaxf(m, mt);
    const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
    __syncthreads();                     // every thread has read the raw scores
    if (tid < nt) p[tid] = expf(p[tid] - m_new);
    __syncthreads();
    float lt = 0.0f;
    for (int j = 0; j < nt; ++j) lt += p[j];
    l = l * corr + lt;
#pragma unroll
    for (int r = 0; r < kAttnMaxDim / kAttnThreads; ++r) {
      const int d = tid + r * kAttnThreads;
      if (d < D) {
        float a = acc[r] * corr;
        for (int j = 0; j < nt; ++j) a += p[j] * to_f32(vh[kv_row(s0 + j) * kv_stride + d]);
        acc[r] = a;
      }
    }
    m = m_new;
    __syncthreads();  // p is rewritten by the next tile
  }
  const float inv = 1.0f / l;
#pragma unroll
  for (int r = 0; r < kAttnMaxDim / kAttnThreads; ++r) {
    const int d = tid + r * kAttnThreads;
    if (d < D) out[row * D + d] = from_f32<TQ>(acc[r] * inv);
  }
}

template <class TKV>
void attention_launch(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0,
                      const int32_t* q_pos, float scale, const int32_t* table, int64_t block_size, Tensor& out) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.dim(1);
  VI_CHECK(D <= kAttnMaxDim, "op 'attention' on cuda: head_dim {} exceeds {}", D, kAttnMaxDim);
  if (T == 0) return;
  VI_CHECK(T * Hq < INT32_MAX, "op 'attention' on cuda: {} query rows is too many", T * Hq);
  dispatch_act("attention", q.dtype(), [&](auto tag) {
    using TQ = decltype(tag);
    const size_t smem = (D + kAttnTile) * sizeof(float);
    attention_kernel<TQ, TKV><<<static_cast<unsigned>(T * Hq), kAttnThreads, smem, stream_of(ctx)>>>(
        q.ptr<TQ>(), k.ptr<TKV>(), v.ptr<TKV>(), out.ptr<TQ>(), static_cast<int>(Hq), static_cast<int>(Hkv),
        static_cast<int>(D), q_pos0, q_pos, scale, table, block_size);
    VI_CUDA_LAUNCH_CHECK();
  });
}

template <class TKV>
void attention_cuda(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0, float scale,
                    Tensor& out) {
  attention_launch<TKV>(ctx, q, k, v, q_pos0, nullptr, scale, nullptr, 0, out);
}

// The launch arguments the decode and prefill kernels share (DecodeArgs, PrefillArgs), for
// the queries t0 .. t0 + n - 1 of the call: their q and out rows, their first position, and
// the keys up to the last of them.
template <class Args>
Args paged_args(const Tensor& q, const ops::KvRows& k, const ops::KvRows& v, const int32_t* table,
                int64_t block_size, const int32_t* q_pos, int64_t kv_bound, float scale, Tensor& out, int64_t t0,
                int64_t n) {
  const int64_t T = q.dim(0);
  const size_t q_row_bytes = dtype_row_bytes(q.dtype(), q.dim(1) * q.dim(2));
  Args a;
  a.q = static_cast<const uint8_t*>(q.data()) + t0 * q_row_bytes;
  a.q_dtype = q.dtype();
  a.k = k.data.data();
  a.v = v.data.data();
  a.k_dtype = k.data.dtype();
  a.v_dtype = v.data.dtype();
  a.k_scale = k.data.dtype() == DType::I8 ? k.scale.ptr<float>() : nullptr;
  a.v_scale = v.data.dtype() == DType::I8 ? v.scale.ptr<float>() : nullptr;
  a.table = table;
  a.block_size = block_size;
  a.q_pos = q_pos + t0;
  a.kv_bound = kv_bound - (T - t0 - n);
  a.T = n;
  a.Hq = q.dim(1);
  a.Hkv = k.data.dim(1);
  a.D = q.dim(2);
  a.scale = scale;
  a.out = static_cast<uint8_t*>(out.data()) + t0 * q_row_bytes;
  return a;
}

// Paged attention: up to kDecodeMaxT query tokens (decode, MTP verification) go to the
// split-KV decode kernel (attention_decode.cu); longer chunks (prefill) with f16 queries to
// the tensor-core flash kernel (attention_prefill.cu; f16 or i8 pools), and what it does not
// take to the CUDA-core kernel above (f32), or, for i8, chunks of the decode kernel.
// Table and positions are device memory (the op entry point): no host round trip, so a
// decode step can be recorded and replayed (ops/graph.h); kv_bound sizes the launches.
void paged_attention_cuda(ops::Context& ctx, const Tensor& q, const ops::KvRows& k, const ops::KvRows& v,
                          const Tensor& table, int64_t block_size, const Tensor& q_pos, int64_t kv_bound, float scale,
                          Tensor& out, const Tensor* out_gate) {
  const int64_t T = q.dim(0), Hq = q.dim(1), D = q.dim(2), Hkv = k.data.dim(1);
  if (T == 0) return;
  // The output gate where no kernel applied it: sigmoid_mul over rows [t0, t0 + n) of out.
  auto gate_rows = [&](int64_t t0, int64_t n) {
    if (out_gate == nullptr) return;
    Tensor o = out.reshape({T, Hq * D}).slice_rows(t0, t0 + n);
    sigmoid_mul_cuda(ctx, o, out_gate->reshape({T, Hq * D}).slice_rows(t0, t0 + n), o);
  };
  const int32_t* tbl = table.ptr<int32_t>();
  const int32_t* pos = q_pos.ptr<int32_t>();
  const bool quantized = k.data.dtype() == DType::I8 || v.data.dtype() == DType::I8;
  const int64_t chunk = std::min<int64_t>(kDecodeMaxT, std::max<int64_t>(1, kDecodeMaxRows / (Hq / Hkv)));
  // f16 activations only: the tensor cores round q and the probabilities to f16, which the
  // f32 activations (the exact wiring check) must not.
  if (T > chunk && q.dtype() == DType::F16 &&
      prefill_attention_fits(Hq, Hkv, D, q.dtype(), k.data.dtype(), v.data.dtype())) {
    prefill_attention(ctx, paged_args<PrefillArgs>(q, k, v, tbl, block_size, pos, kv_bound, scale, out, 0, T));
    gate_rows(0, T);
    return;
  }
  if (!quantized && !decode_attention_fits(T, Hq, Hkv, D)) {
    VI_CHECK(k.data.dtype() == v.data.dtype(), "op 'paged_attention' on cuda: prefill needs one K/V dtype, got {} / {}",
             dtype_name(k.data.dtype()), dtype_name(v.data.dtype()));
    if (k.data.dtype() == DType::F16)
      attention_launch<__half>(ctx, q, k.data, v.data, 0, pos, scale, tbl, block_size, out);
    else
      attention_launch<float>(ctx, q, k.data, v.data, 0, pos, scale, tbl, block_size, out);
    gate_rows(0, T);
    return;
  }
  VI_CHECK(decode_attention_fits(std::min(T, chunk), Hq, Hkv, D),
           "op 'paged_attention' on cuda: i8 K/V need head_dim <= {} and at most {} query heads per kv head (got "
           "D={}, {} / {})", kDecodeMaxDim, kDecodeMaxRows, D, Hq, Hkv);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t n = std::min(chunk, T - t0);
    DecodeArgs a = paged_args<DecodeArgs>(q, k, v, tbl, block_size, pos, kv_bound, scale, out, t0, n);
    if (out_gate != nullptr) a.gate = out_gate->row(t0 * Hq);  // rows of Hq * D: token t0's first
    if (!decode_attention(ctx, a)) gate_rows(t0, n);
  }
}

[[maybe_unused]] const bool registered = [] {
  ops::attention_table().add(Device::CUDA, DType::F16, attention_cuda<__half>);
  ops::attention_table().add(Device::CUDA, DType::F32, attention_cuda<float>);
  for (DType t : {DType::F32, DType::F16, DType::I8}) ops::paged_attention_table().add(Device::CUDA, t, paged_attention_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
