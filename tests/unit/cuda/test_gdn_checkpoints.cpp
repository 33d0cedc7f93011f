// CUDA: the checkpoints of the fused GDN step ops (speculative decoding's verify pass keeps the
// recurrent state after each of its tokens but the last). On fresh random inputs, for T = 2, 4,
// 8 and 11 tokens (11: two chunks of the decode-step kernels and two launches of the conv step):
// - gdn_decode_step: each checkpoint against the CPU op's (the states' tolerance) and, bit for
//   bit, against the state the GPU op leaves after a step of the first t + 1 tokens alone; the
//   outputs and live states equal to a run without checkpoints; a second sequence without
//   checkpoints beside the first; nothing written past row T - 2. Shapes: the 27B layer (the
//   lean cluster kernels on sm_90) and an odd one (dk 40, dv 33: the general kernels).
// - gdn_conv_step: each window after token t equal to the CPU's and to the state a step of the
//   first t + 1 tokens leaves (windows are moved inputs: exact); the 27B shape and a small one.
// Both kernel profiles, both activation dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "ops/gdn_conv_step.h"
#include "ops/gdn_decode_step.h"
#include "ops/memory.h"

namespace vi::cudatest {
namespace {

class GdnCheckpoints : public CudaOpTest {};

Tensor test_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.dtype(), t.shape());
  std::memcpy(c.data(), t.data(), t.nbytes());
  return c;
}
Tensor nan_host(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::fill_n(t.ptr<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  return t;
}
Tensor row_of(const Tensor& t, int64_t r) {
  std::vector<int64_t> shape = t.shape();
  shape.erase(shape.begin());
  return t.slice_rows(r, r + 1).reshape(shape);
}
bool all_nan(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(t.ptr<float>()[i])) return false;
  return true;
}

TEST_P(GdnCheckpoints, DecodeStep) {
  const std::tuple<int64_t, int64_t, int64_t, int64_t> shapes[] = {{16, 48, 128, 128}, {2, 4, 40, 33}};  // Hk, Hv, dk, dv
  const float eps = 1e-6f;
  const int64_t N = 2;  // sequence 0 keeps checkpoints, sequence 1 does not
  for (auto [Hk, Hv, dk, dv] : shapes) {
    for (int64_t T : {2, 4, 8, 11}) {
      const std::string what = fmt::format(" Hk={} Hv={} dk={} dv={} T={}", Hk, Hv, dk, dv, T);
      const int64_t R = N * T;
      Tensor A = rand_f32({Hv}, DType::F32, -2, -0.1f), dt = rand_f32({Hv}, DType::F32);
      Tensor w = rand_f32({dv}, DType::F32, -1.5f, 1.5f);
      Tensor q = unit_rows(rand_f32({R, Hk, dk}, DType::F32), 1.0f / std::sqrt(float(dk)), act());
      Tensor k = unit_rows(rand_f32({R, Hk, dk}, DType::F32), 1.0f, act());
      Tensor v = rand_f32({R, Hv, dv}, act(), -2, 2), z = rand_f32({R, Hv, dv}, act(), -3, 3);
      Tensor a = rand_f32({R, Hv}, act(), -8, 25), b = rand_f32({R, Hv}, act(), -6, 6);
      std::vector<Tensor> s0{rand_f32({Hv, dk, dv}, DType::F32, -0.5f, 0.5f), rand_f32({Hv, dk, dv}, DType::F32, -0.5f, 0.5f)};

      std::vector<Tensor> cpu_s{test_copy(s0[0]), test_copy(s0[1])};
      const std::vector<Tensor> cpu_ck{nan_host({T, Hv, dk, dv}), Tensor()};
      Tensor ref = Tensor::empty(DType::F32, {R, Hv, dv});
      ops::gdn_decode_step(cpu, q, k, v, a, b, A, dt, z, w, eps, cpu_s, ops::GvaLayout::kTiled, ref, cpu_ck);

      Tensor dA = ops::upload(g, A), ddt = ops::upload(g, dt), dw = ops::upload(g, w);
      Tensor dq = up(q), dk_ = up(k), dv_ = up(v), dz = up(z), da = up(a), db = up(b);
      std::vector<Tensor> with{ops::upload(g, s0[0]), ops::upload(g, s0[1])};
      std::vector<Tensor> plain{ops::upload(g, s0[0]), ops::upload(g, s0[1])};
      const std::vector<Tensor> ck{ops::upload(g, nan_host({T, Hv, dk, dv})), Tensor()};
      Tensor dy = gpu_empty({R, Hv, dv}), dy_plain = gpu_empty({R, Hv, dv});
      ops::gdn_decode_step(g, dq, dk_, dv_, da, db, dA, ddt, dz, dw, eps, with, ops::GvaLayout::kTiled, dy, ck);
      ops::gdn_decode_step(g, dq, dk_, dv_, da, db, dA, ddt, dz, dw, eps, plain, ops::GvaLayout::kTiled, dy_plain);
      EXPECT_CLOSE(down(dy), ref, tol(2e-5, 3e-3), "y" + what);
      EXPECT_EQ(rel_l2(down(dy), down(dy_plain)), 0.0) << "y changed with checkpoints" << what;
      for (int n = 0; n < N; ++n)
        EXPECT_EQ(rel_l2(ops::download(g, with[n]), ops::download(g, plain[n])), 0.0)
            << "state " << n << " changed with checkpoints" << what;
      const Tensor got = ops::download(g, ck[0]);
      EXPECT_TRUE(all_nan(row_of(got, T - 1))) << "a checkpoint after the last token" << what;
      for (int64_t j = 0; j + 1 < T; ++j) {
        EXPECT_CLOSE(row_of(got, j), row_of(cpu_ck[0], j), tol(2e-5, 3e-3), fmt::format("checkpoint {} vs cpu{}", j, what));
        std::vector<Tensor> part{ops::upload(g, s0[0])};
        Tensor yp = gpu_empty({j + 1, Hv, dv});
        ops::gdn_decode_step(g, dq.slice_rows(0, j + 1), dk_.slice_rows(0, j + 1), dv_.slice_rows(0, j + 1),
                             da.slice_rows(0, j + 1), db.slice_rows(0, j + 1), dA, ddt, dz.slice_rows(0, j + 1), dw,
                             eps, part, ops::GvaLayout::kTiled, yp);
        EXPECT_EQ(rel_l2(row_of(got, j), ops::download(g, part[0])), 0.0)
            << "checkpoint " << j << " vs a step of tokens 0.." << j << ": not bit-equal" << what;
      }
    }
  }
}

