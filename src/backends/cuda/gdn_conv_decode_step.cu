// CUDA gdn_conv_decode_step (ops/gdn_conv_decode_step.h): a decode round's GDN conv + SiLU, L2
// norms, gates, delta rule and gated output norm in one launch per layer, where the step ran
// gdn_conv_step and the lean gdn_decode_step kernel (2.2 + 3.6 us a layer in the 27B round,
// docs/PERFORMANCE.md). Taken for one token per sequence on the lean kernels' ground (sm_90
// clusters, dk = dv = 128), conv width 4 and at most 4 value heads per key head; any other
// call runs the two ops.
//
// Why a cluster per key head: the q and k conv windows of key head hk are read by every block
// of every value head on hk, and the new window may be written only after all of them have read
// the old one. Blocks of one grid are not ordered, but blocks of one cluster are (its barrier),
// so a cluster here holds all value heads of one key head: 8 blocks (4 where a key head has one
// value head), each with a slice of the columns of every such head, its warps laid out as the
// lean token kernel's (fused_cluster below). Every block computes the conv and norms of the
// head's 128 q and 128 k channels itself (no exchange), arrives at the cluster barrier with
// release after reading the windows, and rank 0 writes the new windows after the wait. A value
// channel belongs to one (block, column): its four row-group lanes compute its conv alike and
// lane g = 0 writes its window.
//
// Arithmetic: the conv runs gdn_conv_step_kernel's expressions, the L2 norms its sums (warps 0-1
// and 2-3 play its 64-thread q and k head blocks: channels i and i + 64 per thread, warp sums,
// the two warps' sums summed by a warp), and the delta rule and output norm are the lean token
// kernel's (gdn_lean.cuh, the pushes in its slot order). The results are not the two ops' bit for
// bit all the same (about 1e-7 relative in f32 on the H200): which multiply and add the compiler
// fuses into one is decided per kernel; tests/unit/cuda/test_gdn_conv_decode_step holds them within
// 1e-6. VI_GDN_CONV_FUSED=0 (read once) runs the two ops instead, for A/B runs.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/device.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/gdn.cuh"
#include "backends/cuda/gdn_decode_step.cuh"
#include "backends/cuda/gdn_lean.cuh"
#include "backends/cuda/pdl.cuh"
#include "ops/gdn_conv_decode_step.h"

