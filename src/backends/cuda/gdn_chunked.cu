// Chunked gated delta rule on tensor cores (WMMA 16x16x16, f16 operands, fp32 accumulate;
// sm_70 features only, so one kernel serves the volta and native profiles).
//
// One block per (value head j, slice of 32 value columns). Every column of the state
// S [dk, dv] evolves independently of the others (the update S ← αS + k δᵀ mixes rows, not
// columns), so a block owns S[:, slice] for the whole call, in fp32 accumulator fragments,
// and walks the chunks of 64 tokens in order. Per chunk, with Γ the inclusive cumulative
// log-decay, K̃ = diag(exp(Γ_last − Γ))·K and L the strictly lower β_r (k_r·k_s) e^{Γr−Γs}:
//   rhs   = diag(β)·(V − diag(e^Γ)·K·S)           (K·S on tensor cores)
//   V_new = (I + L)⁻¹·rhs                          (forward substitution, fp32, one warp)
//   O     = diag(e^Γ)·Q·S + (M ⊙ Q·Kᵀ)·V_new        (tensor cores; M the causal decay mask)
//   S     ← e^{Γ_last}·S + Kᵀ·(diag(e^{Γlast−Γ})·V_new)   (tensor cores, fp32 accumulators)
// This is the CPU kernel's (I + L)·[U | W] = [βV | βe^Γ K], V_new = U − W·S folded into one
// right-hand side: (I + L)⁻¹ is linear, so only the 32 columns of the slice are solved.
// What is rounded to f16 (the tensor-core operands): S, e^Γ·Q, V_new (plain and decayed) and
// M ⊙ QKᵀ; the state itself, the decays, L and the substitution stay fp32.
// Each chunk's global loads are issued at once (16-byte pieces) before any is used, and the
// decays are per-row factors computed once per chunk. What bounds it (ncu on the H200, 27B
// layer, T = 8192: 2.7 ms): ~31K warp instructions per block and chunk issued at 0.30 per
// scheduler cycle, a third of the stalls at barriers behind the one-warp substitution, 2% of
// DRAM bandwidth. docs/notes/prefill.md has the numbers and the next design.
//
// Shared memory (dk padded to a multiple of 16, at most 128): 91 KB, under Volta's 96 KB.
#include <mma.h>

#include "backends/cuda/device.cuh"
#include "backends/cuda/gdn_chunked.cuh"

