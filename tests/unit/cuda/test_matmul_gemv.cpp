// CUDA vs CPU for the decode GEMV on prepared weights (ops::prepare_matmul_weight): every
// weight dtype, T = 1..8 (each token count; T = 9 crosses to the GEMM path), odd N (rows past
// the last full tile), K that leave partial 128-value steps, small and large N (both tile
// counts of the tensor-core GEMV), weights of realistic magnitude, in both kernel profiles
// and both activation dtypes. The CPU reference always runs on the original (file-layout)
// weights. Outputs are poisoned with NaN first, so an unwritten value fails. Tolerances as in
// test_matmul.cpp: relative L2 1e-5 with f32 activations, 4e-3 with f16 (f16 output, and on
// the tensor-core path each weight dequantized to f16 once: about 2^-11 relative).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "backends/cuda/gemv_mma.cuh"
#include "backends/cuda/gemv_q4kr.cuh"
#include "backends/cuda/gemv_q4kr_volta.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "core/quant.h"
#include "cuda_test_util.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/matmul.h"
#include "ops/prepare_matmul_weight.h"

namespace vi::cudatest {
namespace {

constexpr DType kWeights[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

class MatmulGemv : public CudaOpTest {
 protected:
  // y = x · wᵀ on the GPU with the prepared weight, against the CPU on the original.
  void check(const Tensor& w, const Tensor& dw, int64_t T, float x_scale, const std::string& what) {
    const int64_t N = w.dim(0), K = w.dim(1);
    Tensor x = rand_f32({T, K}, act(), -x_scale, x_scale);
    Tensor ref = Tensor::empty(DType::F32, {T, N});
    ops::matmul(cpu, x, w, ref);
    Tensor nan = nan_f32({T, N});
    Tensor dx = up(x), dy = up(nan);
    ops::matmul(g, dx, dw, dy);
    EXPECT_CLOSE(down(dy), ref, tol(1e-5, 4e-3), fmt::format("{} T={} N={} K={}", what, T, N, K));
  }
  // h = silu(x · gateᵀ) ⊙ (x · upᵀ) through ops::matmul_swiglu on the GPU with the prepared gate|up
  // weight, against the CPU's matmul + swiglu_halves on the original. Outputs and the gu scratch
  // are poisoned with NaN first (a fused kernel leaves gu unwritten).
  void check_swiglu(const Tensor& w, const Tensor& dw, int64_t T, const std::string& what) {
    const int64_t F = w.dim(0) / 2, K = w.dim(1);
    Tensor x = rand_f32({T, K}, act(), -2.0f, 2.0f);
    Tensor gu = Tensor::empty(DType::F32, {T, 2 * F}), ref = Tensor::empty(DType::F32, {T, F});
    ops::matmul(cpu, x, w, gu);
    ops::swiglu_halves(cpu, gu, ref);
    Tensor nan_h = nan_f32({T, F}), nan_gu = nan_f32({T, 2 * F});
    Tensor dx = up(x), dgu = up(nan_gu), dh = up(nan_h);
    ops::matmul_swiglu(g, dx, dw, dgu, dh);
    EXPECT_CLOSE(down(dh), ref, tol(1e-5, 4e-3), fmt::format("matmul_swiglu {} F={} K={} T={}", what, F, K, T));
  }
  // Rows (13 t + 5) % V of a table of dtype wt, prepared on the GPU (it must become `prepared`)
  // and embedded there, against the CPU on the original table.
  void check_prepared_embedding(DType wt, DType prepared, int64_t V, int64_t d, int64_t T) {
    Tensor table = rand_weight(wt, V, d);
    Tensor dt = ops::prepare_matmul_weight(g, ops::upload(g, table));
    ASSERT_EQ(dt.dtype(), prepared);
    Tensor ids = Tensor::empty(DType::I32, {T});
    for (int64_t t = 0; t < T; ++t) ids.ptr<int32_t>()[t] = static_cast<int32_t>((t * 13 + 5) % V);
    Tensor ref = Tensor::empty(DType::F32, {T, d});
    ops::embedding(cpu, table, ids, ref);
    Tensor dout = gpu_empty({T, d});
    ops::embedding(g, dt, ids, dout);
    EXPECT_CLOSE(down(dout), ref, tol(1e-6, 1e-3), fmt::format("embedding {}", dtype_name(prepared)));
  }
};

TEST_P(MatmulGemv, PreparedWeightsEveryDtypeEveryTokenCount) {
  for (DType wt : kWeights) {
    // 768: 3 super-blocks, 6 steps of 128 values (the 8 warps of a block do not all get one);
    // 1280: 10 steps. Plain dtypes also get 352 (11 units of 32: a partial step).
    std::vector<int64_t> ks = {768, 1280};
    if (!dtype_is_quantized(wt)) ks.push_back(352);
    for (int64_t K : ks) {
      const int64_t N = 97;
      Tensor w = rand_weight(wt, N, K);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      EXPECT_EQ(dw.dtype(), wt == DType::Q8_0 ? DType::Q8_0R : wt) << dtype_name(wt);
      EXPECT_EQ(dw.shape(), w.shape());
      for (int64_t T = 1; T <= 9; ++T) check(w, dw, T, 1.0f, fmt::format("prepared {}", dtype_name(wt)));
    }
  }
}

TEST_P(MatmulGemv, Q8_0KeepsFileLayoutWhenRowsAreNotWholeGroups) {
  const int64_t N = 33, K = 32 * 13;  // 13 blocks per row: not a whole number of 8-block groups
  Tensor w = rand_weight(DType::Q8_0, N, K);
  Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
  EXPECT_EQ(dw.dtype(), DType::Q8_0);
  for (int64_t T : {1, 4}) check(w, dw, T, 1.0f, "q8_0 unprepared");
}

TEST_P(MatmulGemv, ManyRowsRealisticMagnitudes) {
  // N >= 64 rows x SMs (8448 on a 132-SM H200) takes the two-tile kernel; weights of
  // magnitude 0.02 (typical of trained layers) put the f16 scales far below 1.
  const int64_t N = 8501, K = 512;
  for (DType wt : {DType::Q4_K, DType::Q5_K, DType::Q8_0, DType::F16}) {
    Tensor w = rand_weight(wt, N, K, 0.02f);
    Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
    for (int64_t T : {1, 2, 5, 8}) check(w, dw, T, 4.0f, fmt::format("large {}", dtype_name(wt)));
  }
}

TEST_P(MatmulGemv, EveryWorkShapeOfTheTensorCoreGemv) {
  // The dispatch picks one work shape per matrix size; the others are compared here too.
  const int64_t N = 97, K = 768;
  for (DType wt : {DType::Q4_K, DType::Q5_K, DType::Q8_0, DType::F16}) {
    Tensor w = rand_weight(wt, N, K);
    Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
    for (int64_t T : {1, 3, 8}) {
      Tensor x = rand_f32({T, K}, act());
      Tensor dx = up(x);
      if (!cuda::gemv_mma_supports(g, dx, dw)) GTEST_SKIP() << "the tensor-core GEMV does not run in this setting";
      Tensor ref = Tensor::empty(DType::F32, {T, N});
      ops::matmul(cpu, x, w, ref);
      for (cuda::GemvMmaShape v : cuda::gemv_mma_shapes(dw.dtype())) {
        Tensor nan = nan_f32({T, N});
        Tensor dy = up(nan);  // poisoned: an unwritten output fails
        cuda::gemv_mma(g, dx, dw, dy, v);
        EXPECT_CLOSE(down(dy), ref, 4e-3,
                     fmt::format("{} T={} tiles {} blocks/SM {} x staged {} depth {}", dtype_name(wt), T, v.tiles,
                                 v.min_blocks, v.stage_x, v.depth));
      }
    }
  }
}

// The deep Q8_0R kernel of gemv_mma (4 warps per 16-row tile, each taking groups of 256 values
// w, w + 4, ... half by half, several halves loaded ahead) in every compiled depth, against the
// CPU on the Q8_0 original. N = 16 is one whole tile, 97 and 300 end in a partial one; K = 256
// is one group (3 of the 4 warps idle), 1792 is 7 (warp 3 gets one group less), 2560 is 10
// (two warps 3 groups, two 2: a partial round at depth 4 and 6), 4352 is 17 (8 or 10 halves a
// warp: whole rounds at depth 4, partial at 6). Weights of magnitude 0.02 put the f16 scales
// far below 1.
TEST_P(MatmulGemv, Q8_0RDeepKernelEveryDepth) {
  for (int64_t K : {256, 1792, 2560, 4352}) {
    for (int64_t N : {16, 97, 300}) {
      const float scale = N == 97 ? 0.02f : 1.0f;
      Tensor w = rand_weight(DType::Q8_0, N, K, scale);
      // N = 16 would become Q8_0T; a view of 8 rows keeps the row layout this kernel reads.
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w), N % 16 == 0 ? std::vector<int64_t>{8, N - 8}
                                                                                : std::vector<int64_t>{});
      ASSERT_EQ(dw.dtype(), DType::Q8_0R);
      for (int64_t T = 1; T <= 8; ++T) {
        Tensor x = rand_f32({T, K}, act(), -4.0f, 4.0f);
        Tensor dx = up(x);
        if (!cuda::gemv_mma_supports(g, dx, dw)) GTEST_SKIP() << "the tensor-core GEMV does not run in this setting";
        Tensor ref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, ref);
        for (cuda::GemvMmaShape v : cuda::gemv_mma_shapes(DType::Q8_0R)) {
          if (v.depth == 0) continue;  // the step kernel's shapes: EveryWorkShapeOfTheTensorCoreGemv
          Tensor nan = nan_f32({T, N});
          Tensor dy = up(nan);
          cuda::gemv_mma(g, dx, dw, dy, v);
          EXPECT_CLOSE(down(dy), ref, 4e-3,
                       fmt::format("q8_0r deep N={} K={} T={} depth {} x ahead {}", N, K, T, v.depth, v.stage_x));
        }
      }
    }
  }
}

