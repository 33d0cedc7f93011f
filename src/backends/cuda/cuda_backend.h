// The CUDA backend's host-side interface for tools and tests (plain C++, no CUDA headers):
// is a GPU there, what is it, which kernel profile does a context resolve to.
// Kernels register themselves into the op tables; nothing here is needed to call them.
#pragma once

#include <string>

#include "ops/registry.h"

namespace vi::cuda {

// Number of usable CUDA devices (0 when there is no driver or no GPU; never throws).
int device_count();
// "NVIDIA H200 (sm_90, 139.8 GiB, driver 13.0, runtime 13.0)" for the current device.
std::string device_summary();
// The architecture the loaded kernels were compiled for on the current device, as 10 * major +
// minor: 90 for sm_90 code on an H200, 70 for the CUDA 11.8 build's compute_70 PTX JIT-compiled
// there. Kernels with sm_80 instructions (the tiled GEMVs, cp.async) run only from 80 on.
int loaded_code_cc();
// kVolta or kNative: ctx.profile when forced, else chosen from the current device.
ops::KernelProfile resolve_profile(const ops::Context& ctx);
const char* profile_name(ops::KernelProfile p);
// Parses "auto", "volta" or "native"; throws vi::Error on anything else.
ops::KernelProfile parse_profile(const std::string& name);
// Benchmarks that run the graphs on some of the SMs (an emulation of a card with more memory
// bandwidth per SM, backends/cuda/sm_partition.h) make the kernels size their grids for them: the
// current device's SM count as the kernels see it becomes n (1 <= n <= its SMs; 0: all of them
// again).
void set_usable_sm_count(int n);

}  // namespace vi::cuda
