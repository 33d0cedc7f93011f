// Decode GEMV micro-benchmark: ops::matmul with T = 1, 2, 4, 8 tokens (f16 activations) on the
// weight shapes of the 27B-shaped Qwen3.5 (hidden 5120, d_ff 17408, vocab 248320), for every
// weight dtype, in both kernel profiles, on weights prepared as the loader prepares them
// (ops::prepare_matmul_weight). Each figure: the median over 9 replays of a CUDA graph of
// back-to-back calls that rotate over enough weight copies (>= 256 MiB) that the 50 MB L2
// cannot hold them, timed with CUDA events. Bytes = weight + x + y. The device-to-device copy
// bandwidth (bytes read + written) is measured in the same run; % copy is against it.
// Weights are random bytes with finite fp16/bf16/f32 scales and values (never zeros).
//
//   bench_cuda_gemv [--dtypes q4_k,q8_0,...] [--tokens 1,2,4,8] [--profiles native,volta]
//                   [--shapes 17408x5120,...] [--json FILE] [--variants] [--sms N]
// --shapes: only these N x K; sizes that are no 27B matrix are timed too (labelled "probe").
// --sms N: everything after the copy measurement runs on N of the card's SMs (a green context,
// backends/cuda/sm_partition.h), the kernels' grids sized for them: a card with the same memory and
// fewer SMs, i.e. more bandwidth an SM to feed (an H100 on 94 of its 132 SMs asks of each what an
// H200 asks of all of its). % copy stays against the whole card's copy rate.
// --variants: also time every work shape of the tensor-core GEMVs (gemv_mma: row tiles per warp
// x blocks per SM; gemv_q4kt and its fused SwiGLU: blocks per SM, super-blocks one at a time or in
// pairs, the SwiGLU also on the paired gate|up tiles (Q4_KTS); the deferred norm's producer and
// consumer forms;
// gemv_q4kr, on the same weights in the Q4_KR row layout: kernel x steps in flight x blocks per
// SM) and count the outputs that differ from the default path's. Bytes are those of the weight
// as prepared (Q4_KT and Q4_KR: 148 per 256 values, Q4_K's 144 in the file). In the volta
// profile --variants times the m8n8k4 GEMV on Q4_KR (gemv_q4kr_volta: tiles per block x blocks
// per SM) and the CUDA-core GEMV (gemv_simt) side by side, whichever of them the dispatch takes
// (it takes gemv_q4kr_volta only where m8n8k4 is a hardware instruction, sm_70-75; on newer GPUs
// it is emulated and slow).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/gemv_mma.cuh"
#include "backends/cuda/gemv_q4ki.cuh"
#include "backends/cuda/gemv_q4kr.cuh"
#include "backends/cuda/gemv_q4kr_volta.cuh"
#include "backends/cuda/gemv_q4kt.cuh"
#include "backends/cuda/gemv_q4kt_tma.cuh"
#include "backends/cuda/gemv_simt.cuh"
#include "backends/cuda/sm_partition.h"
#include "bench_cuda_util.cuh"
#include "core/dtype.h"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/deferred_norm.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/prepare_matmul_weight.h"

