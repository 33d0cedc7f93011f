// The checkpoints of the fused GDN step ops on the CPU backend (speculative decoding's verify
// pass keeps the recurrent state after each of its tokens but the last, so that it can go
// back): gdn_conv_step's windows after each token and gdn_decode_step's states after each
// token must be, bit for bit, what the state is after a step of the first t + 1 tokens alone;
// the outputs and the live state must not change with checkpoints on; nothing past row T - 2
// is written; a sequence without checkpoints beside one with them; and the shape errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/gdn_conv_step.h"
#include "ops/gdn_decode_step.h"
#include "test_gdn_util.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::same_bits;

Tensor nans(const std::vector<int64_t>& shape) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::fill_n(t.ptr<float>(), t.numel(), std::numeric_limits<float>::quiet_NaN());
  return t;
}
bool all_nan(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isnan(t.ptr<float>()[i])) return false;
  return true;
}
// Row r of an [n, ...] tensor as a tensor of the remaining shape.
Tensor row_of(const Tensor& t, int64_t r) {
  std::vector<int64_t> shape = t.shape();
  shape.erase(shape.begin());
  return t.slice_rows(r, r + 1).reshape(shape);
}

TEST(GdnCheckpoints, ConvWindowsAreTheStateAfterEachToken) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  const int64_t Hk = 2, dk = 16, Cv = 40;
  for (DType t : {DType::F32, DType::F16}) {
    for (int64_t K : {2, 4}) {
      for (int64_t T : {2, 3, 5, 8}) {
        const std::string what = std::string(dtype_name(t)) + " K=" + std::to_string(K) + " T=" + std::to_string(T);
        const int64_t Cs[3] = {Hk * dk, Hk * dk, Cv};
        ops::ConvGroup with[3], plain[3];
        std::vector<Tensor> w(3), st(3), x(3);
        for (int i = 0; i < 3; ++i) {
          w[i] = make(DType::F32, {Cs[i], K}, rng.normals(Cs[i] * K, 0.5));
          st[i] = make(DType::F32, {K - 1, Cs[i]}, rng.normals((K - 1) * Cs[i]));
          x[i] = make(t, {T, Cs[i]}, rng.normals(T * Cs[i]));
          // One row more than asked for: it must stay untouched (the state after the last
          // token is the live one, not a checkpoint).
          with[i] = {x[i], w[i], test::copy_of(st[i]), Tensor::empty(t, {T, Cs[i]}), nans({T, K - 1, Cs[i]})};
          plain[i] = {x[i], w[i], test::copy_of(st[i]), Tensor::empty(t, {T, Cs[i]})};
        }
        ops::gdn_conv_step(ctx, with[0], with[1], with[2], dk, 1e-6f, 0.25f);
        ops::gdn_conv_step(ctx, plain[0], plain[1], plain[2], dk, 1e-6f, 0.25f);
        for (int i = 0; i < 3; ++i) {
          EXPECT_TRUE(same_bits(with[i].y, plain[i].y)) << "y changed with checkpoints, group " << i << " " << what;
          EXPECT_TRUE(same_bits(with[i].state, plain[i].state)) << "state changed, group " << i << " " << what;
          EXPECT_TRUE(all_nan(row_of(with[i].after, T - 1))) << "a window after the last token, group " << i << " "
                                                             << what;
        }
        for (int64_t j = 0; j + 1 < T; ++j) {  // a step of tokens 0..j alone
          ops::ConvGroup part[3];
          for (int i = 0; i < 3; ++i)
            part[i] = {x[i].slice_rows(0, j + 1), w[i], test::copy_of(st[i]), Tensor::empty(t, {j + 1, Cs[i]})};
          ops::gdn_conv_step(ctx, part[0], part[1], part[2], dk, 1e-6f, 0.25f);
          for (int i = 0; i < 3; ++i)
            EXPECT_TRUE(same_bits(row_of(with[i].after, j), part[i].state))
                << "window after token " << j << ", group " << i << " " << what;
        }
      }
    }
  }
}

