// CUDA vs CPU: gdn_decode_step (a decode or verify round's GDN gates, recurrent delta rule and
// gated output norm in one op) on fresh random inputs, several sequences with states of their
// own, five steps in a row (the states carry) of T = 1, 2, 4, 8 tokens per sequence and 11
// (two chunks of the kernels, 8 + 3), both GVA layouts, in both kernel profiles and both
// activation dtypes. Shapes: the 27B layer (16 key heads, 48 value heads of 128) at
// one and three sequences, small and odd ones (dk 40, dv 33: partial warps; dk 72, dv 100),
// heads wider than one pass (dv 160, 512), and 70 sequences (more than one launch's 64 state
// pointers).
// Where the cluster kernel runs (native profile, sm_90: one head split over a cluster of
// blocks, cuda::gdn_decode_uses_cluster), the one-block-per-head kernel runs too on copies of
// the states, and both are checked against the CPU; their states must agree bit for bit (the
// same per-column arithmetic), their outputs closely (the norm's sum of squares runs in
// another order). With dv 33, 100 and 160 some cluster blocks have partial or no columns. The
// 27B shapes (dk = dv = 128) take the lean cluster kernels, so their states are checked bit for
// bit against the one-block kernel at every T, and across the chunk boundary at T = 11.
// Tolerances (relative L2): f32 2e-5 (summation order only), f16 3e-3 (f16 inputs and
// output, the delta rule's output rounded to f16 before the norm, as the stored op output).
// Also the GPU's three separate ops (gdn_gates, gated_delta_rule, gated_rms_norm), whose math
// the fused kernel repeats: close, not bit-equal (the norm's sum runs over other threads).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/gdn_decode_step.cuh"
#include "cuda_test_util.h"
#include "ops/gdn.h"
#include "ops/gdn_decode_step.h"
#include "ops/norm.h"
#include "unit/gdn_unfused_step.h"

