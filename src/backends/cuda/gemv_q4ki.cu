// Int8-activation decode GEMV on Q4_KI weights: see gemv_q4ki.cuh for the plan and core/dtype.h
// for the two layouts (Q4_KI, Q8_KX).
#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_out.cuh"
#include "backends/cuda/gemv_q4ki.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q8kx.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "backends/cuda/q4kr_tiles.cuh"
#include "ops/memory.h"

namespace vi::cuda {
namespace {

constexpr int kXBlockBytes = static_cast<int>(sizeof(BlockQ8_KX));
constexpr int kXSumOff = kQ8kxSumOff;
constexpr int kXScaleOff = kQ8kxScaleOff;

// Value v (0..31) of sub-block s of super-block sb of a Q4_KR row (core/dtype.h, BlockQ4_KR).
__device__ int q4kr_value(const uint8_t* row, int sb, int s, int v) {
  const uint8_t* blk = row + static_cast<size_t>(sb >> 2) * kQ4krBlkBytes;
  const uint32_t word = *reinterpret_cast<const uint32_t*>(blk + 128 * (sb & 3) + 16 * s + 4 * (v >> 3));
  const int p = v & 7, nib = (p >> 1) + 4 * (p & 1);
  return static_cast<int>((word >> (4 * nib)) & 0xFu);
}

// One warp per unit (tile, super-block). Run once at load: clarity over speed.
__global__ void q4ki_from_q4kr_kernel(const uint8_t* __restrict__ w, size_t row_bytes, uint8_t* __restrict__ out,
                                      int n_sb, int64_t units) {
  const int64_t unit = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t tile = unit / n_sb;
  const int sb = static_cast<int>(unit % n_sb);
  auto row = [&](int r) { return w + static_cast<size_t>(tile * 16 + r) * row_bytes; };
  uint8_t* u = out + unit * kQ4ktUnitBytes;
  for (int k = 0; k < 4; ++k) {
    const int r = g + 8 * (k & 1), p0 = 2 * (k >> 1);
    uint32_t words[4];
    for (int i = 0; i < 4; ++i) {
      const int p = p0 + (i >> 1), h = i & 1;
      uint32_t wd = 0;
      for (int j = 0; j < 4; ++j) {
        const int v = 16 * h + 4 * c + j;
        const uint32_t byte = uint32_t(q4kr_value(row(r), sb, p, v)) | uint32_t(q4kr_value(row(r), sb, p + 4, v)) << 4;
        wd |= byte << (8 * j);
      }
      words[i] = wd;
    }
    *reinterpret_cast<uint4*>(u + 512 * k + 16 * lane) = make_uint4(words[0], words[1], words[2], words[3]);
  }
  if (lane < 16) {  // row `lane`: sc[0..7], m[0..7] from Q4_KR's sc[0..3], m[0..3], sc[4..7], m[4..7]
    const uint32_t* sm = reinterpret_cast<const uint32_t*>(row(lane) + static_cast<size_t>(sb >> 2) * kQ4krBlkBytes +
                                                           kQ4krSmOff + 16 * (sb & 3));
    *reinterpret_cast<uint4*>(u + 2048 + 16 * lane) = make_uint4(sm[0], sm[2], sm[1], sm[3]);
  }
  if (c == 0) {
    auto dm = [&](int r) {
      return *reinterpret_cast<const uint32_t*>(row(r) + static_cast<size_t>(sb >> 2) * kQ4krBlkBytes + kQ4krDmOff +
                                                4 * (sb & 3));
    };
    *reinterpret_cast<uint2*>(u + 2304 + 8 * g) = make_uint2(dm(g), dm(g + 8));
  }
}

// One warp per (token, 256 values): lane L quantizes values 8L .. 8L + 7 (sub-block L / 4).
__global__ void quantize_q8kx_kernel(const __half* __restrict__ x, uint8_t* __restrict__ xq, int n_tok, int nb,
                                     int64_t K) {
  const int lane = threadIdx.x & 31;
  const int64_t id = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  pdl_wait();
  pdl_trigger();
  if (id >= int64_t(n_tok) * nb) return;
  const int64_t tok = id / nb;
  const int b = static_cast<int>(id % nb);
  const uint4 raw = *reinterpret_cast<const uint4*>(x + tok * K + 256 * b + 8 * lane);
  const __half* hv = reinterpret_cast<const __half*>(&raw);
  float v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = __half2float(hv[j]);
  quantize_warp_q8kx(v, xq + (tok * nb + b) * kXBlockBytes, lane);
}

// d = a · b from zero for one m16n8k32 tile of u8 A (16 x 32) and s8 B (32 x 8), int32 sums.
// Fragments (PTX ISA, lane 4g + c): a0 = A[g][4c .. 4c+3], a1 = A[g+8][4c ..], a2 = A[g][16+4c ..],
// a3 = A[g+8][16+4c ..]; b0 = B[4c .. 4c+3][g], b1 = B[16+4c ..][g]; d as mma_16816's.
__device__ __forceinline__ void mma_u8s8_z(int d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                           uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#else
  __trap();
#endif
}

// One super-block of a warp's tile as lane (g, c) holds it: q[k] load k of the unit (rows g + 8
// (k & 1)), sg / s8 the 16 scale and min bytes of rows g / g + 8, dd their (d, dmin).
struct Q4kiSb {
  uint4 q[4];
  uint4 sg, s8;
  uint2 dd;
};

// acc[i] (row g + 8 (i >> 1), token 2c + (i & 1)) += this super-block's sums. xb: token g's
// Q8_KX block; xd0 / xd1: the blocks of tokens 2c, 2c + 1 (their scales).
__device__ __forceinline__ void q4ki_sb(const Q4kiSb& s, const uint8_t* xb, const uint8_t* xd0, const uint8_t* xd1,
                                        int c, float acc[4]) {
  uint4 xw[4];
#pragma unroll
  for (int p = 0; p < 4; ++p) xw[p] = __ldg(reinterpret_cast<const uint4*>(xb + 64 * c + 16 * p));
  const uint2 xs = __ldg(reinterpret_cast<const uint2*>(xb + kXSumOff + 8 * c));
  const float dx0 = __ldg(reinterpret_cast<const float*>(xd0 + kXScaleOff));
  const float dx1 = __ldg(reinterpret_cast<const float*>(xd1 + kXScaleOff));
  // t[0]: Σ sc·(q·x) of sub-blocks 0..3 (low nibbles); t[1]: of sub-blocks 4..7, 16 times over
  // (their nibbles are masked in place, as 16q), so the sum is t[0] + t[1] / 16 exactly.
  int t[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const uint4& ra = s.q[2 * (p >> 1)];
    const uint4& rb = s.q[2 * (p >> 1) + 1];
    const int o = 2 * (p & 1);
    const uint32_t w0 = word(ra, o), w2 = word(ra, o + 1), w1 = word(rb, o), w3 = word(rb, o + 1);
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const uint32_t m = hi ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
      int C[4];
      mma_u8s8_z(C, w0 & m, w1 & m, w2 & m, w3 & m, hi ? xw[p].z : xw[p].x, hi ? xw[p].w : xw[p].y);
      // The scales of sub-block p + 4·hi of rows g and g + 8: byte p of each row's word hi.
      const int sg = static_cast<int>(__byte_perm(hi ? s.sg.y : s.sg.x, 0u, 0x4440u + p));
      const int s8 = static_cast<int>(__byte_perm(hi ? s.s8.y : s.s8.x, 0u, 0x4440u + p));
      t[hi][0] += sg * C[0];
      t[hi][1] += sg * C[1];
      t[hi][2] += s8 * C[2];
      t[hi][3] += s8 * C[3];
    }
  }
  // u = Σ m·s over the 8 sub-blocks by one f16 mma: k 0..7 the sums' multiples of 32, k 8..15
  // their remainders, against m (rows g, g + 8; sub-blocks 2c, 2c + 1 at k 2c, 2c + 1 and
  // 8 + 2c, 9 + 2c). Integers below 2^24 throughout: exact.
  const uint32_t mg = c < 2 ? s.sg.z : s.sg.w, m8 = c < 2 ? s.s8.z : s.s8.w;
  const uint32_t sel = (c & 1) ? 0x4342u : 0x4140u;
  const __half2 k1024 = __float2half2_rn(1024.0f);
  const uint32_t am0 = as_u32(__hsub2(as_h2(__byte_perm(mg, 0x64u, sel)), k1024));
  const uint32_t am1 = as_u32(__hsub2(as_h2(__byte_perm(m8, 0x64u, sel)), k1024));
  float u[4];
  mma_16816_z(u, am0, am1, am0, am1, xs.x, xs.y);
  const float2 dg = __half22float2(as_h2(s.dd.x)), d8 = __half22float2(as_h2(s.dd.y));
  const float t0 = static_cast<float>(t[0][0] + (t[1][0] >> 4)), t1 = static_cast<float>(t[0][1] + (t[1][1] >> 4));
  const float t2 = static_cast<float>(t[0][2] + (t[1][2] >> 4)), t3 = static_cast<float>(t[0][3] + (t[1][3] >> 4));
  acc[0] = fmaf(dx0, fmaf(dg.x, t0, -dg.y * u[0]), acc[0]);
  acc[1] = fmaf(dx1, fmaf(dg.x, t1, -dg.y * u[1]), acc[1]);
  acc[2] = fmaf(dx0, fmaf(d8.x, t2, -d8.y * u[2]), acc[2]);
  acc[3] = fmaf(dx1, fmaf(d8.x, t3, -d8.y * u[3]), acc[3]);
}

// A block of 4 warps per 16-row tile, warp w taking the tile's super-blocks w, w + 4, ..., two
// loaded ahead, the first before pdl_wait (weights are no kernel's output): gemv_q4kt_kernel's
// scheme. SWIGLU: block b takes gate rows 8b .. 8b + 7 as its rows g and the matching up rows as
// rows g + 8 (loads k = b % 2 and 2 + b % 2 of the gate and of the up unit, their scale rows and
// (d, dmin)), and writes h = silu(gate) · up.
template <int MINB, bool SWIGLU>
__global__ void __launch_bounds__(128, MINB)
    gemv_q4ki_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ x, GemvOut out, int n_tok, int64_t N,
                     int n_sb) {
  constexpr int kDepth = 2;
  constexpr size_t kStep = 4 * kQ4ktUnitBytes;  // to the warp's next super-block
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int64_t x_row = int64_t(n_sb) * kXBlockBytes;
  const uint8_t* xb = x + min(g, n_tok - 1) * x_row + warp * kXBlockBytes;
  const uint8_t* xd0 = x + min(2 * c, n_tok - 1) * x_row + warp * kXBlockBytes;
  const uint8_t* xd1 = x + min(2 * c + 1, n_tok - 1) * x_row + warp * kXBlockBytes;
  const int n_mine = warp < n_sb ? (n_sb - warp + 3) / 4 : 0;
  const int half = SWIGLU ? static_cast<int>(blockIdx.x & 1) : 0;
  const uint8_t* a = w + ((SWIGLU ? int64_t(blockIdx.x / 2) : int64_t(blockIdx.x)) * n_sb + warp) * kQ4ktUnitBytes;
  const uint8_t* b = SWIGLU ? a + (N / 32) * int64_t(n_sb) * kQ4ktUnitBytes : a;
  // Row g's bytes from unit a, row g + 8's from b (the same unit unless SWIGLU).
  const int rg = SWIGLU ? 8 * half + g : g, r8 = SWIGLU ? 8 * half + g : g + 8;
  const uint8_t* pq[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    pq[k] = ((k & 1) ? b : a) + 512 * (2 * (k >> 1) + (SWIGLU ? half : (k & 1))) + 16 * lane;
  const uint8_t* psg = a + 2048 + 16 * rg;
  const uint8_t* ps8 = b + 2048 + 16 * r8;
  const uint8_t* pdg = a + 2304 + 8 * g + 4 * half;
  const uint8_t* pd8 = b + 2304 + 8 * g + 4 * (SWIGLU ? half : 1);

  auto load_sb = [&](int d, Q4kiSb& s) {
    const size_t off = static_cast<size_t>(d) * kStep;
#pragma unroll
    for (int k = 0; k < 4; ++k) s.q[k] = __ldcs(reinterpret_cast<const uint4*>(pq[k] + off));
    s.sg = __ldcs(reinterpret_cast<const uint4*>(psg + off));
    s.s8 = __ldcs(reinterpret_cast<const uint4*>(ps8 + off));
    if constexpr (SWIGLU) {
      s.dd = make_uint2(__ldcs(reinterpret_cast<const uint32_t*>(pdg + off)),
                        __ldcs(reinterpret_cast<const uint32_t*>(pd8 + off)));
    } else {  // rows g and g + 8 side by side
      s.dd = __ldcs(reinterpret_cast<const uint2*>(pdg + off));
    }
  };
  Q4kiSb buf[kDepth];
#pragma unroll
  for (int j = 0; j < kDepth; ++j)
    if (j < n_mine) load_sb(j, buf[j]);
  pdl_wait();
  pdl_trigger();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const int64_t x_step = 4 * int64_t(kXBlockBytes);
  for (int i0 = 0; i0 < n_mine; i0 += kDepth) {
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      if (i0 + j < n_mine) {
        const int64_t xo = (i0 + j) * x_step;
        q4ki_sb(buf[j], xb + xo, xd0 + xo, xd1 + xo, c, acc);
        if (i0 + j + kDepth < n_mine) load_sb(i0 + j + kDepth, buf[j]);
      }
    }
  }
  finish_gemv_out_tile<SWIGLU>(acc, out, N, n_tok, blockIdx.x);
}

