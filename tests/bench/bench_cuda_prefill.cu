// Prefill micro-benchmark on the 27B-shaped Qwen3.5 (hidden 5120, d_ff 17408, GDN 16 k-heads /
// 48 v-heads of 128): (1) ops::matmul through the GEMM path (f16 activations) for T = 512 and
// 8192 on the large weight shapes, F16 weights (pure GEMM) and Q4_K (dequantize tiles + GEMM),
// in both kernel profiles (native: cuBLAS; volta: gemm_wmma.cu); (2) ops::gated_delta_rule of
// one GDN layer at T = 8192 and 32768, chunked form (tensor cores) and, for scale, the
// recurrent form. Every figure: median of 7 timed calls after 2 warm-up calls, CUDA events
// around each call. Inputs are random (never zeros); q and k rows L2-normalised as the op
// requires. FLOPs: GEMM 2·T·N·K; chunked delta rule per (chunk of 64, value head):
// 2·64·64·dk (Q·Kᵀ) + 2·64·64·dk/2 (K·Kᵀ, half) + 3·2·64·dk·dv (K·S, Q·S, K̃ᵀ·V_new)
// + 2·64·64·dv (M·V_new) + 64·63·dv (substitution) — work done, not a lower bound.
//
//   bench_cuda_prefill [--tokens 512,8192] [--gdn-tokens 8192,32768] [--profiles native,volta]
//   (--tokens none or --gdn-tokens none skips that part)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "ops/gdn.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "bench_cuda_util.cuh"

namespace {

using vi::DType;
using vi::Tensor;
namespace ops = vi::ops;

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = s.find(',', p);
    out.push_back(s.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  return out;
}

// Deterministic uniform floats in [lo, hi) (xorshift; the host fills hundreds of MB).
struct Rand {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  float next(float lo, float hi) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return lo + (hi - lo) * static_cast<float>(s >> 40) / 16777216.0f;
  }
};

Tensor host_f16(const std::vector<int64_t>& shape, Rand& r, float lo, float hi) {
  Tensor t = Tensor::empty(DType::F16, shape);
  uint16_t* p = t.ptr<uint16_t>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = vi::fp32_to_fp16(r.next(lo, hi));
  return t;
}

// [rows, n] f16 with each row L2-normalised, times scale.
Tensor unit_rows_f16(int64_t rows, int64_t n, float scale, Rand& r) {
  Tensor t = Tensor::empty(DType::F16, {rows, n});
  std::vector<float> row(n);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (auto& v : row) {
      v = r.next(-1, 1);
      ss += double(v) * v;
    }
    const float f = scale / static_cast<float>(std::sqrt(ss));
    for (int64_t c = 0; c < n; ++c) t.ptr<uint16_t>()[i * n + c] = vi::fp32_to_fp16(row[c] * f);
  }
  return t;
}

Tensor host_f32(const std::vector<int64_t>& shape, Rand& r, float lo, float hi) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = r.next(lo, hi);
  return t;
}

struct Shape {
  const char* name;
  int64_t N, K;
};

}  // namespace

