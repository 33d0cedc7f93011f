// Kernel trace through CUPTI's activity API: the GPU's own start and end timestamps of every
// kernel, also of the kernels inside a replayed CUDA graph, with no event or host work between
// them (what `voltinfer bench --trace-kernels` turns into ops/kernel_timeline.h's table).
//
// libcupti is loaded at run time, so the binary does not depend on it: VI_CUPTI names the file,
// else the loader looks for libcupti.so.<runtime major> and libcupti.so. It must belong to a
// toolkit no older than the driver's CUDA version allows; any failure to load or start is a
// message, never an abort. One trace at a time per process (CUPTI's activity buffers are global).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/kernel_timeline.h"
#include "ops/profiler.h"

namespace vi::cuda {

class KernelTrace {
 public:
  // Starts tracing kernels on every device; nullptr with *why set when CUPTI is not there or
  // refuses (another tracer attached, too old for the driver, built without cupti.h).
  static std::unique_ptr<KernelTrace> start(std::string* why);
  ~KernelTrace();  // stops tracing if stop() was not called
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Now on the clock of the kernel timestamps (ns).
  uint64_t now_ns() const;
  // For OpProfiler::set_call_hooks in a round run op by op: kernels that start between a call's
  // entry and exit get its index. The exit waits for the device, so every kernel of a call ends
  // inside its window: this round is for labels, its times mean nothing.
  ops::OpProfiler::CallHooks label_hooks();
  // Stops tracing: every kernel since start(), by start time, the labelled ones with their call.
  std::vector<ops::KernelSpan> stop();
  // Records CUPTI could not store (buffers full): non-zero means the trace has holes.
  uint64_t dropped() const;

 private:
  KernelTrace() = default;
  struct Window {
    int64_t call;
    uint64_t from, to;
  };
  std::vector<Window> windows_;
  bool running_ = false;
};

}  // namespace vi::cuda
