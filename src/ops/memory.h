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
// A host copy of a tensor on any device (the tensor itself when already on the host).
Tensor download(Context& ctx, const Tensor& t);
// Waits for all work queued on ctx (no-op on the CPU).
void synchronize(Context& ctx);
// A queue of ctx's device of its own (a CUDA stream that does not wait for the legacy default
// stream; null on the CPU), for a rank of a tensor-parallel group. It is never destroyed: memory
// allocated on it may be freed on it at any time later.
void* new_stream(Context& ctx);
// Work queued on `waiter` from now on starts after the work queued on `signaler` so far (both on
// one device; nothing on the CPU, where work runs as it is called). Inside a recording it becomes
// an edge of the graph.
void stream_wait(Context& waiter, Context& signaler);

struct MemoryFns {
  Tensor (*empty)(Context&, DType, const std::vector<int64_t>&) = nullptr;
  Tensor (*upload)(Context&, const Tensor&) = nullptr;
  void (*upload_into)(Context&, const void*, size_t, Tensor&) = nullptr;
  void (*zero)(Context&, Tensor&) = nullptr;
  Tensor (*download)(Context&, const Tensor&) = nullptr;
  void (*synchronize)(Context&) = nullptr;
  void* (*new_stream)(Context&) = nullptr;
  void (*stream_wait)(Context&, Context&) = nullptr;
};
// One entry per device; backends fill theirs from a static initialiser.
MemoryFns& memory_fns(Device d);

}  // namespace vi::ops
