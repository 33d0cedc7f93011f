// CUDA vs CPU: split-KV paged decode attention (T = 1..8 queries per sequence, grouped KV
// heads, one split and many splits, odd head dims and block sizes, a shuffled block
// table), the int8 KV cache (quantizing write of rotated K / plain V, attention over i8
// K and V and over mixed i8 K + f16 V) and i8 prefill chunks. Fresh random inputs, both
// kernel profiles, f32 and f16 activations.
// Both split kernels (CUDA cores; tensor cores for f16 queries over f16/i8 pools) are forced
// in turn for T = 1, 2, 4, 8 through cuda::decode_attention with device positions, a key
// bound past the true length (empty splits) and forced split counts (a split whose first
// key lies after some rows' positions); pool rows past the last position hold NaN, and the
// output starts at 1e4, so a read past the causal bound or a row left unwritten fails.
// Tolerances (relative L2): f32 K/V 2e-5; f16 3e-3; i8 K/V (same quantized rows on both
// sides, so only the summation order differs) 2e-5 / 3e-3 like the float pools. The
// tensor-core kernel rounds its operands to f16 (queries, dequantized i8 rows, P), one
// 2^-11 rounding each, like the prefill kernel, within the same 3e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <tuple>

#include "backends/cuda/attention_decode.cuh"
#include "cuda_test_util.h"
#include "paged_pool_util.h"
#include "ops/kv_quant.h"
#include "ops/memory.h"
#include "ops/paged_attention.h"

namespace vi::cudatest {
namespace {

// Sets the tensor-core row threshold, whether the cp.async ring kernel runs wherever it fits
// (ring) or never, and whether the warp-split kernel runs wherever it fits (warps) or never,
// for a scope (process-wide; the key threshold off), and restores the defaults.
struct TcRows {
  explicit TcRows(int rows, bool ring = true, bool warps = false) {
    cuda::set_decode_tc_min_rows(rows);
    cuda::set_decode_tc_min_keys(INT64_MAX);
    cuda::set_decode_tc_ring(ring ? cuda::DecodeTcRing::kAlways : cuda::DecodeTcRing::kNever);
    cuda::set_decode_tc_warps(warps ? cuda::DecodeTcWarps::kAlways : cuda::DecodeTcWarps::kNever);
  }
  ~TcRows() {
    cuda::set_decode_tc_min_rows(cuda::kDecodeTcMinRowsDefault);
    cuda::reset_decode_tc_min_keys();
    cuda::set_decode_tc_ring(cuda::DecodeTcRing::kAuto);
    cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAuto);
  }
};

// Sets the short-context tuning (cuda::DecodeTuning) for a scope and restores what it was.
struct Tuning {
  explicit Tuning(cuda::DecodeTuning t) : was(cuda::decode_tuning()) { cuda::set_decode_tuning(t); }
  ~Tuning() { cuda::set_decode_tuning(was); }
  cuda::DecodeTuning was;
};

// Forces the warp-split kernel's row tiles per block (cuda::set_decode_tc_warps_tiles) for a
// scope and restores kAuto.
struct WarpTiles {
  explicit WarpTiles(cuda::DecodeTcWarpsTiles t) { cuda::set_decode_tc_warps_tiles(t); }
  ~WarpTiles() { cuda::set_decode_tc_warps_tiles(cuda::DecodeTcWarpsTiles::kAuto); }
};

class AttentionDecode : public CudaOpTest {
 protected:
  Pool make_pool(DType dt, bool is_k, const Shape& s, int64_t n_rows, const Tensor& table, int64_t S) {
    return make_paged_pool(cpu, g, dt, is_k, s, n_rows, table, S);
  }

  // T queries at q_pos0 through cuda::decode_attention with the position on the device and
  // a key bound `extra` past the true length; tc_rows picks the split kernel (1: tensor
  // cores where they fit, INT_MAX: CUDA cores), ring whether the tensor-core call may take
  // the cp.async ring kernel (native profile, sm_80 code) or must take the register one;
  // warps whether it may take the warp-split kernel (i8 pools, <= 16 rows, sm_80 code); n_splits
  // 0: the kernel's own choice; queries uniform in [-q_amp, q_amp]. Returns whether the
  // warp-split kernel ran.
  bool check_split(const Shape& s, int64_t T, int64_t q_pos0, DType kdt, DType vdt, int tc_rows, int n_splits,
                   int64_t extra, bool ring = true, bool warps = false, float q_amp = 2.0f) {
    TcRows rows(tc_rows, ring, warps);
    const int64_t S = q_pos0 + T, bound = S + extra, n_blocks = (bound + s.bs - 1) / s.bs + 1;
    const int64_t n_rows = n_blocks * s.bs;
    Tensor table = shuffled_table(n_blocks);
    Pool k = make_pool(kdt, true, s, n_rows, table, S), v = make_pool(vdt, false, s, n_rows, table, S);
    Tensor q = rand_f32({T, s.Hq, s.D}, act(), -q_amp, q_amp);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    Tensor ref = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    ops::paged_attention(cpu, q, k.host, v.host, table, s.bs, q_pos0, scale, ref);

    Tensor pos = Tensor::empty(DType::I32, {1});
    pos.ptr<int32_t>()[0] = static_cast<int32_t>(q_pos0);
    Tensor poison = Tensor::empty(DType::F32, {T, s.Hq, s.D});
    std::fill_n(poison.ptr<float>(), poison.numel(), 1e4f);
    Tensor dq = up(q), dtable = ops::upload(g, table), dpos = ops::upload(g, pos), dout = up(poison);
    cuda::DecodeArgs a = decode_args(s, T, act(), dq.data(), k, v, dtable, dpos, bound, scale, dout.data());
    a.n_splits = n_splits;
    const bool tc = T * (s.Hq / s.Hkv) >= tc_rows && cuda::decode_tc_fits(a);
    const bool tc_warps = tc && cuda::decode_tc_warps_fits(g, a);
    const bool tc_ring = tc && !tc_warps && cuda::decode_tc_ring_fits(g, a);
    last_narrow = tc_warps && cuda::decode_tc_narrow_takes(a);
    last_split_v = tc_warps && cuda::decode_tc_split_v_takes(a);
    last_runs = tc_warps && cuda::decode_tc_runs_take(a);
    const std::string path = tc_warps ? fmt::format("tensor cores, warp-split, {} row tiles per block, {} row groups{}{}",
                                                    cuda::decode_tc_warps_tiles(a), cuda::decode_tc_warps_groups(a),
                                                    last_narrow ? ", narrow step" : "",
                                                    last_split_v ? ", split-V step" : "")
                             : tc_ring ? "tensor cores, ring"
                             : tc      ? "tensor cores, registers"
                                       : "CUDA cores";
    cuda::decode_attention(g, a);
    last_out = down(dout);
    EXPECT_CLOSE(last_out, ref, tol(2e-5, 3e-3),
                 fmt::format("split ({}) K {} V {}: Hq={} Hkv={} D={} bs={} T={} pos0={} splits={} bound+{} q_amp={}",
                             path, dtype_name(kdt), dtype_name(vdt), s.Hq, s.Hkv, s.D, s.bs, T, q_pos0, n_splits,
                             extra, q_amp));
    return tc_warps;
  }

