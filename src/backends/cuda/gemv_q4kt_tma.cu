// The Q4_KT decode GEMV fed by the copy engine: see gemv_q4kt_tma.cuh for the plan, core/dtype.h for
// the layout and q4kr_mma.cuh for the arithmetic.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "backends/cuda/bulk_copy.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/deferred_scale.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_out.cuh"
#include "backends/cuda/gemv_q4kt_tma.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "backends/cuda/workspace.cuh"
#include "core/dtype.h"

namespace vi::cuda {
namespace {

constexpr int kMaxStages = 8;
constexpr size_t kMaxSmem = 227 * 1024;  // a block's opt-in shared memory on sm_90
// The deferred norm's part: kConsume scales each token's sums by its s before they are rounded;
// kConsumeSums also takes the mins' term from the producer's sums16 (as gemv_q4kt.cu's consumers).
enum : int { kNone = 0, kConsume = 1, kConsumeSums = 2 };
struct TmaNorm {
  const uint4* ss_in;  // [T, 2] 16-byte words: the token's (fine, coarse) u64 pairs of both slots
  float inv_d, eps;
  const __half* sums_in;  // [T, K / 8]
};

// The consumer warps' barrier (named barrier 1; the producer warp never joins it).
template <int CW>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(CW * 32) : "memory");
}

// Shared memory of a block, in this order: the ring [stages][CW x UPW units], x [n_tok, K] f16 if
// XS, the stages' full and empty barriers, the tokens' scales, the consumers' sums
// [2][CW][4][32] (two, so that a tile's stash need not wait for the reads of the tile before).
struct TmaSmem {
  size_t xs, bars, scale, tiles, red, total;
};
__host__ __device__ inline TmaSmem tma_smem(int cw, int upw, bool xs, int stages, int n_tok, int64_t K) {
  TmaSmem m{};
  m.xs = static_cast<size_t>(stages) * cw * upw * kQ4ktUnitBytes;
  m.bars = m.xs + (xs ? static_cast<size_t>(n_tok) * K * 2 : 0);
  m.scale = m.bars + 2 * kMaxStages * sizeof(uint64_t);
  m.tiles = m.scale + 8 * sizeof(float);
  m.red = m.tiles + kMaxStages * sizeof(int);
  m.total = m.red + 2 * static_cast<size_t>(cw) * 4 * 32 * sizeof(float);
  return m;
}

