// CPU matmul y[T, N] = x[T, K] · w[N, K]ᵀ for every weight dtype, fp32 math.
// Each weight block is decoded to fp32 registers (block_decode.h) and FMA'd with up to
// kMaxTile tokens at once, so in prefill a block is decoded once per token tile rather
// than once per token; decode (T = 1) is a pure stream over the weight bytes. Rows are
// split over the thread pool; every output element is computed by the same sequence of
// operations whatever the tiling or thread count, so results are bit-identical.
#include "ops/matmul.h"

#include <algorithm>

#include "backends/cpu/block_decode.h"
#include "backends/cpu/cpu_util.h"

namespace vi::cpu {

namespace {

using simd::VecF;

#if defined(VI_SIMD_AVX512)
constexpr int kMaxTile = 8;  // 2 accumulators per token: 16 of the 32 zmm registers
#else
constexpr int kMaxTile = 2;  // 16 ymm registers: keep accumulators from spilling
#endif
constexpr int64_t kRowBlock = 16;  // weight rows kept hot in L1 while token tiles pass

template <class Dec>
constexpr bool kPlain = std::is_same_v<Dec, DecF32> || std::is_same_v<Dec, DecF16> || std::is_same_v<Dec, DecBF16>;

template <class Dec>
float plain_value(const uint8_t* row, int64_t i) {
  if constexpr (std::is_same_v<Dec, DecF32>) return reinterpret_cast<const float*>(row)[i];
  if constexpr (std::is_same_v<Dec, DecF16>) return fp16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
  return bf16_to_fp32(reinterpret_cast<const uint16_t*>(row)[i]);
}

// y[t * ldy] = dot(weight row, x[t * ldx, :K]) for t < TT.
template <class Dec, int TT>
inline void dot_tile(const uint8_t* w, int64_t K, const float* x, int64_t ldx, float* y, int64_t ldy) {
  VecF acc[TT][2];
  for (int t = 0; t < TT; ++t) acc[t][0] = acc[t][1] = VecF::zero();
  // Plain dtypes are walked in 32-value steps (two chunks, two accumulator chains).
  constexpr int kStep = kPlain<Dec> ? 32 : Dec::kValues;
  constexpr int kStepBytes = kPlain<Dec> ? 2 * Dec::kBytes : Dec::kBytes;
  const int64_t nsteps = K / kStep;
  for (int64_t s = 0; s < nsteps; ++s) {
    const float* xs = x + s * kStep;
    const uint8_t* ws = w + s * kStepBytes;
    auto emit = [&](int c, VecF v) {
      for (int t = 0; t < TT; ++t) acc[t][c & 1] = simd::fma(v, VecF::load(xs + t * ldx + 16 * c), acc[t][c & 1]);
    };
    if constexpr (kPlain<Dec>) {
      Dec::decode(ws, [&](int, VecF v) { emit(0, v); });
      Dec::decode(ws + Dec::kBytes, [&](int, VecF v) { emit(1, v); });
    } else {
      Dec::decode(ws, emit);
    }
  }
  for (int t = 0; t < TT; ++t) {
    float sum = (acc[t][0] + acc[t][1]).hsum();
    if constexpr (kPlain<Dec>) {
      for (int64_t i = nsteps * kStep; i < K; ++i) sum += plain_value<Dec>(w, i) * x[t * ldx + i];
    }
    y[t * ldy] = sum;
  }
}

template <class Dec>
void matmul_rows(const Tensor& x, const Tensor& w, Tensor& y, int64_t n0, int64_t n1) {
  const int64_t T = x.rows(), K = x.cols(), N = w.dim(0);
  const float* xp = x.ptr<float>();
  float* yp = y.ptr<float>();
  const uint8_t* wp = w.ptr<uint8_t>();
  const size_t wrow_bytes = w.row_bytes();
  for (int64_t rb = n0; rb < n1; rb += kRowBlock) {
    const int64_t re = std::min(n1, rb + kRowBlock);
    for (int64_t t0 = 0; t0 < T;) {
      const int64_t left = T - t0;
      const int tile = left >= kMaxTile ? kMaxTile : left >= 4 ? 4 : left >= 2 ? 2 : 1;
      for (int64_t n = rb; n < re; ++n) {
        const uint8_t* wr = wp + static_cast<size_t>(n) * wrow_bytes;
        const float* xt = xp + t0 * K;
        float* yt = yp + t0 * N + n;
        switch (tile) {
          case 8: if constexpr (kMaxTile >= 8) dot_tile<Dec, 8>(wr, K, xt, K, yt, N); break;
          case 4: if constexpr (kMaxTile >= 4) dot_tile<Dec, 4>(wr, K, xt, K, yt, N); break;
          case 2: dot_tile<Dec, 2>(wr, K, xt, K, yt, N); break;
          default: dot_tile<Dec, 1>(wr, K, xt, K, yt, N); break;
        }
      }
      t0 += tile;
    }
  }
}

template <class Dec>
void matmul_cpu(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& y) {
  require_f32("matmul", x, "x");
  require_f32("matmul", y, "y");
  const int64_t T = x.rows(), K = x.cols(), N = w.dim(0);
  if (T == 0 || N == 0) return;
  // ~64K multiply-adds per chunk at least: below that, waking a worker costs more.
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, K * T));
  pool(ctx).parallel_for(N, grain, [&](int64_t n0, int64_t n1, int) { matmul_rows<Dec>(x, w, y, n0, n1); });
}

const bool registered = [] {
  auto& table = ops::matmul_table();
  table.add(Device::CPU, DType::F32, matmul_cpu<DecF32>);
  table.add(Device::CPU, DType::F16, matmul_cpu<DecF16>);
  table.add(Device::CPU, DType::BF16, matmul_cpu<DecBF16>);
  table.add(Device::CPU, DType::Q8_0, matmul_cpu<DecQ8_0>);
  table.add(Device::CPU, DType::Q4_0, matmul_cpu<DecQ4_0>);
  table.add(Device::CPU, DType::Q4_1, matmul_cpu<DecQ4_1>);
  table.add(Device::CPU, DType::Q4_K, matmul_cpu<DecQ4_K>);
  table.add(Device::CPU, DType::Q5_K, matmul_cpu<DecQ5_K>);
  table.add(Device::CPU, DType::Q6_K, matmul_cpu<DecQ6_K>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
