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
#include <mma.h>

#include <atomic>
#include <climits>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/kv_quant.cuh"

namespace vi::cuda {
namespace {

using namespace nvcuda;

constexpr int kBN = 32;  // keys per tile
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kLdS = kBN + 4;  // floats per S row
constexpr int kLdP = kBN + 8;  // halves per P row
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;
using FragBc = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
constexpr int kAccElems = FragC::num_elements;

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

template <class T>
struct PieceOf;
template <>
struct PieceOf<__half> {
  using type = uint4;  // 8 halves
};
template <>
struct PieceOf<int8_t> {
  using type = uint2;  // 8 int8
};

// Elements d0 .. d0+8 of a row with D valid values (zeros past D): one vector load when
// `vec` (aligned rows, D % 8 == 0), else element by element.
template <class T>
__device__ __forceinline__ typename PieceOf<T>::type load_piece(const T* __restrict__ row, int d0, int D, bool vec) {
  using P = typename PieceOf<T>::type;
  if (vec && d0 + 8 <= D) return __ldg(reinterpret_cast<const P*>(row + d0));
  __align__(16) T e[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) e[i] = d0 + i < D ? row[d0 + i] : T{};
  return *reinterpret_cast<const P*>(e);
}

__device__ __forceinline__ uint32_t pack_half2(float a, float b) {
  const __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// A piece as 8 halves: f16 as it is; i8 as scale * int8 (the int8 -> float conversion by
// byte permute into the mantissa of 2^23, as the CUDA-core kernel does).
__device__ __forceinline__ uint4 piece_to_half(uint4 p, float) { return p; }
__device__ __forceinline__ float i8_at(uint32_t w, int i) {
  const uint32_t x = w ^ 0x80808080u;
  return __uint_as_float(__byte_perm(x, 0x4B000000u, 0x7540u + i)) - 8388736.0f;
}
__device__ __forceinline__ uint4 piece_to_half(uint2 p, float s) {
  return make_uint4(pack_half2(s * i8_at(p.x, 0), s * i8_at(p.x, 1)), pack_half2(s * i8_at(p.x, 2), s * i8_at(p.x, 3)),
                    pack_half2(s * i8_at(p.y, 0), s * i8_at(p.y, 1)), pack_half2(s * i8_at(p.y, 2), s * i8_at(p.y, 3)));
}

struct TcParams {
  const int32_t* table;  // [n_tbl] pool block of each run of bs positions (null: key s is row s)
  const int32_t* q_pos;  // [1] device position of query 0 (null: q_pos0)
  const float* k_scale;  // [n_rows, Hkv] (i8 K)
  const float* v_scale;  // [n_rows, Hkv] (i8 V)
  int bs, q_pos0, T, Hq, Hkv, D, G, R, MT, keys_per_split;
  float qscale;  // scale * log2(e)
  bool rotate_q, vec_k, vec_v;
  float* part_acc;  // [n_splits, T * Hq, D] unnormalised (null: one split, write out)
  float* part_ml;   // [n_splits, T * Hq, 2] (max in natural-log units, sum)
};

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

  // This GPU's accumulator layout: rid[i] = row of element i in every 16x16 fp32 fragment.
  for (int i = tid; i < 256; i += kThreads) Ss[i] = static_cast<float>(i / 16);
  __syncthreads();
  int rid[kAccElems];
  {
    FragC f;
    wmma::load_matrix_sync(f, Ss, 16, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < kAccElems; ++i) rid[i] = static_cast<int>(f.x[i]);
  }

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
          const int b = s / P.bs;
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

  // S work: MT x 2 tiles of 16 x 16, the head dim of each split over ds warps.
  const int ds = MT <= 2 ? 4 / MT : 1;
  const int s_items = MT * 2 * ds;
  const int s_rt = warp / (2 * ds), s_kh = (warp / ds) % 2, s_dp = warp % ds;
  const int s_ksteps = DP / 16 / ds;
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

    if (warp < s_items) {  // S part s_dp of tile (s_rt, s_kh)
      FragC s;
      wmma::fill_fragment(s, 0.0f);
      for (int kk = s_dp * s_ksteps; kk < (s_dp + 1) * s_ksteps; ++kk) {
        FragA a;
        FragBc b;  // Kᵀ: element (d, key) = Ks[key][d]
        wmma::load_matrix_sync(a, Qs + s_rt * 16 * kLd + kk * 16, kLd);
        wmma::load_matrix_sync(b, Ks + s_kh * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(s, a, b, s);
      }
      wmma::store_matrix_sync(Ss + (s_dp * rows + s_rt * 16) * kLdS + s_kh * 16, s, kLdS, wmma::mem_row_major);
    }
    __syncthreads();

    if (sm_row < rows) {  // whole warps: rows is a multiple of 16 (64 threads)
      float x[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = 0.0f;
      for (int p = 0; p < ds; ++p) {
        const float4* src = reinterpret_cast<const float4*>(Ss + (p * rows + sm_row) * kLdS + sm_c0);
        const float4 a = src[0], b = src[1];
        x[0] += a.x, x[1] += a.y, x[2] += a.z, x[3] += a.w, x[4] += b.x, x[5] += b.y, x[6] += b.z, x[7] += b.w;
      }
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int key = kt0 + sm_c0 + e;
        if (key > sm_pos || key >= s_end) x[e] = -INFINITY;
        mx = fmaxf(mx, x[e]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run, mx);
      // A row may see no key yet (its position is before this split, or a padding row):
      // then nothing is added and O (still zero) needs no correction.
      const bool none = m_new == -INFINITY;
      const float corr = none ? 1.0f : exp2f(m_run - m_new);
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        x[e] = none ? 0.0f : exp2f(x[e] - m_new);
        sum += x[e];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      l_run = l_run * corr + sum;
      m_run = m_new;
      *reinterpret_cast<uint4*>(Ps + sm_row * kLdP + sm_c0) =
          make_uint4(pack_half2(x[0], x[1]), pack_half2(x[2], x[3]), pack_half2(x[4], x[5]), pack_half2(x[6], x[7]));
      if ((tid & 3) == 0) corr_s[sm_row] = corr;
    }
    __syncthreads();

    {  // O = diag(corr)·O + P·V over every row tile, this warp's head-dim columns
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
        FragB b[NC];
#pragma unroll
        for (int f = 0; f < NC; ++f) wmma::load_matrix_sync(b[f], Vs + ks * 16 * kLd + (warp * NC + f) * 16, kLd);
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
  }

  // Row state and O through shared memory (the Q/K/V tiles are free after the barrier).
  if (sm_row < rows && (tid & 3) == 0) m_s[sm_row] = m_run, l_s[sm_row] = l_run;
  __syncthreads();
  float* Os = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int rt = 0; rt < MTM; ++rt)
    if (rt < MT)
#pragma unroll
      for (int f = 0; f < NC; ++f)
        wmma::store_matrix_sync(Os + rt * 16 * L::kLdO + (warp * NC + f) * 16, o[rt][f], L::kLdO,
                                wmma::mem_row_major);
  __syncthreads();
  const int64_t n_rows = int64_t(P.T) * P.Hq;
  for (int idx = tid; idx < R * P.D; idx += kThreads) {
    const int r = idx / P.D, d = idx % P.D, t = r / P.G, g = r % P.G;
    const int64_t orow = int64_t(t) * P.Hq + hk * P.G + g;
    const float a = Os[r * L::kLdO + d];
    if (P.part_acc == nullptr) {
      out[orow * P.D + d] = __float2half_rn(a / l_s[r]);
    } else {
      P.part_acc[(int64_t(split) * n_rows + orow) * P.D + d] = a;
      if (d == 0) {
        const float m = m_s[r];
        P.part_ml[(int64_t(split) * n_rows + orow) * 2] = m == -INFINITY ? -INFINITY : m * kLn2;
        P.part_ml[(int64_t(split) * n_rows + orow) * 2 + 1] = l_s[r];
      }
    }
  }
}

int padded_dim(int64_t D) { return D <= 128 ? 128 : 256; }

int smem_bytes(int DP, int MTM) {
  if (DP == 128) return MTM == 2 ? Layout<128, 2>::kBytes : Layout<128, 4>::kBytes;
  return MTM == 2 ? Layout<256, 2>::kBytes : Layout<256, 4>::kBytes;
}

// The shared memory a block may opt into on the current device (queried once per device).
int optin_smem() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> bytes[kMaxDevices];  // 0: not asked yet
  const int dev = current_device().index;
  if (dev >= kMaxDevices) return 48 * 1024;
  if (bytes[dev].load(std::memory_order_relaxed) == 0) {
    int optin = 0;
    VI_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    bytes[dev].store(optin, std::memory_order_relaxed);
  }
  return bytes[dev].load(std::memory_order_relaxed);
}

}  // namespace

bool decode_tc_fits(const DecodeArgs& a) {
  auto kv_ok = [](DType t) { return t == DType::F16 || t == DType::I8; };
  return a.q_dtype == DType::F16 && kv_ok(a.k_dtype) && kv_ok(a.v_dtype) &&
         decode_attention_fits(a.T, a.Hq, a.Hkv, a.D) && a.block_size < INT32_MAX &&
         smem_bytes(padded_dim(a.D), a.T * (a.Hq / a.Hkv) <= 32 ? 2 : 4) <= optin_smem();
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

  const int DP = padded_dim(a.D), MTM = P.MT <= 2 ? 2 : 4;
  const int smem = smem_bytes(DP, MTM);
  const dim3 grid(static_cast<unsigned>(plan.n_splits), static_cast<unsigned>(a.Hkv));
  auto run = [&](auto ktag, auto vtag) {
    using TK = decltype(ktag);
    using TV = decltype(vtag);
    const TK* k = static_cast<const TK*>(a.k);
    const TV* v = static_cast<const TV*>(a.v);
    auto go = [&](auto kernel) {
      // Over 48 KB of dynamic shared memory must be opted into (per device: set each call).
      VI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
      kernel<<<grid, kThreads, smem, stream_of(ctx)>>>(static_cast<const __half*>(a.q), k, v,
                                                       static_cast<__half*>(a.out), P);
      VI_CUDA_LAUNCH_CHECK();
    };
    if (DP == 128) {
      if (MTM == 2) go(decode_tc_kernel<TK, TV, 128, 2>);
      else go(decode_tc_kernel<TK, TV, 128, 4>);
    } else {
      if (MTM == 2) go(decode_tc_kernel<TK, TV, 256, 2>);
      else go(decode_tc_kernel<TK, TV, 256, 4>);
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
