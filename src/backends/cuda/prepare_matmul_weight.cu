// CUDA repacks of matmul weights at load (ops/prepare_matmul_weight.h):
//  Q8_0 -> Q8_0R. Q8_0 blocks are 34 bytes, so no value run of a row starts on a 16-byte
//    boundary and the GEMV could not issue 16-byte loads; Q8_0R keeps the bytes per row and
//    aligns them.
//  Q4_K -> Q4_KR (core/dtype.h), for the tensor-core GEMV (gemv_q4kr.cu): unpacking the
//    6-bit scales and pairing nibbles with byte permutes made the file layout's GEMV bound by
//    its integer instructions at 40-55% of the H200's bandwidth; +2.8% bytes. Then, where the
//    native-profile GEMV reads it, -> Q4_KT (the same bytes in 16-row tiles, gemv_q4kt.cu):
//    contiguous loads for each warp, 10-14% faster GEMVs at the 27B shapes.
//    Where add_rms_norm writes the weight's input (MatmulInput::kNorm) and the context asks for
//    int8 activations, -> Q4_KI instead: the same bytes for the int8-activation GEMV
//    (gemv_q4ki.cu), ~10% faster again. A SwiGLU gate|up stack no caller views
//    (MatmulUse::kSwiglu) -> Q4_KTS instead of Q4_KT: gate and up rows paired in each tile, so
//    the fused SwiGLU reads one contiguous unit a block (docs/notes/gemv.md run 33).
//  Q8_0 -> Q8_0R -> Q8_0T likewise, for gemv_mma's step kernel.
//  F16 is read in its file layout.
#include <algorithm>

#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/env_switch.h"
#include "backends/cuda/gemv_q4ki.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/quant.cuh"
#include "core/log.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cuda {
namespace {

// One thread per group of 8 blocks: n_groups = N * K / 256 (rows are whole groups).
__global__ void repack_q8_0r_kernel(const BlockQ8_0* __restrict__ in, BlockQ8_0R* __restrict__ out,
                                    int64_t n_groups) {
  const int64_t g = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (g >= n_groups) return;
  const BlockQ8_0* b = in + g * 8;
  BlockQ8_0R r;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    r.d[j] = b[j].d;
#pragma unroll
    for (int l = 0; l < kQK; ++l) r.qs[j * kQK + l] = b[j].qs[l];
  }
  out[g] = r;
}

// One warp per Q8_0T unit (tile, 128 values): lane L = 4g + c gathers block c of rows g and
// g + 8 (core/dtype.h).
__global__ void repack_q8_0t_kernel(const BlockQ8_0R* __restrict__ in, uint8_t* __restrict__ out, int64_t groups,
                                    int64_t units) {
  const int64_t unit = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (unit >= units) return;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t steps = groups * 2, tile = unit / steps, s = unit % steps;
  const int blk = static_cast<int>(s % 2) * 4 + c;  // the block inside the row's group s / 2
  const BlockQ8_0R* r[2] = {in + (tile * 16 + g) * groups + s / 2, in + (tile * 16 + g + 8) * groups + s / 2};
  uint8_t* u = out + unit * kQ8tUnitBytes;
  for (int k = 0; k < 4; ++k)
    *reinterpret_cast<uint4*>(u + 512 * k + 16 * lane) =
        *reinterpret_cast<const uint4*>(r[k & 1]->qs + 32 * blk + 16 * (k >> 1));
  *reinterpret_cast<uint32_t*>(u + 2048 + 4 * lane) = uint32_t(r[0]->d[blk]) | uint32_t(r[1]->d[blk]) << 16;
}

// A tiled layout (Q4_KT, Q8_0T) where the native profile's tensor-core GEMV reads it (sm_80+
// code, f16 activations) and every row view the caller takes (parts) is whole 16-row tiles;
// VI_TILED=0 keeps the row layouts (A/B runs).
bool tiled_ok(const ops::Context& ctx, int64_t N, const std::vector<int64_t>& parts) {
  static const bool off = !env_switch_on("VI_TILED");
  if (off || !sm80_code(ctx) || ctx.act != DType::F16 || N % kTiledRows != 0) return false;
  return std::all_of(parts.begin(), parts.end(), [](int64_t rows) { return rows % kTiledRows == 0; });
}

// Q4_KI (int8 activations, gemv_q4ki.cu) for the weights a norm feeds, where the context asks for
// int8 activations (ops::Context::int8_act, --int8-activations).
bool int8_act_ok(const ops::Context& ctx) { return ctx.int8_act && ctx.act == DType::F16; }

