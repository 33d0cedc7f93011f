// CUDA vs CPU: qk_norm_rope_kv_write (a full-attention layer's q/k head norms, partial RoPE
// and K/V cache append in one launch) on fresh random inputs, in both kernel profiles and
// both activation dtypes, with every mix of float (the activation dtype) and i8 pools.
// Shapes: the 27B layer (24 q heads, 4 kv heads, D 256, rot 64), a small odd one (D 37,
// rot 10: partial warps, Hadamard blocks 32 + 4 + 1), a fully rotated one (D 80 = rot), D 128
// fully rotated, D 200 rot 50 (blocks 128 + 64 + 8; pairs half a warp apart): the one-warp
// kernel's three slot counts; D 512 rot 64 and D 300 rot 100 (blocks 256 + 32 + 8 + 4): the
// block kernel past D 256, power of two or not.
// Token counts 1 (decode), 3 and 37 (a prefill chunk), at positions that start at 0, sit on
// and cross 16-row block boundaries and reach past 4096; the rows are those of a shuffled
// block table, so they jump between blocks.
// Tolerances (relative L2): q, k and float pool rows f32 1e-4 (libm vs CUDA sin/cos of
// angles of thousands of radians, as the rope test), f16 3e-3 (f16 storage after the norm and
// after RoPE); i8 rows: at most one int8 step apart (the CPU reference keeps f32 where the
// f16 run rounds), the dequantized rows within 5e-3 (f32) / 1.5e-2 (f16), scales as q/k.
// Pool rows no token writes keep their bits. Also the GPU's separate ops (rms_norm, rope,
// kv_scatter / kv_scatter_i8), whose arithmetic the fused kernel repeats: equal bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_util.h"
#include "ops/paged_attention.h"
#include "ops/qk_norm_rope_kv_write.h"
#include "unit/qk_norm_rope_unfused.h"

