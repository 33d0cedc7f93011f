// CUPTI kernel trace (kernel_trace.h). Host code only; CUPTI's entry points come from dlopen, so
// no link-time dependency: a build without cupti.h still compiles and says so at start().
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/kernel_trace.h"

#if __has_include(<cupti.h>)
#include <cupti.h>
#define VI_HAVE_CUPTI_H 1
#endif

#ifdef VI_HAVE_CUPTI_H
// The newest kernel record the header knows. Only fields up to `name` are read, and those sit
// at the same offsets in every version since the fourth, whichever one the library writes.
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
#else
using KernelRecord = CUpti_ActivityKernel8;
#endif
#endif

namespace vi::cuda {

#ifdef VI_HAVE_CUPTI_H
namespace {

struct Cupti {
  void* lib = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*dropped)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  bool callbacks_registered = false;
};

// What the completion callback collects (CUPTI calls it from its own thread).
struct Collected {
  std::mutex mu;
  std::vector<ops::KernelSpan> kernels;
  uint64_t dropped = 0;
};

Cupti& cupti() {
  static Cupti c;
  return c;
}
Collected& collected() {
  static Collected c;
  return c;
}
bool g_active = false;  // one trace at a time

std::string result_text(CUptiResult r) {
  const char* s = nullptr;
  if (cupti().result_string && cupti().result_string(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

// libcupti: VI_CUPTI, else the loader's search for the runtime's major version, then unversioned.
bool load(std::string* why) {
  Cupti& c = cupti();
  if (c.lib) return true;
  std::vector<std::string> names;
  if (const char* e = std::getenv("VI_CUPTI"); e && *e) names.push_back(e);
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  names.push_back("libcupti.so." + std::to_string(rt / 1000));
  names.push_back("libcupti.so");
  std::string tried;
  for (const std::string& n : names) {
    c.lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (c.lib) break;
    tried += (tried.empty() ? "" : ", ") + n;
  }
  if (!c.lib) {
    *why = "libcupti not found (tried " + tried + "; set VI_CUPTI to its path)";
    return false;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(c.lib, name));
    if (!fn) *why += std::string(why->empty() ? "" : ", ") + name;
    return fn != nullptr;
  };
  why->clear();
  bool ok = sym(c.register_callbacks, "cuptiActivityRegisterCallbacks");
  ok &= sym(c.enable, "cuptiActivityEnable");
  ok &= sym(c.disable, "cuptiActivityDisable");
  ok &= sym(c.flush_all, "cuptiActivityFlushAll");
  ok &= sym(c.next_record, "cuptiActivityGetNextRecord");
  ok &= sym(c.dropped, "cuptiActivityGetNumDroppedRecords");
  ok &= sym(c.timestamp, "cuptiGetTimestamp");
  ok &= sym(c.result_string, "cuptiGetResultString");
  if (!ok) {
    *why = "libcupti lacks " + *why;
    dlclose(c.lib);
    c.lib = nullptr;
  }
  return ok;
}

constexpr size_t kBufferBytes = 8u << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

std::string kernel_name(const char* mangled) {
  if (!mangled) return "(unnamed kernel)";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? ops::short_kernel_name(d) : mangled;
  std::free(d);
  return s;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  Collected& col = collected();
  std::vector<ops::KernelSpan> got;
  CUpti_Activity* rec = nullptr;
  while (cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const KernelRecord*>(rec);
    got.push_back({kernel_name(k->name), k->start, k->end, -1});
  }
  size_t dropped = 0;
  cupti().dropped(ctx, stream, &dropped);
  std::free(buffer);
  std::lock_guard<std::mutex> lock(col.mu);
  col.kernels.insert(col.kernels.end(), got.begin(), got.end());
  col.dropped += dropped;
}

}  // namespace

std::unique_ptr<KernelTrace> KernelTrace::start(std::string* why) {
  if (g_active) {
    *why = "a kernel trace is already running";
    return nullptr;
  }
  if (!load(why)) return nullptr;
  Cupti& c = cupti();
  // CUPTI needs a context to attach its activity to: make sure the runtime has one.
  VI_CUDA_CHECK(cudaFree(nullptr));
  if (!c.callbacks_registered) {
    if (CUptiResult r = c.register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
      *why = "cuptiActivityRegisterCallbacks: " + result_text(r);
      return nullptr;
    }
    c.callbacks_registered = true;
  }
  {
    std::lock_guard<std::mutex> lock(collected().mu);
    collected().kernels.clear();
    collected().dropped = 0;
  }
  if (CUptiResult r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS) {
    *why = "cuptiActivityEnable(CONCURRENT_KERNEL): " + result_text(r);
    return nullptr;
  }
  std::unique_ptr<KernelTrace> t(new KernelTrace());
  t->running_ = true;
  g_active = true;
  return t;
}

KernelTrace::~KernelTrace() {
  if (running_) stop();
}

uint64_t KernelTrace::now_ns() const {
  uint64_t t = 0;
  cupti().timestamp(&t);
  return t;
}

ops::OpProfiler::CallHooks KernelTrace::label_hooks() {
  ops::OpProfiler::CallHooks h;
  h.user = this;
  h.enter = [](void* user, int64_t call) {
    auto* t = static_cast<KernelTrace*>(user);
    t->windows_.push_back({call, t->now_ns(), 0});
  };
  h.leave = [](void* user) {
    auto* t = static_cast<KernelTrace*>(user);
    VI_CUDA_CHECK(cudaDeviceSynchronize());  // the call's kernels end before its window does
    if (!t->windows_.empty()) t->windows_.back().to = t->now_ns();
  };
  return h;
}

std::vector<ops::KernelSpan> KernelTrace::stop() {
  if (!running_) return {};
  VI_CUDA_CHECK(cudaDeviceSynchronize());
  Cupti& c = cupti();
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  running_ = false;
  g_active = false;
  std::vector<ops::KernelSpan> out;
  {
    std::lock_guard<std::mutex> lock(collected().mu);
    out.swap(collected().kernels);
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  // Windows are in time order and disjoint (one call's exit precedes the next call's entry).
  size_t w = 0;
  for (ops::KernelSpan& k : out) {
    while (w < windows_.size() && windows_[w].to != 0 && windows_[w].to < k.start_ns) ++w;
    if (w < windows_.size() && windows_[w].from <= k.start_ns && (windows_[w].to == 0 || k.start_ns <= windows_[w].to))
      k.call = windows_[w].call;
  }
  return out;
}

uint64_t KernelTrace::dropped() const {
  std::lock_guard<std::mutex> lock(collected().mu);
  return collected().dropped;
}

#else  // no cupti.h at build time

std::unique_ptr<KernelTrace> KernelTrace::start(std::string* why) {
  *why = "this binary was built without CUPTI's headers (cupti.h)";
  return nullptr;
}
KernelTrace::~KernelTrace() = default;
uint64_t KernelTrace::now_ns() const { return 0; }
ops::OpProfiler::CallHooks KernelTrace::label_hooks() { return {}; }
std::vector<ops::KernelSpan> KernelTrace::stop() { return {}; }
uint64_t KernelTrace::dropped() const { return 0; }

#endif

}  // namespace vi::cuda
