// The deferred norm producer's halved tiles (gemv_q4kt_halved_tiles, gemv_q4kt.cu): on a matrix of
// 2.5 tiles an SM (5280 rows on 132 SMs) the tiles past two a SM are split by K into two halves,
// each a block of its own, and the second half to finish adds the other's sums and writes the
// tile. Checked, for T = 1, 4, 8 and K of 12 and 24 super-blocks (halves of 6 and 12):
// the launch halved (counted) and its residual, u, sums of squares and sums16 agree with the CPU's
// pieces and with the same launch without halves; launches on other inputs in between do not
// change the next result (the arrival counters are back at zero after each launch) and every
// result repeats bit for bit (whichever half arrives second, the same sums). Off the native f16
// path, or in a build without sm_80 code, the test says why it skips. Beside them, the default
// blocks a SM, on which the halves depend, keep one-wave matrices in one wave on any SM count.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/hwinfo.h"
#include "cuda_test_util.h"
#include "ops/deferred_norm.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

class GemvHalvesGpu : public CudaOpTest {
 protected:
  static constexpr float kEps = 1e-6f, kOff = 1.0f;

  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
      GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
    ops::set_deferred_norm_allowed(1);
  }
  void TearDown() override {
    cuda::set_q4kt_halves_default(-1);
    ops::set_deferred_norm_allowed(-1);
  }

  struct Produced {
    Tensor x, u, ss, sums16;  // on the host: x, u, sums16 as f32, ss as the i64 words
  };
  // The GPU producer x += a · wᵀ (dw: [n, K] prepared) with halves on or off.
  Produced produce(const Tensor& dw, const Tensor& dnw, const Tensor& a, const Tensor& x, int halves) {
    cuda::set_q4kt_halves_default(halves);
    ops::DeferredNorm dn = ops::deferred_norm_scratch(g, a.rows(), x.cols(), kEps);
    const Tensor nan_u = host_as(nan_f32({a.rows(), x.cols()}), act());
    ops::upload_into(g, nan_u.data(), nan_u.nbytes(), dn.u);
    Tensor dx = up(x);
    const uint64_t before = cuda::gemv_q4kt_halved_launches();
    ops::matmul_add_deferred_norm(g, up(a), dw, dx, dnw, kOff, dn);
    EXPECT_EQ(cuda::gemv_q4kt_halved_launches(), before + (halves ? 1 : 0)) << "halved launches";
    Produced p;
    p.x = down(dx);
    p.u = down(dn.u);
    p.ss = ops::download(g, dn.ss);
    if (dn.sums_written) p.sums16 = down(dn.sums16);
    return p;
  }
};

TEST_P(GemvHalvesGpu, ProducerHalvesAgreeWithTheCpuAndTheWholeTiles) {
  const int64_t sms = cuda::gpu_facts(0).sm_count;
  const int64_t n = 16 * (2 * sms + sms / 2);  // 2.5 tiles an SM
  for (const int64_t k : {int64_t(3072), int64_t(6144)}) {
    cuda::set_q4kt_halves_default(1);  // whatever VI_Q4KT_HALVES says
    const int64_t halved = cuda::gemv_q4kt_halved_tiles(n, k, cuda::gemv_q4kt_default_shape(n).blocks);
    if (halved == 0) GTEST_SKIP() << n << " rows on " << sms << " SMs: no halves at the default shape";
    const Tensor w = rand_weight(DType::Q4_K, n, k, 0.5f), nw = rand_f32({n}, DType::F32, -0.5f, 0.5f);
    const Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w)), dnw = ops::upload(g, nw);
    if (const std::string why = no_tiled_q4k_reason(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_EQ(dw.dtype(), DType::Q4_KT) << "sm_80+ code and tiles on: the Q4_K weight must be prepared as Q4_KT";
    for (const int64_t t : {int64_t(1), int64_t(4), int64_t(8)}) {
      const std::string at = fmt::format("{}x{}, {} halved, T={}", n, k, halved, t);
      const Tensor a = rand_f32({t, k}, act(), -1.0f, 1.0f), x = rand_f32({t, n}, act(), -4.0f, 4.0f);
      const Tensor a2 = rand_f32({t, k}, act(), -1.0f, 1.0f);
      ASSERT_TRUE(cuda::gemv_q4kt_add_deferred_norm_supports(g, up(a), dw, up(x))) << at;

      Tensor xc = Tensor::empty(DType::F32, {t, n});
      std::memcpy(xc.data(), x.data(), x.nbytes());
      ops::DeferredNorm cdn = ops::deferred_norm_scratch(cpu, t, n, kEps);
      ops::matmul_add_deferred_norm(cpu, a, w, xc, nw, kOff, cdn);

      const Produced on = produce(dw, dnw, a, x, 1);
      const Produced off = produce(dw, dnw, a, x, 0);
      EXPECT_CLOSE(on.x, xc, 4e-3, "residual against the CPU, " + at);
      EXPECT_CLOSE(on.u, cdn.u, 4e-3, "u against the CPU, " + at);
      EXPECT_CLOSE(on.x, off.x, 1e-3, "residual against whole tiles, " + at);
      EXPECT_CLOSE(on.u, off.u, 1e-3, "u against whole tiles, " + at);
      for (int64_t r = 0; r < t; ++r) {
        const double got = ops::deferred_norm_total(on.ss, r), whole = ops::deferred_norm_total(off.ss, r);
        EXPECT_NEAR(got, whole, 1e-3 * whole) << "sum of squares against whole tiles, row " << r << ", " << at;
        EXPECT_NEAR(got, ops::deferred_norm_total(cdn.ss, r), 8e-3 * whole) << "sum of squares, CPU, " << at;
      }
      ASSERT_EQ(on.sums16.data() != nullptr, off.sums16.data() != nullptr) << at;
      if (on.sums16.data() != nullptr) EXPECT_CLOSE(on.sums16, off.sums16, 2e-3, "sums16 against whole tiles, " + at);

      // Other inputs, then the first again: the counters were left at zero, the sums repeat.
      const Produced other = produce(dw, dnw, a2, x, 1);
      const Produced other_whole = produce(dw, dnw, a2, x, 0);
      EXPECT_CLOSE(other.x, other_whole.x, 1e-3, "second inputs, residual, " + at);
      const Produced again = produce(dw, dnw, a, x, 1);
      EXPECT_EQ(words_differ(again.x, on.x), "") << "residual not repeatable, " << at;
      EXPECT_EQ(words_differ(again.u, on.u), "") << "u not repeatable, " << at;
      EXPECT_EQ(words_differ(again.ss, on.ss), "") << "sums of squares not repeatable, " << at;
      if (on.sums16.data() != nullptr) {
        EXPECT_EQ(words_differ(again.sums16, on.sums16), "") << "sums16 not repeatable, " << at;
      }
    }
  }
}

