// CPU kernel of conv1d_causal: the depthwise causal conv (+ SiLU) in front of the Gated
// DeltaNet recurrence, with the previous K-1 inputs carried in a state (MODEL_QWEN35 §5.2 step 2).
#include <algorithm>
#include <vector>

#include "backends/cpu/gdn_util.h"
#include "ops/gdn.h"

namespace vi::cpu::gdn {
namespace {

// Channels per work item: wide enough for vector loops over channels, small enough that
// a 2-core run of a 10240-channel layer still splits evenly.
constexpr int64_t kChannelBlock = 64;

// x, y: [T, C] of E; w: [C, K] f32; state: [K-1, C] f32 (oldest row first).
// Each block keeps a ring of its last K-1 inputs, reading x[t] before writing y[t], so y may
// alias x and T < K-1 needs no special case: the ring starts as the old state.
template <class E>
void conv1d_causal_cpu(ops::Context& ctx, const Tensor& x, const Tensor& w, Tensor& state,
                       bool silu_out, Tensor& y) {
  using S = typename E::Storage;
  const int64_t T = x.dim(0), C = x.dim(1), K = w.dim(1), H = K - 1;
  const int64_t n_blocks = (C + kChannelBlock - 1) / kChannelBlock;
  const float* wp = w.ptr<float>();
  float* sp = state.ptr<float>();
  const S* xp = x.ptr<S>();
  S* yp = y.ptr<S>();

  pool_of(ctx).parallel_for(n_blocks, 1, [&](int64_t b0, int64_t b1, int) {
    std::vector<float> wt(static_cast<size_t>(K * kChannelBlock));   // [K, nb] transposed taps
    std::vector<float> ring(static_cast<size_t>(H * kChannelBlock));  // [H, nb]
    float xv[kChannelBlock], acc[kChannelBlock];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t c0 = blk * kChannelBlock, nb = std::min(kChannelBlock, C - c0);
      for (int64_t c = 0; c < nb; ++c)
        for (int64_t i = 0; i < K; ++i) wt[i * kChannelBlock + c] = wp[(c0 + c) * K + i];
      for (int64_t i = 0; i < H; ++i)
        std::copy_n(sp + i * C + c0, nb, ring.data() + i * kChannelBlock);
      int64_t oldest = 0;  // ring slot holding the oldest input
      for (int64_t t = 0; t < T; ++t) {
        const S* xr = xp + t * C + c0;
        for (int64_t c = 0; c < nb; ++c) xv[c] = E::load(xr[c]);
        const float* wcur = wt.data() + H * kChannelBlock;
        for (int64_t c = 0; c < nb; ++c) acc[c] = wcur[c] * xv[c];
        for (int64_t i = 0; i < H; ++i) {
          const float* wi = wt.data() + i * kChannelBlock;
          const float* ri = ring.data() + ((oldest + i) % H) * kChannelBlock;
          for (int64_t c = 0; c < nb; ++c) acc[c] += wi[c] * ri[c];
        }
        S* yr = yp + t * C + c0;
        if (silu_out) {
          for (int64_t c = 0; c < nb; ++c) yr[c] = E::store(silu(acc[c]));
        } else {
          for (int64_t c = 0; c < nb; ++c) yr[c] = E::store(acc[c]);
        }
        if (H > 0) {
          std::copy_n(xv, nb, ring.data() + oldest * kChannelBlock);
          oldest = (oldest + 1) % H;
        }
      }
      for (int64_t i = 0; i < H; ++i)
        std::copy_n(ring.data() + ((oldest + i) % H) * kChannelBlock, nb, sp + i * C + c0);
    }
  });
}

const bool registered = [] {
  auto& table = ops::conv1d_causal_table();
  table.add(Device::CPU, DType::F32, &conv1d_causal_cpu<F32>);
  table.add(Device::CPU, DType::F16, &conv1d_causal_cpu<F16>);
  table.add(Device::CPU, DType::BF16, &conv1d_causal_cpu<BF16>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu::gdn
