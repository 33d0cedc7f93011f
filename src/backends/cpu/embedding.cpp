// CPU embedding lookup: out[t, :] = table[ids[t], :] dequantized to f32 (any weight dtype).
#include "ops/embedding.h"

#include "backends/cpu/cpu_util.h"
#include "core/quant.h"

namespace vi::cpu {
namespace {

void embedding_cpu(ops::Context& ctx, const Tensor& table, const Tensor& ids, Tensor& out) {
  require_f32("embedding", out, "out");
  VI_CHECK(quant_supported(table.dtype()), "op 'embedding' on cpu: no kernel for table dtype {}",
           dtype_name(table.dtype()));
  const int32_t* id = ids.ptr<int32_t>();
  const int64_t d = table.cols();
  pool(ctx).parallel_for(ids.dim(0), grain_for(d), [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) dequantize_row(table.dtype(), table.row(id[t]), out.row<float>(t), d);
  });
}

const bool registered = [] {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K,
                  DType::Q5_K, DType::Q6_K})
    ops::embedding_table().add(Device::CPU, t, embedding_cpu);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
