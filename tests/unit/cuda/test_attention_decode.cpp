// CUDA vs CPU: split-KV paged decode attention (T = 1..8 queries per sequence, grouped KV
// heads, one split and many splits, odd head dims and block sizes, a shuffled block
// table), the int8 KV cache (quantizing write of rotated K / plain V, attention over i8
// K and V and over mixed i8 K + f16 V) and i8 prefill chunks. Fresh random inputs, both
// kernel profiles, f32 and f16 activations.
// Tolerances (relative L2): f32 K/V 2e-5; f16 3e-3; i8 K/V (same quantized rows on both
// sides, so only the summation order differs) 2e-5 / 3e-3 like the float pools.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cuda_test_util.h"
#include "ops/kv_quant.h"
#include "ops/paged_attention.h"

namespace vi::cudatest {
namespace {

struct Shape {
  int64_t Hq, Hkv, D, bs;
};

class AttentionDecode : public CudaOpTest {
 protected:
  // Float pools (the activation dtype): T query tokens at q_pos0 against the pool.
  void check_float(const Shape& s, int64_t T, int64_t q_pos0) {
    const int64_t S = q_pos0 + T, n_blocks = (S + s.bs - 1) / s.bs + 2;
    Tensor table = shuffled_table(n_blocks);
    Tensor k = rand_f32({n_blocks * s.bs, s.Hkv, s.D}, act(), -2, 2);
    Tensor v = rand_f32({n_blocks * s.bs, s.Hkv, s.D}, act(), -2, 2);
    Tensor q = rand_f32({T, s.Hq, s.D}, act(), -2, 2);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    Tensor ref = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    ops::paged_attention(cpu, q, host_as(k, act()), host_as(v, act()), table, s.bs, q_pos0, scale, ref);
    Tensor dq = up(q), dk = up(k), dv = up(v), dout = gpu_empty({T, s.Hq, s.D});
    ops::paged_attention(g, dq, dk, dv, table, s.bs, q_pos0, scale, dout);
    EXPECT_CLOSE(down(dout), ref, tol(2e-5, 3e-3),
                 fmt::format("decode Hq={} Hkv={} D={} bs={} T={} pos0={}", s.Hq, s.Hkv, s.D, s.bs, T, q_pos0));
  }
};

// kv_scatter: rows of x land at the pool rows given in device memory, bit for bit (a copy),
// and no other pool row changes; the CPU op scatters the same rows into the same pool.
TEST_P(AttentionDecode, KvScatterWritesTheGivenRows) {
  for (auto [T, W] : {std::pair<int64_t, int64_t>{1, 1024}, {7, 80 * 3}, {13, 37}}) {
    const int64_t n_rows = 64;
    Tensor pool = rand_f32({n_rows, W}, act(), -2, 2), x = rand_f32({T, W}, act(), -2, 2);
    std::vector<int32_t> perm(static_cast<size_t>(n_rows));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    perm.resize(static_cast<size_t>(T));
    Tensor dpool = up(pool);  // before the CPU scatter: host_as(f32) is the tensor itself
    ops::kv_scatter(g, up(x), dpool, ops::i32_on_device(g, perm));
    Tensor ref = host_as(pool, act()), hx = host_as(x, act());
    ops::kv_scatter(cpu, hx, ref, ops::i32_on_device(cpu, perm));
    Tensor got = down(dpool), want = to_host_f32(cpu, ref);
    ASSERT_EQ(got.numel(), want.numel());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.nbytes()), 0) << "T=" << T << " W=" << W;
  }
}

TEST_P(AttentionDecode, FloatKvOneAndManySplits) {
  // Hq/Hkv groups 6 (Qwen3.5-27B), 3, 1 and 8 (T=8: 64 rows, the block maximum).
  const Shape shapes[] = {{24, 4, 256, 16}, {9, 3, 80, 16}, {5, 5, 37, 7}, {16, 2, 128, 16}};
  for (const Shape& s : shapes)
    for (auto [T, p0] : {std::pair<int64_t, int64_t>{1, 0}, {1, 140}, {3, 2}, {8, 333}, {1, 4098}, {5, 2111}})
      check_float(s, T, p0);
}

