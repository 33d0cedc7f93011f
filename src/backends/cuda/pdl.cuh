// Programmatic dependent launch (PDL, sm_90+): a kernel launched with pdl_launch may be
// started while the kernel before it on the stream is still running, so its launch and
// block start-up overlap that kernel's tail instead of following it (a decode round is
// hundreds of small kernels; each gap costs a microsecond or two).
//
// The rule that makes it safe: a kernel launched through pdl_launch must call pdl_wait()
// before its first global-memory read AND write (the kernel before it may still be reading
// a buffer this one overwrites). Put it first in the kernel; kernel parameters and shared
// memory may be used before it. The one exception: memory that no kernel writes after the
// model is loaded (weights, prepared and synchronized before the first round) may be read
// before it; the decode GEMVs issue their first weight loads there, so they overlap the tail
// of the kernel before them. Likewise what no kernel of the current step writes: its inputs
// staged by a copy before the step (positions, block tables), the K/V rows of the tokens of
// earlier steps, which the decode attention starts copying before its wait, and a GDN layer's
// recurrent state: in a step only the kernel that reads it writes it, and before that only the
// layer's kernels of earlier steps (many kernels back, so finished: see the end of the next
// paragraph) and copies (which a programmatic launch never overlaps) did; the lean GDN decode
// kernels load it before their wait. pdl_wait()
// returns at once when the kernel was launched without the attribute, so a converted kernel
// can be launched either way; a kernel that lacks pdl_wait() must keep its plain <<<>>> launch.
//
// pdl_trigger() lets the next kernel on the stream be launched early; it never lets that
// kernel see this one's results early (its own pdl_wait() waits for this whole grid to
// finish and its writes to be visible), so it may be called anywhere in a kernel. The
// converted kernels start with pdl_wait(); pdl_trigger();: the next kernel is launched while
// this one runs, and its blocks do not occupy SMs while this one still waits for its own
// predecessor (at most two grids overlap).
//
// Off (plain launches, full stream ordering) below compute capability 9.0, where the loaded
// code is older than sm_90 (the CUDA 11.8 build's compute_70 PTX JIT-compiled on an H200
// has no griddepcontrol instructions), before CUDA 12.3 (runtime and driver: programmatic
// edges in captured graphs), and when the environment variable VI_PDL is "0".
#pragma once

#include <utility>

#include "backends/cuda/cuda_util.cuh"

namespace vi::cuda {

// Waits until the grids this one depends on have completed and their writes are visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Allows the next PDL-launched kernel on the stream to start once every block of this grid
// has called it (or exited).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Asks L2 to fetch the 128-byte line holding p; no value comes back to the thread. Allowed
// before pdl_wait() on ANY global address, including buffers the previous kernel writes: it
// reads nothing into the kernel, and L2 is where global writes land (L1 is not filled), so a
// line fetched early is updated by a later write there and a load after pdl_wait() sees it.
// Used for per-layer state that was last touched a round ago and has left L2 since (GDN conv
// and delta-rule state): its DRAM latency then overlaps the previous kernel's tail.
__device__ __forceinline__ void prefetch_l2(const void* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

// Whether pdl_launch adds the attribute on the current device (see the top comment). The
// environment is read once per process.
bool pdl_enabled();
// Tests only: false turns PDL off in this process whatever VI_PDL says; true returns to the
// default (still off where the device, code or toolkit cannot do it).
void set_pdl_allowed(bool allowed);

#if CUDART_VERSION >= 12000
namespace pdl_detail {
// cudaLaunchKernelEx with attrs[0..n); returns the launch's error, else what it left behind
// (cudaGetLastError also clears it).
template <class... Params, class... Args>
cudaError_t launch_ex(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      cudaLaunchAttribute* attrs, unsigned n, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attrs;
  cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  const cudaError_t last = cudaGetLastError();
  return err != cudaSuccess ? err : last;
}
}  // namespace pdl_detail
#endif

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization
// attribute when pdl_enabled(). Works under stream capture (the edge to the previous kernel
// node becomes a programmatic one). Returns the launch's error, as cudaGetLastError() would
// after <<<>>>: VI_CUDA_CHECK(pdl_launch(...)) names the call site.
template <class... Params, class... Args>
cudaError_t pdl_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       Args&&... args) {
#if CUDART_VERSION >= 12030
  if (pdl_enabled()) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    return pdl_detail::launch_ex(kernel, grid, block, smem, stream, attr, 1, std::forward<Args>(args)...);
  }
#endif
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
  return cudaGetLastError();
}

#if CUDART_VERSION >= 12000
// pdl_launch for a kernel whose blocks form thread-block clusters of cluster_x blocks along x
// (sm_90+; gridDim.x a multiple of cluster_x): the cluster-dimension attribute always, the
// programmatic-serialization attribute when pdl_enabled(). A cluster launch needs
// cudaLaunchKernelEx, so unlike pdl_launch it never falls back to <<<>>>; callers decide
// whether the device can run clusters at all.
template <class... Params, class... Args>
cudaError_t pdl_launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  attr[n].id = cudaLaunchAttributeClusterDimension;
  attr[n].val.clusterDim.x = cluster_x;
  attr[n].val.clusterDim.y = 1;
  attr[n].val.clusterDim.z = 1;
  ++n;
#if CUDART_VERSION >= 12030
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
#endif
  return pdl_detail::launch_ex(kernel, grid, block, smem, stream, attr, n, std::forward<Args>(args)...);
}
#endif

}  // namespace vi::cuda
