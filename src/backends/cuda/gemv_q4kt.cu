// Tensor-core decode GEMV on Q4_KT weights: see gemv_q4kt.cuh for the plan, core/dtype.h for the
// layout and q4kr_mma.cuh for the arithmetic.
#include <algorithm>

#include "backends/cuda/device.cuh"
#include "backends/cuda/gemv_out.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kr_mma.cuh"
#include "backends/cuda/q4kr_tiles.cuh"
#include "backends/cuda/q4kt_walk.cuh"
#include "ops/copy.h"
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

// A block of 4 warps per 16-row tile, walking it as q4kt_walk.cuh describes. MINB: blocks per
// SM the registers are budgeted for. SWIGLU: the fused gate|up + SwiGLU (q4kt_walk.cuh).
template <int MINB, bool SWIGLU>
__global__ void __launch_bounds__(128, MINB)
    gemv_q4kt_kernel(const uint8_t* __restrict__ w, const __half* __restrict__ x, GemvOut out, int n_tok, int64_t N,
                     int n_sb, int64_t K, uint32_t magic) {
  Q4ktTileWalk<SWIGLU> walk(w, x, n_tok, N, n_sb, K, blockIdx.x);
  walk.start();
  pdl_wait();
  pdl_trigger();
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  walk.run(magic, acc);
  finish_gemv_out_tile<SWIGLU>(acc, out, N, n_tok);
}

template <int MINB, bool SWIGLU>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const unsigned blocks = static_cast<unsigned>(N / 16);  // SWIGLU: F / 8 blocks of 8 gate + 8 up rows
  VI_CUDA_CHECK(pdl_launch(gemv_q4kt_kernel<MINB, SWIGLU>, dim3(blocks), dim3(128), 0, stream_of(ctx),
                           w.ptr<uint8_t>(), x.ptr<__half>(), out, static_cast<int>(x.rows()), N,
                           static_cast<int>(K / kQKK), K, kQ4krMagic));
}

template <bool SWIGLU>
void launch_for(const ops::Context& ctx, const Tensor& x, const Tensor& w, const GemvOut& out, int blocks) {
  switch (blocks) {
    case 3: launch<3, SWIGLU>(ctx, x, w, out); break;
    case 4: launch<4, SWIGLU>(ctx, x, w, out); break;
    default: VI_FAIL("gemv_q4kt: no kernel for {} blocks per SM", blocks);
  }
}

}  // namespace

Tensor q4kt_from_q4kr(ops::Context& ctx, const Tensor& w) {
  return repack_q4kr_tiles(ctx, w, DType::Q4_KT, q4kt_from_q4kr_kernel);
}

int gemv_q4kt_default_blocks(int64_t N) {
  // Measured on the H200 at the 27B shapes (docs/notes/gemv.md run 18): up to 8192 rows (at most
  // 512 tiles) 3 blocks per SM, which spreads the tiles over more SMs (FFN down 17.0 us against
  // 21.1 at 4); from 14336 rows 4 (gate|up 33.2 us against 35.2, the head 204 against 226).
  return N <= 8192 ? 3 : 4;
}

std::vector<int> gemv_q4kt_shapes() { return {3, 4}; }

bool gemv_q4kt_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  if (!sm80_code(ctx) || w.dtype() != DType::Q4_KT) return false;
  if (x.dtype() != DType::F16 || x.rows() < 1 || x.rows() > 8) return false;
  return w.dim(1) < (int64_t(1) << 31) && is_aligned(w.data(), 16) && is_aligned(x.data(), 16) &&
         (x.cols() * 2) % 16 == 0;
}

void gemv_q4kt(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y, int blocks) {
  launch_for<false>(ctx, x, w, gemv_out_whole(y, w.dim(0)), blocks == 0 ? gemv_q4kt_default_blocks(w.dim(0)) : blocks);
}

bool gemv_q4kt_split_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w,
                              const std::vector<Tensor*>& parts) {
  if (!gemv_q4kt_supports(ctx, x, w) || parts.empty() || parts.size() > ops::kSplitMaxParts) return false;
  return std::all_of(parts.begin(), parts.end(),
                     [](const Tensor* p) { return p->dim(1) % kTiledRows == 0 && p->dim(1) > 0; });
}

void gemv_q4kt_split(const ops::Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts) {
  launch_for<false>(ctx, x, w, gemv_out_parts(parts, w.dim(0), x.rows(), "gemv_q4kt_split"),
                    gemv_q4kt_default_blocks(w.dim(0)));
}

bool gemv_q4kt_swiglu_supports(const ops::Context& ctx, const Tensor& x, const Tensor& w) {
  return gemv_q4kt_supports(ctx, x, w) && w.dim(0) % 32 == 0;
}

void gemv_q4kt_swiglu(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h) {
  VI_CHECK(w.dim(0) % 32 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_q4kt_swiglu: h [{}, {}] does not match x rows {} and a Q4_KT gate|up weight of {} rows "
           "(a multiple of 32)",
           h.rows(), h.cols(), x.rows(), w.dim(0));
  launch_for<true>(ctx, x, w, gemv_out_whole(h, w.dim(0) / 2), gemv_q4kt_default_blocks(w.dim(0)));
}

}  // namespace vi::cuda
