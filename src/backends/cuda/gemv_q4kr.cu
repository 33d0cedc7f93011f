// Tensor-core decode GEMV on Q4_KR weights: see gemv_q4kr.cuh for the plan and the numerics.
#include <type_traits>

#include "backends/cuda/bulk_copy.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_q4kr.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"

namespace vi::cuda {
namespace {

// ---- Register kernel (sm_80+) ----
// A block of WARPS warps (a multiple of 4) owns a tile of 16 rows; warp w takes super-blocks
// w, w + WARPS, ... — always position w % 4 of a Q4_KR block, so its next super-block is one
// fixed distance on: a pointer increment and immediate offsets, no address arithmetic per load.
// Both halves of a super-block go through the same lane, so d and dmin are applied once per
// 256 values; half 1 loads while half 0 multiplies, and the next half 0 while half 1 does.
// Rows past N read row N - 1 and tokens past T token T - 1 (mma columns never stored), so every
// load is in bounds without a test per step.
// MINB: blocks per SM the registers are budgeted for (4: 114 registers, the compiler's choice;
// 6: 80 with a few bytes of spills, for more warps to hide the latency; it measured slower).
// Not routed since run 13 (docs/notes/gemv.md): the deep kernel at 4 blocks per SM is faster on
// every shape; kept for the variant tests and benchmarks.
template <int WARPS, int MINB>
__global__ void __launch_bounds__(32 * WARPS, MINB)
    gemv_q4kr_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                     __half* __restrict__ y, int n_tok, int64_t N, int n_sb, int64_t K, uint32_t magic) {
  static_assert(WARPS % 4 == 0, "a warp keeps one position of the 4-super-block Q4_KR block");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  const size_t first = static_cast<size_t>(warp >> 2) * kQ4krBlkBytes;
  const int pos = warp & 3;
  const uint8_t* r0 = w + static_cast<size_t>(min(n0 + g, N - 1)) * row_bytes + first;
  const uint8_t* r1 = w + static_cast<size_t>(min(n0 + g + 8, N - 1)) * row_bytes + first;
  // Rows g, g + 8 of the warp's first super-block: quants (this lane's 16 bytes of half 0),
  // scales and mins, d and dmin.
  const uint8_t* q0 = r0 + 128 * pos + 16 * c;
  const uint8_t* q1 = r1 + 128 * pos + 16 * c;
  const uint8_t* s0 = r0 + kQ4krSmOff + 16 * pos;
  const uint8_t* s1 = r1 + kQ4krSmOff + 16 * pos;
  const uint8_t* d0 = r0 + kQ4krDmOff + 4 * pos;
  const uint8_t* d1 = r1 + kQ4krDmOff + 4 * pos;
  const __half* xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * warp + 32 * c;
  constexpr int kStride = (WARPS / 4) * kQ4krBlkBytes;  // bytes from one of the warp's super-blocks to the next
  const uint32_t sel = 0x4040u | static_cast<uint32_t>(c) | (static_cast<uint32_t>(c) << 8);

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  HalfSb st0, st1;
  SbScales sc, sc_next;
  if (warp < n_sb) {
    load_half<0, true>(q0, q1, st0);
    load_scales<true>(s0, s1, d0, d1, sc);
  }
  // The weights are no kernel's output, so their first loads go out before the wait: under PDL
  // they overlap the previous kernel's tail (pdl.cuh). x and y only after it.
  pdl_wait();
  pdl_trigger();
  // One super-block; MORE: the next one's half 0 and scales load while half 1 multiplies. The
  // last one is peeled off rather than predicated: with the loads under a branch, ptxas sinks
  // them to the end of the loop, where they no longer overlap anything.
  auto sb_step = [&](auto more) {
    load_half<1, true>(q0, q1, st1);
    float t[4], u[4];
    mma_half<true>(st0, sc.sm[0].x, sc.sm[1].x, sc.sm[0].y, sc.sm[1].y, xs, sel, sel, magic, t, u);
    if constexpr (decltype(more)::value) {
      load_half<0, true>(q0 + kStride, q1 + kStride, st0);
      load_scales<true>(s0 + kStride, s1 + kStride, d0 + kStride, d1 + kStride, sc_next);
    }
    mma_half<false>(st1, sc.sm[0].z, sc.sm[1].z, sc.sm[0].w, sc.sm[1].w, xs + 128, sel, sel, magic, t, u);
    apply_scales(sc.dd, t, u, acc);
  };
  int s = warp;
  for (; s + WARPS < n_sb; s += WARPS) {
    sb_step(std::true_type{});
    sc = sc_next;
    q0 += kStride;
    q1 += kStride;
    s0 += kStride;
    s1 += kStride;
    d0 += kStride;
    d1 += kStride;
    xs += 256 * WARPS;
  }
  if (s < n_sb) sb_step(std::false_type{});
  __shared__ float red[WARPS][4][32];
  store_tile_sums<WARPS>(acc, red, y, n0, N, n_tok, N);
}

// ---- Deep register kernel (sm_80+) ----
// The register kernel with DEPTH whole super-blocks per warp loaded ahead instead of one half:
// for matrices of few rows (5120: 320 tiles, 2.4 blocks of 4 warps per SM), where the warps
// are too few to cover the memory latency and registers are not what limits the blocks per SM.
// A warp takes super-blocks warp, warp + 4, ... as in the register kernel; buffer j holds its
// super-blocks j, j + DEPTH, ..., refilled right after it is multiplied. MINB 3 leaves the
// compiler ~168 registers; 2 ahead also fits 4 blocks per SM (125, no spills) for wide matrices.
// SWIGLU: w is a stacked gate|up [2F, K] and y the SwiGLU output h [T, F]: tile b takes gate rows
// 8b + g as its rows g and the up rows F + 8b + g as its rows g + 8 (write_swiglu_sums).
template <int DEPTH, int MINB, bool SWIGLU = false>
__global__ void __launch_bounds__(128, MINB)
    gemv_q4kr_deep_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                          __half* __restrict__ y, int n_tok, int64_t N, int n_sb, int64_t K, uint32_t magic) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16, F = N / 2;
  int64_t row_a = min(n0 + g, N - 1), row_b = min(n0 + g + 8, N - 1);
  if constexpr (SWIGLU) {
    row_a = min(int64_t(blockIdx.x) * 8 + g, F - 1);
    row_b = F + row_a;
  }
  const uint8_t* r0 = w + static_cast<size_t>(row_a) * row_bytes;
  const uint8_t* r1 = w + static_cast<size_t>(row_b) * row_bytes;
  const uint8_t* q0 = r0 + 128 * warp + 16 * c;
  const uint8_t* q1 = r1 + 128 * warp + 16 * c;
  const uint8_t* s0 = r0 + kQ4krSmOff + 16 * warp;
  const uint8_t* s1 = r1 + kQ4krSmOff + 16 * warp;
  const uint8_t* d0 = r0 + kQ4krDmOff + 4 * warp;
  const uint8_t* d1 = r1 + kQ4krDmOff + 4 * warp;
  const __half* xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * warp + 32 * c;
  const uint32_t sel = 0x4040u | static_cast<uint32_t>(c) | (static_cast<uint32_t>(c) << 8);
  const int n_mine = warp < n_sb ? (n_sb - warp + 3) / 4 : 0;  // this warp's super-blocks

  struct Sb {
    HalfSb h[2];
    SbScales sc;
  };
  // The warp's super-block i, with the pointers at its super-block i0: at byte distance
  // (i - i0) * kQ4krBlkBytes, an immediate when i - i0 is.
  auto load_sb = [&](int d, Sb& b) {
    const size_t off = static_cast<size_t>(d) * kQ4krBlkBytes;
    load_half<0, true>(q0 + off, q1 + off, b.h[0]);
    load_half<1, true>(q0 + off, q1 + off, b.h[1]);
    load_scales<true>(s0 + off, s1 + off, d0 + off, d1 + off, b.sc);
  };
  Sb buf[DEPTH];
