// Decode-attention micro-benchmark: ops::paged_attention (the split-KV decode kernel and its
// combine step) on one layer of the 27B-shaped Qwen3.5 (24 query heads, 4 KV heads, head
// dim 256, blocks of 16 tokens through a shuffled block table), f16 activations, for f16 and
// int8 K/V, T = 1, 4 and 8 query tokens (MTP verification), contexts 8K and 128K, both kernel
// profiles, and the split kernels (the CUDA-core one, the tensor-core register-prefetch one
// "tc-registers", the cp.async ring kernel "tc-ring" (native profile, else the register one),
// the warp-split kernel "tc-warps" (i8 pools, native profile, with the row tiles per block
// the default picks: T = 4 two tiles, T = 8 four, sharing each K/V slot; no line where it
// does not fit) and the tensor-core default "tensor-core" (i8 pools: the warp-split kernel
// where it fits, else the ring kernel);
// forced through cuda::set_decode_tc_min_rows / set_decode_tc_ring / set_decode_tc_warps;
// the warp-split lines name the row tiles per block (1: each warp its own keys, one block per
// row group of <= 16 rows; 2 / 4: the tiles of a block share each K/V slot) and the row
// groups; --variants adds the warp-split kernel forced to 1, 2 and 4 tiles per block
// ("tc-warps-x1", "-x2", "-x4"; set_decode_tc_warps_tiles) for A/B against the default;
// "auto" is whichever the default thresholds pick). Per line: the time relative to T = 1 on the same
// kernel and against the best T = 1 so far, and the relative L2 difference of the kernel's
// output from the CUDA-core kernel's on the same inputs.
// Each figure: the median over 9 timings (CUDA events) of back-to-back calls that rotate
// over enough pool copies (>= 256 MiB) that the 50 MB L2 cannot hold them, replayed as one
// captured CUDA graph (GPU time, as a decode graph runs) and also issued call by call from
// the host ("stream": includes the host's enqueue cost where that is the longer). Bytes =
// the context's K/V rows (+ int8 scales) + q + out, read once; % copy is against the
// device-to-device copy bandwidth (bytes read + written) measured in the same run.
//
// --bound pow2 sizes the launch as a recorded decode step does (BatchPlan::stage): the key
// bound is the length rounded up to a power of two (at least 256) and the block table is
// zero-padded to it, so a context just past a power of two (e.g. 8200 -> 16384) launches
// splits for twice its keys; --bound exact (default) passes the length. --tuning ab adds,
// for the tensor-core lines, the same path with cuda::DecodeTuning all off ("[old]": splits
// of the bound, the old combine, no PDL, the shared-slot kernels' old slot step) and the
// default with only the lean slot step off ("[no lean]": old vs new step of the T >= 3
// kernels, everything else as the default) or only the narrow step off ("[no narrow]": the
// 16-row step at T = 1 of the 27B shape) or only the copies before the PDL wait off ("[no
// pre-wait]") or only the split-V step off ("[no split V]": the lean step at T = 3..5 of the
// 27B shape), or the split-V step's split-K form switched ("[split K]" where off by default),
// or only the run copies off ("[no runs]": the 16-row step and the shared-slot kernels look up
// every row in the block table);
// --tuning pieces adds each piece alone too
// ("[balanced]", "[combine]", "[pdl]", "[lean]", "[narrow]"). --paths limits the kernels
// (comma-separated names as printed, e.g. tensor-core,tc-warps). The context column reads
// "length/bound".
//
//   bench_attention_decode [--ctx 8192,131072] [--tokens 1,4,8] [--profiles native,volta] [--json FILE]
//                          [--variants] [--bound exact|pow2] [--tuning default|ab|pieces] [--paths a,b]
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <exception>
#include <map>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_util.cuh"
#include "core/half.h"
#include "core/tensor.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"
#include "bench_cuda_util.cuh"

