// What the paged attention kernels (attention_decode.cuh, attention_prefill.cuh) take: plain
// C++ (no CUDA types), so host code and tests can fill it.
//
// q: [T, Hq, D] (f32/f16, the activation dtype); k, v: [n_rows, Hkv, D] of k_dtype /
// v_dtype; k_scale / v_scale: [n_rows, Hkv] f32 for an i8 tensor (value = scale * int8; i8 K
// rows hold Hadamard-rotated keys, ops/kv_quant.h), else null; table: device i32 block table,
// key position s in pool row table[s / block_size] * block_size + s % block_size; q_pos:
// DEVICE i32, query t sits at position q_pos[0] + t and sees keys 0 .. q_pos[0] + t (read by
// the kernel, so a recorded step replays at any position); kv_bound: a host upper bound of
// q_pos[0] + T that sizes the launch; out: [T, Hq, D] like q. Hq a multiple of Hkv (GQA).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace vi::cuda {

struct PagedKernelArgs {
  const void* q = nullptr;
  DType q_dtype = DType::F16;
  const void* k = nullptr;
  const void* v = nullptr;
  DType k_dtype = DType::F16, v_dtype = DType::F16;
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const int32_t* table = nullptr;
  int64_t block_size = 0;
  const int32_t* q_pos = nullptr;
  int64_t kv_bound = 0;
  int64_t T = 0, Hq = 0, Hkv = 0, D = 0;
  float scale = 1.0f;
  void* out = nullptr;
};

}  // namespace vi::cuda