// Q4_K rows of whole 1024-value groups become Q4_KR: the tensor-core GEMV of gemv_q4kr.cu in
// the native profile with f16 activations (every work shape it has), the CUDA-core GEMV and
// the GEMM path (T = 9, 17) everywhere else, all against the CPU on the Q4_K original. N = 97
// leaves a partial 16-row tile; K = 1024 is 4 super-blocks (fewer than the warps of some shapes),
// 3072 is 24, 7168 is 28 super-blocks (uneven over 8 warps; 7 blocks: the ring wraps). Weights of magnitude 0.02 put the f16 scales far below 1.
TEST_P(MatmulGemv, Q4KRepackedEveryPathAndWorkShape) {
  const int64_t N = 97;
  for (int64_t K : {1024, 3072, 7168}) {
    for (float scale : {1.0f, 0.02f}) {
      Tensor w = rand_weight(DType::Q4_K, N, K, scale);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      ASSERT_EQ(dw.dtype(), DType::Q4_KR);
      EXPECT_EQ(dw.shape(), w.shape());
      EXPECT_EQ(dw.row_bytes(), static_cast<size_t>(K / 256 * 148));
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17})
        check(w, dw, T, 4.0f, fmt::format("q4_kr scale {}", scale));
      for (int64_t T : {1, 3, 4, 8}) {
        Tensor x = rand_f32({T, K}, act(), -4.0f, 4.0f);
        Tensor dx = up(x);
        if (!cuda::gemv_q4kr_supports(g, dx, dw)) continue;  // volta profile / f32: covered by check()
        Tensor ref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, ref);
        for (cuda::GemvQ4krShape v : cuda::gemv_q4kr_shapes(g)) {
          Tensor nan = nan_f32({T, N});
          Tensor dy = up(nan);
          cuda::gemv_q4kr(g, dx, dw, dy, v);
          EXPECT_CLOSE(down(dy), ref, 4e-3,
                       fmt::format("q4_kr K={} T={} {}", K, T, cuda::gemv_q4kr_shape_name(v)));
        }
      }
    }
  }
}

