// Flash-style prefill attention on tensor cores (attention_prefill.cuh): the kernel and its
// launch. What does not live here: decode (T <= 8, attention_decode.cu) and the routing
// between the two (attention.cu).
//
// Block: 8 warps, 64 query rows (4 row tiles of 16) of one query head. Per key tile of 32:
//   1. the tile's K/V pieces (8 elements each), fetched into registers during the previous
//      tile's math, are converted to f16 into Ks/Vs (i8: scale * int8, rounded once);
//   2. S = Q·Kᵀ: warp w computes the 16x16 tile (row tile w/2, key half w%2), fp32;
//   3. online softmax, 4 threads per row: mask (key > position), running max m and sum l in
//      registers, P = exp2(S - m) rounded to f16, per-row correction exp2(m_old - m_new);
//   4. O = diag(corr)·O + P·V: warp w owns rows w/2 x half w%2 of the head dim in fp32
//      accumulator fragments (DP/32 of them).
// Rescaling O needs the row of each accumulator element, and WMMA does not specify the
// fragment layout (it differs between sm_70 and sm_80+): each warp loads, once, a fragment
// from a matrix whose entries are their row index, which gives it the layout of this GPU.
// Queries are pre-multiplied by scale * log2(e) so the softmax uses exp2.
//
// What is rounded to f16 (the tensor-core operands): the scaled, rotated queries; i8 K/V
// dequantized (f16 pools are read as they are); P. Scores, the softmax state and O are fp32.
// No cp.async / ldmatrix / bf16, shared memory at most 80 KB (D = 256): sm_70 and newer.
#include <mma.h>

#include <climits>

#include "backends/cuda/attention_prefill.cuh"
#include "backends/cuda/attention_wmma.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/kv_quant.cuh"