namespace vi::cuda {
namespace {

using namespace nvcuda;

constexpr int kC = 64;                   // chunk length (tokens)
constexpr int kCols = 32;                // value columns per block
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdQK = kChunkedMaxDk + 8;  // halves: Qs, Ks rows
constexpr int kLdS = kCols + 8;           // halves: Sh, Vh, Vk rows
constexpr int kLdP = kC + 8;              // floats: P; halves: Mh
constexpr int kLdR = kCols + 4;           // floats: R, and P viewed as [128][kLdR]
constexpr int kRowPieces = kChunkedMaxDk / 8;            // 16-byte pieces per Q/K row
constexpr int kQKPieces = kC * kRowPieces / kThreads;    // per thread and matrix: 4
static_assert(kC * kCols / 8 == kThreads, "one 16-byte piece of v per thread");

// Byte offsets of the shared buffers; each a multiple of 32 (WMMA pointer alignment).
constexpr int kOffQ = 0;                                     // half  [64][kLdQK]  Q, then e^Γ·Q
constexpr int kOffK = kOffQ + kC * kLdQK * 2;                // half  [64][kLdQK]  K
constexpr int kOffSh = kOffK + kC * kLdQK * 2;               // half  [128][kLdS]  S in f16
constexpr int kOffP = kOffSh + kChunkedMaxDk * kLdS * 2;     // float [64][kLdP]   Q·Kᵀ, K·Kᵀ → Lᵀ; S staging
constexpr int kOffM = kOffP + kC * kLdP * 4;                 // half  [64][kLdP]   M ⊙ Q·Kᵀ
constexpr int kOffR = kOffM + kC * kLdP * 2;                 // float [64][kLdR]   K·S → rhs; O staging
constexpr int kOffV = kOffR + kC * kLdR * 4;                 // half  [64][kLdS]   v, then V_new
constexpr int kOffVk = kOffV + kC * kLdS * 2;                // half  [64][kLdS]   diag(e^{Γlast−Γ})·V_new
constexpr int kOffGates = kOffVk + kC * kLdS * 2;            // float [4][64]      Γ, e^Γ, β, e^{Γlast−Γ}
constexpr int kSmemBytes = kOffGates + 4 * kC * 4 + 32;      // + 2 floats of scan carry (padded)
static_assert(kChunkedMaxDk * kLdR <= kC * kLdP, "S staging must fit in P");
static_assert(kSmemBytes <= 96 * 1024, "Volta's shared memory limit");
static_assert(kOffK % 32 == 0 && kOffSh % 32 == 0 && kOffP % 32 == 0 && kOffM % 32 == 0 && kOffR % 32 == 0 &&
                  kOffV % 32 == 0 && kOffVk % 32 == 0 && kOffGates % 32 == 0,
              "WMMA needs 32-byte aligned tiles");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragAc = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Eight halves src[c0 .. c0+8) of a row with n valid values (zeros past n): one 16-byte load
// when `vec` (16-byte aligned rows) and the piece is whole, else element by element.
__device__ __forceinline__ uint4 load8(const __half* __restrict__ src, int c0, int n, bool vec) {
  if (vec && c0 + 8 <= n) return __ldg(reinterpret_cast<const uint4*>(src + c0));
  __align__(16) __half h[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) h[e] = c0 + e < n ? src[c0 + e] : __float2half(0.0f);
  return *reinterpret_cast<const uint4*>(h);
}

// Forward substitution of (I + L)·x = rhs for column `c`, right-looking so that x_s is
// final one FMA after the update of step s−1: the dependent chain is 64 FMAs long, not 2016.
// Lt[s][r] = L[r][s] (r > s), read 4 at a time; rhs in R. Writes V_new and fk ⊙ V_new in f16.
__device__ __forceinline__ void substitute_column(const float* Lt, const float* R, const float* fk, __half* Vh,
                                                  __half* Vk, int c) {
  float x[kC];
#pragma unroll
  for (int r = 0; r < kC; ++r) x[r] = R[r * kLdR + c];
#pragma unroll
  for (int s = 0; s < kC; ++s) {
    const float xs = x[s];
    Vh[s * kLdS + c] = __float2half_rn(xs);
    Vk[s * kLdS + c] = __float2half_rn(xs * fk[s]);
    const float4* row = reinterpret_cast<const float4*>(Lt + s * kLdP);
#pragma unroll
    for (int r4 = (s + 1) / 4; r4 < kC / 4; ++r4) {
      const float4 l = row[r4];
      if (4 * r4 + 0 > s) x[4 * r4 + 0] -= l.x * xs;
      if (4 * r4 + 1 > s) x[4 * r4 + 1] -= l.y * xs;
      if (4 * r4 + 2 > s) x[4 * r4 + 2] -= l.z * xs;
      if (4 * r4 + 3 > s) x[4 * r4 + 3] -= l.w * xs;
    }
  }
}

__global__ void __launch_bounds__(kThreads, 2)
    delta_chunked_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                         const float* __restrict__ g, const float* __restrict__ beta, float* state,
                         __half* __restrict__ out, int64_t T, int Hk, int Hv, int dk, int dv, bool tiled,
                         bool vec_qk, bool vec_v) {
  extern __shared__ __align__(128) unsigned char smem[];
  __half* Qs = reinterpret_cast<__half*>(smem + kOffQ);
  __half* Ks = reinterpret_cast<__half*>(smem + kOffK);
  __half* Sh = reinterpret_cast<__half*>(smem + kOffSh);
  float* P = reinterpret_cast<float*>(smem + kOffP);
  __half* Mh = reinterpret_cast<__half*>(smem + kOffM);
  float* R = reinterpret_cast<float*>(smem + kOffR);
  __half* Vh = reinterpret_cast<__half*>(smem + kOffV);
  __half* Vk = reinterpret_cast<__half*>(smem + kOffVk);
  float* gam = reinterpret_cast<float*>(smem + kOffGates);
  float* eg = gam + kC;
  float* bt = eg + kC;
  float* fk = bt + kC;
  float* carry = fk + kC;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int j = blockIdx.x, e0 = blockIdx.y * kCols;
  const int hk = tiled ? j % Hk : j / (Hv / Hk);
  const int dkp = (dk + 15) & ~15, kt_n = dkp / 16;
  float* Sg = state + int64_t(j) * dk * dv;

  // State slice in: global → P as [dkp][kLdR] fp32 (zero padded) → fragments and Sh.
  for (int i = tid; i < dkp * kCols; i += kThreads) {
    const int r = i / kCols, c = i % kCols;
    P[r * kLdR + c] = (r < dk && e0 + c < dv) ? Sg[int64_t(r) * dv + e0 + c] : 0.0f;
  }
  __syncthreads();
  FragC sacc[2];  // warp w owns S rows 16w .. 16w+15, both 16-column halves
  if (warp < kt_n)
    for (int h = 0; h < 2; ++h) wmma::load_matrix_sync(sacc[h], P + warp * 16 * kLdR + h * 16, kLdR, wmma::mem_row_major);
  for (int i = tid; i < dkp * kCols; i += kThreads) Sh[(i / kCols) * kLdS + i % kCols] = __float2half_rn(P[(i / kCols) * kLdR + i % kCols]);

  for (int64_t t0 = 0; t0 < T; t0 += kC) {
    // 1. Every global load of the chunk first, then the shared-memory stores: Q, K (zero
    //    past T and past dk), the v slice (into Vh, free until step 5), g and β.
    uint4 qp[kQKPieces], kp[kQKPieces], vp;
#pragma unroll
    for (int i = 0; i < kQKPieces; ++i) {
      const int piece = tid + i * kThreads, r = piece / kRowPieces, c0 = (piece % kRowPieces) * 8;
      const int64_t t = t0 + r;
      qp[i] = kp[i] = make_uint4(0, 0, 0, 0);
      if (t < T && c0 < dk) {
        const int64_t off = (t * Hk + hk) * dk;
        qp[i] = load8(q + off, c0, dk, vec_qk);
        kp[i] = load8(k + off, c0, dk, vec_qk);
      }
    }
    {
      const int r = tid / (kCols / 8), c0 = (tid % (kCols / 8)) * 8;
      const int64_t t = t0 + r;
      vp = make_uint4(0, 0, 0, 0);
      if (t < T && e0 + c0 < dv) vp = load8(v + (t * Hv + j) * int64_t(dv) + e0, c0, dv - e0, vec_v);
    }
    float cum = 0.0f, bv = 0.0f;
    if (tid < kC) {
      const int64_t t = t0 + tid;
      cum = t < T ? g[t * Hv + j] : 0.0f;  // padded rows: no decay, no write (β = 0)
      bv = t < T ? beta[t * Hv + j] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < kQKPieces; ++i) {
      const int piece = tid + i * kThreads, r = piece / kRowPieces, c0 = (piece % kRowPieces) * 8;
      if (c0 < dkp) {
        *reinterpret_cast<uint4*>(Qs + r * kLdQK + c0) = qp[i];
        *reinterpret_cast<uint4*>(Ks + r * kLdQK + c0) = kp[i];
      }
    }
    *reinterpret_cast<uint4*>(Vh + (tid / (kCols / 8)) * kLdS + (tid % (kCols / 8)) * 8) = vp;
    if (tid < kC) {
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, cum, o);
        if (lane >= o) cum += y;
      }
      if (lane == 31) carry[warp] = cum;
    }
    __syncthreads();
    if (tid < kC) {
      if (warp == 1) cum += carry[0];
      const float last = carry[0] + carry[1];  // Γ of the chunk's last row (padded rows add 0)
      gam[tid] = cum;
      eg[tid] = __expf(cum);
      bt[tid] = bv;
      fk[tid] = __expf(last - cum);
    }
    __syncthreads();

