// SM partitions through green contexts (backends/cuda/sm_partition.h). The driver functions are
// looked up at run time (cudaGetDriverEntryPointByVersion), so the binary does not link libcuda
// and still starts where there is no driver.
#include "backends/cuda/sm_partition.h"

#include <cuda.h>

#include <mutex>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"

// Green contexts came with CUDA 12.4; the lookup of driver functions by version with 12.5.
#define VI_GREEN_CONTEXTS (CUDART_VERSION >= 12050 && CUDA_VERSION >= 12050)

namespace vi::cuda {
namespace {

struct Partition {
  int asked = 0;           // what restrict_graphs_to_sms was given
  int sms = 0;             // what the driver made of it (0: no partition)
  void* green = nullptr;   // its green context (a CUgreenCtx), alive as long as the process
};
Partition g_partitions[kMaxDevices];
std::mutex g_mutex;

#if VI_GREEN_CONTEXTS
// The driver's `name` as of CUDA 12.5 (cuGreenCtxStreamCreate came then, after the rest; none of
// these changed since: cudaTypedefs.h); null if the driver lacks it.
template <class F>
F driver_function(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12050, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(p);
}

struct Driver {
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetDevResource) get_resource = nullptr;
  decltype(&::cuDevSmResourceSplitByCount) split = nullptr;
  decltype(&::cuDevResourceGenerateDesc) describe = nullptr;
  decltype(&::cuGreenCtxCreate) create = nullptr;
  decltype(&::cuGreenCtxStreamCreate) stream_create = nullptr;
  // The first function the driver lacks, or null.
  const char* missing() const {
    return !device_get ? "cuDeviceGet" : !get_resource ? "cuDeviceGetDevResource" : !split ? "cuDevSmResourceSplitByCount"
           : !describe ? "cuDevResourceGenerateDesc" : !create ? "cuGreenCtxCreate"
           : !stream_create ? "cuGreenCtxStreamCreate" : nullptr;
  }
};

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    x.device_get = driver_function<decltype(x.device_get)>("cuDeviceGet");
    x.get_resource = driver_function<decltype(x.get_resource)>("cuDeviceGetDevResource");
    x.split = driver_function<decltype(x.split)>("cuDevSmResourceSplitByCount");
    x.describe = driver_function<decltype(x.describe)>("cuDevResourceGenerateDesc");
    x.create = driver_function<decltype(x.create)>("cuGreenCtxCreate");
    x.stream_create = driver_function<decltype(x.stream_create)>("cuGreenCtxStreamCreate");
    return x;
  }();
  return d;
}