  // TensorCoreWarpSplit's calls under the current DecodeTuning (defined below the tests).
  void check_warp_split(bool narrow);
  // Whether the last check_split ran the warp-split kernel's narrow step, whether it ran the
  // split-V step, whether that kernel copied its slots as runs, and its output (on the host).
  bool last_narrow = false;
  bool last_split_v = false;
  bool last_runs = false;
  Tensor last_out;

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

using TP = std::pair<int64_t, int64_t>;  // (T, q_pos0)

// MTP verification shapes on the split kernels (CUDA cores; tensor cores with the ring
// kernel allowed, which the native profile takes where it fits, and with the register one
// forced): T = 1, 2, 4, 8 over f16, i8 and mixed pools, contexts that are no multiple of
// the block or tile size, the kernel's own split count, and a key bound 300 past the true
// length (whole empty splits). D 64 with blocks of 7 takes the ring kernel's row lookup by
// division (a power-of-two block shifts); D 37 leaves it for the register one.
TEST_P(AttentionDecode, SplitKernelsVerifyTokens) {
  const Shape shapes[] = {{24, 4, 256, 16}, {9, 3, 80, 16}, {6, 2, 37, 7}, {16, 2, 128, 16}, {12, 2, 64, 7}};
  const std::pair<DType, DType> kvs[] = {{DType::F16, DType::F16}, {DType::I8, DType::I8}, {DType::I8, DType::F16}};
  for (auto [tc_rows, ring] : {std::pair<int, bool>{1, true}, {1, false}, {INT_MAX, true}})
    for (const Shape& s : shapes)
      for (auto [kdt, vdt] : kvs)
        for (auto [T, p0] : {TP{1, 0}, TP{2, 45}, TP{4, 1000}, TP{8, 3001}, TP{4, 131}, TP{8, 0}})
          check_split(s, T, p0, kdt, vdt, tc_rows, 0, T == 4 ? 300 : 0, ring);
}

// Long splits on the ring kernel: one split of 2000+ keys (63 tiles: the slot ring wraps
// many times, the refill order and the cp.async group count are exercised), three splits of
// ~1700, and a split count that leaves a last split of a few keys; each with the register
// kernel too, T = 1 (one row tile), 4 (two) and 8 (four).
TEST_P(AttentionDecode, TensorCoreLongSplits) {
  for (bool ring : {true, false})
    for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{16, 2, 128, 16}})
      for (auto [kdt, vdt] : {std::pair<DType, DType>{DType::F16, DType::F16}, {DType::I8, DType::I8},
                              {DType::I8, DType::F16}})
        for (int64_t T : {1, 4, 8}) {
          check_split(s, T, 2017, kdt, vdt, 1, 1, 0, ring);
          check_split(s, T, 5100 - T, kdt, vdt, 1, 3, 64, ring);
          check_split(s, T, 4099, kdt, vdt, 1, 33, 0, ring);
        }
}

// Forced split counts: keys_per_split 32 over 103 keys (q_pos0 95, T 8) puts keys 96..102 in
// the last filled split, where the first query (position 95) sees none; 10 splits over a
// bound of 303 leave six empty. Also one split (the kernel writes the output itself).
TEST_P(AttentionDecode, SplitKernelsForcedSplits) {
  for (int tc_rows : {1, INT_MAX})
    for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{16, 2, 128, 16}, Shape{6, 2, 37, 7}, Shape{12, 2, 64, 7}})
      for (DType kv : {DType::F16, DType::I8}) {
        check_split(s, 8, 95, kv, kv, tc_rows, 4, 0);
        check_split(s, 8, 95, kv, kv, tc_rows, 10, 200);
        check_split(s, 8, 95, kv, kv, tc_rows, 1, 0);
        check_split(s, 3, 700, kv, kv, tc_rows, 7, 33);
      }
}

