// The hand-offs between the deferred norm's Q4_KT kernels (backends/cuda/gemv_handoff.cuh): a
// kernel launched right after the one that writes its input starts before that one ends and
// waits per super-block for the input's counters. The chain of a layer's MLP, as the model runs
// it: a producer (site 0), the fused gate|up + SwiGLU on it, the down projection producing site
// 1, and a consumer matmul of site 1. At level 1 the down projection takes the hand-off from the
// SwiGLU; at level 2 the SwiGLU and the consumer take theirs from the producers as well. Every
// output (h, residual, u, both sites' sums of squares, sums16, the consumer's y) must equal, bit
// for bit, the same chain launched the ordinary way (level 0: each kernel waits for the whole grid
// before it), over repetitions with fresh inputs and h poisoned with NaN before the SwiGLU, so a
// read before a block finished shows. Where PDL is on (sm_90 code, CUDA 12.3) each hand-off must
// be taken; with a kernel launched between the SwiGLU and the down projection that one must not.
// Level 3, the GDN layer's input as the model runs it: a producer, the stacked input projection
// on it (q, k, v, z; one token as views of the stack's row, four as the split's parts) and the
// conv step on q, k and v, whose outputs, states and z must equal level 2's bit for bit, with the
// conv's hand-off taken (and not where q is not the stack's output).
// Off the native f16 path the test says why it skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends/cuda/gemv_q4kt.cuh"
#include "cuda_test_util.h"
#include "ops/copy.h"
#include "ops/deferred_norm.h"
#include "ops/gdn_conv_step.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

// "" where a and b hold the same bytes, else how many 4-byte words differ and the first one
// (which element went wrong tells a read before its block finished from a stale line).
std::string differs(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes()) return fmt::format("{} against {} bytes", a.nbytes(), b.nbytes());
  const auto* x = static_cast<const uint32_t*>(a.data());
  const auto* y = static_cast<const uint32_t*>(b.data());
  const size_t n = a.nbytes() / 4;
  size_t bad = 0, first = n;
  for (size_t i = 0; i < n; ++i)
    if (x[i] != y[i] && bad++ == 0) first = i;
  return bad == 0 ? "" : fmt::format("{} of {} words differ, the first at word {}", bad, n, first);
}

class GemvHandoffGpu : public CudaOpTest {
 protected:
  // d: the residual width; F: h's width (64 counters; 2048 SwiGLU blocks, several waves); R: the
  // consumer's rows (over 8192: the kernels the model's input stacks take, 4 blocks per SM).
  static constexpr int64_t kD = 1024, kF = 16384, kR = 9216;
  static constexpr float kEps = 1e-6f, kOff = 1.0f;

  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
      GTEST_SKIP() << "the hand-offs are between the fused Q4_KT kernels (native profile, f16 activations)";
    ops::set_deferred_norm_allowed(1);
    dwgu = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, 2 * kF, kD, 0.5f)), {kF, kF},
                                      ops::MatmulInput::kNorm, ops::MatmulUse::kSwiglu);
    dwd = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, kD, kF, 0.5f)));
    dwi = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, kR, kD, 0.5f)));
    dnw = ops::upload(g, rand_f32({kD}, DType::F32, -0.5f, 0.5f));
  }
  void TearDown() override {
    ops::set_deferred_norm_allowed(-1);
    cuda::set_gemv_handoff_allowed(-1);
  }

  struct Out {
    Tensor h, x, u, ss, sums16, y;
  };
  // The chain on (a0, x0); `between`: a kernel (copy_batch of h) launched between the SwiGLU and
  // the down projection.
  Out run(const Tensor& a0, const Tensor& x0, bool between) {
    const int64_t T = a0.rows();
    ops::DeferredNorm all = ops::deferred_norm_scratch(g, T, kD, kEps, 2);
    ops::DeferredNorm in = ops::deferred_norm_site(all, 0), out = ops::deferred_norm_site(all, 1);
    Tensor x = up(x0), h = up(nan_f32({T, kF})), y = up(nan_f32({T, kR}));
    Tensor gu = gpu_empty({T, 2 * kF});
    ops::matmul_add_deferred_norm(g, up(a0), dwd, x, dnw, kOff, in);
    ops::matmul_swiglu_deferred(g, in, dwgu, gu, h);
    if (between) ops::copy_batch(g, {h}, {gpu_empty({T, kF})});
    ops::matmul_add_deferred_norm(g, h, dwd, x, dnw, kOff, out);
    ops::matmul_deferred(g, out, dwi, y);
    Out o;
    o.h = down(h);
    o.x = down(x);
    o.u = down(out.u);
    o.ss = ops::download(g, all.ss);  // both sites
    o.sums16 = out.sums_written ? down(out.sums16) : Tensor::empty(DType::F32, {0});
    o.y = down(y);
    return o;
  }

  Tensor dwgu, dwd, dwi, dnw;
};

