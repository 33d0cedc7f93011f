// CPU kernel of gated_delta_rule (MODEL_QWEN35 §5.3 and §5.4): the recurrent form (one step
// per token, used for decode) and the chunked WY/UT form (chunks of 64 tokens, used for
// prefill). Both keep the per-value-head state S [dk, dv] in fp32 and are threaded over
// value heads; within a head everything is sequential.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/gdn_util.h"
#include "ops/gdn.h"

namespace vi::cpu::gdn {
namespace {

using ops::DeltaRuleForm;
using ops::GvaLayout;

constexpr int64_t kChunk = 64;  // the chunk length HF, FLA and llama.cpp use

// 16 floats as one value: GCC/Clang vector extensions, lowered to one AVX-512 register or
// to two AVX2 / four SSE registers as the target allows. Plain loops over runtime strides
// reached only ~4 GMAC/s here; explicit register tiles reach ~40.
// Loads and stores go through references: passing a 64-byte vector by value has a
// target-dependent ABI (-Wpsabi) when AVX-512 is not enabled.
typedef float Vec16 __attribute__((vector_size(64)));
inline void load16(Vec16& v, const float* p) { __builtin_memcpy(&v, p, sizeof v); }
inline void store16(float* p, const Vec16& v) { __builtin_memcpy(p, &v, sizeof v); }

// One MR x (16·NV) tile of C += alpha·A·B, accumulated in registers over the whole Kd loop.
template <int MR, int NV>
inline void gemm_tile(int64_t Kd, float alpha, const float* A, int64_t lda, const float* B,
                      int64_t ldb, float* C, int64_t ldc) {
  Vec16 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = Vec16{};
  for (int64_t k = 0; k < Kd; ++k) {
    Vec16 b[NV];
    for (int v = 0; v < NV; ++v) load16(b[v], B + k * ldb + 16 * v);
    for (int i = 0; i < MR; ++i) {
      const float a = A[i * lda + k];
      for (int v = 0; v < NV; ++v) acc[i][v] += a * b[v];
    }
  }
  for (int i = 0; i < MR; ++i) {
    for (int v = 0; v < NV; ++v) {
      float* c = C + i * ldc + 16 * v;
      Vec16 cv;
      load16(cv, c);
      cv += alpha * acc[i][v];
      store16(c, cv);
    }
  }
}

// Columns [j0, j1) of MR rows of C += alpha·A·B, one scalar row at a time (ragged edges).
void gemm_scalar(int64_t MR, int64_t j0, int64_t j1, int64_t Kd, float alpha, const float* A,
                 int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  for (int64_t i = 0; i < MR; ++i) {
    float* c = C + i * ldc;
    for (int64_t k = 0; k < Kd; ++k) {
      const float a = alpha * A[i * lda + k];
      const float* b = B + k * ldb;
      for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
    }
  }
}

// All N columns of MR rows: 16·NV-wide register tiles, then 16-wide ones, then scalars.
template <int MR, int NV>
void gemm_rows(int64_t N, int64_t Kd, float alpha, const float* A, int64_t lda, const float* B,
               int64_t ldb, float* C, int64_t ldc) {
  int64_t j = 0;
  for (; j + 16 * NV <= N; j += 16 * NV)
    gemm_tile<MR, NV>(Kd, alpha, A, lda, B + j, ldb, C + j, ldc);
  for (; j + 16 <= N; j += 16) gemm_tile<MR, 1>(Kd, alpha, A, lda, B + j, ldb, C + j, ldc);
  if (j < N) gemm_scalar(MR, j, N, Kd, alpha, A, lda, B, ldb, C, ldc);
}

// C[M, N] += alpha * A[M, Kd] · B[Kd, N]; all row-major with leading dimensions. C must not
// overlap A or B. Rows go in fours (each B vector feeds four accumulators), the rest singly.
void gemm_acc(int64_t M, int64_t N, int64_t Kd, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc) {
  int64_t i = 0;
  for (; i + 4 <= M; i += 4) gemm_rows<4, 2>(N, Kd, alpha, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
  for (; i < M; ++i) gemm_rows<1, 4>(N, Kd, alpha, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
}

// Row-major view of the inputs of one call; p(t, h) is the start of one head's row.
template <class E>
struct Rows {
  using S = typename E::Storage;
  const S* base;
  int64_t heads, width;
  const S* p(int64_t t, int64_t h) const { return base + (t * heads + h) * width; }
};

struct Dims {
  int64_t T, Hk, Hv, dk, dv;
  GvaLayout layout;
  // The q/k head that value head j reads (MODEL_QWEN35 §5.2 step 5, §6.3).
  int64_t key_head(int64_t j) const {
    return layout == GvaLayout::kGrouped ? j / (Hv / Hk) : j % Hk;
  }
};

// Columns [e0, e0 + 16·NV) of the fused decode update: S ← αS + k·δᵀ, o = Sᵀq. The NV
// independent accumulators hide the FMA latency of the running sum over dk.
template <int NV>
inline void decay_write_read(int64_t dk, int64_t dv, int64_t e0, float alpha, const float* kf,
                             const float* qf, const float* delta, float* S, float* o) {
  Vec16 dl[NV], acc[NV];
  for (int v = 0; v < NV; ++v) {
    load16(dl[v], delta + e0 + 16 * v);
    acc[v] = Vec16{};
  }
  for (int64_t r = 0; r < dk; ++r) {
    float* s = S + r * dv + e0;
    for (int v = 0; v < NV; ++v) {
      Vec16 sv;
      load16(sv, s + 16 * v);
      sv = alpha * sv + kf[r] * dl[v];
      store16(s + 16 * v, sv);
      acc[v] += qf[r] * sv;
    }
  }
  for (int v = 0; v < NV; ++v) store16(o + e0 + 16 * v, acc[v]);
}

// §5.3 step by step, in two passes over S per token: the prediction m = Sᵀk is taken from
// the old state and decayed afterwards (α·(Sᵀk) = (αS)ᵀk), then one pass decays, writes
// and reads out with the updated state.
template <class E>
void recurrent_head(const Dims& d, int64_t j, const Rows<E>& q, const Rows<E>& k,
                    const Rows<E>& v, const float* g, const float* beta, float* S,
                    typename E::Storage* out) {
  std::vector<float> buf(static_cast<size_t>(2 * d.dk + 3 * d.dv));
  float* qf = buf.data();
  float* kf = qf + d.dk;
  float* vf = kf + d.dk;
  float* delta = vf + d.dv;
  float* o = delta + d.dv;
  const int64_t h = d.key_head(j), dv = d.dv;
  for (int64_t t = 0; t < d.T; ++t) {
    load_row<E>(q.p(t, h), d.dk, qf);
    load_row<E>(k.p(t, h), d.dk, kf);
    load_row<E>(v.p(t, j), dv, vf);
    const float alpha = std::exp(g[t * d.Hv + j]);
    const float b = beta[t * d.Hv + j];
    std::fill_n(delta, dv, 0.0f);
    gemm_acc(1, dv, d.dk, 1.0f, kf, d.dk, S, dv, delta, dv);  // m = Sᵀk (old S)
    for (int64_t e = 0; e < dv; ++e) delta[e] = b * (vf[e] - alpha * delta[e]);
    int64_t e0 = 0;
    for (; e0 + 64 <= dv; e0 += 64) decay_write_read<4>(d.dk, dv, e0, alpha, kf, qf, delta, S, o);
    for (; e0 + 16 <= dv; e0 += 16) decay_write_read<1>(d.dk, dv, e0, alpha, kf, qf, delta, S, o);
    if (e0 < dv) {  // ragged tail of a dv that is not a multiple of 16
      std::fill(o + e0, o + dv, 0.0f);
      for (int64_t r = 0; r < d.dk; ++r) {
        float* s = S + r * dv;
        for (int64_t e = e0; e < dv; ++e) {
          s[e] = alpha * s[e] + kf[r] * delta[e];
          o[e] += qf[r] * s[e];
        }
      }
    }
    store_row<E>(o, dv, out + (t * d.Hv + j) * dv);
  }
}

// Per-thread buffers of the chunked form, sized for one full chunk.
struct ChunkScratch {
  std::vector<float> Q, K, Kt, UW, O, KK, QK, gam, eg, bt;
  ChunkScratch(int64_t dk, int64_t dv)
      : Q(kChunk * dk), K(kChunk * dk), Kt(dk * kChunk), UW(kChunk * (dv + dk)), O(kChunk * dv),
        KK(kChunk * kChunk), QK(kChunk * kChunk), gam(kChunk), eg(kChunk), bt(kChunk) {}
};

// §5.4 for one value head, chunk after chunk. The last chunk runs with its true length n:
// that is exactly what zero padding to 64 computes (padded rows have k = v = 0, beta = 0 and
// g = 0, so they add nothing to the outputs, to U/W, or to the state).
template <class E>
void chunked_head(const Dims& d, int64_t j, const Rows<E>& q, const Rows<E>& k, const Rows<E>& v,
                  const float* g, const float* beta, float* S, typename E::Storage* out,
                  ChunkScratch& w) {
  const int64_t dk = d.dk, dv = d.dv, ldu = dv + dk, h = d.key_head(j);
  float* Q = w.Q.data();    // [n, dk]
  float* K = w.K.data();    // [n, dk]
  float* Kt = w.Kt.data();  // [dk, 64]: Kᵀ, later (exp(Γ_last − Γ) ⊙ K)ᵀ
  float* U = w.UW.data();   // [n, dv] of the [n, dv + dk] block: U, then V_new
  float* W = U + dv;        // [n, dk] of the same block
  float* O = w.O.data();    // [n, dv]
  float* KK = w.KK.data();  // [n, 64]: K·Kᵀ, then L (strictly lower)
  float* QK = w.QK.data();  // [n, 64]: Q·Kᵀ, then M ⊙ Q·Kᵀ (lower incl. diagonal)
  float* gam = w.gam.data();
  float* eg = w.eg.data();
  float* bt = w.bt.data();

  for (int64_t t0 = 0; t0 < d.T; t0 += kChunk) {
    const int64_t n = std::min(kChunk, d.T - t0);
    float cum = 0.0f;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = t0 + r;
      load_row<E>(q.p(t, h), dk, Q + r * dk);
      load_row<E>(k.p(t, h), dk, K + r * dk);
      for (int64_t c = 0; c < dk; ++c) Kt[c * kChunk + r] = K[r * dk + c];
      cum += g[t * d.Hv + j];
      gam[r] = cum;  // Γ_r, inclusive cumulative log-decay
      eg[r] = std::exp(cum);
      bt[r] = beta[t * d.Hv + j];
    }

    // Pairwise products; only the lower triangles are used below.
    std::fill_n(KK, n * kChunk, 0.0f);
    std::fill_n(QK, n * kChunk, 0.0f);
    gemm_acc(n, n, dk, 1.0f, K, dk, Kt, kChunk, KK, kChunk);
    gemm_acc(n, n, dk, 1.0f, Q, dk, Kt, kChunk, QK, kChunk);
    // L[r,s] = β_r (k_r·k_s) exp(Γ_r − Γ_s) for s < r; M ⊙ QK for s <= r; zeros above, so
    // the exponent is never positive and nothing can overflow.
    for (int64_t r = 0; r < n; ++r) {
      float* l = KK + r * kChunk;
      float* m = QK + r * kChunk;
      for (int64_t s = 0; s < r; ++s) {
        const float decay = std::exp(gam[r] - gam[s]);
        l[s] *= bt[r] * decay;
        m[s] *= decay;
      }
      std::fill(l + r, l + n, 0.0f);
      std::fill(m + r + 1, m + n, 0.0f);
    }

    // Forward substitution of (I + L)·[U | W] = [diag(β)·V | diag(β·exp(Γ))·K].
    for (int64_t r = 0; r < n; ++r) {
      float* uw = U + r * ldu;
      load_row<E>(v.p(t0 + r, j), dv, uw);
      for (int64_t e = 0; e < dv; ++e) uw[e] *= bt[r];
      const float bk = bt[r] * eg[r];
      for (int64_t c = 0; c < dk; ++c) uw[dv + c] = bk * K[r * dk + c];
      // uw −= L[r, :r]·[U | W][:r] (rows above r are final already).
      gemm_acc(1, ldu, r, -1.0f, KK + r * kChunk, kChunk, U, ldu, uw, ldu);
    }

    // V_new = U − W·S (in place in U); O = diag(exp(Γ))·Q·S + (M ⊙ Q·Kᵀ)·V_new.
    gemm_acc(n, dv, dk, -1.0f, W, ldu, S, dv, U, ldu);
    std::fill_n(O, n * dv, 0.0f);
    gemm_acc(n, dv, dk, 1.0f, Q, dk, S, dv, O, dv);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t e = 0; e < dv; ++e) O[r * dv + e] *= eg[r];
    gemm_acc(n, dv, n, 1.0f, QK, kChunk, U, ldu, O, dv);
    for (int64_t r = 0; r < n; ++r)
      store_row<E>(O + r * dv, dv, out + ((t0 + r) * d.Hv + j) * dv);

    // S ← exp(Γ_last)·S + (diag(exp(Γ_last − Γ))·K)ᵀ·V_new.
    const float last = gam[n - 1];
    for (int64_t s = 0; s < n; ++s) {
      const float f = std::exp(last - gam[s]);
      for (int64_t c = 0; c < dk; ++c) Kt[c * kChunk + s] *= f;
    }
    const float decay_all = eg[n - 1];
    for (int64_t i = 0; i < dk * dv; ++i) S[i] *= decay_all;
    gemm_acc(dk, dv, n, 1.0f, Kt, kChunk, U, ldu, S, dv);
  }
}

// q, k: [T, Hk, dk]; v, out: [T, Hv, dv] of E; g, beta: [T, Hv] f32; state: [Hv, dk, dv] f32.
template <class E>
void gated_delta_rule_cpu(ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& g, const Tensor& beta, Tensor& state, GvaLayout layout,
                          DeltaRuleForm form, Tensor& out) {
  using S = typename E::Storage;
  const Dims d{q.dim(0), q.dim(1), v.dim(1), q.dim(2), v.dim(2), layout};
  const Rows<E> qr{q.ptr<S>(), d.Hk, d.dk}, kr{k.ptr<S>(), d.Hk, d.dk}, vr{v.ptr<S>(), d.Hv, d.dv};
  const float* gp = g.ptr<float>();
  const float* bp = beta.ptr<float>();
  float* sp = state.ptr<float>();
  S* op = out.ptr<S>();
  pool_of(ctx).parallel_for(d.Hv, 1, [&](int64_t j0, int64_t j1, int) {
    if (form == DeltaRuleForm::kRecurrent) {
      for (int64_t j = j0; j < j1; ++j)
        recurrent_head<E>(d, j, qr, kr, vr, gp, bp, sp + j * d.dk * d.dv, op);
    } else {
      ChunkScratch scratch(d.dk, d.dv);
      for (int64_t j = j0; j < j1; ++j)
        chunked_head<E>(d, j, qr, kr, vr, gp, bp, sp + j * d.dk * d.dv, op, scratch);
    }
  });
}

const bool registered = [] {
  auto& table = ops::gated_delta_rule_table();
  table.add(Device::CPU, DType::F32, &gated_delta_rule_cpu<F32>);
  table.add(Device::CPU, DType::F16, &gated_delta_rule_cpu<F16>);
  table.add(Device::CPU, DType::BF16, &gated_delta_rule_cpu<BF16>);
  return true;
}();

}  // namespace
}  // namespace vi::cpu::gdn
