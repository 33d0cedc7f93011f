// gated_delta_rule on the CPU backend: both forms against a double-precision recurrence
// (MODEL_QWEN35 §5.3 written out literally), chunked against recurrent, the state carried
// across calls (mixed forms, random split points), both GVA layouts, f16/bf16, and errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "core/thread_pool.h"
#include "ops/gdn.h"
#include "test_gdn_util.h"

namespace vi {
namespace {

using gdn_test::make;
using gdn_test::Rng;
using gdn_test::values;
using ops::DeltaRuleForm;
using ops::GvaLayout;

struct Shape {
  int64_t T, Hk, Hv, dk, dv;
};

// One problem in host vectors: q, k [T, Hk, dk]; v [T, Hv, dv]; g, beta [T, Hv];
// state [Hv, dk, dv]. q and k are unit vectors (q then scaled by dk^-1/2) as after the
// l2_norm op, so the recurrence is as well conditioned as in the model.
struct Problem {
  Shape s;
  std::vector<float> q, k, v, g, beta, state;
};

Problem random_problem(Rng& rng, Shape s, double state_sd = 0.5) {
  Problem p{s, {}, {}, {}, {}, {}, {}};
  auto unit_rows = [&](int64_t rows, int64_t n, double scale) {
    std::vector<float> x = rng.normals(rows * n);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      for (int64_t i = 0; i < n; ++i) x[r * n + i] = float(x[r * n + i] / std::sqrt(ss) * scale);
    }
    return x;
  };
  p.q = unit_rows(s.T * s.Hk, s.dk, 1.0 / std::sqrt(double(s.dk)));
  p.k = unit_rows(s.T * s.Hk, s.dk, 1.0);
  p.v = rng.normals(s.T * s.Hv * s.dv);
  p.g.resize(s.T * s.Hv);
  p.beta.resize(s.T * s.Hv);
  for (int64_t i = 0; i < s.T * s.Hv; ++i) {
    // Decays from almost none (α ≈ 0.998) to strong (α ≈ 0.19), write strengths in (0, 1).
    p.g[i] = static_cast<float>(-std::exp(rng.uniform(-6.0, 0.5)));
    p.beta[i] = static_cast<float>(rng.uniform(0.0, 1.0));
  }
  p.state = rng.normals(s.Hv * s.dk * s.dv, state_sd);
  return p;
}

int64_t key_head(const Shape& s, GvaLayout layout, int64_t j) {
  return layout == GvaLayout::kGrouped ? j / (s.Hv / s.Hk) : j % s.Hk;
}

// §5.3 in double, token by token: decay, predict from the decayed state, delta write, read
// out with the updated state. `state` is updated in place; returns out [T, Hv, dv].
std::vector<double> delta_rule_ref(const Problem& p, GvaLayout layout, std::vector<double>& state) {
  const Shape& s = p.s;
  std::vector<double> out(s.T * s.Hv * s.dv), m(s.dv);
  for (int64_t j = 0; j < s.Hv; ++j) {
    const int64_t h = key_head(s, layout, j);
    double* S = state.data() + j * s.dk * s.dv;
    for (int64_t t = 0; t < s.T; ++t) {
      const float* q = p.q.data() + (t * s.Hk + h) * s.dk;
      const float* k = p.k.data() + (t * s.Hk + h) * s.dk;
      const float* v = p.v.data() + (t * s.Hv + j) * s.dv;
      const double alpha = std::exp(double(p.g[t * s.Hv + j])), b = p.beta[t * s.Hv + j];
      for (int64_t i = 0; i < s.dk * s.dv; ++i) S[i] *= alpha;
      for (int64_t e = 0; e < s.dv; ++e) {
        m[e] = 0.0;
        for (int64_t c = 0; c < s.dk; ++c) m[e] += S[c * s.dv + e] * k[c];
      }
      for (int64_t c = 0; c < s.dk; ++c)
        for (int64_t e = 0; e < s.dv; ++e) S[c * s.dv + e] += k[c] * b * (v[e] - m[e]);
      for (int64_t e = 0; e < s.dv; ++e) {
        double o = 0.0;
        for (int64_t c = 0; c < s.dk; ++c) o += S[c * s.dv + e] * q[c];
        out[(t * s.Hv + j) * s.dv + e] = o;
      }
    }
  }
  return out;
}

struct Result {
  std::vector<float> out, state;
};

// Runs the op on tokens [t0, t1) of p, starting from `state` (updated).
Result run_op(const Problem& p, int64_t t0, int64_t t1, std::vector<float> state, GvaLayout layout,
              DeltaRuleForm form, DType dt = DType::F32) {
  const Shape& s = p.s;
  const int64_t n = t1 - t0;
  auto part = [&](const std::vector<float>& x, int64_t per_token) {
    return std::vector<float>(x.begin() + t0 * per_token, x.begin() + t1 * per_token);
  };
  Tensor q = make(dt, {n, s.Hk, s.dk}, part(p.q, s.Hk * s.dk));
  Tensor k = make(dt, {n, s.Hk, s.dk}, part(p.k, s.Hk * s.dk));
  Tensor v = make(dt, {n, s.Hv, s.dv}, part(p.v, s.Hv * s.dv));
  Tensor g = make(DType::F32, {n, s.Hv}, part(p.g, s.Hv));
  Tensor beta = make(DType::F32, {n, s.Hv}, part(p.beta, s.Hv));
  Tensor st = make(DType::F32, {s.Hv, s.dk, s.dv}, state);
  Tensor out = Tensor::empty(dt, {n, s.Hv, s.dv});
  ops::Context ctx;
  ops::gated_delta_rule(ctx, q, k, v, g, beta, st, layout, form, out);
  return {values(out), values(st)};
}

std::vector<double> to_double(const std::vector<float>& x) { return {x.begin(), x.end()}; }

const char* form_name(DeltaRuleForm f) {
  return f == DeltaRuleForm::kChunked ? "chunked" : "recurrent";
}

// fp32 against the double recurrence, relative to the largest reference value. Rounding
// errors of a step are ~1e-7 relative; the decaying state forgets old ones, so they stay
// well below this over a few hundred tokens (measured: at most ~2e-6 over many seeds).
constexpr double kTolF32 = 1e-5;

TEST(GdnDeltaRule, BothFormsMatchDoubleRecurrence) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  double worst = 0.0;
  for (auto [Hk, Hv] : {std::pair<int64_t, int64_t>{2, 6}, {3, 3}}) {
    for (auto [dk, dv] : {std::pair<int64_t, int64_t>{16, 16}, {32, 32}, {24, 40}}) {
      for (int64_t T : {1, 2, 5, 63, 64, 65, 130}) {
        const Shape s{T, Hk, Hv, dk, dv};
        const Problem p = random_problem(rng, s);
        for (GvaLayout layout : {GvaLayout::kGrouped, GvaLayout::kTiled}) {
          std::vector<double> ref_state = to_double(p.state);
          const auto ref = delta_rule_ref(p, layout, ref_state);
          for (DeltaRuleForm form : {DeltaRuleForm::kRecurrent, DeltaRuleForm::kChunked}) {
            SCOPED_TRACE(testing::Message()
                         << "T=" << T << " Hk=" << Hk << " Hv=" << Hv << " dk=" << dk
                         << " dv=" << dv << " " << form_name(form)
                         << (layout == GvaLayout::kTiled ? " tiled" : " grouped"));
            const Result r = run_op(p, 0, T, p.state, layout, form);
            const double e_out = gdn_test::max_rel_err(r.out, ref);
            const double e_state = gdn_test::max_rel_err(r.state, ref_state);
            EXPECT_LT(e_out, kTolF32);
            EXPECT_LT(e_state, kTolF32);
            worst = std::max({worst, e_out, e_state});
          }
        }
      }
    }
  }
  std::printf("worst relative error vs double: %.3g\n", worst);
}