// The Q4_KR deep kernel's default blocks a SM follow Q4_KT's rule (the same 16-row tiles of 4
// warps): 3 where the tiles fit one wave of 3 on the usable SMs, else 4, on any SM count from 40
// (a 5120-row matrix on 94 SMs takes 4, one wave, not 3 and a tail); the fused gate|up kernel
// takes the unfused GEMV's count (not observable here: it has no shape argument).
TEST_P(MatmulGemv, Q4KRDefaultBlocksFollowTheTiledRule) {
  for_each_usable_sm_count(40, [&](int sms) {
    for (const int64_t n : {int64_t(5120), int64_t(6144), int64_t(8192), int64_t(17408), int64_t(34816)}) {
      const cuda::GemvQ4krShape s = cuda::gemv_q4kr_default_shape(g, n, 5120);
      const std::string at = fmt::format("{} rows on {} SMs", n, sms);
      EXPECT_EQ(s.kernel, cuda::GemvQ4krShape::Kernel::kDeep) << at;
      EXPECT_EQ(s.param, 2) << at;
      EXPECT_EQ(s.blocks, n / 16 <= 3 * sms ? 3 : 4) << at;
      EXPECT_EQ(s.blocks, cuda::gemv_q4kt_default_blocks(n)) << at;
    }
  });
}

