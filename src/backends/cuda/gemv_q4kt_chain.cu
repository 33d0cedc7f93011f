// The persistent chain of Q4_KT GEMVs: see gemv_q4kt_chain.cuh.
#include <cuda_fp16.h>

#include <algorithm>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_q4kt_chain.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kt_walk.cuh"

namespace vi::cuda {
namespace {

struct ChainStep {
  const uint8_t* w;  // Q4_KT [N, K]
  const __half* x;   // [T, K]
  __half* y;         // [T, N]
  int64_t N, K;
  int n_sb;
};

// A kernel parameter (4 KB at most before CUDA 12.1): 40 bytes a step.
struct ChainArgs {
  ChainStep s[kQ4ktChainMaxSteps];
  int n;
};

// Every block of the grid arrives, then waits until all have: the barrier of step s (1, 2, ...)
// completes when words[0], which only grows from 0, reaches s * gridDim.x. Thread 0 fences the
// block's writes (the block barrier before it orders them), adds itself and spins on an acquire
// load; the block barrier after it carries the acquire to the other threads, whose coherent
// loads (X_COHERENT) then see the other blocks' y. FLAG: the spinning reads words[32], a
// different line, which the last block to arrive sets to s (a release store), so the arrivals'
// atomics do not queue behind the polls of hundreds of blocks on their line.
template <bool FLAG>
__device__ __forceinline__ void grid_barrier(unsigned* words, unsigned s) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned target = s * gridDim.x;
    __threadfence();
    const unsigned before = atomicAdd(words, 1u);
    unsigned* poll = words;
    unsigned want = target;
    if constexpr (FLAG) {
      poll = words + 32;
      want = s;
      if (before + 1 == target) asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(poll), "r"(s) : "memory");
    }
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(poll) : "memory");
    } while (seen < want);
  }
  __syncthreads();
}

template <int MINB, bool PREFETCH, bool FLAG>
__global__ void __launch_bounds__(128, MINB)
    gemv_q4kt_chain_kernel(const __grid_constant__ ChainArgs a, int n_tok, unsigned* words, uint32_t magic) {
  using Walk = Q4ktTileWalk<false, false, true>;
  __shared__ float red[4][4][32];
  auto walk_of = [&](const ChainStep& st, int64_t tile) {
    return Walk(st.w, st.x, n_tok, st.N, st.n_sb, st.K, tile);
  };
  Walk walk = walk_of(a.s[0], blockIdx.x);
  if (blockIdx.x < a.s[0].N / 16) walk.start();
  for (int s = 0; s < a.n; ++s) {
    const ChainStep& st = a.s[s];
    const int64_t tiles = st.N / 16;
    for (int64_t tile = blockIdx.x; tile < tiles;) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      walk.run(magic, acc);
      store_tile_sums<4>(acc, red, st.y, tile * 16, st.N, n_tok, st.N);
      __syncthreads();  // red is read by the store above before the next tile's writes to it
      tile += gridDim.x;
      if (tile < tiles) {
        walk = walk_of(st, tile);
        walk.start();
      }
    }
    if (s + 1 < a.n) {
      const ChainStep& nx = a.s[s + 1];
      const bool mine = blockIdx.x < nx.N / 16;
      walk = walk_of(nx, blockIdx.x);
      if (PREFETCH && mine) walk.start();  // weights: no step writes them
      grid_barrier<FLAG>(words, static_cast<unsigned>(s + 1));
      if (!PREFETCH && mine) walk.start();
    }
  }
}

template <int MINB, bool PREFETCH, bool FLAG>
void launch(const ops::Context& ctx, const ChainArgs& args, int n_tok, unsigned* words) {
  auto kernel = gemv_q4kt_chain_kernel<MINB, PREFETCH, FLAG>;
  const dim3 grid(static_cast<unsigned>(current_device().sm_count * MINB));
#if CUDART_VERSION >= 12000
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  VI_CUDA_CHECK(pdl_detail::launch_ex(kernel, grid, dim3(128), 0, stream_of(ctx), attr, 1, args, n_tok, words,
                                      kQ4krMagic));
#else
  kernel<<<grid, 128, 0, stream_of(ctx)>>>(args, n_tok, words, kQ4krMagic);
  VI_CUDA_LAUNCH_CHECK();
#endif
}

// Blocks of this kernel that fit on one SM.
template <int MINB>
int resident_blocks() {
  int n = 1 << 30;
  for (auto kernel : {gemv_q4kt_chain_kernel<MINB, false, false>, gemv_q4kt_chain_kernel<MINB, false, true>,
                      gemv_q4kt_chain_kernel<MINB, true, false>, gemv_q4kt_chain_kernel<MINB, true, true>}) {
    int fit = 0;
    VI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, 128, 0));
    n = std::min(n, fit);
  }
  return n;
}

template <int MINB, bool PREFETCH>
void launch_barrier(const ops::Context& ctx, const ChainArgs& args, int n_tok, bool flag, unsigned* words) {
  if (flag) launch<MINB, PREFETCH, true>(ctx, args, n_tok, words);
  else launch<MINB, PREFETCH, false>(ctx, args, n_tok, words);
}

}  // namespace

bool gemv_q4kt_chain_supports(const ops::Context& ctx, const std::vector<Q4ktChainStep>& steps, int blocks_per_sm) {
  if (steps.empty() || steps.size() > static_cast<size_t>(kQ4ktChainMaxSteps)) return false;
  if (blocks_per_sm != 3 && blocks_per_sm != 4) return false;
  for (const Q4ktChainStep& s : steps) {
    if (!gemv_q4kt_supports(ctx, *s.x, *s.w)) return false;
    if (s.y->dtype() != DType::F16 || s.y->rows() != s.x->rows() || s.y->cols() != s.w->dim(0)) return false;
    if (s.x->rows() != steps[0].x->rows()) return false;
  }
  return (blocks_per_sm == 3 ? resident_blocks<3>() : resident_blocks<4>()) >= blocks_per_sm;
}

void gemv_q4kt_chain(const ops::Context& ctx, const std::vector<Q4ktChainStep>& steps, int blocks_per_sm,
                     bool prefetch, bool flag_barrier, unsigned* words) {
  VI_CHECK(gemv_q4kt_chain_supports(ctx, steps, blocks_per_sm),
           "gemv_q4kt_chain: {} steps at {} blocks per SM cannot run (at most {} Q4_KT GEMVs of one token count, "
           "3 or 4 blocks per SM that fit)",
           steps.size(), blocks_per_sm, kQ4ktChainMaxSteps);
  ChainArgs args{};
  for (const Q4ktChainStep& s : steps)
    args.s[args.n++] = ChainStep{s.w->ptr<uint8_t>(), s.x->ptr<__half>(), s.y->ptr<__half>(), s.w->dim(0),
                                 s.w->dim(1), static_cast<int>(s.w->dim(1) / kQKK)};
  VI_CUDA_CHECK(cudaMemsetAsync(words, 0, kQ4ktChainWords * sizeof(unsigned), stream_of(ctx)));
  const int n_tok = static_cast<int>(steps[0].x->rows());
  if (blocks_per_sm == 3) {
    if (prefetch) launch_barrier<3, true>(ctx, args, n_tok, flag_barrier, words);
    else launch_barrier<3, false>(ctx, args, n_tok, flag_barrier, words);
  } else {
    if (prefetch) launch_barrier<4, true>(ctx, args, n_tok, flag_barrier, words);
    else launch_barrier<4, false>(ctx, args, n_tok, flag_barrier, words);
  }
}

}  // namespace vi::cuda
