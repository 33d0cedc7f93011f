// CUDA vs CPU: gdn_conv_decode_step (a decode round's GDN conv, norms, gates, delta rule and
// gated output norm as one op) on fresh random inputs over six steps in a row (the conv windows
// and the recurrent states carry) of T = 1, 1, 4, 1, 2, 1 tokens per sequence, both GVA layouts,
// in both kernel profiles and both activation dtypes. Shapes: the 27B layer (16 key heads, 48
// value heads of 128: 3 value heads a key head) at one and three sequences, 1, 2 and 4 value
// heads a key head, 70 sequences (two launches of 64 state pointers), and calls the fused kernel
// declines (head dims 40 / 33, conv width 3), which run the two ops.
// Where the fused kernel runs (native profile on sm_90, one token per sequence) the test asks the
// CUDA table that it takes the call, so a silent fallback fails; there its outputs and states
// must be within 1e-6 (f32) / 1e-4 (f16) of the GPU's two ops (gdn_conv_step per sequence, then
// gdn_decode_step): it repeats their arithmetic in their order, and only the compiler's choice of
// which multiply-adds to fuse differs between two kernels (H200, 2026-12-04: 1.4e-7 / 8.5e-7 at
// most, nonzero in every f32 case: not bit for bit). Against the CPU (the two ops' CPU kernels): relative L2
// f32 2e-5, f16 3e-3 (f16 inputs and outputs, the conv output, the norms and the delta rule's
// output rounded to f16 as stored); the windows hold inputs, moved: exact.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/gdn_decode_step.cuh"
#include "cuda_test_util.h"
#include "ops/gdn_conv_decode_step.h"