namespace vi::cudatest {
namespace {

class GdnDecodeStep : public CudaOpTest {};

TEST_P(GdnDecodeStep, MatchesCpuAndTheSeparateOps) {
  const std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> shapes[] = {
      {1, 16, 48, 128, 128}, {3, 16, 48, 128, 128}, {2, 2, 4, 40, 33}, {1, 3, 9, 72, 100},
      {5, 1, 3, 64, 160},    {2, 1, 2, 32, 512},    {70, 2, 2, 16, 32}};  // N, Hk, Hv, dk, dv
  const float eps = 1e-6f;
  for (auto [N, Hk, Hv, dk, dv] : shapes) {
    const bool cluster = cuda::gdn_decode_uses_cluster(g, dv);
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      const std::string sz = fmt::format(" N={} Hk={} Hv={} dk={} dv={} {} ({})", N, Hk, Hv, dk, dv,
                                         layout == ops::GvaLayout::kTiled ? "tiled" : "grouped",
                                         cluster ? "cluster kernel" : "one block per head");
      Tensor A = rand_f32({Hv}, DType::F32, -2, -0.1f), dt = rand_f32({Hv}, DType::F32);
      Tensor w = rand_f32({dv}, DType::F32, -1.5f, 1.5f);
      Tensor dA = ops::upload(g, A), ddt = ops::upload(g, dt), dw = ops::upload(g, w);
      // Per sequence: CPU op, GPU op, GPU separate ops, GPU op forced to one block per head
      // (only where the op takes the cluster kernel).
      std::vector<Tensor> cpu_s, gpu_s, sep_s, old_s;
      for (int64_t n = 0; n < N; ++n) {
        Tensor s = rand_f32({Hv, dk, dv}, DType::F32, -0.5f, 0.5f);
        gpu_s.push_back(ops::upload(g, s));
        sep_s.push_back(ops::upload(g, s));
        if (cluster) old_s.push_back(ops::upload(g, s));
        cpu_s.push_back(std::move(s));
      }
      const int64_t Ts[] = {1, 2, 4, 8, 11};  // tokens per sequence, step by step
      for (int step = 0; step < 5; ++step) {
        const int64_t T = Ts[step], R = N * T;  // R rows, sequence n's [n T, (n + 1) T)
        const std::string what = sz + " T=" + std::to_string(T) + " step " + std::to_string(step);
        Tensor q = unit_rows(rand_f32({R, Hk, dk}, DType::F32), 1.0f / std::sqrt(float(dk)), act());
        Tensor k = unit_rows(rand_f32({R, Hk, dk}, DType::F32), 1.0f, act());
        Tensor v = rand_f32({R, Hv, dv}, act(), -2, 2), z = rand_f32({R, Hv, dv}, act(), -3, 3);
        Tensor a = rand_f32({R, Hv}, act(), -8, 25), b = rand_f32({R, Hv}, act(), -6, 6);  // a > 20: softplus identity
        Tensor ref = Tensor::empty(DType::F32, {R, Hv, dv});
        // The reference runs in f32 on the inputs' values (already f16-rounded in f16 runs).
        ops::gdn_decode_step(cpu, q, k, v, a, b, A, dt, z, w, eps, cpu_s, layout, ref);
        Tensor dq = up(q), dk_ = up(k), dv_ = up(v), dz = up(z), da = up(a), db = up(b);
        Tensor dy = gpu_empty({R, Hv, dv});
        ops::gdn_decode_step(g, dq, dk_, dv_, da, db, dA, ddt, dz, dw, eps, gpu_s, layout, dy);

        Tensor dy_sep = gpu_empty({R, Hv, dv});
        test::unfused_gdn_decode_step(g, dq, dk_, dv_, da, db, dA, ddt, dz, dw, eps, sep_s, layout, dy_sep);

        const Tensor y = down(dy);
        EXPECT_CLOSE(y, ref, tol(2e-5, 3e-3), "y" + what);
        EXPECT_CLOSE(y, down(dy_sep), tol(1e-5, 2e-3), "y vs separate ops" + what);
        for (int64_t n = 0; n < N; ++n) {
          const Tensor s = ops::download(g, gpu_s[n]);
          EXPECT_CLOSE(s, cpu_s[n], tol(2e-5, 3e-3), fmt::format("state {}{}", n, what));
          EXPECT_CLOSE(s, ops::download(g, sep_s[n]), 1e-6, fmt::format("state {} vs separate ops{}", n, what));
        }
        if (cluster) {
          Tensor dy_old = gpu_empty({R, Hv, dv});
          cuda::set_gdn_decode_cluster_allowed(false);
          const bool forced_off = !cuda::gdn_decode_uses_cluster(g, dv);
          ops::gdn_decode_step(g, dq, dk_, dv_, da, db, dA, ddt, dz, dw, eps, old_s, layout, dy_old);
          cuda::set_gdn_decode_cluster_allowed(true);
          ASSERT_TRUE(forced_off) << "set_gdn_decode_cluster_allowed(false) left the cluster kernel on" << what;
          const Tensor y_old = down(dy_old);
          EXPECT_CLOSE(y_old, ref, tol(2e-5, 3e-3), "y, one block per head" + what);
          // f16: a different sum of squares may move a rounded output by one ulp (2^-11).
          EXPECT_CLOSE(y, y_old, tol(1e-6, 1e-3), "y, cluster vs one block per head" + what);
          for (int64_t n = 0; n < N; ++n) {
            const Tensor s_old = ops::download(g, old_s[n]);
            EXPECT_CLOSE(s_old, cpu_s[n], tol(2e-5, 3e-3), fmt::format("state {}, one block per head{}", n, what));
            EXPECT_EQ(rel_l2(ops::download(g, gpu_s[n]), s_old), 0.0)
                << fmt::format("state {}, cluster vs one block per head: not bit-equal{}", n, what);
          }
        }
      }
    }
  }
}

VI_CUDA_INSTANTIATE(GdnDecodeStep);

}  // namespace
}  // namespace vi::cudatest