// Block b takes tile b first, then tiles G + a ticket from `counter` (G = gridDim.x), drawn by the
// producer when it has issued the copies of the block's tile before: the blocks that finish first
// take the rest. A tile's n_sb units (kQ4ktUnitBytes each, consecutive in Q4_KT and Q4_KTS) go
// through the ring in chunks of CW x UPW units, one bulk copy a chunk; the producer writes each
// stage's tile beside it (-1: the block is done) before the arrival that the consumers' wait
// acquires. Consumer warp w multiplies units w, w + CW, ... of a chunk: the tile's super-blocks w,
// w + CW, ... in order. Every block draws once past the last tile, so the draws are n_tiles in all;
// the one that draws n_tiles - 1 resets the counter for the next launch, whose producers draw only
// after their PDL wait. SWIGLU: w is Q4_KTS (rows g of tile b gate rows 8b + g, rows g + 8 the
// matching up rows) and out.y[0] is h [T, N / 2].
template <int CW, int UPW, bool XS, bool SWIGLU, int NORM>
__global__ void __launch_bounds__((CW + 1) * 32)
    gemv_q4kt_tma_kernel(const uint8_t* __restrict__ w, const __half* __restrict__ x, GemvOut out, int n_tok,
                         int64_t N, int n_sb, int64_t K, uint32_t magic, int stages, TmaNorm na,
                         unsigned* counter) {
#ifdef VI_BULK_COPY
  constexpr int kChunk = CW * UPW;
  constexpr uint32_t kStageBytes = kChunk * kQ4ktUnitBytes;
  extern __shared__ __align__(128) uint8_t smem[];
  const TmaSmem m = tma_smem(CW, UPW, XS, stages, n_tok, K);
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + m.bars);
  uint64_t* empty = full + kMaxStages;
  float* s_tok = reinterpret_cast<float*>(smem + m.scale);
  int* stage_tile = reinterpret_cast<int*>(smem + m.tiles);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n_tiles = N / 16;
  const int n_chunks = (n_sb + kChunk - 1) / kChunk;
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], CW);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (warp == CW) {  // the producer: its first tile's weights before the PDL wait (no kernel writes them)
    if (lane != 0) return;
    int it = 0;
    bool waited = false;
    for (int64_t tile = blockIdx.x;;) {
      const bool done = tile >= n_tiles;
      const uint8_t* src = w + static_cast<size_t>(tile) * n_sb * kQ4ktUnitBytes;
      for (int ch = 0; ch < (done ? 1 : n_chunks); ++ch, ++it) {
        const int s = it % stages;
        if (it >= stages) mbar_wait(&empty[s], static_cast<uint32_t>(it / stages - 1) & 1u);
        stage_tile[s] = done ? -1 : static_cast<int>(tile);
        if (done) {
          mbar_arrive(&full[s]);
        } else {
          const uint32_t bytes = static_cast<uint32_t>(min(kChunk, n_sb - ch * kChunk)) * kQ4ktUnitBytes;
          mbar_expect_tx(&full[s], bytes);
          bulk_copy(smem + static_cast<size_t>(s) * kStageBytes, src + static_cast<size_t>(ch) * kStageBytes, bytes,
                    &full[s]);
        }
      }
      if (done) break;
      if (!waited) {  // the counter: the launch before may still be resetting it
        pdl_wait();
        waited = true;
      }
      const unsigned v = atomicAdd(counter, 1u);
      if (v + 1 == static_cast<unsigned>(n_tiles)) *counter = 0u;
      tile = int64_t(gridDim.x) + v;
    }
    return;
  }

  pdl_wait();
  pdl_trigger();
  const __half* xb = x;
  if constexpr (XS) {  // the whole of x, once
    __half* xsm = reinterpret_cast<__half*>(smem + m.xs);
    const int64_t n16 = static_cast<int64_t>(n_tok) * K / 8;
    for (int64_t i = threadIdx.x; i < n16; i += CW * 32)
      reinterpret_cast<uint4*>(xsm)[i] = __ldg(reinterpret_cast<const uint4*>(x) + i);
    xb = xsm;
  }
  if constexpr (NORM != kNone) {  // each token's s, once a block (the totals are final here)
    if (threadIdx.x < n_tok)
      s_tok[threadIdx.x] = deferred_norm_scale(__ldg(na.ss_in + 2 * threadIdx.x), __ldg(na.ss_in + 2 * threadIdx.x + 1),
                                               na.inv_d, na.eps);
  }
  if constexpr (XS || NORM != kNone) consumers_sync<CW>();
  const int g = lane >> 2, tg = min(g, n_tok - 1);
  const __half* xs = xb + static_cast<int64_t>(tg) * K + 32 * (lane & 3);
  [[maybe_unused]] const __half* ps = NORM == kConsumeSums ? na.sums_in + static_cast<int64_t>(tg) * (K / 8) : nullptr;
  float(*red)[CW][4][32] = reinterpret_cast<float(*)[CW][4][32]>(smem + m.red);
  int it = 0, parity = 0;
  for (;; parity ^= 1) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int64_t tile = -1;
    for (int ch = 0; ch < n_chunks; ++ch, ++it) {
      const int s = it % stages;
      mbar_wait(&full[s], static_cast<uint32_t>(it / stages) & 1u);
      tile = stage_tile[s];
      if (tile < 0) break;  // the producer's end mark (always a tile's first chunk)
      const uint8_t* stage = smem + static_cast<size_t>(s) * kStageBytes;
#pragma unroll
      for (int j = 0; j < UPW; ++j) {
        const int u = warp + CW * j, sb = ch * kChunk + u;
        if (sb < n_sb) {
          const uint8_t* un = stage + u * kQ4ktUnitBytes;
          HalfSb h0, h1;
          h0.q[0] = *reinterpret_cast<const uint4*>(un + 16 * lane);
          h0.q[1] = *reinterpret_cast<const uint4*>(un + 512 + 16 * lane);
          h1.q[0] = *reinterpret_cast<const uint4*>(un + 1024 + 16 * lane);
          h1.q[1] = *reinterpret_cast<const uint4*>(un + 1536 + 16 * lane);
          const uint2 sw = *reinterpret_cast<const uint2*>(un + 2048 + 8 * lane);
          const uint2 dd = *reinterpret_cast<const uint2*>(un + 2304 + 8 * g);
          const __half* xv = xs + 256 * sb;
          float t[4], uu[4];
          if constexpr (NORM == kConsumeSums) {  // q4kt_walk.cuh's multiply with XSUM
            const uint4 sums = load_sb_sums(ps + 32 * sb);
            mma_half<true, false, !XS>(h0, sw.x, sw.y, sw.x, sw.y, xv, 0x4040u, 0x4141u, magic, t, uu);
            mma_half<false, false, !XS>(h1, sw.x, sw.y, sw.x, sw.y, xv + 128, 0x4242u, 0x4343u, magic, t, uu);
            mins_from_sums(sw.x, sw.y, sums, uu);
          } else {
            mma_half<true, true, !XS>(h0, sw.x, sw.y, sw.x, sw.y, xv, 0x4040u, 0x4141u, magic, t, uu);
            mma_half<false, true, !XS>(h1, sw.x, sw.y, sw.x, sw.y, xv + 128, 0x4242u, 0x4343u, magic, t, uu);
          }
          const uint32_t d2[2] = {dd.x, dd.y};
          apply_scales(d2, t, uu, acc);
        }
      }
      __syncwarp();
      if (lane == 0) mbar_arrive(&empty[s]);
    }
    if (tile < 0) break;
    // The warps' sums are added by the register walk's own ends (write_tile_sums, write_swiglu_sums),
    // so in its order; only the stash is done here, behind the consumers' barrier (the producer
    // warp joins no block barrier).
