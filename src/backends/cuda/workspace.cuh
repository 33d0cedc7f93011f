// Device memory an op reuses at every call, held per thread and device for the life of the thread.
//
// Why not Scratch (cudaMallocAsync per call): inside a recorded step an allocation and its free
// are graph nodes, and a kernel that follows such a node cannot be launched while the kernel
// before it runs (programmatic launch, pdl.cuh, only links kernel to kernel). A workspace is
// allocated once, outside the stream's order, so the kernels around the op stay linked.
//
// Why per thread: the work a thread queues on a device goes to one stream (eagerly, or as the
// recorded steps it replays there), so two launches that share a workspace never overlap. A
// workspace only grows: a larger request gets a new buffer and the old one stays allocated until
// the thread ends, because a recorded step may still hold its address.
#pragma once

#include <cstddef>

#include "ops/registry.h"

namespace vi::cuda {

enum class WorkspaceSlot : int {
  kDecodeAttentionPartials,  // split-KV partial sums and (max, sum) pairs (attention_decode.cu)
  kGemvHalfSums,             // the halved tiles' partial sums of the deferred-norm producer (gemv_q4kt.cu)
  kGemvHalfCounts,           // their arrival counters (zeroed; the last arrival resets its own)
  kGemvStreamTickets,        // the streaming GEMV's item counter (zeroed; its last draw resets it)
  kCount,
};

// At least `bytes` of device memory for this thread on ctx's device, 256-byte aligned; valid until
// the thread ends. Fails loudly (with the size) if the device is out of memory.
void* thread_workspace(const ops::Context& ctx, WorkspaceSlot slot, size_t bytes);
// The same, with every byte of a newly allocated buffer zero (for counters that the kernels using
// them return to zero themselves); the zeroing is finished when it returns.
void* thread_workspace_zeroed(const ops::Context& ctx, WorkspaceSlot slot, size_t bytes);

}  // namespace vi::cuda
