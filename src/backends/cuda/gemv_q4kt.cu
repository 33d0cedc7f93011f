// Tensor-core decode GEMV on Q4_KT weights: see gemv_q4kt.cuh for the plan, core/dtype.h for the
// layout and q4kr_mma.cuh for the arithmetic.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_out.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "backends/cuda/q4kr_tiles.cuh"
#include "backends/cuda/q4kt_deferred.cuh"
#include "backends/cuda/q4kt_ring_walk.cuh"
#include "backends/cuda/q4kt_walk.cuh"
#include "ops/copy.h"
#include "ops/deferred_norm.h"
#include "ops/memory.h"

namespace vi::cuda {
namespace {

// One warp per unit (tile, super-block): lane L gathers its bytes from the Q4_KR rows.
__global__ void q4kt_from_q4kr_kernel(const uint8_t* __restrict__ w, size_t row_bytes, uint8_t* __restrict__ out,
                                      int n_sb, int64_t units) {
  const int64_t unit = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t tile = unit / n_sb;
  const int sb = static_cast<int>(unit % n_sb), pos = sb & 3;
  const uint8_t* r[2];
  for (int h = 0; h < 2; ++h)
    r[h] = w + static_cast<size_t>(tile * 16 + g + 8 * h) * row_bytes + static_cast<size_t>(sb >> 2) * kQ4krBlkBytes;
  uint8_t* u = out + unit * kQ4ktUnitBytes;
  for (int k = 0; k < 4; ++k)
    *reinterpret_cast<uint4*>(u + 512 * k + 16 * lane) =
        *reinterpret_cast<const uint4*>(r[k & 1] + 128 * pos + 64 * (k >> 1) + 16 * c);
  uint32_t words[2];
  for (int h = 0; h < 2; ++h) {
    const uint8_t* sm = r[h] + kQ4krSmOff + 16 * pos;  // sc[0..3], m[0..3], sc[4..7], m[4..7]
    words[h] = uint32_t(sm[c]) | uint32_t(sm[4 + c]) << 8 | uint32_t(sm[8 + c]) << 16 | uint32_t(sm[12 + c]) << 24;
  }
  *reinterpret_cast<uint2*>(u + 2048 + 8 * lane) = make_uint2(words[0], words[1]);
  if (c == 0)
    *reinterpret_cast<uint2*>(u + 2304 + 8 * g) =
        make_uint2(*reinterpret_cast<const uint32_t*>(r[0] + kQ4krDmOff + 4 * pos),
                   *reinterpret_cast<const uint32_t*>(r[1] + kQ4krDmOff + 4 * pos));
}

// A block of 4 warps per 16-row tile, walking it as q4kt_walk.cuh describes (SLOTS = 0) or with
// each warp's weights in a ring of SLOTS shared-memory slots (q4kt_ring_walk.cuh: dynamic shared
// memory of WARPS x SLOTS units; WARPS 8 splits each tile's super-blocks over 8 warps). MINB:
// blocks per SM the registers are budgeted for. SWIGLU: the fused gate|up + SwiGLU over half
// tiles (q4kt_walk.cuh; register walk only). NORM: the deferred norm's part (q4kt_deferred.cuh;
// produce only without SWIGLU; with 8 warps, warps 0-3 stage and scale as in a 4-warp block).
template <int MINB, bool SWIGLU, int NORM = kNormNone, int SLOTS = 0, int WARPS = 4>
__global__ void __launch_bounds__(32 * WARPS, MINB)
    gemv_q4kt_kernel(const uint8_t* __restrict__ w, const __half* __restrict__ x, GemvOut out, int n_tok, int64_t N,
                     int n_sb, int64_t K, uint32_t magic, NormArgs na) {
  static_assert(!(SWIGLU && NORM == kNormProduce), "the producer writes the residual, not h");
  static_assert(!(SWIGLU && SLOTS > 0), "the ring walks whole tiles");
  static_assert(WARPS == 4 || SLOTS > 0, "8 warps a tile only with the ring");
  extern __shared__ __align__(128) uint8_t q4kt_ring[];
  __shared__ uint64_t q4kt_ring_bars[WARPS * (SLOTS > 0 ? SLOTS : 1)];
  const int warp = threadIdx.x >> 5;
  auto walk = [&] {
    if constexpr (SLOTS > 0) {
      return Q4ktRingWalk<SLOTS, WARPS>(w + int64_t(blockIdx.x) * n_sb * kQ4ktUnitBytes, x, n_tok, n_sb, K, warp,
                                        q4kt_ring + q4kt_ring_bytes(warp, SLOTS), q4kt_ring_bars + warp * SLOTS);
    } else {
      return Q4ktTileWalk<SWIGLU>(w, x, n_tok, N, n_sb, K, blockIdx.x);
    }
  }();
  walk.start();
  [[maybe_unused]] __shared__ ProduceStage produce;
  [[maybe_unused]] __shared__ ConsumeStage consume;
  if constexpr (NORM == kNormProduce) stage_norm_weight(na, produce);
  pdl_wait();
  pdl_trigger();
  if constexpr (NORM == kNormProduce) stage_residual(na, N, n_tok, produce);
  if constexpr (NORM == kNormConsume)
    if (warp < 4) stage_totals(na, n_tok, consume);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  walk.run(magic, acc);
  if constexpr (NORM == kNormProduce) {
    finish_deferred_tile<WARPS>(acc, na, produce, N, n_tok);
  } else if constexpr (NORM == kNormConsume) {
    __shared__ float s_warp[4][8];
    if (warp < 4) warp_scales(na, n_tok, consume, s_warp[warp]);
    // Only threads below 128 write (token parity (k >> 5) & 1: the scales of warp k >> 5).
    finish_gemv_out_tile<SWIGLU, WARPS>(acc, out, N, n_tok, s_warp[warp & 3]);
  } else {
    finish_gemv_out_tile<SWIGLU, WARPS>(acc, out, N, n_tok);
  }
}

template <int MINB, bool SWIGLU, int NORM, int SLOTS, int WARPS = 4>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, const NormArgs& na) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const unsigned blocks = static_cast<unsigned>(N / 16);  // SWIGLU: F / 8 blocks of 8 gate + 8 up rows
  auto* kernel = gemv_q4kt_kernel<MINB, SWIGLU, NORM, SLOTS, WARPS>;
  const size_t smem = q4kt_ring_bytes(WARPS, SLOTS);
  if constexpr (SLOTS > 0) {
    static std::once_flag once;  // one per kernel: this function is instantiated per kernel
    std::call_once(once, [&] { prepare_ring_kernel(kernel, smem, MINB); });
  }
  VI_CUDA_CHECK(pdl_launch(kernel, dim3(blocks), dim3(32 * WARPS), smem, stream_of(ctx), w.ptr<uint8_t>(),
                           x.ptr<__half>(), out, static_cast<int>(x.rows()), N, static_cast<int>(K / kQKK), K,
                           kQ4krMagic, na));
}