// Q4_K rows of whole 1024-value groups and whole 16-row tiles become Q4_KT where its tensor-core
// GEMV reads it (native profile, sm_80+, f16 activations; Q4_KR elsewhere): every path through
// ops::matmul (T = 1..8 the GEMV, 9 and 17 the GEMM path on dequantized tiles) against the CPU on
// the Q4_K original; the GEMV in each compiled budget; and bit for bit against the Q4_KR deep
// kernel on the same weight (the same sums in the same order). The Q4_KR copy is what
// prepare_matmul_weight makes when a caller's row views would cut a tile (parts 8 + N - 8).
// N = 16 is one tile, 112 seven, 2048 128 (the GEMM path's 128-row chunks); K = 1024 is 4
// super-blocks (one per warp), 3072 is 12 (3 per warp: a partial round of 2 ahead), 7168 is 28.
TEST_P(MatmulGemv, Q4KTiledEveryPathAndShape) {
  for (int64_t N : {16, 112, 2048}) {
    for (int64_t K : {1024, 3072, 7168}) {
      if (N == 2048 && K != 3072) continue;
      const float scale = N == 16 ? 0.02f : 1.0f;
      Tensor w = rand_weight(DType::Q4_K, N, K, scale);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      Tensor rw = ops::prepare_matmul_weight(g, ops::upload(g, w), {8, N - 8});
      ASSERT_EQ(rw.dtype(), DType::Q4_KR) << "a view of 8 rows cuts a tile";
      Tensor x1 = up(rand_f32({1, K}, act(), -1.0f, 1.0f));
      if (!cuda::gemv_q4kr_supports(g, x1, rw)) {  // volta profile, f32 activations: no Q4_KT
        EXPECT_EQ(dw.dtype(), DType::Q4_KR);
        continue;
      }
      ASSERT_EQ(dw.dtype(), DType::Q4_KT);
      EXPECT_EQ(dw.nbytes(), rw.nbytes());
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) check(w, dw, T, 4.0f, fmt::format("q4_kt scale {}", scale));
      for (int64_t T : {1, 3, 8}) {
        Tensor x = rand_f32({T, K}, act(), -4.0f, 4.0f);
        Tensor dx = up(x);
        ASSERT_TRUE(cuda::gemv_q4kt_supports(g, dx, dw));
        Tensor ref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, ref);
        Tensor nan = nan_f32({T, N});
        Tensor deep = up(nan);
        cuda::gemv_q4kr(g, dx, rw, deep, {cuda::GemvQ4krShape::Kernel::kDeep, 2, 3});
        const Tensor deep_h = down(deep);
        for (cuda::Q4ktShape shape : cuda::gemv_q4kt_shapes()) {
          Tensor dy = up(nan);
          cuda::gemv_q4kt(g, dx, dw, dy, shape);
          const Tensor got = down(dy);
          const std::string what = fmt::format("q4_kt N={} K={} T={} {}", N, K, T, cuda::gemv_q4kt_shape_name(shape));
          EXPECT_CLOSE(got, ref, 4e-3, what);
          int64_t differ = 0;
          for (int64_t i = 0; i < got.numel(); ++i) differ += got.ptr<float>()[i] != deep_h.ptr<float>()[i];
          EXPECT_EQ(differ, 0) << what << ": outputs that differ from the Q4_KR deep kernel's";
        }
      }
    }
  }
}

// Row views of a Q4_KT weight: whole tiles are a Q4_KT matrix of their own (rows 16..47 of 64
// against the CPU on the same rows of the original); a slice that cuts a tile is an error.
TEST_P(MatmulGemv, Q4KTiledRowViews) {
  const int64_t N = 64, K = 2048;
  Tensor w = rand_weight(DType::Q4_K, N, K);
  Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
  if (dw.dtype() != DType::Q4_KT) GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
  Tensor part = w.slice_rows(16, 48), dpart = dw.slice_rows(16, 48);
  for (int64_t T : {1, 4, 9}) check(part, dpart, T, 2.0f, "q4_kt rows 16..47");
  EXPECT_THROW(dw.slice_rows(8, 24), Error);
  EXPECT_THROW(dw.slice_rows(0, 40), Error);
}

// matmul_split on a stacked Q4_K projection (parts of whole tiles: Q4_KT, whose decode GEMV
// writes each part's rows into the part's own tensor) and on one whose first part cuts a tile
// (Q4_KR: matmul into `all` and split_cols): every part bit for bit the column block of the
// stacked matmul, and close to the CPU's. T = 9 runs the GEMM path in both. Parts and `all` are
// poisoned with NaN first; the GEMV must leave nothing of a part unwritten.
TEST_P(MatmulGemv, SplitIntoPartsLikeMatmulThenSplitCols) {
  const int64_t K = 2048;
  for (const std::vector<int64_t>& widths : {std::vector<int64_t>{48, 16, 96, 32, 16, 48},
                                             std::vector<int64_t>{8, 40, 16}}) {
    int64_t N = 0;
    for (int64_t wp : widths) N += wp;
    Tensor w = rand_weight(DType::Q4_K, N, K, 0.5f);
    Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w), widths);
    for (int64_t T : {1, 2, 4, 8, 9}) {
      const std::string what = fmt::format("{} parts of {} T={}", widths.size(), dtype_name(dw.dtype()), T);
      Tensor x = rand_f32({T, K}, act(), -2.0f, 2.0f);
      Tensor dx = up(x);
      Tensor ref_all = gpu_empty({T, N});
      ops::matmul(g, dx, dw, ref_all);
      const Tensor ref = down(ref_all);
      std::vector<Tensor> parts;
      std::vector<Tensor*> dsts;
      for (int64_t wp : widths) parts.push_back(up(nan_f32({T, wp})));
      for (Tensor& p : parts) dsts.push_back(&p);
      Tensor all = up(nan_f32({T, N}));
      const bool direct = dw.dtype() == DType::Q4_KT && T <= 8;
      EXPECT_EQ(cuda::gemv_q4kt_split_supports(g, dx, dw, dsts), direct) << what;
      ops::matmul_split(g, dx, dw, all, dsts);
      int64_t o = 0, differ = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        const Tensor got = down(parts[i]);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t c = 0; c < widths[i]; ++c)
            differ += !(got.ptr<float>()[t * widths[i] + c] == ref.ptr<float>()[t * N + o + c]);
        o += widths[i];
      }
      EXPECT_EQ(differ, 0) << what << ": values that differ from the stacked matmul's column blocks";
      if (T == 4) {
        Tensor cref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, cref);
        EXPECT_CLOSE(ref, cref, tol(1e-5, 4e-3), what + ": stacked matmul vs the CPU");
      }
    }
  }
}

