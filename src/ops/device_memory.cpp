#include "ops/device_memory.h"

#include <unistd.h>

#include <array>

namespace vi::ops {

namespace {
// The host's memory from sysconf: used for the CPU backend and as the answer when a
// backend registers nothing.
DeviceMemory host_memory(Context&) {
  const long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES), all = sysconf(_SC_PHYS_PAGES);
  DeviceMemory m;
  m.free = avail > 0 && page > 0 ? static_cast<size_t>(avail) * static_cast<size_t>(page) : 0;
  m.total = all > 0 && page > 0 ? static_cast<size_t>(all) * static_cast<size_t>(page) : 0;
  m.name = "host memory";
  return m;
}
}  // namespace

DeviceMemoryFn& device_memory_fn(Device d) {
  static std::array<DeviceMemoryFn, kNumDevices> fns = [] {
    std::array<DeviceMemoryFn, kNumDevices> a{};
    a[static_cast<size_t>(Device::CPU)] = host_memory;
    return a;
  }();
  return fns[static_cast<size_t>(d)];
}

DeviceMemory device_memory(Context& ctx) {
  DeviceMemoryFn f = device_memory_fn(ctx.device);
  VI_CHECK(f != nullptr, "no {} backend is built into this binary (needed for its memory size)",
           device_name(ctx.device));
  return f(ctx);
}

}  // namespace vi::ops