Tensor prepare_q8_0(ops::Context& ctx, const Tensor& w, const std::vector<int64_t>& parts, ops::MatmulInput,
                    ops::MatmulUse) {
  const int64_t N = w.dim(0), K = w.dim(1);
  if (K % (8 * kQK) != 0) return w;  // rows would not be whole Q8_0R groups: keep Q8_0
  Tensor out = ops::empty(ctx, DType::Q8_0R, {N, K});
  out.set_name(w.name());
  const int64_t n_groups = N * (K / (8 * kQK));
  if (n_groups > 0) {
    repack_q8_0r_kernel<<<static_cast<unsigned>((n_groups + 255) / 256), 256, 0, stream_of(ctx)>>>(
        w.ptr<BlockQ8_0>(), out.ptr<BlockQ8_0R>(), n_groups);
    VI_CUDA_LAUNCH_CHECK();
  }
  if (tiled_ok(ctx, N, parts)) {
    Tensor t = ops::empty(ctx, DType::Q8_0T, {N, K});
    t.set_name(w.name());
    const int64_t units = N / 16 * (K / 128);
    if (units > 0) {
      repack_q8_0t_kernel<<<static_cast<unsigned>((units + 3) / 4), 128, 0, stream_of(ctx)>>>(
          out.ptr<BlockQ8_0R>(), t.ptr<uint8_t>(), K / (8 * kQK), units);
      VI_CUDA_LAUNCH_CHECK();
    }
    out = t;
  }
  VI_LOG_DEBUG("{} [{}, {}]: q8_0 -> {}", w.name(), N, K, dtype_name(out.dtype()));
  return out;
}

// One thread per Q4_KR block (4 Q4_K super-blocks of one row): n = N * K / 1024.
__global__ void repack_q4_kr_kernel(const BlockQ4_K* __restrict__ in, BlockQ4_KR* __restrict__ out, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  BlockQ4_KR r;
#pragma unroll 1
  for (int sb = 0; sb < 4; ++sb) {
    const BlockQ4_K& b = in[4 * i + sb];
    r.dm[sb][0] = b.d;
    r.dm[sb][1] = b.dmin;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      k4_scale_min(j, b.scales, sc, m);
      r.sm[sb][8 * (j / 4) + j % 4] = static_cast<uint8_t>(sc);
      r.sm[sb][8 * (j / 4) + 4 + j % 4] = static_cast<uint8_t>(m);
      // Sub-block j, value l: Q4_K keeps it in byte 32 (j / 2) + l, nibble j % 2.
      for (int i = 0; i < 4; ++i) {
        uint32_t word = 0;
        for (int p = 0; p < 8; ++p) {
          const uint32_t q = (b.qs[32 * (j / 2) + 8 * i + p] >> (4 * (j % 2))) & 0xF;
          word |= q << (4 * ((p >> 1) + 4 * (p & 1)));
        }
        *reinterpret_cast<uint32_t*>(r.qs + 128 * sb + 16 * j + 4 * i) = word;
      }
    }
  }
  out[i] = r;
}

// Q4_KTS (the paired gate|up tiles) for a SwiGLU stack that no caller views, where Q4_KT would
// be made; VI_SWIGLU_PAIRED=0 keeps Q4_KT (A/B runs).
bool paired_ok(ops::MatmulUse use, int64_t N) {
  static const bool on = env_switch_on("VI_SWIGLU_PAIRED");
  return on && use == ops::MatmulUse::kSwiglu && N % 16 == 0;
}

Tensor prepare_q4_k(ops::Context& ctx, const Tensor& w, const std::vector<int64_t>& parts, ops::MatmulInput input,
                    ops::MatmulUse use) {
  const int64_t N = w.dim(0), K = w.dim(1);
  if (K % (4 * kQKK) != 0) return w;  // rows would not be whole Q4_KR blocks: keep Q4_K
  Tensor out = ops::empty(ctx, DType::Q4_KR, {N, K});
  out.set_name(w.name());
  const int64_t n = N * (K / (4 * kQKK));
  if (n > 0) {
    repack_q4_kr_kernel<<<static_cast<unsigned>((n + 127) / 128), 128, 0, stream_of(ctx)>>>(
        w.ptr<BlockQ4_K>(), out.ptr<BlockQ4_KR>(), n);
    VI_CUDA_LAUNCH_CHECK();
  }
  const bool int8 = input == ops::MatmulInput::kNorm && int8_act_ok(ctx);
  if (!int8 && paired_ok(use, N) && tiled_ok(ctx, N, {}))  // no views taken: any whole tiles of pairs
    out = q4kts_from_q4kr(ctx, out);
  else if (tiled_ok(ctx, N, parts))
    out = int8 ? q4ki_from_q4kr(ctx, out) : q4kt_from_q4kr(ctx, out);
  VI_LOG_DEBUG("{} [{}, {}]: q4_k -> {}", w.name(), N, K, dtype_name(out.dtype()));
  return out;
}

[[maybe_unused]] const bool registered = [] {
  ops::prepare_matmul_weight_table().add(Device::CUDA, DType::Q8_0, prepare_q8_0);
  ops::prepare_matmul_weight_table().add(Device::CUDA, DType::Q4_K, prepare_q4_k);
  return true;
}();

}  // namespace
}  // namespace vi::cuda
