// The fused gate|up GEMV + SwiGLU on Q4_KT over whole tiles, with the weights in shared-memory
// rings (q4kt_ring_walk.cuh, sm_90).
//
// Why: the half-tile kernel of gemv_q4kt.cu (a block of 4 warps takes 8 gate rows and the
// matching 8 up rows, so h needs no exchange between blocks) reads two 512-byte halves of two
// units 51 MB apart per super-block: 35.2 us a call at T = 1 on the 27B shape, where a plain GEMV
// of the same matrix takes 33.5 (register walk, 4 blocks per SM) and 30.9 with the ring at 5
// blocks per SM, whose low register count buys the occupancy (docs/notes/gemv.md run 30). Here a
// block of 8 warps takes gate tile t (warps 0-3) and up tile t (warps 4-7), each group walking
// its whole tile as the plain ring kernel does (one 2368-byte copy per super-block and warp),
// and the two groups' sums meet in shared memory for the SwiGLU. Each warp multiplies the same
// super-blocks of the same rows as in the half-tile kernel, and the sums of a row are added in the
// same warp order and rounded the same way, so h is the half-tile kernel's bit for bit.
#include <mutex>

#include "backends/cuda/device.cuh"
#include "backends/cuda/elementwise.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"
#include "backends/cuda/q4kr_bits.cuh"
#include "backends/cuda/q4kt_ring_walk.cuh"
#include "backends/cuda/q4kt_swiglu.cuh"

namespace vi::cuda {
namespace {

// Block t: h[:, 16t .. 16t + 15]. MINB: blocks of 256 threads per SM the registers are budgeted
// for. NORM: kNormNone or kNormConsume (q4kt_deferred.cuh; warps 0-3 stage the totals and scales
// as the 4-warp kernels do, and their threads write h).
template <int MINB, int SLOTS, int NORM>
__global__ void __launch_bounds__(256, MINB)
    gemv_q4kt_swiglu_tiles_kernel(const uint8_t* __restrict__ w, const __half* __restrict__ x, __half* __restrict__ h,
                                  int n_tok, int64_t F, int n_sb, int64_t K, uint32_t magic, NormArgs na) {
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ uint64_t bars[8 * SLOTS];
  const int warp = threadIdx.x >> 5, wt = warp & 3;
  const int64_t tile = warp < 4 ? int64_t(blockIdx.x) : F / 16 + blockIdx.x;  // gate tile t or up tile t
  Q4ktRingWalk<SLOTS> walk(w + tile * n_sb * kQ4ktUnitBytes, x, n_tok, n_sb, K, wt,
                           ring + q4kt_ring_bytes(warp, SLOTS), bars + warp * SLOTS);
  walk.start();
  [[maybe_unused]] __shared__ ConsumeStage consume;
  pdl_wait();
  pdl_trigger();
  if constexpr (NORM == kNormConsume)
    if (warp < 4) stage_totals(na, n_tok, consume);
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  walk.run(magic, acc);
  __shared__ float s_warp[4][8];
  if constexpr (NORM == kNormConsume)
    if (warp < 4) warp_scales(na, n_tok, consume, s_warp[warp]);
  __shared__ float red[8][4][32];
  stash_tile_sums(acc, red);  // and a block barrier
  if (threadIdx.x < 128) {
    // As write_swiglu_sums: thread k has token parity (k >> 5) & 1, the scales of warp k >> 5.
    const int i = threadIdx.x >> 5, l = threadIdx.x & 31;
    float gate = 0.0f, up = 0.0f;
#pragma unroll
    for (int wv = 0; wv < 4; ++wv) {
      gate += red[wv][i][l];
      up += red[4 + wv][i][l];
    }
    const int64_t f = int64_t(blockIdx.x) * 16 + (l >> 2) + 8 * (i >> 1);
    const int tok = 2 * (l & 3) + (i & 1);
    if constexpr (NORM == kNormConsume) {
      if (tok < n_tok) {
        gate *= s_warp[i][tok];
        up *= s_warp[i][tok];
      }
    }
    if (f < F && tok < n_tok) {
      const float gh = __half2float(__float2half_rn(gate)), uh = __half2float(__float2half_rn(up));
      h[static_cast<int64_t>(tok) * F + f] = __float2half_rn(silu_f(gh) * uh);
    }
  }
}

template <int MINB, int SLOTS, int NORM>
void launch(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, const NormArgs& na) {
  const int64_t F = w.dim(0) / 2, K = w.dim(1);
  auto* kernel = gemv_q4kt_swiglu_tiles_kernel<MINB, SLOTS, NORM>;
  const size_t smem = q4kt_ring_bytes(8, SLOTS);
  static std::once_flag once;  // one per kernel: this function is instantiated per kernel
  std::call_once(once, [&] { prepare_ring_kernel(kernel, smem, MINB); });
  VI_CUDA_CHECK(pdl_launch(kernel, dim3(static_cast<unsigned>(F / 16)), dim3(256), smem, stream_of(ctx),
                           w.ptr<uint8_t>(), x.ptr<__half>(), h.ptr<__half>(), static_cast<int>(x.rows()), F,
                           static_cast<int>(K / kQKK), K, kQ4krMagic, na));
}

template <int NORM>
void launch_for(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, Q4ktShape shape,
                const NormArgs& na) {
  switch (10 * shape.blocks + shape.slots) {
    case 24: launch<2, 4, NORM>(ctx, x, w, h, na); break;
    case 33: launch<3, 3, NORM>(ctx, x, w, h, na); break;
    default: VI_FAIL("gemv_q4kt_swiglu: no whole-tile kernel for {}", gemv_q4kt_shape_name(shape));
  }
}

}  // namespace

void q4kt_swiglu_tiles(const ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& h, Q4ktShape shape,
                       const NormArgs* consume) {
  VI_CHECK(q4kt_ring_available(ctx), "gemv_q4kt_swiglu: the whole-tile kernel needs sm_90 code and CUDA 12");
  VI_CHECK(w.dim(0) % 32 == 0 && h.cols() * 2 == w.dim(0) && h.rows() == x.rows(),
           "gemv_q4kt_swiglu: h [{}, {}] does not match x rows {} and a Q4_KT gate|up weight of {} rows", h.rows(),
           h.cols(), x.rows(), w.dim(0));
  if (consume != nullptr)
    launch_for<kNormConsume>(ctx, x, w, h, shape, *consume);
  else
    launch_for<kNormNone>(ctx, x, w, h, shape, NormArgs{});
}

}  // namespace vi::cuda
