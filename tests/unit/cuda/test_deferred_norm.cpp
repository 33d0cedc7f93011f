// CUDA vs CPU for the deferred norm (ops/deferred_norm.h) on the Q4_KT decode GEMVs: the producer
// (x += a · wᵀ; u and the fixed-point sums of squares from the GEMV's epilogue) and the three
// consumers (matmul, matmul_split, the fused SwiGLU on u, scaled by s), T = 1..8. The CPU runs
// the ops' pieces on the file-layout Q4_K weights. A consumer is checked on the GPU producer's
// own u and sums (downloaded for the CPU), so each kernel's error is its own; the sums against a
// double sum of the GPU's own residual, with rows reaching f16's range (both words). Outputs are
// poisoned with NaN first; every GPU result is also recomputed and must repeat bit for bit (the
// sums are integers, added in any order), and a second producer into one set of sums adds to it
// exactly. The SwiGLU consumer also runs on the paired gate|up layout (Q4_KTS) and must give the
// Q4_KT kernel's h bit for bit. The producer's sums of u per 16 values (sums16) are checked
// against a double sum of its own u; each consumer reads them for the mins' term, and must agree
// with the same consumer told not to (the 16 mmas over u), and must change when the sums are
// zeroed (so the sums are read). Where the device does
// not fuse both sides (volta profile, f32 activations), ops::deferred_norm_fused must say so and
// the ops must fail with the op named rather than run something else.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cuda/gemv_q4kt.cuh"
#include "core/quant.h"
#include "cuda_test_util.h"
#include "ops/deferred_norm.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/norm.h"
#include "ops/prepare_matmul_weight.h"
#include "unit/cpu/cpu_test_util.h"  // test::error_of

namespace vi::cudatest {
namespace {

class DeferredNormGpu : public CudaOpTest {
 protected:
  static constexpr int64_t kD = 1024, kK = 2048, kF = 96, kSplitRows = 96;  // K: whole Q4_KR blocks (1024)
  static constexpr float kEps = 1e-6f, kOff = 1.0f;

  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    ops::set_deferred_norm_allowed(1);  // on whatever VI_DEFER_NORM says: these tests run the kernels
    wp = rand_weight(DType::Q4_K, kD, kK, 0.5f);
    wg = rand_weight(DType::Q4_K, 2 * kF, kD, 0.5f);
    wi = rand_weight(DType::Q4_K, kSplitRows, kD, 0.5f);
    dwp = ops::prepare_matmul_weight(g, ops::upload(g, wp));
    dwg = ops::prepare_matmul_weight(g, ops::upload(g, wg));
    dwgs = ops::prepare_matmul_weight(g, ops::upload(g, wg), {kF, kF}, ops::MatmulInput::kNorm,
                                      ops::MatmulUse::kSwiglu);  // Q4_KTS where Q4_KT is made
    dwi = ops::prepare_matmul_weight(g, ops::upload(g, wi));
    nw = rand_f32({kD}, DType::F32, -0.5f, 0.5f);
    dnw = ops::upload(g, nw);
  }

  bool fused() {
    return ops::deferred_norm_fused(g, dwp, dwg, ops::DeferredConsumer::kSwiglu, 1) &&
           ops::deferred_norm_fused(g, dwp, dwi, ops::DeferredConsumer::kMatmul, 1) &&
           ops::deferred_norm_fused(g, dwp, dwi, ops::DeferredConsumer::kSplit, 4);
  }

