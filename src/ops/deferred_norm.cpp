// The deferred-norm ops' entry points: checks, then the fused (device, weight dtype) kernel where
// one takes the call, else the pieces (ops/deferred_norm.h).
#include "ops/deferred_norm.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "ops/matmul.h"
#include "ops/memory.h"
#include "ops/op_checks.h"
#include "ops/profiler.h"

namespace vi::ops {
namespace {

void check_deferred(const char* op, Context& ctx, const DeferredNorm& in) {
  check_same_device(op, ctx, {&in.u, &in.ss});
  VI_CHECK(in.u.ndim() == 2 && in.u.cols() <= kDeferredNormMaxWidth && !dtype_is_quantized(in.u.dtype()),
           "op '{}': u {} must be [T, d] activations with d at most {}", op, describe(in.u), kDeferredNormMaxWidth);
  VI_CHECK(in.ss.dtype() == DType::I64 && in.ss.ndim() == 2 && in.ss.dim(0) == in.u.rows() &&
               in.ss.dim(1) == 2 * kDeferredNormSlots,
           "op '{}': ss {} must be [{}, {}] i64 for u {}", op, describe(in.ss), in.u.rows(), 2 * kDeferredNormSlots,
           describe(in.u));
}

size_t weight_bytes(const Tensor& w) {
  return dtype_row_bytes(dtype_file_form(w.dtype()), w.dim(1)) * static_cast<size_t>(w.dim(0));
}

// -1: as the environment says (on unless VI_DEFER_NORM=0); 0 / 1: set_deferred_norm_allowed.
std::atomic<int>& allowed_override() {
  static std::atomic<int> v{-1};
  return v;
}

bool defer_allowed() {
  static const bool env_on = [] {
    const char* v = std::getenv("VI_DEFER_NORM");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  const int o = allowed_override().load(std::memory_order_relaxed);
  return o < 0 ? env_on : o == 1;
}

// The fused consumer where the device has one for this call, else false.
bool fused_consumer(Context& ctx, const DeferredNorm& in, const Tensor& w, DeferredConsumer kind,
                    const std::vector<Tensor*>& outs) {
  if (!matmul_deferred_table().supports(ctx.device, w.dtype())) return false;
  const MatmulDeferredFn fn = matmul_deferred_table().get(ctx.device, w.dtype());
  if (!fn(ctx, in, w, kind, outs, false)) return false;
  size_t out_bytes = 0;
  for (const Tensor* t : outs) out_bytes += t->nbytes();
  VI_OP_SCOPE_F(ctx, "matmul_deferred", w.dtype(), in.u.nbytes() + in.ss.nbytes() + weight_bytes(w) + out_bytes,
                2.0 * w.dim(0) * w.dim(1) * in.u.rows(), "{}x{} T={} kind {}", w.dim(0), w.dim(1), in.u.rows(),
                static_cast<int>(kind));
  fn(ctx, in, w, kind, outs, true);
  return true;
}

// norm(x) as a tensor of its own, for a consumer without a fused kernel.
Tensor finished(Context& ctx, const DeferredNorm& in) {
  Tensor n = empty(ctx, in.u.dtype(), {in.u.rows(), in.u.cols()});
  finish_deferred_norm(ctx, in, n);
  return n;
}

}  // namespace

DeferredNorm deferred_norm_scratch(Context& ctx, int64_t T, int64_t d, float eps, int64_t sites) {
  VI_CHECK(d > 0 && d <= kDeferredNormMaxWidth && T > 0 && sites > 0,
           "deferred_norm_scratch: {} rows of width {} for {} sites (width at most {})", T, d, sites,
           kDeferredNormMaxWidth);
  DeferredNorm n;
  n.u = empty(ctx, ctx.act, {T, d});
  n.ss = empty(ctx, DType::I64, {sites * T, 2 * kDeferredNormSlots});
  zero(ctx, n.ss);
  n.eps = eps;
  if (d % 256 == 0) n.sums16 = empty(ctx, DType::F16, {T, d / 8});  // written whole with u: one set, as u
  return n;
}

DeferredNorm deferred_norm_site(const DeferredNorm& scratch, int64_t i) {
  const int64_t T = scratch.u.rows();
  VI_CHECK(i >= 0 && (i + 1) * T <= scratch.ss.rows(), "deferred_norm_site: site {} of a scratch with {} sites", i,
           scratch.ss.rows() / T);
  DeferredNorm n = scratch;
  n.ss = scratch.ss.slice_rows(i * T, (i + 1) * T);
  n.sums_written = false;
  return n;
}

float deferred_norm_total(const Tensor& ss, int64_t t) {
  VI_CHECK(ss.device() == Device::CPU && ss.dtype() == DType::I64 && ss.cols() == 2 * kDeferredNormSlots,
           "deferred_norm_total: ss {} must be a host [T, {}] i64 tensor", describe(ss), 2 * kDeferredNormSlots);
  const uint64_t* w = reinterpret_cast<const uint64_t*>(ss.row<int64_t>(t));
  uint64_t fine = 0, coarse = 0;
  for (int64_t k = 0; k < kDeferredNormSlots; ++k) {
    fine += w[2 * k];
    coarse += w[2 * k + 1];
  }
  return static_cast<float>(fine) * (1.0f / kDeferredNormFineScale) +
         static_cast<float>(coarse) * (1.0f / kDeferredNormCoarseScale);
}

OpTable<MatmulAddDeferredNormFn>& matmul_add_deferred_norm_table() {
  static OpTable<MatmulAddDeferredNormFn> table("matmul_add_deferred_norm");
  return table;
}

void matmul_add_deferred_norm(Context& ctx, const Tensor& a, const Tensor& w, Tensor& x, const Tensor& norm_w,
                              float w_offset, DeferredNorm& out) {
  check_same_device("matmul_add_deferred_norm", ctx, {&a, &w, &x, &norm_w});
  check_deferred("matmul_add_deferred_norm", ctx, out);
  VI_CHECK(w.ndim() == 2 && a.ndim() >= 1 && a.cols() == w.dim(1) && a.rows() == x.rows() && x.ndim() == 2 &&
               x.cols() == w.dim(0) && x.dtype() == out.u.dtype() && a.dtype() == x.dtype() &&
               out.u.rows() == x.rows() && out.u.cols() == x.cols(),
           "op 'matmul_add_deferred_norm': a {}, weight {}, x {} and u {} disagree", describe(a), describe(w),
           describe(x), describe(out.u));
  VI_CHECK(norm_w.dtype() == DType::F32 && norm_w.ndim() == 1 && norm_w.dim(0) == x.cols(),
           "op 'matmul_add_deferred_norm': norm weight {} must be [{}] f32", describe(norm_w), x.cols());
  VI_CHECK(out.sums16.data() == nullptr ||
               (out.sums16.dtype() == DType::F16 && out.sums16.ndim() == 2 && out.sums16.rows() == x.rows() &&
                x.cols() % 256 == 0 && out.sums16.cols() == x.cols() / 8),
           "op 'matmul_add_deferred_norm': sums16 {} must be [{}, {}] f16 for x {}", describe(out.sums16), x.rows(),
           x.cols() / 8, describe(x));
  out.sums_written = false;  // until a kernel below writes them
  if (matmul_add_deferred_norm_table().supports(ctx.device, w.dtype())) {
    const MatmulAddDeferredNormFn fn = matmul_add_deferred_norm_table().get(ctx.device, w.dtype());
    if (fn(ctx, a, w, x, norm_w, w_offset, nullptr)) {
      // Reads a, w, x, norm_w; writes x, u, ss (and sums16 where the kernel can).
      VI_OP_SCOPE_F(ctx, "matmul_add_deferred_norm", w.dtype(),
                    a.nbytes() + weight_bytes(w) + 2 * x.nbytes() + norm_w.nbytes() + out.u.nbytes() + out.ss.nbytes() +
                        (out.sums16.data() != nullptr ? out.sums16.nbytes() : 0),
                    2.0 * w.dim(0) * w.dim(1) * a.rows(), "{}x{} T={}", w.dim(0), w.dim(1), a.rows());
      fn(ctx, a, w, x, norm_w, w_offset, &out);
      return;
    }
  }
  Tensor o = empty(ctx, x.dtype(), {x.rows(), x.cols()});
  matmul(ctx, a, w, o);
  add_deferred_norm(ctx, x, o, norm_w, w_offset, out);
}

OpTable<MatmulDeferredFn>& matmul_deferred_table() {
  static OpTable<MatmulDeferredFn> table("matmul_deferred");
  return table;
}

namespace {

// The shapes every consumer needs before a fused kernel writes anything: w [N, d] and each output
// [T, width] of u's dtype (the fallbacks' own ops check the rest).
void check_consumer(const char* op, Context& ctx, const DeferredNorm& in, const Tensor& w,
                    const std::vector<Tensor*>& outs) {
  check_deferred(op, ctx, in);
  check_same_device(op, ctx, {&w});
  VI_CHECK(w.ndim() == 2 && w.dim(1) == in.u.cols(), "op '{}': weight {} must be [N, {}] for u {}", op, describe(w),
           in.u.cols(), describe(in.u));
  for (const Tensor* t : outs) {
    check_same_device(op, ctx, {t});
    VI_CHECK(t->ndim() == 2 && t->dim(0) == in.u.rows() && t->dtype() == in.u.dtype(),
             "op '{}': output {} must be [{}, w] of u's dtype {}", op, describe(*t), in.u.rows(),
             dtype_name(in.u.dtype()));
  }
}

}  // namespace

void matmul_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& y) {
  check_consumer("matmul_deferred", ctx, in, w, {&y});
  VI_CHECK(y.dim(1) == w.dim(0), "op 'matmul_deferred': y {} must be [{}, {}]", describe(y), in.u.rows(), w.dim(0));
  if (fused_consumer(ctx, in, w, DeferredConsumer::kMatmul, {&y})) return;
  matmul(ctx, finished(ctx, in), w, y);
}

void matmul_split_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& all,
                           const std::vector<Tensor*>& parts) {
  check_consumer("matmul_split_deferred", ctx, in, w, parts);
  int64_t width = 0;
  for (const Tensor* p : parts) width += p->dim(1);
  VI_CHECK(!parts.empty() && width == w.dim(0), "op 'matmul_split_deferred': parts {} rows wide in all, weight {}",
           width, describe(w));
  if (fused_consumer(ctx, in, w, DeferredConsumer::kSplit, parts)) return;
  matmul_split(ctx, finished(ctx, in), w, all, parts);
}

