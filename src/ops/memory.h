// Device memory through the op registry: models allocate activations and move weights
// with these, so the same model code runs on any backend.
#pragma once

#include <vector>

#include "ops/registry.h"

namespace vi::ops {

// Uninitialised tensor on ctx.device.
Tensor empty(Context& ctx, DType dtype, const std::vector<int64_t>& shape);
// A copy of a host tensor on ctx.device (the tensor itself when ctx.device is the CPU).
Tensor upload(Context& ctx, const Tensor& host);
// Copies `bytes` bytes of host memory to the start of dst (on ctx.device; a plain memcpy on
// the CPU). Stream-ordered: the host buffer may be reused as soon as this returns.
void upload_into(Context& ctx, const void* host, size_t bytes, Tensor& dst);
// Sets every byte of t to zero (stream-ordered; inside a recording, a memset node).
void zero(Context& ctx, Tensor& t);
// Asks the device to bring bytes [begin, end) of t into its last-level cache ahead of a later
// kernel that reads them, so that memory bandwidth the kernels queued in between leave unused
// (latency-bound steps such as the GDN recurrence) is spent on that kernel's bytes. A hint: no
// value changes and nothing waits for the bytes; stream-ordered after the work before it (the
// kernels after it still see every write before it). On the CPU, and with VI_L2_PREFETCH=0, it
// does nothing. begin <= end <= t.nbytes() is checked.
void prefetch(Context& ctx, const Tensor& t, int64_t begin, int64_t end);
// How many bytes a caller may ask prefetch() for ahead of one kernel: half the device's
// last-level cache (the rest holds what runs meanwhile), VI_L2_PREFETCH=<MiB> to override, 0 on
// the CPU or with VI_L2_PREFETCH=0.
int64_t prefetch_budget(Context& ctx);

// A host copy of a tensor on any device (the tensor itself when already on the host).
Tensor download(Context& ctx, const Tensor& t);
// Waits for all work queued on ctx (no-op on the CPU).
void synchronize(Context& ctx);

struct MemoryFns {
  Tensor (*empty)(Context&, DType, const std::vector<int64_t>&) = nullptr;
  Tensor (*upload)(Context&, const Tensor&) = nullptr;
  void (*upload_into)(Context&, const void*, size_t, Tensor&) = nullptr;
  void (*zero)(Context&, Tensor&) = nullptr;
  // Optional (a hint): bytes [begin, end) of t; cache_bytes: the device's last-level cache size.
  void (*prefetch)(Context&, const Tensor&, int64_t, int64_t) = nullptr;
  int64_t (*cache_bytes)(Context&) = nullptr;
  Tensor (*download)(Context&, const Tensor&) = nullptr;
  void (*synchronize)(Context&) = nullptr;
};
// One entry per device; backends fill theirs from a static initialiser.
MemoryFns& memory_fns(Device d);

}  // namespace vi::ops
