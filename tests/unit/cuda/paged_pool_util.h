// Paged K/V pools for the CUDA attention tests (decode and prefill): random rows in the
// reference's form on the host plus their device copy, rows past the valid length poisoned so
// a kernel that reads them fails.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cuda/attention_decode.cuh"
#include "cuda_test_util.h"
#include "ops/kv_quant.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"

namespace vi::cudatest {

// Keys a recorded step's bound adds past a length of S: the bound is S rounded up to a power
// of two, at least 256 (BatchPlan::stage).
inline int64_t pow2_extra_keys(int64_t S) {
  int64_t b = 256;
  while (b < S) b *= 2;
  return b - S;
}

struct Shape {
  int64_t Hq, Hkv, D, bs;
};

// One K or V pool on the host in the reference's form, plus its device copy.
struct Pool {
  ops::KvRows host, dev;
};

// The rows of positions 0 .. S - 1 (through `table`) hold random values; every other row holds
// NaN (f16) or a NaN scale (i8), so a kernel that reads one fails. i8 pools are quantized by the
// CPU op (K rotated), so both sides read the same rows. Only the S rows are drawn and quantized.
inline Pool make_paged_pool(ops::Context& cpu, ops::Context& g, DType dt, bool is_k, const Shape& s, int64_t n_rows,
                            const Tensor& table, int64_t S) {
  const int64_t width = s.Hkv * s.D;
  const Tensor x = rand_f32({std::max<int64_t>(S, 1), width}, DType::F16, -2, 2);  // row t: position t
  auto row_of = [&](int64_t pos) { return int64_t(table.ptr<int32_t>()[pos / s.bs]) * s.bs + pos % s.bs; };
  Pool p;
  if (dt == DType::I8) {
    Tensor q8 = Tensor::empty(DType::I8, {n_rows, s.Hkv, s.D}), sc = Tensor::empty(DType::F32, {n_rows, s.Hkv});
    std::fill_n(q8.ptr<int8_t>(), q8.numel(), int8_t{0});
    std::fill_n(sc.ptr<float>(), sc.numel(), std::numeric_limits<float>::quiet_NaN());
    if (S > 0) ops::paged_kv_write_i8(cpu, x, q8, sc, table, s.bs, 0, /*rotate=*/is_k);
    p.host = {q8, sc};
    p.dev = {ops::upload(g, q8), ops::upload(g, sc)};
  } else {
    Tensor h = Tensor::empty(DType::F16, {n_rows, s.Hkv, s.D});
    std::fill_n(h.ptr<uint16_t>(), h.numel(), uint16_t{0x7e00});  // f16 NaN
    for (int64_t pos = 0; pos < S; ++pos) {
      const float* src = x.ptr<float>() + pos * width;
      uint16_t* dst = h.ptr<uint16_t>() + row_of(pos) * width;
      for (int64_t i = 0; i < width; ++i) dst[i] = fp32_to_fp16(src[i]);
    }
    p.host = {h, {}};
    p.dev = {ops::upload(g, h), {}};
  }
  return p;
}

// The decode kernels' arguments for T queries of dtype q_dt at device pointers q, out over pools
// k, v (their device copies) through table, the position at pos, keys bounded by `bound`.
inline cuda::DecodeArgs decode_args(const Shape& s, int64_t T, DType q_dt, const void* q, const Pool& k,
                                    const Pool& v, const Tensor& table, const Tensor& pos, int64_t bound,
                                    float scale, void* out) {
  cuda::DecodeArgs a;
  a.q = q;
  a.q_dtype = q_dt;
  a.k = k.dev.data.data();
  a.v = v.dev.data.data();
  a.k_dtype = k.dev.data.dtype();
  a.v_dtype = v.dev.data.dtype();
  a.k_scale = a.k_dtype == DType::I8 ? k.dev.scale.ptr<float>() : nullptr;
  a.v_scale = a.v_dtype == DType::I8 ? v.dev.scale.ptr<float>() : nullptr;
  a.table = table.ptr<int32_t>();
  a.block_size = s.bs;
  a.q_pos = pos.ptr<int32_t>();
  a.kv_bound = bound;
  a.T = T;
  a.Hq = s.Hq;
  a.Hkv = s.Hkv;
  a.D = s.D;
  a.scale = scale;
  a.out = out;
  return a;
}

}  // namespace vi::cudatest