TEST(GdnCheckpoints, DecodeStepStatesAreTheStateAfterEachToken) {
  const uint64_t seed = gdn_test::fresh_seed();
  std::printf("[ seed     ] %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  ops::Context ctx;
  const float eps = 1e-6f;
  const int64_t N = 2, Hk = 2, Hv = 4, dk = 16, dv = 12;  // sequence 0 keeps checkpoints, 1 does not
  for (DType t : {DType::F32, DType::F16}) {
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      for (int64_t T : {2, 4, 7}) {
        const std::string what = std::string(dtype_name(t)) +
                                 (layout == ops::GvaLayout::kTiled ? " tiled" : " grouped") + " T=" + std::to_string(T);
        const int64_t R = N * T;
        Tensor A = make(DType::F32, {Hv}, rng.uniforms(Hv, -2.0, -0.1)), dt = make(DType::F32, {Hv}, rng.normals(Hv));
        Tensor w = make(DType::F32, {dv}, rng.normals(dv, 0.5));
        Tensor q = make(t, {R, Hk, dk}, rng.normals(R * Hk * dk, 0.2)), k = make(t, {R, Hk, dk}, rng.normals(R * Hk * dk, 0.2));
        Tensor v = make(t, {R, Hv, dv}, rng.normals(R * Hv * dv)), z = make(t, {R, Hv, dv}, rng.normals(R * Hv * dv));
        Tensor a = make(t, {R, Hv}, rng.normals(R * Hv, 2.0)), b = make(t, {R, Hv}, rng.normals(R * Hv, 2.0));
        std::vector<Tensor> s0;
        for (int64_t n = 0; n < N; ++n) s0.push_back(make(DType::F32, {Hv, dk, dv}, rng.normals(Hv * dk * dv, 0.3)));
        std::vector<Tensor> with{test::copy_of(s0[0]), test::copy_of(s0[1])};
        std::vector<Tensor> plain{test::copy_of(s0[0]), test::copy_of(s0[1])};
        const std::vector<Tensor> ckpts{nans({T, Hv, dk, dv}), Tensor()};
        Tensor y_with = Tensor::empty(t, {R, Hv, dv}), y_plain = Tensor::empty(t, {R, Hv, dv});
        ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, with, layout, y_with, ckpts);
        ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, eps, plain, layout, y_plain);
        EXPECT_TRUE(same_bits(y_with, y_plain)) << "y changed with checkpoints " << what;
        for (int64_t n = 0; n < N; ++n)
          EXPECT_TRUE(same_bits(with[n], plain[n])) << "state " << n << " changed with checkpoints " << what;
        EXPECT_TRUE(all_nan(row_of(ckpts[0], T - 1))) << "a checkpoint after the last token " << what;
        for (int64_t j = 0; j + 1 < T; ++j) {  // sequence 0's tokens 0..j alone
          std::vector<Tensor> part{test::copy_of(s0[0])};
          Tensor yp = Tensor::empty(t, {j + 1, Hv, dv});
          ops::gdn_decode_step(ctx, q.slice_rows(0, j + 1), k.slice_rows(0, j + 1), v.slice_rows(0, j + 1),
                               a.slice_rows(0, j + 1), b.slice_rows(0, j + 1), A, dt, z.slice_rows(0, j + 1), w, eps,
                               part, layout, yp);
          EXPECT_TRUE(same_bits(row_of(ckpts[0], j), part[0])) << "checkpoint after token " << j << " " << what;
        }
      }
    }
  }
}

TEST(GdnCheckpoints, ShapeErrors) {
  ops::Context ctx;
  const int64_t T = 3, Hk = 1, Hv = 2, dk = 4, dv = 4;
  Tensor q = make(DType::F32, {T, Hk, dk}, std::vector<float>(T * Hk * dk, 0.1f)), k = test::copy_of(q);
  Tensor v = make(DType::F32, {T, Hv, dv}, std::vector<float>(T * Hv * dv, 0.1f)), z = test::copy_of(v);
  Tensor y = test::copy_of(v);
  Tensor a = make(DType::F32, {T, Hv}, std::vector<float>(T * Hv, 0.1f)), b = test::copy_of(a);
  Tensor A = make(DType::F32, {Hv}, {-1.0f, -1.0f}), dt = test::copy_of(A);
  Tensor w = make(DType::F32, {dv}, std::vector<float>(dv, 1.0f));
  std::vector<Tensor> s{make(DType::F32, {Hv, dk, dv}, std::vector<float>(Hv * dk * dv, 0.0f))};
  EXPECT_THROW(ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, s, ops::GvaLayout::kGrouped, y,
                                    {nans({T - 2, Hv, dk, dv})}),
               Error);  // one row short
  EXPECT_THROW(ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, s, ops::GvaLayout::kGrouped, y,
                                    {nans({T - 1, Hv, dv, dk + 1})}),
               Error);  // not the state's shape
  EXPECT_THROW(ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, s, ops::GvaLayout::kGrouped, y,
                                    {nans({T - 1, Hv, dk, dv}), Tensor()}),
               Error);  // one per sequence
  ops::gdn_decode_step(ctx, q, k, v, a, b, A, dt, z, w, 1e-6f, s, ops::GvaLayout::kGrouped, y,
                       {nans({T - 1, Hv, dk, dv})});  // valid

  const int64_t K = 4, C = 4;
  auto group = [&](Tensor after) {
    return ops::ConvGroup{make(DType::F32, {T, C}, std::vector<float>(T * C, 0.5f)),
                          make(DType::F32, {C, K}, std::vector<float>(C * K, 0.5f)),
                          make(DType::F32, {K - 1, C}, std::vector<float>((K - 1) * C, 0.0f)),
                          Tensor::empty(DType::F32, {T, C}), after};
  };
  EXPECT_THROW(ops::gdn_conv_step(ctx, group(nans({T - 2, K - 1, C})), group(Tensor()), group(Tensor()), C, 1e-6f, 1.0f),
               Error);  // one row short
  EXPECT_THROW(ops::gdn_conv_step(ctx, group(nans({T - 1, K, C})), group(Tensor()), group(Tensor()), C, 1e-6f, 1.0f),
               Error);  // not the window's shape
  ops::gdn_conv_step(ctx, group(nans({T - 1, K - 1, C})), group(Tensor()), group(Tensor()), C, 1e-6f, 1.0f);  // valid
}

}  // namespace
}  // namespace vi
