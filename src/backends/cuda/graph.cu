// CUDA graphs behind ops::record (ops/graph.h). Recording runs on a private stream of the
// calling thread (the legacy default stream, which contexts may use, cannot be captured) in
// thread-local mode, so another thread's work is never pulled in; replays go to the caller's
// stream. Allocations inside the recording (cudaMallocAsync) become the graph's own memory.
// With an SM partition (backends/cuda/sm_partition.h) recording and replays use the calling
// thread's stream of the partition instead, and a replay is fenced to the caller's stream both ways.
#include <memory>
#include <vector>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/sm_partition.h"
#include "ops/graph.h"

namespace vi::cuda {
namespace {

class CudaGraph final : public ops::Graph {
 public:
  // on_partition: recorded on a stream of the device's SM partition.
  CudaGraph(cudaGraphExec_t exec, const ops::GraphShape& shape, bool on_partition)
      : exec_(exec), shape_(shape), on_partition_(on_partition) {
    if (!on_partition_) return;
    cudaError_t err = cudaEventCreateWithFlags(&before_, cudaEventDisableTiming);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&after_, cudaEventDisableTiming);
    if (err != cudaSuccess) {
      release();
      VI_CUDA_CHECK(err);
    }
  }
  ~CudaGraph() override { release(); }
  void launch(ops::Context& ctx) override {
    const cudaStream_t s = stream_of(ctx);
    if (!on_partition_) {
      VI_CUDA_CHECK(cudaGraphLaunch(exec_, s));
      return;
    }
    // On this thread's stream of the partition (a partition is never undone: it exists).
    const cudaStream_t p = static_cast<cudaStream_t>(partition_stream());
    VI_CHECK(p, "a graph recorded on an SM partition replayed on a device without one");
    // The replay waits for what the caller queued before it, and the caller's later work for it.
    VI_CUDA_CHECK(cudaEventRecord(before_, s));
    VI_CUDA_CHECK(cudaStreamWaitEvent(p, before_, 0));
    VI_CUDA_CHECK(cudaGraphLaunch(exec_, p));
    VI_CUDA_CHECK(cudaEventRecord(after_, p));
    VI_CUDA_CHECK(cudaStreamWaitEvent(s, after_, 0));
  }
  ops::GraphShape shape() const override { return shape_; }

 private:
  cudaGraphExec_t exec_;
  ops::GraphShape shape_;
  bool on_partition_ = false;
  cudaEvent_t before_ = nullptr, after_ = nullptr;

  void release() {  // the destructor's work, also where the constructor throws
    cudaGraphExecDestroy(exec_);
    if (before_) cudaEventDestroy(before_);
    if (after_) cudaEventDestroy(after_);
  }
};

// A node's dependencies. Where edges carry types (CUDA 12.3+: programmatic launch makes some of
// them programmatic), the query must take the edge data too, or it fails as lossy.
std::vector<cudaGraphNode_t> dependencies(cudaGraphNode_t node) {
  size_t n = 0;
#if CUDART_VERSION >= 12030
#if CUDART_VERSION >= 13000
  auto query = [&](cudaGraphNode_t* d, cudaGraphEdgeData* e) {
    return cudaGraphNodeGetDependencies(node, d, e, &n);
  };
#else
  auto query = [&](cudaGraphNode_t* d, cudaGraphEdgeData* e) {
    return cudaGraphNodeGetDependencies_v2(node, d, e, &n);
  };
#endif
  VI_CUDA_CHECK(query(nullptr, nullptr));
  std::vector<cudaGraphNode_t> deps(n);
  std::vector<cudaGraphEdgeData> edges(n);
  if (n) VI_CUDA_CHECK(query(deps.data(), edges.data()));
#else
  VI_CUDA_CHECK(cudaGraphNodeGetDependencies(node, nullptr, &n));
  std::vector<cudaGraphNode_t> deps(n);
  if (n) VI_CUDA_CHECK(cudaGraphNodeGetDependencies(node, deps.data(), &n));
#endif
  deps.resize(n);
  return deps;
}

bool is_memory_node(cudaGraphNodeType t) { return t == cudaGraphNodeTypeMemAlloc || t == cudaGraphNodeTypeMemFree; }

// Counts kernels, memory nodes and kernels behind memory (ops::GraphShape) of a captured graph.
ops::GraphShape shape_of(cudaGraph_t graph) {
  size_t n = 0;
  VI_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) VI_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  auto type_of = [](cudaGraphNode_t node) {
    cudaGraphNodeType t;
    VI_CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    return t;
  };
  // Whether a kernel comes before `node` through memory nodes only.
  auto kernel_before = [&](cudaGraphNode_t node) {
    std::vector<cudaGraphNode_t> todo = dependencies(node);
    while (!todo.empty()) {
      cudaGraphNode_t d = todo.back();
      todo.pop_back();
      const cudaGraphNodeType t = type_of(d);
      if (t == cudaGraphNodeTypeKernel) return true;
      if (is_memory_node(t))
        for (cudaGraphNode_t p : dependencies(d)) todo.push_back(p);
    }
    return false;
  };
  ops::GraphShape s;
  for (cudaGraphNode_t node : nodes) {
    const cudaGraphNodeType t = type_of(node);
    if (is_memory_node(t)) ++s.memory_nodes;
    if (t != cudaGraphNodeTypeKernel) continue;
    ++s.kernels;
    for (cudaGraphNode_t d : dependencies(node))
      if (is_memory_node(type_of(d)) && kernel_before(d)) {
        ++s.kernels_behind_memory;
        break;
      }
  }
  return s;
}

cudaStream_t recording_stream() {
  thread_local cudaStream_t streams[kMaxDevices] = {};
  const int dev = current_device().index;
  if (!streams[dev]) VI_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[dev], cudaStreamNonBlocking));
  return streams[dev];
}

std::unique_ptr<ops::Graph> cuda_record(ops::Context& ctx, const std::function<void(ops::Context&)>& body) {
  const cudaStream_t partition = static_cast<cudaStream_t>(partition_stream());
  cudaStream_t s = partition ? partition : recording_stream();
  ops::Context rctx = ctx;
  rctx.stream = s;
  VI_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    body(rctx);
  } catch (...) {
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // an invalidated capture leaves its error behind
    throw;
  }
  VI_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
  ops::GraphShape shape;
  try {
    shape = shape_of(graph);
  } catch (...) {
    cudaGraphDestroy(graph);
    throw;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable keeps what it needs
  VI_CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(exec, shape, partition != nullptr);
}

[[maybe_unused]] const bool registered = [] {
  ops::graph_fns(Device::CUDA).record = cuda_record;
  return true;
}();

}  // namespace
}  // namespace vi::cuda