TEST(GdnDeltaRule, ChunkedEqualsRecurrent) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  for (int rep = 0; rep < 12; ++rep) {
    const int64_t Hk = rng.integer(1, 3), Hv = Hk * rng.integer(1, 3);
    const Shape s{rng.integer(1, 300), Hk, Hv, 8 * rng.integer(1, 8) + rng.integer(0, 1),
                  8 * rng.integer(1, 8) + rng.integer(0, 1)};
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " Hk=" << s.Hk << " Hv=" << s.Hv
                                    << " dk=" << s.dk << " dv=" << s.dv);
    const Problem p = random_problem(rng, s);
    const GvaLayout layout = rep % 2 ? GvaLayout::kTiled : GvaLayout::kGrouped;
    const Result rec = run_op(p, 0, s.T, p.state, layout, DeltaRuleForm::kRecurrent);
    const Result chk = run_op(p, 0, s.T, p.state, layout, DeltaRuleForm::kChunked);
    EXPECT_LT(gdn_test::max_rel_err(chk.out, rec.out), kTolF32);
    EXPECT_LT(gdn_test::max_rel_err(chk.state, rec.state), kTolF32);
  }
}

// Prefill in pieces then decode token by token must equal one long call: the state is the
// only memory between calls, in either form.
TEST(GdnDeltaRule, StateCarriedAcrossCallsEqualsOneCall) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  for (int rep = 0; rep < 8; ++rep) {
    const Shape s{rng.integer(70, 260), 2, 6, 16, 32};
    const Problem p = random_problem(rng, s, 0.0);  // a fresh sequence: zero state
    const GvaLayout layout = rep % 2 ? GvaLayout::kTiled : GvaLayout::kGrouped;
    std::vector<double> ref_state = to_double(p.state);
    const auto ref = delta_rule_ref(p, layout, ref_state);
    const Result whole = run_op(p, 0, s.T, p.state, layout, DeltaRuleForm::kChunked);

    std::vector<float> out, state = p.state;
    std::string plan;
    int64_t t0 = 0;
    const int64_t prefill_end = rng.integer(1, s.T - 1);  // chunked pieces up to here
    while (t0 < s.T) {
      const bool prefill = t0 < prefill_end;
      const int64_t len = prefill ? std::min(prefill_end - t0, rng.integer(1, 100))
                                  : std::min(s.T - t0, rng.integer(1, 3));
      const DeltaRuleForm form = prefill ? DeltaRuleForm::kChunked : DeltaRuleForm::kRecurrent;
      Result r = run_op(p, t0, t0 + len, state, layout, form);
      out.insert(out.end(), r.out.begin(), r.out.end());
      state = r.state;
      plan += std::string(prefill ? "c" : "r") + std::to_string(len) + " ";
      t0 += len;
    }
    SCOPED_TRACE(testing::Message() << "T=" << s.T << " pieces: " << plan);
    EXPECT_LT(gdn_test::max_rel_err(out, whole.out), kTolF32);
    EXPECT_LT(gdn_test::max_rel_err(state, whole.state), kTolF32);
    EXPECT_LT(gdn_test::max_rel_err(out, ref), kTolF32);
    EXPECT_LT(gdn_test::max_rel_err(state, ref_state), kTolF32);
  }
}