// Every compiled shape: the register walk at 3 and 4 blocks per SM; the ring at 5 blocks of 4
// warps and 3 slots (plain GEMV only: the one shape of 4 warps it won with, run 30), and at 3
// blocks of 8 warps and 3 or 2 slots (not the fused SwiGLU).
template <bool SWIGLU, int NORM = kNormNone>
void launch_for(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, Q4ktShape shape,
                const NormArgs& na = {}) {
  const int code = 100 * shape.warps + 10 * shape.blocks + shape.slots;
  if (shape.slots > 0)
    VI_CHECK(q4kt_ring_available(ctx), "gemv_q4kt: the shared-memory ring needs sm_90 code and CUDA 12");
  if constexpr (!SWIGLU) {
    switch (code) {
      case 833: return launch<3, false, NORM, 3, 8>(ctx, x, w, out, na);
      case 832: return launch<3, false, NORM, 2, 8>(ctx, x, w, out, na);
      case 453:
        if constexpr (NORM == kNormNone) return launch<5, false, kNormNone, 3>(ctx, x, w, out, na);
        break;
      default: break;
    }
  }
  switch (code) {
    case 430: launch<3, SWIGLU, NORM, 0>(ctx, x, w, out, na); break;
    case 440: launch<4, SWIGLU, NORM, 0>(ctx, x, w, out, na); break;
    default: VI_FAIL("gemv_q4kt: no kernel for {}", gemv_q4kt_shape_name(shape));
  }
}

}  // namespace