  // The GPU producer on (a, x); returns the new x, u and ss on the host (x, u f32; ss i64).
  struct Produced {
    Tensor x, u, ss, sums16;  // sums16: f32 copies of the f16 pairs; empty unless the producer wrote them
    ops::DeferredNorm dev;
  };
  Produced produce(const Tensor& a, const Tensor& x) {
    Produced p;
    Tensor dx = up(x);
    p.dev = ops::deferred_norm_scratch(g, a.rows(), kD, kEps);  // sums zeroed
    const Tensor nan_u = host_as(nan_f32({a.rows(), kD}), act());
    ops::upload_into(g, nan_u.data(), nan_u.nbytes(), p.dev.u);
    ops::matmul_add_deferred_norm(g, up(a), dwp, dx, dnw, kOff, p.dev);
    p.x = down(dx);
    p.u = down(p.dev.u);
    p.ss = ops::download(g, p.dev.ss);  // i64 words, as they are
    if (p.dev.sums_written) p.sums16 = down(p.dev.sums16);  // f16 pairs as f32
    return p;
  }
  static bool sums_expected() {
    const char* v = std::getenv("VI_DEFER_SUMS");
    return !(v && std::strcmp(v, "0") == 0);
  }

  void TearDown() override { ops::set_deferred_norm_allowed(-1); }