void matmul_swiglu_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& gu, Tensor& h) {
  check_consumer("matmul_swiglu_deferred", ctx, in, w, {&h});
  VI_CHECK(w.dim(0) % 2 == 0 && h.dim(1) * 2 == w.dim(0), "op 'matmul_swiglu_deferred': h {} must be [{}, {}]",
           describe(h), in.u.rows(), w.dim(0) / 2);
  if (fused_consumer(ctx, in, w, DeferredConsumer::kSwiglu, {&h})) return;
  matmul_swiglu(ctx, finished(ctx, in), w, gu, h);
}

bool deferred_norm_fused(Context& ctx, const Tensor& producer_w, const Tensor& consumer_w, DeferredConsumer kind,
                         int64_t T) {
  if (!defer_allowed() || !matmul_add_deferred_norm_table().supports(ctx.device, producer_w.dtype()) ||
      !matmul_deferred_table().supports(ctx.device, consumer_w.dtype()))
    return false;
  // The kernels' own checks, on tensors of the call's shapes (no memory: data stays null).
  const int64_t d = producer_w.dim(0);
  auto shaped = [&](DType t, const std::vector<int64_t>& shape) {
    return Tensor::view(t, shape, nullptr, nullptr, ctx.device);
  };
  Tensor a = shaped(ctx.act, {T, producer_w.dim(1)}), x = shaped(ctx.act, {T, d}), nw = shaped(DType::F32, {d});
  DeferredNorm probe;
  probe.u = shaped(ctx.act, {T, d});
  probe.ss = shaped(DType::I64, {T, 2 * kDeferredNormSlots});
  return d <= kDeferredNormMaxWidth && consumer_w.dim(1) == d &&
         matmul_add_deferred_norm_table().get(ctx.device, producer_w.dtype())(ctx, a, producer_w, x, nw, 0.0f,
                                                                               nullptr) &&
         matmul_deferred_table().get(ctx.device, consumer_w.dtype())(ctx, probe, consumer_w, kind, {}, false);
}