Tensor q4kt_from_q4kr(ops::Context& ctx, const Tensor& w) {
  return repack_q4kr_tiles(ctx, w, DType::Q4_KT, q4kt_from_q4kr_kernel);
}

bool q4kt_ring_available(const ops::Context& ctx) {
#if CUDART_VERSION >= 12000
  return sm80_code(ctx) && current_device().code_cc >= 90;
#else
  (void)ctx;
  return false;
#endif
}

std::string gemv_q4kt_shape_name(Q4ktShape s) {
  return s.slots > 0 ? fmt::format("ring of {} slots, {} warps a tile, {} blocks/SM", s.slots, s.warps, s.blocks)
                     : fmt::format("tiled, 2 ahead, {} blocks/SM", s.blocks);
}

namespace {
std::atomic<int> ring_override{-1};  // set_q4kt_ring_allowed's; -1: the environment decides
// Whether the matrices of up to 8192 rows take the 8-warp ring where it can run: with
// set_q4kt_ring_allowed(1), or VI_Q4KT_RING8=1 (read once per process).
bool ring8_wanted() {
  static const bool env_on = [] {
    const char* v = std::getenv("VI_Q4KT_RING8");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  const int o = ring_override.load(std::memory_order_relaxed);
  return o < 0 ? env_on : o > 0;
}
}  // namespace

void set_q4kt_ring_allowed(int allowed) { ring_override.store(allowed, std::memory_order_relaxed); }

namespace {
// The register walk's shape, and the fused SwiGLU's (the ring has no half-tile form).
Q4ktShape register_shape(int64_t N) {
  // Measured on the H200 at the 27B shapes (docs/notes/gemv.md run 18): up to 8192 rows (at most
  // 512 tiles) 3 blocks per SM, which spreads the tiles over more SMs (FFN down 17.0 us against
  // 21.1 at 4); from 14336 rows 4 (gate|up 33.2 us against 35.2, the head 204 against 226).
  return Q4ktShape{N <= 8192 ? 3 : 4, 0};
}
}  // namespace

Q4ktShape gemv_q4kt_default_shape(const ops::Context& ctx, int64_t N) {
  if (N <= 8192 && ring8_wanted() && q4kt_ring_available(ctx)) return Q4ktShape{3, 3, 8};
  return register_shape(N);
}

std::vector<Q4ktShape> gemv_q4kt_shapes(const ops::Context& ctx) {
  std::vector<Q4ktShape> v = {{3, 0}, {4, 0}};
  if (q4kt_ring_available(ctx)) v.insert(v.end(), {{5, 3}, {3, 3, 8}, {3, 2, 8}});
  return v;
}

bool gemv_q4kt_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  if (!sm80_code(ctx) || w.dtype() != DType::Q4_KT) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  return w.dim(1) < (int64_t(1) << 31) && is_aligned(w.data(), 16) && is_aligned(x.data(), 16) &&
         (x.cols() * 2) % 16 == 0;
}

void gemv_q4kt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, Q4ktShape shape) {
  launch_for<false>(ctx, x, w, gemv_out_whole(y, w.dim(0)),
                    shape.blocks == 0 ? gemv_q4kt_default_shape(ctx, w.dim(0)) : shape);
}

bool gemv_q4kt_split_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w,
                              const std::vector<Tensor*>& parts) {
  if (!gemv_q4kt_supports(ctx, x, w) || parts.empty() || parts.size() > ops::kSplitMaxParts) return false;
  return std::all_of(parts.begin(), parts.end(),
                     [](const Tensor* p) { return p->dim(1) % kTiledRows == 0 && p->dim(1) > 0; });
}

void gemv_q4kt_split(const ops::Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts) {
  launch_for<false>(ctx, x, w, gemv_out_parts(parts, w.dim(0), x.rows(), "gemv_q4kt_split"),
                    gemv_q4kt_default_shape(ctx, w.dim(0)));
}

