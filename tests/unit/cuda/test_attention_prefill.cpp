// CUDA vs CPU: the tensor-core prefill attention kernel (attention_prefill.cuh), called
// through its launch API, against the CPU reference op ops::paged_attention on the same
// pools. Sweeps T = 1, 7, 100, 300 (one tile, partial tiles, several tiles), q_pos0 = 0 and
// > 0, a shuffled block table with block sizes 16, 7 and 5, GQA groups 6 (Qwen3.5-27B: Hq 24,
// Hkv 4, D 256), 3 and 1, head dims 256, 128, 80, 64 and 37 (padded inside; 37 also takes the
// element-wise load path), f16 and i8 pools (and i8 K with f16 V and the reverse), f16 and
// f32 queries. Fresh random inputs each run. Pool rows past the last visible position hold
// NaN (f16) or a NaN scale (i8), and the output starts as 1e4: a read past the causal bound
// or an output element left unwritten fails the comparison.
// Tolerance (relative L2): 3e-3 for every setting. The kernel's tensor-core operands are f16
// whatever the activation dtype — the scaled (rotated) queries, i8 rows dequantized, and the
// softmax probabilities — each one rounding of 2^-11 relative on inputs the fp32 reference
// takes exactly; f16 output adds one more. Expected errors are a few 1e-4 (the bench's
// new-vs-old comparison on the 27B layer: 3-4e-4); a causal mask off by one key gives
// 0.05-0.6 (checked on the H200 with the mask broken on purpose).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backends/cuda/attention_prefill.cuh"
#include "cuda_test_util.h"
#include "paged_pool_util.h"
#include "ops/kv_quant.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"

namespace vi::cudatest {
namespace {

class AttentionPrefill : public CudaOpTest {
 protected:
  Pool make_pool(DType dt, bool is_k, const Shape& s, int64_t n_rows, const Tensor& table, int64_t S) {
    return make_paged_pool(cpu, g, dt, is_k, s, n_rows, table, S);
  }

  void check(const Shape& s, int64_t T, int64_t q_pos0, DType kdt, DType vdt) {
    const int64_t S = q_pos0 + T, n_blocks = (S + s.bs - 1) / s.bs + 2, n_rows = n_blocks * s.bs;
    Tensor table = shuffled_table(n_blocks);
    Pool k = make_pool(kdt, true, s, n_rows, table, S), v = make_pool(vdt, false, s, n_rows, table, S);
    Tensor q = rand_f32({T, s.Hq, s.D}, act(), -2, 2);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    Tensor ref = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    ops::paged_attention(cpu, q, k.host, v.host, table, s.bs, q_pos0, scale, ref);

    Tensor pos = Tensor::empty(DType::I32, {1});
    pos.ptr<int32_t>()[0] = static_cast<int32_t>(q_pos0);
    Tensor poison = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    std::fill_n(poison.ptr<float>(), poison.numel(), 1e4f);
    Tensor dq = up(q), dtable = ops::upload(g, table), dpos = ops::upload(g, pos), dout = up(poison);
    cuda::PrefillArgs a;
    a.q = dq.data();
    a.q_dtype = act();
    a.k = k.dev.data.data();
    a.v = v.dev.data.data();
    a.k_dtype = kdt;
    a.v_dtype = vdt;
    a.k_scale = kdt == DType::I8 ? k.dev.scale.ptr<float>() : nullptr;
    a.v_scale = vdt == DType::I8 ? v.dev.scale.ptr<float>() : nullptr;
    a.table = dtable.ptr<int32_t>();
    a.block_size = s.bs;
    a.q_pos = dpos.ptr<int32_t>();
    a.kv_bound = S + 50;  // only a bound: the positions come from q_pos on the device
    a.T = T;
    a.Hq = s.Hq;
    a.Hkv = s.Hkv;
    a.D = s.D;
    a.scale = scale;
    a.out = dout.data();
    ASSERT_TRUE(cuda::prefill_attention_fits(s.Hq, s.Hkv, s.D, act(), kdt, vdt));
    cuda::prefill_attention(g, a);
    EXPECT_CLOSE(down(dout), ref, 3e-3,
                 fmt::format("prefill K {} V {}: Hq={} Hkv={} D={} bs={} T={} pos0={}", dtype_name(kdt),
                             dtype_name(vdt), s.Hq, s.Hkv, s.D, s.bs, T, q_pos0));
  }
};

using TP = std::pair<int64_t, int64_t>;  // (T, q_pos0)

TEST_P(AttentionPrefill, Qwen35Shape) {
  const Shape s{24, 4, 256, 16};
  for (DType kv : {DType::F16, DType::I8})
    for (auto [T, p0] : {TP{1, 0}, TP{7, 0}, TP{100, 0}, TP{300, 0}, TP{7, 45}, TP{300, 211}}) check(s, T, p0, kv, kv);
}

TEST_P(AttentionPrefill, OddShapes) {
  // Hq = Hkv; group 3 with a head dim padded to 128 (rotation 64 + 16); group 2 at D 64 with
  // blocks of 7; D 37 (rotation 32 + 4 + 1, element-wise loads) with blocks of 5.
  const Shape shapes[] = {{8, 8, 128, 16}, {9, 3, 80, 16}, {6, 3, 64, 7}, {4, 1, 37, 5}};
  for (const Shape& s : shapes)
    for (DType kv : {DType::F16, DType::I8})
      for (auto [T, p0] : {TP{1, 0}, TP{7, 3}, TP{100, 0}, TP{300, 0}, TP{300, 1000}}) check(s, T, p0, kv, kv);
}

TEST_P(AttentionPrefill, MixedKvDtypes) {
  for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{9, 3, 80, 16}}) {
    check(s, 100, 37, DType::I8, DType::F16);
    check(s, 100, 37, DType::F16, DType::I8);
  }
}

TEST_P(AttentionPrefill, FitsRefuses) {
  EXPECT_TRUE(cuda::prefill_attention_fits(24, 4, 256, DType::F16, DType::F16, DType::F16));
  EXPECT_FALSE(cuda::prefill_attention_fits(24, 4, 256, DType::F16, DType::F32, DType::F32));  // f32 pools
  EXPECT_FALSE(cuda::prefill_attention_fits(24, 4, 288, DType::F16, DType::F16, DType::F16));  // D > 256
  EXPECT_FALSE(cuda::prefill_attention_fits(24, 5, 128, DType::F16, DType::F16, DType::F16));  // no GQA group
}

// The kernel does not consult the kernel profile (one sm_70 kernel serves both), so only the
// activation (query) dtype is swept.
INSTANTIATE_TEST_SUITE_P(Settings, AttentionPrefill,
                         ::testing::Values(Setting{ops::KernelProfile::kNative, DType::F32},
                                           Setting{ops::KernelProfile::kNative, DType::F16}),
                         setting_name);

}  // namespace
}  // namespace vi::cudatest