template <int MINB, bool SWIGLU>
void launch(const ops::Context& ctx, const Tensor& xq, const Tensor& w, const GemvOut& out) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const unsigned blocks = static_cast<unsigned>(N / 16);  // SWIGLU: F / 8 blocks of 8 gate + 8 up rows
  VI_CUDA_CHECK(pdl_launch(gemv_q4ki_kernel<MINB, SWIGLU>, dim3(blocks), dim3(128), 0, stream_of(ctx),
                           w.ptr<uint8_t>(), xq.ptr<uint8_t>(), out, static_cast<int>(xq.rows()), N,
                           static_cast<int>(K / kQKK)));
}

template <bool SWIGLU>
void launch_for(const ops::Context& ctx, const Tensor& xq, const Tensor& w, const GemvOut& out, int blocks) {
  VI_CHECK(gemv_q4ki_supports(ctx, xq, w), "gemv_q4ki: cannot take x {} {} with w {} {}", dtype_name(xq.dtype()),
           xq.shape_str(), dtype_name(w.dtype()), w.shape_str());
  switch (blocks) {
    case 3: launch<3, SWIGLU>(ctx, xq, w, out); break;
    case 4: launch<4, SWIGLU>(ctx, xq, w, out); break;
    default: VI_FAIL("gemv_q4ki: no kernel for {} blocks per SM", blocks);
  }
}

}  // namespace