bool gemv_q4kt_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  return gemv_q4kt_supports(ctx, x, w) && w.dim(0) % 32 == 0;
}

void gemv_q4kt_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h) {
  VI_CHECK(w.dim(0) % 32 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_q4kt_swiglu: h [{}, {}] does not match x rows {} and a Q4_KT gate|up weight of {} rows "
           "(a multiple of 32)",
           h.rows(), h.cols(), x.rows(), w.dim(0));
  launch_for<true>(ctx, x, w, gemv_out_whole(h, w.dim(0) / 2), register_shape(w.dim(0)));
}

bool gemv_q4kt_add_deferred_norm_supports(const ops::Context& ctx, const Tensor& a, const Tensor& w, const Tensor& x) {
  return gemv_q4kt_supports(ctx, a, w) && x.dtype() == DType::F16 && x.ndim() == 2 && x.rows() == a.rows() &&
         x.cols() == w.dim(0) && w.dim(0) % 16 == 0 && is_aligned(x.data(), 16);
}

void gemv_q4kt_add_deferred_norm(const ops::Context& ctx, const Tensor& a, const Tensor& w, Tensor& x,
                                 const Tensor& norm_w, float w_offset, ops::DeferredNorm& out) {
  NormArgs na{};
  na.x = x.ptr<__half>();
  na.w = norm_w.ptr<float>();
  na.w_offset = w_offset;
  na.u = out.u.ptr<__half>();
  na.ss = out.ss.ptr<unsigned long long>();
  launch_for<false, kNormProduce>(ctx, a, w, GemvOut{}, gemv_q4kt_default_shape(ctx, w.dim(0)), na);
}

bool gemv_q4kt_deferred_supports(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                                 ops::DeferredConsumer kind, const std::vector<Tensor*>& parts) {
  // The totals are staged in 16-byte copies (ss rows of kSsWords u64, 16-byte aligned).
  if (!gemv_q4kt_supports(ctx, in.u, w) || w.dim(1) != in.u.cols()) return false;
  if (in.ss.cols() != kSsWords || !is_aligned(in.ss.data(), 16)) return false;
  switch (kind) {
    case ops::DeferredConsumer::kMatmul: return true;
    case ops::DeferredConsumer::kSwiglu: return gemv_q4kt_swiglu_supports(ctx, in.u, w);
    case ops::DeferredConsumer::kSplit: return parts.empty() || gemv_q4kt_split_supports(ctx, in.u, w, parts);
  }
  return false;
}

void gemv_q4kt_deferred(const ops::Context& ctx, const ops::DeferredNorm& in, const Tensor& w,
                        ops::DeferredConsumer kind, const std::vector<Tensor*>& outs) {
  const NormArgs na = consume_args(in);
  auto run = [&](auto swiglu, const GemvOut& out, Q4ktShape shape) {
    launch_for<decltype(swiglu)::value, kNormConsume>(ctx, in.u, w, out, shape, na);
  };
  const Q4ktShape shape = gemv_q4kt_default_shape(ctx, w.dim(0));
  switch (kind) {
    case ops::DeferredConsumer::kMatmul:
      run(std::false_type{}, gemv_out_whole(*outs.at(0), w.dim(0)), shape);
      break;
    case ops::DeferredConsumer::kSplit:
      run(std::false_type{}, gemv_out_parts(outs, w.dim(0), in.u.rows(), "gemv_q4kt_deferred"), shape);
      break;
    case ops::DeferredConsumer::kSwiglu:
      VI_CHECK(outs.at(0)->cols() * 2 == w.dim(0) && outs.at(0)->rows() == in.u.rows(),
               "gemv_q4kt_deferred: h [{}, {}] for a gate|up weight of {} rows and {} tokens", outs.at(0)->rows(),
               outs.at(0)->cols(), w.dim(0), in.u.rows());
      run(std::true_type{}, gemv_out_whole(*outs.at(0), w.dim(0) / 2), register_shape(w.dim(0)));
      break;
  }
}

}  // namespace vi::cuda