  Tensor wp, wg, wi, dwp, dwg, dwgs, dwi, nw, dnw;
};

TEST_P(DeferredNormGpu, FusedGemvsMatchTheCpu) {
  if (!fused()) {
    // Where the Q4_KT GEMV takes the call (native profile, f16, sm_80+ code) both sides must fuse;
    // elsewhere the pieces have no CUDA kernel and the op must say so.
    EXPECT_FALSE(cuda::gemv_q4kt_supports(g, up(rand_f32({1, kK}, act())), dwp))
        << "the Q4_KT GEMV runs but does not fuse";
    ops::DeferredNorm dn = ops::deferred_norm_scratch(g, 1, kD, kEps);
    Tensor dx = up(rand_f32({1, kD}, act()));
    const Tensor a = up(rand_f32({1, kK}, act()));
    const std::string msg = test::error_of([&] { ops::matmul_add_deferred_norm(g, a, dwp, dx, dnw, kOff, dn); });
    EXPECT_NE(msg.find("deferred_norm"), std::string::npos) << msg;
    GTEST_SKIP() << "no fused deferred norm in this setting (checked that it says so)";
  }
  for (int64_t T : {1, 2, 3, 4, 8}) {
    const std::string at = fmt::format("T={}", T);
    // T = 3: a residual near f16's range (squares in the coarse words).
    const float xr = T == 3 ? 3e4f : 4.0f;
    Tensor a = rand_f32({T, kK}, act(), -1.0f, 1.0f), x = rand_f32({T, kD}, act(), -xr, xr);

    // Producer: against the CPU's pieces on the same inputs.
    Tensor xc = Tensor::empty(DType::F32, {T, kD});
    std::memcpy(xc.data(), x.data(), x.nbytes());
    ops::DeferredNorm cdn = ops::deferred_norm_scratch(cpu, T, kD, kEps);
    ops::matmul_add_deferred_norm(cpu, a, wp, xc, nw, kOff, cdn);
    Produced p = produce(a, x);
    EXPECT_CLOSE(p.x, xc, 4e-3, "residual " + at);
    EXPECT_CLOSE(p.u, cdn.u, 4e-3, "u " + at);
    for (int64_t t = 0; t < T; ++t) {
      double own = 0.0;  // of the GPU's own (f16) residual
      for (int64_t i = 0; i < kD; ++i) own += double(p.x.row<float>(t)[i]) * p.x.row<float>(t)[i];
      const double got = ops::deferred_norm_total(p.ss, t), cpu_total = ops::deferred_norm_total(cdn.ss, t);
      EXPECT_NEAR(got, own, 2e-7 * own + kD * std::ldexp(1.0, -33)) << "sum of squares, row " << t << ", " << at;
      EXPECT_NEAR(got, cpu_total, 8e-3 * cpu_total) << "sum of squares against the CPU, row " << t << ", " << at;
    }
    // The sums of u per 16 values, against a double sum of the GPU's own u.
    EXPECT_EQ(p.dev.sums_written, sums_expected()) << at;
    if (p.dev.sums_written) {
      ASSERT_EQ(p.sums16.rows(), T);
      ASSERT_EQ(p.sums16.cols(), kD / 8);
      double worst = 0.0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < kD / 16; ++j) {
          double want = 0.0, mag = 0.0;
          for (int64_t i = 0; i < 16; ++i) {
            const double v = p.u.row<float>(t)[16 * j + i];
            want += v;
            mag += std::fabs(v);
          }
          const float* pair = p.sums16.row<float>(t) + ops::deferred_norm_sums_index(j);
          const double got = 16.0 * (double(pair[0]) + double(pair[1]));
          worst = std::max(worst, std::fabs(got - want) / (mag + 1e-30));
        }
      EXPECT_LE(worst, 2e-6) << "sums16 against the sum of u, relative to the sum of |u|, " << at;
    }
    Produced again = produce(a, x);
    EXPECT_TRUE(same_bits(p.x, again.x) && same_bits(p.u, again.u) && same_bits(p.ss, again.ss) &&
                same_bits(p.sums16, again.sums16))
        << "producer not repeatable, " << at;
    {  // a second producer into again's set of sums adds the same words: every total doubles
      Tensor dx = up(x);
      ops::matmul_add_deferred_norm(g, up(a), dwp, dx, dnw, kOff, again.dev);
      const Tensor twice = ops::download(g, again.dev.ss);
      for (int64_t t = 0; t < T; ++t)
        EXPECT_EQ(ops::deferred_norm_total(twice, t), 2.0f * ops::deferred_norm_total(p.ss, t)) << at;
    }

    // Consumers on the GPU's own u and ss; the CPU runs finish_deferred_norm then the plain op.
    ops::DeferredNorm host{p.u, p.ss, kEps, {}, false};
    Tensor n = Tensor::empty(DType::F32, {T, kD});
    ops::finish_deferred_norm(cpu, host, n);
    // matmul
    Tensor ref = Tensor::empty(DType::F32, {T, kSplitRows});
    ops::matmul(cpu, n, wi, ref);
    auto run_matmul = [&] {
      Tensor dy = up(nan_f32({T, kSplitRows}));
      ops::matmul_deferred(g, p.dev, dwi, dy);
      return down(dy);
    };
    const Tensor y = run_matmul();
    EXPECT_CLOSE(y, ref, 4e-3, "matmul_deferred " + at);
    EXPECT_TRUE(same_bits(y, run_matmul())) << "matmul_deferred not repeatable, " << at;
    // The mins' term from the sums against the 16 mmas over u (the same t: only u's fp32 order
    // differs), and a consumer that reads zeroed sums must be far off: the sums are read.
    if (p.dev.sums_written) {
      ops::DeferredNorm plain = p.dev;
      plain.sums_written = false;
      Tensor dy = up(nan_f32({T, kSplitRows}));
      ops::matmul_deferred(g, plain, dwi, dy);
      EXPECT_CLOSE(y, down(dy), 2e-4, "matmul_deferred from sums16 against from u, " + at);
      ops::DeferredNorm zeroed = p.dev;
      zeroed.sums16 = ops::empty(g, DType::F16, {T, kD / 8});
      ops::zero(g, zeroed.sums16);
      ops::matmul_deferred(g, zeroed, dwi, dy);
      EXPECT_GT(rel_l2(down(dy), ref), 0.05) << "matmul_deferred ignores sums16, " << at;
    }
    // matmul_split: parts of 32, 48 and 16 rows
    {
      std::vector<Tensor> parts = {up(nan_f32({T, 32})), up(nan_f32({T, 48})), up(nan_f32({T, 16}))};
      std::vector<Tensor*> ptrs = {&parts[0], &parts[1], &parts[2]};
      Tensor all = up(nan_f32({T, kSplitRows}));
      ops::matmul_split_deferred(g, p.dev, dwi, all, ptrs);
      int64_t c0 = 0;
      for (Tensor& part : parts) {
        Tensor got = down(part), want = Tensor::empty(DType::F32, {T, part.cols()});
        for (int64_t t = 0; t < T; ++t)
          std::memcpy(want.row<float>(t), ref.row<float>(t) + c0, sizeof(float) * part.cols());
        EXPECT_CLOSE(got, want, 4e-3, fmt::format("matmul_split_deferred part at {} {}", c0, at));
        c0 += part.cols();
      }
    }
    // fused SwiGLU
    Tensor gu = Tensor::empty(DType::F32, {T, 2 * kF}), href = Tensor::empty(DType::F32, {T, kF});
    ops::matmul(cpu, n, wg, gu);
    ops::swiglu_halves(cpu, gu, href);
    auto run_swiglu = [&] {
      Tensor dgu = up(nan_f32({T, 2 * kF})), dh = up(nan_f32({T, kF}));
      ops::matmul_swiglu_deferred(g, p.dev, dwg, dgu, dh);
      return down(dh);
    };
    const Tensor h = run_swiglu();
    EXPECT_CLOSE(h, href, 4e-3, "matmul_swiglu_deferred " + at);
    EXPECT_TRUE(same_bits(h, run_swiglu())) << "matmul_swiglu_deferred not repeatable, " << at;
    if (p.dev.sums_written) {
      ops::DeferredNorm plain = p.dev;
      plain.sums_written = false;
      Tensor dgu = up(nan_f32({T, 2 * kF})), dh = up(nan_f32({T, kF}));
      ops::matmul_swiglu_deferred(g, plain, dwg, dgu, dh);
      EXPECT_CLOSE(h, down(dh), 2e-4, "matmul_swiglu_deferred from sums16 against from u, " + at);
    }
    // The same consumer on the paired gate|up tiles: the same h, bit for bit.
    if (dwgs.dtype() == DType::Q4_KTS) {
      ASSERT_TRUE(ops::deferred_norm_fused(g, dwp, dwgs, ops::DeferredConsumer::kSwiglu, T)) << at;
      Tensor dgu = up(nan_f32({T, 2 * kF})), dh = up(nan_f32({T, kF}));
      ops::matmul_swiglu_deferred(g, p.dev, dwgs, dgu, dh);
      EXPECT_TRUE(same_bits(down(dh), h)) << "matmul_swiglu_deferred on Q4_KTS differs from Q4_KT, " << at;
    }
  }
}