namespace vi::cuda {
namespace {

// The cluster kernels need CUDA 12 (an older build has no table entry: the op runs its two ops).
#if CUDART_VERSION >= 12000
constexpr int kFusedTaps = 4;            // conv width (Qwen3.5's): windows of 3 inputs
constexpr int kFusedMaxHeadsPerKey = 4;  // value heads per key head: blocks of at most 512 threads

// Each sequence's conv windows [K-1, C] f32 (a kernel parameter, as StatePtrs).
struct WindowPtrs {
  float* q[kDecodeMaxSeqs];
  float* k[kDecodeMaxSeqs];
  float* v[kDecodeMaxSeqs];
};

// The conv inputs of a launch: raw projections (T), taps [C, 4] f32, q's scale and the L2 eps.
struct ConvArgs {
  const void* xq;  // [N, Hk, 128]
  const void* xk;  // [N, Hk, 128]
  const void* xv;  // [N, Hv, 128]
  const float* wq;
  const float* wk;
  const float* wv;
  WindowPtrs win;
  float q_scale, l2_eps;
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
// One channel's taps and window in registers (loaded before pdl_wait: the taps are weights, the
// window was written by this layer's step a round ago).
struct Chan {
  float cur, p0, p1, p2;  // taps: the current input's, then the window's oldest to newest
  float s0, s1, s2;       // the window, oldest first
};

__device__ __forceinline__ void load_chan(const float* w, const float* win, int64_t C, int64_t c, Chan& ch) {
  ch.cur = w[c * kFusedTaps + 3];
  ch.p0 = w[c * kFusedTaps];
  ch.p1 = w[c * kFusedTaps + 1];
  ch.p2 = w[c * kFusedTaps + 2];
  ch.s0 = win[c];
  ch.s1 = win[C + c];
  ch.s2 = win[2 * C + c];
}

// gdn_conv_step_kernel's conv of one token (the current tap first, then oldest to newest), SiLU,
// rounded to T as the stored conv output.
template <class T>
__device__ __forceinline__ float conv_out(const Chan& ch, float x) {
  float acc = ch.cur * x;
  acc += ch.p0 * ch.s0;
  acc += ch.p1 * ch.s1;
  acc += ch.p2 * ch.s2;
  return to_f32(from_f32<T>(silu_f(acc)));
}

// The window moved on by input x.
__device__ __forceinline__ void store_window(float* win, int64_t C, int64_t c, const Chan& ch, float x) {
  win[c] = ch.s1;
  win[C + c] = ch.s2;
  win[2 * C + c] = x;
}
#endif

// Blocks of a cluster (a key head's value heads): 8 where the block keeps the 128 threads that
// play the conv kernel's head blocks (2 or more value heads a key head: blocks of HPC x 64
// threads, 128 over the 27B layer's 132 SMs), else 4. The output norm's 16 warp sums per head
// are the same column groups of 8 in the same slot order either way.
constexpr int fused_cluster(int hpc) { return hpc >= 2 ? 8 : 4; }

// Grid (Hk x CB, sequences), clusters of CB blocks along x: cluster = (key head hk, sequence);
// block rank p takes columns [p C, (p + 1) C) of every value head of hk, C = 128 / CB. Block:
// HPC x 4 C threads (HPC = Hv / Hk), 8 columns x 4 row groups a warp as in the lean kernel; warp
// w works on value head j = hk + (w / W) Hk (tiled GVA layout) or hk HPC + w / W (grouped), W = C
// / 8 warps a head. Tensors as gdn_decode_token_lean_kernel's; the conv's in c.
template <class T, int HPC, int CB = fused_cluster(HPC)>
__global__ void __launch_bounds__(HPC * 4 * (kLeanD / CB))
    gdn_conv_token_lean_kernel(ConvArgs c, const T* __restrict__ a, const T* __restrict__ b,
                               const float* __restrict__ neg_exp_A, const float* __restrict__ dt_bias, const T* z,
                               const float* __restrict__ norm_w, float eps, StatePtrs states, int64_t n0, T* y,
                               int Hk, int Hv, bool tiled) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // never launched: gdn_decode_uses_lean asks for sm_90 code
#else
  __shared__ __align__(16) float kq[2][kDeltaRowGroups * kLeanKqStride];  // k, q by row group
  __shared__ float red[2][2];                                             // the L2 norms' warp sums
  constexpr int kCols = kLeanD / CB, kWarpsPerHead = kCols / 8;
  static_assert(HPC * 4 * kCols >= 128, "the q and k conv takes 128 threads");
  static_assert(CB * kWarpsPerHead == kDecodeClusterBlocks * kLeanWarps, "16 warp sums a head");
  __shared__ __align__(16) float ss_all[HPC][CB * kWarpsPerHead];
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int hi = warp / kWarpsPerHead, wh = warp % kWarpsPerHead;  // value head of the group, warp within it
  const int hk = static_cast<int>(blockIdx.x) / CB;
  const int part = static_cast<int>(blockIdx.x) % CB;
  const int j = tiled ? hk + hi * Hk : hk * HPC + hi;
  const int g = lane & 3, e = part * kCols + wh * 8 + (lane >> 2);
  const int64_t n = n0 + blockIdx.y;  // token (= sequence) row
  const int64_t hj = n * Hv + j;
  const int64_t Cqk = int64_t(Hk) * kLeanD, Cv = int64_t(Hv) * kLeanD;

  // Before the wait: the state slice, the gate and norm constants, every channel's taps and window.
  float s[kLeanR];
  float* S = states.p[blockIdx.y] + int64_t(j) * kLeanD * kLeanD + g * kLeanD + e;
#pragma unroll
  for (int r = 0; r < kLeanR; ++r) s[r] = S[r * kDeltaRowGroups * kLeanD];
  const float dtb = dt_bias[j], nea = neg_exp_A[j], nw = norm_w[e];
  // Threads 0-127 play gdn_conv_step_kernel's q (0-63) and k (64-127) head blocks: channels i and
  // i + 64 of key head hk.
  const bool qk_thread = tid < 2 * 64;
  const int grp = tid >> 6, i = tid & 63;
  const float* wqk = grp == 0 ? c.wq : c.wk;
  float* win_qk = grp == 0 ? c.win.q[blockIdx.y] : c.win.k[blockIdx.y];
  const int64_t c0 = int64_t(hk) * kLeanD + i, c1 = c0 + 64;
  Chan ch0{}, ch1{};
  if (qk_thread) {
    load_chan(wqk, win_qk, Cqk, c0, ch0);
    load_chan(wqk, win_qk, Cqk, c1, ch1);
  }
  float* win_v = c.win.v[blockIdx.y];
  const int64_t cv = int64_t(j) * kLeanD + e;
  Chan chv;
  load_chan(c.wv, win_v, Cv, cv, chv);