// The llama.cpp converter stores v head g·r + m at index m·Hk + g and tiles (j % Hk).
// Running the permuted problem tiled must give the permuted outputs and state, bit for bit:
// each head's arithmetic is the same, only its index moves.
TEST(GdnDeltaRule, TiledLayoutWithConverterPermutationMatchesGrouped) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  for (auto [Hk, Hv] : {std::pair<int64_t, int64_t>{2, 6}, {3, 3}, {4, 8}}) {
    const Shape s{97, Hk, Hv, 16, 24};
    const Problem p = random_problem(rng, s);
    const int64_t r = Hv / Hk;
    std::vector<int64_t> src(Hv);  // tiled head index -> grouped (HF) head index
    for (int64_t g = 0; g < Hk; ++g)
      for (int64_t m = 0; m < r; ++m) src[m * Hk + g] = g * r + m;
    Problem pp = p;
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t j = 0; j < Hv; ++j) {
        std::copy_n(p.v.begin() + (t * Hv + src[j]) * s.dv, s.dv, pp.v.begin() + (t * Hv + j) * s.dv);
        pp.g[t * Hv + j] = p.g[t * Hv + src[j]];
        pp.beta[t * Hv + j] = p.beta[t * Hv + src[j]];
      }
    }
    const int64_t hs = s.dk * s.dv;
    for (int64_t j = 0; j < Hv; ++j)
      std::copy_n(p.state.begin() + src[j] * hs, hs, pp.state.begin() + j * hs);
    for (DeltaRuleForm form : {DeltaRuleForm::kRecurrent, DeltaRuleForm::kChunked}) {
      SCOPED_TRACE(testing::Message() << "Hk=" << Hk << " Hv=" << Hv << " " << form_name(form));
      const Result grouped = run_op(p, 0, s.T, p.state, GvaLayout::kGrouped, form);
      const Result tiled = run_op(pp, 0, s.T, pp.state, GvaLayout::kTiled, form);
      int mismatches = 0;
      for (int64_t t = 0; t < s.T; ++t)
        for (int64_t j = 0; j < Hv; ++j)
          for (int64_t e = 0; e < s.dv; ++e)
            mismatches += tiled.out[(t * Hv + j) * s.dv + e] !=
                          grouped.out[(t * Hv + src[j]) * s.dv + e];
      for (int64_t j = 0; j < Hv; ++j)
        for (int64_t i = 0; i < hs; ++i)
          mismatches += tiled.state[j * hs + i] != grouped.state[src[j] * hs + i];
      EXPECT_EQ(mismatches, 0);
      // And the two layouts really differ when heads are shared (else the test proves nothing).
      if (r > 1) {
        const Result unpermuted = run_op(p, 0, s.T, p.state, GvaLayout::kTiled, form);
        EXPECT_GT(gdn_test::max_rel_err(unpermuted.out, grouped.out), 1e-2);
      }
    }
  }
}