#pragma unroll
    for (int i = 0; i < 4; ++i) red[parity][warp][i][lane] = acc[i];
    consumers_sync<CW>();
    const float* tok_scale = NORM != kNone ? s_tok : nullptr;
    if constexpr (SWIGLU) {
      write_swiglu_sums<CW, 1>(reinterpret_cast<const float(*)[1][4][32]>(red[parity]), out.y[0], tile * 8, N / 2,
                               n_tok, tok_scale);
    } else {
      __half* y;
      int64_t begin, rows;
      gemv_out_part(out, tile * 16, y, begin, rows);
      write_tile_sums<CW>(red[parity], y, tile * 16 - begin, rows, n_tok, rows, tok_scale);
    }
  }
#else
  __trap();
#endif
}

std::atomic<int> g_route_override{-1};
std::atomic<uint64_t> g_launches{0};

template <int CW, int UPW, bool XS, bool SWIGLU, int NORM>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, const Q4ktTmaShape& s,
            const TmaNorm& na) {
  auto kernel = gemv_q4kt_tma_kernel<CW, UPW, XS, SWIGLU, NORM>;
  const int64_t N = w.dim(0), K = w.dim(1);
  const int n_tok = static_cast<int>(x.rows());
  const size_t smem = tma_smem(CW, UPW, XS, s.stages, n_tok, K).total;
  static const bool attr = [&] {  // the largest opt-in size, once per kernel
    VI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kMaxSmem)));
    return true;
  }();
  (void)attr;
  // Blocks a SM for this size, asked once per size (not again in every launch of a decode step).
  static std::mutex mu;
  static std::map<size_t, int> fits;
  int fit = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto [at, fresh] = fits.emplace(smem, 0);
    if (fresh) VI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&at->second, kernel, (CW + 1) * 32, smem));
    fit = at->second;
  }
  VI_CHECK(fit >= 1, "gemv_q4kt_tma: {} bytes of shared memory a block do not fit", smem);
  const int64_t blocks = std::min<int64_t>(N / 16, int64_t(current_device().sm_count) * std::min(fit, s.blocks));
  auto* counter =
      static_cast<unsigned*>(thread_workspace_zeroed(ctx, WorkspaceSlot::kGemvStreamTickets, sizeof(unsigned)));
  g_launches.fetch_add(1, std::memory_order_relaxed);
  VI_CUDA_CHECK(pdl_launch(kernel, dim3(static_cast<unsigned>(blocks)), dim3((CW + 1) * 32), smem, stream_of(ctx),
                           w.ptr<uint8_t>(), x.ptr<__half>(), out, n_tok, N, static_cast<int>(K / kQKK), K, kQ4krMagic,
                           s.stages, na, counter));
}

