// CUDA: ops::norm_rope_paged_attention (the q/k head norms, RoPE and K/V append, then paged
// attention) against the same two ops run one after the other on the GPU, and against the CPU.
// Where the narrow decode kernel takes the call (native profile, f16, T = 1, i8 K and V, sm_80
// code) it runs as one kernel that normalises its own q rows and writes the new K/V row
// (cuda::DecodeFusedWrite); there the output, every pool byte and every scale must equal the two
// ops' bit for bit, and the fused form must have run (its call count). Elsewhere (the volta
// profile, f32, f16 pools, T > 1, the switch off) the op runs the two ops: the same bits again.
// The tests turn the fused form on (it is off by default until measured on a GPU).
// Shapes: the 27B layer (24 q heads, 4 kv heads, D 256, rot 64); G 8 (the writer warps also
// stage q rows); D 128 fully rotated; D 80 (D below the padded 128, rot 80). Block sizes 16 (slots
// copied as runs of pool rows) and 7 (a table lookup per key), positions at 0, on and next to
// 16-key slot edges, past 8K and 32K, a key bound at the length or a recorded step's power of two
// (empty splits). Old rows random, rows past the
// new token NaN (a read past the causal bound fails); the new row's old contents random, so a
// slot copied before the write gives other bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cuda/attention_decode.cuh"
#include "cuda_test_util.h"
#include "paged_pool_util.h"
#include "ops/memory.h"
#include "ops/norm_rope_paged_attention.h"
#include "ops/paged_attention.h"
#include "ops/qk_norm_rope_kv_write.h"

namespace vi::cudatest {
namespace {

// A host pool [n_rows, Hkv, D]: random int8 and scales for i8, random f16-rounded values of the
// activation dtype otherwise; the rows of positions past `last` (through the table) poisoned:
// NaN scales (i8) or NaN values.
ops::KvRows host_pool(bool i8, DType act, int64_t n_rows, int64_t Hkv, int64_t D, const Tensor& table, int64_t bs,
                      int64_t last) {
  ops::KvRows p;
  if (i8) {
    p.data = Tensor::empty(DType::I8, {n_rows, Hkv, D});
    std::uniform_int_distribution<int> u(-127, 127);
    for (int64_t i = 0; i < p.data.numel(); ++i) p.data.ptr<int8_t>()[i] = static_cast<int8_t>(u(rng()));
    p.scale = rand_f32({n_rows, Hkv}, DType::F32, 0.001f, 0.05f);
  } else {
    p.data = host_as(rand_f32({n_rows, Hkv, D}, act, -2, 2), act);
  }
  for (int64_t pos = last + 1; pos < n_rows; ++pos) {
    const int64_t row = int64_t(table.ptr<int32_t>()[pos / bs]) * bs + pos % bs;
    if (i8) {
      std::fill_n(p.scale.ptr<float>() + row * Hkv, Hkv, std::numeric_limits<float>::quiet_NaN());
    } else if (act == DType::F16) {
      std::fill_n(p.data.ptr<uint16_t>() + row * Hkv * D, Hkv * D, uint16_t{0x7e00});
    } else {
      std::fill_n(p.data.ptr<float>() + row * Hkv * D, Hkv * D, std::numeric_limits<float>::quiet_NaN());
    }
  }
  return p;
}

ops::KvRows upload(ops::Context& g, const ops::KvRows& h) {
  return {ops::upload(g, h.data), h.scale.data() ? ops::upload(g, h.scale) : Tensor()};
}
ops::KvRows download(ops::Context& g, const ops::KvRows& d) {
  return {ops::download(g, d.data), d.scale.data() ? ops::download(g, d.scale) : Tensor()};
}

struct Case {
  int64_t Hq, Hkv, D;
  int rot;
  int64_t bs;
  int64_t p0;
  bool pow2_bound;  // the key bound of a recorded step (the length rounded up to a power of two)
};

class NormRopeAttention : public CudaOpTest {
 protected:
  // The fused form on (DecodeTuning::fused_write, off by default until measured) for each test.
  void SetUp() override {
    CudaOpTest::SetUp();
    if (IsSkipped()) return;
    was_ = cuda::decode_tuning();
    cuda::DecodeTuning t = was_;
    t.fused_write = true;
    cuda::set_decode_tuning(t);
  }
  void TearDown() override {
    if (!IsSkipped()) cuda::set_decode_tuning(was_);
  }
  cuda::DecodeTuning was_;

