// CUDA graphs behind ops::record (ops/graph.h). Recording runs on a private stream of the
// calling thread (the legacy default stream, which contexts may use, cannot be captured) in
// thread-local mode, so another thread's work is never pulled in; replays go to the caller's
// stream. Allocations inside the recording (cudaMallocAsync) become the graph's own memory.
#include <memory>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "ops/graph.h"

namespace vi::cuda {
namespace {

class CudaGraph final : public ops::Graph {
 public:
  explicit CudaGraph(cudaGraphExec_t exec) : exec_(exec) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void launch(ops::Context& ctx) override { VI_CUDA_CHECK(cudaGraphLaunch(exec_, stream_of(ctx))); }

 private:
  cudaGraphExec_t exec_;
};

cudaStream_t recording_stream() {
  constexpr int kMaxDevices = 64;
  thread_local cudaStream_t streams[kMaxDevices] = {};
  const int dev = current_device().index;
  if (!streams[dev]) VI_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[dev], cudaStreamNonBlocking));
  return streams[dev];
}

std::unique_ptr<ops::Graph> cuda_record(ops::Context& ctx, const std::function<void(ops::Context&)>& body) {
  cudaStream_t s = recording_stream();
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
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiateWithFlags(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the executable keeps what it needs
  VI_CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(exec);
}

const bool registered = [] {
  ops::graph_fns(Device::CUDA).record = cuda_record;
  return true;
}();

}  // namespace
}  // namespace vi::cuda