    // 2. Q·Kᵀ (lower tiles) → P;  K·S → R. A warp's (up to) three tiles share one K loop,
    //    so their MMA chains are independent and overlap.
    {
      const int rt = warp >> 1, ct0 = 2 * (warp & 1), cs = warp & 1;
      const bool lo0 = ct0 <= rt, lo1 = ct0 + 1 <= rt;
      FragC qk0, qk1, ks;
      wmma::fill_fragment(qk0, 0.0f);
      wmma::fill_fragment(qk1, 0.0f);
      wmma::fill_fragment(ks, 0.0f);
#pragma unroll 2
      for (int kt = 0; kt < kt_n; ++kt) {
        FragA aq, ak;
        FragBc b0, b1;
        FragB bs;
        wmma::load_matrix_sync(ak, Ks + rt * 16 * kLdQK + kt * 16, kLdQK);
        wmma::load_matrix_sync(bs, Sh + kt * 16 * kLdS + cs * 16, kLdS);
        if (lo0) {
          wmma::load_matrix_sync(aq, Qs + rt * 16 * kLdQK + kt * 16, kLdQK);
          wmma::load_matrix_sync(b0, Ks + ct0 * 16 * kLdQK + kt * 16, kLdQK);
          wmma::mma_sync(qk0, aq, b0, qk0);
          if (lo1) {
            wmma::load_matrix_sync(b1, Ks + (ct0 + 1) * 16 * kLdQK + kt * 16, kLdQK);
            wmma::mma_sync(qk1, aq, b1, qk1);
          }
        }
        wmma::mma_sync(ks, ak, bs, ks);
      }
      if (lo0) wmma::store_matrix_sync(P + rt * 16 * kLdP + ct0 * 16, qk0, kLdP, wmma::mem_row_major);
      if (lo1) wmma::store_matrix_sync(P + rt * 16 * kLdP + (ct0 + 1) * 16, qk1, kLdP, wmma::mem_row_major);
      wmma::store_matrix_sync(R + rt * 16 * kLdR + cs * 16, ks, kLdR, wmma::mem_row_major);
    }
    __syncthreads();