// The fused gate|up GEMV + SwiGLU on Q4_KT (gemv_q4kt_swiglu: 8 gate rows and the matching 8 up
// rows per block, from half of a gate tile and of its up tile) against the CPU's matmul +
// swiglu_halves on the Q4_K original, and bit for bit against the Q4_KR kernel in every shape
// (super-blocks one at a time and in pairs). F = 96 is 6
// tiles per half; F = 4096 the other register budget's size; F = 104 (208 rows: whole tiles, but
// the up half starts inside one) is Q4_KT only without views, and then runs unfused (matmul of the
// whole stack + swiglu_halves); with its views {104, 104} it stays Q4_KR.
TEST_P(MatmulGemv, Q4KTiledFusedGateUpSwiglu) {
  for (int64_t F : {96, 104, 4096}) {
    const int64_t K = F == 4096 ? 1024 : 3072;
    Tensor w = rand_weight(DType::Q4_K, 2 * F, K, F == 96 ? 0.02f : 1.0f);
    Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
    Tensor vw = ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F});
    if (dw.dtype() != DType::Q4_KT) GTEST_SKIP() << "Q4_KT is made for the native profile with f16 activations";
    EXPECT_EQ(vw.dtype(), F % 16 == 0 ? DType::Q4_KT : DType::Q4_KR);
    for (int64_t T : {1, 2, 3, 5, 8, 9}) {
      check_swiglu(w, dw, T, "q4_kt");
      check_swiglu(w, vw, T, dtype_name(vw.dtype()));
    }
    // The fused kernels of both layouts: the same h, bit for bit.
    Tensor rw = ops::prepare_matmul_weight(g, ops::upload(g, w), {8, 2 * F - 8});
    ASSERT_EQ(rw.dtype(), DType::Q4_KR);
    for (int64_t T : {1, 4, 8}) {
      Tensor dx = up(rand_f32({T, K}, act(), -2.0f, 2.0f));
      if (!cuda::gemv_q4kt_swiglu_supports(g, dx, dw)) continue;  // F = 104: no fused Q4_KT kernel
      Tensor nan = nan_f32({T, F});
      Tensor hr = up(nan);
      cuda::gemv_q4kr_swiglu(g, dx, rw, hr);
      const Tensor b = down(hr);
      for (cuda::Q4ktShape shape : cuda::gemv_q4kt_shapes()) {  // one super-block at a time, and pairs
        Tensor ht = up(nan);
        cuda::gemv_q4kt_swiglu(g, dx, dw, ht, shape);
        const Tensor a = down(ht);
        int64_t differ = 0;
        for (int64_t i = 0; i < a.numel(); ++i) differ += !(a.ptr<float>()[i] == b.ptr<float>()[i]);
        EXPECT_EQ(differ, 0) << "fused swiglu F=" << F << " T=" << T << " " << cuda::gemv_q4kt_shape_name(shape)
                             << ": outputs of Q4_KT and Q4_KR that differ";
      }
    }
  }
}

// A gate|up stack prepared for a SwiGLU that reads it only whole (ops::MatmulUse::kSwiglu) becomes
// Q4_KTS where Q4_KT would be made (native profile, f16, sm_80+), else what the stack would be
// anyway: through ops::matmul_swiglu (the fused GEMV up to 8 tokens, the GEMM path's dequantized
// tiles + swiglu_halves beyond) and ops::matmul (the GEMM path: its rows in logical order) against
// the CPU on the Q4_K original, and the fused GEMV's h bit for bit the Q4_KT kernel's in every
// shape (each row's bytes and products are the same; only where they lie differs). F = 96 has 12
// tiles of pairs; F = 4104 (= 8 x 513) more blocks than a wave, and no whole 16-row halves, so
// only the paired layout tiles it; F = 100 cannot be paired and stays a row layout.
TEST_P(MatmulGemv, Q4KPairedGateUpTiles) {
  for (int64_t F : {96, 4104, 100}) {
    const int64_t K = F == 4104 ? 1024 : 3072;
    Tensor w = rand_weight(DType::Q4_K, 2 * F, K, F == 96 ? 0.02f : 1.0f);
    Tensor dp = ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F}, ops::MatmulInput::kAny,
                                           ops::MatmulUse::kSwiglu);
    Tensor dt = ops::prepare_matmul_weight(g, ops::upload(g, w));  // Q4_KT where the setting and shape allow
    if (dt.dtype() != DType::Q4_KT) {  // volta profile, f32 activations, or 2F not whole tiles (F = 100)
      EXPECT_NE(dp.dtype(), DType::Q4_KTS) << "F=" << F << ": paired only where the tiled layouts are made";
      continue;
    }
    ASSERT_EQ(dp.dtype(), DType::Q4_KTS) << "F=" << F;
    EXPECT_EQ(dp.nbytes(), ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F}).nbytes());
    EXPECT_THROW(dp.slice_rows(0, F), Error) << "no row views of a paired stack";
    for (int64_t T : {1, 2, 3, 5, 8, 9}) check_swiglu(w, dp, T, "q4_kts");
    for (int64_t T : {1, 9}) check(w, dp, T, 2.0f, fmt::format("q4_kts matmul F={}", F));
    if (F % 16 != 0) continue;  // F = 4104: no fused Q4_KT kernel (its blocks take halves of 16-row tiles)
    for (int64_t T : {1, 4, 8}) {
      Tensor dx = up(rand_f32({T, K}, act(), -2.0f, 2.0f));
      ASSERT_TRUE(cuda::gemv_q4kt_swiglu_supports(g, dx, dp));
      EXPECT_FALSE(cuda::gemv_q4kt_supports(g, dx, dp)) << "the plain GEMV would write rows out of order";
      Tensor nan = nan_f32({T, F});
      for (cuda::Q4ktShape shape : cuda::gemv_q4kt_shapes()) {
        Tensor ht = up(nan), hp = up(nan);
        cuda::gemv_q4kt_swiglu(g, dx, dt, ht, shape);
        cuda::gemv_q4kt_swiglu(g, dx, dp, hp, shape);
        const Tensor a = down(ht), b = down(hp);
        int64_t differ = 0;
        for (int64_t i = 0; i < a.numel(); ++i) differ += !(a.ptr<float>()[i] == b.ptr<float>()[i]);
        EXPECT_EQ(differ, 0) << "fused swiglu F=" << F << " T=" << T << " " << cuda::gemv_q4kt_shape_name(shape)
                             << ": outputs of Q4_KTS and Q4_KT that differ";
      }
    }
  }
}