// The CPU's quantizing write is the reference for the CUDA one; the pools must agree to
// one int8 step (the f32 rounding of x * 127 / amax can land on either side of .5).
TEST_P(AttentionDecode, Int8WriteMatchesCpu) {
  for (int64_t D : {256, 80, 37}) {
    const int64_t Hkv = 3, bs = 16, n_blocks = 5, T = 29, pos0 = 9;
    Tensor table = shuffled_table(n_blocks);
    Tensor x = rand_f32({T, Hkv * D}, act(), -3, 3);
    for (bool rotate : {true, false}) {
      Tensor pc = Tensor::empty(DType::I8, {n_blocks * bs, Hkv, D}), sc = Tensor::empty(DType::F32, {n_blocks * bs, Hkv});
      std::fill_n(pc.ptr<int8_t>(), pc.numel(), int8_t{0});
      std::fill_n(sc.ptr<float>(), sc.numel(), 0.0f);
      Tensor pg = ops::upload(g, pc), sg = ops::upload(g, sc);
      ops::paged_kv_write_i8(cpu, x, pc, sc, table, bs, pos0, rotate);
      ops::paged_kv_write_i8(g, up(x), pg, sg, table, bs, pos0, rotate);
      Tensor ph = ops::download(g, pg), sh = ops::download(g, sg);
      int64_t max_step = 0, n_diff = 0;
      for (int64_t i = 0; i < pc.numel(); ++i) {
        const int64_t d = std::abs(int64_t{pc.ptr<int8_t>()[i]} - int64_t{ph.ptr<int8_t>()[i]});
        max_step = std::max(max_step, d);
        n_diff += d != 0;
      }
      EXPECT_LE(max_step, 1) << "D=" << D << " rotate=" << rotate;
      EXPECT_LE(n_diff, pc.numel() / 1000 + 1) << "D=" << D << " rotate=" << rotate;
      EXPECT_CLOSE(sh, sc, 1e-6, fmt::format("i8 scales D={} rotate={}", D, rotate));
    }
  }
}

// Attention over int8 pools written by the CPU: both sides read the same quantized rows.
TEST_P(AttentionDecode, Int8KvMatchesCpu) {
  const Shape shapes[] = {{24, 4, 256, 16}, {9, 3, 80, 16}, {6, 2, 37, 7}};
  for (const Shape& s : shapes) {
    for (bool v_i8 : {true, false}) {
      for (auto [T, p0] : {std::pair<int64_t, int64_t>{1, 0}, {1, 3001}, {4, 700}, {8, 95}, {19, 40}}) {
        const int64_t S = p0 + T, n_blocks = (S + s.bs - 1) / s.bs + 1, n_rows = n_blocks * s.bs;
        Tensor table = shuffled_table(n_blocks);
        Tensor kx = rand_f32({n_rows, s.Hkv * s.D}, DType::F32, -2, 2), vx = rand_f32({n_rows, s.Hkv * s.D}, act(), -2, 2);
        Tensor identity = Tensor::empty(DType::I32, {n_blocks});
        std::iota(identity.ptr<int32_t>(), identity.ptr<int32_t>() + n_blocks, 0);
        Tensor kq = Tensor::empty(DType::I8, {n_rows, s.Hkv, s.D}), ks = Tensor::empty(DType::F32, {n_rows, s.Hkv});
        Tensor vq = Tensor::empty(DType::I8, {n_rows, s.Hkv, s.D}), vs = Tensor::empty(DType::F32, {n_rows, s.Hkv});
        ops::paged_kv_write_i8(cpu, kx, kq, ks, identity, s.bs, 0, /*rotate=*/true);
        ops::paged_kv_write_i8(cpu, vx, vq, vs, identity, s.bs, 0, /*rotate=*/false);
        ops::KvRows kc{kq, ks}, vc = v_i8 ? ops::KvRows{vq, vs} : ops::KvRows{host_as(vx, act()).reshape({n_rows, s.Hkv, s.D}), {}};
        Tensor q = rand_f32({T, s.Hq, s.D}, act(), -2, 2);
        const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
        Tensor ref = Tensor::empty(DType::F32, {T, s.Hq, s.D});
        ops::paged_attention(cpu, q, kc, vc, table, s.bs, p0, scale, ref);
        ops::KvRows kg{ops::upload(g, kq), ops::upload(g, ks)};
        ops::KvRows vg = v_i8 ? ops::KvRows{ops::upload(g, vq), ops::upload(g, vs)}
                              : ops::KvRows{up(vx).reshape({n_rows, s.Hkv, s.D}), {}};
        Tensor dq = up(q), dout = gpu_empty({T, s.Hq, s.D});
        ops::paged_attention(g, dq, kg, vg, table, s.bs, p0, scale, dout);
        EXPECT_CLOSE(down(dout), ref, tol(2e-5, 3e-3),
                     fmt::format("i8 K, {} V: Hq={} Hkv={} D={} T={} pos0={}", v_i8 ? "i8" : "float", s.Hq, s.Hkv,
                                 s.D, T, p0));
      }
    }
  }
}

VI_CUDA_INSTANTIATE(AttentionDecode);

}  // namespace
}  // namespace vi::cudatest
