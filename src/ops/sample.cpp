// sample entry point: argument checks, then the (device, logits dtype) kernel.
#include "ops/sample.h"

#include <algorithm>

#include "ops/op_checks.h"

namespace vi::ops {

OpTable<SampleFn>& sample_table() {
  static OpTable<SampleFn> table("sample");
  return table;
}

OpTable<SampleMaxTopKFn>& sample_max_top_k_table() {
  static OpTable<SampleMaxTopKFn> table("sample_max_top_k");
  return table;
}

int64_t sample_max_top_k(Context& ctx, int64_t V) {
  // Any dtype's entry answers for the device: the limit comes from the kernel's tiling.
  return sample_max_top_k_table().get(ctx.device, DType::F32)(V);
}

bool sample_supported(Context& ctx, int64_t V, const std::vector<SampleParams>& params) {
  const int64_t max_k = sample_max_top_k(ctx, V);
  for (const SampleParams& p : params) {
    if (p.temperature <= 0.0f) continue;  // greedy: any vocabulary
    const int64_t k = p.top_k <= 0 ? V : std::min<int64_t>(p.top_k, V);
    if (k > max_k) return false;
  }
  return true;
}

void sample(Context& ctx, const Tensor& logits, const std::vector<SampleParams>& params,
            const std::vector<LogitPenalty>& penalties, std::vector<SampledToken>& out) {
  check_same_device("sample", ctx, {&logits});
  VI_CHECK(logits.ndim() == 2 && logits.cols() > 0, "op 'sample': logits {} must be [rows, vocab]", describe(logits));
  const int64_t R = logits.rows(), V = logits.cols();
  VI_CHECK(static_cast<int64_t>(params.size()) == R && static_cast<int64_t>(out.size()) == R,
           "op 'sample': {} rows of logits but {} parameter sets and {} outputs", R, params.size(), out.size());
  for (const SampleParams& p : params) {
    VI_CHECK(p.top_p > 0.0f, "op 'sample': top_p must be > 0 (got {})", p.top_p);
    VI_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "op 'sample': min_p must be in [0, 1] (got {})", p.min_p);
    VI_CHECK(p.temperature <= 0.0f || (p.uniform >= 0.0 && p.uniform < 1.0),
             "op 'sample': the draw must be in [0, 1) (got {})", p.uniform);
  }
  for (const LogitPenalty& q : penalties) {
    VI_CHECK(q.row >= 0 && q.row < R && q.token >= 0 && q.token < V && q.repeat > 0.0f,
             "op 'sample': penalty (row {}, token {}, repeat {}) out of range for logits {}", q.row, q.token,
             q.repeat, describe(logits));
  }
  VI_CHECK(sample_supported(ctx, V, params),
           "op 'sample' on {}: top_k above {} (or disabled while sampling) for a vocabulary of {} is not supported "
           "there; sample such rows on the CPU",
           device_name(ctx.device), sample_max_top_k(ctx, V), V);
  if (R == 0) return;
  sample_table().get(ctx.device, logits.dtype())(ctx, logits, params, penalties, out);
}

}  // namespace vi::ops