// Q8_0 rows of whole 256-value groups and whole 16-row tiles become Q8_0T where the tensor-core
// GEMV reads it (native profile, sm_80+, f16 activations; Q8_0R elsewhere, and where a view of 8
// rows cuts a tile): every path through ops::matmul against the CPU on the Q8_0 original, and the
// step kernel in each of its shapes bit for bit against the same shape on Q8_0R (the same loads'
// values, decode and sums). N = 16 is one tile, 112 seven (an odd count for two tiles a block),
// 2048 the GEMM path's 128-row chunks; K = 256 is two steps (6 of the 8 warps idle), 768 six,
// 3072 24.
TEST_P(MatmulGemv, Q8TiledEveryPathAndShape) {
  for (int64_t N : {16, 112, 2048}) {
    for (int64_t K : {256, 768, 3072}) {
      if (N == 2048 && K != 768) continue;
      const float scale = N == 16 ? 0.02f : 1.0f;
      Tensor w = rand_weight(DType::Q8_0, N, K, scale);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      Tensor rw = ops::prepare_matmul_weight(g, ops::upload(g, w), {8, N - 8});
      ASSERT_EQ(rw.dtype(), DType::Q8_0R) << "a view of 8 rows cuts a tile";
      Tensor x1 = up(rand_f32({1, K}, act(), -1.0f, 1.0f));
      if (!cuda::gemv_mma_supports(g, x1, rw)) {  // volta profile, f32 activations: no Q8_0T
        EXPECT_EQ(dw.dtype(), DType::Q8_0R);
        continue;
      }
      ASSERT_EQ(dw.dtype(), DType::Q8_0T);
      EXPECT_EQ(dw.nbytes(), rw.nbytes());
      for (int64_t T : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17}) check(w, dw, T, 4.0f, fmt::format("q8_0t scale {}", scale));
      for (int64_t T : {1, 3, 8}) {
        Tensor x = rand_f32({T, K}, act(), -4.0f, 4.0f);
        Tensor dx = up(x);
        ASSERT_TRUE(cuda::gemv_mma_supports(g, dx, dw));
        Tensor ref = Tensor::empty(DType::F32, {T, N});
        ops::matmul(cpu, x, w, ref);
        Tensor nan = nan_f32({T, N});
        for (cuda::GemvMmaShape v : cuda::gemv_mma_shapes(DType::Q8_0T)) {
          Tensor dy = up(nan), dr = up(nan);
          cuda::gemv_mma(g, dx, dw, dy, v);
          cuda::gemv_mma(g, dx, rw, dr, v);
          const Tensor got = down(dy), row = down(dr);
          const std::string what = fmt::format("q8_0t N={} K={} T={} tiles {} blocks/SM {} x {}", N, K, T, v.tiles,
                                               v.min_blocks, v.stage_x ? "staged" : "late");
          EXPECT_CLOSE(got, ref, 4e-3, what);
          int64_t differ = 0;
          for (int64_t i = 0; i < got.numel(); ++i) differ += got.ptr<float>()[i] != row.ptr<float>()[i];
          EXPECT_EQ(differ, 0) << what << ": outputs that differ from the same shape on Q8_0R";
        }
      }
    }
  }
}

