// Free and total memory of a context's device, so a model or KV cache that cannot fit is
// refused up front with the numbers, instead of failing inside a CUDA allocation.
#pragma once

#include <cstddef>
#include <string>

#include "ops/registry.h"

namespace vi::ops {

struct DeviceMemory {
  size_t free = 0;   // bytes available for new allocations now
  size_t total = 0;  // bytes of the device (host RAM for the CPU)
  std::string name;  // "NVIDIA H200", "host memory"
};

DeviceMemory device_memory(Context& ctx);

using DeviceMemoryFn = DeviceMemory (*)(Context&);
// One entry per device, filled by the backend from a static initialiser.
DeviceMemoryFn& device_memory_fn(Device d);

}  // namespace vi::ops
