// CPU attention through a block table: the loop of cpu/attention.cpp with each key row
// looked up in the pool, so results are bit-identical to attention over contiguous K/V.
#include "ops/paged_attention.h"

#include "backends/cpu/attention_rows.h"

namespace vi::cpu {
namespace {

template <class KV>
void paged_attention_cpu(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                         const Tensor& block_table, int64_t bs, int64_t q_pos0, float scale, Tensor& out) {
  require_f32("paged_attention", q, "q");
  require_f32("paged_attention", out, "out");
  const int32_t* tbl = block_table.ptr<int32_t>();
  // Key s lives at offset s % bs of block tbl[s / bs].
  attention_rows<KV>(ctx, q, k, v, q_pos0, scale, out,
                     [tbl, bs](int64_t s) { return static_cast<int64_t>(tbl[s / bs]) * bs + s % bs; });
}

const bool registered = [] {
  ops::paged_attention_table().add(Device::CPU, DType::F32, paged_attention_cpu<float>);
  ops::paged_attention_table().add(Device::CPU, DType::F16, paged_attention_cpu<uint16_t>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
