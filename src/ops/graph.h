// Recorded device work: everything an op sequence queues on a device, captured once and
// replayed as one launch (CUDA graphs). A decode step is hundreds of small kernels whose
// launch cost and gaps are a large share of the step; replayed, they cost one launch. A
// recorded step must read everything that changes between replays (token ids, positions,
// block tables) from device memory at fixed addresses, and allocate nothing the caller keeps.
#pragma once

#include <functional>
#include <memory>

#include "ops/registry.h"

namespace vi::ops {

// What a recording holds. A kernel behind memory waits on an allocation or free node that itself
// follows a kernel: such a kernel cannot be launched while the kernel before it runs
// (programmatic launch links kernel to kernel only), so it pays a launch and its first loads
// on the critical path. A decode step should have none (allocate a step's scratch before its
// first kernel).
struct GraphShape {
  int64_t kernels = 0;
  int64_t memory_nodes = 0;
  int64_t kernels_behind_memory = 0;
};

class Graph {
 public:
  virtual ~Graph() = default;
  // Queues the recorded work on ctx's stream.
  virtual void launch(Context& ctx) = 0;
  virtual GraphShape shape() const { return {}; }
};

// Whether ctx's device can record (false on the CPU, or where the backend has no graphs).
bool graphs_supported(const Context& ctx);
// Runs body(rctx) with a context whose stream records instead of executing, and returns
// the recording (nothing has run yet: launch it). Allocations made inside belong to the
// graph (freed inside, they are reused at every replay). If body throws, the recording is
// dropped and the exception passes through.
std::unique_ptr<Graph> record(Context& ctx, const std::function<void(Context&)>& body);

struct GraphFns {
  std::unique_ptr<Graph> (*record)(Context&, const std::function<void(Context&)>&) = nullptr;
};
GraphFns& graph_fns(Device d);  // backends fill theirs from a static initialiser

}  // namespace vi::ops