// The warp-split kernel forced (i8 K and V, up to 16 rows): T = 1, 2, 4, 8 where the rows
// allow (G 6: T 1, 2; G 2: up to 8; G 1: D 256 with 8 rows), D 256 / 128 / 80 (Hadamard
// blocks 64 + 16 in registers) / 64 (blocks of 7: the row lookup by division) / 96 (blocks
// 64 + 32), contexts that are no multiple of the 16-key slot, the kernel's own split count
// and a key bound 300 past the true length (empty splits, warps with no slot), forced splits
// (1: the block writes the output; 3; 33: a last split of a few keys, warps without slots; a
// split whose first key lies after the first query's position), one long split (2000+ keys:
// each warp's ring wraps many times). Pool rows past the last position hold NaN. All of it
// twice: with the narrow step (calls of <= 8 rows: the rows in the mma's n dimension; blocks of
// 16 copy a slot from one table load, blocks of 7 row by row) and with the 16-row step only.
TEST_P(AttentionDecode, TensorCoreWarpSplit) {
  for (bool narrow : {true, false}) {
    cuda::DecodeTuning t = cuda::decode_tuning();
    t.narrow_rows = narrow;
    const Tuning tuning(t);
    SCOPED_TRACE(narrow ? "narrow rows (<= 8 rows in the mma's n dimension)" : "16-row step");
    check_warp_split(narrow);
  }
}

// The calls of TensorCoreWarpSplit under the current DecodeTuning; with narrow_rows the calls of
// at most 8 rows must take the narrow step, without it none.
void AttentionDecode::check_warp_split(bool narrow) {
  const Shape shapes[] = {{24, 4, 256, 16}, {8, 4, 256, 16}, {4, 4, 256, 16}, {16, 8, 128, 7},
                          {6, 3, 80, 16},   {12, 4, 64, 7},  {4, 2, 96, 16}};
  int ran = 0, calls = 0, narrow_calls = 0;
  auto run = [&](const Shape& s, int64_t T, int64_t p0, DType kdt, DType vdt, int tc_rows, int n_splits,
                 int64_t extra) {
    ran += check_split(s, T, p0, kdt, vdt, tc_rows, n_splits, extra, true, true), ++calls;
    narrow_calls += last_narrow;
  };
  for (const Shape& s : shapes) {
    const int64_t G = s.Hq / s.Hkv;
    for (auto [T, p0] : {TP{1, 0}, TP{2, 45}, TP{4, 1000}, TP{8, 3001}, TP{4, 131}, TP{8, 0}, TP{1, 17}, TP{2, 4099}}) {
      if (T * G > 16) continue;
      run(s, T, p0, DType::I8, DType::I8, 1, 0, T == 4 ? 300 : 0);
      run(s, T, p0, DType::I8, DType::I8, 1, 1, 0);
    }
    for (int64_t T : {1, 2, 8}) {
      if (T * G > 16) continue;
      run(s, T, 2017, DType::I8, DType::I8, 1, 1, 0);
      run(s, T, 5100 - T, DType::I8, DType::I8, 1, 3, 64);
      run(s, T, 4099, DType::I8, DType::I8, 1, 33, 0);
      run(s, T, 95, DType::I8, DType::I8, 1, 4, 0);
      run(s, T, 95, DType::I8, DType::I8, 1, 10, 200);
    }
  }
  if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_EQ(ran, 0);
  else std::printf("warp-split kernel ran in %d of %d calls, %d of them at <= 8 rows (0: no sm_80 code)\n", ran,
                   calls, narrow_calls);
  if (narrow && ran > 0) {
    EXPECT_GT(narrow_calls, 0);
  }
  if (!narrow) {
    EXPECT_EQ(narrow_calls, 0);
  }
}

// Row groups of the warp-split kernel forced, one row tile per block (more than 16 rows: T = 3, 4, 5, 8): G 6 (the
// 27B shape; groups of 2 tokens, the last one shorter for odd T), G 8 (2 tokens, 16 rows),
// G 5 (3 tokens: T 4 -> 3 + 1, 8 -> 3 + 3 + 2), G 3 with blocks of 7 (T 8 -> 5 + 3), G 16
// and G 12 (one token per group, up to 4 groups; D 128 with blocks of 7, D 96), and G 1
// (never more than 16 rows: one group, the kernel as before). Each group masks with its own
// tokens' positions: the kernel's own split count with a key bound 300 past the end (empty
// splits), one split (the blocks write the output rows of their groups), forced splits where
// a split starts after the positions of the first group (keys_per_split 32: p0 94 leaves
// group 0 no key in split 3, p0 95 one key to its second token), one long split (2000+
// keys), a last split of a few keys. Pool rows past the last position hold NaN.
TEST_P(AttentionDecode, TensorCoreWarpSplitRowGroups) {
  const Shape shapes[] = {{24, 4, 256, 16}, {16, 2, 256, 16}, {10, 2, 64, 16}, {9, 3, 80, 7},
                          {16, 1, 128, 7},  {12, 1, 96, 16},  {4, 4, 256, 16}};
  const WarpTiles one(cuda::DecodeTcWarpsTiles::k1);  // one tile per block (kAuto would share slots)
  int ran = 0, calls = 0;
  for (const Shape& s : shapes) {
    const int64_t G = s.Hq / s.Hkv;
    auto run = [&](int64_t T, int64_t p0, int n_splits, int64_t extra) {
      if (T * G > cuda::kDecodeMaxRows) return;
      ran += check_split(s, T, p0, DType::I8, DType::I8, 1, n_splits, extra, true, true), ++calls;
    };
    for (auto [T, p0] : {TP{3, 0}, TP{4, 1000}, TP{5, 131}, TP{8, 3001}, TP{8, 0}, TP{4, 4099}, TP{3, 17}}) {
      run(T, p0, 0, T == 4 ? 300 : 0);
      run(T, p0, 1, 0);
    }
    for (int64_t T : {3, 4, 5, 8}) {
      run(T, 95, 4, 0);
      run(T, 94, 4, 0);
      run(T, 95, 10, 200);
      run(T, 2017, 1, 0);
      run(T, 5100 - T, 3, 64);
      run(T, 4099, 33, 0);
    }
  }
  if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_EQ(ran, 0);
  else std::printf("warp-split kernel (row groups) ran in %d of %d calls (0: no sm_80 code)\n", ran, calls);
  // Where the kernel runs at all (f16 activations, sm_80 code) every one of these shapes fits it.
  if (ran > 0) {
    EXPECT_EQ(ran, calls);
  }
}

