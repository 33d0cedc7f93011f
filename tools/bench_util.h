// Pieces of `voltinfer bench` that are not the benchmark loop: the device's measured
// ceilings (copy bandwidth, tensor-core rate), a cheap synthetic context fill, the
// weight-format summary and the conditions every figure carries (BENCHMARK.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/model.h"
#include "ops/registry.h"

namespace vi::cli {

// `bench --sms N` (CUDA): the CUDA graphs (decode and verify rounds) run on N SMs of each device,
// the kernels' grids sized for them: the rounds of a card with this memory and fewer SMs, i.e. more
// bandwidth an SM to feed (an H100 on 94 of its 132 SMs asks of each what an H200 asks of all of
// its; backends/cuda/sm_partition.h says what the proxy is and is not). Before anything records a
// graph (the model's load). Returns the SMs the graphs run on; 0 for N = 0 (all of them).
int restrict_graphs_to_sms(int n);

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