#pragma unroll
  for (int j = 0; j < DEPTH; ++j)
    if (j < n_mine) load_sb(j, buf[j]);
  pdl_wait();  // after the first weight loads, as in the register kernel
  pdl_trigger();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int i0 = 0; i0 < n_mine; i0 += DEPTH) {
#pragma unroll
    for (int j = 0; j < DEPTH; ++j) {
      if (i0 + j < n_mine) {
        float t[4], u[4];
        mma_sb(buf[j].h[0], buf[j].h[1], buf[j].sc, xs + 1024 * j, sel, magic, t, u);
        apply_scales(buf[j].sc.dd, t, u, acc);
        if (i0 + j + DEPTH < n_mine) load_sb(j + DEPTH, buf[j]);
      }
    }
    q0 += DEPTH * kQ4krBlkBytes;
    q1 += DEPTH * kQ4krBlkBytes;
    s0 += DEPTH * kQ4krBlkBytes;
    s1 += DEPTH * kQ4krBlkBytes;
    d0 += DEPTH * kQ4krBlkBytes;
    d1 += DEPTH * kQ4krBlkBytes;
    xs += DEPTH * 1024;
  }
  finish_split_k_tile<SWIGLU>(acc, y, N, n_tok, int64_t(blockIdx.x) * 16, N, blockIdx.x);
}