    // 3. M ⊙ Q·Kᵀ → Mh; rhs = β(v − e^Γ·K·S) in R; Q ← e^Γ·Q (after Q·Kᵀ used the plain Q).
#pragma unroll 4
    for (int it = 0; it < kC * kC / kThreads; ++it) {
      const int i = tid + it * kThreads, r = i / kC, s = i % kC;
      Mh[r * kLdP + s] = __float2half_rn(s <= r ? P[r * kLdP + s] * __expf(gam[r] - gam[s]) : 0.0f);
    }
#pragma unroll 4
    for (int it = 0; it < kC * kCols / kThreads; ++it) {
      const int i = tid + it * kThreads, r = i / kCols, c = i % kCols;
      R[r * kLdR + c] = bt[r] * (__half2float(Vh[r * kLdS + c]) - eg[r] * R[r * kLdR + c]);
    }
#pragma unroll 4
    for (int it = 0; it < kC * kChunkedMaxDk / 2 / kThreads; ++it) {
      const int i = tid + it * kThreads, r = i / (kChunkedMaxDk / 2), c = (i % (kChunkedMaxDk / 2)) * 2;
      if (c < dkp) {
        __half2* p = reinterpret_cast<__half2*>(Qs + r * kLdQK + c);
        const float2 f = __half22float2(*p);
        *p = __floats2half2_rn(f.x * eg[r], f.y * eg[r]);
      }
    }
    __syncthreads();

    // 4. K·Kᵀ (upper tiles; K·Kᵀ is symmetric, so its upper triangle read as [s][r] is
    //    L transposed) → P, then scaled in place to Lᵀ[s][r] = β_r (k_r·k_s) e^{Γr−Γs}, r > s.
    {
      const int rt = warp >> 1, ct0 = 2 * (warp & 1);
      const bool up0 = ct0 >= rt, up1 = ct0 + 1 >= rt;
      if (up1) {  // up0 implies up1
        FragC kk0, kk1;
        wmma::fill_fragment(kk0, 0.0f);
        wmma::fill_fragment(kk1, 0.0f);
#pragma unroll 2
        for (int kt = 0; kt < kt_n; ++kt) {
          FragA a;
          FragBc b0, b1;
          wmma::load_matrix_sync(a, Ks + rt * 16 * kLdQK + kt * 16, kLdQK);
          wmma::load_matrix_sync(b1, Ks + (ct0 + 1) * 16 * kLdQK + kt * 16, kLdQK);
          if (up0) {
            wmma::load_matrix_sync(b0, Ks + ct0 * 16 * kLdQK + kt * 16, kLdQK);
            wmma::mma_sync(kk0, a, b0, kk0);
          }
          wmma::mma_sync(kk1, a, b1, kk1);
        }
        if (up0) wmma::store_matrix_sync(P + rt * 16 * kLdP + ct0 * 16, kk0, kLdP, wmma::mem_row_major);
        wmma::store_matrix_sync(P + rt * 16 * kLdP + (ct0 + 1) * 16, kk1, kLdP, wmma::mem_row_major);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int it = 0; it < kC * kC / kThreads; ++it) {
      const int i = tid + it * kThreads, s = i / kC, r = i % kC;
      if (r > s) P[s * kLdP + r] *= bt[r] * __expf(gam[r] - gam[s]);
    }
    __syncthreads();

    // 5. Warp 0 solves for V_new while the others start O with the inter-chunk part.
    if (warp == 0) substitute_column(P, R, fk, Vh, Vk, lane);
    const int ort = warp >> 1, oct = warp & 1;
    FragC oacc;
    wmma::fill_fragment(oacc, 0.0f);
    for (int kt = 0; kt < kt_n; ++kt) {
      FragA a;
      FragB b;
      wmma::load_matrix_sync(a, Qs + ort * 16 * kLdQK + kt * 16, kLdQK);
      wmma::load_matrix_sync(b, Sh + kt * 16 * kLdS + oct * 16, kLdS);
      wmma::mma_sync(oacc, a, b, oacc);
    }
    __syncthreads();

    // 6. O += (M ⊙ Q·Kᵀ)·V_new → R, written out; S ← e^{Γlast}·S + Kᵀ·(fk ⊙ V_new), staged
    //    through P to refresh Sh.
    for (int st = 0; st < kC / 16; ++st) {
      FragA a;
      FragB b;
      wmma::load_matrix_sync(a, Mh + ort * 16 * kLdP + st * 16, kLdP);
      wmma::load_matrix_sync(b, Vh + st * 16 * kLdS + oct * 16, kLdS);
      wmma::mma_sync(oacc, a, b, oacc);
    }
    wmma::store_matrix_sync(R + ort * 16 * kLdR + oct * 16, oacc, kLdR, wmma::mem_row_major);
    if (warp < kt_n) {
      const float decay = eg[kC - 1];
      for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < sacc[h].num_elements; ++i) sacc[h].x[i] *= decay;
        for (int st = 0; st < kC / 16; ++st) {
          FragAc a;  // Kᵀ: element (i, s) = K[s][i]
          FragB b;
          wmma::load_matrix_sync(a, Ks + st * 16 * kLdQK + warp * 16, kLdQK);
          wmma::load_matrix_sync(b, Vk + st * 16 * kLdS + h * 16, kLdS);
          wmma::mma_sync(sacc[h], a, b, sacc[h]);
        }
        wmma::store_matrix_sync(P + warp * 16 * kLdR + h * 16, sacc[h], kLdR, wmma::mem_row_major);
      }
    }
    __syncthreads();
