// Split-KV decode attention on tensor cores (attention_decode.cuh, decode_split_tc): the
// split kernel for f16 queries over f16 or i8 K/V. The split plan, the routing and the
// combine of the partials stay in attention_decode.cu.
//
// Why: the CUDA-core split kernel spends ~4 D FMAs (plus an i8 conversion) per key and query
// row, so its cost grows with the R = T * G rows a block scores: for MTP verification
// (T = 4, G = 6: 24 rows) it is compute-bound at several times the cost of T = 1. Here the
// K/V tile is loaded once per KV head and all R rows are scored against it with WMMA, so
// the cost per key hardly depends on R (up to 64 rows) and the kernel stays bound by the
// K/V stream.
//
// Block: (split, kv head), 8 warps, rows r = t * G + g (token t, query head hk * G + g),
// padded to MT = ceil(R / 16) row tiles of 16. Per key tile of 32 (gathered through the
// block table):
//   1. its K/V pieces (8 elements each), loaded into registers during the previous tile's
//      math, are converted to f16 into Ks/Vs (i8: scale * int8, rounded once);
//   2. S = Q·Kᵀ: MT x 2 output tiles; with MT <= 2 each tile's head dim is split over
//      4 / MT warps (partial sums in separate buffers) so all 8 warps work;
//   3. online softmax, 4 threads per row, in exp2 units (queries pre-scaled by log2 e):
//      query t sees keys up to its own position q_pos[0] + t and below the split's end;
//   4. O = diag(corr)·O + P·V: warp w owns DP / 128 head-dim column tiles of every row
//      tile, so each V fragment is loaded once per warp and used for all row tiles.
// The O rescale needs the row of each accumulator element; WMMA leaves the fragment layout
// unspecified, so each warp learns it once from a fragment of a matrix of row indices (as
// attention_prefill.cu does). The block leaves the unnormalised partial (max in natural-log
// units, sum, O) like the CUDA-core kernel, or the final rows when one split covers all.
// What is rounded to f16: the scaled (rotated) queries, i8 rows dequantized, P. The rest
// is fp32. sm_70 features only (WMMA 16x16x16, plain loads): both kernel profiles.
// A second split kernel below (decode_tc_ring_kernel, sm_80+, native profile) does the same
// math over a cp.async ring of K/V slots, and the warp-split kernels (sm_80+, i8 K and V:
// attention_decode_tc_warps.cu) a warp's own slots with mma.sync; decode_split_tc picks one
// (attention_decode.cuh).
#include <mma.h>

#include <atomic>
#include <climits>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/attention_decode_tc.cuh"
#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/attention_wmma.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/kv_quant.cuh"

