// CUDA vs CPU: add, swiglu, swiglu_halves, sigmoid_mul, softmax, add_bias, copy, copy_batch, rms_norm,
// add_rms_norm, l2_norm, gated_rms_norm and rope on fresh random inputs of odd sizes, in both
// kernel profiles and both activation dtypes. Tolerances (relative L2): f32 1e-5 (summation order only), f16
// 2e-3 (one f16 rounding of the output, plus the f16 inputs of in-place ops).
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_test_util.h"
#include "ops/bias.h"
#include "ops/copy.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/rope.h"

namespace vi::cudatest {
namespace {

class Elementwise : public CudaOpTest {};

TEST_P(Elementwise, BinaryOpsAndSoftmax) {
  const std::vector<int64_t> shape{37, 301};
  Tensor a = rand_f32(shape, act(), -4, 4), b = rand_f32(shape, act(), -4, 4);
  Tensor da = up(a), db = up(b);
  using Bin = void (*)(ops::Context&, const Tensor&, const Tensor&, Tensor&);
  const std::pair<const char*, Bin> cases[] = {{"add", ops::add}, {"swiglu", ops::swiglu}, {"sigmoid_mul", ops::sigmoid_mul}};
  for (auto [name, fn] : cases) {
    Tensor ref = Tensor::empty(DType::F32, shape), dout = gpu_empty(shape);
    fn(cpu, a, b, ref);
    fn(g, da, db, dout);
    EXPECT_CLOSE(down(dout), ref, tol(1e-6, 1e-3), name);
  }
  Tensor ref = Tensor::empty(DType::F32, shape);
  ops::softmax(cpu, a, ref);
  Tensor ds = up(a);
  ops::softmax(g, ds, ds);  // in place, as models may call it
  EXPECT_CLOSE(down(ds), ref, tol(1e-5, 1e-3), "softmax");
}

// gu [R, 2F] -> [R, F]; 70001 rows cross the grid's 65535-row limit (rows are grid-strided).
TEST_P(Elementwise, SwigluHalves) {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 17408}, {37, 301}, {5, 1}, {70001, 3}};
  for (auto [R, F] : shapes) {
    Tensor gu = rand_f32({R, 2 * F}, act(), -4, 4);
    Tensor ref = Tensor::empty(DType::F32, {R, F}), dout = gpu_empty({R, F});
    ops::swiglu_halves(cpu, gu, ref);
    ops::swiglu_halves(g, up(gu), dout);
    EXPECT_CLOSE(down(dout), ref, tol(1e-6, 1e-3), "swiglu_halves " + std::to_string(R) + "x" + std::to_string(F));
  }
}

TEST_P(Elementwise, AddBiasAndCopy) {
  Tensor x = rand_f32({13, 77}, act()), bias = rand_f32({77}, DType::F32);
  Tensor ref = Tensor::empty(DType::F32, {13, 77});
  ops::add_bias(cpu, x, bias, ref);
  Tensor dx = up(x), dbias = ops::upload(g, bias);
  ops::add_bias(g, dx, dbias, dx);
  EXPECT_CLOSE(down(dx), ref, tol(1e-6, 1e-3), "add_bias");

  // copy is a byte copy: exact, into a tensor of another shape with the same numel.
  Tensor src = rand_f32({9, 55}, act());
  Tensor dsrc = up(src), ddst = gpu_empty({55, 9});
  ops::copy(g, dsrc, ddst);
  Tensor back = down(ddst);
  EXPECT_EQ(rel_l2(back, src), 0.0);
}

// split_cols moves bytes: every part must equal the CPU's split exactly, for 4 and 6 parts
// (the stacked attention and GDN projections) and 3, widths not multiples of anything, 1 to 8 rows.
TEST_P(Elementwise, SplitColsMatchesCpuExactly) {
  for (int64_t R : {1, 3, 8}) {
    for (std::vector<int64_t> widths : {std::vector<int64_t>{6144, 6144, 1024, 1024},
                                        std::vector<int64_t>{37, 37, 101, 101, 5, 5}, std::vector<int64_t>{1, 2, 9}}) {
      int64_t C = 0;
      for (int64_t w : widths) C += w;
      const Tensor src = host_as(rand_f32({R, C}, act()), act());  // in the activation dtype
      std::vector<Tensor> ref, got;
      for (int64_t w : widths) {
        ref.push_back(Tensor::empty(act(), {R, w}));
        got.push_back(gpu_empty({R, w}));
      }
      std::vector<Tensor*> r, d;
      for (size_t i = 0; i < widths.size(); ++i) {
        r.push_back(&ref[i]);
        d.push_back(&got[i]);
      }
      Tensor dsrc = ops::upload(g, src);
      ops::split_cols(cpu, src, r);
      ops::split_cols(g, dsrc, d);
      for (size_t i = 0; i < widths.size(); ++i) {
        const Tensor back = ops::download(g, got[i]);
        ASSERT_EQ(back.nbytes(), ref[i].nbytes());
        EXPECT_EQ(std::memcmp(back.data(), ref[i].data(), back.nbytes()), 0) << "part " << i << " of R=" << R;
      }
    }
  }
}

