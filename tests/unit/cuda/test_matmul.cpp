// CUDA vs CPU: embedding and matmul over every weight dtype the loader produces (F32, F16,
// BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K), token counts on both sides of the GEMV/GEMM
// switch (1, 3, 8 | 9, 37, 130), odd N, in both kernel profiles (volta: WMMA GEMM, native:
// cuBLAS) and both activation dtypes. The weights are the same quantized bytes on both
// sides. Tolerances (relative L2): f32 activations 1e-5 (fp32 accumulation, other order);
// f16 4e-3 (f16 output, and in the GEMM path the weights dequantized to f16).
#include <gtest/gtest.h>

#include <cstring>

#include "core/quant.h"
#include "cuda_test_util.h"
#include "ops/embedding.h"
#include "ops/matmul.h"

namespace vi::cudatest {
namespace {

constexpr DType kWeights[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0,
                              DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};

class Matmul : public CudaOpTest {};

TEST_P(Matmul, EveryWeightDtype) {
  const int64_t N = 97;
  for (DType wt : kWeights) {
    // Quantized rows need whole blocks; plain ones get a K with a tail past the 8-wide steps.
    const int64_t K = dtype_is_quantized(wt) ? 512 : 333;
    Tensor w = rand_weight(wt, N, K);
    Tensor dw = ops::upload(g, w);
    for (int64_t T : {1, 3, 8, 9, 37, 130}) {
      Tensor x = rand_f32({T, K}, act());
      Tensor ref = Tensor::empty(DType::F32, {T, N});
      ops::matmul(cpu, x, w, ref);
      Tensor dx = up(x), dy = gpu_empty({T, N});
      ops::matmul(g, dx, dw, dy);
      EXPECT_CLOSE(down(dy), ref, tol(1e-5, 4e-3), fmt::format("matmul {} T={} K={}", dtype_name(wt), T, K));
    }
  }
}

TEST_P(Matmul, LargeWeightSpansSeveralDequantTiles) {
  // 64 MiB f16 tiles: 8200 rows x 4352 values = 68 MiB in f16, so two tiles.
  const int64_t N = 8200, K = 4352, T = 17;
  Tensor w = rand_weight(DType::Q4_0, N, K);
  Tensor x = rand_f32({T, K}, act());
  Tensor ref = Tensor::empty(DType::F32, {T, N});
  ops::matmul(cpu, x, w, ref);
  Tensor dw = ops::upload(g, w), dx = up(x), dy = gpu_empty({T, N});
  ops::matmul(g, dx, dw, dy);
  EXPECT_CLOSE(down(dy), ref, tol(1e-5, 4e-3), "matmul q4_0 two tiles");
}

TEST_P(Matmul, UnsupportedActivationFailsLoudly) {
  Tensor w = ops::upload(g, rand_weight(DType::F16, 8, 32));
  Tensor x = ops::empty(g, DType::BF16, {2, 32}), y = ops::empty(g, DType::BF16, {2, 8});
  EXPECT_THROW(ops::matmul(g, x, w, y), Error);
}

class Embedding : public CudaOpTest {};

TEST_P(Embedding, EveryWeightDtype) {
  const int64_t V = 53, d = 512, T = 11;
  Tensor ids = Tensor::empty(DType::I32, {T});
  std::uniform_int_distribution<int32_t> u(0, V - 1);
  for (int64_t t = 0; t < T; ++t) ids.ptr<int32_t>()[t] = u(rng());
  for (DType wt : kWeights) {
    Tensor table = rand_weight(wt, V, d);
    Tensor ref = Tensor::empty(DType::F32, {T, d});
    ops::embedding(cpu, table, ids, ref);
    Tensor dt = ops::upload(g, table), dout = gpu_empty({T, d});
    ops::embedding(g, dt, ids, dout);
    // f32: exact up to FMA contraction of scale*q - min; f16 output rounds each value once.
    EXPECT_CLOSE(down(dout), ref, tol(1e-6, 1e-3), fmt::format("embedding {}", dtype_name(wt)));
    // Ids already on the device (what the models pass) give the same bits.
    Tensor dout2 = gpu_empty({T, d});
    ops::embedding(g, dt, ops::upload(g, ids), dout2);
    Tensor h1 = down(dout), h2 = down(dout2);
    EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.nbytes()), 0) << "device ids, " << dtype_name(wt);
  }
}

TEST(CudaMemory, OutOfMemoryIsAClearError) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  ops::Context g;
  g.device = Device::CUDA;
  try {
    ops::empty(g, DType::F32, {int64_t(1) << 20, int64_t(1) << 20});  // 4 TiB
    FAIL() << "a 4 TiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of GPU memory"), std::string::npos) << e.what();
  }
  // The device still works afterwards.
  Tensor t = ops::upload(g, rand_f32({3, 5}, DType::F32));
  EXPECT_EQ(ops::download(g, t).numel(), 15);
}

VI_CUDA_INSTANTIATE(Matmul);
VI_CUDA_INSTANTIATE(Embedding);

}  // namespace
}  // namespace vi::cudatest
