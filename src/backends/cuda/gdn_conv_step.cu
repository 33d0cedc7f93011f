// CUDA gdn_conv_step: one block per q head, one per k head, then blocks of v channels, all
// of norm_threads(head_dim) threads (l2_norm's count, so each head's sum of squares is
// added in l2_norm's order and the result equals conv1d_causal then l2_norm bit for bit up
// to the compiler's contractions). A thread owns one channel at a time: it convolves the
// token with the channel's K-1 previous inputs in conv1d_causal's order (current tap
// first, then oldest to newest), shifts the state, and rounds the SiLU output to T before
// the head's norm reads it, as the stored conv output would be.
// Latency (a decode round runs it 48 times on one token): the taps are loaded into registers
// and the state's lines prefetched into L2 before pdl_wait, so after it one round trip (x and
// the state) precedes the conv; a head block keeps its outputs in registers for the norm's
// rescale instead of reading y back.
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

// Channels per thread in a head block: norm_threads(hd) threads take at most 4 channels each
// below hd 4096; wider heads keep their outputs in y and read them back (the old way).
constexpr int kConvHeadRegs = 4;

// A channel's taps in registers: cur = w[c, K-1] (the current input's), prev[i] = w[c, i]
// for i < K-1 (the state's, oldest first; the slots past K-1 unused). Indexed by constants
// only, so they stay in registers.
struct Taps {
  float cur;
  float prev[kConvMaxTaps - 1];
};

// Conv weights are constants, so this runs before pdl_wait and their load (from DRAM: a round
// of weight streaming has evicted them) overlaps the tail of the kernel before.
__device__ __forceinline__ void load_taps(const GroupArgs& g, int64_t c, int K, Taps& w) {
  w.cur = g.w[c * K + K - 1];
#pragma unroll
  for (int i = 0; i < kConvMaxTaps - 1; ++i) w.prev[i] = i + 1 < K ? g.w[c * K + i] : 0.0f;
}

// Channel c's K-1 state lines in L2 before pdl_wait (prefetch_l2: no value is read; the state
// was last touched a round ago). One line per 32 channels: lane 0 of each warp asks for them.
__device__ __forceinline__ void prefetch_state(const GroupArgs& g, int64_t c, int K) {
  if ((threadIdx.x & 31) != 0 || c >= g.C) return;
  for (int i = 0; i + 1 < K; ++i) prefetch_l2(g.state + i * g.C + c);
}

// y[c] = silu(conv of channel c), rounded to T; the state of channel c advanced by x[c]. w:
// the channel's taps (load_taps). Returns the stored output as f32.
template <class T>
__device__ float conv_channel(const GroupArgs& g, int64_t c, int K, const Taps& w) {
  const T* x = static_cast<const T*>(g.x);
  const int H = K - 1;
  // Every input first (one round trip), then conv1d_causal's order: current tap, then oldest
  // to newest.
  float st[kConvMaxTaps - 1];
#pragma unroll
  for (int i = 0; i < kConvMaxTaps - 1; ++i)
    if (i < H) st[i] = g.state[i * g.C + c];
  const float xv = to_f32(x[c]);
  float acc = w.cur * xv;
  if (H == 3) {  // Qwen3.5's width 4, without the bounds tests
    acc += w.prev[0] * st[0];
    acc += w.prev[1] * st[1];
    acc += w.prev[2] * st[2];
  } else {
#pragma unroll
    for (int i = 0; i < kConvMaxTaps - 1; ++i)
      if (i < H) acc += w.prev[i] * st[i];
  }
#pragma unroll
  for (int i = 0; i + 1 < kConvMaxTaps - 1; ++i)
    if (i + 1 < H) g.state[i * g.C + c] = st[i + 1];
  if (H > 0) g.state[(H - 1) * g.C + c] = xv;
  const T out = from_f32<T>(silu_f(acc));
  static_cast<T*>(g.y)[c] = out;
  return to_f32(out);
}

// Blocks [0, n_q_heads): q heads; then k heads; then v in blockDim-channel slices.
// Critical path of a head block: (taps loaded and state prefetched before the wait) x and
// the state from L2, the conv, the block sum, the outputs rescaled from registers.
template <class T>
__global__ void gdn_conv_step_kernel(GroupArgs q, GroupArgs k, GroupArgs v, int K, int64_t hd, float eps,
                                     float q_scale) {
  __shared__ float red[32];
  const int64_t n_q = q.C / hd, n_k = k.C / hd;
  const int64_t b = blockIdx.x;
  if (b >= n_q + n_k) {
    const int64_t c = (b - n_q - n_k) * blockDim.x + threadIdx.x;
    Taps w{};
    if (c < v.C) load_taps(v, c, K, w);
    prefetch_state(v, c, K);
    pdl_wait();
    pdl_trigger();
    if (c < v.C) conv_channel<T>(v, c, K, w);
    return;
  }
  const bool is_q = b < n_q;
  const GroupArgs g = is_q ? q : k;
  const int64_t c0 = (is_q ? b : b - n_q) * hd;
  Taps w[kConvHeadRegs];
#pragma unroll
  for (int r = 0; r < kConvHeadRegs; ++r) {
    const int64_t i = threadIdx.x + int64_t(r) * blockDim.x;
    if (i < hd) {
      load_taps(g, c0 + i, K, w[r]);
      prefetch_state(g, c0 + i, K);
    }
  }
  pdl_wait();
  pdl_trigger();
  float val[kConvHeadRegs];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kConvHeadRegs; ++r) {
    const int64_t i = threadIdx.x + int64_t(r) * blockDim.x;
    if (i < hd) {
      val[r] = conv_channel<T>(g, c0 + i, K, w[r]);
      ss += val[r] * val[r];
    }
  }
  Taps wk;
  for (int64_t i = threadIdx.x + int64_t(kConvHeadRegs) * blockDim.x; i < hd; i += blockDim.x) {  // hd > 4096
    load_taps(g, c0 + i, K, wk);
    const float vv = conv_channel<T>(g, c0 + i, K, wk);
    ss += vv * vv;
  }
  // eps on the sum (HF l2norm), as l2_norm_kernel; each thread rescales the outputs it wrote.
  const float f = (is_q ? q_scale : 1.0f) / sqrtf(block_sum(ss, red) + eps);
  T* y = static_cast<T*>(g.y) + c0;
#pragma unroll
  for (int r = 0; r < kConvHeadRegs; ++r) {
    const int64_t i = threadIdx.x + int64_t(r) * blockDim.x;
    if (i < hd) y[i] = from_f32<T>(val[r] * f);
  }
  for (int64_t i = threadIdx.x + int64_t(kConvHeadRegs) * blockDim.x; i < hd; i += blockDim.x)
    y[i] = from_f32<T>(to_f32(y[i]) * f);
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