namespace vi::cuda {
namespace {

using namespace nvcuda;

using namespace attn_wmma;
using namespace decode_tc;

// Byte offsets of the shared buffers for head dim padded to DP and at most MTM row tiles;
// each a multiple of 32 (WMMA). DP 256: 62 KB (MTM 2) / 82 KB (MTM 4), under Volta's 96 KB.
template <int DP, int MTM>
struct Layout {
  static constexpr int kRows = 16 * MTM;
  static constexpr int kLd = DP + 8;  // halves per Q/K/V row: rows shift by 16 bytes (banks)
  static constexpr int kOffQ = 0;                          // half  [kRows][kLd] scaled q; q staging
  static constexpr int kOffK = kOffQ + kRows * kLd * 2;    // half  [32][kLd]    K tile
  static constexpr int kOffV = kOffK + kBN * kLd * 2;      // half  [32][kLd]    V tile
  static constexpr int kOffS = kOffV + kBN * kLd * 2;      // float [64][kLdS]   partial scores: part p of
                                                           //   row r at row p * 16 * MT + r
  static constexpr int kOffP = kOffS + 64 * kLdS * 4;      // half  [kRows][kLdP] probabilities
  static constexpr int kOffRow = kOffP + kRows * kLdP * 2;  // float [3][64] per-row corr, max, sum
  static constexpr int kBytes = kOffRow + 3 * 64 * 4;
  static constexpr int kLdO = DP + 4;  // floats per row of the output staging (over Q, K, V)
  static constexpr int kPieces = kBN * DP / 8 / kThreads;  // 8-element K (and V) pieces per thread
  static_assert(kPieces >= 1 && kBN * DP / 8 == kPieces * kThreads, "whole pieces per thread");
  static_assert(kOffK % 32 == 0 && kOffV % 32 == 0 && kOffS % 32 == 0 && kOffP % 32 == 0 && kOffRow % 32 == 0,
                "WMMA needs 32-byte aligned tiles");
  static_assert(32 * DP * 4 <= kOffS - kOffK, "the q staging (32 rows of f32) fits in the K/V tiles");
  static_assert(kRows * kLdO * 4 <= kOffS, "the output staging fits over Q, K and V");
  static_assert(kBytes <= 96 * 1024, "Volta's shared memory limit");
};

// Two blocks per SM on sm_80+ (128 registers); Volta's 96 KB hold one block of the layouts
// over 48 KB anyway, so there those keep their registers (no spills).
constexpr int min_blocks(int dp, int mtm) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  return dp == 256 || mtm == 4 ? 1 : 2;
#else
  (void)dp, (void)mtm;
  return 2;
#endif
}

// The S work of a 32-key tile, shared by both split kernels: MT x 2 output tiles of 16 x 16,
// the head dim of each split over ds warps when MT <= 2 so all 8 warps work; warp w takes part
// dp of tile (rt, kh) while w < items. Part p of row r lands at row p * rows + r of Ss.
struct SWork {
  int ds, items, rt, kh, dp, ksteps;
};
template <int DP>
__device__ __forceinline__ SWork s_work(int MT, int warp) {
  SWork w;
  w.ds = MT <= 2 ? 4 / MT : 1;
  w.items = MT * 2 * w.ds;
  w.rt = warp / (2 * w.ds), w.kh = (warp / w.ds) % 2, w.dp = warp % w.ds;
  w.ksteps = DP / 16 / w.ds;
  return w;
}

// This warp's S part: Q rows of tile w.rt against the 16 keys at kb (f16 rows, stride kLd).
template <int kLd>
__device__ __forceinline__ void score_part(const __half* Qs, const __half* kb, float* Ss, const SWork& w,
                                           int rows) {
  FragC s;
  wmma::fill_fragment(s, 0.0f);
  for (int kk = w.dp * w.ksteps; kk < (w.dp + 1) * w.ksteps; ++kk) {
    FragA a;
    FragBc b;  // Kᵀ: element (d, key) = kb[key][d]
    wmma::load_matrix_sync(a, Qs + w.rt * 16 * kLd + kk * 16, kLd);
    wmma::load_matrix_sync(b, kb + kk * 16, kLd);
    wmma::mma_sync(s, a, b, s);
  }
  wmma::store_matrix_sync(Ss + (w.dp * rows + w.rt * 16) * kLdS + w.kh * 16, s, kLdS, wmma::mem_row_major);
}

// Row sm_row's scores of keys sm_c0 .. +8 of the tile: the sum of its ds parts.
__device__ __forceinline__ void sum_score_parts(const float* Ss, int rows, int ds, int sm_row, int sm_c0,
                                                float (&x)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = 0.0f;
  for (int p = 0; p < ds; ++p) {
    const float4* src = reinterpret_cast<const float4*>(Ss + (p * rows + sm_row) * kLdS + sm_c0);
    const float4 a = src[0], b = src[1];
    x[0] += a.x, x[1] += a.y, x[2] += a.z, x[3] += a.w, x[4] += b.x, x[5] += b.y, x[6] += b.z, x[7] += b.w;
  }
}

// O = diag(corr)·O + P·V over every row tile, warp w's NC head-dim column tiles; v_tile(ks)
// is the f16 V rows of keys 16 ks .. of the tile (row stride kLd).
template <int MTM, int NC, int kLd, class VTile>
__device__ __forceinline__ void rescale_pv(FragC (&o)[MTM][NC], const float* corr_s, const int (&rid)[kAccElems],
                                           int MT, int warp, const __half* Ps, VTile v_tile) {
#pragma unroll
  for (int rt = 0; rt < MTM; ++rt) {
    if (rt < MT) {
#pragma unroll
      for (int i = 0; i < kAccElems; ++i) {
        const float c = corr_s[rt * 16 + rid[i]];
#pragma unroll
        for (int f = 0; f < NC; ++f) o[rt][f].x[i] *= c;
      }
    }
  }
#pragma unroll
  for (int ks = 0; ks < kBN / 16; ++ks) {
    const __half* vb = v_tile(ks);
    FragB b[NC];
#pragma unroll
    for (int f = 0; f < NC; ++f) wmma::load_matrix_sync(b[f], vb + (warp * NC + f) * 16, kLd);
#pragma unroll
    for (int rt = 0; rt < MTM; ++rt) {
      if (rt < MT) {
        FragA a;
        wmma::load_matrix_sync(a, Ps + rt * 16 * kLdP + ks * 16, kLdP);
#pragma unroll
        for (int f = 0; f < NC; ++f) wmma::mma_sync(o[rt][f], a, b[f], o[rt][f]);
      }
    }
  }
}

// The block's O through shared memory Os (row stride kLdO floats; the caller has stored the
// rows' max and sum in m_s / l_s and passed a barrier), then each of its R rows out as a
// partial or, with one split, final.
template <int MTM, int NC, int kLdO>
__device__ __forceinline__ void store_block_rows(FragC (&o)[MTM][NC], float* Os, const TcParams& P,
                                                 __half* __restrict__ out, int split, int hk, int tid, int R,
                                                 int MT, const float* m_s, const float* l_s) {
  const int warp = tid >> 5;
#pragma unroll
  for (int rt = 0; rt < MTM; ++rt)
    if (rt < MT)
#pragma unroll
      for (int f = 0; f < NC; ++f)
        wmma::store_matrix_sync(Os + rt * 16 * kLdO + (warp * NC + f) * 16, o[rt][f], kLdO, wmma::mem_row_major);
  __syncthreads();
  const int64_t n_rows = int64_t(P.T) * P.Hq;
  for (int idx = tid; idx < R * P.D; idx += kThreads) {
    const int r = idx / P.D, d = idx % P.D, t = r / P.G, g = r % P.G;
    const int64_t orow = int64_t(t) * P.Hq + hk * P.G + g;
    const float a = Os[r * kLdO + d];
    store_split_row(P, out, split, n_rows, orow, d, a, m_s, l_s, r);
  }
}

// Grid (n_splits, Hkv). MTM: the row tiles the block has registers for (MT <= MTM).
template <class TK, class TV, int DP, int MTM>
__global__ void __launch_bounds__(kThreads, min_blocks(DP, MTM))
    decode_tc_kernel(const __half* __restrict__ q, const TK* __restrict__ k, const TV* __restrict__ v,
                     __half* __restrict__ out, TcParams P) {
  using L = Layout<DP, MTM>;
  constexpr int kLd = L::kLd;
  constexpr int NC = DP / 16 / kWarps;  // head-dim column tiles of O per warp
  extern __shared__ __align__(128) unsigned char smem[];
  __half* Qs = reinterpret_cast<__half*>(smem + L::kOffQ);
  __half* Ks = reinterpret_cast<__half*>(smem + L::kOffK);
  __half* Vs = reinterpret_cast<__half*>(smem + L::kOffV);
  float* Ss = reinterpret_cast<float*>(smem + L::kOffS);
  __half* Ps = reinterpret_cast<__half*>(smem + L::kOffP);
  float* corr_s = reinterpret_cast<float*>(smem + L::kOffRow);
  float* m_s = corr_s + 64;
  float* l_s = corr_s + 128;

  const int tid = threadIdx.x, warp = tid >> 5;
  const int split = blockIdx.x, hk = blockIdx.y;
  const int R = P.R, MT = P.MT, rows = 16 * MT;

  int rid[kAccElems];  // this GPU's row of each accumulator element
  accumulator_rows(Ss, rid);

  // Q: 32 rows at a time staged in f32 over the K/V tiles (the rotation works on f32 rows),
  // scaled, rotated for an i8 K pool like its keys, rounded to f16; zeros past R and D.
  float* stage = reinterpret_cast<float*>(smem + L::kOffK);
  for (int r0 = 0; r0 < rows; r0 += 32) {
    for (int idx = tid; idx < 32 * DP; idx += kThreads) {
      const int r = r0 + idx / DP, d = idx % DP, t = r / P.G, g = r % P.G;
      stage[idx] = r < R && d < P.D ? __half2float(q[(int64_t(t) * P.Hq + hk * P.G + g) * P.D + d]) * P.qscale : 0.0f;
    }
    __syncthreads();
    if (P.rotate_q) hadamard_rows_smem(stage, 32, DP, P.D);
    for (int idx = tid; idx < 32 * DP; idx += kThreads) {
      const int r = r0 + idx / DP;
      if (r < rows) Qs[r * kLd + idx % DP] = __float2half_rn(stage[idx]);
    }
    __syncthreads();
  }

  // The true key count comes from the device position; a split past it reads nothing and
  // leaves an empty partial (max -inf, sum 0) that the combine weighs 0.
  const int p0 = P.q_pos ? P.q_pos[0] : P.q_pos0;
  const int n_keys = p0 + P.T;
  const int s_begin = split * P.keys_per_split;
  const int s_end = min(n_keys, s_begin + P.keys_per_split);
  const int n_tiles = s_end > s_begin ? (s_end - s_begin + kBN - 1) / kBN : 0;  // block-uniform

  using PK = typename PieceOf<TK>::type;
  using PV = typename PieceOf<TV>::type;
  constexpr int kNP = L::kPieces;
  constexpr int kRowPieces = DP / 8;
  PK kp[kNP];
  PV vp[kNP];
  float ksc[kNP], vsc[kNP];
  const int64_t kv_stride = int64_t(P.Hkv) * P.D;
  // Issues the loads of the tile at key kt0 (keys at or past s_end: zeros, never read).
  auto fetch = [&](int kt0) {
#pragma unroll
    for (int i = 0; i < kNP; ++i) {
      const int pc = tid + i * kThreads, r = pc / kRowPieces, d0 = (pc % kRowPieces) * 8, s = kt0 + r;
      if (s < s_end) {
        int64_t row = s;
        if (P.table) {
          // A shift where the block size is a power of two: this runs per piece (4 a thread
          // and tile at D 256), and an integer division is ~20 instructions on sm_70. Not
          // pool_row(): its early return costs this loop branches on both sm_70 and sm_90.
          const int b = P.bs_shift >= 0 ? s >> P.bs_shift : s / P.bs;
          row = int64_t(__ldg(P.table + b)) * P.bs + (s - b * P.bs);
        }
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

  FragC o[MTM][NC];
#pragma unroll
  for (int rt = 0; rt < MTM; ++rt)
#pragma unroll
    for (int f = 0; f < NC; ++f) wmma::fill_fragment(o[rt][f], 0.0f);

  const SWork sw = s_work<DP>(MT, warp);
  // Softmax: row sm_row, keys sm_c0 .. +8 of the tile; the running max and sum (same on the
  // row's 4 threads). Padding rows (R .. rows) see no key.
  const int sm_row = tid >> 2, sm_c0 = (tid & 3) * 8;
  const int sm_pos = sm_row < R ? p0 + sm_row / P.G : -1;
  float m_run = -INFINITY, l_run = 0.0f;

  if (n_tiles > 0) fetch(s_begin);
  for (int j = 0; j < n_tiles; ++j) {
    const int kt0 = s_begin + j * kBN;
    __syncthreads();  // the previous tile's P·V is done with Ks, Vs, Ps
#pragma unroll
    for (int i = 0; i < kNP; ++i) {
      const int pc = tid + i * kThreads, r = pc / kRowPieces, d0 = (pc % kRowPieces) * 8;
      *reinterpret_cast<uint4*>(Ks + r * kLd + d0) = piece_to_half(kp[i], ksc[i]);
      *reinterpret_cast<uint4*>(Vs + r * kLd + d0) = piece_to_half(vp[i], vsc[i]);
    }
    __syncthreads();
    if (j + 1 < n_tiles) fetch(kt0 + kBN);  // in flight during this tile's math

    if (warp < sw.items) score_part<kLd>(Qs, Ks + sw.kh * 16 * kLd, Ss, sw, rows);
    __syncthreads();

    if (sm_row < rows) {  // whole warps: rows is a multiple of 16 (64 threads)
      float x[8];
      sum_score_parts(Ss, rows, sw.ds, sm_row, sm_c0, x);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int key = kt0 + sm_c0 + e;
        if (key > sm_pos || key >= s_end) x[e] = -INFINITY;
      }
      // A row may see no key yet (its position is before this split, or a padding row):
      // then nothing is added and O (still zero) needs no correction.
      const float corr = online_softmax8(x, m_run, l_run);
      *reinterpret_cast<uint4*>(Ps + sm_row * kLdP + sm_c0) =
          make_uint4(pack_half2(x[0], x[1]), pack_half2(x[2], x[3]), pack_half2(x[4], x[5]), pack_half2(x[6], x[7]));
      if ((tid & 3) == 0) corr_s[sm_row] = corr;
    }
    __syncthreads();

    rescale_pv<MTM, NC, kLd>(o, corr_s, rid, MT, warp, Ps, [&](int ks) { return Vs + ks * 16 * kLd; });
  }

  // Row state and O through shared memory (the Q/K/V tiles are free after the barrier).
  if (sm_row < rows && (tid & 3) == 0) m_s[sm_row] = m_run, l_s[sm_row] = l_run;
  __syncthreads();
  store_block_rows<MTM, NC, L::kLdO>(o, reinterpret_cast<float*>(smem), P, out, split, hk, tid, R, MT, m_s, l_s);
}

// ---------------------------------------------------------------------------------------
// sm_80+ (native profile): the same math over a cp.async ring of K/V slots.
//
// Why: the register-prefetch kernel above keeps one 32-key tile in flight per block, and
// only while the block does math, so an i8 block spends most of a tile waiting on the
// table -> K/V load chain (936 GB/s at 128K on the H200); f16 tiles carry twice the bytes
// and reach ~2.5 TB/s. Here each block keeps NS slots of 16 keys (K and V rows, and their
// i8 scales) loading into shared memory with cp.async (no registers held), so two blocks
// per SM keep ~48-110 KB in flight while they compute.
//
// Per tile of 32 keys (slots 2j and 2j + 1):
//   wait for the two slots; barrier; i8 rows are converted to f16 integers (exact: byte
//   permute into the mantissa of 1024.0, one subtraction; no scale) into Kc/Vc, the tile's
//   scales copied out, barrier; S = Q·Kᵀ on raw integers, the K scale applied per key
//   column in the softmax; P = p · (V scale of the key) in f16, so O += P·V reads V as
//   integers too. f16 rows are read by WMMA straight from their slot (padded rows).
// A slot is refilled as soon as it is free: right after the conversion when K and V are
// both i8, else at the next tile's first barrier (then NS >= 4 keeps one tile ahead).
// Rows past the split's end (and head dims past D) are zero-filled by cp.async, never read
// from memory; their scales are 0, so S there is 0 before the mask and P·V adds 0.
// ---------------------------------------------------------------------------------------

template <class TK, class TV, int DP, int MTM>
struct RingLayout {
  static constexpr bool kKi8 = sizeof(TK) == 1, kVi8 = sizeof(TV) == 1;
  static constexpr bool kFreeEarly = kKi8 && kVi8;  // the slots are free after the conversion
  static constexpr int kRows = 16 * MTM;
  static constexpr int kLd = DP + 8;                // halves per f16 row (Q, Kc, Vc, f16 slot rows)
  static constexpr int kKRow = kKi8 ? DP : kLd * 2;  // bytes per K row in a slot (i8: raw, unpadded)
  static constexpr int kVRow = kVi8 ? DP : kLd * 2;
  // A slot: K rows [16][kKRow], V rows [16][kVRow], K scales f32 [16], V scales f32 [16].
  static constexpr int kSlotK = 0;
  static constexpr int kSlotV = kSlotK + kSlotKeys * kKRow;
  static constexpr int kSlotKs = kSlotV + kSlotKeys * kVRow;
  static constexpr int kSlotVs = kSlotKs + kSlotKeys * 4;
  static constexpr int kSlotBytes = kSlotVs + kSlotKeys * 4;
  // Block: per-row corr, max, sum [3][64] f32 and the tile's scales [2][32] f32 first (the
  // output staging goes over everything after them), then Q, Kc, Vc, S, P, the ring.
  static constexpr int kOffRow = 0;
  static constexpr int kOffQ = 1024;                                   // half  [kRows][kLd]
  static constexpr int kOffKc = kOffQ + kRows * kLd * 2;               // half  [32][kLd] (i8 K); q staging
  static constexpr int kOffVc = kOffKc + (kKi8 ? kBN * kLd * 2 : 0);   // half  [32][kLd] (i8 V)
  static constexpr int kOffS = kOffVc + (kVi8 ? kBN * kLd * 2 : 0);    // float [64][kLdS]
  static constexpr int kOffP = kOffS + 64 * kLdS * 4;                  // half  [kRows][kLdP]
  static constexpr int kOffRing = (kOffP + kRows * kLdP * 2 + 127) / 128 * 128;
  static constexpr int kMinNS = kFreeEarly ? 3 : 4;
  static constexpr int kNS2 = (kBudget2 - kOffRing) / kSlotBytes;
  static constexpr bool kTwo = kNS2 >= kMinNS;  // two blocks per SM
  static constexpr int kNSmax = (kTwo ? kBudget2 - kOffRing : kBudget1 - kOffRing) / kSlotBytes;
  static constexpr int kNS = kNSmax < 8 ? kNSmax : 8;
  static constexpr int kBytes = kOffRing + kNS * kSlotBytes;
  // cp.async groups still pending when a tile's two slots must have landed (see the loop).
  static constexpr int kLag = kFreeEarly ? kNS - 2 : kNS - 4;
  static constexpr int kLdO = DP + 4;
  static_assert(kNS >= kMinNS, "the ring keeps at least one tile ahead");
  static_assert(kLag >= 0 && kLag < kNS, "a tile's two slots are among the groups issued");
  static_assert(kOffRow + (3 * 64 + 2 * 32) * 4 <= kOffQ, "the per-row and scale arrays end before Q");
  static_assert(kSlotBytes % 32 == 0 && kSlotV % 32 == 0 && kOffQ % 32 == 0 && kOffKc % 32 == 0 &&
                    kOffVc % 32 == 0 && kOffS % 32 == 0 && kOffP % 32 == 0,
                "WMMA needs 32-byte aligned tiles");
  static_assert(!kKi8 || 16 * DP * 4 <= kOffVc - kOffKc + (kVi8 ? kBN * kLd * 2 : 0),
                "16 rows of f32 q staging fit over Kc (and Vc)");
  static_assert(kOffQ + kRows * kLdO * 4 <= kBytes, "the output staging fits");
  static_assert(kBytes <= kBudget1, "the opt-in shared memory of a block");
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800  // only the ring kernel (sm_80+) uses it
// 16 int8 (a uint4) as 16 f16 integers: v + 128 byte-permuted under the exponent byte of
// 1024.0 (0x64XX is 1024 + XX), minus 1152. Exact for every int8.
__device__ __forceinline__ void i8x16_to_half(uint4 w, uint4& lo, uint4& hi) {
  const uint32_t in[4] = {w.x, w.y, w.z, w.w};
  uint32_t o[8];
  const __half2 bias = __float2half2_rn(1152.0f);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t x = in[i] ^ 0x80808080u;
    uint32_t a = __byte_perm(x, 0x64646464u, 0x4140u), b = __byte_perm(x, 0x64646464u, 0x4342u);
    __half2 ha = __hsub2(*reinterpret_cast<__half2*>(&a), bias), hb = __hsub2(*reinterpret_cast<__half2*>(&b), bias);
    o[2 * i] = *reinterpret_cast<uint32_t*>(&ha);
    o[2 * i + 1] = *reinterpret_cast<uint32_t*>(&hb);
  }
  lo = make_uint4(o[0], o[1], o[2], o[3]);
  hi = make_uint4(o[4], o[5], o[6], o[7]);
}
#endif

// Grid (n_splits, Hkv). TcParams as above; vec_k / vec_v are true (the host checks).
template <class TK, class TV, int DP, int MTM>
__global__ void __launch_bounds__(kThreads, RingLayout<TK, TV, DP, MTM>::kTwo ? 2 : 1)
    decode_tc_ring_kernel(const __half* __restrict__ q, const TK* __restrict__ k, const TV* __restrict__ v,
                          __half* __restrict__ out, TcParams P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = RingLayout<TK, TV, DP, MTM>;
  constexpr int kLd = L::kLd, NS = L::kNS;
  constexpr int NC = DP / 16 / kWarps;  // head-dim column tiles of O per warp
  extern __shared__ __align__(128) unsigned char smem[];
  float* corr_s = reinterpret_cast<float*>(smem + L::kOffRow);
  float* m_s = corr_s + 64;
  float* l_s = corr_s + 128;
  float* ksc_s = corr_s + 192;  // [32] K scale of each key of the tile (1 for f16)
  float* vsc_s = corr_s + 224;  // [32] V scale
  __half* Qs = reinterpret_cast<__half*>(smem + L::kOffQ);
  __half* Kc = reinterpret_cast<__half*>(smem + L::kOffKc);
  __half* Vc = reinterpret_cast<__half*>(smem + L::kOffVc);
  float* Ss = reinterpret_cast<float*>(smem + L::kOffS);
  __half* Ps = reinterpret_cast<__half*>(smem + L::kOffP);
  unsigned char* ring = smem + L::kOffRing;

  const int tid = threadIdx.x, warp = tid >> 5;
  const int split = blockIdx.x, hk = blockIdx.y;
  const int R = P.R, MT = P.MT, rows = 16 * MT;

  const int p0 = P.q_pos ? P.q_pos[0] : P.q_pos0;
  const int n_keys = p0 + P.T;
  const int s_begin = split * P.keys_per_split;
  const int s_end = min(n_keys, s_begin + P.keys_per_split);
  const int n_tiles = s_end > s_begin ? (s_end - s_begin + kBN - 1) / kBN : 0;  // block-uniform
  const int n_slots = 2 * n_tiles;
  const int64_t kv_stride = int64_t(P.Hkv) * P.D;

  // Starts the copies of slot n (keys s_begin + 16 n ..) into ring slot n % NS.
  auto issue = [&](int n) {
    unsigned char* slot = ring + (n % NS) * L::kSlotBytes;
    const int key0 = s_begin + n * kSlotKeys;
    constexpr int kKRowChunks = DP * int(sizeof(TK)) / 16, kVRowChunks = DP * int(sizeof(TV)) / 16;
    constexpr int kKE = 16 / int(sizeof(TK)), kVE = 16 / int(sizeof(TV));  // elements per chunk
#pragma unroll
    for (int c = tid; c < kSlotKeys * kKRowChunks; c += kThreads) {
      const int r = c / kKRowChunks, cc = c % kKRowChunks, s = key0 + r, d0 = cc * kKE;
      const bool ok = s < s_end && d0 < P.D;
      const TK* src = ok ? k + pool_row(P, s) * kv_stride + int64_t(hk) * P.D + d0 : k;
      cp_async16(slot + L::kSlotK + r * L::kKRow + cc * 16, src, ok);
    }
#pragma unroll
    for (int c = tid; c < kSlotKeys * kVRowChunks; c += kThreads) {
      const int r = c / kVRowChunks, cc = c % kVRowChunks, s = key0 + r, d0 = cc * kVE;
      const bool ok = s < s_end && d0 < P.D;
      const TV* src = ok ? v + pool_row(P, s) * kv_stride + int64_t(hk) * P.D + d0 : v;
      cp_async16(slot + L::kSlotV + r * L::kVRow + cc * 16, src, ok);
    }
    if (L::kKi8 && tid < kSlotKeys) {
      const int s = key0 + tid;
      const bool ok = s < s_end;
      cp_async4(slot + L::kSlotKs + tid * 4, ok ? P.k_scale + pool_row(P, s) * P.Hkv + hk : P.k_scale, ok);
    }
    if (L::kVi8 && tid >= 32 && tid < 32 + kSlotKeys) {
      const int s = key0 + tid - 32;
      const bool ok = s < s_end;
      cp_async4(slot + L::kSlotVs + (tid - 32) * 4, ok ? P.v_scale + pool_row(P, s) * P.Hkv + hk : P.v_scale, ok);
    }
  };
  // Slot n is cp.async group n for n < NS; the refills keep that order (see the loop).
#pragma unroll 1
  for (int n = 0; n < NS; ++n) {
    if (n < n_slots) issue(n);
    cp_async_commit();
  }

  int rid[kAccElems];  // this GPU's row of each accumulator element
  accumulator_rows(Ss, rid);

  // Q, scaled: rotated like the keys for an i8 K pool (16 rows at a time staged in f32 over
  // Kc/Vc), rounded to f16; zeros past R and D. The ring loads meanwhile.
  if (L::kKi8 && P.rotate_q) {
    float* stage = reinterpret_cast<float*>(smem + L::kOffKc);
    for (int r0 = 0; r0 < rows; r0 += 16) {
      for (int idx = tid; idx < 16 * DP; idx += kThreads) {
        const int r = r0 + idx / DP, d = idx % DP, t = r / P.G, g = r % P.G;
        stage[idx] = r < R && d < P.D ? __half2float(q[(int64_t(t) * P.Hq + hk * P.G + g) * P.D + d]) * P.qscale : 0.0f;
      }
      __syncthreads();
      hadamard_rows_smem(stage, 16, DP, P.D);
      for (int idx = tid; idx < 16 * DP; idx += kThreads) Qs[(r0 + idx / DP) * kLd + idx % DP] = __float2half_rn(stage[idx]);
      __syncthreads();
    }
  } else {
    for (int idx = tid; idx < rows * DP; idx += kThreads) {
      const int r = idx / DP, d = idx % DP, t = r / P.G, g = r % P.G;
      Qs[r * kLd + d] = __float2half_rn(
          r < R && d < P.D ? __half2float(q[(int64_t(t) * P.Hq + hk * P.G + g) * P.D + d]) * P.qscale : 0.0f);
    }
  }

  FragC o[MTM][NC];
#pragma unroll
  for (int rt = 0; rt < MTM; ++rt)
#pragma unroll
    for (int f = 0; f < NC; ++f) wmma::fill_fragment(o[rt][f], 0.0f);

  const SWork sw = s_work<DP>(MT, warp);
  const int sm_row = tid >> 2, sm_c0 = (tid & 3) * 8;
  const int sm_pos = sm_row < R ? p0 + sm_row / P.G : -1;
  float m_run = -INFINITY, l_run = 0.0f;

#pragma unroll 1
  for (int j = 0; j < n_tiles; ++j) {
    const int kt0 = s_begin + j * kBN;
    // Groups committed so far: NS + 2j. Free-early: slot n >= NS is group n, so slots 2j,
    // 2j + 1 are done when NS - 2 remain. Else the refill at tile j' (two groups, empty at
    // j' = 0) holds slots 2j' - 2 + NS, +1: slot n >= NS is group n + 2, and NS - 4 remain.
    cp_async_wait<L::kLag>();
    __syncthreads();  // every thread's copies landed; the previous tile's readers are done
    unsigned char* slot0 = ring + ((2 * j) % NS) * L::kSlotBytes;
    unsigned char* slot1 = ring + ((2 * j + 1) % NS) * L::kSlotBytes;
    if (!L::kFreeEarly) {  // the slots of tile j - 1 are free now
      if (j > 0 && 2 * j - 2 + NS < n_slots) issue(2 * j - 2 + NS);
      cp_async_commit();
      if (j > 0 && 2 * j - 1 + NS < n_slots) issue(2 * j - 1 + NS);
      cp_async_commit();
    }
    if (L::kKi8 || L::kVi8) {
      // i8 rows -> f16 integers in Kc / Vc: 32 rows x DP / 16 chunks of 16 bytes each.
      constexpr int kRowChunks = DP / 16;
#pragma unroll
      for (int c = tid; c < kBN * kRowChunks; c += kThreads) {
        const int r = c / kRowChunks, cc = c % kRowChunks;
        const unsigned char* sl = r < kSlotKeys ? slot0 : slot1;
        const int rr = r % kSlotKeys;
        uint4 lo, hi;
        if (L::kKi8) {
          i8x16_to_half(*reinterpret_cast<const uint4*>(sl + L::kSlotK + rr * L::kKRow + cc * 16), lo, hi);
          *reinterpret_cast<uint4*>(Kc + r * kLd + cc * 16) = lo;
          *reinterpret_cast<uint4*>(Kc + r * kLd + cc * 16 + 8) = hi;
        }
        if (L::kVi8) {
          i8x16_to_half(*reinterpret_cast<const uint4*>(sl + L::kSlotV + rr * L::kVRow + cc * 16), lo, hi);
          *reinterpret_cast<uint4*>(Vc + r * kLd + cc * 16) = lo;
          *reinterpret_cast<uint4*>(Vc + r * kLd + cc * 16 + 8) = hi;
        }
      }
    }
    if (tid < 64) {  // the tile's scales, out of the slots (free-early refills them next)
      const int key = tid & 31;
      const unsigned char* sl = key < kSlotKeys ? slot0 : slot1;
      if (tid < 32) ksc_s[key] = L::kKi8 ? reinterpret_cast<const float*>(sl + L::kSlotKs)[key % kSlotKeys] : 1.0f;
      else vsc_s[key] = L::kVi8 ? reinterpret_cast<const float*>(sl + L::kSlotVs)[key % kSlotKeys] : 1.0f;
    }
    __syncthreads();
    if (L::kFreeEarly) {  // slots 2j, 2j + 1 are converted: refill them now
      if (2 * j + NS < n_slots) issue(2 * j + NS);
      cp_async_commit();
      if (2 * j + 1 + NS < n_slots) issue(2 * j + 1 + NS);
      cp_async_commit();
    }
    // The K / V rows of key half h (keys kt0 + 16 h ..) as f16, row stride kLd.
    auto k_half = [&](int h) -> const __half* {
      if (L::kKi8) return Kc + h * kSlotKeys * kLd;
      return reinterpret_cast<const __half*>((h ? slot1 : slot0) + L::kSlotK);
    };
    auto v_half = [&](int h) -> const __half* {
      if (L::kVi8) return Vc + h * kSlotKeys * kLd;
      return reinterpret_cast<const __half*>((h ? slot1 : slot0) + L::kSlotV);
    };

    if (warp < sw.items) score_part<kLd>(Qs, k_half(sw.kh), Ss, sw, rows);  // on raw (unscaled) keys
    __syncthreads();

    if (sm_row < rows) {
      float x[8];
      sum_score_parts(Ss, rows, sw.ds, sm_row, sm_c0, x);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int key = kt0 + sm_c0 + e;
        x[e] *= ksc_s[sm_c0 + e];
        if (key > sm_pos || key >= s_end) x[e] = -INFINITY;
      }
      const float corr = online_softmax8(x, m_run, l_run);
      // P carries the V scale of its key (O += P·V then reads V as integers); the sum does not.
      float pv[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) pv[e] = x[e] * vsc_s[sm_c0 + e];
      *reinterpret_cast<uint4*>(Ps + sm_row * kLdP + sm_c0) =
          make_uint4(pack_half2(pv[0], pv[1]), pack_half2(pv[2], pv[3]), pack_half2(pv[4], pv[5]), pack_half2(pv[6], pv[7]));
      if ((tid & 3) == 0) corr_s[sm_row] = corr;
    }
    __syncthreads();

    rescale_pv<MTM, NC, kLd>(o, corr_s, rid, MT, warp, Ps, v_half);
  }

  // No copy may still land in the smem the output staging reuses (slots past the end were
  // never issued, but their groups are counted).
  cp_async_wait<0>();
  if (sm_row < rows && (tid & 3) == 0) m_s[sm_row] = m_run, l_s[sm_row] = l_run;
  __syncthreads();
  store_block_rows<MTM, NC, L::kLdO>(o, reinterpret_cast<float*>(smem + L::kOffQ), P, out, split, hk, tid, R, MT,
                                     m_s, l_s);
#else
  (void)q, (void)k, (void)v, (void)out, (void)P;
  __trap();  // decode_split_tc takes this kernel only where sm80_code() holds
#endif
}

int smem_bytes(int DP, int MTM) {
  if (DP == 128) return MTM == 2 ? Layout<128, 2>::kBytes : Layout<128, 4>::kBytes;
  return MTM == 2 ? Layout<256, 2>::kBytes : Layout<256, 4>::kBytes;
}

// The ring kernel's shared memory for K/V dtypes (i8: true) and the padded shape.
template <class TK, class TV>
int ring_smem_t(int DP, int MTM) {
  if (DP == 128) {
    return MTM == 1 ? RingLayout<TK, TV, 128, 1>::kBytes
                    : MTM == 2 ? RingLayout<TK, TV, 128, 2>::kBytes : RingLayout<TK, TV, 128, 4>::kBytes;
  }
  return MTM == 1 ? RingLayout<TK, TV, 256, 1>::kBytes
                  : MTM == 2 ? RingLayout<TK, TV, 256, 2>::kBytes : RingLayout<TK, TV, 256, 4>::kBytes;
}
int ring_smem(DType k, DType v, int DP, int MTM) {
  if (k == DType::I8) return v == DType::I8 ? ring_smem_t<int8_t, int8_t>(DP, MTM) : ring_smem_t<int8_t, __half>(DP, MTM);
  return ring_smem_t<__half, __half>(DP, MTM);
}
int ring_mtm(int MT) { return MT <= 1 ? 1 : MT <= 2 ? 2 : 4; }

std::atomic<DecodeTcRing> g_tc_ring{DecodeTcRing::kAuto};

}  // namespace

void set_decode_tc_ring(DecodeTcRing mode) { g_tc_ring.store(mode, std::memory_order_relaxed); }
DecodeTcRing decode_tc_ring() { return g_tc_ring.load(std::memory_order_relaxed); }

bool decode_tc_ring_fits(const ops::Context& ctx, const DecodeArgs& a) {
  const DecodeTcRing mode = decode_tc_ring();
  if (mode == DecodeTcRing::kNever || !sm80_code(ctx) || !decode_tc_fits(a)) return false;
  if (mode == DecodeTcRing::kAuto && (a.k_dtype != DType::I8 || a.v_dtype != DType::I8)) return false;
  // Pairs with a ring kernel: f16/f16, i8/i8, i8 K + f16 V (f16 K + i8 V keeps the other).
  const bool pair_ok = (a.k_dtype == DType::F16 && a.v_dtype == DType::F16) || a.k_dtype == DType::I8;
  // Whole 16-byte chunks: every row (and head) starts on one, and D fills whole chunks.
  auto chunks_ok = [&](const void* p, DType t) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && a.D % (t == DType::I8 ? 16 : 8) == 0;
  };
  const int MT = static_cast<int>((a.T * (a.Hq / a.Hkv) + 15) / 16);
  return pair_ok && chunks_ok(a.k, a.k_dtype) && chunks_ok(a.v, a.v_dtype) &&
         ring_smem(a.k_dtype, a.v_dtype, padded_dim(a.D), ring_mtm(MT)) <= current_device().smem_optin;
}