TEST_P(GdnCheckpoints, ConvStep) {
  const std::tuple<int64_t, int64_t, int64_t, int64_t> shapes[] = {{16, 128, 48 * 128, 4}, {2, 16, 96, 4}};  // Hk, dk, Cv, K
  for (auto [Hk, dk, Cv, K] : shapes) {
    for (int64_t T : {2, 4, 8, 11}) {
      const std::string what = fmt::format(" Hk={} dk={} Cv={} T={}", Hk, dk, Cv, T);
      const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
      const int64_t Cs[3] = {Hk * dk, Hk * dk, Cv};
      std::vector<Tensor> w(3), st(3), x(3);
      ops::ConvGroup cpu_g[3], gpu_g[3];
      for (int i = 0; i < 3; ++i) {
        w[i] = rand_f32({Cs[i], K}, DType::F32);
        st[i] = rand_f32({K - 1, Cs[i]}, DType::F32, -2, 2);
        x[i] = rand_f32({T, Cs[i]}, act(), -3, 3);
        cpu_g[i] = {x[i], w[i], test_copy(st[i]), Tensor::empty(DType::F32, {T, Cs[i]}), nan_host({T, K - 1, Cs[i]})};
        gpu_g[i] = {up(x[i]), ops::upload(g, w[i]), ops::upload(g, st[i]), gpu_empty({T, Cs[i]}),
                    ops::upload(g, nan_host({T, K - 1, Cs[i]}))};
      }
      ops::gdn_conv_step(cpu, cpu_g[0], cpu_g[1], cpu_g[2], dk, 1e-6f, q_scale);
      ops::gdn_conv_step(g, gpu_g[0], gpu_g[1], gpu_g[2], dk, 1e-6f, q_scale);
      for (int i = 0; i < 3; ++i) {
        const Tensor got = ops::download(g, gpu_g[i].after);
        EXPECT_TRUE(all_nan(row_of(got, T - 1))) << "a window after the last token, group " << i << what;
        EXPECT_EQ(rel_l2(ops::download(g, gpu_g[i].state), cpu_g[i].state), 0.0) << "state, group " << i << what;
        for (int64_t j = 0; j + 1 < T; ++j)
          EXPECT_EQ(rel_l2(row_of(got, j), row_of(cpu_g[i].after, j)), 0.0)
              << "window after token " << j << " vs cpu, group " << i << what;
      }
      for (int64_t j : {int64_t{0}, T - 2}) {  // a step of the first j + 1 tokens alone
        ops::ConvGroup part[3];
        for (int i = 0; i < 3; ++i)
          part[i] = {up(x[i]).slice_rows(0, j + 1), ops::upload(g, w[i]), ops::upload(g, st[i]), gpu_empty({j + 1, Cs[i]})};
        ops::gdn_conv_step(g, part[0], part[1], part[2], dk, 1e-6f, q_scale);
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(rel_l2(row_of(ops::download(g, gpu_g[i].after), j), ops::download(g, part[i].state)), 0.0)
              << "window after token " << j << " vs a step of tokens 0.." << j << ", group " << i << what;
      }
    }
  }
}

VI_CUDA_INSTANTIATE(GdnCheckpoints);

}  // namespace
}  // namespace vi::cudatest