namespace {

using vi::DType;
using vi::Tensor;
namespace ops = vi::ops;

using vi::benchutil::fill_tensor;
using vi::benchutil::median;
using vi::benchutil::parse_list;

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> ctxs = {8192, 131072}, tokens = {1, 4, 8};
  std::vector<std::string> profiles = {"native", "volta"};
  std::string json_path, bound_mode = "exact", tuning_mode = "default";
  std::vector<std::string> only_paths;
  bool variants = false;
  for (int i = 1; i < argc; ++i) {  // --variants takes no value
    if (std::string(argv[i]) == "--variants") {
      variants = true;
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc, --i;
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ctx") ctxs = parse_list(argv[i + 1]);
    else if (a == "--tokens") tokens = parse_list(argv[i + 1]);
    else if (a == "--json") json_path = argv[i + 1];
    else if (a == "--bound") bound_mode = argv[i + 1];
    else if (a == "--tuning") tuning_mode = argv[i + 1];
    else if (a == "--paths") {
      std::string l = argv[i + 1];
      for (size_t p = 0; p <= l.size();) {
        const size_t e = std::min(l.find(',', p), l.size());
        only_paths.push_back(l.substr(p, e - p));
        p = e + 1;
      }
    } else if (a == "--profiles") {
      profiles.clear();
      std::string l = argv[i + 1];
      for (size_t p = 0; p <= l.size();) {
        const size_t e = std::min(l.find(',', p), l.size());
        profiles.push_back(l.substr(p, e - p));
        p = e + 1;
      }
    }
  }
  if (bound_mode != "exact" && bound_mode != "pow2") {
    std::fprintf(stderr, "--bound takes exact or pow2\n");
    return 2;
  }
  if (tuning_mode != "default" && tuning_mode != "ab" && tuning_mode != "pieces") {
    std::fprintf(stderr, "--tuning takes default, ab or pieces\n");
    return 2;
  }
  // The key bound a call of `ctx` keys is launched for (BatchPlan::stage when bucketed).
  auto bound_of = [&](int64_t ctx) {
    if (bound_mode == "exact") return ctx;
    int64_t b = 256;
    while (b < ctx) b *= 2;
    return b;
  };
  // Tuning variants timed per tensor-core path (suffix of the kernel name, tuning).
  using vi::cuda::DecodeTuning;
  std::vector<std::pair<std::string, DecodeTuning>> tunings = {{"", vi::cuda::decode_tuning()}};
  if (tuning_mode != "default") {
    tunings.push_back({" [old]", DecodeTuning{false, false, false, false, false, false, false, false, false}});
    DecodeTuning no_lean = vi::cuda::decode_tuning();
    no_lean.lean_share_step = false;
    tunings.push_back({" [no lean]", no_lean});
    DecodeTuning no_narrow = vi::cuda::decode_tuning();
    no_narrow.narrow_rows = false;
    tunings.push_back({" [no narrow]", no_narrow});
    DecodeTuning no_pre = vi::cuda::decode_tuning();
    no_pre.pre_wait_copies = false;
    tunings.push_back({" [no pre-wait]", no_pre});
    DecodeTuning no_split = vi::cuda::decode_tuning();
    no_split.split_v = false;
    tunings.push_back({" [no split V]", no_split});
    DecodeTuning split_k = vi::cuda::decode_tuning();
    split_k.split_k = !split_k.split_k;
    tunings.push_back({split_k.split_k ? " [split K]" : " [no split K]", split_k});
    DecodeTuning no_runs = vi::cuda::decode_tuning();
    no_runs.run_copies = false;
    tunings.push_back({" [no runs]", no_runs});
  }
  if (tuning_mode == "pieces") {
    tunings.push_back({" [balanced]", DecodeTuning{true, false, false, false, false, false, false, false, false}});
    tunings.push_back({" [combine]", DecodeTuning{false, true, false, false, false, false, false, false, false}});
    tunings.push_back({" [pdl]", DecodeTuning{false, false, true, false, false, false, false, false, false}});
    tunings.push_back({" [lean]", DecodeTuning{false, false, false, true, false, false, false, false, false}});
    tunings.push_back({" [narrow]", DecodeTuning{false, false, false, false, true, false, false, false, false}});
  }
  const DecodeTuning tuning0 = vi::cuda::decode_tuning();
  FILE* json = json_path.empty() ? nullptr : std::fopen(json_path.c_str(), "w");
  const int64_t Hq = 24, Hkv = 4, D = 256, bs = 16;
  cudaDeviceProp prop{};
  VI_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_gbs = vi::benchutil::copy_bandwidth();
  std::printf("# %s, %d SMs; copy bandwidth %.0f GB/s (read + write)\n", prop.name, prop.multiProcessorCount, copy_gbs);
  std::printf("# one layer: Hq=%lld Hkv=%lld D=%lld, block size %lld, f16 activations\n", (long long)Hq,
              (long long)Hkv, (long long)D, (long long)bs);
  std::printf("| profile | KV | context | T | kernel | us/call (graph) | GB/s | %% copy | us/call (stream) | / T=1 same "
              "kernel | / best T=1 | rel L2 vs cuda-core |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  cudaStream_t stream;
  VI_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::mt19937 rng(1234);
  for (const std::string& prof_s : profiles) {
    const char* prof = prof_s.c_str();
    ops::Context g;
    g.device = vi::Device::CUDA;
    g.act = DType::F16;
    g.profile = vi::cuda::parse_profile(prof);
    g.stream = stream;
    for (DType kv : {DType::F16, DType::I8}) {
      for (int64_t ctx : ctxs) {
        const int64_t n_blocks = (ctx + 8 + bs - 1) / bs, rows = n_blocks * bs;
        const int64_t bound = bound_of(ctx);
        const int64_t tbl_len = std::max(n_blocks, (bound + bs - 1) / bs);  // zero-padded past n_blocks
        const double pool_bytes = double(rows) * Hkv * D * 2 * (kv == DType::I8 ? 1 : 2);
        const int copies = std::max(1, static_cast<int>((256.0 * (1 << 20) + pool_bytes - 1) / pool_bytes));
        std::vector<ops::KvRows> ks, vs;
        for (int c = 0; c < copies; ++c) {
          ops::KvRows k{ops::empty(g, kv, {rows, Hkv, D}), {}}, v{ops::empty(g, kv, {rows, Hkv, D}), {}};
          fill_tensor(k.data, 11 + c);
          fill_tensor(v.data, 97 + c);
          if (kv == DType::I8) {
            k.scale = ops::empty(g, DType::F32, {rows, Hkv});
            v.scale = ops::empty(g, DType::F32, {rows, Hkv});
            fill_tensor(k.scale, 5 + c, true);
            fill_tensor(v.scale, 7 + c, true);
          }
          ks.push_back(k);
          vs.push_back(v);
        }
        std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        Tensor htable = Tensor::empty(DType::I32, {tbl_len});
        std::fill_n(htable.ptr<int32_t>(), tbl_len, 0);
        std::copy(perm.begin(), perm.end(), htable.ptr<int32_t>());
        Tensor table = ops::upload(g, htable);
        std::map<std::string, float> t1_us;  // T = 1 time per kernel
        for (int64_t T : tokens) {
          Tensor q = ops::empty(g, DType::F16, {T, Hq, D}), out = ops::empty(g, DType::F16, {T, Hq, D});
          fill_tensor(q, 3);
          const int64_t pos0 = ctx - T;  // the last query sees `ctx` keys
          // Positions on the device, uploaded once: the host-position overload uploads them
          // on every call, which a captured graph would replay from freed host memory.
          std::vector<int32_t> hpos(static_cast<size_t>(T));
          std::iota(hpos.begin(), hpos.end(), static_cast<int32_t>(pos0));
          Tensor dpos = ops::i32_on_device(g, hpos);
          auto call = [&](int c) { ops::paged_attention(g, q, ks[c], vs[c], table, bs, dpos, bound, 0.0625f, out); };
          // The two kernels' outputs on copy 0, f16 -> f32 on the host.
          auto out_host = [&]() {
            call(0);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            std::vector<uint16_t> h(static_cast<size_t>(out.numel()));
            VI_CUDA_CHECK(cudaMemcpy(h.data(), out.data(), h.size() * 2, cudaMemcpyDeviceToHost));
            std::vector<double> f(h.size());
            for (size_t i = 0; i < h.size(); ++i) f[i] = vi::fp16_to_fp32(h[i]);
            return f;
          };
          // Paths: the CUDA-core kernel, the tensor-core register-prefetch kernel (the only
          // one before the ring kernel; what the volta profile runs), the cp.async ring
          // kernel forced where it fits (native profile), the warp-split kernel forced where
          // it fits, and the tensor-core default (kAuto: for i8 pools the warp-split kernel
          // where it fits, else the ring kernel).
          auto force = [](const std::string& path) {
            const bool tc = path != "cuda-core";
            const bool warps = path.rfind("tc-warps", 0) == 0;  // tc-warps, tc-warps-x1 / -x2 / -x4
            vi::cuda::set_decode_tc_warps_tiles(path == "tc-warps-x1"   ? vi::cuda::DecodeTcWarpsTiles::k1
                                                : path == "tc-warps-x2" ? vi::cuda::DecodeTcWarpsTiles::k2
                                                : path == "tc-warps-x4" ? vi::cuda::DecodeTcWarpsTiles::k4
                                                                        : vi::cuda::DecodeTcWarpsTiles::kAuto);
            vi::cuda::set_decode_tc_min_rows(tc ? 1 : INT_MAX);
            vi::cuda::set_decode_tc_min_keys(tc ? 1 : INT64_MAX);
            vi::cuda::set_decode_tc_ring(path == "tc-registers" ? vi::cuda::DecodeTcRing::kNever
                                         : path == "tc-ring"    ? vi::cuda::DecodeTcRing::kAlways
                                                                : vi::cuda::DecodeTcRing::kAuto);
            vi::cuda::set_decode_tc_warps(warps                   ? vi::cuda::DecodeTcWarps::kAlways
                                          : path == "tensor-core" ? vi::cuda::DecodeTcWarps::kAuto
                                                                  : vi::cuda::DecodeTcWarps::kNever);
          };
          // The call's shape as the routing sees it (whether the warp-split kernel fits), and
          // whether the default routing (every switch at its default here) takes tensor cores.
          vi::cuda::DecodeArgs shape;
          shape.q_dtype = DType::F16, shape.k_dtype = kv, shape.v_dtype = kv;
          shape.k = ks[0].data.data(), shape.v = vs[0].data.data();
          shape.T = T, shape.Hq = Hq, shape.Hkv = Hkv, shape.D = D, shape.block_size = bs;
          shape.kv_bound = bound;
          const bool auto_tc = vi::cuda::decode_tc_takes(g, shape);
          force("cuda-core");
          const std::vector<double> ref = out_host();
          std::vector<const char*> paths = {"cuda-core", "tc-registers", "tc-ring", "tc-warps", "tensor-core"};
          if (variants) paths.insert(paths.end(), {"tc-warps-x1", "tc-warps-x2", "tc-warps-x4"});
          if (!only_paths.empty())
            paths.erase(std::remove_if(paths.begin(), paths.end(),
                                       [&](const char* p) {
                                         return std::find(only_paths.begin(), only_paths.end(), p) == only_paths.end();
                                       }),
                        paths.end());
          for (const char* path : paths)
          for (const auto& [tuning_name, tuning] : tunings) {
            const bool tc = std::string(path) != "cuda-core";
            const bool warps = std::string(path).rfind("tc-warps", 0) == 0;
            // The tuning variants are timed on the tensor-core paths only (the CUDA-core
            // kernel shares the combine and the split count, not the rest).
            if (!tuning_name.empty() && !tc) continue;
            vi::cuda::set_decode_tuning(tuning);
            const std::string name = std::string(path) + tuning_name;
            force(path);
            if (warps && !vi::cuda::decode_tc_warps_fits(g, shape)) continue;
            // This path's output against the CUDA-core kernel's on the same inputs.
            const std::vector<double> got = out_host();
            double num = 0, den = 0;
            for (size_t i = 0; i < ref.size(); ++i) num += (got[i] - ref[i]) * (got[i] - ref[i]), den += ref[i] * ref[i];
            const double rel_l2 = std::sqrt(num / std::max(den, 1e-30));
            for (int c = 0; c < copies; ++c) call(c);  // warm-up
            const int n_calls = std::max(copies, 20);
            VI_CUDA_CHECK(cudaStreamSynchronize(stream));
            cudaEvent_t e0, e1;
            VI_CUDA_CHECK(cudaEventCreate(&e0));
            VI_CUDA_CHECK(cudaEventCreate(&e1));
            // Call by call from the host.
            std::vector<float> us_stream;
            for (int r = 0; r < 9; ++r) {
              VI_CUDA_CHECK(cudaEventRecord(e0, stream));
              for (int i = 0; i < n_calls; ++i) call(i % copies);
              VI_CUDA_CHECK(cudaEventRecord(e1, stream));
              VI_CUDA_CHECK(cudaEventSynchronize(e1));
              float ms = 0;
              VI_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
              us_stream.push_back(ms * 1e3f / n_calls);
            }
            // The same calls captured once into a graph, replayed (if capture fails, the
            // stream figure stands in and the line says so).
            std::vector<float> us;
            try {
              us = vi::benchutil::graph_us_per_call(stream, n_calls, 9, cudaStreamCaptureModeThreadLocal,
                                                    [&](int i) { call(i % copies); });
            } catch (const std::exception& e) {
              std::printf("# graph capture failed (%s): the stream time is reported instead\n", e.what());
              cudaStreamCaptureStatus st;
              if (cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
                cudaGraph_t g2;
                cudaStreamEndCapture(stream, &g2);
              }
              cudaGetLastError();
              us = us_stream;
            }
            VI_CUDA_CHECK(cudaEventDestroy(e0));
            VI_CUDA_CHECK(cudaEventDestroy(e1));
            const double bytes = double(ctx) * Hkv * D * 2 * (kv == DType::I8 ? 1 : 2) +
                                 (kv == DType::I8 ? double(ctx) * Hkv * 2 * 4 : 0.0) + 2.0 * q.nbytes();
            const float t = median(us);
            const double gbs = bytes / (t * 1e-6) / 1e9;
            if (T == 1) t1_us[name] = t;
            std::string label = name + (tc == auto_tc && (path == std::string("cuda-core") || path == std::string("tensor-core")) ? " (auto)" : "");
            if (warps)
              label += " (" + std::to_string(vi::cuda::decode_tc_warps_tiles(shape)) + " row tiles per block, " +
                       std::to_string(vi::cuda::decode_tc_warps_groups(shape)) + " row groups)";
            auto ratio = [&](float base) {
              char b[32] = "-";
              if (base > 0) std::snprintf(b, sizeof b, "%.2f", t / base);
              return std::string(b);
            };
            float best1 = 0;
            for (const auto& [name, u] : t1_us) best1 = best1 == 0 ? u : std::min(best1, u);
            std::printf("| %s | %s | %lld/%lld | %lld | %s | %.1f | %.0f | %.0f%% | %.1f | %s | %s | %.1e |\n", prof,
                        vi::dtype_name(kv), (long long)ctx, (long long)bound, (long long)T, label.c_str(), t, gbs,
                        100.0 * gbs / copy_gbs, median(us_stream), ratio(t1_us.count(name) ? t1_us[name] : 0).c_str(),
                        ratio(best1).c_str(), rel_l2);
            if (json)
              std::fprintf(json,
                           "{\"profile\":\"%s\",\"kv\":\"%s\",\"ctx\":%lld,\"bound\":%lld,\"T\":%lld,\"kernel\":\"%s\","
                           "\"us\":%.2f,\"gbs\":%.1f,\"copy_gbs\":%.1f,\"us_stream\":%.2f,\"samples_us\":[%s]}\n",
                           prof, vi::dtype_name(kv), (long long)ctx, (long long)bound, (long long)T, name.c_str(), t,
                           gbs, copy_gbs, median(us_stream),
                           [&] {
                             std::string s;
                             for (float u : us) s += (s.empty() ? "" : ",") + std::to_string(u);
                             return s;
                           }()
                               .c_str());
          }
          vi::cuda::set_decode_tc_min_rows(vi::cuda::kDecodeTcMinRowsDefault);
          vi::cuda::reset_decode_tc_min_keys();
          vi::cuda::set_decode_tc_ring(vi::cuda::DecodeTcRing::kAuto);
          vi::cuda::set_decode_tc_warps(vi::cuda::DecodeTcWarps::kAuto);
          vi::cuda::set_decode_tc_warps_tiles(vi::cuda::DecodeTcWarpsTiles::kAuto);
          vi::cuda::set_decode_tuning(tuning0);
        }
        std::fflush(stdout);
      }
    }
  }
  if (json) std::fclose(json);
  return 0;
}