TEST_P(GemvHandoffGpu, ChainEqualsTheWaitingOne) {
  if (!ops::deferred_norm_fused(g, dwd, dwgu, ops::DeferredConsumer::kSwiglu, 1) ||
      !ops::deferred_norm_fused(g, dwd, dwi, ops::DeferredConsumer::kMatmul, 1))
    GTEST_SKIP() << "this device does not fuse the deferred norm on Q4_KT (sm_80+ code needed)";
  for (int level : {1, 2}) {
    for (int64_t T : {1, 4, 8}) {
      for (int rep = 0; rep < 6; ++rep) {
        const std::string at = fmt::format("level {} T={} rep {}", level, T, rep);
        const Tensor a0 = rand_f32({T, kF}, act(), -1.0f, 1.0f), x0 = rand_f32({T, kD}, act(), -4.0f, 4.0f);
        cuda::set_gemv_handoff_allowed(0);
        const uint64_t before = cuda::gemv_handoffs_taken();
        const Out want = run(a0, x0, false);
        EXPECT_EQ(cuda::gemv_handoffs_taken(), before) << "taken while off, " << at;
        cuda::set_gemv_handoff_allowed(level);
        const bool on = cuda::gemv_handoff_level() == level;  // 0 where PDL is off
        const Out got = run(a0, x0, false);
        const uint64_t expected = on ? (level == 1 ? 1 : 3) : 0;
        EXPECT_EQ(cuda::gemv_handoffs_taken(), before + expected) << "hand-offs taken (on: " << on << "), " << at;
        EXPECT_EQ(differs(got.h, want.h), "") << "h, " << at;
        EXPECT_EQ(differs(got.x, want.x), "") << "residual, " << at;
        EXPECT_EQ(differs(got.u, want.u), "") << "u, " << at;
        EXPECT_EQ(differs(got.ss, want.ss), "") << "sums of squares, " << at;
        EXPECT_EQ(differs(got.sums16, want.sums16), "") << "sums16, " << at;
        EXPECT_EQ(differs(got.y, want.y), "") << "consumer's y, " << at;
        // A kernel between the SwiGLU and the down projection: that one launched the ordinary way
        // (at level 2 the SwiGLU and the consumer still take theirs).
        const uint64_t mid = cuda::gemv_handoffs_taken();
        const Out apart = run(a0, x0, true);
        EXPECT_EQ(cuda::gemv_handoffs_taken(), mid + (on && level == 2 ? 2 : 0)) << "with a kernel between, " << at;
        EXPECT_EQ(differs(apart.x, want.x) + differs(apart.u, want.u) + differs(apart.y, want.y), "")
            << "apart, " << at;
      }
    }
  }
}

