// Pieces of `voltinfer bench` that are not the benchmark loop: the device's measured
// ceilings (copy bandwidth, tensor-core rate), a cheap synthetic context fill, the
// weight-format summary and the conditions every figure carries (BENCHMARK.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/model.h"
#include "ops/registry.h"

namespace vi::cuda {
class SmOccupier;
}

namespace vi::cli {

// `bench --occupy-sms N` (CUDA): N SMs held by blocks that only wait while rounds are timed, the
// kernels' grids sized for the SMs left: the rounds of a card with this memory and fewer SMs, i.e.
// more bandwidth an SM to feed (an H100 with 38 of 132 held asks of each SM what an H200 asks;
// backends/cuda/sm_occupier.h says what the proxy is and is not). N = 0: nothing held.
class HeldSms {
 public:
  // Before the process first uses CUDA, where N > 0 (backends/cuda/sm_occupier.h).
  static void prepare_environment(int n);
  HeldSms(Device device, int n);
  ~HeldSms();
  int held() const { return n_; }
  void hold(const ops::Context& ctx);  // the timed work runs on ctx's stream; no-op for N = 0
  void release();  // throws if the SMs were let go before (the timed rounds ran partly unheld)
  // ", 38 of 132 SMs held" for the device label; empty for N = 0.
  std::string label() const;

 private:
  int n_ = 0;
  std::unique_ptr<cuda::SmOccupier> occ_;
};

// What the device allows, measured in this process (or given on the command line).
struct Ceilings {
  double copy_gbs = 0;       // bytes read + written per second, large device-to-device copy
  std::string copy_how;      // how it was obtained, for the output
  double tensor_tflops = 0;  // fp16 tensor-core rate (0: unknown -> no MFU)
  std::string tensor_how;
};
// given_*: > 0 uses that value ("stated"); otherwise measures on ctx's device (GPU: cudaMemcpy
// and cuBLAS fp16; CPU: memcpy, no tensor rate).
Ceilings measure_ceilings(const ops::Context& ctx, double given_gbs, double given_tflops);

// TFLOP/s of our matmul op on fp16 weights [N, K] and M tokens (the prefill GEMM path of
// that kernel profile), median of `reps` after two warm-up calls. CUDA builds only.
double matmul_op_tflops(ops::KernelProfile profile, int64_t M, int64_t N, int64_t K, int reps);

// "NVIDIA H200 (sm_90, 132 SMs)" or "CPU (N threads)".
std::string device_label(const ops::Context& ctx);
// "volta" / "native" for CUDA (after auto resolution), "-" on the CPU.
std::string profile_label(const ops::Context& ctx);

// "q4_k 94% + q6_k 5% + f32 1%": the weight dtypes by share of the file's bytes.
std::string weight_format_summary(const WeightSource& src);

// Puts `n` tokens of synthetic context into a fresh sequence: random K/V rows in the
// first n positions of its block table and small random recurrent states, then resumes
// the sequence at n. Decode speed does not depend on the values, and this costs a few
// device copies instead of an n-token prefill.
void fill_context_synthetic(ops::Context& ctx, SequenceState& seq, int64_t n, uint64_t seed);

// The KV cache dtype of a sequence's pool ("f16", "q8_0", ...).
std::string kv_dtype_name(const SequenceState& seq);

}  // namespace vi::cli