// The warp-split kernel with the row tiles of a block sharing each K/V slot, forced with 2 and
// 4 tiles per block (and the 27B shape through kAuto, which picks 1, 2 or 4): T = 1..8 (up to
// 64 rows; with 4 tiles at T = 1 three warps per stream have no row, with 2 tiles at T = 8 of
// G 6 two row groups of 5 + 3 tokens), G 6 (the 27B shape, D 256, blocks of 16 and 7; D 128),
// G 8 (D 64, blocks of 7), G 3 (D 80: Hadamard blocks 64 + 16), G 20 (more rows per token than
// a tile: tokens straddle tiles; 2 tiles: one token per group), contexts that are no
// multiple of the 16-key slot or the block, the kernel's own split count with a key bound
// past the end (empty splits, streams with no slot), one split (the block writes the output),
// forced splits (a split past the first tokens' positions, a last split of a few keys, one
// long split: the stream rings wrap many times). Pool rows past the last position hold NaN.
TEST_P(AttentionDecode, TensorCoreWarpSplitSharedSlots) {
  const Shape shapes[] = {{24, 4, 256, 16}, {24, 4, 256, 7}, {12, 2, 128, 16},
                          {16, 2, 64, 7},   {9, 3, 80, 16},  {20, 1, 96, 16}};
  const int64_t p0s[] = {0, 45, 1000, 3001, 131, 4099, 17, 700};  // by T: contexts p0 + T
  using cuda::DecodeTcWarpsTiles;
  for (bool lean : {true, false})
  for (DecodeTcWarpsTiles tiles : {DecodeTcWarpsTiles::k2, DecodeTcWarpsTiles::k4, DecodeTcWarpsTiles::kAuto}) {
    cuda::DecodeTuning t = cuda::decode_tuning();
    t.lean_share_step = lean;
    const Tuning tuning(t);  // the lean slot step (default) and the step before it
    SCOPED_TRACE(lean ? "lean slot step" : "old slot step");
    const WarpTiles forced(tiles);
    int ran = 0, calls = 0;
    for (const Shape& s : shapes) {
      if (tiles == DecodeTcWarpsTiles::kAuto && s.Hq != 24) continue;
      const int64_t G = s.Hq / s.Hkv;
      auto run = [&](int64_t T, int64_t p0, int n_splits, int64_t extra) {
        if (T * G > cuda::kDecodeMaxRows) return;
        ran += check_split(s, T, p0, DType::I8, DType::I8, 1, n_splits, extra, true, true), ++calls;
      };
      for (int64_t T = 1; T <= 8; ++T) {
        run(T, p0s[T - 1], 0, T % 2 == 0 ? 300 : 0);
        run(T, p0s[(T + 3) % 8], 1, 0);
      }
      if (s.Hq == 24 && s.bs == 16) {  // forced splits on the 27B shape
        for (int64_t T : {1, 3, 4, 5, 8}) {
          run(T, 95, 4, 0);
          run(T, 94, 4, 0);
          run(T, 95, 10, 200);
          run(T, 2017, 1, 0);
          run(T, 5100 - T, 3, 64);
          run(T, 4099, 33, 0);
        }
      }
    }
    if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_EQ(ran, 0);
    else std::printf("warp-split kernel (tiles mode %d, %s step) ran in %d of %d calls (0: no sm_80 code)\n",
                     static_cast<int>(tiles), lean ? "lean" : "old", ran, calls);
    // Where the kernel runs at all (f16 activations, sm_80 code) every one of these shapes fits it.
    if (ran > 0) {
      EXPECT_EQ(ran, calls);
    }
  }
}

// A recorded step's key bound: the length rounded up to a power of two (BatchPlan::stage),
// so a context just past a power of two launches splits for twice its keys. Every
// combination of the tuning (balanced splits over the true length or splits of the bound;
// the fast or the old combine; PDL launches and no partial buffer for one split; run copies
// or the per-row lookup) over the 27B shape (blocks of 16 and 7), T = 1, 2, 4, 8 on the
// warp-split kernel with the tiles the default picks (1, 2 or 4), the kernel's own split
// counts and forced ones (33 splits over 300 keys: balanced splits of 9 keys, some of them
// empty after the rounding to 16-key slots; more splits than keys), and the CUDA-core kernel
// with the fast combine on D 64, 80 and 37 (D % 4 != 0: the old combine). Against the CPU
// op, NaN in the pool rows past the length.
TEST_P(AttentionDecode, RoundedUpKeyBound) {
  using cuda::DecodeTuning;
  const DecodeTuning modes[] = {
      DecodeTuning{true, true, true, true, true, true, true, false, true},
      DecodeTuning{false, false, false, false, false, false, false, false, false},
      DecodeTuning{true, false, false, true, true, false, true, false, false},
      DecodeTuning{false, true, true, false, true, true, false, false, true},
      DecodeTuning{true, true, true, false, false, false, false, false, false},
      DecodeTuning{true, true, false, true, true, true, false, false, true}};
  for (const DecodeTuning& m : modes) {
    const Tuning tuning(m);
    const std::string what =
        fmt::format("balanced {} fast combine {} pdl {} lean step {} narrow rows {} pre-wait copies {} split V {} "
                    "run copies {}",
                    m.balanced_splits, m.fast_combine, m.pdl, m.lean_share_step, m.narrow_rows, m.pre_wait_copies,
                    m.split_v, m.run_copies);
    SCOPED_TRACE(what);
    int ran = 0, calls = 0;
    for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{24, 4, 256, 7}}) {
      for (auto [T, S] : {TP{1, 8200}, TP{4, 8200}, TP{2, 4100}, TP{8, 2051}, TP{1, 300}, TP{4, 257}, TP{1, 1}}) {
        const int64_t p0 = S - T;
        if (p0 < 0) continue;
        // Tensor cores, the warp-split kernel with the tiles kAuto picks (one group for G 6).
        ran += check_split(s, T, p0, DType::I8, DType::I8, 1, 0, pow2_extra_keys(S), true, true), ++calls;
      }
      if (s.bs == 16) {
        for (int64_t T : {1, 4}) {
          ran += check_split(s, T, 300 - T, DType::I8, DType::I8, 1, 33, 212, true, true), ++calls;
          ran += check_split(s, T, 40 - T, DType::I8, DType::I8, 1, 64, 216, true, true), ++calls;
          ran += check_split(s, T, 8200 - T, DType::I8, DType::I8, 1, 1, 8184, true, true), ++calls;
        }
      }
    }
    for (const Shape& s : {Shape{8, 4, 64, 16}, Shape{6, 3, 80, 7}, Shape{4, 2, 37, 16}})
      for (int64_t T : {1, 4}) check_split(s, T, 1030 - T, DType::I8, DType::I8, INT_MAX, 0, pow2_extra_keys(1030));
    if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_EQ(ran, 0);
    else std::printf("%s: warp-split kernel ran in %d of %d calls (0: no sm_80 code)\n", what.c_str(), ran, calls);
  }
}