// The GDN input: stack rows q [0, 256), k [256, 512), v [512, 1024), z [1024, 1536) (six counters,
// some of them written by the stack's second wave of blocks on small devices only: the point is
// the waits per channel); conv width 4, heads of 128.
TEST_P(GemvHandoffGpu, ConvStepAfterTheStackEqualsTheWaitingOne) {
  constexpr int64_t kQk = 256, kV = 512, kStack = 2 * kQk + 2 * kV, kHd = 128, kW = 4;
  const Tensor dws = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, kStack, kD, 0.5f)));
  if (!ops::deferred_norm_fused(g, dwd, dws, ops::DeferredConsumer::kSplit, 4))
    GTEST_SKIP() << "this device does not fuse the deferred norm on Q4_KT (sm_80+ code needed)";
  const int64_t widths[4] = {kQk, kQk, kV, kV};
  Tensor taps[3], state0[3];
  for (int i = 0; i < 3; ++i) {
    taps[i] = ops::upload(g, rand_f32({widths[i], kW}, DType::F32, -0.5f, 0.5f));
    state0[i] = rand_f32({kW - 1, widths[i]}, DType::F32, -1.0f, 1.0f);
  }
  struct ConvOut {
    Tensor y[3], state[3], z;
  };
  // other_q: the conv reads q from a tensor of its own (not the stack's output).
  auto run = [&](const Tensor& a0, const Tensor& x0, bool other_q) {
    const int64_t T = a0.rows();
    ops::DeferredNorm all = ops::deferred_norm_scratch(g, T, kD, kEps, 1);
    Tensor x = up(x0), stack = gpu_empty({T, kStack});
    Tensor parts[4], y[3], state[3];
    for (int i = 0; i < 4; ++i) parts[i] = up(nan_f32({T, widths[i]}));
    for (int i = 0; i < 3; ++i) {
      y[i] = up(nan_f32({T, widths[i]}));
      state[i] = ops::upload(g, state0[i]);
    }
    ops::matmul_add_deferred_norm(g, up(a0), dwd, x, dnw, kOff, all);
    Tensor in[4];  // the conv's inputs: views of the stack's row for one token, else the parts
    if (T == 1) {
      ops::matmul_deferred(g, all, dws, stack);
      int64_t c0 = 0;
      for (int i = 0; i < 4; ++i) {
        in[i] = stack.reshape({kStack, 1}).slice_rows(c0, c0 + widths[i]).reshape({1, widths[i]});
        c0 += widths[i];
      }
    } else {
      std::vector<Tensor*> dsts = {&parts[0], &parts[1], &parts[2], &parts[3]};
      ops::matmul_split_deferred(g, all, dws, stack, dsts);
      for (int i = 0; i < 4; ++i) in[i] = parts[i];
    }
    ops::ConvGroup grp[3];
    for (int i = 0; i < 3; ++i) grp[i] = ops::ConvGroup{in[i], taps[i], state[i], y[i]};
    if (other_q) grp[0].x = up(rand_f32({T, kQk}, act()));
    ops::gdn_conv_step(g, grp[0], grp[1], grp[2], kHd, 1e-6f, 0.125f);
    ConvOut o;
    for (int i = 0; i < 3; ++i) {
      o.y[i] = down(y[i]);
      o.state[i] = down(state[i]);
    }
    o.z = down(in[3]);
    return o;
  };
  for (int64_t T : {1, 4}) {
    for (int rep = 0; rep < 6; ++rep) {
      const std::string at = fmt::format("T={} rep {}", T, rep);
      const Tensor a0 = rand_f32({T, kF}, act(), -1.0f, 1.0f), x0 = rand_f32({T, kD}, act(), -4.0f, 4.0f);
      cuda::set_gemv_handoff_allowed(2);
      const ConvOut want = run(a0, x0, false);
      cuda::set_gemv_handoff_allowed(3);
      const bool on = cuda::gemv_handoff_level() == 3;
      const uint64_t before = cuda::gemv_handoffs_taken();
      const ConvOut got = run(a0, x0, false);
      // The stack after its producer (level 2) and the conv after the stack.
      EXPECT_EQ(cuda::gemv_handoffs_taken(), before + (on ? 2 : 0)) << "hand-offs taken (on: " << on << "), " << at;
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(differs(got.y[i], want.y[i]), "") << "conv output " << i << ", " << at;
        EXPECT_EQ(differs(got.state[i], want.state[i]), "") << "conv state " << i << ", " << at;
      }
      EXPECT_EQ(differs(got.z, want.z), "") << "z, " << at;
      // q not the stack's output: the conv launched the ordinary way (the stack still takes its).
      const uint64_t mid = cuda::gemv_handoffs_taken();
      run(a0, x0, true);
      EXPECT_EQ(cuda::gemv_handoffs_taken(), mid + (on ? 1 : 0)) << "q of its own, " << at;
    }
  }
}

VI_CUDA_INSTANTIATE(GemvHandoffGpu);

}  // namespace
}  // namespace vi::cudatest
