// When pdl_launch (pdl.cuh) adds the programmatic-serialization attribute.
#include "backends/cuda/pdl.cuh"

#include <atomic>
#include <mutex>

#include "backends/cuda/device.cuh"
#include "backends/cuda/env_switch.h"
#include "core/log.h"

namespace vi::cuda {
namespace {

std::atomic<bool> g_allowed{true};

// VI_PDL=0 turns it off, so a run can be compared with and without it.
bool env_allows() {
  static const bool on = env_switch_on("VI_PDL");
  return on;
}

// Programmatic edges in captured graphs need CUDA 12.3 in the runtime (compile time: the
// runtime is linked statically) and in the driver.
bool toolkit_supports() {
#if CUDART_VERSION >= 12030
  static const bool ok = [] {
    int drv = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return drv >= 12030;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace

bool pdl_enabled() {
  if (!g_allowed.load(std::memory_order_relaxed)) return false;
  const DeviceInfo& d = current_device();
  // code_cc: the kernels' pdl_wait() is compiled in only for sm_90 code.
  const bool device_ok = d.cc >= 90 && d.code_cc >= 90 && toolkit_supports();
  static std::once_flag logged;
  if (d.cc >= 90)
    std::call_once(logged, [&] {
      VI_LOG_INFO("CUDA programmatic dependent launch: {}", !env_allows() ? "off (VI_PDL=0)"
                                                             : device_ok  ? "on (VI_PDL=0 turns it off)"
                                                                          : "off (needs sm_90 code and CUDA 12.3)");
    });
  return device_ok && env_allows();
}

void set_pdl_allowed(bool allowed) { g_allowed.store(allowed, std::memory_order_relaxed); }

}  // namespace vi::cuda
