// CPU kernel of gdn_gates: the per-token, per-value-head decay g and write strength beta
// of the Gated DeltaNet (MODEL_QWEN35 §5.2 step 4), fp32 math.
#include "backends/cpu/gdn_util.h"
#include "ops/gdn.h"

namespace vi::cpu::gdn {
namespace {

// a, b: [T, Hv] of E; neg_exp_A, dt_bias: [Hv] f32; g, beta: [T, Hv] f32.
template <class E>
void gdn_gates_cpu(ops::Context& ctx, const Tensor& a, const Tensor& b, const Tensor& neg_exp_A,
                   const Tensor& dt_bias, Tensor& g, Tensor& beta) {
  using S = typename E::Storage;
  const int64_t T = a.dim(0), Hv = a.dim(1);
  const S* ap = a.ptr<S>();
  const S* bp = b.ptr<S>();
  const float* A = neg_exp_A.ptr<float>();
  const float* dt = dt_bias.ptr<float>();
  float* gp = g.ptr<float>();
  float* betap = beta.ptr<float>();
  // A few hundred values per token: threads only pay off for long prefills.
  pool_of(ctx).parallel_for(T, 256, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t j = 0; j < Hv; ++j) {
        const int64_t i = t * Hv + j;
        gp[i] = A[j] * softplus(E::load(ap[i]) + dt[j]);
        betap[i] = sigmoid(E::load(bp[i]));
      }
    }
  });
}

const bool registered = [] {
  auto& table = ops::gdn_gates_table();
  table.add(Device::CPU, DType::F32, &gdn_gates_cpu<F32>);
  table.add(Device::CPU, DType::F16, &gdn_gates_cpu<F16>);
  table.add(Device::CPU, DType::BF16, &gdn_gates_cpu<BF16>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu::gdn