TEST(GdnDeltaRule, HalfTypesMatchDoubleOnRoundedInputs) {
  const uint64_t seed = gdn_test::fresh_seed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  Rng rng(seed);
  for (DType dt : {DType::F16, DType::BF16}) {
    Problem p = random_problem(rng, {77, 2, 4, 32, 16});
    p.q = gdn_test::rounded(p.q, dt);
    p.k = gdn_test::rounded(p.k, dt);
    p.v = gdn_test::rounded(p.v, dt);
    std::vector<double> ref_state = to_double(p.state);
    const auto ref = delta_rule_ref(p, GvaLayout::kGrouped, ref_state);
    for (DeltaRuleForm form : {DeltaRuleForm::kRecurrent, DeltaRuleForm::kChunked}) {
      SCOPED_TRACE(testing::Message() << dtype_name(dt) << " " << form_name(form));
      const Result r = run_op(p, 0, p.s.T, p.state, GvaLayout::kGrouped, form, dt);
      // The state stays fp32; only the output is rounded once to the storage type.
      EXPECT_LT(gdn_test::max_rel_err(r.state, ref_state), kTolF32);
      EXPECT_LT(gdn_test::max_rel_err(r.out, ref), dt == DType::F16 ? 1.0 / 1024 : 1.0 / 128);
    }
  }
}

