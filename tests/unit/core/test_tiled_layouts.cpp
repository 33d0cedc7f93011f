// core: the tiled device layouts' dtypes (Q4_KT, Q8_0T, Q4_KI, Q4_KTS) and what Tensor allows on
// them. Their rows are stored in tiles of kTiledRows, so only row slices on tile boundaries are
// views of a matrix of the same dtype (Q4_KTS: none but the whole); every other slice must be
// refused, not mis-addressed.
#include <gtest/gtest.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

namespace vi {
namespace {

TEST(TiledLayouts, DtypeFacts) {
  for (DType t : {DType::Q4_KT, DType::Q8_0T, DType::Q4_KI}) {
    const DTypeInfo& info = dtype_info(t);
    EXPECT_EQ(info.row_tile, kTiledRows) << info.name;
    EXPECT_TRUE(info.quantized) << info.name;
    EXPECT_EQ(dtype_from_name(info.name), t);
  }
  EXPECT_EQ(dtype_file_form(DType::Q4_KT), DType::Q4_K);
  EXPECT_EQ(dtype_file_form(DType::Q8_0T), DType::Q8_0);
  EXPECT_EQ(dtype_file_form(DType::Q4_KI), DType::Q4_K);
  EXPECT_EQ(static_cast<int>(kTiledRows * dtype_row_bytes(DType::Q4_KI, 256)), kQ4ktUnitBytes);
  // The same bytes per row as the row layouts they are made from (sizes and slices agree).
  EXPECT_EQ(dtype_row_bytes(DType::Q4_KT, 5120), dtype_row_bytes(DType::Q4_KR, 5120));
  EXPECT_EQ(dtype_row_bytes(DType::Q8_0T, 5120), dtype_row_bytes(DType::Q8_0R, 5120));
  EXPECT_EQ(static_cast<int>(kTiledRows * dtype_row_bytes(DType::Q4_KT, 256)), kQ4ktUnitBytes);
  EXPECT_EQ(static_cast<int>(kTiledRows * dtype_row_bytes(DType::Q8_0T, 128)), kQ8tUnitBytes);
  // Q4_KTS: Q4_KT's bytes, its rows in no order a slice could follow.
  EXPECT_EQ(dtype_info(DType::Q4_KTS).row_tile, 0);
  EXPECT_EQ(dtype_file_form(DType::Q4_KTS), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("q4_kts"), DType::Q4_KTS);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_KTS, 5120), dtype_row_bytes(DType::Q4_KT, 5120));
  // Every row layout stores rows one by one.
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_K, DType::Q8_0R, DType::Q4_KR})
    EXPECT_EQ(dtype_info(t).row_tile, 1) << dtype_name(t);
}

TEST(TiledLayouts, RowSlicesOnlyOnTileBoundaries) {
  for (DType t : {DType::Q4_KT, DType::Q8_0T, DType::Q4_KI}) {
    Tensor w = Tensor::empty(t, {64, 1024});
    Tensor v = w.slice_rows(16, 48);
    EXPECT_EQ(v.dim(0), 32);
    EXPECT_EQ(v.dtype(), t);
    EXPECT_EQ(static_cast<const uint8_t*>(v.data()) - static_cast<const uint8_t*>(w.data()),
              static_cast<std::ptrdiff_t>(16 * w.row_bytes()));
    EXPECT_NO_THROW(w.slice_rows(0, 64));
    EXPECT_NO_THROW(w.slice_rows(32, 32));
    EXPECT_THROW(w.slice_rows(8, 24), Error) << dtype_name(t);
    EXPECT_THROW(w.slice_rows(0, 40), Error) << dtype_name(t);
    EXPECT_THROW(w.slice_rows(1, 17), Error) << dtype_name(t);
  }
  // The paired gate|up layout: the whole matrix only.
  Tensor p = Tensor::empty(DType::Q4_KTS, {64, 1024});
  EXPECT_NO_THROW(p.slice_rows(0, 64));
  EXPECT_THROW(p.slice_rows(0, 32), Error);
  EXPECT_THROW(p.slice_rows(16, 48), Error);
  EXPECT_THROW(p.slice_rows(32, 64), Error);
  // Row layouts slice anywhere, as before.
  Tensor r = Tensor::empty(DType::Q4_KR, {64, 1024});
  EXPECT_NO_THROW(r.slice_rows(8, 24));
}

}  // namespace
}  // namespace vi
