// CUDA vs CPU: gdn_conv_step (a decode or verify step's GDN conv + SiLU of q, k, v and the L2
// norm of the q and k heads) on fresh random inputs over steps in a row (the conv state
// carries) of T = 1, 2, 3, 4, 8 tokens (the multi-token kernels: 4 exact, the others the 8-token
// kernel with guards) and 11 (two launches, 8 + 3), in
// both kernel profiles and both activation dtypes: the 27B shape (16 heads of 128, 6144
// value channels), a tiny one and odd sizes (a head of 100, conv width 3).
// Tolerances (relative L2): f32 1e-5 (summation order of the norm only), f16 2e-3 (the
// rounding of the conv output and of the result). The states hold inputs, moved, never
// computed: they must match exactly. Also the GPU's five separate ops, which the fused
// kernel repeats in the same order (expected equal; one f16 ulp here and there allowed).
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "cuda_test_util.h"
#include "ops/gdn.h"
#include "ops/gdn_conv_step.h"
#include "ops/norm.h"

namespace vi::cudatest {
namespace {

class GdnConvStep : public CudaOpTest {};

TEST_P(GdnConvStep, MatchesCpuAndTheSeparateOps) {
  const std::tuple<int64_t, int64_t, int64_t, int64_t> shapes[] = {
      {16, 128, 48 * 128, 4}, {2, 16, 96, 4}, {3, 100, 77, 3}};  // Hk, dk, Cv, K
  for (auto [Hk, dk, Cv, K] : shapes) {
    const std::string sz = " Hk=" + std::to_string(Hk) + " dk=" + std::to_string(dk) + " Cv=" + std::to_string(Cv);
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const int64_t Cs[3] = {Hk * dk, Hk * dk, Cv};
    ops::ConvGroup cpu_g[3], gpu_g[3], sep_g[3];  // q, k, v: CPU op, GPU op, GPU separate ops
    for (int i = 0; i < 3; ++i) {
      Tensor w = rand_f32({Cs[i], K}, DType::F32), st = rand_f32({K - 1, Cs[i]}, DType::F32, -2, 2);
      cpu_g[i] = {Tensor(), w, st, Tensor()};
      cpu_g[i].state = Tensor::empty(DType::F32, {K - 1, Cs[i]});
      std::copy_n(st.ptr<float>(), st.numel(), cpu_g[i].state.ptr<float>());
      gpu_g[i] = {Tensor(), ops::upload(g, w), ops::upload(g, st), Tensor()};
      sep_g[i] = {Tensor(), ops::upload(g, w), ops::upload(g, st), Tensor()};
    }
    const int64_t Ts[] = {1, 2, 4, 8, 1, 3, 11};  // tokens per step; the states carry
    for (int step = 0; step < 7; ++step) {
      const int64_t T = Ts[step];
      const std::string what = sz + " T=" + std::to_string(T) + " step " + std::to_string(step);
      for (int i = 0; i < 3; ++i) {
        Tensor x = rand_f32({T, Cs[i]}, act(), -3, 3);
        cpu_g[i].x = x;
        cpu_g[i].y = Tensor::empty(DType::F32, {T, Cs[i]});
        gpu_g[i].x = up(x);
        gpu_g[i].y = gpu_empty({T, Cs[i]});
        sep_g[i].x = up(x);
        sep_g[i].y = gpu_empty({T, Cs[i]});
      }
      ops::gdn_conv_step(cpu, cpu_g[0], cpu_g[1], cpu_g[2], dk, 1e-6f, q_scale);
      ops::gdn_conv_step(g, gpu_g[0], gpu_g[1], gpu_g[2], dk, 1e-6f, q_scale);
      for (ops::ConvGroup& s : sep_g) ops::conv1d_causal(g, s.x, s.w, s.state, true, s.y);
      Tensor qn = sep_g[0].y.reshape({T * Hk, dk}), kn = sep_g[1].y.reshape({T * Hk, dk});
      ops::l2_norm(g, qn, 1e-6f, q_scale, qn);
      ops::l2_norm(g, kn, 1e-6f, 1.0f, kn);
      const char* names[3] = {"q", "k", "v"};
      for (int i = 0; i < 3; ++i) {
        const Tensor y = down(gpu_g[i].y);
        EXPECT_CLOSE(y, cpu_g[i].y, tol(1e-5, 2e-3), std::string(names[i]) + " y" + what);
        EXPECT_CLOSE(y, down(sep_g[i].y), tol(1e-6, 5e-4), std::string(names[i]) + " y vs separate ops" + what);
        EXPECT_EQ(rel_l2(ops::download(g, gpu_g[i].state), cpu_g[i].state), 0.0) << names[i] << " state" << what;
      }
    }
  }
}

VI_CUDA_INSTANTIATE(GdnConvStep);

}  // namespace
}  // namespace vi::cudatest
