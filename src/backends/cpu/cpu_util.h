// Helpers shared by the CPU reference kernels: the worker pool of a call, the f32
// activation check, the chunk size of a parallel loop, and v · sigmoid(g).
#pragma once

#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "ops/registry.h"

namespace vi::cpu {

inline ThreadPool& pool(const ops::Context& ctx) { return ctx.pool ? *ctx.pool : ThreadPool::global(); }

// CPU activations are f32 only: the CPU backend is the fp32 exactness reference.
inline void require_f32(const char* op, const Tensor& t, const char* what) {
  VI_CHECK(t.dtype() == DType::F32, "op '{}' on cpu: {} {} is {}, but cpu activations must be f32", op,
           what, t.shape_str(), dtype_name(t.dtype()));
}

// Rows per parallel chunk so that one chunk holds roughly `work_per_chunk` elements of
// work: small ops stay on the calling thread, where waking workers would cost more.
inline int64_t grain_for(int64_t row_work, int64_t work_per_chunk = 16384) {
  return row_work > 0 ? (work_per_chunk + row_work - 1) / row_work : 1;
}

// v · sigmoid(g) with sigmoid(g) = 1 / (1 + exp(-g)), as PyTorch computes it: sigmoid_mul and
// paged attention's output gate (one formula, so the gated op equals the op then sigmoid_mul).
inline float sigmoid_mul1(float v, float g) { return v * (1.0f / (1.0f + std::exp(-g))); }

}  // namespace vi::cpu