Tensor q4ki_from_q4kr(ops::Context& ctx, const Tensor& w) {
  return repack_q4kr_tiles(ctx, w, DType::Q4_KI, q4ki_from_q4kr_kernel);
}

void quantize_q8kx(const ops::Context& ctx, const Tensor& x, Tensor& xq) {
  VI_CHECK(x.dtype() == DType::F16 && x.ndim() >= 1 && x.cols() % kQKK == 0 && xq.dtype() == DType::Q8_KX &&
               xq.rows() == x.rows() && xq.cols() == x.cols() && is_aligned(x.data(), 16),
           "quantize_q8kx: x {} {} -> xq {} {} (f16 [T, K], K % 256 == 0, into Q8_KX of the same shape)",
           dtype_name(x.dtype()), x.shape_str(), dtype_name(xq.dtype()), xq.shape_str());
  const int64_t T = x.rows(), nb = x.cols() / kQKK, warps = T * nb;
  if (warps == 0) return;
  VI_CUDA_CHECK(pdl_launch(quantize_q8kx_kernel, dim3(static_cast<unsigned>((warps + 3) / 4)), dim3(128), 0,
                           stream_of(ctx), x.ptr<__half>(), xq.ptr<uint8_t>(), static_cast<int>(T),
                           static_cast<int>(nb), x.cols()));
}