// ---- Bulk-copy ring kernel (sm_90, CUDA 12+) ----
// What bounds the register kernel (ncu, docs/notes/gemv.md run 10): latency. The bytes in flight
// are the registers of one half super-block per warp (~16 KB per SM at 16 warps), and stalls on
// those loads are half of all cycles. Here the weights travel by the copy engine into a ring of
// STAGES shared-memory slots, each one Q4_KR block (1024 values) of the tile's 16 rows, filled
// with one bulk copy per row (cp.async.bulk, completion counted in bytes on an mbarrier): up to
// STAGES x 11 KB in flight per block with no registers held. The 4 warps read their super-block
// (position = warp) of each slot from shared memory and multiply as the register kernel does.
// Measured (run 11): faster only on the head (many waves of blocks); with few tiles the
// per-slot chain inside a block (wait, shared loads, barrier, refill) is the limit.
// Slot rows are kPitch bytes apart (592 + 112): rows g and g + 1 then start 64 bytes apart in
// the bank space, so a quarter-warp's 16-byte reads of two rows do not collide.
constexpr int kPitch = 704;
[[maybe_unused]] constexpr int kSlotBytes = 16 * kPitch;  // only with VI_BULK_COPY

template <int STAGES>
__global__ void __launch_bounds__(128)
    gemv_q4kr_bulk_kernel(const uint8_t* __restrict__ w, size_t row_bytes, const __half* __restrict__ x,
                          __half* __restrict__ y, int n_tok, int64_t N, int n_blk, int64_t K, uint32_t magic) {
#ifdef VI_BULK_COPY
  __shared__ __align__(128) uint8_t ring[STAGES][kSlotBytes];
  __shared__ uint64_t full[STAGES];
  __shared__ float red[4][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t n0 = int64_t(blockIdx.x) * 16;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) mbar_init(&full[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  // Warp 0 fills the slots: lane r < 16 copies row r's block (rows past N: row N - 1).
  const uint8_t* src = w + static_cast<size_t>(min(n0 + (lane & 15), N - 1)) * row_bytes;
  auto fill = [&](int blk) {
    const int s = blk % STAGES;
    if (lane == 0) mbar_expect_tx(&full[s], 16 * kQ4krBlkBytes);
    __syncwarp();
    if (lane < 16) bulk_copy(&ring[s][lane * kPitch], src + static_cast<size_t>(blk) * kQ4krBlkBytes, kQ4krBlkBytes, &full[s]);
  };
  if (warp == 0)
    for (int b = 0; b < min(STAGES, n_blk); ++b) fill(b);
  pdl_wait();  // after the first weight copies, as in the register kernel
  pdl_trigger();

  const __half* xs = x + static_cast<int64_t>(min(g, n_tok - 1)) * K + 256 * warp + 32 * c;
  const uint32_t sel = 0x4040u | static_cast<uint32_t>(c) | (static_cast<uint32_t>(c) << 8);
  const int qo = g * kPitch + 128 * warp + 16 * c, so = g * kPitch + kQ4krSmOff + 16 * warp,
            dmo = g * kPitch + kQ4krDmOff + 4 * warp;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int b = 0; b < n_blk; ++b) {
    const int s = b % STAGES;
    mbar_wait(&full[s], static_cast<uint32_t>(b / STAGES) & 1u);
    const uint8_t* slot = ring[s];
    HalfSb st0, st1;
    SbScales sc;
    load_half<0, false>(slot + qo, slot + qo + 8 * kPitch, st0);
    load_half<1, false>(slot + qo, slot + qo + 8 * kPitch, st1);
    load_scales<false>(slot + so, slot + so + 8 * kPitch, slot + dmo, slot + dmo + 8 * kPitch, sc);
    __syncthreads();  // every warp has its part of slot s in registers: warp 0 may refill it
    if (warp == 0 && b + STAGES < n_blk) fill(b + STAGES);
    float t[4], u[4];
    mma_sb(st0, st1, sc, xs, sel, magic, t, u);
    apply_scales(sc.dd, t, u, acc);
    xs += 1024;
  }
  store_tile_sums<4>(acc, red, y, n0, N, n_tok, N);
#else
  __trap();
#endif
}

template <int WARPS, int MINB>
void launch_regs(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  VI_CUDA_CHECK(pdl_launch(gemv_q4kr_kernel<WARPS, MINB>, dim3(static_cast<unsigned>((N + 15) / 16)), dim3(32 * WARPS), 0,
                           stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(),
                           static_cast<int>(x.rows()), N, static_cast<int>(K / kQKK), K, kQ4krMagic));
}

template <int DEPTH, int MINB>
void launch_deep(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  VI_CUDA_CHECK(pdl_launch(gemv_q4kr_deep_kernel<DEPTH, MINB>, dim3(static_cast<unsigned>((N + 15) / 16)), dim3(128), 0,
                           stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(),
                           static_cast<int>(x.rows()), N, static_cast<int>(K / kQKK), K, kQ4krMagic));
}

// h = silu(x · gateᵀ) ⊙ (x · upᵀ) for w = gate|up [2F, K]: F / 8 tiles of 8 gate and 8 up rows.
template <int DEPTH, int MINB>
void launch_deep_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h) {
  const int64_t N = w.dim(0), K = w.dim(1);
  VI_CUDA_CHECK(pdl_launch(gemv_q4kr_deep_kernel<DEPTH, MINB, true>, dim3(static_cast<unsigned>((N / 2 + 7) / 8)),
                           dim3(128), 0, stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(),
                           h.ptr<__half>(), static_cast<int>(x.rows()), N, static_cast<int>(K / kQKK), K, kQ4krMagic));
}

