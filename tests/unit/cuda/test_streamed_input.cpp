// The streamed down projection (backends/cuda/streamed_input.cuh, gemv_q4kt.cu): launched right
// after the fused SwiGLU whose h it reads, it starts while that SwiGLU still runs and loads each
// value of h once it is no longer the poison mark. The chain of a layer's MLP as the model runs
// it: a producer (site 0), the fused gate|up + SwiGLU on it into h, the down projection producing
// site 1, and a consumer matmul of site 1. Every output (h, residual, u, both sites' sums of
// squares, sums16, the consumer's y) must equal, bit for bit, the chain with the down projection
// waiting for the whole SwiGLU grid, over repetitions with fresh inputs. Where the device streams
// (sm_90 code and PDL) the streamed kernel must be the one launched; with a kernel between the
// SwiGLU and the down projection, or without the hint, it must not. Off the native f16 path the
// test says why it skips.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends/cuda/gemv_q4kt.cuh"
#include "cuda_test_util.h"
#include "ops/copy.h"
#include "ops/deferred_norm.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

// "" where a and b hold the same bytes, else how many 4-byte words differ and the first one.
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

class StreamedInputGpu : public CudaOpTest {
 protected:
  // d: the residual width (320 down tiles would be the model's; 64 here); F: h's width (2048
  // SwiGLU blocks: several waves, so the down projection starts while most of h is unwritten);
  // R: the consumer's rows.
  static constexpr int64_t kD = 1024, kF = 16384, kR = 9216;
  static constexpr float kEps = 1e-6f, kOff = 1.0f;

  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
      GTEST_SKIP() << "the streamed input is the fused Q4_KT kernels' (native profile, f16 activations)";
    ops::set_deferred_norm_allowed(1);
    dwgu = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, 2 * kF, kD, 0.5f)), {kF, kF},
                                      ops::MatmulInput::kNorm, ops::MatmulUse::kSwiglu);
    dwd = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, kD, kF, 0.5f)));
    dwi = ops::prepare_matmul_weight(g, ops::upload(g, rand_weight(DType::Q4_K, kR, kD, 0.5f)));
    dnw = ops::upload(g, rand_f32({kD}, DType::F32, -0.5f, 0.5f));
  }
  void TearDown() override {
    ops::set_deferred_norm_allowed(-1);
    cuda::set_streamed_input_allowed(-1);
  }

  struct Out {
    Tensor h, x, u, ss, sums16, y;
  };
  // The chain on (a0, x0), h poisoned first; `hint`: the down projection told its input streams;
  // `between`: a kernel (copy_batch of h) launched between the SwiGLU and the down projection.
  Out run(const Tensor& a0, const Tensor& x0, bool hint, bool between) {
    const int64_t T = a0.rows();
    ops::DeferredNorm all = ops::deferred_norm_scratch(g, T, kD, kEps, 2);
    ops::DeferredNorm in = ops::deferred_norm_site(all, 0), out = ops::deferred_norm_site(all, 1);
    Tensor x = up(x0), a = up(a0), h = gpu_empty({T, kF}), y = up(nan_f32({T, kR}));
    Tensor gu = gpu_empty({T, 2 * kF}), spare = gpu_empty({T, kF});
    ops::poison(g, h);
    ops::matmul_add_deferred_norm(g, a, dwd, x, dnw, kOff, in);
    ops::matmul_swiglu_deferred(g, in, dwgu, gu, h);
    if (between) ops::copy_batch(g, {h}, {spare});
    out.streamed_input = hint;
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
  void expect_same(const Out& got, const Out& want, const std::string& at) {
    EXPECT_EQ(differs(got.h, want.h), "") << "h, " << at;
    EXPECT_EQ(differs(got.x, want.x), "") << "residual, " << at;
    EXPECT_EQ(differs(got.u, want.u), "") << "u, " << at;
    EXPECT_EQ(differs(got.ss, want.ss), "") << "sums of squares, " << at;
    EXPECT_EQ(differs(got.sums16, want.sums16), "") << "sums16, " << at;
    EXPECT_EQ(differs(got.y, want.y), "") << "consumer's y, " << at;
  }

  Tensor dwgu, dwd, dwi, dnw;
};

TEST_P(StreamedInputGpu, DownProjectionEqualsTheWaitingOne) {
  if (!ops::deferred_norm_fused(g, dwd, dwgu, ops::DeferredConsumer::kSwiglu, 1) ||
      !ops::deferred_norm_fused(g, dwd, dwi, ops::DeferredConsumer::kMatmul, 1))
    GTEST_SKIP() << "this device does not fuse the deferred norm on Q4_KT (sm_80+ code needed)";
  cuda::set_streamed_input_allowed(1);
  const bool streams = ops::deferred_norm_streams(g, dwd);  // sm_90 code with PDL
  for (int64_t T : {1, 4, 8}) {
    for (int rep = 0; rep < 6; ++rep) {
      const std::string at = fmt::format("T={} rep {} (streams: {})", T, rep, streams);
      const Tensor a0 = rand_f32({T, kF}, act(), -1.0f, 1.0f), x0 = rand_f32({T, kD}, act(), -4.0f, 4.0f);
      const uint64_t before = cuda::gemv_streamed_inputs_taken();
      const Out want = run(a0, x0, false, false);
      EXPECT_EQ(cuda::gemv_streamed_inputs_taken(), before) << "streamed without the hint, " << at;
      const Out got = run(a0, x0, true, false);
      EXPECT_EQ(cuda::gemv_streamed_inputs_taken(), before + (streams ? 1 : 0)) << "streamed kernels, " << at;
      expect_same(got, want, at);
      // A kernel between them: the down projection waits for it (and so for the SwiGLU).
      const Out apart = run(a0, x0, true, true);
      EXPECT_EQ(cuda::gemv_streamed_inputs_taken(), before + (streams ? 1 : 0)) << "with a kernel between, " << at;
      expect_same(apart, want, "apart, " + at);
    }
  }
  // Switched off: the hint alone streams nothing.
  cuda::set_streamed_input_allowed(0);
  EXPECT_FALSE(ops::deferred_norm_streams(g, dwd));
  const uint64_t before = cuda::gemv_streamed_inputs_taken();
  run(rand_f32({1, kF}, act()), rand_f32({1, kD}, act()), true, false);
  EXPECT_EQ(cuda::gemv_streamed_inputs_taken(), before) << "switched off";
}

VI_CUDA_INSTANTIATE(StreamedInputGpu);

}  // namespace
}  // namespace vi::cudatest
