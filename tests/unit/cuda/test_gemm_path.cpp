// CUDA vs CPU: the prefill GEMM path of matmul (f16 activations, T > 8: weight tiles
// dequantized to f16, then cuBLAS in the native profile or the tiled WMMA GEMM in the volta
// profile) at sizes the small matmul tests do not reach: several 128 x 128 block tiles,
// more token tiles than one block group (8), ragged edges in T, N and K, a K that is not a
// multiple of 8 (element-wise loads), and quantized weights through the 8-wide dequantizer.
// Tolerance (relative L2): 4e-3, as test_matmul's f16 GEMM path (f16 weights and output).
#include <gtest/gtest.h>

#include "core/quant.h"
#include "cuda_test_util.h"
#include "ops/matmul.h"

namespace vi::cudatest {
namespace {

class GemmPath : public CudaOpTest {};

TEST_P(GemmPath, LargeRaggedShapes) {
  if (act() != DType::F16) GTEST_SKIP() << "the GEMM path serves f16 activations only";
  struct Case {
    DType w;
    int64_t T, N, K;
  };
  for (const Case& c : {Case{DType::F16, 1100, 300, 328}, Case{DType::F16, 129, 131, 4096},
                        Case{DType::F32, 257, 190, 333}, Case{DType::Q4_K, 1037, 260, 768},
                        Case{DType::Q8_0, 300, 129, 544}}) {
    Tensor f = rand_f32({c.N, c.K}, DType::F32);
    Tensor w = Tensor::empty(c.w, {c.N, c.K});
    for (int64_t r = 0; r < c.N; ++r) quantize_row(c.w, f.row<float>(r), w.row(r), c.K);
    Tensor x = rand_f32({c.T, c.K}, act());
    Tensor ref = Tensor::empty(DType::F32, {c.T, c.N});
    ops::matmul(cpu, x, w, ref);
    Tensor dw = ops::upload(g, w), dy = gpu_empty({c.T, c.N});
    ops::matmul(g, up(x), dw, dy);
    EXPECT_CLOSE(down(dy), ref, 4e-3,
                 fmt::format("gemm {} T={} N={} K={}", dtype_name(c.w), c.T, c.N, c.K));
  }
}

VI_CUDA_INSTANTIATE(GemmPath);

}  // namespace
}  // namespace vi::cudatest