// Where the halves do not fit, none: a matrix of whole waves, one of fewer tiles than two a SM,
// and K below 8 super-blocks (here 4: Q4_KT's K is whole blocks of 4).
TEST_P(GemvHalvesGpu, NoHalvesWhereTheyDoNotFit) {
  cuda::set_q4kt_halves_default(1);
  const int64_t sms = cuda::gpu_facts(0).sm_count;
  EXPECT_EQ(cuda::gemv_q4kt_halved_tiles(16 * 3 * sms, 6144, 3), 0) << "three whole tiles an SM";
  EXPECT_EQ(cuda::gemv_q4kt_halved_tiles(16 * 2 * sms, 6144, 3), 0) << "two whole tiles an SM";
  EXPECT_EQ(cuda::gemv_q4kt_halved_tiles(16 * (2 * sms + sms / 2), 1024, 3), 0) << "4 super-blocks";
  EXPECT_EQ(cuda::gemv_q4kt_halved_tiles(16 * (2 * sms + sms / 2), 6144, 3), sms / 2);
  cuda::set_q4kt_halves_default(0);
  EXPECT_EQ(cuda::gemv_q4kt_halved_tiles(16 * (2 * sms + sms / 2), 6144, 3), 0) << "switched off";
}

// The default blocks a SM keep a matrix in one wave where 3 or 4 a SM can hold it: 3 where 3 do
// (spread over more SMs), 4 where only 4 do (a 5120-row matrix on fewer than 107 SMs: on 94 SMs of
// an H100, 3 a SM left 38 of 320 tiles a second wave, 30.6 against 21.4 us). Usable SM counts
// from 40 to the card's (set_usable_sm_count, as an SM partition sets it).
TEST_P(GemvHalvesGpu, DefaultBlocksKeepOneWaveMatricesInOneWave) {
  for_each_usable_sm_count(40, [&](int sms) {
    for (const int64_t n : {int64_t(5120), int64_t(8192), int64_t(16480), int64_t(34816)}) {
      const int64_t tiles = n / 16;
      const int b = cuda::gemv_q4kt_default_blocks(n);
      const std::string at = fmt::format("{} rows on {} SMs", n, sms);
      EXPECT_EQ(cuda::gemv_q4kt_default_shape(n).blocks, b) << at;
      if (tiles <= 3 * sms) {
        EXPECT_EQ(b, 3) << at << ": 3 a SM hold it in one wave";
      } else {
        EXPECT_EQ(b, 4) << at << ": more than one wave of 3 a SM";
      }
      if (tiles <= 4 * sms) {
        EXPECT_LE(tiles, int64_t(b) * sms) << at << ": one wave possible, not taken";
      }
    }
  });
}

VI_CUDA_INSTANTIATE(GemvHalvesGpu);

}  // namespace
}  // namespace vi::cudatest
