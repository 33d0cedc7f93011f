// Per-thread device workspaces (workspace.cuh).
#include <algorithm>
#include <vector>

#include "backends/cuda/device.cuh"
#include "backends/cuda/workspace.cuh"

namespace vi::cuda {
namespace {

constexpr int kSlots = static_cast<int>(WorkspaceSlot::kCount);

struct Slot {
  void* p = nullptr;
  size_t bytes = 0;
};

struct ThreadWorkspaces {
  Slot slots[kMaxDevices][kSlots];
  std::vector<void*> all;  // every buffer handed out, the outgrown ones too
  ~ThreadWorkspaces() {
    for (void* p : all) cudaFree(p);  // errors ignored: at process exit the runtime may be gone
  }
};

void* workspace(WorkspaceSlot slot, size_t bytes, bool zeroed) {
  thread_local ThreadWorkspaces ws;
  const int dev = current_device().index;
  Slot& s = ws.slots[dev][static_cast<int>(slot)];
  if (bytes <= s.bytes) return s.p;
  // Grow to at least twice the old size, so a sequence of slightly larger calls allocates rarely.
  const size_t want = std::max<size_t>({bytes, 2 * s.bytes, 4096});
  // Recording forbids allocation in its thread-local capture mode; a plain allocation (no stream
  // work) is safe while a capture runs, as a caching allocator's is.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  VI_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, want);
  cudaError_t zero_err = cudaSuccess;
  if (err == cudaSuccess && zeroed) {
    // On a stream of its own, waited for here: a memset on the caller's stream while it records a
    // step would become a node of that step's graph (replayed every time), and the buffer must be
    // zero before whichever stream's kernel reads it first.
    cudaStream_t zs = nullptr;
    zero_err = cudaStreamCreateWithFlags(&zs, cudaStreamNonBlocking);
    if (zero_err == cudaSuccess) zero_err = cudaMemsetAsync(p, 0, want, zs);
    if (zero_err == cudaSuccess) zero_err = cudaStreamSynchronize(zs);
    if (zs != nullptr) cudaStreamDestroy(zs);
  }
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (err != cudaSuccess) {
    cudaGetLastError();
    VI_FAIL("out of GPU memory: {:.1f} MiB of workspace could not be allocated on {} ({})", want / 1048576.0,
            current_device().name, cudaGetErrorString(err));
  }
  if (zero_err != cudaSuccess) {
    cudaFree(p);
    cudaGetLastError();
    VI_FAIL("a {:.1f} MiB workspace on {} could not be zeroed ({})", want / 1048576.0, current_device().name,
            cudaGetErrorString(zero_err));
  }
  ws.all.push_back(p);
  s.p = p;
  s.bytes = want;
  return p;
}

}  // namespace

void* thread_workspace(const ops::Context&, WorkspaceSlot slot, size_t bytes) { return workspace(slot, bytes, false); }

void* thread_workspace_zeroed(const ops::Context&, WorkspaceSlot slot, size_t bytes) {
  return workspace(slot, bytes, true);
}

}  // namespace vi::cuda
