// CPU embedding for every table dtype vs the dequantized rows, plus bad ids and dtypes.
#include <gtest/gtest.h>

#include "core/quant.h"
#include "ops/embedding.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

class EmbeddingDtype : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingDtype, RowsEqualDequantizedTable) {
  const DType t = GetParam();
  const unsigned seed = test::test_seed();
  std::mt19937 rng(seed);
  const int64_t vocab = 97, d = dtype_info(t).block_elems == kQKK ? 512 : 96;
  Tensor src = test::random_f32(rng, {vocab, d});
  Tensor table = Tensor::empty(t, {vocab, d});
  for (int64_t r = 0; r < vocab; ++r) quantize_row(t, src.row<float>(r), table.row(r), d);
  for (int64_t T : {1, 3, 17}) {
    Tensor ids = Tensor::empty(DType::I32, {T});
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
    for (int64_t i = 0; i < T; ++i) ids.ptr<int32_t>()[i] = pick(rng);
    ids.ptr<int32_t>()[0] = static_cast<int32_t>(vocab - 1);  // the last row is reachable
    Tensor out = Tensor::empty(DType::F32, {T, d});
    ThreadPool p2(2);
    ops::Context ctx{Device::CPU, &p2};
    ops::embedding(ctx, table, ids, out);
    std::vector<double> want;
    std::vector<float> row(d);
    for (int64_t i = 0; i < T; ++i) {
      // Reference: element by element through dtype-specific scalar paths where possible.
      dequantize_row(t, table.row(ids.ptr<int32_t>()[i]), row.data(), d);
      for (int64_t j = 0; j < d; ++j) want.push_back(row[j]);
    }
    test::expect_close(out, want, 0.0, 0.0, std::string("embedding ") + dtype_name(t));
    // Independent of the quantizer: the row must stay close to the source floats.
    // The coarsest format (Q4_0) is off by at most one step of amax/8.
    float amax = 0.0f;
    for (int64_t j = 0; j < d; ++j) amax = std::max(amax, std::fabs(src.row<float>(vocab - 1)[j]));
    for (int64_t j = 0; j < d; ++j) {
      const float a = out.ptr<float>()[j], b = src.row<float>(vocab - 1)[j];
      ASSERT_NEAR(a, b, amax / 8 * 1.01f) << "row " << vocab - 1 << " col " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, EmbeddingDtype,
                         ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                                           DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuEmbedding, Errors) {
  ops::Context ctx;
  Tensor table = Tensor::empty(DType::Q8_0, {10, 64});
  table.set_name("token_embd.weight");
  Tensor ids = Tensor::empty(DType::I32, {2});
  ids.ptr<int32_t>()[0] = 3;
  ids.ptr<int32_t>()[1] = 10;
  Tensor out = Tensor::empty(DType::F32, {2, 64});
  std::string msg = test::error_of([&] { ops::embedding(ctx, table, ids, out); });
  EXPECT_NE(msg.find("10"), std::string::npos) << msg;
  EXPECT_NE(msg.find("token_embd.weight"), std::string::npos) << msg;
  ids.ptr<int32_t>()[1] = -1;
  msg = test::error_of([&] { ops::embedding(ctx, table, ids, out); });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
  ids.ptr<int32_t>()[1] = 0;
  Tensor bad_out = Tensor::empty(DType::F32, {2, 32});
  msg = test::error_of([&] { ops::embedding(ctx, table, ids, bad_out); });
  EXPECT_NE(msg.find("[2, 32]"), std::string::npos) << msg;
  Tensor i8 = Tensor::empty(DType::I8, {10, 64});
  msg = test::error_of([&] { ops::embedding(ctx, i8, ids, out); });
  EXPECT_NE(msg.find("i8"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