namespace vi::cuda {
namespace {

using namespace nvcuda;

using namespace attn_wmma;

constexpr int kBM = 64;  // query rows per block

// Byte offsets of the shared buffers for head dim padded to DP; each a multiple of 32 (WMMA).
// 32 KB / 48 KB / 80 KB for DP = 64 / 128 / 256: DP = 128 keeps two blocks per SM on Volta.
template <int DP>
struct Layout {
  static constexpr int kLd = DP + 8;  // halves per Q/K/V row: rows shift by 16 bytes (banks)
  static constexpr int kOffQ = 0;                       // half  [64][kLd]   scaled q
  static constexpr int kOffK = kOffQ + kBM * kLd * 2;   // half  [32][kLd]   K tile; q staging (f32)
  static constexpr int kOffV = kOffK + kBN * kLd * 2;   // half  [32][kLd]   V tile
  static constexpr int kOffS = kOffV + kBN * kLd * 2;   // float [64][kLdS]  scores in columns 0..31, the
                                                        //   row's O correction in column kBN, its softmax
                                                        //   sum (at the end) in kBN + 1; output staging
  static constexpr int kOffP = kOffS + kBM * kLdS * 4;  // half  [64][kLdP]  probabilities
  static constexpr int kBytes = kOffP + kBM * kLdP * 2;
  static constexpr int kPieces = kBN * DP / 8 / kThreads;  // 8-element K (and V) pieces per thread
  static_assert(kPieces >= 1 && kBN * DP / 8 == kPieces * kThreads, "whole pieces per thread");
  static_assert(kOffK % 32 == 0 && kOffV % 32 == 0 && kOffS % 32 == 0 && kOffP % 32 == 0,
                "WMMA needs 32-byte aligned tiles");
  static_assert(32 * DP * 4 <= kOffS - kOffK, "the q staging (32 rows of f32) fits in the K/V tiles");
  static_assert(kWarps * 256 <= kBM * kLdS, "the output staging (16x16 f32 per warp) fits in S");
  static_assert(kBytes <= 96 * 1024, "Volta's shared memory limit");
};

// Blocks per SM the register budget is cut for. DP = 256 needs ~196 registers unconstrained:
// on Volta its 80 KB of shared memory allow one block anyway, so it keeps them; sm_80+ has
// room for two blocks in shared memory and takes a few hundred bytes of (L1-resident)
// spills for the second block's latency hiding.
constexpr int min_blocks(int dp) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return dp == 256 ? 1 : 2;
#else
  return 2;
#endif
}

// A K/V piece as 8 halves for this kernel: f16 as it is; i8 as scale * int8 through the
// integer-to-float conversion. Not the shared byte-permute form (attention_wmma.cuh): with it,
// and with the softmax step's guard for rows that see no key, this kernel took 100-128
// registers with up to 648 bytes of spills instead of 86-125 and 304 (ptxas, sm_90), and the
// 8K prefill's attention went from 178 to 223 ms (H200, 2026-11-30, same job). Same values.
__device__ __forceinline__ uint4 to_half8(uint4 p, float) { return p; }
__device__ __forceinline__ uint4 to_half8(uint2 p, float s) {
  auto at = [&](uint32_t w, int i) { return s * static_cast<float>(static_cast<int8_t>(w >> (8 * i))); };
  return make_uint4(pack_half2(at(p.x, 0), at(p.x, 1)), pack_half2(at(p.x, 2), at(p.x, 3)),
                    pack_half2(at(p.y, 0), at(p.y, 1)), pack_half2(at(p.y, 2), at(p.y, 3)));
}

struct Params {
  const int32_t* table;  // [n_tbl] pool block of each run of bs positions
  const int32_t* q_pos;  // [1] position of query 0 (device)
  const float* k_scale;  // [n_rows, Hkv] (i8 K)
  const float* v_scale;  // [n_rows, Hkv] (i8 V)
  int bs, T, Hq, Hkv, D, G;
  float qscale;  // scale * log2(e)
  bool rotate_q, vec_k, vec_v;
};

// Grid (Hq, ceil(T / 64)); blockIdx.y counts from the last query tile, so the blocks with
// the most keys start first and the short ones fill the tail.
template <class TQ, class TK, class TV, int DP>
__global__ void __launch_bounds__(kThreads, min_blocks(DP)) prefill_kernel(const TQ* __restrict__ q, const TK* __restrict__ k,
                                                           const TV* __restrict__ v, TQ* __restrict__ out, Params P) {
  using L = Layout<DP>;
  constexpr int kLd = L::kLd;
  extern __shared__ __align__(128) unsigned char smem[];
  __half* Qs = reinterpret_cast<__half*>(smem + L::kOffQ);
  __half* Ks = reinterpret_cast<__half*>(smem + L::kOffK);
  __half* Vs = reinterpret_cast<__half*>(smem + L::kOffV);
  float* Ss = reinterpret_cast<float*>(smem + L::kOffS);
  __half* Ps = reinterpret_cast<__half*>(smem + L::kOffP);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.x, hk = h / P.G;
  const int t0 = (gridDim.y - 1 - blockIdx.y) * kBM;
  const int p0 = P.q_pos[0];
  const int n_keys = p0 + min(P.T, t0 + kBM);  // keys 0 .. n_keys-1: visible to the block's last row
  const int n_tiles = (n_keys + kBN - 1) / kBN;
  const int rt = warp >> 1, half_idx = warp & 1;  // S: key half; O: head-dim half

  int rid[kAccElems];  // this GPU's row of each accumulator element
  accumulator_rows(Ss, rid);

  // Q: 32 rows at a time staged in f32 over the K/V tiles (the rotation works on f32 rows),
  // scaled, rotated for an i8 K pool like its keys, rounded to f16; zeros past T and D.
  float* stage = reinterpret_cast<float*>(smem + L::kOffK);
  for (int half = 0; half < 2; ++half) {
    for (int idx = tid; idx < 32 * DP; idx += kThreads) {
      const int r = idx / DP, d = idx % DP, t = t0 + half * 32 + r;
      stage[idx] = t < P.T && d < P.D ? to_f32(q[(int64_t(t) * P.Hq + h) * P.D + d]) * P.qscale : 0.0f;
    }
    __syncthreads();
    if (P.rotate_q) hadamard_rows_smem(stage, 32, DP, P.D);
    for (int idx = tid; idx < 32 * DP; idx += kThreads)
      Qs[(half * 32 + idx / DP) * kLd + idx % DP] = __float2half_rn(stage[idx]);
    __syncthreads();
  }

  using PK = typename PieceOf<TK>::type;
  using PV = typename PieceOf<TV>::type;
  constexpr int kNP = L::kPieces;
  constexpr int kRowPieces = DP / 8;
  PK kp[kNP];
  PV vp[kNP];
  float ksc[kNP], vsc[kNP];
  const int64_t kv_stride = int64_t(P.Hkv) * P.D;
  // Issues the loads of key tile kt0's pieces (keys past n_keys: zeros, never read from the pool).
  auto fetch = [&](int kt0) {
#pragma unroll
    for (int i = 0; i < kNP; ++i) {
      const int pc = tid + i * kThreads, r = pc / kRowPieces, d0 = (pc % kRowPieces) * 8, s = kt0 + r;
      if (s < n_keys) {
        const int b = s / P.bs;
        const int64_t row = int64_t(P.table[b]) * P.bs + (s - b * P.bs);
        const int64_t base = row * kv_stride + int64_t(hk) * P.D;
        kp[i] = load_piece(k + base, d0, P.D, P.vec_k);
        vp[i] = load_piece(v + base, d0, P.D, P.vec_v);
        ksc[i] = P.k_scale ? __ldg(P.k_scale + row * P.Hkv + hk) : 1.0f;
        vsc[i] = P.v_scale ? __ldg(P.v_scale + row * P.Hkv + hk) : 1.0f;
      } else {
        kp[i] = PK{};
        vp[i] = PV{};
        ksc[i] = vsc[i] = 0.0f;
      }
    }
  };

  FragC o[DP / 32];
#pragma unroll
  for (int f = 0; f < DP / 32; ++f) wmma::fill_fragment(o[f], 0.0f);
  float m_run = -INFINITY, l_run = 0.0f;  // softmax state of row tid / 4 (same on its 4 threads)
  const int sm_row = tid >> 2, sm_c0 = (tid & 3) * 8;
  const int sm_pos = p0 + t0 + sm_row;  // its position (past T: a padding row, never written)

  fetch(0);
  for (int j = 0; j < n_tiles; ++j) {
    const int kt0 = j * kBN;
    __syncthreads();  // the previous tile's P·V is done with Ks, Vs, Ps
#pragma unroll
    for (int i = 0; i < kNP; ++i) {
      const int pc = tid + i * kThreads, r = pc / kRowPieces, d0 = (pc % kRowPieces) * 8;
      *reinterpret_cast<uint4*>(Ks + r * kLd + d0) = to_half8(kp[i], ksc[i]);
      *reinterpret_cast<uint4*>(Vs + r * kLd + d0) = to_half8(vp[i], vsc[i]);
    }
    __syncthreads();
    if (j + 1 < n_tiles) fetch(kt0 + kBN);  // in flight during this tile's math

    {  // S = Q·Kᵀ, tile (rt, half_idx)
      FragC s;
      wmma::fill_fragment(s, 0.0f);
#pragma unroll
      for (int kk = 0; kk < DP / 16; ++kk) {
        FragA a;
        FragBc b;  // Kᵀ: element (d, key) = Ks[key][d]
        wmma::load_matrix_sync(a, Qs + rt * 16 * kLd + kk * 16, kLd);
        wmma::load_matrix_sync(b, Ks + half_idx * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(s, a, b, s);
      }
      wmma::store_matrix_sync(Ss + rt * 16 * kLdS + half_idx * 16, s, kLdS, wmma::mem_row_major);
    }
    __syncthreads();

    {  // online softmax over row sm_row, keys kt0 + sm_c0 .. +8
      const float4* src = reinterpret_cast<const float4*>(Ss + sm_row * kLdS + sm_c0);
      const float4 a = src[0], b = src[1];
      float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (kt0 + sm_c0 + e > sm_pos) x[e] = -INFINITY;
      // The max is finite from the first tile on: key 0 is visible to every row.
      const float corr = online_softmax8<false>(x, m_run, l_run);
      *reinterpret_cast<uint4*>(Ps + sm_row * kLdP + sm_c0) =
          make_uint4(pack_half2(x[0], x[1]), pack_half2(x[2], x[3]), pack_half2(x[4], x[5]), pack_half2(x[6], x[7]));
      if ((tid & 3) == 0) Ss[sm_row * kLdS + kBN] = corr;
    }
    __syncthreads();

    {  // O = diag(corr)·O + P·V over rows rt, head dims half_idx * DP/2 ..
      float c[kAccElems];
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) c[i] = Ss[(rt * 16 + rid[i]) * kLdS + kBN];
#pragma unroll
      for (int f = 0; f < DP / 32; ++f)
#pragma unroll
        for (int i = 0; i < kAccElems; ++i) o[f].x[i] *= c[i];
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks) {
        FragA a;
        wmma::load_matrix_sync(a, Ps + rt * 16 * kLdP + ks * 16, kLdP);
#pragma unroll
        for (int f = 0; f < DP / 32; ++f) {
          FragB b;
          wmma::load_matrix_sync(b, Vs + ks * 16 * kLd + half_idx * (DP / 2) + f * 16, kLd);
          wmma::mma_sync(o[f], a, b, o[f]);
        }
      }
    }
  }

