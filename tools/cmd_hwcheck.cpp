// `voltinfer hwcheck`: what the GPUs are and what they really deliver — name, compute
// capability, SMs, clocks, memory; measured copy bandwidth and fp16 tensor-core GEMM rate
// (cuBLAS, and our own matmul op in both kernel profiles); with several ranks, a
// peer-to-peer latency and bandwidth matrix that flags broken paths. Human tables, or
// --json. Exit codes: 0 healthy, 2 built without CUDA, 3 no GPU, 4 a broken path found.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tools/commands.h"
#ifdef VI_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/hwinfo.h"
#endif
#include "tools/bench_util.h"

namespace vi::cli {

namespace {

using json = nlohmann::json;

struct HwArgs {
  bool json_out = false;
  int ranks = 0;          // 0: one per GPU
  int copy_mib = 1024;
  int reps = 20;
  int gemm = 8192;        // m = n = k of the cuBLAS probe
  bool quick = false;     // fewer repetitions and smaller probes (tests)
};

[[noreturn]] void exit_with(int code, const std::string& msg) {
  std::fprintf(stderr, "hwcheck: %s\n", msg.c_str());
  throw CLI::RuntimeError(code);
}

#ifdef VI_WITH_CUDA

void run_hwcheck(const HwArgs& a) {
  const int n_dev = cuda::device_count();
  if (n_dev == 0) exit_with(3, "no CUDA device found (no driver, no GPU, or CUDA_VISIBLE_DEVICES hides them)");
  const int reps = a.quick ? 5 : a.reps;
  const size_t copy_bytes = size_t(a.quick ? 256 : a.copy_mib) << 20;
  const int gemm = a.quick ? 2048 : a.gemm;
  json out;
  out["devices"] = json::array();
  bool broken = false;
  for (int d = 0; d < n_dev; ++d) {
    cuda::GpuFacts f = cuda::gpu_facts(d);
    cuda::Measured copy = cuda::measure_copy_gbs(d, copy_bytes, reps);
    cuda::Measured gemm_rate = cuda::measure_cublas_fp16_tflops(d, gemm, gemm, gemm, std::max(3, reps / 2));  // reps 0: no cuBLAS
    json cublas = nullptr;
    if (gemm_rate.reps > 0)
      cublas = {{"median", gemm_rate.median}, {"min", gemm_rate.min}, {"max", gemm_rate.max},
                {"m", gemm}, {"n", gemm}, {"k", gemm}, {"accumulate", "fp32"}};
    json dj = {{"index", d},
               {"name", f.name},
               {"pci_bus_id", f.pci_bus_id},
               {"compute_capability", fmt::format("{}.{}", f.cc / 10, f.cc % 10)},
               {"sm_count", f.sm_count},
               {"sm_clock_mhz", f.sm_clock_mhz},
               {"mem_clock_mhz", f.mem_clock_mhz},
               {"bus_width_bits", f.bus_width_bits},
               {"total_mem_bytes", f.total_mem},
               {"free_mem_bytes", f.free_mem},
               {"l2_bytes", f.l2_bytes},
               {"theoretical_gbs", f.theoretical_gbs},
               {"driver", fmt::format("{}.{}", f.driver_version / 1000, f.driver_version % 1000 / 10)},
               {"runtime", fmt::format("{}.{}", f.runtime_version / 1000, f.runtime_version % 1000 / 10)},
               {"copy_gbs", {{"median", copy.median}, {"min", copy.min}, {"max", copy.max}, {"reps", copy.reps},
                             {"bytes", copy_bytes}, {"counts", "bytes read + bytes written"}}},
               {"cublas_fp16_tflops", cublas}};
    if (d == 0) {  // our own GEMM path, both profiles (device 0 only: it is the same code on every GPU)
      const int64_t M = a.quick ? 512 : 4096, NK = a.quick ? 2048 : 8192;
      for (auto p : {ops::KernelProfile::kNative, ops::KernelProfile::kVolta})
        dj["matmul_op_tflops"][cuda::profile_name(p)] = {{"tflops", matmul_op_tflops(p, M, NK, NK, std::max(3, reps / 4))},
                                                         {"m", M}, {"n", NK}, {"k", NK}};
    }
    out["devices"].push_back(dj);
  }
  // Peer matrix over the ranks (several ranks may share a GPU: that exercises this path on one).
  const int ranks = a.ranks > 0 ? a.ranks : n_dev;
  std::vector<int> rank_dev;
  for (int r = 0; r < ranks; ++r) rank_dev.push_back(r % n_dev);
  const size_t small = 4096, large = size_t(a.quick ? 32 : 256) << 20;
  auto links = cuda::measure_peer_links(rank_dev, small, large, reps);
  out["peer"] = json::array();
  for (const auto& L : links) {
    out["peer"].push_back({{"src_rank", L.src_rank}, {"dst_rank", L.dst_rank}, {"src_dev", L.src_dev},
                           {"dst_dev", L.dst_dev}, {"same_device", L.same_device},
                           {"can_access_peer", L.can_access_peer}, {"lat_us_4k", L.lat_us}, {"gbs", L.gbs},
                           {"lat_us_4k_p2p", L.lat_us_p2p >= 0 ? json(L.lat_us_p2p) : json(nullptr)},
                           {"gbs_p2p", L.gbs_p2p >= 0 ? json(L.gbs_p2p) : json(nullptr)},
                           {"problem", L.problem.empty() ? json(nullptr) : json(L.problem)}});
    broken = broken || !L.problem.empty();
  }
  out["peer_copy_bytes"] = {{"small", small}, {"large", large}};
  out["healthy"] = !broken;

  if (a.json_out) {
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("| GPU | name | cc | SMs | SM clock | mem clock | bus | memory | theoretical | copy (measured) | "
                "cuBLAS fp16 |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (const json& d : out["devices"])
      std::printf("| %d | %s | %s | %d | %.0f MHz | %.0f MHz | %d bit | %.1f GiB | %.0f GB/s | %.0f GB/s (%.0f–%.0f) | "
                  "%.0f TFLOP/s |\n",
                  d["index"].get<int>(), d["name"].get<std::string>().c_str(),
                  d["compute_capability"].get<std::string>().c_str(), d["sm_count"].get<int>(),
                  d["sm_clock_mhz"].get<double>(), d["mem_clock_mhz"].get<double>(), d["bus_width_bits"].get<int>(),
                  d["total_mem_bytes"].get<double>() / (1 << 30), d["theoretical_gbs"].get<double>(),
                  d["copy_gbs"]["median"].get<double>(), d["copy_gbs"]["min"].get<double>(),
                  d["copy_gbs"]["max"].get<double>(),
                  d["cublas_fp16_tflops"].is_null() ? 0.0 : d["cublas_fp16_tflops"]["median"].get<double>());
    const json& d0 = out["devices"][0];
    std::printf("\nour matmul op, fp16 weights %lld x %lld, %lld tokens: native %.0f TFLOP/s, volta %.0f TFLOP/s\n",
                static_cast<long long>(d0["matmul_op_tflops"]["native"]["n"].get<int64_t>()),
                static_cast<long long>(d0["matmul_op_tflops"]["native"]["k"].get<int64_t>()),
                static_cast<long long>(d0["matmul_op_tflops"]["native"]["m"].get<int64_t>()),
                d0["matmul_op_tflops"]["native"]["tflops"].get<double>(),
                d0["matmul_op_tflops"]["volta"]["tflops"].get<double>());
    std::printf("copy: cudaMemcpy device to device of %zu MiB, bytes read + written, median of %d; driver %s, "
                "runtime %s\n",
                copy_bytes >> 20, reps, d0["driver"].get<std::string>().c_str(),
                d0["runtime"].get<std::string>().c_str());
    std::printf("\npeer-to-peer (%d ranks on %d GPU%s; cudaMemcpyPeer of 4 KB: latency incl. sync, and of %zu MiB: "
                "GB/s one way; [p2p] = with peer access enabled)\n\n| src \\ dst |",
                ranks, n_dev, n_dev > 1 ? "s" : "", large >> 20);
    for (int j = 0; j < ranks; ++j) std::printf(" rank %d (GPU %d) |", j, rank_dev[j]);
    std::printf("\n| --- |");
    for (int j = 0; j < ranks; ++j) std::printf(" --- |");
    std::printf("\n");
    for (int i = 0; i < ranks; ++i) {
      std::printf("| rank %d (GPU %d) |", i, rank_dev[i]);
      for (int j = 0; j < ranks; ++j) {
        const auto& L = links[static_cast<size_t>(i * ranks + j)];
        std::string cell = fmt::format("{:.0f} µs, {:.0f} GB/s", L.lat_us, L.gbs);
        if (L.lat_us_p2p >= 0) cell += fmt::format(" [p2p {:.0f} µs, {:.0f} GB/s]", L.lat_us_p2p, L.gbs_p2p);
        if (L.same_device) cell += " (same GPU)";
        if (!L.problem.empty()) cell += " **BROKEN: " + L.problem + "**";
        std::printf(" %s |", cell.c_str());
      }
      std::printf("\n");
    }
    std::printf("\n%s\n", broken ? "PROBLEM: at least one peer path is broken or far too slow (see the matrix)"
                                 : "all peer paths look healthy");
  }
  if (broken) throw CLI::RuntimeError(4);
}

#else

void run_hwcheck(const HwArgs&) {
  exit_with(2, "this voltinfer was built without the CUDA backend, so there is no GPU to check "
               "(configure with -DVI_CUDA=ON)");
}

#endif

}  // namespace

void register_hwcheck(CLI::App& app) {
  auto a = std::make_shared<HwArgs>();
  CLI::App* cmd = app.add_subcommand(
      "hwcheck", "Describe the GPUs and measure copy bandwidth, fp16 GEMM rate and peer-to-peer paths");
  cmd->add_flag("--json", a->json_out, "Print JSON instead of tables");
  cmd->add_option("--ranks", a->ranks, "Ranks in the peer matrix (default: one per GPU; more share GPUs)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--copy-mib", a->copy_mib, "Size of the bandwidth copy in MiB")->check(CLI::Range(16, 16384));
  cmd->add_option("--reps", a->reps, "Repetitions per measurement (the median is reported)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--gemm", a->gemm, "m = n = k of the cuBLAS GEMM probe")->check(CLI::Range(256, 32768));
  cmd->add_flag("--quick", a->quick, "Smaller probes and fewer repetitions (a smoke test)");
  cmd->footer("Exit codes: 0 healthy, 2 built without CUDA, 3 no GPU, 4 a broken peer path.");
  cmd->callback([a] { run_hwcheck(*a); });
}

}  // namespace vi::cli
