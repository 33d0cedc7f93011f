// Host memory for the CPU backend: plain aligned allocations.
#include "ops/memory.h"

namespace vi::cpu {
namespace {

Tensor cpu_empty(ops::Context&, DType dtype, const std::vector<int64_t>& shape) { return Tensor::empty(dtype, shape); }

const bool registered = [] {
  ops::memory_fns(Device::CPU).empty = cpu_empty;
  return true;
}();

}  // namespace
}  // namespace vi::cpu