// The compiled forms: plain GEMVs in five, the SwiGLU and the consumers in the two 4-warp forms
// of two units a warp.
template <bool SWIGLU, int NORM>
void dispatch(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, const Q4ktTmaShape& s,
              const TmaNorm& na = {}) {
  const int key = 100 * s.consumers + 10 * s.per_warp + (s.x_shared ? 1 : 0);
  if constexpr (!SWIGLU && NORM == kNone) {
    switch (key) {
      case 410: launch<4, 1, false, false, kNone>(ctx, x, w, out, s, na); return;
      case 810: launch<8, 1, false, false, kNone>(ctx, x, w, out, s, na); return;
      case 811: launch<8, 1, true, false, kNone>(ctx, x, w, out, s, na); return;
      default: break;
    }
  }
  switch (key) {
    case 420: launch<4, 2, false, SWIGLU, NORM>(ctx, x, w, out, s, na); return;
    case 421: launch<4, 2, true, SWIGLU, NORM>(ctx, x, w, out, s, na); return;
    default: VI_FAIL("gemv_q4kt_tma: no kernel for {}", gemv_q4kt_tma_shape_name(s));
  }
}

[[maybe_unused]] bool form_compiled(const Q4ktTmaShape& s, bool plain) {
  if (s.consumers == 4 && s.per_warp == 2) return true;
  return plain && ((s.consumers == 4 && s.per_warp == 1 && !s.x_shared) || (s.consumers == 8 && s.per_warp == 1));
}

}  // namespace

std::string gemv_q4kt_tma_shape_name(const Q4ktTmaShape& s) {
  return fmt::format("copy engine, {} warps x {} units, {} stages, {} blocks/SM{}", s.consumers, s.per_warp, s.stages,
                     s.blocks, s.x_shared ? ", x shared" : "");
}

std::vector<Q4ktTmaShape> gemv_q4kt_tma_shapes() {
  return {{4, 2, true, 4, 2}, {4, 2, true, 3, 3}, {4, 2, false, 4, 2}, {4, 1, false, 6, 3}, {8, 1, true, 4, 2},
          {8, 1, true, 3, 3}};
}

bool gemv_q4kt_tma_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w, const Q4ktTmaShape& s,
                            bool swiglu) {
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
  if (!sm80_code(ctx) || current_device().code_cc < 90) return false;
  if (w.dtype() != (swiglu ? DType::Q4_KTS : DType::Q4_KT) || w.ndim() != 2 || w.dim(0) % 16 != 0) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8 || x.cols() != w.dim(1)) return false;
  if (s.stages < 2 || s.stages > kMaxStages || s.blocks < 1 || !form_compiled(s, !swiglu)) return false;
  if (!is_aligned(w.data(), 16) || !is_aligned(x.data(), 16) || w.dim(1) >= (int64_t(1) << 31)) return false;
  return tma_smem(s.consumers, s.per_warp, s.x_shared, s.stages, static_cast<int>(x.rows()), w.dim(1)).total <=
         kMaxSmem;
#else
  (void)ctx, (void)x, (void)w, (void)s, (void)swiglu;
  return false;
#endif
}

