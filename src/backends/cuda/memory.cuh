// CUDA device memory for ops::empty / upload / download / synchronize (ops/memory.h).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/registry.h"

namespace vi::cuda {

// Uninitialised device tensor; throws vi::Error naming the tensor, its size and the free
// memory when the device cannot hold it (so a model that does not fit fails at load).
Tensor device_empty(ops::Context& ctx, DType dtype, const std::vector<int64_t>& shape);

}  // namespace vi::cuda