  // O / l, out through a 16x16 f32 staging tile per warp (in S, whose scores are no longer read).
  if ((tid & 3) == 0) Ss[sm_row * kLdS + kBN + 1] = l_run;
  __syncthreads();
  float inv[kAccElems];
#pragma unroll
  for (int i = 0; i < kAccElems; ++i) inv[i] = 1.0f / Ss[(rt * 16 + rid[i]) * kLdS + kBN + 1];
  __syncthreads();  // every warp has its sums before the staging overwrites them
  float* st = Ss + warp * 256;
  const int orow = lane >> 1, oc0 = (lane & 1) * 8;
  const int t = t0 + rt * 16 + orow;
#pragma unroll
  for (int f = 0; f < DP / 32; ++f) {
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) o[f].x[i] *= inv[i];
    wmma::store_matrix_sync(st, o[f], 16, wmma::mem_row_major);
    __syncwarp();
    const int d0 = half_idx * (DP / 2) + f * 16 + oc0;
    if (t < P.T) {
      TQ* dst = out + (int64_t(t) * P.Hq + h) * P.D;
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (d0 + e < P.D) dst[d0 + e] = from_f32<TQ>(st[orow * 16 + oc0 + e]);
    }
    __syncwarp();
  }
}

int padded_dim(int64_t D) { return D <= 64 ? 64 : D <= 128 ? 128 : 256; }