void gemv_q4kt_tma(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, const Q4ktTmaShape& s) {
  VI_CHECK(gemv_q4kt_tma_supports(ctx, x, w, s), "gemv_q4kt_tma: cannot take x {} {} and w {} {} as {}",
           dtype_name(x.dtype()), x.shape_str(), dtype_name(w.dtype()), w.shape_str(), gemv_q4kt_tma_shape_name(s));
  VI_CHECK(y.rows() == x.rows() && y.cols() == w.dim(0), "gemv_q4kt_tma: y {} for x {} and w {}", y.shape_str(),
           x.shape_str(), w.shape_str());
  dispatch<false, kNone>(ctx, x, w, gemv_out_whole(y, w.dim(0)), s);
}

void gemv_q4kt_tma_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h,
                          const Q4ktTmaShape& s) {
  VI_CHECK(gemv_q4kt_tma_supports(ctx, x, w, s, true), "gemv_q4kt_tma_swiglu: cannot take x {} {} and w {} {} as {}",
           dtype_name(x.dtype()), x.shape_str(), dtype_name(w.dtype()), w.shape_str(), gemv_q4kt_tma_shape_name(s));
  VI_CHECK(h.rows() == x.rows() && h.cols() * 2 == w.dim(0), "gemv_q4kt_tma_swiglu: h {} for x {} and w {}",
           h.shape_str(), x.shape_str(), w.shape_str());
  dispatch<true, kNone>(ctx, x, w, gemv_out_whole(h, w.dim(0) / 2), s);
}

const Q4ktTmaShape* gemv_q4kt_tma_route(bool swiglu) {
  static const int env = [] {
    const char* v = std::getenv("VI_Q4KT_TMA");
    return v == nullptr ? 0 : std::atoi(v);
  }();
  static const std::vector<Q4ktTmaShape> shapes = gemv_q4kt_tma_shapes();
  const int o = g_route_override.load(std::memory_order_relaxed);
  int n = o >= 0 ? o : env;
  if (n > 100) {
    n -= 100;
  } else if (!swiglu) {
    return nullptr;
  }
  return n >= 1 && n <= static_cast<int>(shapes.size()) ? &shapes[static_cast<size_t>(n - 1)] : nullptr;
}
void set_q4kt_tma_route(int n) { g_route_override.store(n, std::memory_order_relaxed); }
uint64_t gemv_q4kt_tma_launches() { return g_launches.load(std::memory_order_relaxed); }

bool gemv_q4kt_tma_consume(const ops::Context& ctx, const Tensor& u, const Tensor& w, bool swiglu,
                           const std::vector<Tensor*>& outs, const void* ss_in, float inv_d, float eps,
                           const void* sums_in) {
  // One token only: at T = 4 the activations' copy takes the shared memory of a block's second
  // ring (docs/notes/gemv.md run 45: the 4-token round 8.07 against 7.19 ms on an H100).
  const Q4ktTmaShape* s = gemv_q4kt_tma_route(swiglu);
  if (s == nullptr || u.rows() != 1 || !gemv_q4kt_tma_supports(ctx, u, w, *s, swiglu) || !is_aligned(ss_in, 16))
    return false;
  const TmaNorm na{static_cast<const uint4*>(ss_in), inv_d, eps, static_cast<const __half*>(sums_in)};
  const GemvOut out = swiglu ? gemv_out_whole(*outs.at(0), w.dim(0) / 2)
                             : outs.size() == 1 ? gemv_out_whole(*outs[0], w.dim(0))
                                                : gemv_out_parts(outs, w.dim(0), u.rows(), "gemv_q4kt_tma_consume");
  if (swiglu)
    sums_in ? dispatch<true, kConsumeSums>(ctx, u, w, out, *s, na) : dispatch<true, kConsume>(ctx, u, w, out, *s, na);
  else
    sums_in ? dispatch<false, kConsumeSums>(ctx, u, w, out, *s, na) : dispatch<false, kConsume>(ctx, u, w, out, *s, na);
  return true;
}

}  // namespace vi::cuda