// The whole path against the classic one on the GPU: matmul + add_rms_norm + the consumer, on the
// same inputs, agree within the f16 roundings the two orders differ by.
TEST_P(DeferredNormGpu, AgreesWithAddRmsNorm) {
  if (!fused()) GTEST_SKIP() << "no fused deferred norm in this setting";
  for (int64_t T : {1, 4}) {
    Tensor a = rand_f32({T, kK}, act(), -1.0f, 1.0f), x = rand_f32({T, kD}, act(), -4.0f, 4.0f);
    Tensor dx1 = up(x), o = gpu_empty({T, kD}), n = gpu_empty({T, kD});
    ops::matmul(g, up(a), dwp, o);
    ops::add_rms_norm(g, dx1, o, dnw, kEps, kOff, n);
    Tensor gu = gpu_empty({T, 2 * kF}), h1 = gpu_empty({T, kF});
    ops::matmul_swiglu(g, n, dwg, gu, h1);
    Produced p = produce(a, x);
    Tensor h2 = gpu_empty({T, kF});
    ops::matmul_swiglu_deferred(g, p.dev, dwg, gu, h2);
    EXPECT_CLOSE(p.x, down(dx1), 1e-6, fmt::format("residual T={}", T));  // the same two roundings
    EXPECT_CLOSE(down(h2), down(h1), 4e-3, fmt::format("h T={}", T));
  }
}

VI_CUDA_INSTANTIATE(DeferredNormGpu);

}  // namespace
}  // namespace vi::cudatest
