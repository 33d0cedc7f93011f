// CUDA gdn_conv_step: one block per q head, one per k head, then blocks of v channels, all
// of norm_threads(head_dim) threads (l2_norm's count, so each head's sum of squares is
// added in l2_norm's order and the result equals conv1d_causal then l2_norm bit for bit up
// to the compiler's contractions). A thread owns one channel at a time: it runs the step's
// tokens in order, convolving each with the channel's K-1 previous inputs in conv1d_causal's
// order (current tap first, then oldest to newest) and shifting the window, and rounds each
// SiLU output to T before the head's norm reads it, as the stored conv output would be.
// Latency (a decode round runs it 48 times on one token, a verify round on a few): the taps
// are loaded into registers and the state's lines prefetched into L2 before pdl_wait, so
// after it one round trip (every token's x and the state) precedes the conv; the window
// stays in registers across the tokens and the state is written once; a head block keeps
// its outputs in registers for the norm's rescale instead of reading y back, and sums the
// squares of all its tokens with one barrier.
// Up to kConvStepTokens tokens per launch (a verify round's drafts); a longer input runs as
// several launches of that many tokens, each continuing the state the one before wrote.
#include <algorithm>

#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/gdn_conv_step.cuh"
#include "backends/cuda/norm.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn_conv_step.h"

namespace vi::cuda {
namespace {

struct GroupArgs {
  const void* x;   // [T, C] T
  const float* w;  // [C, K]
  float* state;    // [K-1, C]
  void* y;         // [T, C] T
  int64_t C;
  float* after;    // [n_after, K-1, C]: the window after each of the launch's first n_after tokens, or null
  int n_after;
};

// Channels per thread in a head block: norm_threads(hd) threads take at most 4 channels each
// below hd 4096; wider heads keep their outputs in y and read them back (the old way).
constexpr int kConvHeadRegs = 4;

// Tokens per launch of the multi-token kernel: a channel's outputs of all of them wait in
// registers for the head's norm (kConvHeadRegs x this floats per thread).
constexpr int kConvStepTokens = static_cast<int>(ops::kMaxFusedGdnRows);

// Threads bound of the multi-token kernel (norm_threads(hd) up to hd 1024): its registers
// (taps, window, outputs) exceed what 1024-thread blocks may hold; wider heads run the
// one-token kernel once per token.
constexpr int kConvStepMaxThreads = 256;

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

// Channel c over the nt <= TOK tokens of the launch: y[t, c] = silu(conv of token t),
// rounded to T, and out[t] = that stored value as f32; the state of channel c advanced by
// the nt inputs. w: the channel's taps (load_taps). The window st (oldest first) lives in
// registers and shifts with constant indices only (indexing by the runtime H would put it in
// local memory).
template <class T, int TOK>
__device__ __forceinline__ void conv_channel(const GroupArgs& g, int64_t c, int K, int nt, const Taps& w,
                                             float (&out)[TOK]) {
  const T* x = static_cast<const T*>(g.x);
  T* y = static_cast<T*>(g.y);
  const int H = K - 1;
  // Every input first (one round trip): the state and all the tokens' x.
  float st[kConvMaxTaps - 1];
#pragma unroll
  for (int i = 0; i < kConvMaxTaps - 1; ++i) st[i] = i < H ? g.state[i * g.C + c] : 0.0f;
  float xv[TOK];
#pragma unroll
  for (int t = 0; t < TOK; ++t) xv[t] = t < nt ? to_f32(x[t * g.C + c]) : 0.0f;
#pragma unroll
  for (int t = 0; t < TOK; ++t) {
    if (t < nt) {
      // conv1d_causal's order: the current tap, then oldest to newest.
      float acc = w.cur * xv[t];
#pragma unroll
      for (int i = 0; i < kConvMaxTaps - 1; ++i)
        if (i < H) acc += w.prev[i] * st[i];
      // The window moves on by this token: the oldest dropped, x[t] into slot H-1.
#pragma unroll
      for (int i = 0; i < kConvMaxTaps - 1; ++i) {
        if (i + 1 < H) st[i] = st[i + 1];
        else if (i + 1 == H) st[i] = xv[t];
      }
      if (g.after != nullptr && t < g.n_after) {  // checkpoints (ops/gdn_conv_step.h)
#pragma unroll
        for (int i = 0; i < kConvMaxTaps - 1; ++i)
          if (i < H) g.after[(int64_t(t) * H + i) * g.C + c] = st[i];
      }
      const T o = from_f32<T>(silu_f(acc));
      y[t * g.C + c] = o;
      out[t] = to_f32(o);
    }
  }
#pragma unroll
  for (int i = 0; i < kConvMaxTaps - 1; ++i)
    if (i < H) g.state[i * g.C + c] = st[i];
}

// The block-wide sums of ss[0..nt) (every thread gets them): block_sum's order for each
// (warp sums, then the warps' sums in warp order), so a token's sum has l2_norm's bits, with
// one pair of barriers for all tokens. red: 32 x TOK floats of shared memory, not in use.
template <int TOK>
__device__ __forceinline__ void block_sums(float (&ss)[TOK], int nt, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int t = 0; t < TOK; ++t)
    if (t < nt) ss[t] = warp_sum(ss[t]);
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < TOK; ++t)
      if (t < nt) red[t * 32 + warp] = ss[t];
  }
  __syncthreads();