#define VI_CU_CHECK(call)                                                                                 \
  do {                                                                                                    \
    const CUresult vi_r_ = (call);                                                                        \
    if (vi_r_ != CUDA_SUCCESS)                                                                            \
      ::vi::fail_at(__FILE__, __LINE__, fmt::format("{} failed: CUresult {}", #call, static_cast<int>(vi_r_))); \
  } while (0)

// A green context of at least `sms` SMs of `dev`; returns the SM count.
int make_partition(int dev, int sms, void** green_out) {
  const Driver& d = driver();
  VI_CUDA_CHECK(cudaFree(nullptr));  // the primary context first (cuGreenCtxCreate retains it)
  CUdevice cu_dev = 0;
  VI_CU_CHECK(d.device_get(&cu_dev, dev));
  CUdevResource all{};
  VI_CU_CHECK(d.get_resource(cu_dev, &all, CU_DEV_RESOURCE_TYPE_SM));
  CUdevResource part{}, rest{};
  unsigned groups = 1;
  // Exact counts where the driver may ignore how SMs group into clusters (our kernels launch no
  // clusters); the card's granularity otherwise.
  CUresult r = d.split(&part, &groups, &all, &rest, CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING,
                       static_cast<unsigned>(sms));
  if (r != CUDA_SUCCESS || groups != 1) {
    groups = 1;
    r = d.split(&part, &groups, &all, &rest, 0, static_cast<unsigned>(sms));
  }
  VI_CHECK(r == CUDA_SUCCESS && groups == 1, "SM partition: the driver cannot split {} SMs off device {} ({} SMs): "
           "CUresult {}", sms, dev, all.sm.smCount, static_cast<int>(r));
  CUdevResourceDesc desc{};
  VI_CU_CHECK(d.describe(&desc, &part, 1));
  CUgreenCtx green{};
  VI_CU_CHECK(d.create(&green, desc, cu_dev, CU_GREEN_CTX_DEFAULT_STREAM));
  // The green context lives as long as the process: graphs recorded on its streams keep it.
  *green_out = green;
  return static_cast<int>(part.sm.smCount);
}

// A new stream of the green context `green`.
cudaStream_t make_stream(void* green) {
  CUstream s{};
  VI_CU_CHECK(driver().stream_create(&s, static_cast<CUgreenCtx>(green), CU_STREAM_NON_BLOCKING, 0));
  return reinterpret_cast<cudaStream_t>(s);
}
#endif

}  // namespace

bool sm_partition_supported(std::string* why) {
  auto no = [&](std::string w) {
    if (why) *why = std::move(w);
    return false;
  };
  if (device_count() == 0) return no("no CUDA device");
#if VI_GREEN_CONTEXTS
  int drv = 0;
  cudaDriverGetVersion(&drv);
  if (drv < 12050) return no(fmt::format("the driver supports CUDA {}.{}; green contexts here need 12.5", drv / 1000,
                                         drv % 1000 / 10));
  if (const char* f = driver().missing()) return no(fmt::format("the driver has no {} (as of CUDA 12.5)", f));
  return true;
#else
  return no(fmt::format("built with CUDA {}.{}; green contexts need 12.5 or newer to build", CUDART_VERSION / 1000,
                        CUDART_VERSION % 1000 / 10));
#endif
}

namespace {

// restrict_graphs_to_sms for the current device.
int restrict_device(int sms) {
  const DeviceInfo& dev = current_device();
  VI_CHECK(sms >= 1 && sms <= dev.sm_total, "SM partition: {} SMs asked of device {}, which has {}", sms, dev.index,
           dev.sm_total);
  std::lock_guard<std::mutex> lock(g_mutex);
  Partition& part = g_partitions[dev.index];
  if (part.sms) {
    VI_CHECK(sms == part.asked, "device {} already runs its graphs on {} SMs (asked now: {})", dev.index, part.sms,
             sms);
    return part.sms;
  }
#if VI_GREEN_CONTEXTS
  part.sms = make_partition(dev.index, sms, &part.green);
  part.asked = sms;
  set_usable_sm_count(part.sms);
  return part.sms;
#else
  return 0;  // not reached: sm_partition_supported() is false
#endif
}

}  // namespace

int restrict_graphs_to_sms(int sms) {
  std::string why;
  VI_CHECK(sm_partition_supported(&why), "cannot run graphs on a subset of the SMs: {}", why);
  int used = 0;
  for (int d = 0; d < device_count(); ++d) {
    DeviceGuard on(d);
    const int u = restrict_device(sms);
    VI_CHECK(d == 0 || u == used, "SM partition of {} SMs: device {} got {}, device 0 {}", sms, d, u, used);
    used = u;
  }
  return used;
}

int partition_sms() {
  const int dev = current_device().index;
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_partitions[dev].sms;
}

void* partition_stream() {
  // One stream per thread and device: a capture claims its stream, so two threads recording at
  // once need two.
  thread_local cudaStream_t streams[kMaxDevices] = {};
  const int dev = current_device().index;
  if (streams[dev]) return streams[dev];
  void* green = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    green = g_partitions[dev].green;
  }
  if (!green) return nullptr;
#if VI_GREEN_CONTEXTS
  streams[dev] = make_stream(green);
#endif
  return streams[dev];
}

}  // namespace vi::cuda