template <int STAGES>
void launch_bulk(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  const int64_t N = w.dim(0), K = w.dim(1);
  VI_CUDA_CHECK(pdl_launch(gemv_q4kr_bulk_kernel<STAGES>, dim3(static_cast<unsigned>((N + 15) / 16)), dim3(128), 0,
                           stream_of(ctx), w.ptr<uint8_t>(), w.row_bytes(), x.ptr<__half>(), y.ptr<__half>(),
                           static_cast<int>(x.rows()), N, static_cast<int>(K / (4 * kQKK)), K, kQ4krMagic));
}

// The bulk kernel: sm_90 code on the device, and a toolkit that has the instructions.
bool bulk_ok(const ops::Context& ctx) {
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 12
  return sm80_code(ctx) && current_device().code_cc >= 90;
#else
  (void)ctx;
  return false;
#endif
}

}  // namespace

GemvQ4krShape gemv_q4kr_default_shape(const ops::Context& ctx, int64_t N, int64_t K) {
  // The fastest shapes measured on the H200 at the 27B shapes, T = 1 and 4 (docs/notes/gemv.md,
  // run 13, with the 16-byte scale loads): two super-blocks ahead per warp at 3 blocks per SM
  // where the 16-row tiles fit one wave of them (FFN down 19.3 us), at 4 where they do not
  // (gate|up 35.8 us, the register kernel 40.9); from 65536 rows (the head: many waves of blocks)
  // the bulk-copy ring of 2 slots (201 us, 87% of the copy rate). The 3-or-4 rule is Q4_KT's
  // (the same 16-row tiles of 4 warps): on fewer SMs than 107 a 5120-row matrix takes 4 a SM,
  // which keeps it one wave (run 46).
  using K_ = GemvQ4krShape::Kernel;
  (void)K;
  if (N >= 65536 && bulk_ok(ctx)) return {K_::kRing, 2, 0};
  return {K_::kDeep, 2, gemv_q4kt_default_blocks(N)};
}

