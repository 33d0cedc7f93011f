// CPU split_cols: the column blocks of a stacked projection's output land in their parts, in
// order, for every row; bad part lists are refused with the op's name and the shapes.
#include <gtest/gtest.h>

#include "ops/copy.h"
#include "unit/cpu/cpu_test_util.h"

namespace vi {
namespace {

TEST(CpuCopy, SplitColsPutsEachColumnBlockInItsPart) {
  ops::Context ctx;
  const int64_t R = 3;
  const std::vector<int64_t> widths = {5, 1, 2, 6};
  Tensor src = Tensor::empty(DType::F32, {R, 14});
  for (int64_t i = 0; i < src.numel(); ++i) src.ptr<float>()[i] = static_cast<float>(i);
  Tensor a = Tensor::empty(DType::F32, {R, 5}), b = Tensor::empty(DType::F32, {R, 1});
  Tensor c = Tensor::empty(DType::F32, {R, 2}), d = Tensor::empty(DType::F32, {R, 6});
  ops::split_cols(ctx, src, {&a, &b, &c, &d});
  const Tensor* parts[] = {&a, &b, &c, &d};
  int64_t col0 = 0;
  for (size_t p = 0; p < 4; ++p) {
    for (int64_t r = 0; r < R; ++r)
      for (int64_t j = 0; j < widths[p]; ++j)
        EXPECT_EQ(parts[p]->ptr<float>()[r * widths[p] + j], static_cast<float>(r * 14 + col0 + j))
            << "part " << p << " row " << r << " col " << j;
    col0 += widths[p];
  }
}

TEST(CpuCopy, CopyBatchCopiesEachPair) {
  ops::Context ctx;
  std::vector<Tensor> src, dst;
  for (int64_t n : {1, 7, 1000}) {
    src.push_back(Tensor::empty(DType::F32, {n}));
    for (int64_t i = 0; i < n; ++i) src.back().ptr<float>()[i] = static_cast<float>(n + i);
    dst.push_back(Tensor::empty(DType::F32, {n}));
  }
  ops::copy_batch(ctx, src, dst);
  for (size_t p = 0; p < src.size(); ++p)
    for (int64_t i = 0; i < src[p].numel(); ++i) EXPECT_EQ(dst[p].ptr<float>()[i], src[p].ptr<float>()[i]);
  std::string msg = test::error_of([&] { ops::copy_batch(ctx, src, {dst[0], dst[1]}); });
  EXPECT_NE(msg.find("3 sources, 2 destinations"), std::string::npos) << msg;
  msg = test::error_of([&] { ops::copy_batch(ctx, {src[0], src[1]}, {dst[0], dst[2]}); });
  EXPECT_NE(msg.find("pair 1"), std::string::npos) << msg;
}

TEST(CpuCopy, SplitColsErrors) {
  ops::Context ctx;
  Tensor src = Tensor::empty(DType::F16, {2, 10});
  Tensor a = Tensor::empty(DType::F16, {2, 4}), b = Tensor::empty(DType::F16, {2, 5});
  std::string msg = test::error_of([&] { ops::split_cols(ctx, src, {&a, &b}); });  // 9 of 10 columns
  EXPECT_NE(msg.find("split_cols"), std::string::npos) << msg;
  EXPECT_NE(msg.find("9 columns"), std::string::npos) << msg;
  Tensor f = Tensor::empty(DType::F32, {2, 6});
  msg = test::error_of([&] { ops::split_cols(ctx, src, {&a, &f}); });  // dtype differs
  EXPECT_NE(msg.find("f16"), std::string::npos) << msg;
  Tensor rows = Tensor::empty(DType::F16, {3, 6});
  msg = test::error_of([&] { ops::split_cols(ctx, src, {&a, &rows}); });  // rows differ
  EXPECT_NE(msg.find("[3, 6]"), std::string::npos) << msg;
  Tensor q = Tensor::empty(DType::Q8_0, {2, 32});
  Tensor q1 = Tensor::empty(DType::Q8_0, {2, 32});
  msg = test::error_of([&] { ops::split_cols(ctx, q, {&q1}); });
  EXPECT_NE(msg.find("quantized"), std::string::npos) << msg;
}

}  // namespace
}  // namespace vi
