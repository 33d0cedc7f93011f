// The Q4_KT GEMV fed by the copy engine (gemv_q4kt_tma.cu): every compiled form against the CPU
// on the Q4_K original, and the 4-consumer forms bit for bit against the register walk
// (gemv_q4kt's one-tile kernel: the same super-blocks per warp, the same order of sums). Shapes:
// one tile, tiles that leave blocks without work, more tiles than one wave (blocks that take
// several, tickets, the ring running across tile boundaries), K of 4 super-blocks (a partial
// chunk) and of 20 (two whole chunks of 8 and a partial one); T = 1, 3 and 8; twice each, so a
// counter left behind by the first launch would show in the second. Then the fused SwiGLU on Q4_KTS
// and the deferred norm's consumers routed to it, against the register walk. Without sm_90 code
// the tests say why they skip.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_q4kt_tma.cuh"
#include "cuda_test_util.h"
#include "ops/deferred_norm.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

class GemvQ4ktTma : public CudaOpTest {};

TEST_P(GemvQ4ktTma, EveryFormMatchesTheCpuAndTheRegisterWalk) {
  if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
    GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
  if (const std::string why = no_tiled_q4k_reason(); !why.empty()) GTEST_SKIP() << why;
  int checked = 0;
  for (int64_t N : {16, 96, 19200}) {
    for (int64_t K : {1024, 5120}) {
      if (N == 19200 && K != 1024) continue;
      Tensor w = rand_weight(DType::Q4_K, N, K, 0.5f);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      ASSERT_EQ(dw.dtype(), DType::Q4_KT);
      for (int64_t T : {1, 3, 8}) {
        const Tensor x = rand_f32({T, K}, act(), -2.0f, 2.0f);
        const Tensor dx = up(x);
        Tensor ref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, ref);
        Tensor walk = up(nan_f32({T, N}));
        cuda::gemv_q4kt(g, dx, dw, walk, cuda::Q4ktShape{3, false, false});
        const Tensor walk_h = down(walk);
        for (const cuda::Q4ktTmaShape& s : cuda::gemv_q4kt_tma_shapes()) {
          if (!cuda::gemv_q4kt_tma_supports(g, dx, dw, s)) continue;
          for (int run = 0; run < 2; ++run) {
            Tensor dy = up(nan_f32({T, N}));
            cuda::gemv_q4kt_tma(g, dx, dw, dy, s);
            const Tensor got = down(dy);
            const std::string at =
                fmt::format("N={} K={} T={} {}, launch {}", N, K, T, cuda::gemv_q4kt_tma_shape_name(s), run);
            EXPECT_CLOSE(got, ref, 4e-3, at);
            if (s.consumers == 4) {
              EXPECT_EQ(words_differ(got, walk_h), "") << at << " against the register walk";
            }
          }
          ++checked;
        }
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no form of the copy-engine GEMV runs here (sm_90 code, CUDA 12+)";
}

// The fused gate|up + SwiGLU on Q4_KTS and the deferred norm's three consumers (the mins' term from
// the producer's sums, and without them) routed to the copy-engine kernel (VI_Q4KT_TMA's route,
// set here, for every consumer and for the SwiGLU alone): every form that compiles them gives the
// register walk's bits, and each routed call (one token) is a launch of the new kernel (counted).
TEST_P(GemvQ4ktTma, SwigluAndDeferredConsumersMatchTheRegisterWalk) {
  if (act() != DType::F16 || g.profile != ops::KernelProfile::kNative)
    GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
  if (const std::string why = no_tiled_q4k_reason(); !why.empty()) GTEST_SKIP() << why;
  constexpr int64_t kN = 19200, kF = kN / 2, kK = 1024;
  constexpr float kEps = 1e-6f, kOff = 1.0f;
  ops::set_deferred_norm_allowed(1);
  const Tensor w = rand_weight(DType::Q4_K, kN, kK, 0.5f);
  const Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
  const Tensor dws = ops::prepare_matmul_weight(g, ops::upload(g, w), {kF, kF}, ops::MatmulInput::kNorm,
                                                ops::MatmulUse::kSwiglu);
  ASSERT_EQ(dw.dtype(), DType::Q4_KT);
  ASSERT_EQ(dws.dtype(), DType::Q4_KTS);
  const Tensor wp = rand_weight(DType::Q4_K, kK, kK, 0.5f);
  const Tensor dwp = ops::prepare_matmul_weight(g, ops::upload(g, wp));
  const Tensor dnw = ops::upload(g, rand_f32({kK}, DType::F32, -0.5f, 0.5f));
  if (!ops::deferred_norm_fused(g, dwp, dws, ops::DeferredConsumer::kSwiglu, 1) ||
      !ops::deferred_norm_fused(g, dwp, dw, ops::DeferredConsumer::kMatmul, 1))
    GTEST_SKIP() << "this device does not fuse the deferred norm on Q4_KT";
  const std::vector<cuda::Q4ktTmaShape> shapes = cuda::gemv_q4kt_tma_shapes();
  int checked = 0;
  for (int64_t T : {1, 4, 8}) {
    const Tensor x = rand_f32({T, kK}, act(), -2.0f, 2.0f);
    const Tensor dx = up(x);
    Tensor hw = up(nan_f32({T, kF}));
    cuda::gemv_q4kt_swiglu(g, dx, dws, hw, cuda::Q4ktShape{4, true, false});
    const Tensor h_walk = down(hw);
    for (size_t n = 0; n < shapes.size(); ++n) {
      const cuda::Q4ktTmaShape& s = shapes[n];
      if (!cuda::gemv_q4kt_tma_supports(g, dx, dws, s, true)) continue;
      const std::string at = fmt::format("T={} {}", T, cuda::gemv_q4kt_tma_shape_name(s));
      Tensor dh = up(nan_f32({T, kF}));
      cuda::gemv_q4kt_tma_swiglu(g, dx, dws, dh, s);
      EXPECT_EQ(words_differ(down(dh), h_walk), "") << "swiglu on Q4_KTS, " << at;
      // The consumers: the register walk (route 0), then this shape's route.
      for (const bool sums : {true, false}) {
        const Tensor a = rand_f32({T, kK}, act(), -1.0f, 1.0f), x0 = rand_f32({T, kK}, act(), -4.0f, 4.0f);
        // routed 0: none; 1: every consumer (100 + n); 2: the SwiGLU alone (n).
        Tensor y[3], h[3], part[3][2];
        for (int routed = 0; routed < 3; ++routed) {
          const int route = static_cast<int>(n + 1);
          cuda::set_q4kt_tma_route(routed == 0 ? 0 : routed == 1 ? 100 + route : route);
          ops::DeferredNorm in = ops::deferred_norm_scratch(g, T, kK, kEps);
          if (!sums) in.sums16 = Tensor();
          Tensor dres = up(x0);
          ops::matmul_add_deferred_norm(g, up(a), dwp, dres, dnw, kOff, in);
          Tensor dy = up(nan_f32({T, kN})), dall = up(nan_f32({T, kN})), gu = up(nan_f32({T, kN}));
          Tensor dh2 = up(nan_f32({T, kF}));
          Tensor p0 = up(nan_f32({T, kN - 3200})), p1 = up(nan_f32({T, 3200}));
          const uint64_t before = cuda::gemv_q4kt_tma_launches();
          ops::matmul_deferred(g, in, dw, dy);
          ops::matmul_split_deferred(g, in, dw, dall, {&p0, &p1});
          ops::matmul_swiglu_deferred(g, in, dws, gu, dh2);
          // Routed for one token only; other T run the register walk.
          const uint64_t expect = T != 1 ? 0 : routed == 0 ? 0 : routed == 1 ? 3 : 1;
          EXPECT_EQ(cuda::gemv_q4kt_tma_launches(), before + expect) << at << " sums " << sums << " route " << routed;
          y[routed] = down(dy);
          h[routed] = down(dh2);
          part[routed][0] = down(p0);
          part[routed][1] = down(p1);
        }
        cuda::set_q4kt_tma_route(-1);
        for (int routed = 1; routed < 3; ++routed) {
          const std::string at2 = fmt::format("{} sums {} route {}", at, sums, routed);
          EXPECT_EQ(words_differ(y[routed], y[0]), "") << "matmul_deferred, " << at2;
          EXPECT_EQ(words_differ(part[routed][0], part[0][0]), "") << "matmul_split_deferred part 0, " << at2;
          EXPECT_EQ(words_differ(part[routed][1], part[0][1]), "") << "matmul_split_deferred part 1, " << at2;
          EXPECT_EQ(words_differ(h[routed], h[0]), "") << "matmul_swiglu_deferred, " << at2;
        }
      }
      ++checked;
    }
  }
  ops::set_deferred_norm_allowed(-1);
  if (checked == 0) GTEST_SKIP() << "no form of the copy-engine GEMV runs here (sm_90 code, CUDA 12+)";
}

VI_CUDA_INSTANTIATE(GemvQ4ktTma);

}  // namespace
}  // namespace vi::cudatest