namespace vi::cudatest {
namespace {

class QkNormRopeKvWrite : public CudaOpTest {};

// A host pool [n_rows, Hkv, D] of random old rows: f32 values (f16-rounded in f16 runs) for a
// float pool, random int8 and scales for an i8 one.
ops::KvRows random_pool(bool i8, DType act, int64_t n_rows, int64_t Hkv, int64_t D) {
  if (!i8) return {rand_f32({n_rows, Hkv, D}, act, -2, 2), {}};
  Tensor q = Tensor::empty(DType::I8, {n_rows, Hkv, D});
  std::uniform_int_distribution<int> u(-127, 127);
  for (int64_t i = 0; i < q.numel(); ++i) q.ptr<int8_t>()[i] = static_cast<int8_t>(u(rng()));
  return {q, rand_f32({n_rows, Hkv}, DType::F32, 0.001f, 0.05f)};
}

using cudatest::clone;  // the Tensor one (cuda_test_util.h), beside this overload
ops::KvRows clone(const ops::KvRows& c) { return {clone(c.data), c.scale.data() ? clone(c.scale) : Tensor()}; }

// A GPU pool (or scale) back on the host, as it is stored.
ops::KvRows download(ops::Context& g, const ops::KvRows& d) {
  return {ops::download(g, d.data), d.scale.data() ? ops::download(g, d.scale) : Tensor()};
}

// The pool on the GPU in the run's dtype (float pools) or as it is (i8).
ops::KvRows upload_pool(ops::Context& g, const ops::KvRows& h, DType act) {
  if (h.data.dtype() != DType::I8) return {to_gpu(g, h.data, act), {}};
  return {ops::upload(g, h.data), ops::upload(g, h.scale)};
}

// Pool rows `rows` as f32 [n, Hkv, D] (i8 ones dequantized: value = scale * q).
Tensor rows_f32(const ops::KvRows& host, const std::vector<int32_t>& rows) {
  const int64_t Hkv = host.data.dim(1), D = host.data.dim(2), n = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(DType::F32, {n, Hkv, D});
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < Hkv * D; ++i) {
      const int64_t e = rows[t] * Hkv * D + i;
      float x;
      if (host.data.dtype() == DType::I8) x = host.scale.ptr<float>()[rows[t] * Hkv + i / D] * host.data.ptr<int8_t>()[e];
      else if (host.data.dtype() == DType::F16) x = fp16_to_fp32(host.data.ptr<uint16_t>()[e]);
      else x = host.data.ptr<float>()[e];
      out.ptr<float>()[t * Hkv * D + i] = x;
    }
  return out;
}

TEST_P(QkNormRopeKvWrite, MatchesCpuAndTheSeparateOps) {
  const std::tuple<int64_t, int64_t, int64_t, int> shapes[] = {
      {24, 4, 256, 64}, {5, 1, 37, 10}, {6, 2, 80, 80}, {4, 2, 128, 128},
      {2, 1, 200, 50},  {3, 1, 512, 64}, {3, 1, 300, 100}};  // Hq, Hkv, D, rot
  const std::pair<int64_t, int32_t> runs[] = {{1, 0}, {1, 15}, {1, 16}, {3, 14}, {1, 4097}, {37, 100}};  // T, pos0
  const float eps = 1e-6f, theta = 1e7f;
  const int64_t bs = 16, n_blocks = 8, n_rows = bs * n_blocks;
  for (auto [Hq, Hkv, D, rot] : shapes) {
    for (auto [T, pos0] : runs) {
      // Position p sits in pool row table[p / bs] * bs + p % bs: a shuffled table over the
      // blocks the positions reach, so consecutive tokens can land in far-apart blocks.
      const Tensor perm = shuffled_table(n_blocks);
      std::vector<int32_t> pos(static_cast<size_t>(T)), rows(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        const int32_t p = pos0 + static_cast<int32_t>(t);
        pos[t] = p;
        rows[t] = perm.ptr<int32_t>()[(p / bs - pos0 / bs) % n_blocks] * bs + p % bs;
      }
      for (bool k_i8 : {false, true}) {
        for (bool v_i8 : {false, true}) {
          const std::string what = fmt::format(" Hq={} Hkv={} D={} rot={} T={} pos0={} K {} V {}", Hq, Hkv, D, rot,
                                               T, pos0, k_i8 ? "i8" : "float", v_i8 ? "i8" : "float");
          Tensor q = rand_f32({T, Hq, D}, act(), -2, 2), k = rand_f32({T, Hkv, D}, act(), -2, 2);
          Tensor v = rand_f32({T, Hkv, D}, act(), -2, 2);
          Tensor qw = rand_f32({D}, DType::F32, -0.5f, 0.5f), kw = rand_f32({D}, DType::F32, -0.5f, 0.5f);
          const ops::KvRows kc0 = random_pool(k_i8, act(), n_rows, Hkv, D), vc0 = random_pool(v_i8, act(), n_rows, Hkv, D);

          // The CPU reference in f32 (inputs already f16-rounded in f16 runs).
          Tensor q_ref = clone(q), k_ref = clone(k);
          ops::KvRows kc_ref = clone(kc0), vc_ref = clone(vc0);
          ops::qk_norm_rope_kv_write(cpu, q_ref, k_ref, v, qw, kw, eps, 1.0f, ops::i32_on_device(cpu, pos), rot, theta,
                                     kc_ref, vc_ref, ops::i32_on_device(cpu, rows));

          const Tensor dpos = ops::i32_on_device(g, pos), drows = ops::i32_on_device(g, rows);
          const Tensor dqw = ops::upload(g, qw), dkw = ops::upload(g, kw), dv = up(v);
          Tensor dq = up(q), dk = up(k);
          ops::KvRows dkc = upload_pool(g, kc0, act()), dvc = upload_pool(g, vc0, act());
          ops::qk_norm_rope_kv_write(g, dq, dk, dv, dqw, dkw, eps, 1.0f, dpos, rot, theta, dkc, dvc, drows);

          Tensor sq = up(q), sk = up(k);
          ops::KvRows skc = upload_pool(g, kc0, act()), svc = upload_pool(g, vc0, act());
          test::unfused_qk_norm_rope_kv_write(g, sq, sk, dv, dqw, dkw, eps, 1.0f, dpos, rot, theta, skc, svc, drows);

          EXPECT_CLOSE(down(dq), q_ref, tol(1e-4, 3e-3), "q" + what);
          EXPECT_CLOSE(down(dk), k_ref, tol(1e-4, 3e-3), "k" + what);
          EXPECT_TRUE(same_bits(ops::download(g, dq), ops::download(g, sq))) << "q vs separate ops" << what;
          EXPECT_TRUE(same_bits(ops::download(g, dk), ops::download(g, sk))) << "k vs separate ops" << what;

          const std::set<int32_t> written(rows.begin(), rows.end());
          for (int c = 0; c < 2; ++c) {
            const std::string name = (c == 0 ? "K pool" : "V pool") + what;
            const ops::KvRows& init = c == 0 ? kc0 : vc0;
            const ops::KvRows& ref = c == 0 ? kc_ref : vc_ref;
            const ops::KvRows& dev = c == 0 ? dkc : dvc;
            const ops::KvRows& sep = c == 0 ? skc : svc;
            const ops::KvRows got = download(g, dev), got_sep = download(g, sep);
            EXPECT_TRUE(same_bits(got.data, got_sep.data)) << name << " vs separate ops";
            if (got.scale.data()) {
              EXPECT_TRUE(same_bits(got.scale, got_sep.scale)) << name << " scales vs separate ops";
            }
            // Rows no token writes keep their old contents, bit for bit (the old rows of a
            // float pool are f16 values in f16 runs: the same f32 numbers on both sides).
            std::vector<int32_t> others;
            for (int32_t r = 0; r < n_rows; ++r)
              if (!written.count(r)) others.push_back(r);
            EXPECT_EQ(rel_l2(rows_f32(got, others), rows_f32(init, others)), 0.0) << name << " rows not written";
            const Tensor w_got = rows_f32(got, rows), w_ref = rows_f32(ref, rows);
            if (got.data.dtype() != DType::I8) {
              EXPECT_CLOSE(w_got, w_ref, tol(1e-4, 3e-3), name);
              continue;
            }
            int64_t max_step = 0;
            for (int64_t t = 0; t < T; ++t)
              for (int64_t i = 0; i < Hkv * D; ++i) {
                const int64_t e = rows[t] * Hkv * D + i;
                max_step = std::max<int64_t>(max_step, std::abs(int{got.data.ptr<int8_t>()[e]} - int{ref.data.ptr<int8_t>()[e]}));
              }
            EXPECT_LE(max_step, 1) << name;
            EXPECT_CLOSE(w_got, w_ref, tol(5e-3, 1.5e-2), name + " dequantized");
            Tensor s_got = Tensor::empty(DType::F32, {T, Hkv}), s_ref = Tensor::empty(DType::F32, {T, Hkv});
            for (int64_t t = 0; t < T; ++t)
              for (int64_t h = 0; h < Hkv; ++h) {
                s_got.ptr<float>()[t * Hkv + h] = got.scale.ptr<float>()[rows[t] * Hkv + h];
                s_ref.ptr<float>()[t * Hkv + h] = ref.scale.ptr<float>()[rows[t] * Hkv + h];
              }
            EXPECT_CLOSE(s_got, s_ref, tol(1e-4, 3e-3), name + " scales");
          }
        }
      }
    }
  }
}

VI_CUDA_INSTANTIATE(QkNormRopeKvWrite);

}  // namespace
}  // namespace vi::cudatest