  // Runs case c with T tokens and i8 or float pools; checks the op against the two ops (bits)
  // and the CPU, and returns whether the fused form ran.
  bool run_case(const Case& c, int64_t T, bool k_i8, bool v_i8, const std::string& what) {
    const DType act = this->act();
    const int64_t Hq = c.Hq, Hkv = c.Hkv, D = c.D, bs = c.bs, S = c.p0 + T;
    const int64_t bound = c.pow2_bound ? S + pow2_extra_keys(S) : S;
    const int64_t n_blocks = (bound + bs - 1) / bs + 1, n_rows = n_blocks * bs;
    const Tensor table = shuffled_table(n_blocks);
    std::vector<int32_t> pos(static_cast<size_t>(T)), rows(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = c.p0 + t;
      pos[t] = static_cast<int32_t>(p);
      rows[t] = table.ptr<int32_t>()[p / bs] * static_cast<int32_t>(bs) + static_cast<int32_t>(p % bs);
    }
    const Tensor q = rand_f32({T, Hq, D}, act, -2, 2), k = rand_f32({T, Hkv, D}, act, -2, 2);
    const Tensor v = rand_f32({T, Hkv, D}, act, -2, 2), gate = rand_f32({T, Hq, D}, act, -3, 3);
    const Tensor qw = rand_f32({D}, DType::F32, -0.5f, 0.5f), kw = rand_f32({D}, DType::F32, -0.5f, 0.5f);
    const ops::KvRows kc0 = host_pool(k_i8, act, n_rows, Hkv, D, table, bs, S - 1);
    const ops::KvRows vc0 = host_pool(v_i8, act, n_rows, Hkv, D, table, bs, S - 1);
    const float eps = 1e-6f, theta = 1e7f, w_offset = 1.0f, scale = 1.0f / std::sqrt(static_cast<float>(D));

    const Tensor dtable = ops::upload(g, table), dpos = ops::i32_on_device(g, pos), drows = ops::i32_on_device(g, rows);
    const Tensor dqw = ops::upload(g, qw), dkw = ops::upload(g, kw), dv = up(v), dgate = up(gate);
    const ops::QkNormRopeParams nr{dqw, dkw, eps, w_offset, c.rot, theta};

    // The two ops, one after the other.
    Tensor uq = up(q), uk = up(k), uout = gpu_empty({T, Hq, D});
    ops::KvRows ukc = upload(g, kc0), uvc = upload(g, vc0);
    ops::qk_norm_rope_kv_write(g, uq, uk, dv, dqw, dkw, eps, w_offset, dpos, c.rot, theta, ukc, uvc, drows);
    ops::paged_attention(g, uq, ukc, uvc, dtable, bs, dpos, bound, scale, uout, &dgate);

    // The op.
    Tensor fq = up(q), fk = up(k), fout = gpu_empty({T, Hq, D});
    ops::KvRows fkc = upload(g, kc0), fvc = upload(g, vc0);
    const uint64_t before = ops::norm_rope_paged_attention_fused_calls();
    ops::norm_rope_paged_attention(g, fq, fk, dv, nr, fkc, fvc, drows, dtable, bs, dpos, bound, scale, fout, &dgate);
    const bool fused = ops::norm_rope_paged_attention_fused_calls() == before + 1;

    ops::synchronize(g);
    EXPECT_TRUE(same_bits(ops::download(g, fout), ops::download(g, uout))) << "out vs the two ops" << what;
    const ops::KvRows gk = download(g, fkc), gv = download(g, fvc), rk = download(g, ukc), rv = download(g, uvc);
    EXPECT_TRUE(same_bits(gk.data, rk.data)) << "K pool vs the two ops" << what;
    EXPECT_TRUE(same_bits(gv.data, rv.data)) << "V pool vs the two ops" << what;
    if (k_i8) {
      EXPECT_TRUE(same_bits(gk.scale, rk.scale)) << "K scales vs the two ops" << what;
    }
    if (v_i8) {
      EXPECT_TRUE(same_bits(gv.scale, rv.scale)) << "V scales vs the two ops" << what;
    }

    // The CPU: the two ops in f32 over the same old rows.
    Tensor cq = clone(q), ck = clone(k), cout = Tensor::empty(DType::F32, {T, Hq, D});
    ops::KvRows ckc{clone(kc0.data), kc0.scale.data() ? clone(kc0.scale) : Tensor()};
    ops::KvRows cvc{clone(vc0.data), vc0.scale.data() ? clone(vc0.scale) : Tensor()};
    auto f32_pool = [&](ops::KvRows& p) {  // the CPU's float pools are f32 (f16 ones widened)
      if (p.data.dtype() != DType::F16) return;
      Tensor w = Tensor::empty(DType::F32, p.data.shape());
      for (int64_t i = 0; i < w.numel(); ++i) w.ptr<float>()[i] = fp16_to_fp32(p.data.ptr<uint16_t>()[i]);
      p.data = w;
    };
    f32_pool(ckc);
    f32_pool(cvc);
    const ops::QkNormRopeParams cnr{qw, kw, eps, w_offset, c.rot, theta};
    ops::norm_rope_paged_attention(cpu, cq, ck, v, cnr, ckc, cvc, ops::i32_on_device(cpu, rows), table, bs,
                                   ops::i32_on_device(cpu, pos), bound, scale, cout, &gate);
    // f32: the new i8 key may differ by one int8 step where the GPU's sin/cos and the CPU's differ
    // in the last bit (as in the qk_norm_rope_kv_write test), moving one key's score by up to
    // ~3e-3; f16 adds the f16 roundings of q and k after the norm and RoPE and the tensor cores'.
    EXPECT_CLOSE(down(fout), cout, tol(1e-3, 1e-2), "out vs the CPU" + what);
    return fused;
  }
};

TEST_P(NormRopeAttention, FusedMatchesTheTwoOps) {
  const Case cases[] = {
      {24, 4, 256, 64, 16, 0, false},     {24, 4, 256, 64, 16, 15, false},
      {24, 4, 256, 64, 16, 16, true},     {24, 4, 256, 64, 16, 17, false},
      {24, 4, 256, 64, 16, 127, true},    {24, 4, 256, 64, 16, 8191, false},
      {24, 4, 256, 64, 16, 8200, true},   {24, 4, 256, 64, 16, 32768 + 37, true},
      {24, 4, 256, 64, 7, 100, false},    {24, 4, 256, 64, 7, 8200, true},
      {16, 2, 256, 64, 16, 4111, true},   {16, 2, 256, 64, 7, 300, false},
      {8, 2, 128, 128, 16, 1000, false},  {8, 2, 128, 128, 32, 5000, true},
      {6, 2, 80, 80, 16, 700, true},      {6, 2, 80, 80, 7, 33, false},
  };
  const bool native_f16 = g.profile == ops::KernelProfile::kNative && act() == DType::F16;
  int fused_runs = 0, fused_expected = 0;
  for (const Case& c : cases) {
    for (int64_t T : {1, 2}) {
      for (auto [k_i8, v_i8] : {std::pair{true, true}, std::pair{false, false}, std::pair{true, false}}) {
        if (T == 2 && !(k_i8 && v_i8)) continue;
        const std::string what =
            fmt::format(": Hq={} Hkv={} D={} rot={} bs={} p0={} T={} bound {} K {} V {}", c.Hq, c.Hkv, c.D, c.rot,
                        c.bs, c.p0, T, c.pow2_bound ? "pow2" : "exact", k_i8 ? "i8" : "float", v_i8 ? "i8" : "float");
        const bool fused = run_case(c, T, k_i8, v_i8, what);
        fused_runs += fused;
        // Where the fused form must run: the narrow kernel's calls (T = 1, i8 K and V).
        const bool expect = native_f16 && T == 1 && k_i8 && v_i8 && cuda::loaded_code_cc() >= 80;
        fused_expected += expect;
        EXPECT_EQ(fused, expect) << "the fused form " << (fused ? "ran" : "did not run") << what;
      }
    }
  }
  if (native_f16 && cuda::loaded_code_cc() >= 80) {
    EXPECT_GT(fused_runs, 0);
  }
  EXPECT_EQ(fused_runs, fused_expected);
}

// The switch off (DecodeTuning::fused_write): the op runs the two ops, the same bits.
TEST_P(NormRopeAttention, SwitchOffRunsTheTwoOps) {
  cuda::DecodeTuning t = cuda::decode_tuning();
  const cuda::DecodeTuning was = t;
  t.fused_write = false;
  cuda::set_decode_tuning(t);
  const bool fused = run_case(Case{24, 4, 256, 64, 16, 8200, true}, 1, true, true, ": fused_write off");
  cuda::set_decode_tuning(was);
  EXPECT_FALSE(fused);
}

VI_CUDA_INSTANTIATE(NormRopeAttention);

}  // namespace
}  // namespace vi::cudatest