bool gemv_q4ki_available(const ops::Context& ctx) { return sm80_code(ctx); }

int gemv_q4ki_default_blocks(int64_t N) { return gemv_q4kt_default_blocks(N); }  // the same tiles, the same waves

std::vector<int> gemv_q4ki_shapes() { return {3, 4}; }

bool gemv_q4ki_supports(const ops::Context& ctx, const Tensor& xq, const Tensor& w) {
  if (!gemv_q4ki_available(ctx) || w.dtype() != DType::Q4_KI || xq.dtype() != DType::Q8_KX) return false;
  return xq.rows() >= 1 && xq.rows() <= 8 && xq.cols() == w.dim(1) && w.dim(1) < (int64_t(1) << 31) &&
         is_aligned(w.data(), 16) && is_aligned(xq.data(), 16);
}

void gemv_q4ki(const ops::Context& ctx, const Tensor& xq, const Tensor& w, Tensor& y, int blocks) {
  launch_for<false>(ctx, xq, w, gemv_out_whole(y, w.dim(0)),
                    blocks == 0 ? gemv_q4ki_default_blocks(w.dim(0)) : blocks);
}

void gemv_q4ki_split(const ops::Context& ctx, const Tensor& xq, const Tensor& w, const std::vector<Tensor*>& parts) {
  launch_for<false>(ctx, xq, w, gemv_out_parts(parts, w.dim(0), xq.rows(), "gemv_q4ki_split"),
                    gemv_q4ki_default_blocks(w.dim(0)));
}

void gemv_q4ki_swiglu(const ops::Context& ctx, const Tensor& xq, const Tensor& w, Tensor& h) {
  VI_CHECK(w.dim(0) % 32 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == xq.rows(),
           "gemv_q4ki_swiglu: h [{}, {}] does not match x rows {} and a Q4_KI gate|up weight of {} rows "
           "(a multiple of 32)",
           h.rows(), h.cols(), xq.rows(), w.dim(0));
  launch_for<true>(ctx, xq, w, gemv_out_whole(h, w.dim(0) / 2), gemv_q4ki_default_blocks(w.dim(0)));
}

}  // namespace vi::cuda