  pdl_wait();
  pdl_trigger();
  const T* xqk = static_cast<const T*>(grp == 0 ? c.xq : c.xk);
  float x0 = 0.0f, x1 = 0.0f;
  if (qk_thread) {
    x0 = to_f32(xqk[n * Cqk + c0]);
    x1 = to_f32(xqk[n * Cqk + c1]);
  }
  const float xv = to_f32(static_cast<const T*>(c.xv)[n * Cv + cv]);
  const float av = to_f32(a[hj]), bv = to_f32(b[hj]);
  const float zz = g == 0 ? to_f32(z[hj * kLeanD + e]) : 0.0f;  // only the thread that writes y[e] (y may alias z)

  // q and k: conv, then gdn_conv_step_kernel's block sums of squares (its order) and rescale.
  float v0 = 0.0f, v1 = 0.0f;
  if (qk_thread) {
    v0 = conv_out<T>(ch0, x0);
    v1 = conv_out<T>(ch1, x1);
    float ss = 0.0f;
    ss += v0 * v0;
    ss += v1 * v1;
    ss = warp_sum(ss);
    if (lane == 0) red[grp][warp & 1] = ss;
  }
  const float vv = conv_out<T>(chv, xv);
  const float decay = expf(gdn_decay_gate(av, dtb, nea));
  const float bt = sigmoid_f(bv);
  __syncthreads();  // red
  if (qk_thread) {
    const float ss = warp_sum(lane < 2 ? red[grp][lane] : 0.0f);
    const float f = (grp == 0 ? c.q_scale : 1.0f) / sqrtf(ss + c.l2_eps);
    // The normalised values as the decode step reads them back (rounded to T), by row group.
    float(&dst)[kDeltaRowGroups * kLeanKqStride] = kq[grp == 0 ? 1 : 0];
    const int e0 = i, e1 = i + 64;
    dst[(e0 % kDeltaRowGroups) * kLeanKqStride + e0 / kDeltaRowGroups] = to_f32(from_f32<T>(v0 * f));
    dst[(e1 % kDeltaRowGroups) * kLeanKqStride + e1 / kDeltaRowGroups] = to_f32(from_f32<T>(v1 * f));
  }
  __syncthreads();  // kq
  // Every block of the cluster has read its windows (release: those loads, and the state's, come
  // first; the conv and norms above ran while the state was still arriving); rank 0 writes the q
  // and k windows after the matching wait below.
  cluster_arrive();
  // Column e's output rounded to T.
  const float o = to_f32(
      from_f32<T>(lean_delta_token(s, &kq[0][g * kLeanKqStride], &kq[1][g * kLeanKqStride], decay, bt, vv, lane)));
  const float ssw = lean_warp_squares(o);
  cluster_wait();  // every block has started and read its windows
  if (part == 0 && qk_thread) {
    store_window(win_qk, Cqk, c0, ch0, x0);
    store_window(win_qk, Cqk, c1, ch1, x1);
  }
  if (lane < CB) cluster_store(&ss_all[hi][part * kWarpsPerHead + wh], static_cast<unsigned>(lane), ssw);
  cluster_arrive();  // the pushes are visible once every block has arrived
  cluster_wait();
  lean_store_state(s, S);
  if (g == 0) store_window(win_v, Cv, cv, chv, xv);
  const float total = lean_cluster_total(ss_all[hi]);
  if (g == 0) {
    const float f = 1.0f / sqrtf(total / static_cast<float>(kLeanD) + eps);
    y[hj * kLeanD + e] = from_f32<T>(nw * (o * f) * silu_f(zz));
  }
#endif
}

// VI_GDN_CONV_FUSED=0 keeps the fused kernel off (the two ops run), for A/B runs.
bool fused_env_allows() {
  static const bool on = env_switch_on("VI_GDN_CONV_FUSED");
  return on;
}

template <class T, int HPC>
void launch_fused(const ops::Context& ctx, const ConvArgs& ca, const Tensor& a, const Tensor& b,
                  const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w, float eps,
                  const StatePtrs& ptrs, int64_t n0, int64_t ns, Tensor& y, int Hk, int Hv, bool tiled) {
  constexpr int CB = fused_cluster(HPC);
  const dim3 grid(static_cast<unsigned>(Hk * CB), static_cast<unsigned>(ns));
  VI_CUDA_CHECK(pdl_launch_cluster(gdn_conv_token_lean_kernel<T, HPC>, grid, dim3(HPC * 4 * (kLeanD / CB)), 0,
                                   stream_of(ctx), CB, ca, a.ptr<T>(), b.ptr<T>(),
                                   neg_exp_A.ptr<float>(), dt_bias.ptr<float>(), z.ptr<T>(), norm_w.ptr<float>(), eps,
                                   ptrs, n0, y.ptr<T>(), Hk, Hv, tiled));
}

bool gdn_conv_decode_step_cuda(ops::Context& ctx, const ops::GdnConvIn& in, const Tensor& a, const Tensor& b,
                               const Tensor& neg_exp_A, const Tensor& dt_bias, const Tensor& z, const Tensor& norm_w,
                               float eps, const std::vector<Tensor>& states, ops::GvaLayout layout, Tensor& y,
                               bool run) {
  const int64_t N = static_cast<int64_t>(states.size()), R = in.xq.dim(0);
  const int64_t Hk = in.xq.dim(1), dk = in.xq.dim(2), Hv = in.xv.dim(1), dv = in.xv.dim(2);
  const int64_t hpc = Hv / Hk;
  // One token per sequence, the lean kernels' head shape, Qwen3.5's conv width, whole groups
  // of at most kFusedMaxHeadsPerKey value heads per key head.
  if (!fused_env_allows() || R != N || in.wq.dim(1) != kFusedTaps || !gdn_decode_uses_lean(ctx, dk, dv) ||
      Hv % Hk != 0 || hpc < 1 || hpc > kFusedMaxHeadsPerKey || Hv > INT32_MAX)
    return false;
  if (!run) return true;
  const bool tiled = layout == ops::GvaLayout::kTiled;
  ConvArgs ca{};
  ca.xq = in.xq.data();
  ca.xk = in.xk.data();
  ca.xv = in.xv.data();
  ca.wq = in.wq.ptr<float>();
  ca.wk = in.wk.ptr<float>();
  ca.wv = in.wv.ptr<float>();
  ca.q_scale = in.q_scale;
  ca.l2_eps = in.l2_eps;
  dispatch_act("gdn_conv_decode_step", in.xq.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // More sequences than one launch's pointers: the next launches take the rest.
    for (int64_t n0 = 0; n0 < N; n0 += kDecodeMaxSeqs) {
      const int64_t ns = std::min<int64_t>(kDecodeMaxSeqs, N - n0);
      StatePtrs ptrs{};
      for (int64_t i = 0; i < ns; ++i) {
        const size_t at = static_cast<size_t>(n0 + i);
        ptrs.p[i] = states[at].ptr<float>();
        ca.win.q[i] = in.windows[at].q.ptr<float>();
        ca.win.k[i] = in.windows[at].k.ptr<float>();
        ca.win.v[i] = in.windows[at].v.ptr<float>();
      }
      const int hk = static_cast<int>(Hk), hv = static_cast<int>(Hv);
      switch (hpc) {
        case 1: launch_fused<T, 1>(ctx, ca, a, b, neg_exp_A, dt_bias, z, norm_w, eps, ptrs, n0, ns, y, hk, hv, tiled); break;
        case 2: launch_fused<T, 2>(ctx, ca, a, b, neg_exp_A, dt_bias, z, norm_w, eps, ptrs, n0, ns, y, hk, hv, tiled); break;
        case 3: launch_fused<T, 3>(ctx, ca, a, b, neg_exp_A, dt_bias, z, norm_w, eps, ptrs, n0, ns, y, hk, hv, tiled); break;
        default: launch_fused<T, 4>(ctx, ca, a, b, neg_exp_A, dt_bias, z, norm_w, eps, ptrs, n0, ns, y, hk, hv, tiled); break;
      }
    }
  });
  return true;
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16}) ops::gdn_conv_decode_step_table().add(Device::CUDA, t, gdn_conv_decode_step_cuda);
  return true;
}();
#endif  // CUDART_VERSION >= 12000

}  // namespace
}  // namespace vi::cuda