#pragma unroll
  for (int t = 0; t < TOK; ++t)
    if (t < nt) ss[t] = warp_sum(lane < nwarps ? red[t * 32 + lane] : 0.0f);
}

// nt <= TOK tokens (rows of each x and y); EXACT: nt == TOK, known at compile time. Blocks [0,
// n_q_heads): q heads; then k heads; then v in blockDim-channel slices. Critical path of a head
// block: (taps loaded and state prefetched before the wait) x and the state from L2, the conv of
// every token, the block sums, the outputs rescaled from registers. At the 27B shape (128 blocks
// of 64 threads) a head block's two warps are alone on their SM, so its time is its instruction
// count at ~11 cycles each (ncu, 4 tokens:
// ~2100 a warp in the TOK 8 kernel with its token guards, 11.1 us against 5.3 for one token);
// EXACT drops the guards and the unused token slots.
// KW: the kernel width where it is known at compile time (0: K at run time). Qwen3.5's 4 takes
// the window's guards and unused slots out of every channel's code (the q and k head blocks'
// warps run alone on their SMs, so their time is their instruction count).
template <class T, int TOK, bool EXACT = false, int KW = 0>
__global__ void __launch_bounds__(TOK == 1 ? 1024 : kConvStepMaxThreads)
    gdn_conv_step_kernel(GroupArgs q, GroupArgs k, GroupArgs v, int K, int nt, int64_t hd, float eps, float q_scale) {
  if constexpr (EXACT) nt = TOK;
  if constexpr (KW > 0) K = KW;
  __shared__ float red[32 * TOK];
  const int64_t n_q = q.C / hd, n_k = k.C / hd;
  const int64_t b = blockIdx.x;
  float val[kConvHeadRegs][TOK];  // the outputs of this thread's channels, per token
  if (b >= n_q + n_k) {
    const int64_t c = (b - n_q - n_k) * blockDim.x + threadIdx.x;
    Taps w{};
    if (c < v.C) load_taps(v, c, K, w);
    prefetch_state(v, c, K);
    pdl_wait();
    pdl_trigger();
    if (c < v.C) conv_channel<T, TOK>(v, c, K, nt, w, val[0]);
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
  float ss[TOK];  // this thread's part of each token's sum of squares
#pragma unroll
  for (int t = 0; t < TOK; ++t) ss[t] = 0.0f;
#pragma unroll
  for (int r = 0; r < kConvHeadRegs; ++r) {
    const int64_t i = threadIdx.x + int64_t(r) * blockDim.x;
    if (i < hd) {
      conv_channel<T, TOK>(g, c0 + i, K, nt, w[r], val[r]);
#pragma unroll
      for (int t = 0; t < TOK; ++t)
        if (t < nt) ss[t] += val[r][t] * val[r][t];
    }
  }
  Taps wk;
  float wide[TOK];
  for (int64_t i = threadIdx.x + int64_t(kConvHeadRegs) * blockDim.x; i < hd; i += blockDim.x) {  // hd > 4096
    load_taps(g, c0 + i, K, wk);
    conv_channel<T, TOK>(g, c0 + i, K, nt, wk, wide);
#pragma unroll
    for (int t = 0; t < TOK; ++t)
      if (t < nt) ss[t] += wide[t] * wide[t];
  }
  // eps on the sum (HF l2norm), as l2_norm_kernel; each thread rescales the outputs it wrote.
  block_sums(ss, nt, red);
  const float scale = is_q ? q_scale : 1.0f;
#pragma unroll
  for (int t = 0; t < TOK; ++t) {
    if (t < nt) {
      const float f = scale / sqrtf(ss[t] + eps);
      T* y = static_cast<T*>(g.y) + t * g.C + c0;
#pragma unroll
      for (int r = 0; r < kConvHeadRegs; ++r) {
        const int64_t i = threadIdx.x + int64_t(r) * blockDim.x;
        if (i < hd) y[i] = from_f32<T>(val[r][t] * f);
      }
      for (int64_t i = threadIdx.x + int64_t(kConvHeadRegs) * blockDim.x; i < hd; i += blockDim.x)
        y[i] = from_f32<T>(to_f32(y[i]) * f);
    }
  }
}

// The group's tokens [t0, t0 + nt): its x and y moved on by t0 rows, w and the state as they
// are, and where asked the windows after tokens t0 .. (all but the group's last token).
GroupArgs args_of(const ops::ConvGroup& g, int64_t t0, int nt) {
  GroupArgs a{static_cast<const char*>(g.x.data()) + t0 * g.x.row_bytes(), g.w.ptr<float>(), g.state.ptr<float>(),
              static_cast<char*>(g.y.data()) + t0 * g.y.row_bytes(), g.x.dim(1), nullptr, 0};
  if (g.after.data() != nullptr) {
    a.after = g.after.ptr<float>() + t0 * g.state.numel();
    a.n_after = static_cast<int>(std::min<int64_t>(nt, g.x.dim(0) - 1 - t0));
  }
  return a;
}

// VI_CONV_KW=0 keeps the width-4 kernels off (the run-time width runs), for A/B runs.
bool kw_env_allows() {
  static const bool on = env_switch_on("VI_CONV_KW");
  return on;
}

void gdn_conv_step_cuda(ops::Context& ctx, const ops::ConvGroup& q, const ops::ConvGroup& k, const ops::ConvGroup& v,
                        int64_t head_dim, float eps, float q_scale) {
  const int64_t K = q.w.dim(1), n_tok = q.x.dim(0);
  VI_CHECK(K <= kConvMaxTaps, "op 'gdn_conv_step' on cuda: kernel width {} exceeds {}", K, kConvMaxTaps);
  const int threads = norm_threads(head_dim);
  const int64_t blocks = q.x.dim(1) / head_dim + k.x.dim(1) / head_dim + (v.x.dim(1) + threads - 1) / threads;
  if (blocks == 0 || n_tok == 0) return;
  VI_CHECK(blocks <= INT32_MAX, "op 'gdn_conv_step' on cuda: {} blocks is too many", blocks);
  // One token (a decode round): the one-token kernel. More: launches of up to kConvStepTokens
  // tokens (one for a verify round), each continuing the state the one before wrote (pdl_wait
  // orders them); one launch per token where a head needs more threads than that kernel's bound.
  const int64_t per_launch = n_tok > 1 && threads <= kConvStepMaxThreads ? kConvStepTokens : 1;
  dispatch_act("gdn_conv_step", q.x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    for (int64_t t0 = 0; t0 < n_tok; t0 += per_launch) {
      const int nt = static_cast<int>(std::min(per_launch, n_tok - t0));
      const GroupArgs qa = args_of(q, t0, nt), ka = args_of(k, t0, nt), va = args_of(v, t0, nt);
      // 4 tokens (the verify width MTP uses) get a kernel of exactly that many; other counts the
      // 8-token kernel with its guards (an exact 8-token kernel spilled in f32).
      // Kernel width 4 (Qwen3.5's) for one and four tokens: kernels of that width.
      const bool k4 = K == 4 && kw_env_allows();
      auto kernel = per_launch == 1 ? (k4 ? gdn_conv_step_kernel<T, 1, false, 4> : gdn_conv_step_kernel<T, 1>)
                    : nt == 4       ? (k4 ? gdn_conv_step_kernel<T, 4, true, 4> : gdn_conv_step_kernel<T, 4, true>)
                                    : gdn_conv_step_kernel<T, kConvStepTokens>;
      VI_CUDA_CHECK(pdl_launch(kernel, static_cast<unsigned>(blocks), threads, 0, stream_of(ctx), qa, ka, va,
                               static_cast<int>(K), nt, head_dim, eps, q_scale));
    }
  });
}

[[maybe_unused]] const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) ops::gdn_conv_step_table().add(Device::CUDA, t, gdn_conv_step_cuda);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