void gemv_q4kr_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h) {
  VI_CHECK(w.dim(0) % 2 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_q4kr_swiglu: h [{}, {}] does not match x rows {} and a gate|up weight of {} rows", h.rows(),
           h.cols(), x.rows(), w.dim(0));
  // The kernel of the unfused GEMV on a matrix of these rows (gemv_q4kr_default_shape), fused.
  if (gemv_q4kt_default_blocks(w.dim(0)) == 3) launch_deep_swiglu<2, 3>(ctx, x, w, h);
  else launch_deep_swiglu<2, 4>(ctx, x, w, h);
}

std::string gemv_q4kr_shape_name(const GemvQ4krShape& s) {
  switch (s.kernel) {
    case GemvQ4krShape::Kernel::kRegisters: return fmt::format("registers, {} blocks/SM", s.blocks);
    case GemvQ4krShape::Kernel::kDeep: return fmt::format("deep, {} ahead, {} blocks/SM", s.param, s.blocks);
    case GemvQ4krShape::Kernel::kRing: return fmt::format("bulk-copy ring, {} slots", s.param);
    default: return "auto";
  }
}

std::vector<GemvQ4krShape> gemv_q4kr_shapes(const ops::Context& ctx) {
  using K_ = GemvQ4krShape::Kernel;
  std::vector<GemvQ4krShape> v = {{K_::kRegisters, 0, 4}, {K_::kRegisters, 0, 6}, {K_::kDeep, 2, 3},
                                  {K_::kDeep, 2, 4}, {K_::kDeep, 3, 3}, {K_::kDeep, 4, 3}};
  if (bulk_ok(ctx))
    for (int st : {2, 3, 4}) v.push_back({K_::kRing, st, 0});
  return v;
}

bool gemv_q4kr_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  if (!sm80_code(ctx) || w.dtype() != DType::Q4_KR) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  // 16-byte weight and activation loads (and bulk copies); K / 256 super-blocks fit an int.
  return w.dim(1) < (int64_t(1) << 31) && w.row_bytes() % 16 == 0 && is_aligned(w.data(), 16) &&
         is_aligned(x.data(), 16);
}

void gemv_q4kr(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, GemvQ4krShape shape) {
  using K_ = GemvQ4krShape::Kernel;
  if (shape.kernel == K_::kAuto) shape = gemv_q4kr_default_shape(ctx, w.dim(0), w.dim(1));
  if (shape.kernel == K_::kRing && !bulk_ok(ctx)) VI_FAIL("gemv_q4kr: the bulk-copy ring needs sm_90 code and CUDA 12+");
  const int key = static_cast<int>(shape.kernel) * 100 + shape.param * 10 + shape.blocks;
  switch (key) {
    case 104: launch_regs<4, 4>(ctx, x, w, y); break;
    case 106: launch_regs<4, 6>(ctx, x, w, y); break;
    case 223: launch_deep<2, 3>(ctx, x, w, y); break;
    case 224: launch_deep<2, 4>(ctx, x, w, y); break;
    case 233: launch_deep<3, 3>(ctx, x, w, y); break;
    case 243: launch_deep<4, 3>(ctx, x, w, y); break;
    case 320: launch_bulk<2>(ctx, x, w, y); break;
    case 330: launch_bulk<3>(ctx, x, w, y); break;
    case 340: launch_bulk<4>(ctx, x, w, y); break;
    default: VI_FAIL("gemv_q4kr: no kernel '{}'", gemv_q4kr_shape_name(shape));
  }
}


}  // namespace vi::cuda
