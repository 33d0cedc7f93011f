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

// C[M, N] += alpha * A[M, Kd] · B[Kd, N]; all row-major with leading dimensions.
// Register tiles of 4 rows x 16 columns keep the accumulators out of memory across the
// Kd loop; the fixed-size loops are what the compiler vectorises.
void gemm_acc(int64_t M, int64_t N, int64_t Kd, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float* C, int64_t ldc) {
  constexpr int64_t MR = 4, NR = 16;
  const int64_t M4 = M / MR * MR, N16 = N / NR * NR;
  for (int64_t i = 0; i < M4; i += MR) {
    for (int64_t j = 0; j < N16; j += NR) {
      float acc[MR][NR] = {};
      for (int64_t k = 0; k < Kd; ++k) {
        const float* b = B + k * ldb + j;
        for (int64_t ii = 0; ii < MR; ++ii) {
          const float a = A[(i + ii) * lda + k];
          for (int64_t jj = 0; jj < NR; ++jj) acc[ii][jj] += a * b[jj];
        }
      }
      for (int64_t ii = 0; ii < MR; ++ii)
        for (int64_t jj = 0; jj < NR; ++jj) C[(i + ii) * ldc + j + jj] += alpha * acc[ii][jj];
    }
  }
  // Edges: the right-hand columns of the tiled rows, then the leftover rows.
  auto edge = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* c = C + i * ldc;
      for (int64_t k = 0; k < Kd; ++k) {
        const float a = alpha * A[i * lda + k];
        const float* b = B + k * ldb;
        for (int64_t j = j0; j < j1; ++j) c[j] += a * b[j];
      }
    }
  };
  if (N16 < N) edge(0, M4, N16, N);
  if (M4 < M) edge(M4, M, 0, N);
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

// §5.3 step by step. Fused into two passes over S per token: the prediction m = Sᵀk is
// taken from the old state and decayed afterwards (α·(Sᵀk) = (αS)ᵀk), then one pass
// decays, writes and reads out.
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
  const int64_t h = d.key_head(j);
  for (int64_t t = 0; t < d.T; ++t) {
    load_row<E>(q.p(t, h), d.dk, qf);
    load_row<E>(k.p(t, h), d.dk, kf);
    load_row<E>(v.p(t, j), d.dv, vf);
    const float alpha = std::exp(g[t * d.Hv + j]);
    const float b = beta[t * d.Hv + j];
    std::fill_n(delta, d.dv, 0.0f);
    for (int64_t r = 0; r < d.dk; ++r) {
      const float kr = kf[r];
      const float* s = S + r * d.dv;
      for (int64_t e = 0; e < d.dv; ++e) delta[e] += kr * s[e];
    }
    for (int64_t e = 0; e < d.dv; ++e) delta[e] = b * (vf[e] - alpha * delta[e]);
    std::fill_n(o, d.dv, 0.0f);
    for (int64_t r = 0; r < d.dk; ++r) {
      const float kr = kf[r], qr = qf[r];
      float* s = S + r * d.dv;
      for (int64_t e = 0; e < d.dv; ++e) {
        s[e] = alpha * s[e] + kr * delta[e];
        o[e] += qr * s[e];
      }
    }
    store_row<E>(o, d.dv, out + (t * d.Hv + j) * d.dv);
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
      const float* l = KK + r * kChunk;
      for (int64_t s = 0; s < r; ++s) {
        const float ls = l[s];
        const float* prev = U + s * ldu;
        for (int64_t e = 0; e < ldu; ++e) uw[e] -= ls * prev[e];
      }
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