// copy_batch: 200 pairs (more than one launch's 64) of mixed sizes and dtypes, some of odd byte
// counts and offsets (the byte path), each destination exactly its source; the bytes around a
// destination untouched.
TEST_P(Elementwise, CopyBatchCopiesEveryPairExactly) {
  std::vector<Tensor> src, dst, host, pad;
  std::vector<int> off;
  std::mt19937 pick(rng()());
  for (int i = 0; i < 200; ++i) {
    const int64_t n = std::uniform_int_distribution<int64_t>(1, 3000)(pick) * (i % 7 == 0 ? 97 : 1);
    const DType t = i % 3 == 0 ? DType::I8 : DType::F32;
    Tensor h = Tensor::empty(t, {n});
    for (size_t b = 0; b < h.nbytes(); ++b) static_cast<uint8_t*>(h.data())[b] = static_cast<uint8_t>(pick());
    host.push_back(h);
    src.push_back(ops::upload(g, h));
    // The destination inside a larger buffer of 0xff: at its start (16-byte aligned: the wide
    // path) or one element on (the byte path).
    Tensor p = Tensor::empty(t, {n + 2});
    std::memset(p.data(), 0xff, p.nbytes());
    pad.push_back(ops::upload(g, p));
    dst.push_back(pad.back().slice_rows(i % 2, n + i % 2));
    off.push_back(i % 2);
  }
  ops::copy_batch(g, src, dst);
  for (size_t i = 0; i < src.size(); ++i) {
    const Tensor back = ops::download(g, pad[i]);
    const size_t es = back.nbytes() / static_cast<size_t>(back.numel());
    const uint8_t* b = static_cast<const uint8_t*>(back.data());
    const size_t at = es * static_cast<size_t>(off[i]), end = at + host[i].nbytes();
    EXPECT_EQ(std::memcmp(b + at, host[i].data(), host[i].nbytes()), 0) << "pair " << i;
    for (size_t k = 0; k < back.nbytes(); ++k) {
      if (k < at || k >= end) {
        EXPECT_EQ(b[k], 0xff) << "pair " << i << ": byte " << k << " outside the destination written";
      }
    }
  }
}

class Norm : public CudaOpTest {};

TEST_P(Norm, RmsL2Gated) {
  for (int64_t n : {515, 64, 129}) {
    Tensor x = rand_f32({29, n}, act(), -3, 3), w = rand_f32({n}, DType::F32);
    Tensor ref = Tensor::empty(DType::F32, {29, n});
    ops::rms_norm(cpu, x, w, 1e-6f, 1.0f, ref);
    Tensor dx = up(x), dw = ops::upload(g, w), dy = gpu_empty({29, n});
    ops::rms_norm(g, dx, dw, 1e-6f, 1.0f, dy);
    EXPECT_CLOSE(down(dy), ref, tol(1e-5, 2e-3), "rms_norm n=" + std::to_string(n));

    ops::l2_norm(cpu, x, 1e-6f, 0.37f, ref);
    ops::l2_norm(g, dx, 1e-6f, 0.37f, dx);  // in place
    EXPECT_CLOSE(down(dx), ref, tol(1e-5, 2e-3), "l2_norm n=" + std::to_string(n));

    Tensor z = rand_f32({29, n}, act(), -3, 3);
    dx = up(x);
    Tensor dz = up(z);
    ops::gated_rms_norm(cpu, x, z, w, 1e-6f, ref);
    ops::gated_rms_norm(g, dx, dz, dw, 1e-6f, dy);
    EXPECT_CLOSE(down(dy), ref, tol(1e-5, 2e-3), "gated_rms_norm n=" + std::to_string(n));
  }
}

