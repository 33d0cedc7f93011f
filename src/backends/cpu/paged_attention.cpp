// CPU attention through a block table: the loop of cpu/attention.cpp with each key row
// looked up in the pool, so results are bit-identical to attention over contiguous K/V.
// K and V may each be f32, f16 or i8 (with scales; i8 K rotated, see ops/kv_quant.h).
#include "ops/paged_attention.h"

#include <cstring>

#include "backends/cpu/attention_rows.h"

namespace vi::cpu {
namespace {

// Calls f(KV{}) with the host element type of an f32, f16 or i8 pool.
template <class F>
void dispatch_kv(DType t, const char* which, F&& f) {
  switch (t) {
    case DType::F32: f(float{}); break;
    case DType::F16: f(uint16_t{}); break;
    case DType::I8: f(int8_t{}); break;
    default: VI_FAIL("op 'paged_attention' on cpu: {} dtype {} is not supported (f32, f16, i8)", which, dtype_name(t));
  }
}

void paged_attention_cpu(ops::Context& ctx, const Tensor& q, const ops::KvRows& k, const ops::KvRows& v,
                         const Tensor& block_table, int64_t bs, const Tensor& q_pos, int64_t /*kv_bound*/,
                         float scale, Tensor& out, const Tensor* out_gate) {
  require_f32("paged_attention", q, "q");
  const int64_t q_pos0 = q.dim(0) > 0 ? q_pos.ptr<int32_t>()[0] : 0;
  require_f32("paged_attention", out, "out");
  const int32_t* tbl = block_table.ptr<int32_t>();
  const float* ks = k.data.dtype() == DType::I8 ? k.scale.ptr<float>() : nullptr;
  const float* vs = v.data.dtype() == DType::I8 ? v.scale.ptr<float>() : nullptr;
  // Key s lives at offset s % bs of block tbl[s / bs].
  auto row_of = [tbl, bs](int64_t s) { return static_cast<int64_t>(tbl[s / bs]) * bs + s % bs; };
  dispatch_kv(k.data.dtype(), "K", [&](auto kt) {
    dispatch_kv(v.data.dtype(), "V", [&](auto vt) {
      attention_rows<decltype(kt), decltype(vt)>(ctx, q, k.data, v.data, ks, vs, q_pos0, scale, out, row_of);
    });
  });
  if (out_gate != nullptr) {  // sigmoid_mul's arithmetic, element by element
    require_f32("paged_attention", *out_gate, "out_gate");
    float* o = out.ptr<float>();
    const float* g = out_gate->ptr<float>();
    for (int64_t i = 0; i < out.numel(); ++i) o[i] = sigmoid_mul1(o[i], g[i]);
  }
}

// Row x[t] to pool row rows[t]: a byte copy per row.
void kv_scatter_cpu(ops::Context&, const Tensor& x, Tensor& pool, const Tensor& rows) {
  const int32_t* r = rows.ptr<int32_t>();
  const size_t rb = x.row_bytes();
  for (int64_t t = 0; t < x.dim(0); ++t)
    std::memcpy(pool.ptr<uint8_t>() + static_cast<size_t>(r[t]) * pool.row_bytes(), x.ptr<uint8_t>() + t * rb, rb);
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16, DType::I8}) ops::paged_attention_table().add(Device::CPU, t, paged_attention_cpu);
  for (DType t : {DType::F32, DType::F16}) ops::kv_scatter_table().add(Device::CPU, t, kv_scatter_cpu);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
