// CPU element-wise ops on f32: add, swiglu (also of a stacked gate|up row), sigmoid_mul, and
// row-wise softmax.
// Activation functions use the same formulas as PyTorch: silu(g) = g / (1 + exp(-g)),
// sigmoid(g) = 1 / (1 + exp(-g)), softmax = exp(x - max) / sum.
#include "ops/elementwise.h"

#include <cmath>

#include "backends/cpu/cpu_util.h"

namespace vi::cpu {
namespace {

template <class Fn>
void binary_f32(const char* op, ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out, Fn fn) {
  require_f32(op, a, "first operand");
  const float* ap = a.ptr<float>();
  const float* bp = b.ptr<float>();
  float* op_ = out.ptr<float>();
  pool(ctx).parallel_for(a.numel(), 32768, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) op_[i] = fn(ap[i], bp[i]);
  });
}

void add_f32(ops::Context& ctx, const Tensor& a, const Tensor& b, Tensor& out) {
  binary_f32("add", ctx, a, b, out, [](float x, float y) { return x + y; });
}

inline float swiglu1(float g, float u) { return (g / (1.0f + std::exp(-g))) * u; }

void swiglu_f32(ops::Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  binary_f32("swiglu", ctx, gate, up, out, [](float g, float u) { return swiglu1(g, u); });
}

void swiglu_halves_f32(ops::Context& ctx, const Tensor& gu, Tensor& out) {
  require_f32("swiglu_halves", gu, "gu");
  const int64_t F = out.cols();
  pool(ctx).parallel_for(out.rows(), grain_for(F), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* g = gu.row<float>(r);  // [gate (F) | up (F)]
      float* y = out.row<float>(r);
      for (int64_t j = 0; j < F; ++j) y[j] = swiglu1(g[j], g[F + j]);
    }
  });
}

void sigmoid_mul_f32(ops::Context& ctx, const Tensor& x, const Tensor& gate, Tensor& out) {
  binary_f32("sigmoid_mul", ctx, x, gate, out, [](float v, float g) { return sigmoid_mul1(v, g); });
}

void softmax_f32(ops::Context& ctx, const Tensor& x, Tensor& out) {
  require_f32("softmax", x, "x");
  const int64_t n = x.cols();
  pool(ctx).parallel_for(x.rows(), grain_for(n), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row<float>(r);
      float* yr = out.row<float>(r);
      float mx = -INFINITY;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, xr[i]);
      float sum = 0.0f;
      for (int64_t i = 0; i < n; ++i) {
        yr[i] = std::exp(xr[i] - mx);
        sum += yr[i];
      }
      const float inv = 1.0f / sum;
      for (int64_t i = 0; i < n; ++i) yr[i] *= inv;
    }
  });
}

const bool registered = [] {
  ops::add_table().add(Device::CPU, DType::F32, add_f32);
  ops::swiglu_table().add(Device::CPU, DType::F32, swiglu_f32);
  ops::swiglu_halves_table().add(Device::CPU, DType::F32, swiglu_halves_f32);
  ops::sigmoid_mul_table().add(Device::CPU, DType::F32, sigmoid_mul_f32);
  ops::softmax_table().add(Device::CPU, DType::F32, softmax_f32);
  return true;
}();

}  // namespace
}  // namespace vi::cpu
