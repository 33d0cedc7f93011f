// core/tensor: the row view of shapes, empty ones included (a zero-length tensor is legal: an
// empty prompt chunk's rows, a rank's empty share of a split).
#include <gtest/gtest.h>

#include "core/tensor.h"

namespace vi {
namespace {

TEST(Tensor, RowsAreTheOuterDimensions) {
  const Tensor a = Tensor::empty(DType::F32, {2, 3, 4});
  EXPECT_EQ(a.rows(), 6);
  EXPECT_EQ(a.cols(), 4);
  EXPECT_EQ(a.nbytes(), 96u);
  const Tensor v = Tensor::empty(DType::F16, {7});
  EXPECT_EQ(v.rows(), 1);
  EXPECT_EQ(v.nbytes(), 14u);
}

TEST(Tensor, EmptyShapesHaveNoBytes) {
  const Tensor e = Tensor::empty(DType::F32, {0});  // was 0 / 0 (SIGFPE)
  EXPECT_EQ(e.rows(), 1);
  EXPECT_EQ(e.cols(), 0);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0u);
  const Tensor no_cols = Tensor::empty(DType::F16, {3, 0});
  EXPECT_EQ(no_cols.rows(), 3);
  EXPECT_EQ(no_cols.nbytes(), 0u);
  const Tensor no_rows = Tensor::empty(DType::F16, {0, 5});
  EXPECT_EQ(no_rows.rows(), 0);
  EXPECT_EQ(no_rows.nbytes(), 0u);
}

}  // namespace
}  // namespace vi