// The fused gate|up GEMV + SwiGLU on Q8_0T (gemv_mma_swiglu: half of a gate tile and of its up
// tile per row tile) against the CPU and bit for bit against Q8_0R; F = 104 (the up half starts
// inside a tile) runs unfused on Q8_0T, and stays Q8_0R with its views. Row views of whole tiles.
TEST_P(MatmulGemv, Q8TiledFusedGateUpSwigluAndViews) {
  for (int64_t F : {96, 104, 4096}) {
    const int64_t K = F == 4096 ? 256 : 768;
    Tensor w = rand_weight(DType::Q8_0, 2 * F, K, F == 96 ? 0.02f : 1.0f);
    Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
    Tensor vw = ops::prepare_matmul_weight(g, ops::upload(g, w), {F, F});
    if (dw.dtype() != DType::Q8_0T) GTEST_SKIP() << "Q8_0T is made for the native profile with f16 activations";
    EXPECT_EQ(vw.dtype(), F % 16 == 0 ? DType::Q8_0T : DType::Q8_0R);
    for (int64_t T : {1, 2, 3, 5, 8, 9}) {
      check_swiglu(w, dw, T, "q8_0t");
      check_swiglu(w, vw, T, dtype_name(vw.dtype()));
    }
    Tensor rw = ops::prepare_matmul_weight(g, ops::upload(g, w), {8, 2 * F - 8});
    ASSERT_EQ(rw.dtype(), DType::Q8_0R);
    for (int64_t T : {1, 4}) {
      Tensor dx = up(rand_f32({T, K}, act(), -2.0f, 2.0f));
      if (!cuda::gemv_mma_swiglu_supports(g, dx, dw)) continue;  // F = 104
      Tensor nan = nan_f32({T, F});
      Tensor ht = up(nan), hr = up(nan);
      cuda::gemv_mma_swiglu(g, dx, dw, ht);
      cuda::gemv_mma_swiglu(g, dx, rw, hr);
      const Tensor a = down(ht), b = down(hr);
      int64_t differ = 0;
      for (int64_t i = 0; i < a.numel(); ++i) differ += !(a.ptr<float>()[i] == b.ptr<float>()[i]);
      EXPECT_EQ(differ, 0) << "fused swiglu F=" << F << " T=" << T << ": outputs of Q8_0T and Q8_0R that differ";
    }
  }
  Tensor w = rand_weight(DType::Q8_0, 64, 512);
  Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
  Tensor part = w.slice_rows(16, 48), dpart = dw.slice_rows(16, 48);
  for (int64_t T : {1, 4, 9}) check(part, dpart, T, 2.0f, "q8_0t rows 16..47");
  EXPECT_THROW(dw.slice_rows(8, 24), Error);
}

// The fused gate|up GEMV + SwiGLU (ops::matmul_swiglu; on the GPU gemv_q4kr_swiglu where the Q4_KR
// decode GEMV runs, matmul + swiglu_halves elsewhere: T = 9, the volta profile, f32) against the
// CPU's matmul + swiglu_halves on the Q4_K original. F = 97 ends in a partial tile of 8 gate rows;
// 300 fills 37 tiles and a partial one; 4100 makes 8200 stacked rows (the other kernel shape).
// Outputs poisoned with NaN; the gu scratch too, which the fused kernel leaves unwritten.
TEST_P(MatmulGemv, Q4KRFusedGateUpSwiglu) {
  for (int64_t F : {97, 300, 4100}) {
    for (int64_t K : {1024, 3072}) {
      if (F == 4100 && K == 3072) continue;  // the kernel shape is the point there, not K
      Tensor w = rand_weight(DType::Q4_K, 2 * F, K, F == 300 ? 0.02f : 1.0f);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      ASSERT_EQ(dw.dtype(), DType::Q4_KR);
      for (int64_t T : {1, 2, 3, 4, 5, 8, 9}) check_swiglu(w, dw, T, "q4_kr");
    }
  }
}

// The same fused op on the other decode GEMV (gemv_mma_swiglu: Q8_0 prepared to Q8_0R, F16, Q5_K,
// and Q4_K rows that stay in the file layout, K = 768), in every token count its default shapes
// cover (1-2 tokens: one tile per block; more: two), against the CPU's matmul + swiglu_halves on the
// original weights. F = 97 ends in a partial tile; 300 in a partial block of two tiles.
TEST_P(MatmulGemv, FusedGateUpSwigluOnTheStepKernel) {
  for (DType wt : {DType::Q8_0, DType::F16, DType::Q5_K, DType::Q4_K}) {
    const int64_t K = 768;
    for (int64_t F : {97, 300}) {
      Tensor w = rand_weight(wt, 2 * F, K, F == 300 ? 0.02f : 1.0f);
      Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
      ASSERT_EQ(dw.dtype(), wt == DType::Q8_0 ? DType::Q8_0R : wt);
      for (int64_t T : {1, 2, 3, 5, 8, 9}) check_swiglu(w, dw, T, dtype_name(dw.dtype()));
    }
  }
}

