// CPU tensor copy (any dtype: a byte copy of contiguous storage).
#include <cstring>

#include "ops/copy.h"

namespace vi::cpu {
namespace {

void copy_bytes(ops::Context&, const Tensor& src, Tensor& dst) { std::memmove(dst.data(), src.data(), src.nbytes()); }

const bool registered = [] {
  for (size_t t = 0; t < static_cast<size_t>(DType::kCount); ++t)
    ops::copy_table().add(Device::CPU, static_cast<DType>(t), copy_bytes);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
