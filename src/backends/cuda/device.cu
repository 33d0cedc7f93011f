// Device discovery, kernel-profile choice and the error/scratch helpers of cuda_util.cuh.
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "backends/cuda/device.cuh"

namespace vi::cuda {

void opt_in_dynamic_smem(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> set;  // (device, kernel) -> the limit set
  const std::pair<int, const void*> key(current_device().index, kernel);
  std::lock_guard<std::mutex> lock(mu);
  int& have = set[key];
  if (bytes <= have) return;
  VI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  have = bytes;
}
namespace {

// Does nothing: its attributes tell which architecture the driver loaded this binary's code for.
__global__ void arch_probe_kernel() {}

}  // namespace

void fail_cuda(cudaError_t err, const char* what, const char* file, int line) {
  fail_at(file, line, fmt::format("CUDA error in {}: {} ({})", what, cudaGetErrorString(err), cudaGetErrorName(err)));
}

Scratch::Scratch(const ops::Context& ctx, size_t bytes) : s_(stream_of(ctx)) {
  if (bytes == 0) return;
  cudaError_t err = cudaMallocAsync(&p_, bytes, s_);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of a failed allocation
    VI_FAIL("out of GPU memory: {} MiB of scratch space could not be allocated ({})", bytes >> 20,
            cudaGetErrorString(err));
  }
}

Scratch::~Scratch() {
  if (p_) cudaFreeAsync(p_, s_);
}

void upload_small(const ops::Context& ctx, const void* host, size_t bytes, Scratch& dst) {
  VI_CUDA_CHECK(cudaMemcpyAsync(dst.get(), host, bytes, cudaMemcpyHostToDevice, stream_of(ctx)));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

namespace {
DeviceInfo g_infos[kMaxDevices];
std::once_flag g_once[kMaxDevices];
}  // namespace

const DeviceInfo& current_device() {
  int dev = 0;
  VI_CUDA_CHECK(cudaGetDevice(&dev));
  VI_CHECK(dev >= 0 && dev < kMaxDevices, "CUDA device index {} out of range", dev);
  std::call_once(g_once[dev], [dev] {
    cudaDeviceProp p{};
    VI_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    DeviceInfo& d = g_infos[dev];
    d.index = dev;
    d.cc = 10 * p.major + p.minor;
    d.sm_count = d.sm_total = p.multiProcessorCount;
    d.total_mem = p.totalGlobalMem;
    d.smem_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    snprintf(d.name, sizeof d.name, "%s", p.name);
    cudaFuncAttributes fa{};
    const cudaError_t err = cudaFuncGetAttributes(&fa, arch_probe_kernel);
    if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction) {
      cudaGetLastError();
      VI_FAIL("this build has no code for {} (sm_{}): configure with -DCMAKE_CUDA_ARCHITECTURES={} "
              "(sm_70 needs CUDA 11.8: scripts/build_cuda118.sh)", p.name, d.cc, d.cc);
    }
    VI_CUDA_CHECK(err);
    d.code_cc = fa.ptxVersion;
  });
  return g_infos[dev];
}

void set_usable_sm_count(int n) {
  const DeviceInfo& d = current_device();
  VI_CHECK(n >= 0 && n <= d.sm_total, "set_usable_sm_count: {} SMs of {}", n, d.sm_total);
  g_infos[d.index].sm_count = n == 0 ? d.sm_total : n;
}

int loaded_code_cc() { return current_device().code_cc; }

std::string device_summary() {
  if (device_count() == 0) return "no CUDA device";
  const DeviceInfo& d = current_device();
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  // Without code for this exact arch the driver runs an older one's (SASS of the same major
  // version, or PTX it JIT-compiles).
  const std::string code = d.code_cc == d.cc ? "" : fmt::format(", code for sm_{}", d.code_cc);
  return fmt::format("{} (sm_{}{}, {} SMs, {:.1f} GiB, driver {}.{}, runtime {}.{})", d.name, d.cc, code, d.sm_count,
                     d.total_mem / double(1 << 30), drv / 1000, drv % 1000 / 10, rt / 1000, rt % 1000 / 10);
}

ops::KernelProfile resolve_profile(const ops::Context& ctx) {
  if (ctx.profile != ops::KernelProfile::kAuto) return ctx.profile;
  // sm_75 and newer run the native kernels (with the cuBLAS GEMM where the build has cuBLAS).
  return current_device().cc >= 75 ? ops::KernelProfile::kNative : ops::KernelProfile::kVolta;
}

const char* profile_name(ops::KernelProfile p) {
  switch (p) {
    case ops::KernelProfile::kAuto: return "auto";
    case ops::KernelProfile::kVolta: return "volta";
    case ops::KernelProfile::kNative: return "native";
  }
  return "?";
}

ops::KernelProfile parse_profile(const std::string& name) {
  if (name == "auto") return ops::KernelProfile::kAuto;
  if (name == "volta") return ops::KernelProfile::kVolta;
  if (name == "native") return ops::KernelProfile::kNative;
  VI_FAIL("unknown kernel profile '{}' (auto, volta or native)", name);
}

}  // namespace vi::cuda