// x += o; y = rms_norm(x). The residual must be exactly what ops::add leaves (the sum
// rounded once to the activation dtype: the host does the same rounding), and y the norm of
// that rounded sum. 515 and 129 take the scalar kernel (not a multiple of a 16-byte vector);
// 64, 5120 (the 27B model's width: f16 640 threads of one 8-half vector, f32 two 4-float
// vectors each) and 12288 (f16 two vectors per thread, f32 three or four) the register kernel.
TEST_P(Norm, AddRmsNorm) {
  for (int64_t n : {515, 64, 129, 5120, 12288}) {
    const int64_t R = 29;
    const std::string sz = " n=" + std::to_string(n);
    Tensor x = rand_f32({R, n}, act(), -3, 3), o = rand_f32({R, n}, act(), -3, 3), w = rand_f32({n}, DType::F32);
    Tensor sum = Tensor::empty(DType::F32, {R, n}), ref = Tensor::empty(DType::F32, {R, n});
    ops::add(cpu, x, o, sum);
    if (act() == DType::F16)
      for (int64_t i = 0; i < sum.numel(); ++i) sum.ptr<float>()[i] = round_fp16(sum.ptr<float>()[i]);
    ops::rms_norm(cpu, sum, w, 1e-6f, 1.0f, ref);

    Tensor dx = up(x), d_o = up(o), dw = ops::upload(g, w), dy = gpu_empty({R, n});
    ops::add_rms_norm(g, dx, d_o, dw, 1e-6f, 1.0f, dy);
    EXPECT_EQ(rel_l2(down(dx), sum), 0.0) << "add_rms_norm residual" << sz;
    EXPECT_CLOSE(down(dy), ref, tol(1e-5, 2e-3), "add_rms_norm" + sz);

    // The two ops it replaces, on the GPU: the same arithmetic in the same order, so equal up
    // to the compiler's choices (no more than one f16 ulp here and there).
    Tensor dx2 = up(x), dy2 = gpu_empty({R, n});
    ops::add(g, dx2, d_o, dx2);
    ops::rms_norm(g, dx2, dw, 1e-6f, 1.0f, dy2);
    EXPECT_CLOSE(down(dy), down(dy2), tol(1e-6, 5e-4), "add_rms_norm vs add, rms_norm" + sz);

    // y aliasing o (each element is read before it is written).
    Tensor dx3 = up(x), do3 = up(o);
    ops::add_rms_norm(g, dx3, do3, dw, 1e-6f, 1.0f, do3);
    EXPECT_EQ(rel_l2(down(dx3), sum), 0.0) << "add_rms_norm residual, y = o" << sz;
    EXPECT_CLOSE(down(do3), ref, tol(1e-5, 2e-3), "add_rms_norm, y = o" + sz);
  }
}

class Rope : public CudaOpTest {};

TEST_P(Rope, PartialRotaryAtLargePositions) {
  const int64_t T = 7, H = 5, D = 96;
  Tensor x = rand_f32({T, H, D}, act(), -2, 2);
  Tensor pos = Tensor::empty(DType::I32, {T});
  std::uniform_int_distribution<int32_t> p(0, 20000);
  for (int64_t t = 0; t < T; ++t) pos.ptr<int32_t>()[t] = p(rng());
  for (int rot : {64, 96}) {
    Tensor ref = Tensor::empty(DType::F32, {T, H, D});
    std::copy_n(x.ptr<float>(), x.numel(), ref.ptr<float>());
    ops::rope(cpu, ref, pos, rot, 1e6f);
    Tensor dx = up(x);
    ops::rope(g, dx, pos, rot, 1e6f);
    // Positions already on the device (what the models pass) give the same bits.
    Tensor dx2 = up(x);
    ops::rope(g, dx2, ops::upload(g, pos), rot, 1e6f);
    Tensor h1 = down(dx), h2 = down(dx2);
    EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.nbytes()), 0) << "device positions, rot_dim " << rot;
    // f32: sin/cos of angles up to 2e4 rad differ by a few ulp of the angle between libm and
    // CUDA, and between toolkits' math libraries: the CUDA 13 build measured up to 2e-5, the
    // CUDA 11.8 sm_70 build (PTX JIT-compiled on an H200) 4.3e-5 and 6.1e-5 (2026-11-29).
    EXPECT_CLOSE(down(dx), ref, tol(1e-4, 2e-3), "rope rot_dim=" + std::to_string(rot));
  }
}

VI_CUDA_INSTANTIATE(Elementwise);
VI_CUDA_INSTANTIATE(Norm);
VI_CUDA_INSTANTIATE(Rope);

}  // namespace
}  // namespace vi::cudatest
