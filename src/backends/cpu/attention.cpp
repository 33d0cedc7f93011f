// CPU causal attention with grouped KV heads, fp32 math and an exact (two-pass) softmax.
// K/V may be f32 or f16 (the f16 rows are widened one key at a time). One task per
// (query token, query head); each task's arithmetic is fixed, so threading changes nothing.
#include "ops/attention.h"

#include "backends/cpu/attention_rows.h"

namespace vi::cpu {
namespace {

template <class KV>
void attention_cpu(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v, int64_t q_pos0,
                   float scale, Tensor& out) {
  require_f32("attention", q, "q");
  require_f32("attention", out, "out");
  // Keys sit at their own positions: row s holds key s.
  attention_rows<KV, KV>(ctx, q, k, v, nullptr, nullptr, q_pos0, scale, out, [](int64_t s) { return s; });
}

const bool registered = [] {
  ops::attention_table().add(Device::CPU, DType::F32, attention_cpu<float>);
  ops::attention_table().add(Device::CPU, DType::F16, attention_cpu<uint16_t>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
