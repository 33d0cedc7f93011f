#include "tools/bench_util.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "ops/copy.h"
#include "ops/matmul.h"
#include "ops/memory.h"
#ifdef VI_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/hwinfo.h"
#include "backends/cuda/sm_partition.h"
#endif

namespace vi::cli {

namespace {

// Host copy bandwidth (bytes read + written), median of 5 copies of 256 MiB.
double host_copy_gbs() {
  const size_t n = size_t(256) << 20;
  std::vector<uint8_t> a(n, 1), b(n, 2);
  std::vector<double> v;
  for (int i = 0; i < 6; ++i) {
    Timer t;
    std::memcpy(b.data(), a.data(), n);
    const double s = t.s();
    if (i > 0) v.push_back(2.0 * n / s / 1e9);
    a[i] = b[n - 1 - i];  // keep the copies observable
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A host tensor of `rows` x `cols` random values in [lo, hi) stored as `dtype` (i8: whole
// numbers in [-127, 127], the scale lives elsewhere).
Tensor random_host(DType dtype, int64_t rows, int64_t cols, float lo, float hi, uint64_t seed) {
  Tensor t = Tensor::empty(dtype, {rows, cols});
  std::mt19937_64 rng(seed);
  if (dtype == DType::I8) {
    std::uniform_int_distribution<int> b(-127, 127);
    for (int64_t i = 0; i < rows * cols; ++i) t.ptr<int8_t>()[i] = static_cast<int8_t>(b(rng));
    return t;
  }
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& x : row) x = u(rng);
    switch (dtype) {
      case DType::F32: std::memcpy(t.row(r), row.data(), row.size() * sizeof(float)); break;
      case DType::F16:
        for (int64_t c = 0; c < cols; ++c) t.row<uint16_t>(r)[c] = fp32_to_fp16(row[c]);
        break;
      case DType::BF16:
        for (int64_t c = 0; c < cols; ++c) t.row<uint16_t>(r)[c] = fp32_to_bf16(row[c]);
        break;
      default: quantize_row(dtype, row.data(), t.row(r), cols); break;
    }
  }
  return t;
}

}  // namespace

double matmul_op_tflops(ops::KernelProfile profile, int64_t M, int64_t N, int64_t K, int reps) {
  ops::Context ctx;
  ctx.device = Device::CUDA;
  ctx.act = DType::F16;
  ctx.profile = profile;
  Tensor x = ops::upload(ctx, random_host(DType::F16, M, K, -1.0f, 1.0f, 1));
  Tensor w = ops::upload(ctx, random_host(DType::F16, N, K, -1.0f, 1.0f, 2));
  Tensor y = ops::empty(ctx, DType::F16, {M, N});
  std::vector<double> tf;
  for (int i = 0; i < 2 + reps; ++i) {
    ops::synchronize(ctx);
    Timer t;
    ops::matmul(ctx, x, w, y);
    ops::synchronize(ctx);
    const double s = t.s();
    if (i >= 2) tf.push_back(2.0 * M * N * K / s / 1e12);
  }
  std::sort(tf.begin(), tf.end());
  return tf[tf.size() / 2];
}

Ceilings measure_ceilings(const ops::Context& ctx, double given_gbs, double given_tflops) {
  Ceilings c;
  if (given_gbs > 0) c.copy_gbs = given_gbs, c.copy_how = "given with --bandwidth-gbs";
  if (given_tflops > 0) c.tensor_tflops = given_tflops, c.tensor_how = "given with --peak-tflops";
  if (ctx.device == Device::CPU) {
    if (c.copy_gbs == 0) c.copy_gbs = host_copy_gbs(), c.copy_how = "measured: host memcpy 256 MiB, median of 5";
    if (c.tensor_tflops == 0) c.tensor_how = "unknown on the CPU (pass --peak-tflops for MFU)";
    return c;
  }
#ifdef VI_WITH_CUDA
  if (c.copy_gbs == 0) {
    cuda::Measured m = cuda::measure_copy_gbs(0, size_t(1) << 30, 20);
    c.copy_gbs = m.median;
    c.copy_how = fmt::format("measured: cudaMemcpy D2D 1 GiB, read+write, median of {} ({:.0f}-{:.0f})", m.reps,
                             m.min, m.max);
  }
  if (c.tensor_tflops == 0 && cuda::has_cublas()) {
    cuda::Measured m = cuda::measure_cublas_fp16_tflops(0, 8192, 8192, 8192, 10);
    c.tensor_tflops = m.median;
    c.tensor_how = fmt::format("measured: cuBLAS fp16 GEMM 8192^3, fp32 accumulate, median of {}", m.reps);
  }
  if (c.tensor_tflops == 0) {  // no cuBLAS in this build: the best our own GEMM does
    c.tensor_tflops = matmul_op_tflops(cuda::resolve_profile(ctx), 4096, 8192, 8192, 5);
    c.tensor_how = "measured: our matmul op, fp16 weights 8192x8192, 4096 tokens, median of 5 (no cuBLAS)";
  }
#else
  VI_FAIL("bench on {}: this voltinfer has no CUDA backend to measure the device with", device_name(ctx.device));
#endif
  return c;
}

int restrict_graphs_to_sms(int n) {
  if (n == 0) return 0;
  VI_CHECK(n > 0, "--sms {}: give a number of SMs", n);
#ifdef VI_WITH_CUDA
  return cuda::restrict_graphs_to_sms(n);  // refuses where there is no device or no partitions
#else
  VI_FAIL("--sms runs graphs on some SMs of a CUDA device; this voltinfer has no CUDA backend");
#endif
}

std::string device_label(const ops::Context& ctx) {
  if (ctx.device == Device::CPU) return fmt::format("CPU ({} threads)", ThreadPool::global().size());
#ifdef VI_WITH_CUDA
  cuda::GpuFacts f = cuda::gpu_facts(0);
  return fmt::format("{} (sm_{}, {} SMs)", f.name, f.cc, f.sm_count);
#else
  return device_name(ctx.device);
#endif
}

std::string profile_label(const ops::Context& ctx) {
#ifdef VI_WITH_CUDA
  if (ctx.device == Device::CUDA) return cuda::profile_name(cuda::resolve_profile(ctx));
#endif
  return "-";
}

std::string weight_format_summary(const WeightSource& src) {
  std::map<std::string, double> by_dtype;
  double total = 0;
  for (const std::string& name : src.names()) {
    const Tensor& t = src.get(name);
    by_dtype[dtype_name(t.dtype())] += static_cast<double>(t.nbytes());
    total += static_cast<double>(t.nbytes());
  }
  std::vector<std::pair<double, std::string>> v;
  for (auto& [k, b] : by_dtype) v.push_back({b, k});
  std::sort(v.rbegin(), v.rend());
  std::string out;
  for (auto& [b, k] : v) {
    if (b / total < 0.005) continue;
    out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : " + ", k, 100 * b / total);
  }
  return out;
}

std::string kv_dtype_name(const SequenceState& seq) {
  const KvPool& pool = seq.kv_pool();
  if (pool.tensors.size() < 2) return "none";
  const DType k = pool.tensors[0].dtype(), v = pool.tensors[1].dtype();
  return k == v ? dtype_name(k) : fmt::format("K {} V {}", dtype_name(k), dtype_name(v));
}

void fill_context_synthetic(ops::Context& ctx, SequenceState& seq, int64_t n, uint64_t seed) {
  VI_CHECK(seq.n_past() == 0, "synthetic fill needs a fresh sequence");
  VI_CHECK(n >= 0 && n <= seq.capacity(), "cannot fill {} tokens into a sequence of capacity {}", n, seq.capacity());
  KvPool& pool = seq.kv_pool();
  const int64_t bs = pool.block_size;
  const std::vector<int32_t>& table = seq.block_table();
  const int64_t n_blocks = (n + bs - 1) / bs;
  VI_CHECK(static_cast<int64_t>(table.size()) >= n_blocks, "block table covers {} tokens, {} needed",
           static_cast<int64_t>(table.size()) * bs, n);
  // Runs of consecutive pool blocks become one copy each (a private pool is one run).
  std::vector<std::pair<int64_t, int64_t>> runs;  // (first pool row, rows)
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t row = static_cast<int64_t>(table[b]) * bs, rows = std::min(bs, n - b * bs);
    if (!runs.empty() && runs.back().first + runs.back().second == row)
      runs.back().second += rows;
    else
      runs.push_back({row, rows});
  }
  constexpr int64_t kChunk = 4096;  // rows per copy, from one random source per row shape
  std::map<std::tuple<DType, int64_t, bool>, Tensor> sources;
  auto fill = [&](Tensor& t, bool is_scale) {
    Tensor& src = sources[{t.dtype(), t.cols(), is_scale}];
    if (!src.data()) {  // scales positive and small (|x| = scale * |int8| stays O(1)); values O(1)
      const int64_t rows = std::min(kChunk, std::max<int64_t>(n, 1));
      src = ops::upload(ctx, is_scale ? random_host(t.dtype(), rows, t.cols(), 0.004f, 0.012f, seed)
                                      : random_host(t.dtype(), rows, t.cols(), -1.0f, 1.0f, seed + 1));
    }
    for (auto [row, rows] : runs)
      for (int64_t r = 0; r < rows; r += kChunk) {
        const int64_t m = std::min(kChunk, rows - r);
        Tensor dst = t.slice_rows(row + r, row + r + m);
        ops::copy(ctx, src.slice_rows(0, m), dst);
      }
  };
  for (Tensor& t : pool.tensors) fill(t, false);
  for (Tensor& t : pool.scales)
    if (t.data()) fill(t, true);
  // Recurrent states: small values, as a long context leaves them.
  int i = 2;
  for (Tensor& t : seq.recurrent_state()) {
    Tensor dst = t.reshape({t.rows(), t.cols()});
    Tensor src = ops::upload(ctx, random_host(t.dtype(), t.rows(), t.cols(), -0.05f, 0.05f, seed + i++));
    ops::copy(ctx, src, dst);
  }
  ops::synchronize(ctx);
  seq.resume_at(n);
}

}  // namespace vi::cli
