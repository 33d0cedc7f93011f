// CUDA gdn_conv_step: one block per q head, one per k head, then blocks of v channels, all
// of norm_threads(head_dim) threads (l2_norm's count, so each head's sum of squares is
// added in l2_norm's order and the result equals conv1d_causal then l2_norm bit for bit up
// to the compiler's contractions). A thread owns one channel at a time: it convolves the
// token with the channel's K-1 previous inputs in conv1d_causal's order (current tap
// first, then oldest to newest), shifts the state, and rounds the SiLU output to T before
// the head's norm reads it, as the stored conv output would be.
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/gdn_conv_step.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn_conv_step.h"

namespace vi::cuda {
namespace {

struct GroupArgs {
  const void* x;   // [C] T
  const float* w;  // [C, K]
  float* state;    // [K-1, C]
  void* y;         // [C] T
  int64_t C;
};

// y[c] = silu(conv of channel c), rounded to T; the state of channel c advanced by x[c].
template <class T>
__device__ float conv_channel(const GroupArgs& g, int64_t c, int K) {
  const T* x = static_cast<const T*>(g.x);
  const int H = K - 1;
  const float xv = to_f32(x[c]);
  float acc = g.w[c * K + H] * xv;
  for (int i = 0; i < H; ++i) acc += g.w[c * K + i] * g.state[i * g.C + c];
  for (int i = 0; i + 1 < H; ++i) g.state[i * g.C + c] = g.state[(i + 1) * g.C + c];
  if (H > 0) g.state[(H - 1) * g.C + c] = xv;
  const T out = from_f32<T>(silu_f(acc));
  static_cast<T*>(g.y)[c] = out;
  return to_f32(out);
}

// Blocks [0, n_q_heads): q heads; then k heads; then v in blockDim-channel slices.
template <class T>
__global__ void gdn_conv_step_kernel(GroupArgs q, GroupArgs k, GroupArgs v, int K, int64_t hd, float eps,
                                     float q_scale) {
  __shared__ float red[32];
  pdl_wait();
  pdl_trigger();
  const int64_t n_q = q.C / hd, n_k = k.C / hd;
  const int64_t b = blockIdx.x;
  if (b >= n_q + n_k) {
    const int64_t c = (b - n_q - n_k) * blockDim.x + threadIdx.x;
    if (c < v.C) conv_channel<T>(v, c, K);
    return;
  }
  const bool is_q = b < n_q;
  const GroupArgs g = is_q ? q : k;
  const int64_t c0 = (is_q ? b : b - n_q) * hd;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    const float val = conv_channel<T>(g, c0 + i, K);
    ss += val * val;
  }
  // eps on the sum (HF l2norm), as l2_norm_kernel; each thread rescales the outputs it wrote.
  const float f = (is_q ? q_scale : 1.0f) / sqrtf(block_sum(ss, red) + eps);
  T* y = static_cast<T*>(g.y) + c0;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) y[i] = from_f32<T>(to_f32(y[i]) * f);
}

GroupArgs args_of(const ops::ConvGroup& g) {
  return GroupArgs{g.x.data(), g.w.ptr<float>(), g.state.ptr<float>(), g.y.data(), g.x.dim(1)};
}

void gdn_conv_step_cuda(ops::Context& ctx, const ops::ConvGroup& q, const ops::ConvGroup& k, const ops::ConvGroup& v,
                        int64_t head_dim, float eps, float q_scale) {
  const int64_t K = q.w.dim(1);
  VI_CHECK(K <= kConvMaxTaps, "op 'gdn_conv_step' on cuda: kernel width {} exceeds {}", K, kConvMaxTaps);
  const int threads = norm_threads(head_dim);
  const int64_t blocks = q.x.dim(1) / head_dim + k.x.dim(1) / head_dim + (v.x.dim(1) + threads - 1) / threads;
  if (blocks == 0) return;
  VI_CHECK(blocks <= INT32_MAX, "op 'gdn_conv_step' on cuda: {} blocks is too many", blocks);
  dispatch_act("gdn_conv_step", q.x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    VI_CUDA_CHECK(pdl_launch(gdn_conv_step_kernel<T>, static_cast<unsigned>(blocks), threads, 0, stream_of(ctx),
                             args_of(q), args_of(k), args_of(v), static_cast<int>(K), head_dim, eps, q_scale));
  });
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) ops::gdn_conv_step_table().add(Device::CUDA, t, gdn_conv_step_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
