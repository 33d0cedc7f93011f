// The host side of the repacks from Q4_KR to the tiled Q4_K layouts (Q4_KT: gemv_q4kt.cu, Q4_KI:
// gemv_q4ki.cu): the checks, the output tensor and the launch of one warp per unit (16-row tile,
// super-block), 4 warps a block.
#pragma once

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "core/dtype.h"
#include "ops/memory.h"

namespace vi::cuda {

// kernel(w, row_bytes, out, n_sb, units): writes unit u of `to` from the Q4_KR rows of w.
using Q4krTileKernel = void (*)(const uint8_t*, size_t, uint8_t*, int, int64_t);

inline Tensor repack_q4kr_tiles(ops::Context& ctx, const Tensor& w, DType to, Q4krTileKernel kernel) {
  const char* name = dtype_name(to);
  VI_CHECK(w.dtype() == DType::Q4_KR && w.ndim() == 2 && w.dim(0) % kTiledRows == 0,
           "{} from Q4_KR: needs a Q4_KR matrix of whole {}-row tiles, got {} {}", name, kTiledRows,
           dtype_name(w.dtype()), w.shape_str());
  const int64_t N = w.dim(0), K = w.dim(1), units = N / 16 * (K / kQKK);
  Tensor out = ops::empty(ctx, to, {N, K});
  out.set_name(w.name());
  VI_CHECK(out.nbytes() == static_cast<size_t>(units) * kQ4ktUnitBytes, "{} from Q4_KR: {} bytes for {} units", name,
           out.nbytes(), units);
  if (units > 0) {
    kernel<<<static_cast<unsigned>((units + 3) / 4), 128, 0, stream_of(ctx)>>>(
        w.ptr<uint8_t>(), w.row_bytes(), out.ptr<uint8_t>(), static_cast<int>(K / kQKK), units);
    VI_CUDA_LAUNCH_CHECK();
  }
  return out;
}

}  // namespace vi::cuda