// The volta-profile tensor-core GEMV on Q4_KR (gemv_q4kr_volta.cu: mma.m8n8k4, activation sums
// in shared memory) in every compiled shape, called directly: the dispatch takes it only on GPUs
// where m8n8k4 is a hardware instruction (sm_70-75), so on newer ones it is checked here (ptxas
// runs m8n8k4 there as a subroutine with the same results). N = 97 ends in a partial 32-row tile
// (blocks of 2 and 4 tiles also hold tiles wholly past N), 300 in a partial block; K = 1024 is
// one Q4_KR block (one super-block per warp, no loop), 3072 three, 7168 seven (the loop and the
// peeled last super-block); weight magnitudes 1 and 0.02 (f16 scales far below 1). Tolerance
// 1e-3, not 4e-3: every product and sum but the f16 output is exact or fp32 (the output's own
// rounding is at most ~3e-4 relative L2), so an f16-grade min term or scale would show.
TEST_P(MatmulGemv, Q4KRVoltaTensorCoreEveryShape) {
  if (act() != DType::F16) GTEST_SKIP() << "the volta tensor-core GEMV takes f16 activations only";
  for (int64_t K : {1024, 3072, 7168}) {
    for (int64_t N : {97, 300}) {
      for (float scale : {1.0f, 0.02f}) {
        Tensor w = rand_weight(DType::Q4_K, N, K, scale);
        Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
        ASSERT_EQ(dw.dtype(), DType::Q4_KR);
        for (int64_t T = 1; T <= 8; ++T) {
          Tensor x = rand_f32({T, K}, act(), -4.0f, 4.0f);
          Tensor dx = up(x);
          ASSERT_TRUE(cuda::gemv_q4kr_volta_supports(dx, dw)) << "K=" << K << " T=" << T;
          Tensor ref = Tensor::empty(DType::F32, {T, N});
          ops::matmul(cpu, x, w, ref);
          for (cuda::GemvQ4krVoltaShape v : cuda::gemv_q4kr_volta_shapes()) {
            Tensor nan = nan_f32({T, N});
            Tensor dy = up(nan);  // poisoned: an unwritten output fails
            cuda::gemv_q4kr_volta(g, dx, dw, dy, v);
            EXPECT_CLOSE(down(dy), ref, 1e-3,
                         fmt::format("q4_kr volta N={} K={} T={} scale {} {}", N, K, T, scale,
                                     cuda::gemv_q4kr_volta_shape_name(v)));
          }
        }
      }
    }
  }
}

// What the volta tensor-core GEMV refuses (K past its shared memory for the activation sums,
// T = 9, f32 activations) goes through the dispatch to the other GEMVs, still right.
TEST_P(MatmulGemv, Q4KRVoltaTensorCoreRefusesAndFallsBack) {
  const int64_t N = 45, K = 25600;  // 25 Q4_KR blocks: a Q4_KR row, but more than 24576 values
  Tensor w = rand_weight(DType::Q4_K, N, K, 0.02f);
  Tensor dw = ops::prepare_matmul_weight(g, ops::upload(g, w));
  ASSERT_EQ(dw.dtype(), DType::Q4_KR);
  for (int64_t T : {1, 4}) {
    Tensor dx = up(rand_f32({T, K}, act()));
    EXPECT_FALSE(cuda::gemv_q4kr_volta_supports(dx, dw)) << "K=" << K;
    check(w, dw, T, 4.0f, "q4_kr volta refused K");
  }
  Tensor w2 = rand_weight(DType::Q4_K, N, 1024);
  Tensor dw2 = ops::prepare_matmul_weight(g, ops::upload(g, w2));
  EXPECT_FALSE(cuda::gemv_q4kr_volta_supports(up(rand_f32({9, 1024}, act())), dw2)) << "T=9";
  if (act() == DType::F32) {
    EXPECT_FALSE(cuda::gemv_q4kr_volta_supports(up(rand_f32({1, 1024}, act())), dw2)) << "f32";
  }
  check(w2, dw2, 9, 4.0f, "q4_kr volta refused T");
}

// Every value of a Q4_KR row decodes to the Q4_K original's value (embedding reads rows
// through the same decoder the CUDA-core GEMV and the GEMM path use): 9 rows, each embedded.
TEST_P(MatmulGemv, Q4KRDecodesEveryValueLikeQ4K) { check_prepared_embedding(DType::Q4_K, DType::Q4_KR, 9, 2048, 9); }

// A table prepared by mistake (or shared with a tied head) still embeds correctly.
TEST_P(MatmulGemv, EmbeddingReadsAPreparedTable) { check_prepared_embedding(DType::Q8_0, DType::Q8_0R, 41, 512, 7); }

TEST(PrepareMatmulWeight, IsTheIdentityOnTheCpu) {
  ops::Context cpu;
  for (DType wt : kWeights) {
    Tensor w = rand_weight(wt, 5, 512);
    Tensor p = ops::prepare_matmul_weight(cpu, w);
    EXPECT_EQ(p.data(), w.data()) << dtype_name(wt);
    EXPECT_EQ(p.dtype(), wt);
  }
}

VI_CUDA_INSTANTIATE(MatmulGemv);

}  // namespace
}  // namespace vi::cudatest