void set_deferred_norm_allowed(int allowed) { allowed_override().store(allowed < 0 ? -1 : allowed != 0); }

OpTable<AddDeferredNormFn>& add_deferred_norm_table() {
  static OpTable<AddDeferredNormFn> table("add_deferred_norm");
  return table;
}

void add_deferred_norm(Context& ctx, Tensor& x, const Tensor& o, const Tensor& norm_w, float w_offset,
                       DeferredNorm& out) {
  check_same_device("add_deferred_norm", ctx, {&x, &o, &norm_w});
  check_deferred("add_deferred_norm", ctx, out);
  VI_CHECK(x.ndim() == 2 && same_shape(x, o) && x.dtype() == o.dtype() && same_shape(x, out.u) &&
               x.dtype() == out.u.dtype(),
           "op 'add_deferred_norm': x {}, o {} and u {} must match", describe(x), describe(o), describe(out.u));
  VI_CHECK(norm_w.dtype() == DType::F32 && norm_w.ndim() == 1 && norm_w.dim(0) == x.cols(),
           "op 'add_deferred_norm': norm weight {} must be [{}] f32", describe(norm_w), x.cols());
  VI_OP_SCOPE(ctx, "add_deferred_norm", x.dtype(), 4 * x.nbytes() + norm_w.nbytes() + out.ss.nbytes(), "{}x{}",
              x.rows(), x.cols());
  add_deferred_norm_table().get(ctx.device, x.dtype())(ctx, x, o, norm_w, w_offset, out);
}

OpTable<FinishDeferredNormFn>& finish_deferred_norm_table() {
  static OpTable<FinishDeferredNormFn> table("finish_deferred_norm");
  return table;
}

void finish_deferred_norm(Context& ctx, const DeferredNorm& in, Tensor& y) {
  check_same_device("finish_deferred_norm", ctx, {&y});
  check_deferred("finish_deferred_norm", ctx, in);
  VI_CHECK(same_shape(y, in.u) && y.dtype() == in.u.dtype(), "op 'finish_deferred_norm': y {} must match u {}",
           describe(y), describe(in.u));
  VI_OP_SCOPE(ctx, "finish_deferred_norm", y.dtype(), 2 * y.nbytes() + in.ss.nbytes(), "{}x{}", y.rows(), y.cols());
  finish_deferred_norm_table().get(ctx.device, y.dtype())(ctx, in, y);
}

}  // namespace vi::ops
