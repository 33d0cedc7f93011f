// `voltinfer bench --trace-kernels`: the per-kernel table of decode rounds from a CUPTI kernel
// trace (backends/cuda/kernel_trace.h, ops/kernel_timeline.h) — true kernel times inside the
// replayed step, where the op profiler's events inflate every small op.
#pragma once

#include <cstdint>
#include <functional>

#include "ops/kernel_timeline.h"
#include "ops/profiler.h"

namespace vi::cli {

// round(profiler) runs one decode round and returns when its work is done on the device;
// profiler: nullptr for a round as the timed ones run (a recorded step replays), else an op
// profiler the round must begin and end (its ops then run one by one, which labels the
// kernels). Runs one labelled round, then `rounds` traced ones. Without CUDA or CUPTI: a
// timeline of no rounds whose note says why. dropped: CUPTI records lost (0 when complete).
ops::KernelTimeline trace_decode_kernels(Device device, int rounds, const std::function<void(ops::OpProfiler*)>& round,
                                         uint64_t* dropped);

}  // namespace vi::cli