#pragma unroll 4
    for (int it = 0; it < kC * kCols / kThreads; ++it) {
      const int i = tid + it * kThreads, r = i / kCols, c = i % kCols;
      const int64_t t = t0 + r;
      if (t < T && e0 + c < dv) out[(t * Hv + j) * int64_t(dv) + e0 + c] = __float2half_rn(R[r * kLdR + c]);
    }
#pragma unroll 4
    for (int it = 0; it < kChunkedMaxDk * kCols / kThreads; ++it) {
      const int i = tid + it * kThreads, r = i / kCols, c = i % kCols;
      if (r < dkp) Sh[r * kLdS + c] = __float2half_rn(P[r * kLdR + c]);
    }
    // The next chunk's first barrier orders these reads and writes before R, Sh, P are reused.
  }

  // State slice out (P holds the fp32 state of the last chunk).
  __syncthreads();
  for (int i = tid; i < dkp * kCols; i += kThreads) {
    const int r = i / kCols, c = i % kCols;
    if (r < dk && e0 + c < dv) Sg[int64_t(r) * dv + e0 + c] = P[r * kLdR + c];
  }
}

}  // namespace

bool delta_rule_chunked_fits() { return current_device().smem_optin >= kSmemBytes; }

void delta_rule_chunked_f16(const ops::Context& ctx, const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& g, const Tensor& beta, Tensor& state, bool tiled, Tensor& out) {
  const int64_t T = q.dim(0), Hk = q.dim(1), dk = q.dim(2), Hv = v.dim(1), dv = v.dim(2);
  VI_CHECK(dk <= kChunkedMaxDk, "op 'gated_delta_rule' (chunked) on cuda: key head dim {} exceeds {}", dk,
           kChunkedMaxDk);
  VI_CHECK(Hk > 0 && Hv % Hk == 0, "op 'gated_delta_rule' on cuda: {} value heads do not group over {} key heads",
           Hv, Hk);
  if (T == 0 || dv == 0) return;
  // More than 48 KB of dynamic shared memory must be opted into (per device: set each call).
  VI_CUDA_CHECK(cudaFuncSetAttribute(delta_chunked_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec_qk = dk % 8 == 0 && aligned16(q.data()) && aligned16(k.data());
  const bool vec_v = dv % 8 == 0 && aligned16(v.data());
  dim3 grid(static_cast<unsigned>(Hv), static_cast<unsigned>((dv + kCols - 1) / kCols));
  delta_chunked_kernel<<<grid, kThreads, kSmemBytes, stream_of(ctx)>>>(
      q.ptr<__half>(), k.ptr<__half>(), v.ptr<__half>(), g.ptr<float>(), beta.ptr<float>(), state.ptr<float>(),
      out.ptr<__half>(), T, static_cast<int>(Hk), static_cast<int>(Hv), static_cast<int>(dk), static_cast<int>(dv),
      tiled, vec_qk, vec_v);
  VI_CUDA_LAUNCH_CHECK();
}

}  // namespace vi::cuda