// The lean slot step of the shared-slot kernels (DecodeTuning::lean_share_step: Q in mma
// fragment order, table loads ahead of the stream barrier, a running max that moves only
// past a margin of 2^6) and the step before it, each forced with 2 and 4 row tiles per block
// for T = 1..8, against the CPU op on fresh random inputs: the 27B shape (D 256, blocks of
// 16 and 7: the row lookup by shift and by division), D 128 (G 6) and D 64 (G 8, two tiles
// hold one token's rows at T = 4), the kernel's own split count, one split of 2000+ keys
// (the stream rings wrap many times, the max settles, later slots keep a stale max), 33
// splits (slots past a split's end), queries of twice the usual range (a row's max jumps past
// the margin after its first slots, so O is rescaled there), and a recorded step's
// power-of-two key bound (zero-padded table). f16 pools (which the warp-split kernels never
// take) with the flag on and off too. NaN in the pool rows past the length.
TEST_P(AttentionDecode, TensorCoreLeanSlotStep) {
  using cuda::DecodeTcWarpsTiles;
  // The split-V step with its S split too (split-K), the split-V step (the lean step with the V
  // half of each slot split over the warp pair), the lean step, the old step.
  for (int form : {3, 2, 1, 0}) {
    const bool lean = form >= 1;
    cuda::DecodeTuning t = cuda::decode_tuning();
    t.lean_share_step = lean;
    t.split_v = form >= 2;
    t.split_k = form == 3;
    const Tuning tuning(t);
    const char* names[] = {"old", "lean", "split-V", "split-V + split-K"};
    const char* name = names[form];
    SCOPED_TRACE(name);
    int ran = 0, calls = 0, split_v = 0;
    for (DecodeTcWarpsTiles tiles : {DecodeTcWarpsTiles::k2, DecodeTcWarpsTiles::k4}) {
      const WarpTiles forced(tiles);
      for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{24, 4, 256, 7}, Shape{24, 4, 128, 16}, Shape{16, 2, 64, 16}}) {
        const int64_t G = s.Hq / s.Hkv;
        auto run = [&](int64_t T, int64_t p0, int n_splits, int64_t extra, float amp) {
          if (T * G > cuda::kDecodeMaxRows) return;
          ran += check_split(s, T, p0, DType::I8, DType::I8, 1, n_splits, extra, true, true, amp), ++calls;
          split_v += last_split_v;
        };
        for (int64_t T = 1; T <= 8; ++T) {
          run(T, 1500 + 37 * T, 0, 0, 2.0f);
          if (s.bs == 16 && s.D == 256) {
            run(T, 2017, 1, 0, 4.0f);
            run(T, 1300 - T, 33, 0, 2.0f);
            run(T, 2051 - T, 0, pow2_extra_keys(2051), 2.0f);
          }
        }
      }
    }
    for (int64_t T : {4, 8})
      for (DType kv : {DType::F16, DType::I8}) {
        check_split(Shape{24, 4, 256, 16}, T, 900, kv, kv, 1, 0, pow2_extra_keys(900 + T), true, true);
        check_split(Shape{24, 4, 256, 16}, T, 900, kv, DType::F16, 1, 0, 0, true, false);
      }
    if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_EQ(ran, 0);
    else std::printf("%s slot step: shared-slot kernels ran in %d of %d calls, the split-V step in %d (0: no sm_80 code)\n",
                     name, ran, calls, split_v);
    if (ran > 0) {
      EXPECT_EQ(ran, calls);
      // 2 row tiles forced at D 256 with 17..32 rows: T = 3..5 for G 6 (and in groups for more).
      if (form >= 2) EXPECT_GT(split_v, 0);
      else EXPECT_EQ(split_v, 0);
    }
  }
}