int smem_bytes(int DP) {
  return DP == 64 ? Layout<64>::kBytes : DP == 128 ? Layout<128>::kBytes : Layout<256>::kBytes;
}

template <class F>
void dispatch_kv(DType t, const char* which, F&& f) {
  switch (t) {
    case DType::F16: f(__half{}); break;
    case DType::I8: f(int8_t{}); break;
    default: VI_FAIL("prefill attention on cuda: {} dtype {} is not supported (f16, i8)", which, dtype_name(t));
  }
}

}  // namespace

bool prefill_attention_fits(int64_t Hq, int64_t Hkv, int64_t D, DType q_dtype, DType k_dtype, DType v_dtype) {
  auto kv_ok = [](DType t) { return t == DType::F16 || t == DType::I8; };
  return (q_dtype == DType::F16 || q_dtype == DType::F32) && kv_ok(k_dtype) && kv_ok(v_dtype) && Hkv > 0 &&
         Hq > 0 && Hq % Hkv == 0 && D >= 1 && D <= kPrefillMaxDim &&
         smem_bytes(padded_dim(D)) <= current_device().smem_optin;
}

void prefill_attention(const ops::Context& ctx, const PrefillArgs& a) {
  VI_CHECK(prefill_attention_fits(a.Hq, a.Hkv, a.D, a.q_dtype, a.k_dtype, a.v_dtype),
           "prefill attention on cuda: q {} K {} V {} Hq={} Hkv={} D={} is not supported (q f16/f32, K/V f16/i8, "
           "Hq a multiple of Hkv, D <= {}, {} bytes of shared memory)",
           dtype_name(a.q_dtype), dtype_name(a.k_dtype), dtype_name(a.v_dtype), a.Hq, a.Hkv, a.D, kPrefillMaxDim,
           smem_bytes(padded_dim(a.D)));
  VI_CHECK((a.k_dtype == DType::I8) == (a.k_scale != nullptr) && (a.v_dtype == DType::I8) == (a.v_scale != nullptr),
           "prefill attention on cuda: i8 K/V need their scales (and only i8 has them)");
  VI_CHECK(a.table != nullptr && a.q_pos != nullptr && a.block_size > 0,
           "prefill attention on cuda: needs a device block table, a device q_pos and a block size");
  VI_CHECK(a.kv_bound >= a.T && a.kv_bound < INT32_MAX && a.block_size < INT32_MAX,
           "prefill attention on cuda: kv_bound {} must cover T={} and fit 32-bit positions", a.kv_bound, a.T);
  if (a.T == 0) return;
  const int64_t q_tiles = (a.T + kBM - 1) / kBM;
  VI_CHECK(q_tiles <= 65535 && a.Hq <= INT32_MAX, "prefill attention on cuda: T={} Hq={} exceed the grid", a.T,
           a.Hq);

  Params P{};
  P.table = a.table;
  P.q_pos = a.q_pos;
  P.k_scale = a.k_scale;
  P.v_scale = a.v_scale;
  P.bs = static_cast<int>(a.block_size);
  P.T = static_cast<int>(a.T);
  P.Hq = static_cast<int>(a.Hq);
  P.Hkv = static_cast<int>(a.Hkv);
  P.D = static_cast<int>(a.D);
  P.G = static_cast<int>(a.Hq / a.Hkv);
  P.qscale = a.scale * kLog2e;
  P.rotate_q = a.k_dtype == DType::I8;
  // Vector piece loads: 8 elements of every row start on a piece boundary.
  auto vec_ok = [&](const void* p, DType t) {
    return a.D % 8 == 0 && reinterpret_cast<uintptr_t>(p) % (t == DType::I8 ? 8 : 16) == 0;
  };
  P.vec_k = vec_ok(a.k, a.k_dtype);
  P.vec_v = vec_ok(a.v, a.v_dtype);

  const int DP = padded_dim(a.D);
  const int smem = smem_bytes(DP);
  const dim3 grid(static_cast<unsigned>(a.Hq), static_cast<unsigned>(q_tiles));
  dispatch_act("paged_attention (prefill)", a.q_dtype, [&](auto qtag) {
    using TQ = decltype(qtag);
    dispatch_kv(a.k_dtype, "K", [&](auto ktag) {
      using TK = decltype(ktag);
      dispatch_kv(a.v_dtype, "V", [&](auto vtag) {
        using TV = decltype(vtag);
        auto launch = [&](auto kernel) {
          opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
          kernel<<<grid, kThreads, smem, stream_of(ctx)>>>(static_cast<const TQ*>(a.q), static_cast<const TK*>(a.k),
                                                           static_cast<const TV*>(a.v), static_cast<TQ*>(a.out), P);
          VI_CUDA_LAUNCH_CHECK();
        };
        if (DP == 64) launch(prefill_kernel<TQ, TK, TV, 64>);
        else if (DP == 128) launch(prefill_kernel<TQ, TK, TV, 128>);
        else launch(prefill_kernel<TQ, TK, TV, 256>);
      });
    });
  });
}

}  // namespace vi::cuda