namespace vi::cudatest {
namespace {

class GdnConvDecodeStep : public CudaOpTest {};

// A copy of host f32 tensor t on the device (f32: states and windows keep their type).
Tensor dev_f32(ops::Context& g, const Tensor& t) { return ops::upload(g, t); }

TEST_P(GdnConvDecodeStep, MatchesCpuAndTheTwoOps) {
  const std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t> shapes[] = {
      {1, 16, 48, 128, 128, 4}, {3, 16, 48, 128, 128, 4}, {2, 4, 8, 128, 128, 4}, {1, 2, 8, 128, 128, 4},
      {2, 3, 3, 128, 128, 4},   {70, 1, 3, 128, 128, 4},  {2, 2, 4, 40, 33, 4},   {1, 4, 12, 128, 128, 3}};
  const float eps = 1e-6f;
  for (auto [N, Hk, Hv, dk, dv, K] : shapes) {
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    for (auto layout : {ops::GvaLayout::kGrouped, ops::GvaLayout::kTiled}) {
      const std::string sz = fmt::format(" N={} Hk={} Hv={} dk={} dv={} K={} {}", N, Hk, Hv, dk, dv, K,
                                         layout == ops::GvaLayout::kTiled ? "tiled" : "grouped");
      const int64_t Cs[3] = {Hk * dk, Hk * dk, Hv * dv};
      Tensor A = rand_f32({Hv}, DType::F32, -2, -0.1f), dt = rand_f32({Hv}, DType::F32);
      Tensor nw = rand_f32({dv}, DType::F32, -1.5f, 1.5f);
      Tensor dA = dev_f32(g, A), ddt = dev_f32(g, dt), dnw = dev_f32(g, nw);
      Tensor taps[3], dtaps[3];
      for (int i = 0; i < 3; ++i) {
        taps[i] = rand_f32({Cs[i], K}, DType::F32);
        dtaps[i] = dev_f32(g, taps[i]);
      }
      // Per sequence: the CPU op's, the GPU op's and the GPU two ops' states and windows.
      std::vector<Tensor> cpu_s, gpu_s, two_s;
      std::vector<ops::GdnConvWindows> cpu_w, gpu_w, two_w;
      for (int64_t n = 0; n < N; ++n) {
        Tensor s = rand_f32({Hv, dk, dv}, DType::F32, -0.5f, 0.5f);
        gpu_s.push_back(dev_f32(g, s));
        two_s.push_back(dev_f32(g, s));
        cpu_s.push_back(std::move(s));
        ops::GdnConvWindows c, d, t;
        Tensor* cw[3] = {&c.q, &c.k, &c.v};
        Tensor* dw[3] = {&d.q, &d.k, &d.v};
        Tensor* tw[3] = {&t.q, &t.k, &t.v};
        for (int i = 0; i < 3; ++i) {
          Tensor w0 = rand_f32({K - 1, Cs[i]}, DType::F32, -2, 2);
          *dw[i] = dev_f32(g, w0);
          *tw[i] = dev_f32(g, w0);
          *cw[i] = std::move(w0);
        }
        cpu_w.push_back(c);
        gpu_w.push_back(d);
        two_w.push_back(t);
      }
      const int64_t Ts[] = {1, 1, 4, 1, 2, 1};  // tokens per sequence, step by step
      for (int step = 0; step < 6; ++step) {
        const int64_t T = Ts[step], R = N * T;
        const std::string what = sz + " T=" + std::to_string(T) + " step " + std::to_string(step);
        Tensor xq = rand_f32({R, Hk, dk}, act(), -3, 3), xk = rand_f32({R, Hk, dk}, act(), -3, 3);
        Tensor xv = rand_f32({R, Hv, dv}, act(), -3, 3), z = rand_f32({R, Hv, dv}, act(), -3, 3);
        Tensor a = rand_f32({R, Hv}, act(), -8, 25), b = rand_f32({R, Hv}, act(), -6, 6);

        ops::GdnConvIn cin{xq, xk, xv, taps[0], taps[1], taps[2], cpu_w,
                           Tensor::empty(DType::F32, {R, Hk, dk}), Tensor::empty(DType::F32, {R, Hk, dk}),
                           Tensor::empty(DType::F32, {R, Hv, dv}), eps, q_scale};
        Tensor ref = Tensor::empty(DType::F32, {R, Hv, dv});
        ops::gdn_conv_decode_step(cpu, cin, a, b, A, dt, z, nw, eps, cpu_s, layout, ref);

        Tensor dxq = up(xq), dxk = up(xk), dxv = up(xv), dz = up(z), da = up(a), db = up(b);
        ops::GdnConvIn gin{dxq, dxk, dxv, dtaps[0], dtaps[1], dtaps[2], gpu_w, gpu_empty({R, Hk, dk}),
                           gpu_empty({R, Hk, dk}), gpu_empty({R, Hv, dv}), eps, q_scale};
        Tensor dy = gpu_empty({R, Hv, dv});
        const auto& table = ops::gdn_conv_decode_step_table();
        const bool fused = table.supports(Device::CUDA, act()) &&
                           table.get(Device::CUDA, act())(g, gin, da, db, dA, ddt, dz, dnw, eps, gpu_s, layout, dy,
                                                          false);
        const bool want_fused = T == 1 && K == 4 && Hv / Hk <= 4 && cuda::gdn_decode_uses_lean(g, dk, dv);
        EXPECT_EQ(fused, want_fused) << "the fused kernel taken" << what;
        ops::gdn_conv_decode_step(g, gin, da, db, dA, ddt, dz, dnw, eps, gpu_s, layout, dy);

        // The two ops on the GPU.
        Tensor cq = gpu_empty({R, Hk, dk}), ck = gpu_empty({R, Hk, dk}), cv = gpu_empty({R, Hv, dv});
        for (int64_t n = 0; n < N; ++n) {
          auto rows = [&](const Tensor& t) { return t.slice_rows(n * T, (n + 1) * T).reshape({T, t.numel() / R}); };
          const ops::GdnConvWindows& w = two_w[static_cast<size_t>(n)];
          ops::gdn_conv_step(g, ops::ConvGroup{rows(dxq), dtaps[0], w.q, rows(cq)},
                             ops::ConvGroup{rows(dxk), dtaps[1], w.k, rows(ck)},
                             ops::ConvGroup{rows(dxv), dtaps[2], w.v, rows(cv)}, dk, eps, q_scale);
        }
        Tensor dy_two = gpu_empty({R, Hv, dv});
        ops::gdn_decode_step(g, cq, ck, cv, da, db, dA, ddt, dz, dnw, eps, two_s, layout, dy_two);

        const Tensor y = down(dy), y_two = down(dy_two);
        EXPECT_CLOSE(y, ref, tol(2e-5, 3e-3), "y" + what);
        if (fused) EXPECT_CLOSE(y, y_two, tol(1e-6, 1e-4), "y, fused vs the two ops" + what);
        for (int64_t n = 0; n < N; ++n) {
          const size_t i = static_cast<size_t>(n);
          const Tensor s = ops::download(g, gpu_s[i]);
          EXPECT_CLOSE(s, cpu_s[i], tol(2e-5, 3e-3), fmt::format("state {}{}", n, what));
          if (fused)
            EXPECT_CLOSE(s, ops::download(g, two_s[i]), tol(1e-6, 1e-4),
                         fmt::format("state {}, fused vs the two ops{}", n, what));
          const Tensor* cw[3] = {&cpu_w[i].q, &cpu_w[i].k, &cpu_w[i].v};
          const Tensor* dw[3] = {&gpu_w[i].q, &gpu_w[i].k, &gpu_w[i].v};
          for (int c = 0; c < 3; ++c)
            EXPECT_EQ(rel_l2(ops::download(g, *dw[c]), *cw[c]), 0.0)
                << fmt::format("conv window {} of sequence {}{}", "qkv"[c], n, what);
        }
      }
    }
  }
}

VI_CUDA_INSTANTIATE(GdnConvDecodeStep);

}  // namespace
}  // namespace vi::cudatest