TEST(GdnDeltaRule, RejectsBadShapesAndTypes) {
  ops::Context ctx;
  const int64_t T = 5, Hk = 2, Hv = 6, dk = 8, dv = 4;
  auto z = [](DType t, std::vector<int64_t> shape) { return gdn_test::zeros(t, shape); };
  Tensor q = z(DType::F32, {T, Hk, dk}), k = z(DType::F32, {T, Hk, dk});
  Tensor v = z(DType::F32, {T, Hv, dv}), g = z(DType::F32, {T, Hv}), b = z(DType::F32, {T, Hv});
  Tensor st = z(DType::F32, {Hv, dk, dv}), out = z(DType::F32, {T, Hv, dv});
  const auto G = GvaLayout::kGrouped;
  const auto C = DeltaRuleForm::kChunked;
  EXPECT_NO_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st, G, C, out));
  Tensor v5 = z(DType::F32, {T, 5, dv}), o5 = z(DType::F32, {T, 5, dv});
  Tensor g5 = z(DType::F32, {T, 5}), st5 = z(DType::F32, {5, dk, dv});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v5, g5, g5, st5, G, C, o5), Error);  // 5 % 2
  Tensor k_bad = z(DType::F32, {T, Hk, dk + 1});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k_bad, v, g, b, st, G, C, out), Error);
  Tensor st_t = z(DType::F32, {Hv, dv, dk});  // transposed state
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st_t, G, C, out), Error);
  Tensor st16 = z(DType::F16, {Hv, dk, dv});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st16, G, C, out), Error);
  Tensor g_short = z(DType::F32, {T - 1, Hv});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g_short, b, st, G, C, out), Error);
  Tensor b16 = z(DType::F16, {T, Hv});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b16, st, G, C, out), Error);
  Tensor v_bf = z(DType::BF16, {T, Hv, dv});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v_bf, g, b, st, G, C, out), Error);
  Tensor out_bad = z(DType::F32, {T, Hv, dv + 1});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st, G, C, out_bad), Error);
  Tensor q2 = z(DType::F32, {T, Hk * dk});
  EXPECT_THROW(ops::gated_delta_rule(ctx, q2, k, v, g, b, st, G, C, out), Error);
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st, static_cast<GvaLayout>(7), C, out),
               Error);
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st, G, static_cast<DeltaRuleForm>(7), out),
               Error);
  Tensor st_gpu = Tensor::view(DType::F32, {Hv, dk, dv}, st.data(), nullptr, Device::CUDA);
  EXPECT_THROW(ops::gated_delta_rule(ctx, q, k, v, g, b, st_gpu, G, C, out), Error);
}

// Not a pass/fail check: prints the single-thread speed of both forms on a head of
// Qwen3.5's size (d = 128), best of 5, so a regression in the prefill path is visible.
TEST(GdnDeltaRule, ReportsSpeed) {
  Rng rng(1234);
  const Shape s{512, 1, 2, 128, 128};
  const Problem p = random_problem(rng, s);
  Tensor q = make(DType::F32, {s.T, s.Hk, s.dk}, p.q), k = make(DType::F32, {s.T, s.Hk, s.dk}, p.k);
  Tensor v = make(DType::F32, {s.T, s.Hv, s.dv}, p.v), g = make(DType::F32, {s.T, s.Hv}, p.g);
  Tensor beta = make(DType::F32, {s.T, s.Hv}, p.beta);
  Tensor st = make(DType::F32, {s.Hv, s.dk, s.dv}, p.state);
  Tensor out = Tensor::empty(DType::F32, {s.T, s.Hv, s.dv});
  ThreadPool pool(1);
  ops::Context ctx;
  ctx.pool = &pool;
  for (DeltaRuleForm form : {DeltaRuleForm::kRecurrent, DeltaRuleForm::kChunked}) {
    double best = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      ops::gated_delta_rule(ctx, q, k, v, g, beta, st, GvaLayout::kGrouped, form, out);
      best = std::min(best, std::chrono::duration<double, std::micro>(
                                std::chrono::steady_clock::now() - t0).count());
    }
    // The recurrence costs 3·dk·dv multiply-adds per token and head, whichever form runs.
    const double per = best / double(s.T * s.Hv);
    std::printf("%s, 1 thread, d=128: %.2f us per token per head (%.1f GMAC/s of recurrence)\n",
                form_name(form), per, 3.0 * 128 * 128 / per / 1e3);
  }
  const auto o = values(out);
  EXPECT_TRUE(std::all_of(o.begin(), o.end(), [](float x) { return std::isfinite(x); }));
}

}  // namespace
}  // namespace vi