bool decode_tc_fits(const DecodeArgs& a) {
  auto kv_ok = [](DType t) { return t == DType::F16 || t == DType::I8; };
  return a.q_dtype == DType::F16 && kv_ok(a.k_dtype) && kv_ok(a.v_dtype) &&
         decode_attention_fits(a.T, a.Hq, a.Hkv, a.D) && a.block_size < INT32_MAX &&
         smem_bytes(padded_dim(a.D), a.T * (a.Hq / a.Hkv) <= 32 ? 2 : 4) <= current_device().smem_optin;
}

void decode_split_tc(const ops::Context& ctx, const DecodeArgs& a, const DecodeSplitPlan& plan) {
  VI_CHECK(decode_tc_fits(a), "decode attention on cuda (tensor cores): q {} K {} V {} T={} Hq={} Hkv={} D={} is "
           "not supported", dtype_name(a.q_dtype), dtype_name(a.k_dtype), dtype_name(a.v_dtype), a.T, a.Hq, a.Hkv, a.D);
  TcParams P{};
  P.table = a.table;
  P.q_pos = a.q_pos;
  P.k_scale = a.k_scale;
  P.v_scale = a.v_scale;
  P.bs = static_cast<int>(a.block_size);
  P.q_pos0 = static_cast<int>(a.q_pos0);
  P.T = static_cast<int>(a.T);
  P.Hq = static_cast<int>(a.Hq);
  P.Hkv = static_cast<int>(a.Hkv);
  P.D = static_cast<int>(a.D);
  P.G = static_cast<int>(a.Hq / a.Hkv);
  P.R = P.T * P.G;
  P.MT = (P.R + 15) / 16;
  P.keys_per_split = static_cast<int>(plan.keys_per_split);
  P.qscale = a.scale * kLog2e;
  P.rotate_q = a.k_dtype == DType::I8;
  // Vector piece loads: 8 elements of every row start on a piece boundary.
  auto vec_ok = [&](const void* p, DType t) {
    return a.D % 8 == 0 && reinterpret_cast<uintptr_t>(p) % (t == DType::I8 ? 8 : 16) == 0;
  };
  P.vec_k = vec_ok(a.k, a.k_dtype);
  P.vec_v = vec_ok(a.v, a.v_dtype);
  P.part_acc = plan.part_acc;
  P.part_ml = plan.part_ml;
  P.group_tokens = P.T;
  P.n_groups = 1;
  P.bs_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((int64_t(1) << sh) == a.block_size) P.bs_shift = sh;

  P.n_splits = plan.n_splits;
  P.balanced = plan.balanced;

  const int DP = padded_dim(a.D);
  const dim3 grid(static_cast<unsigned>(plan.n_splits), static_cast<unsigned>(a.Hkv));
  auto go = [&](auto kernel, int smem, const auto* k, const auto* v) {
    decode_tc::launch(ctx, a, P, kernel, grid, kThreads, smem, k, v, /*pdl=*/false);
  };

  if (decode_tc_warps_fits(ctx, a)) return decode_tc::launch_warps(ctx, a, plan, P);

  if (decode_tc_ring_fits(ctx, a)) {
    const int MTM = ring_mtm(P.MT);
    const int smem = ring_smem(a.k_dtype, a.v_dtype, DP, MTM);
    auto ring = [&](auto ktag, auto vtag) {
      using TK = decltype(ktag);
      using TV = decltype(vtag);
      const TK* k = static_cast<const TK*>(a.k);
      const TV* v = static_cast<const TV*>(a.v);
      if (DP == 128) {
        if (MTM == 1) go(decode_tc_ring_kernel<TK, TV, 128, 1>, smem, k, v);
        else if (MTM == 2) go(decode_tc_ring_kernel<TK, TV, 128, 2>, smem, k, v);
        else go(decode_tc_ring_kernel<TK, TV, 128, 4>, smem, k, v);
      } else {
        if (MTM == 1) go(decode_tc_ring_kernel<TK, TV, 256, 1>, smem, k, v);
        else if (MTM == 2) go(decode_tc_ring_kernel<TK, TV, 256, 2>, smem, k, v);
        else go(decode_tc_ring_kernel<TK, TV, 256, 4>, smem, k, v);
      }
    };
    if (a.k_dtype == DType::F16) ring(__half{}, __half{});
    else if (a.v_dtype == DType::I8) ring(int8_t{}, int8_t{});
    else ring(int8_t{}, __half{});
    return;
  }

  const int MTM = P.MT <= 2 ? 2 : 4;
  const int smem = smem_bytes(DP, MTM);
  auto run = [&](auto ktag, auto vtag) {
    using TK = decltype(ktag);
    using TV = decltype(vtag);
    const TK* k = static_cast<const TK*>(a.k);
    const TV* v = static_cast<const TV*>(a.v);
    if (DP == 128) {
      if (MTM == 2) go(decode_tc_kernel<TK, TV, 128, 2>, smem, k, v);
      else go(decode_tc_kernel<TK, TV, 128, 4>, smem, k, v);
    } else {
      if (MTM == 2) go(decode_tc_kernel<TK, TV, 256, 2>, smem, k, v);
      else go(decode_tc_kernel<TK, TV, 256, 4>, smem, k, v);
    }
  };
  auto with_v = [&](auto ktag) {
    if (a.v_dtype == DType::F16) run(ktag, __half{});
    else run(ktag, int8_t{});
  };
  if (a.k_dtype == DType::F16) with_v(__half{});
  else with_v(int8_t{});
}

}  // namespace vi::cuda