// The split-V step runs the lean step's mma on the same operands for every O tile, only on the
// other warp of the pair for half of them: the same bits as the lean step, at T = 3, 4, 5 (the
// shared-slot kernel with 2 row tiles) over the kernel's own splits and few long ones, for
// spread-out and peaked scores.
TEST_P(AttentionDecode, TensorCoreSplitVMatchesLeanStep) {
  if (GetParam().profile == ops::KernelProfile::kVolta) GTEST_SKIP() << "the shared-slot kernels need sm_80 code";
  for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{24, 4, 256, 7}, Shape{40, 4, 160, 16}}) {
    for (int64_t T : {3, 4, 5}) {
      for (float amp : {0.05f, 2.0f}) {
        for (int n_splits : {2, 0}) {
          Tensor out[2];
          bool split[2] = {false, false};
          const unsigned seed = static_cast<unsigned>(rng()());
          for (int form = 0; form < 2; ++form) {
            cuda::DecodeTuning t = cuda::decode_tuning();
            t.lean_share_step = true;
            t.split_v = form == 1;
            const Tuning tuning(t);
            rng().seed(seed);  // the same pools and queries for both
            if (!check_split(s, T, 3000 + 11 * T, DType::I8, DType::I8, 1, n_splits, 0, true, true, amp))
              GTEST_SKIP() << "no sm_80 code: the shared-slot kernel does not run";
            split[form] = last_split_v;
            out[form] = last_out;
          }
          EXPECT_FALSE(split[0]);
          const int64_t G = s.Hq / s.Hkv;
          EXPECT_EQ(split[1], T * G > 16 && T * G <= 32) << "T " << T << " G " << G;
          EXPECT_EQ(words_differ(out[1], out[0]), "")
              << "split-V against lean: D " << s.D << " bs " << s.bs << " T " << T << " q_amp " << amp << " splits "
              << n_splits;
        }
      }
    }
  }
}