int main(int argc, char** argv) {
  std::string tokens = "512,8192", gdn_tokens = "8192,32768", profiles = "native,volta";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens") tokens = argv[i + 1];
    else if (a == "--gdn-tokens") gdn_tokens = argv[i + 1];
    else if (a == "--profiles") profiles = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (vi::cuda::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    return 1;
  }
  cudaStream_t stream;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ops::Context ctx;
  ctx.device = vi::Device::CUDA;
  ctx.stream = stream;
  ctx.act = DType::F16;
  Rand rng;

  // (1) GEMM path. Large matrices of a 27B layer: MLP gate (= up), MLP down, GDN q|k|v
  // in-projection, GDN/attention out-projection, attention q|gate.
  const Shape shapes[] = {{"mlp_gate", 17408, 5120}, {"mlp_down", 5120, 17408}, {"gdn_qkv", 10240, 5120},
                          {"gdn_out", 5120, 6144},   {"attn_q", 12288, 5120}};
  std::printf("%-7s %-5s %-9s %6s %6s %6s %9s %8s\n", "profile", "w", "shape", "T", "N", "K", "ms", "TFLOP/s");
  for (const Shape& sh : shapes) {
    if (tokens == "none") break;
    Tensor wf = host_f32({sh.N, sh.K}, rng, -0.05f, 0.05f);
    for (DType wt : {DType::F16, DType::Q4_K}) {
      Tensor w = Tensor::empty(wt, {sh.N, sh.K});
      for (int64_t r = 0; r < sh.N; ++r) vi::quantize_row(wt, wf.row<float>(r), w.row(r), sh.K);
      Tensor dw = ops::upload(ctx, w);
      for (const std::string& ts : split(tokens)) {
        const int64_t T = std::stoll(ts);
        Tensor dx = ops::upload(ctx, host_f16({T, sh.K}, rng, -1, 1));
        Tensor dy = ops::empty(ctx, DType::F16, {T, sh.N});
        for (const std::string& pn : split(profiles)) {
          ctx.profile = pn == "volta" ? ops::KernelProfile::kVolta : ops::KernelProfile::kNative;
          const float ms = vi::benchutil::event_ms(stream, 2, 7, [&] { ops::matmul(ctx, dx, dw, dy); });
          const double tf = 2.0 * T * sh.N * sh.K / (ms * 1e-3) / 1e12;
          std::printf("%-7s %-5s %-9s %6lld %6lld %6lld %9.3f %8.1f\n", pn.c_str(), vi::dtype_name(wt), sh.name,
                      (long long)T, (long long)sh.N, (long long)sh.K, ms, tf);
          std::fflush(stdout);
        }
      }
    }
  }

  // (2) One GDN layer's delta rule.
  const int64_t Hk = 16, Hv = 48, dk = 128, dv = 128;
  std::printf("\n%-7s %-9s %6s %9s %8s\n", "profile", "form", "T", "ms", "TFLOP/s");
  for (const std::string& ts : split(gdn_tokens)) {
    if (ts == "none") break;
    const int64_t T = std::stoll(ts);
    Tensor dq = ops::upload(ctx, unit_rows_f16(T * Hk, dk, 1.0f / std::sqrt(float(dk)), rng).reshape({T, Hk, dk}));
    Tensor dkk = ops::upload(ctx, unit_rows_f16(T * Hk, dk, 1.0f, rng).reshape({T, Hk, dk}));
    Tensor dvv = ops::upload(ctx, host_f16({T, Hv, dv}, rng, -1, 1));
    Tensor dg = ops::upload(ctx, host_f32({T, Hv}, rng, -1.0f, -0.01f));
    Tensor db = ops::upload(ctx, host_f32({T, Hv}, rng, 0.05f, 0.95f));
    Tensor ds = ops::upload(ctx, host_f32({Hv, dk, dv}, rng, -0.1f, 0.1f));
    Tensor dout = ops::empty(ctx, DType::F16, {T, Hv, dv});
    const double chunks = std::ceil(T / 64.0) * Hv;
    const double flops = chunks * (2.0 * 64 * 64 * dk * 1.5 + 6.0 * 64 * dk * dv + 2.0 * 64 * 64 * dv + 64.0 * 63 * dv);
    for (const std::string& pn : split(profiles)) {
      ctx.profile = pn == "volta" ? ops::KernelProfile::kVolta : ops::KernelProfile::kNative;
      for (auto form : {ops::DeltaRuleForm::kChunked, ops::DeltaRuleForm::kRecurrent}) {
        if (form == ops::DeltaRuleForm::kRecurrent && T > 8192) continue;  // seconds, and not the prefill path
        const float ms = vi::benchutil::event_ms(stream, 2, 7, [&] {
          ops::gated_delta_rule(ctx, dq, dkk, dvv, dg, db, ds, ops::GvaLayout::kGrouped, form, dout);
        });
        const bool chunked = form == ops::DeltaRuleForm::kChunked;
        std::printf("%-7s %-9s %6lld %9.3f %8.1f\n", pn.c_str(), chunked ? "chunked" : "recurrent", (long long)T, ms,
                    chunked ? flops / (ms * 1e-3) / 1e12 : 0.0);
        std::fflush(stdout);
      }
    }
  }
  VI_CUDA_CHECK(cudaStreamDestroy(stream));
  return 0;
}
