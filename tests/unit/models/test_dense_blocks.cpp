// The SwiGLU MLP with gate|up stacked into one weight (one matmul, then swiglu_halves) gives
// what the unstacked ops give, and the stacked weights are held once (gate and up are row
// views of the stack); stacked_views checks that the parts fill the stack.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "models/dense_blocks.h"
#include "models/loader.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace vi {
namespace {

Tensor random_f32(std::mt19937& rng, std::vector<int64_t> shape, float scale) {
  Tensor t = Tensor::empty(DType::F32, shape);
  std::normal_distribution<float> nd(0.0f, scale);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = nd(rng);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(SwigluMlp, StackedAndSeparateWeightsGiveTheUnfusedOps) {
  std::mt19937 rng(std::random_device{}());
  ops::Context ctx;
  for (int64_t N : {int64_t{1}, kStackedMlpMaxRows, kStackedMlpMaxRows + 1}) {
    const int64_t d = 48, F = 40;
    Tensor n = random_f32(rng, {N, d}, 1.0f);
    SwigluWeights sep;
    sep.gate = random_f32(rng, {F, d}, 0.2f);
    sep.up = random_f32(rng, {F, d}, 0.2f);
    sep.down = random_f32(rng, {d, F}, 0.2f);

    // The ops the block stands for: o = down(silu(gate(n)) * up(n)).
    Tensor g = Tensor::empty(DType::F32, {N, F}), u = Tensor::empty(DType::F32, {N, F});
    Tensor want = Tensor::empty(DType::F32, {N, d});
    ops::matmul(ctx, n, sep.gate, g);
    ops::matmul(ctx, n, sep.up, u);
    ops::swiglu(ctx, g, u, g);
    ops::matmul(ctx, g, sep.down, want);

    Tensor gu = Tensor::empty(DType::F32, {N, 2 * F});
    Tensor h = swiglu_scratch(ctx, N, F);
    EXPECT_EQ(h.data() != nullptr, N <= kStackedMlpMaxRows);
    Tensor o = Tensor::empty(DType::F32, {N, d});
    swiglu_mlp(ctx, n, sep, gu, h, o);  // no stack: two matmuls into gu's halves
    EXPECT_TRUE(same_bits(o, want)) << "separate gate and up, N=" << N;

    SwigluWeights st = sep;
    st.gate_up = concat_rows({&st.gate, &st.up});
    stacked_views(st.gate_up, {&st.gate, &st.up});
    EXPECT_EQ(st.gate.data(), st.gate_up.data());
    EXPECT_EQ(st.up.data(), static_cast<void*>(st.gate_up.row(F)));
    EXPECT_TRUE(same_bits(st.up, sep.up));
    std::memset(o.data(), 0, o.nbytes());
    if (N <= kStackedMlpMaxRows) {  // the stacked path checks its scratch
      Tensor wrong = Tensor::empty(DType::F32, {N, F + 1});
      EXPECT_THROW(swiglu_mlp(ctx, n, st, gu, wrong, o), Error);
    }
    swiglu_mlp(ctx, n, st, gu, h, o);  // up to kStackedMlpMaxRows: one matmul, swiglu of its halves
    // Each product element is one dot product of a row of n with a weight row, whichever
    // matrix holds that row: expected bit for bit; 1e-6 relative allows another summation
    // split in the CPU matmul.
    for (int64_t i = 0; i < o.numel(); ++i)
      ASSERT_NEAR(o.ptr<float>()[i], want.ptr<float>()[i], 1e-6 * (1 + std::fabs(want.ptr<float>()[i])))
          << "stacked gate|up, N=" << N << ", element " << i;
  }
}

TEST(StackedViews, RowsMustAddUp) {
  Tensor stack = Tensor::empty(DType::F32, {10, 4});
  stack.set_name("stack");
  Tensor a = Tensor::empty(DType::F32, {3, 4}), b = Tensor::empty(DType::F32, {6, 4});
  a.set_name("a");
  try {
    stacked_views(stack, {&a, &b});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stack"), std::string::npos) << e.what();
  }
  Tensor c = Tensor::empty(DType::F32, {7, 4});
  c.set_name("c");
  stacked_views(stack, {&a, &c});
  EXPECT_EQ(a.name(), "a");
  EXPECT_EQ(c.data(), static_cast<void*>(stack.row(3)));
  EXPECT_EQ(c.shape(), (std::vector<int64_t>{7, 4}));
}

}  // namespace
}  // namespace vi