// The warp-split kernels' run copies (DecodeTuning::run_copies: one table load a slot, rows a
// stride apart, where a slot's 16 keys are 16 consecutive pool rows) put the same bytes where the
// per-row lookup puts them: the same bits, for the one-tile kernel's 16-row step (T = 1 with the
// narrow step off, T = 2) and the shared-slot kernels' lean and split-V steps (T = 3, 4, 8: 2 and
// 4 row tiles), pool blocks of 16, 32 and 64 keys (shuffled tables), D 256, 128 and 64, the
// kernel's own splits, 33 splits (slots cut by a split's end), one long split, and a recorded
// step's power-of-two key bound (slots past the length). Blocks of 7 keys never take the runs.
TEST_P(AttentionDecode, TensorCoreRunCopiesMatchLookupCopies) {
  if (GetParam().profile == ops::KernelProfile::kVolta) GTEST_SKIP() << "the warp-split kernels need sm_80 code";
  int compared = 0;
  for (const Shape& s : {Shape{24, 4, 256, 16}, Shape{24, 4, 256, 32}, Shape{24, 4, 128, 64}, Shape{16, 2, 64, 16},
                         Shape{24, 4, 256, 7}}) {
    for (int64_t T : {1, 2, 3, 4, 8}) {
      for (bool split_v : {true, false}) {
        if (T < 3 && !split_v) continue;  // one row tile: no split-V step either way
        for (auto [p0, n_splits, extra] : {std::tuple<int64_t, int, int64_t>{1500 + 37 * T, 0, 0},
                                           {1300 - T, 33, 0}, {2017, 1, 0}, {2051 - T, 0, pow2_extra_keys(2051)}}) {
          Tensor out[2];
          bool took[2] = {false, false};
          const unsigned seed = static_cast<unsigned>(rng()());
          for (int form = 0; form < 2; ++form) {
            cuda::DecodeTuning t = cuda::decode_tuning();
            t.lean_share_step = true;
            t.narrow_rows = false;  // the 16-row step at T = 1 (the narrow step always copies runs)
            t.split_v = split_v;
            t.run_copies = form == 1;
            const Tuning tuning(t);
            rng().seed(seed);  // the same pools and queries for both
            if (!check_split(s, T, p0, DType::I8, DType::I8, 1, n_splits, extra, true, true, 2.0f))
              GTEST_SKIP() << "no sm_80 code: the warp-split kernel does not run";
            took[form] = last_runs;
            out[form] = last_out;
          }
          const std::string what = fmt::format("D {} bs {} T {} split V {} pos0 {} splits {} bound+{}", s.D, s.bs, T,
                                               split_v, p0, n_splits, extra);
          EXPECT_FALSE(took[0]) << what;
          EXPECT_EQ(took[1], s.bs % 16 == 0) << what;
          EXPECT_EQ(words_differ(out[1], out[0]), "") << "run copies against the per-row lookup: " << what;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 0);
}

// The output gate (ops::paged_attention's out_gate, Qwen3.5's gated attention) through the op as
// the model calls it: where the fast combine applies it (several splits, D % 4 == 0; counted)
// the output is bit for bit the unfused form's (the kernel, then sigmoid_mul), the gate is left
// as it was, and both are the CPU's gated op within the op's tolerance. One split, D 37 and
// prefill chunks take sigmoid_mul after the kernel (fuses -1: either, by activation dtype).
TEST_P(AttentionDecode, OutputGateFoldedIntoTheCombine) {
  struct Case {
    Shape s;
    DType kv;
    int64_t T, p0;
    int fuses;
  };
  const Case cases[] = {{{24, 4, 256, 16}, DType::I8, 1, 1500, 1},  {{24, 4, 256, 16}, DType::I8, 4, 2111, 1},
                        {{24, 4, 256, 16}, DType::F16, 1, 777, 1},  {{24, 4, 256, 16}, DType::I8, 1, 20, 0},
                        {{9, 3, 80, 16}, DType::F16, 8, 1333, 1},   {{5, 5, 37, 7}, DType::F16, 3, 900, 0},
                        {{24, 4, 256, 16}, DType::I8, 20, 700, -1}};
  int fused_cases = 0;
  for (const Case& c : cases) {
    const Shape& s = c.s;
    const std::string what = fmt::format("Hq={} Hkv={} D={} bs={} {} T={} pos0={}", s.Hq, s.Hkv, s.D, s.bs,
                                         dtype_name(c.kv), c.T, c.p0);
    const int64_t S = c.p0 + c.T, n_blocks = (S + s.bs - 1) / s.bs + 1;
    Tensor table = shuffled_table(n_blocks);
    Pool k = make_pool(c.kv, true, s, n_blocks * s.bs, table, S), v = make_pool(c.kv, false, s, n_blocks * s.bs, table, S);
    const Tensor q = rand_f32({c.T, s.Hq, s.D}, act(), -2, 2), gate = rand_f32({c.T, s.Hq, s.D}, act(), -6, 6);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    Tensor ref = Tensor::empty(DType::F32, {c.T, s.Hq, s.D});
    ops::paged_attention(cpu, q, k.host, v.host, table, s.bs, c.p0, scale, ref, &gate);
    const Tensor dq = up(q), dgate = up(gate), dtable = ops::upload(g, table);
    Tensor out[2];
    uint64_t fused[2] = {0, 0};
    for (int on = 1; on >= 0; --on) {
      cuda::set_decode_gate_fused(on);
      Tensor dout = gpu_empty({c.T, s.Hq, s.D});
      const uint64_t before = cuda::decode_gate_fused_calls();
      ops::paged_attention(g, dq, k.dev, v.dev, dtable, s.bs, c.p0, scale, dout, &dgate);
      fused[on] = cuda::decode_gate_fused_calls() - before;
      out[on] = down(dout);
    }
    cuda::set_decode_gate_fused(-1);
    EXPECT_EQ(fused[0], 0u) << "switched off, yet applied: " << what;
    if (c.fuses >= 0) {
      EXPECT_EQ(fused[1] > 0, c.fuses == 1) << "gate applied by the combine: " << what;
    }
    fused_cases += fused[1] > 0;
    EXPECT_EQ(words_differ(out[1], out[0]), "") << "the combine's gate against sigmoid_mul after it: " << what;
    EXPECT_EQ(words_differ(down(dgate), gate), "") << "the gate changed: " << what;
    EXPECT_CLOSE(out[1], ref, tol(2e-5, 3e-3), "gated attention against the CPU's: " + what);
  }
  EXPECT_GE(fused_cases, 4);
}

TEST_P(AttentionDecode, TensorCoreFits) {
  cuda::DecodeArgs a;
  a.T = 4, a.Hq = 24, a.Hkv = 4, a.D = 256, a.block_size = 16;
  a.q_dtype = DType::F16, a.k_dtype = DType::I8, a.v_dtype = DType::F16;
  EXPECT_TRUE(cuda::decode_tc_fits(a));
  a.q_dtype = DType::F32;  // f32 queries stay on the exact CUDA-core kernel
  EXPECT_FALSE(cuda::decode_tc_fits(a));
  a.q_dtype = DType::F16, a.k_dtype = DType::F32;  // f32 pools too
  EXPECT_FALSE(cuda::decode_tc_fits(a));
  a.k_dtype = DType::F16, a.T = 9;  // past the decode kernel's token limit
  EXPECT_FALSE(cuda::decode_tc_fits(a));
  // The ring kernel: native profile with sm_80 code, 16-byte chunks, not f16 K + i8 V; by
  // default for i8 K and V only.
  a.T = 4, a.k_dtype = DType::I8, a.v_dtype = DType::I8;
  alignas(16) static const int8_t pool[64] = {};
  a.k = pool, a.v = pool;
  if (GetParam().profile == ops::KernelProfile::kVolta) EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  else std::printf("ring kernel on the native profile: %s\n", cuda::decode_tc_ring_fits(g, a) ? "yes" : "no (no sm_80 code)");
  const bool ring_here = cuda::decode_tc_ring_fits(g, a);
  a.D = 200;  // i8 rows of 200 bytes: no whole 16-byte chunks
  EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  a.D = 256, a.k = pool + 8;  // misaligned
  EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  a.k = pool, a.k_dtype = DType::F16;  // f16 K + i8 V: register kernel
  EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  a.v_dtype = DType::F16;  // f16 pools: the ring kernel only when forced
  EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  EXPECT_FALSE(cuda::decode_tc_warps_fits(g, a));
  // The warp-split kernel: by default (kDecodeTcWarpsByDefault) and forced, i8 K and V with <= 16 rows only.
  a.k_dtype = a.v_dtype = DType::I8, a.T = 2;  // 12 rows
  EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), cuda::kDecodeTcWarpsByDefault && ring_here);
  cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAlways);
  EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), ring_here);
  {
    // One row tile per block (forced): more than 16 rows go in row groups of floor(16 / G)
    // tokens; by default up to kDecodeTcWarpsMaxGroups groups.
    const WarpTiles one(cuda::DecodeTcWarpsTiles::k1);
    for (auto [T, groups] : {TP{1, 1}, TP{2, 1}, TP{3, 2}, TP{4, 2}, TP{5, 3}, TP{8, 4}}) {
      a.T = T;
      EXPECT_EQ(cuda::decode_tc_warps_tiles(a), 1) << "T=" << T;
      EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), std::min<int64_t>(2, T)) << "T=" << T;
      EXPECT_EQ(cuda::decode_tc_warps_groups(a), groups) << "T=" << T;
      EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), ring_here) << "T=" << T;
    }
    cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAuto);
    for (int64_t T : {4, 8}) {  // 24 rows (2 groups), 48 rows (4 groups)
      a.T = T;
      EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), cuda::kDecodeTcWarpsByDefault &&
                                                      cuda::decode_tc_warps_groups(a) <= cuda::kDecodeTcWarpsMaxGroups &&
                                                      ring_here)
          << "T=" << T;
    }
    cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAlways);
    a.Hq = 8, a.Hkv = 1, a.T = 8;  // G 8: 2 tokens per group, 4 groups
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 4);
    a.Hq = 3, a.T = 8;  // G 3: groups of 5 + 3 tokens
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), 5);
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 2);
    a.Hq = 1;  // G 1: 8 rows, one group
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), 8);
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 1);
    a.Hq = 17, a.T = 1;  // G 17: not one token in 16 rows
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 0);
    EXPECT_FALSE(cuda::decode_tc_warps_fits(g, a));
  }
  // Tiles by default (kAuto): the tiles the rows need, rounded up to 1, 2 or 4 (at most
  // kDecodeTcWarpsAutoMaxTiles), so G 6 takes one group up to T = 8 and kAuto takes every T.
  a.Hq = 24, a.Hkv = 4;
  for (auto [T, tiles] : {TP{1, 1}, TP{2, 1}, TP{3, 2}, TP{4, 2}, TP{5, 2}, TP{6, 4}, TP{7, 4}, TP{8, 4}}) {
    a.T = T;
    const int64_t want = std::min<int64_t>(tiles, cuda::kDecodeTcWarpsAutoMaxTiles);
    EXPECT_EQ(cuda::decode_tc_warps_tiles(a), want) << "T=" << T;
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), std::min<int64_t>(16 * want / 6, T)) << "T=" << T;
    if (want == tiles) {
      EXPECT_EQ(cuda::decode_tc_warps_groups(a), 1) << "T=" << T;
    }
    cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAuto);
    EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), cuda::kDecodeTcWarpsByDefault &&
                                                    cuda::decode_tc_warps_groups(a) <= cuda::kDecodeTcWarpsMaxGroups &&
                                                    ring_here)
        << "T=" << T;
    cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAlways);
  }
  {
    const WarpTiles two(cuda::DecodeTcWarpsTiles::k2);
    a.T = 8;  // 48 rows in tiles of 32: groups of 5 + 3 tokens
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), 5);
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 2);
    a.Hq = 20, a.Hkv = 1, a.T = 3;  // G 20: one token (20 rows) per group of 32 rows
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), 1);
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 3);
    EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), ring_here);
    a.Hq = 33, a.T = 1;  // G 33: not one token in 32 rows
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 0);
    EXPECT_FALSE(cuda::decode_tc_warps_fits(g, a));
  }
  {
    const WarpTiles four(cuda::DecodeTcWarpsTiles::k4);
    a.Hq = 24, a.Hkv = 4, a.T = 1;  // 6 rows in 64: one group, three idle tiles
    EXPECT_EQ(cuda::decode_tc_warps_tiles(a), 4);
    EXPECT_EQ(cuda::decode_tc_warps_group_tokens(a), 1);
    EXPECT_EQ(cuda::decode_tc_warps_groups(a), 1);
    EXPECT_EQ(cuda::decode_tc_warps_fits(g, a), ring_here);
  }
  a.Hq = 24, a.Hkv = 4, a.T = 2, a.v_dtype = DType::F16;
  EXPECT_FALSE(cuda::decode_tc_warps_fits(g, a));
  cuda::set_decode_tc_warps(cuda::DecodeTcWarps::kAuto);
  a.T = 4, a.k_dtype = a.v_dtype = DType::F16;
  cuda::set_decode_tc_ring(cuda::DecodeTcRing::kAlways);
  EXPECT_EQ(cuda::decode_tc_ring_fits(g, a), ring_here);
  cuda::set_decode_tc_ring(cuda::DecodeTcRing::kNever);
  a.k_dtype = a.v_dtype = DType::I8;
  EXPECT_FALSE(cuda::decode_tc_ring_fits(g, a));
  cuda::set_decode_tc_ring(cuda::DecodeTcRing::kAuto);

  // Plain decode (T = 1, 6 rows) by key bound: where the warp-split kernel fits (native profile,
  // sm_80 code, i8 K and V) tensor cores from kDecodeTcMinKeysWarpsDefault keys, i.e. at any
  // context; else from kDecodeTcMinKeysDefault; f32 queries never. Verification rows (T = 2: 12
  // rows) take tensor cores at any bound. Forcing a key threshold moves both; reset restores.
  a.T = 1, a.q_pos0 = 0;
  for (int64_t bound : {256, 512, 4096, 8191, 8192, 131072}) {
    a.kv_bound = bound;
    const bool warps = cuda::decode_tc_warps_fits(g, a);
    EXPECT_EQ(warps, ring_here) << "bound " << bound;  // fits wherever sm_80 code runs
    const int64_t from = warps ? cuda::kDecodeTcMinKeysWarpsDefault : cuda::kDecodeTcMinKeysDefault;
    EXPECT_EQ(cuda::decode_tc_takes(g, a), bound >= from) << "bound " << bound << (warps ? ", warp-split" : "");
    a.T = 2;
    EXPECT_TRUE(cuda::decode_tc_takes(g, a)) << "bound " << bound;
    a.q_dtype = DType::F32;
    EXPECT_FALSE(cuda::decode_tc_takes(g, a)) << "bound " << bound;
    a.q_dtype = DType::F16, a.T = 1;
  }
  a.kv_bound = 512;
  cuda::set_decode_tc_min_keys(INT64_MAX);
  EXPECT_FALSE(cuda::decode_tc_takes(g, a));
  cuda::reset_decode_tc_min_keys();
  EXPECT_EQ(cuda::decode_tc_takes(g, a), ring_here);
}

VI_CUDA_INSTANTIATE(AttentionDecode);

}  // namespace
}  // namespace vi::cudatest
