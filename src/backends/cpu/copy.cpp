// CPU tensor copy (any dtype: a byte copy of contiguous storage).
#include <cstring>

#include "ops/copy.h"

namespace vi::cpu {
namespace {

void copy_bytes(ops::Context&, const Tensor& src, Tensor& dst) { std::memmove(dst.data(), src.data(), src.nbytes()); }

void copy_batch_bytes(ops::Context&, const Tensor* srcs, const Tensor* dsts, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (srcs[i].data() != dsts[i].data()) std::memmove(dsts[i].data(), srcs[i].data(), srcs[i].nbytes());
}

void split_cols_bytes(ops::Context&, const Tensor& src, Tensor* const* dsts, size_t n_parts) {
  const size_t es = dtype_info(src.dtype()).block_bytes, row = src.row_bytes();
  for (int64_t r = 0; r < src.dim(0); ++r) {
    const uint8_t* s = static_cast<const uint8_t*>(src.data()) + r * row;
    for (size_t i = 0; i < n_parts; ++i) {
      Tensor* d = dsts[i];
      const size_t n = static_cast<size_t>(d->dim(1)) * es;
      std::memcpy(static_cast<uint8_t*>(d->data()) + r * n, s, n);
      s += n;
    }
  }
}

const bool registered = [] {
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_table().add(Device::CPU, static_cast<DType>(t), copy_bytes);
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_batch_table().add(Device::CPU, static_cast<DType>(t), copy_batch_bytes);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I8})
    ops::split_cols_table().add(Device::CPU, t, split_cols_bytes);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