namespace {

using vi::DType;
using vi::Tensor;
namespace ops = vi::ops;

using vi::benchutil::median;
using vi::benchutil::mix;

__global__ void fill_bytes(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint8_t>(mix(i, seed));
}

// Overwrites the fp16 fields at byte offsets off0 (and off1 if >= 0) of every block with
// small positive values (about 1e-3), so scales and F16 values are finite and realistic.
__global__ void patch_half(uint8_t* p, size_t n_blocks, int block_bytes, int off0, int off1, uint32_t seed) {
  for (size_t b = blockIdx.x * size_t(blockDim.x) + threadIdx.x; b < n_blocks; b += size_t(gridDim.x) * blockDim.x) {
    const uint32_t r = mix(b, seed);
    const uint16_t h0 = static_cast<uint16_t>(0x1400u | (r & 0x3FFu) | ((r >> 10) & 0x8000u) * (block_bytes == 2));
    memcpy(p + b * block_bytes + off0, &h0, 2);
    if (off1 >= 0) {
      const uint16_t h1 = static_cast<uint16_t>(0x1400u | ((r >> 16) & 0x3FFu));
      memcpy(p + b * block_bytes + off1, &h1, 2);
    }
  }
}

__global__ void patch_bf16(uint16_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = static_cast<uint16_t>((p[i] & 0x807Fu) | 0x3B00u);  // about +-2e-3
}
__global__ void patch_f32(uint32_t* p, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    p[i] = (p[i] & 0x807FFFFFu) | 0x3B000000u;
}

// On `stream`, the stream the weights are allocated and prepared on (a non-blocking stream: a
// fill on the legacy default stream could still be running when the repack reads the bytes).
void fill_weight(Tensor& w, uint32_t seed, cudaStream_t stream) {
  uint8_t* p = w.ptr<uint8_t>();
  const size_t n = w.nbytes();
  fill_bytes<<<2048, 256, 0, stream>>>(p, n, seed);
  const auto& info = vi::dtype_info(w.dtype());
  const size_t blocks = n / info.block_bytes;
  switch (w.dtype()) {
    case DType::F16: patch_half<<<2048, 256, 0, stream>>>(p, blocks, 2, 0, -1, seed); break;
    case DType::BF16: patch_bf16<<<2048, 256, 0, stream>>>(w.ptr<uint16_t>(), n / 2); break;
    case DType::F32: patch_f32<<<2048, 256, 0, stream>>>(w.ptr<uint32_t>(), n / 4); break;
    case DType::Q8_0: case DType::Q4_0: patch_half<<<2048, 256, 0, stream>>>(p, blocks, info.block_bytes, 0, -1, seed); break;
    case DType::Q4_1: case DType::Q4_K: case DType::Q5_K:
      patch_half<<<2048, 256, 0, stream>>>(p, blocks, info.block_bytes, 0, 2, seed);
      break;
    case DType::Q6_K: patch_half<<<2048, 256, 0, stream>>>(p, blocks, info.block_bytes, 208, -1, seed); break;
    default: std::fprintf(stderr, "no filler for %s\n", vi::dtype_name(w.dtype())); std::exit(2);
  }
  VI_CUDA_CHECK(cudaGetLastError());
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

struct Shape {
  const char* what;
  int64_t N, K;
};

}  // namespace

int main(int argc, char** argv) {
  std::string dtypes = "q4_k,q8_0,q4_0,q4_1,q5_k,q6_k,f16,bf16,f32", tokens = "1,2,4,8", profiles = "native,volta";
  std::string json, shape_filter;
  bool variants = false;
  int sms = 0;  // --sms: 0 = all of them
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--variants") {
      variants = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) { std::fprintf(stderr, "option %s needs a value\n", a.c_str()); return 2; }
    if (a == "--dtypes") dtypes = argv[i + 1];
    else if (a == "--tokens") tokens = argv[i + 1];
    else if (a == "--profiles") profiles = argv[i + 1];
    else if (a == "--json") json = argv[i + 1];
    else if (a == "--shapes") shape_filter = argv[i + 1];
    else if (a == "--sms") sms = std::atoi(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  // The matrices a 27B decode round multiplies, as the loader stacks them (gate|up,
  // attention q|gate|k|v, the GDN input projections), and their single parts.
  std::vector<Shape> shapes = {{"attn/GDN 5120x5120", 5120, 5120},
                               {"GDN z 6144x5120", 6144, 5120},
                               {"attn q|g|k|v", 14336, 5120},
                               {"GDN in, stacked", 16480, 5120},
                               {"ffn up/gate", 17408, 5120},
                               {"ffn gate|up", 34816, 5120},
                               {"ffn down", 5120, 17408},
                               {"attn/GDN out", 5120, 6144},
                               {"lm head", 248320, 5120}};
  // --shapes may also name matrices of no 27B projection (e.g. a probe of how the tiles of a
  // one-wave launch land on the SMs): they run after the list's, in the order given.
  for (const std::string& nk : split(shape_filter)) {
    const size_t x = nk.find('x');
    const int64_t N = x == std::string::npos ? 0 : std::atoll(nk.substr(0, x).c_str());
    const int64_t K = x == std::string::npos ? 0 : std::atoll(nk.substr(x + 1).c_str());
    if (N <= 0 || K <= 0) { std::fprintf(stderr, "--shapes: '%s' is not NxK\n", nk.c_str()); return 2; }
    const bool listed = std::any_of(shapes.begin(), shapes.end(), [&](const Shape& s) { return s.N == N && s.K == K; });
    if (!listed) shapes.push_back({"probe", N, K});
  }
  cudaStream_t stream;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  VI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = vi::benchutil::copy_bandwidth();
  std::printf("device: %s, %d SMs; device-to-device copy: %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_gbs);
  int used_sms = prop.multiProcessorCount;
  if (sms != 0) {
    if (sms < 0 || sms > prop.multiProcessorCount) {
      std::fprintf(stderr, "--sms %d: give 1 to %d\n", sms, prop.multiProcessorCount);
      return 2;
    }
    used_sms = vi::cuda::restrict_graphs_to_sms(sms);
    stream = static_cast<cudaStream_t>(vi::cuda::partition_stream());  // all work from here on
    std::printf("calls run on %d of %d SMs: %.1f GB/s of copy an SM, as all %d SMs of a card with %.0f GB/s\n",
                used_sms, prop.multiProcessorCount, copy_gbs / used_sms, prop.multiProcessorCount,
                copy_gbs * prop.multiProcessorCount / used_sms);
  }
  FILE* jf = json.empty() ? nullptr : std::fopen(json.c_str(), "w");
  if (jf)
    std::fprintf(jf, "{\"device\":\"%s\",\"sms\":%d,\"used_sms\":%d,\"copy_gbs\":%.1f}\n", prop.name,
                 prop.multiProcessorCount, used_sms, copy_gbs);
  std::printf("%-7s %-6s %-20s %7s %6s %2s %9s %8s %7s\n", "profile", "dtype", "shape", "N", "K", "T", "us",
              "GB/s", "%copy");
  for (const std::string& dn : split(dtypes)) {
    const DType dt = vi::dtype_from_name(dn);
    for (const Shape& sh : shapes) {
      const std::string nk = std::to_string(sh.N) + "x" + std::to_string(sh.K);
      const std::vector<std::string> wanted = split(shape_filter);
      if (!wanted.empty() && std::find(wanted.begin(), wanted.end(), nk) == wanted.end()) continue;
      ops::Context ctx;
      ctx.device = vi::Device::CUDA;
      ctx.stream = stream;
      ctx.act = DType::F16;
      ctx.profile = ops::KernelProfile::kNative;
      const size_t wbytes = vi::dtype_row_bytes(dt, sh.K) * sh.N;
      const int copies = static_cast<int>(std::max<size_t>(2, ((size_t(256) << 20) + wbytes - 1) / wbytes));
      Tensor x = ops::empty(ctx, DType::F16, {8, sh.K});
      fill_weight(x, 99, stream);  // f16 values about 1e-3 (finite, nonzero)
      Tensor y = ops::empty(ctx, DType::F16, {8, sh.N});
      for (const std::string& pn : split(profiles)) {
        ctx.profile = pn == "volta" ? ops::KernelProfile::kVolta : ops::KernelProfile::kNative;
        // The weights as a model loaded in this profile holds them (the device layout depends on
        // it: Q4_K becomes Q4_KT in the native profile, Q4_KR in the volta one; Q8_0 Q8_0T and
        // Q8_0R). `rows` (the tiled layouts only): the same weights in the row layout, which
        // prepare_matmul_weight keeps where a caller's row views would cut a 16-row tile, for the
        // row-layout kernels' variants.
        // `paired` (the gate|up stack, variants): the same weights as a SwiGLU stack the model
        // reads only whole (ops::MatmulUse::kSwiglu: Q4_KTS in the native profile).
        std::vector<Tensor> ws, rows, paired;
        for (int c = 0; c < copies; ++c) {
          Tensor w = ops::empty(ctx, dt, {sh.N, sh.K});
          fill_weight(w, 1234u + c, stream);
          ws.push_back(ops::prepare_matmul_weight(ctx, w));
          if (variants && (ws.back().dtype() == DType::Q4_KT || ws.back().dtype() == DType::Q8_0T))
            rows.push_back(ops::prepare_matmul_weight(ctx, w, {8, sh.N - 8}));
          if (variants && sh.N == 34816)
            paired.push_back(ops::prepare_matmul_weight(ctx, w, {sh.N / 2, sh.N / 2}, ops::MatmulInput::kNorm,
                                                        ops::MatmulUse::kSwiglu));
        }
        VI_CUDA_CHECK(cudaDeviceSynchronize());
        for (const std::string& ts : split(tokens)) {
          const int64_t T = std::stoll(ts);
          Tensor xt = x.slice_rows(0, T), yt = y.slice_rows(0, T);
          // µs per call of `call(weight)` in a CUDA graph: about 2 ms of calls, at least one
          // pass over the copies, median of 9 replays.
          auto timed_us = [&](auto call) {
            auto run = [&](int calls) {
              return median(vi::benchutil::graph_us_per_call(stream, calls, 9, cudaStreamCaptureModeRelaxed,
                                                             [&](int i) { call(ws[i % copies]); }));
            };
            const float est = run(copies);
            const int calls = std::max(copies, std::min(2000, static_cast<int>(2000.0f / std::max(est, 1.0f))));
            return calls == copies ? est : run(calls);
          };
          // Outputs of `call(ws[0])` that differ from those of the default path.
          auto differing = [&](auto call) {
            ops::matmul(ctx, xt, ws[0], yt);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            const Tensor ref = ops::download(ctx, yt);
            call(ws[0]);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            const Tensor got = ops::download(ctx, yt);
            int64_t diff = 0;
            for (int64_t i = 0; i < got.numel(); ++i) diff += got.ptr<uint16_t>()[i] != ref.ptr<uint16_t>()[i];
            return diff;
          };
          auto gbs_at = [&](float us) { return (double(ws[0].nbytes()) + 2.0 * T * sh.K + 2.0 * T * sh.N) / (us * 1e-6) / 1e9; };
          // The Q4_KR weights of the same values, when the default reads another layout.
          auto row_layout = [&](const Tensor& w) -> const Tensor& {
            return rows.empty() ? w : rows[static_cast<size_t>(&w - ws.data())];
          };
          // One variant of a GEMV kernel (dtype: the layout it reads; profile: null for native): its
          // outputs against the default's, its time. kind names it in the JSON, label (kind and
          // whether it is the default) on the console.
          auto report_variant = [&](const char* dtype, const char* profile, const std::string& kind,
                                    const std::string& label, auto call) {
            const int64_t diff = differing(call);
            const float vus = timed_us(call);
            const double vgbs = gbs_at(vus);
            std::printf("variant %-6s %-20s %7lld %6lld %2lld %s: %9.1f us %6.1f%%  outputs differing from default: %lld\n",
                        dtype, sh.what, (long long)sh.N, (long long)sh.K, (long long)T, label.c_str(), vus,
                        100.0 * vgbs / copy_gbs, (long long)diff);
            if (jf)
              std::fprintf(jf,
                           "{%s%s%s\"variant\":\"%s\",\"dtype\":\"%s\",\"N\":%lld,\"K\":%lld,\"T\":%lld,\"us\":%.2f,"
                           "\"gbs\":%.1f,\"copy_gbs\":%.1f,\"differing\":%lld}\n",
                           profile ? "\"profile\":\"" : "", profile ? profile : "", profile ? "\"," : "", kind.c_str(),
                           dtype, (long long)sh.N, (long long)sh.K, (long long)T, vus, vgbs, copy_gbs, (long long)diff);
          };
          if (variants && pn == "native" && vi::cuda::gemv_q4kt_supports(ctx, xt, ws[0])) {
            const vi::cuda::Q4ktShape def = vi::cuda::gemv_q4kt_default_shape(sh.N);
            for (vi::cuda::Q4ktShape v : vi::cuda::gemv_q4kt_shapes()) {
              const std::string kind = vi::cuda::gemv_q4kt_shape_name(v);
              report_variant("q4_kt", nullptr, kind, kind + (v == def ? " (default)" : ""),
                             [&](const Tensor& w) { vi::cuda::gemv_q4kt(ctx, xt, w, yt, v); });
            }
          }
          // The copy-engine form of the plain Q4_KT GEMV (gemv_q4kt_tma.cu), every compiled shape.
          if (variants && pn == "native") {
            for (const vi::cuda::Q4ktTmaShape& v : vi::cuda::gemv_q4kt_tma_shapes()) {
              if (!vi::cuda::gemv_q4kt_tma_supports(ctx, xt, ws[0], v)) continue;
              const std::string kind = vi::cuda::gemv_q4kt_tma_shape_name(v);
              report_variant("q4_kt", nullptr, kind, kind, [&](const Tensor& w) { vi::cuda::gemv_q4kt_tma(ctx, xt, w, yt, v); });
            }
          }
          // The int8-activation GEMV on the same weights in Q4_KI (from the Q4_KR copies), its
          // activations quantized once; the quantization itself timed on its own.
          if (variants && pn == "native" && ws[0].dtype() == DType::Q4_KT && !rows.empty()) {
            std::vector<Tensor> kis;
            for (const Tensor& r : rows) kis.push_back(vi::cuda::q4ki_from_q4kr(ctx, r));
            Tensor xq = ops::empty(ctx, DType::Q8_KX, {T, sh.K});
            vi::cuda::quantize_q8kx(ctx, xt, xq);
            auto on_ki = [&](const Tensor& w) -> const Tensor& { return kis[static_cast<size_t>(&w - ws.data())]; };
            // Relative L2 distance of the int8 GEMV's y from the f16 GEMV's (the activations' rounding).
            ops::matmul(ctx, xt, ws[0], yt);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            const Tensor ref = ops::download(ctx, yt);
            vi::cuda::gemv_q4ki(ctx, xq, kis[0], yt);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            const Tensor got = ops::download(ctx, yt);
            double num = 0, den = 0;
            for (int64_t i = 0; i < got.numel(); ++i) {
              const double a = vi::fp16_to_fp32(got.ptr<uint16_t>()[i]), b = vi::fp16_to_fp32(ref.ptr<uint16_t>()[i]);
              num += (a - b) * (a - b);
              den += b * b;
            }
            const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
            auto report = [&](const std::string& kind, float vus) {
              const double vgbs = gbs_at(vus);
              std::printf("variant q4_ki  %-20s %7lld %6lld %2lld %s: %9.1f us %6.1f%%  rel. L2 from f16 path %.2e\n",
                          sh.what, (long long)sh.N, (long long)sh.K, (long long)T, kind.c_str(), vus,
                          100.0 * vgbs / copy_gbs, rel);
              if (jf)
                std::fprintf(jf,
                             "{\"variant\":\"%s\",\"dtype\":\"q4_ki\",\"N\":%lld,\"K\":%lld,\"T\":%lld,\"us\":%.2f,"
                             "\"gbs\":%.1f,\"copy_gbs\":%.1f,\"rel_l2\":%.3e}\n",
                             kind.c_str(), (long long)sh.N, (long long)sh.K, (long long)T, vus, vgbs, copy_gbs, rel);
            };
            for (int v : vi::cuda::gemv_q4ki_shapes())
              report(fmt::format("int8 x, {} blocks/SM{}", v, v == vi::cuda::gemv_q4ki_default_blocks(sh.N) ? " (default)" : ""),
                     timed_us([&](const Tensor& w) { vi::cuda::gemv_q4ki(ctx, xq, on_ki(w), yt, v); }));
            report("quantize_q8kx alone", timed_us([&](const Tensor&) { vi::cuda::quantize_q8kx(ctx, xt, xq); }));
            if (sh.N == 34816) {
              Tensor h = ops::empty(ctx, DType::F16, {T, sh.N / 2});
              report("fused swiglu, int8 x", timed_us([&](const Tensor& w) { vi::cuda::gemv_q4ki_swiglu(ctx, xq, on_ki(w), h); }));
            }
          }
          // The fused gate|up + SwiGLU on the stacked gate|up matrix, in both Q4_K layouts.
          if (variants && pn == "native" && sh.N == 34816 && vi::cuda::gemv_q4kt_swiglu_supports(ctx, xt, ws[0])) {
            Tensor h = ops::empty(ctx, DType::F16, {T, sh.N / 2});
            auto fused = [&](const char* kind, auto call) {
              const float vus = timed_us(call);
              const double vgbs = gbs_at(vus);
              std::printf("variant swiglu %-20s %7lld %6lld %2lld %s: %9.1f us %6.1f%%\n", sh.what, (long long)sh.N,
                          (long long)sh.K, (long long)T, kind, vus, 100.0 * vgbs / copy_gbs);
              if (jf)
                std::fprintf(jf,
                             "{\"variant\":\"%s\",\"dtype\":\"q4_k\",\"N\":%lld,\"K\":%lld,\"T\":%lld,\"us\":%.2f,"
                             "\"gbs\":%.1f,\"copy_gbs\":%.1f}\n",
                             kind, (long long)sh.N, (long long)sh.K, (long long)T, vus, vgbs, copy_gbs);
            };
            for (vi::cuda::Q4ktShape v : vi::cuda::gemv_q4kt_shapes()) {
              const std::string kind =
                  fmt::format("fused swiglu, q4_kt, {}{}", vi::cuda::gemv_q4kt_shape_name(v),
                              v == vi::cuda::gemv_q4kt_swiglu_default_shape(sh.N) ? " (default)" : "");
              fused(kind.c_str(), [&](const Tensor& w) { vi::cuda::gemv_q4kt_swiglu(ctx, xt, w, h, v); });
            }
            fused("fused swiglu, q4_kr", [&](const Tensor& w) { vi::cuda::gemv_q4kr_swiglu(ctx, xt, row_layout(w), h); });
            // The paired gate|up tiles (Q4_KTS): every shape, and whether h is the Q4_KT kernel's.
            auto on_paired = [&](const Tensor& w) -> const Tensor& {
              return paired[static_cast<size_t>(&w - ws.data())];
            };
            if (!paired.empty() && paired[0].dtype() == DType::Q4_KTS) {
              vi::cuda::gemv_q4kt_swiglu(ctx, xt, ws[0], h);
              VI_CUDA_CHECK(cudaStreamSynchronize(stream));
              const Tensor h_tiles = ops::download(ctx, h);
              vi::cuda::gemv_q4kt_swiglu(ctx, xt, paired[0], h);
              VI_CUDA_CHECK(cudaStreamSynchronize(stream));
              const Tensor h_pairs = ops::download(ctx, h);
              int64_t diff = 0;
              for (int64_t i = 0; i < h_pairs.numel(); ++i)
                diff += h_pairs.ptr<uint16_t>()[i] != h_tiles.ptr<uint16_t>()[i];
              std::printf("variant swiglu %-20s %7lld %6lld %2lld paired tiles (q4_kts): h values that differ from "
                          "q4_kt's: %lld\n",
                          sh.what, (long long)sh.N, (long long)sh.K, (long long)T, (long long)diff);
              for (vi::cuda::Q4ktShape v : vi::cuda::gemv_q4kt_shapes()) {
                const std::string kind =
                    fmt::format("fused swiglu, q4_kts, {}{}", vi::cuda::gemv_q4kt_shape_name(v),
                                v == vi::cuda::gemv_q4kt_swiglu_default_shape(sh.N) ? " (default)" : "");
                fused(kind.c_str(), [&](const Tensor& w) { vi::cuda::gemv_q4kt_swiglu(ctx, xt, on_paired(w), h, v); });
              }
              for (const vi::cuda::Q4ktTmaShape& v : vi::cuda::gemv_q4kt_tma_shapes()) {
                if (!vi::cuda::gemv_q4kt_tma_supports(ctx, xt, paired[0], v, true)) continue;
                const std::string kind = "fused swiglu, q4_kts, " + vi::cuda::gemv_q4kt_tma_shape_name(v);
                fused(kind.c_str(), [&](const Tensor& w) { vi::cuda::gemv_q4kt_tma_swiglu(ctx, xt, on_paired(w), h, v); });
              }
            }
            // The deferred norm's consumer (ops/deferred_norm.h) on the same weights, u = x and each
            // token's sum of squares K (s = 16): the same loop plus the staged totals and the scales.
            ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, T, sh.K, 1e-6f);
            VI_CUDA_CHECK(cudaMemcpyAsync(dn.u.data(), xt.data(), xt.nbytes(), cudaMemcpyDeviceToDevice, stream));
            std::vector<uint64_t> words(static_cast<size_t>(dn.ss.numel()), 0);
            for (size_t i = 0; i < words.size(); i += 2 * ops::kDeferredNormSlots)
              words[i] = static_cast<uint64_t>(sh.K) << 32;  // slot 0's fine word: K · 2^32
            ops::upload_into(ctx, words.data(), words.size() * sizeof(uint64_t), dn.ss);
            // Each consumer as it was (the mins' term by 16 mmas over u), then taking it from the
            // producer's sums of u (random f16 pairs here: their values do not change the work), as
            // the rounds do unless VI_DEFER_SUMS=0.
            for (const bool sums : {false, true}) {
              if (sums) {
                if (dn.sums16.data() == nullptr) break;
                fill_weight(dn.sums16, 9, stream);
                dn.sums_written = true;
              }
              const char* how = sums ? ", mins from sums16" : "";
              if (vi::cuda::gemv_q4kt_deferred_supports(ctx, dn, ws[0], ops::DeferredConsumer::kSwiglu, {}))
                fused(fmt::format("fused swiglu, q4_kt, deferred-norm consumer{}", how).c_str(), [&](const Tensor& w) {
                  vi::cuda::gemv_q4kt_deferred(ctx, dn, w, ops::DeferredConsumer::kSwiglu, {&h});
                });
              if (!paired.empty() &&
                  vi::cuda::gemv_q4kt_deferred_supports(ctx, dn, paired[0], ops::DeferredConsumer::kSwiglu, {}))
                fused(fmt::format("fused swiglu, q4_kts, deferred-norm consumer{}", how).c_str(), [&](const Tensor& w) {
                  vi::cuda::gemv_q4kt_deferred(ctx, dn, on_paired(w), ops::DeferredConsumer::kSwiglu, {&h});
                });
            }
          }
          // The deferred norm's producer (x += y, u and the sums of squares in the epilogue) on the
          // 5120-row matrices, against the plain GEMV above.
          if (variants && pn == "native" && sh.N % 16 == 0 && sh.N <= 8192 && ws[0].dtype() == DType::Q4_KT) {
            Tensor res = ops::empty(ctx, DType::F16, {T, sh.N});
            fill_weight(res, 7, stream);
            const std::vector<float> ones(static_cast<size_t>(sh.N), 1.0f);
            Tensor nw = ops::empty(ctx, DType::F32, {sh.N});
            ops::upload_into(ctx, ones.data(), ones.size() * sizeof(float), nw);
            ops::DeferredNorm dn = ops::deferred_norm_scratch(ctx, T, sh.N, 1e-6f);
            if (vi::cuda::gemv_q4kt_add_deferred_norm_supports(ctx, xt, ws[0], res)) {
              const float vus = timed_us([&](const Tensor& w) {
                vi::cuda::gemv_q4kt_add_deferred_norm(ctx, xt, w, res, nw, 1.0f, dn);
              });
              std::printf("variant q4_kt  %-20s %7lld %6lld %2lld deferred-norm producer: %9.1f us %6.1f%%\n", sh.what,
                          (long long)sh.N, (long long)sh.K, (long long)T, vus, 100.0 * gbs_at(vus) / copy_gbs);
            }
          }
          if (variants && pn == "native" && sh.N == 34816 && ws[0].dtype() == DType::Q8_0T &&
              vi::cuda::gemv_mma_swiglu_supports(ctx, xt, ws[0])) {
            Tensor h = ops::empty(ctx, DType::F16, {T, sh.N / 2});
            const vi::cuda::GemvMmaShape def = vi::cuda::gemv_mma_default_shape(ws[0], T);
            for (const bool row_copy : {false, true})
              for (vi::cuda::GemvMmaShape v : vi::cuda::gemv_mma_shapes(DType::Q8_0T)) {
                auto call = [&](const Tensor& w) {
                  vi::cuda::gemv_mma_swiglu(ctx, xt, row_copy ? row_layout(w) : w, h, v);
                };
                const float vus = timed_us(call);
                std::printf("variant swiglu %-20s %7lld %6lld %2lld fused swiglu, %s, tiles %d blocks/SM %d x %s%s: %9.1f us %6.1f%%\n",
                            sh.what, (long long)sh.N, (long long)sh.K, (long long)T, row_copy ? "q8_0r" : "q8_0t", v.tiles,
                            v.min_blocks, v.stage_x ? "staged" : "late", v == def ? " (default)" : "", vus,
                            100.0 * gbs_at(vus) / copy_gbs);
              }
          }
          if (variants && pn == "native" && vi::cuda::gemv_q4kr_supports(ctx, xt, row_layout(ws[0]))) {
            const vi::cuda::GemvQ4krShape def = vi::cuda::gemv_q4kr_default_shape(ctx, sh.N, sh.K);
            for (vi::cuda::GemvQ4krShape v : vi::cuda::gemv_q4kr_shapes(ctx)) {
              const std::string kind = vi::cuda::gemv_q4kr_shape_name(v);
              report_variant("q4_kr", nullptr, kind, kind + (v == def ? " (default)" : ""),
                             [&](const Tensor& w) { vi::cuda::gemv_q4kr(ctx, xt, row_layout(w), yt, v); });
            }
          }
          if (variants && pn == "volta" && vi::cuda::gemv_q4kr_volta_supports(xt, ws[0])) {
            const vi::cuda::GemvQ4krVoltaShape def = vi::cuda::gemv_q4kr_volta_default_shape(sh.N, sh.K);
            auto report = [&](const std::string& kind, auto call) { report_variant("q4_kr", "volta", kind, kind, call); };
            report("cuda-core gemv_simt", [&](const Tensor& w) { vi::cuda::gemv_simt(ctx, xt, w, yt); });
            for (vi::cuda::GemvQ4krVoltaShape v : vi::cuda::gemv_q4kr_volta_shapes())
              report(vi::cuda::gemv_q4kr_volta_shape_name(v) + (v == def ? " (its default)" : ""),
                     [&](const Tensor& w) { vi::cuda::gemv_q4kr_volta(ctx, xt, w, yt, v); });
          }
          // gemv_mma's shapes, on the weights as prepared and (Q8_0T) on their Q8_0R copies.
          for (const bool row_copy : {false, true}) {
          if (row_copy && rows.empty()) continue;
          const Tensor& w0 = row_copy ? row_layout(ws[0]) : ws[0];
          const std::string dn_v = vi::dtype_name(w0.dtype());
          if (variants && pn == "native" && vi::cuda::gemv_mma_supports(ctx, xt, w0)) {
            const vi::cuda::GemvMmaShape def = vi::cuda::gemv_mma_default_shape(w0, T);
            for (vi::cuda::GemvMmaShape v : vi::cuda::gemv_mma_shapes(w0.dtype())) {
              auto call = [&](const Tensor& w) { vi::cuda::gemv_mma(ctx, xt, row_copy ? row_layout(w) : w, yt, v); };
              const int64_t diff = differing(call);
              const float vus = timed_us(call);
              const double vgbs = gbs_at(vus);
              // The deep Q8_0R kernel: "x ahead" (next step's activations while this one multiplies).
              const std::string deep = v.depth > 0 ? fmt::format(" deep {} ahead", v.depth) : std::string();
              std::printf("variant %-6s %-20s %7lld %6lld %2lld tiles %d blocks/SM %d x %s%s%s: %9.1f us %6.1f%%  outputs differing from default: %lld\n",
                          dn_v.c_str(), sh.what, (long long)sh.N, (long long)sh.K, (long long)T, v.tiles,
                          v.min_blocks, v.stage_x ? (v.depth > 0 ? "ahead" : "staged") : "late", deep.c_str(),
                          v == def ? " (default)" : "", vus, 100.0 * vgbs / copy_gbs, (long long)diff);
              if (jf)
                std::fprintf(jf,
                             "{\"variant\":\"t%d_b%d_x%d%s\",\"dtype\":\"%s\",\"N\":%lld,\"K\":%lld,\"T\":%lld,\"us\":%.2f,"
                             "\"gbs\":%.1f,\"copy_gbs\":%.1f,\"differing\":%lld}\n",
                             v.tiles, v.min_blocks, v.stage_x ? 1 : 0, v.depth > 0 ? fmt::format("_d{}", v.depth).c_str() : "", dn_v.c_str(), (long long)sh.N, (long long)sh.K, (long long)T, vus, vgbs,
                             copy_gbs, (long long)diff);
            }
          }
          }
          const float us = timed_us([&](const Tensor& w) { ops::matmul(ctx, xt, w, yt); });
          const double bytes = double(ws[0].nbytes()) + 2.0 * T * sh.K + 2.0 * T * sh.N;
          const double gbs = gbs_at(us);
          std::printf("%-7s %-6s %-20s %7lld %6lld %2lld %9.1f %8.0f %6.1f%%\n", pn.c_str(),
                      vi::dtype_name(ws[0].dtype()), sh.what, (long long)sh.N, (long long)sh.K, (long long)T, us, gbs,
                      100.0 * gbs / copy_gbs);
          std::fflush(stdout);
          if (jf)
            std::fprintf(jf,
                         "{\"profile\":\"%s\",\"dtype\":\"%s\",\"stored\":\"%s\",\"N\":%lld,\"K\":%lld,\"T\":%lld,"
                         "\"us\":%.2f,\"bytes\":%.0f,\"gbs\":%.1f,\"copy_gbs\":%.1f,\"copies\":%d}\n",
                         pn.c_str(), dn.c_str(), vi::dtype_name(ws[0].dtype()), (long long)sh.N, (long long)sh.K,
                         (long long)T, us, bytes, gbs, copy_gbs, copies);
        }
      }
    }
  }
  if (jf) std::fclose(jf);
  return 0;
}
