// The warp-split kernels of tensor-core decode attention (sm_80+, native profile, i8 K and V):
// decode_tc_warps_kernel (up to 16 rows: T = 1, or T = 2 of the 27B shape) and
// decode_tc_warps_share_kernel (row tiles sharing each slot: the verify rounds), their slot
// steps, and the routing decode_split_tc hands them (decode_tc::launch_warps). The WMMA and
// ring kernels and the rest of decode_split_tc: attention_decode_tc.cu.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/attention_decode_tc.cuh"
#include "backends/cuda/attention_wmma.cuh"
#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/device.cuh"
#include "backends/cuda/kv_quant.cuh"
#include "backends/cuda/mma_f16.cuh"
#include "backends/cuda/pdl.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
// Every kernel here is sm_80+ and compiles to a trap below that, so its helpers and layout
// members go unreferenced in those passes: not worth a warning each.
#pragma nv_diag_suppress 177
#endif

namespace vi::cuda {
namespace {

using namespace attn_wmma;  // pack_half2
using namespace decode_tc;

// ---------------------------------------------------------------------------------------
// sm_80+ (native profile), i8 K and V, up to 16 rows (T * G <= 16): the warp-split kernel.
//
// Why: the two kernels of attention_decode_tc.cu share each 32-key tile among the 8 warps of a
// block, so a tile is a chain of barrier-separated phases (convert, S, softmax on 64 threads, P·V);
// at 128K, T = 1, every variant took ~4 us per tile and block whatever its bytes per key (i8 ring
// 1069 GB/s, f16 registers 2598 GB/s). Here no barrier stands in the key loop: each warp streams
// its own slots of 16 keys (slot n of the split goes to warp n % kWW) through its own cp.async ring
// (cp.async groups are per thread, so a wait plus __syncwarp suffices), keeps its own running max
// and sum, and holds O for all 16 rows and all DP columns in registers (DP / 8 m16n8 tiles: 128
// floats at DP 256). The warps' partials are merged once at the end through shared memory, as the
// combine kernel merges splits.
//
// Per slot and warp (mma.sync m16n8k16, f16 operands, fp32 accumulation; lane = 4g + c):
//   S = Q·Kᵀ as two 16 x 8 tiles (keys 8h + n). The head dims inside a k-step are a free
//   permutation, the same for Q and K: k-step j, column pair 2c.. / 2c+8.. read dims
//   d0 = 16 (c + 4 (j / 4)) + 4 (j % 4) + 0..3, so one 16-byte i8 load of a K row feeds four
//   k-steps and Q's fragments are 8 contiguous bytes of a row. The int8 bytes become exact
//   f16 integers in registers (byte permute under 1024.0, one HSUB2), no scale.
//   The K scale multiplies S per key, the mask is applied, the online softmax runs on the
//   fragment (rows g and g + 8; max over the 4 lanes of a row by two shuffles; the sum stays
//   per lane until the end); O is rescaled only when a row's max moved in some lane.
//   P (times the V scale of its key) is the A fragment of O += P·V as it lies (the S tiles'
//   accumulator layout is the A layout of a 16-key step). V's B fragment needs keys 2c, 2c+1
//   (and +8) at one head dim: output column n of tile t is dim (DP / 8) n + t, so a lane
//   reads DP / 8 contiguous bytes of each of its 4 keys and byte-interleaves pairs of keys.
// Shared memory per slot: K [16][DP], V [16][DP] (16-byte chunks XOR-swizzled by row so the
// fragment loads are free of bank conflicts), K and V scales [16] f32. Q is scaled, rotated
// (i8 K: Hadamard in registers, one warp per row) and stored in f16 once per block.
//
// Row groups (T * G > 16): O of one 16-row tile already takes 128 registers per lane at
// DP 256, so a block scores one tile and the rows are cut into groups of whole tokens,
// P.group_tokens (floor(16 / G)) each, the last one shorter: group gi holds tokens
// gi * group_tokens .. and masks with their own positions (p0 + t). Each group is its own
// block: blockIdx.x = split * n_groups + gi, so the groups of a split are adjacent blocks,
// issued together, and read the same K/V at about the same time, so the second can find
// the lines in L2 (expected, not measured; on the grid's y or z axis they would run a wave
// apart, after the lines left the 50 MB L2 at long context). A group's keys end at its last token's position + 1 (no slot past what its rows
// see); a split that lies wholly past them leaves the empty partial (max -inf, sum 0), as a
// split past the context does. The partials keep the layout of one group (row t * Hq +
// head, t the token of the call), so the combine is unchanged. One group (T * G <= 16,
// group_tokens >= T) is the kernel as it was.
// ---------------------------------------------------------------------------------------

constexpr int kWW = 4;              // warps per block (two blocks per SM)
constexpr int kWThreads = 32 * kWW;

template <int DP>
struct WarpLayout {
  static constexpr int kLdQ = DP + 8;  // halves per Q row: rows g and g + 8 of a phase on other banks
  static constexpr int kSlotK = 0;                          // int8 [16][DP] swizzled
  static constexpr int kSlotV = kSlotK + kSlotKeys * DP;    // int8 [16][DP] swizzled
  static constexpr int kSlotKs = kSlotV + kSlotKeys * DP;   // f32 [16]
  static constexpr int kSlotVs = kSlotKs + kSlotKeys * 4;   // f32 [16]
  static constexpr int kSlotBytes = kSlotVs + kSlotKeys * 4;
  // Block: per-warp row max and sum, merge factors, per-row max and sum, then Q, then the
  // rings (warp w's slots first at w * kNSW); the output staging [kWW][16][kLdO] f32 goes
  // over the rings at the end.
  static constexpr int kOffRow = 0;  // f32 m_w [kWW][16], l_w [kWW][16], fac [kWW][16], M [16], L [16]
  static constexpr int kOffQ = 1024;                                          // half [16][kLdQ]
  static constexpr int kOffRing = (kOffQ + 16 * kLdQ * 2 + 127) / 128 * 128;
  static constexpr int kNSW0 = (kBudget2 - kOffRing) / (kWW * kSlotBytes);
  static constexpr int kNSW = kNSW0 < 8 ? kNSW0 : 8;  // slots per warp
  static constexpr int kBytes = kOffRing + kWW * kNSW * kSlotBytes;
  static constexpr int kLdO = DP + 4;
  static_assert(kNSW >= 2, "a warp keeps one slot loading while it computes another");
  static_assert(kWW * 16 * kLdO * 4 <= kWW * kNSW * kSlotBytes, "the output staging fits over the rings");
  static_assert((3 * kWW + 2) * 16 * 4 <= kOffQ, "the row area");
  static_assert(kSlotBytes % 16 == 0, "16-byte cp.async chunks");
};

// The 16-byte chunk of row r of a slot where logical chunk ch lies. K rows are read by lanes
// (g, c) at rows 8h + g, chunks c + 4jj: odd rows move to the other 64 bytes. V rows are
// read at rows 2c (+1, +8, +9), chunks (DP / 128) g + q: rows 0, 2, 4, 6 spread over 128 bytes.
template <int DP>
__device__ __forceinline__ int k_chunk(int r, int ch) {
  return ch ^ ((r & 1) << 2);
}
template <int DP>
__device__ __forceinline__ int v_chunk(int r, int ch) {
  if constexpr (DP == 256) return ch ^ (((r >> 1) & 1) | (((r >> 2) & 1) << 2));
  else return ch ^ (r & 6);
}

// 4 int8 (a word) as the f16 integers of bytes 0, 1 (lo) and 2, 3 (hi).
__device__ __forceinline__ void i8x4_to_h2(uint32_t w, uint32_t& lo, uint32_t& hi) {
  const uint32_t x = w ^ 0x80808080u;
  const __half2 bias = __float2half2_rn(1152.0f);
  lo = as_u32(__hsub2(as_h2(__byte_perm(x, 0x64646464u, 0x4140u)), bias));
  hi = as_u32(__hsub2(as_h2(__byte_perm(x, 0x64646464u, 0x4342u)), bias));
}

// Q of the warp-split kernels, scaled and rotated like the keys, in f16: row r of a block's row
// group (token t0 + r / G, query head hk G + r % G), this lane's DP / 32 consecutive dims from
// lane * DP / 32, as DP / 64 f16 pairs. The Hadamard transform works on power-of-two blocks of D
// (as hadamard_rows_smem): butterflies inside a lane, then across lanes by shuffles; a block
// starts at a multiple of its size and is >= 16 dims (D % 16 == 0), so a lane's partner lies in
// its own block, and lanes past D hold zeros. Rows >= R (padding) are zeros without shuffles,
// so the whole warp must take the same r.
template <int DP>
__device__ __forceinline__ void q_row_halves(const __half* __restrict__ q, const TcParams& P, int hk, int t0, int R,
                                             int r, int lane, uint32_t (&hw)[DP / 64]) {
  constexpr int EPL = DP / 32;
  const int d0 = lane * EPL;
  int blk = 0;  // this lane's block size (0: past D)
  for (int b0 = 0, rem = P.D; rem > 0;) {
    int n = 1;
    while (n * 2 <= rem) n *= 2;
    if (d0 >= b0 && d0 < b0 + n) blk = n;
    b0 += n, rem -= n;
  }
  float x[EPL];
  const int t = t0 + r / P.G, gq = r % P.G;
  const __half* qrow = q + (int64_t(t) * P.Hq + hk * P.G + gq) * P.D;
#pragma unroll
  for (int e = 0; e < EPL; ++e) x[e] = r < R && d0 + e < P.D ? __half2float(qrow[d0 + e]) * P.qscale : 0.0f;
  if (P.rotate_q && r < R) {
#pragma unroll
    for (int h = 1; h < EPL; h *= 2)
#pragma unroll
      for (int e = 0; e < EPL; ++e)
        if ((e & h) == 0) {
          const float a = x[e], b = x[e + h];
          x[e] = a + b, x[e + h] = a - b;
        }
#pragma unroll
    for (int h = EPL; h < DP; h *= 2) {
      const int lm = h / EPL;
#pragma unroll
      for (int e = 0; e < EPL; ++e) {
        const float o = __shfl_xor_sync(0xffffffffu, x[e], lm);
        if (h < blk) x[e] = (lane & lm) ? o - x[e] : x[e] + o;
      }
    }
    if (blk > 0) {
      const float norm = 1.0f / sqrtf(static_cast<float>(blk));  // as the CPU computes it
#pragma unroll
      for (int e = 0; e < EPL; ++e) x[e] *= norm;
    }
  }
#pragma unroll
  for (int e = 0; e < EPL / 2; ++e) hw[e] = pack_half2(x[2 * e], x[2 * e + 1]);
}
// Stores q_row_halves' pairs as row r of a row-major Q with kLdQ halves per row.
template <int DP>
__device__ __forceinline__ void store_q_row(__half* Qs, int kLdQ, int r, int lane, const uint32_t (&hw)[DP / 64]) {
  __half* dst = Qs + r * kLdQ + lane * (DP / 32);
  if constexpr (DP == 256) *reinterpret_cast<uint4*>(dst) = make_uint4(hw[0], hw[1], hw[2], hw[3]);
  else *reinterpret_cast<uint2*>(dst) = make_uint2(hw[0], hw[1]);
}

// Keys [s_begin, s_end) of split `split` for a row group whose last token sees keys < n_keys
// (empty where s_end <= s_begin). Static (DecodeTuning::balanced_splits off): split s takes
// keys_per_split keys of the host's key bound, so with a bound well past the true length
// (a recorded step: the length rounded up to a power of two) the splits past the length
// are empty and the rest carry the whole context. Balanced: the true count of the call,
// n_total = p0 + T (read from the device position), is spread over all n_splits splits,
// boundaries rounded down to the 16-key slot (one pool block of 16 per slot where the pool
// has blocks of 16); every group of a split uses the same boundaries, so each row's splits
// still cover its keys exactly once.
// The pool row of key key0, the first of a slot copied as a run (TcParams::runs: no table, or
// blocks of 2^bs_shift >= 16 keys, so the slot's 16 keys are the 16 rows from here).
__device__ __forceinline__ int64_t run_first_row(const TcParams& P, int key0) {
  if (!P.table) return key0;
  return (int64_t(__ldg(P.table + (key0 >> P.bs_shift))) << P.bs_shift) + (key0 & ((1 << P.bs_shift) - 1));
}

__device__ __forceinline__ void warp_split_range(const TcParams& P, int split, int p0, int n_keys, int& s_begin,
                                                 int& s_end) {
  if (P.balanced) {
    const int64_t n_total = int64_t(p0) + P.T;
    auto bound = [&](int sp) -> int {
      if (sp >= P.n_splits) return static_cast<int>(n_total);
      return static_cast<int>(sp * n_total / P.n_splits) & ~(kSlotKeys - 1);
    };
    s_begin = bound(split);
    s_end = min(n_keys, bound(split + 1));
  } else {
    s_begin = split * P.keys_per_split;
    s_end = min(n_keys, s_begin + P.keys_per_split);
  }
}

// The lean slot step's margin for moving a row's running max (exp2 units; see the lean step below).
constexpr float kLazyMaxLog2 = 6.0f;

// A slot step's softmax on S's fragments (s[h][e]: row g, key 8h + 2c + e; s[h][2 + e]: row g + 8):
// the K scale and the mask (keys past s_end or past the row's position), the new running max
// (kLazy: moved only past kLazyMaxLog2, the lean step's rule below; else the exact max), the
// rows' correction factors corr_*, the running sums l_*, and P · diag(V scale) as the A
// fragment of the 16-key P·V step (pa: keys 2c.. of tile h 0, 2c + 8.. of h 1). Rescaling O
// by corr_* is the caller's.
template <int DP, bool kLazy>
__device__ __forceinline__ void slot_softmax(const unsigned char* slot, int c, int key0, int s_end, int pos_a,
                                             int pos_b, float (&s)[2][4], float& m_a, float& m_b, float& l_a,
                                             float& l_b, float& corr_a, float& corr_b, uint32_t (&pa)[4]) {
  using L = WarpLayout<DP>;
  const float* ksc = reinterpret_cast<const float*>(slot + L::kSlotKs);
  const float* vsc = reinterpret_cast<const float*>(slot + L::kSlotVs);
  float vs[2][2];
  float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float2 kk = *reinterpret_cast<const float2*>(ksc + 8 * h + 2 * c);
    const float2 vv = *reinterpret_cast<const float2*>(vsc + 8 * h + 2 * c);
    vs[h][0] = vv.x, vs[h][1] = vv.y;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int key = key0 + 8 * h + 2 * c + e;
      const float ks = e ? kk.y : kk.x;
      const bool past = key >= s_end;
      s[h][e] = key > pos_a || past ? -INFINITY : s[h][e] * ks;
      s[h][2 + e] = key > pos_b || past ? -INFINITY : s[h][2 + e] * ks;
      mx_a = fmaxf(mx_a, s[h][e]);
      mx_b = fmaxf(mx_b, s[h][2 + e]);
    }
  }
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
  mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
  mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
  // kLazy: the max moves only past the margin (a row with no key yet, m -inf, takes any finite
  // max); the same on the row's 4 lanes, which hold the same mx and m. Else a row that has
  // seen no key yet (new max -inf) adds nothing and keeps O (zero) as it is.
  const float mn_a = kLazy ? (mx_a > m_a + kLazyMaxLog2 ? mx_a : m_a) : fmaxf(m_a, mx_a);
  const float mn_b = kLazy ? (mx_b > m_b + kLazyMaxLog2 ? mx_b : m_b) : fmaxf(m_b, mx_b);
  const bool none_a = mn_a == -INFINITY, none_b = mn_b == -INFINITY;
  corr_a = none_a ? 1.0f : exp2f(m_a - mn_a), corr_b = none_b ? 1.0f : exp2f(m_b - mn_b);
  m_a = mn_a, m_b = mn_b;
  float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      s[h][e] = none_a ? 0.0f : exp2f(s[h][e] - mn_a);
      s[h][2 + e] = none_b ? 0.0f : exp2f(s[h][2 + e] - mn_b);
      sum_a += s[h][e], sum_b += s[h][2 + e];
    }
  l_a = l_a * corr_a + sum_a;
  l_b = l_b * corr_b + sum_b;
  pa[0] = pack_half2(s[0][0] * vs[0][0], s[0][1] * vs[0][1]);
  pa[1] = pack_half2(s[0][2] * vs[0][0], s[0][3] * vs[0][1]);
  pa[2] = pack_half2(s[1][0] * vs[1][0], s[1][1] * vs[1][1]);
  pa[3] = pack_half2(s[1][2] * vs[1][0], s[1][3] * vs[1][1]);
}

// O tiles (rows g: [0], [1]; g + 8: [2], [3]) times the rows' correction factors.
template <int N>
__device__ __forceinline__ void rescale_tiles(float (&o)[N][4], float corr_a, float corr_b) {
#pragma unroll
  for (int t = 0; t < N; ++t) o[t][0] *= corr_a, o[t][1] *= corr_a, o[t][2] *= corr_b, o[t][3] *= corr_b;
}

// A slot step's O += P·V (warp_slot_step and the lean steps): keys 2c, 2c + 1 (b0) and 2c + 8,
// 2c + 9 (b1) at dim (DP / 8) g + t, over V chunks qq0 .. qq0 + NQ - 1 (O tiles 16 (qq - qq0) ..
// of o0, o1), for one (MT 1: pa0 into o0) or two row tiles (MT 2: pa1 into o1 too).
template <int DP, int NQ, int MT>
__device__ __forceinline__ void slot_pv(const unsigned char* slot, int g, int c, int qq0, const uint32_t (&pa0)[4],
                                        const uint32_t (&pa1)[4], float (&o0)[16 * NQ][4], float (&o1)[16 * NQ][4]) {
  using L = WarpLayout<DP>;
  constexpr int VQ = DP / 128;  // V chunks a lane reads per key
  const int r0 = 2 * c, r1 = 2 * c + 1, r2 = 2 * c + 8, r3 = 2 * c + 9;
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const int ch = VQ * g + qq0 + q;
    const uint4 v0 = *reinterpret_cast<const uint4*>(slot + L::kSlotV + r0 * DP + v_chunk<DP>(r0, ch) * 16);
    const uint4 v1 = *reinterpret_cast<const uint4*>(slot + L::kSlotV + r1 * DP + v_chunk<DP>(r1, ch) * 16);
    const uint4 v2 = *reinterpret_cast<const uint4*>(slot + L::kSlotV + r2 * DP + v_chunk<DP>(r2, ch) * 16);
    const uint4 v3 = *reinterpret_cast<const uint4*>(slot + L::kSlotV + r3 * DP + v_chunk<DP>(r3, ch) * 16);
    const uint32_t w0[4] = {v0.x, v0.y, v0.z, v0.w}, w1[4] = {v1.x, v1.y, v1.z, v1.w};
    const uint32_t w2[4] = {v2.x, v2.y, v2.z, v2.w}, w3[4] = {v3.x, v3.y, v3.z, v3.w};
    const __half2 bias = __float2half2_rn(1152.0f);
#pragma unroll
    for (int wi = 0; wi < 4; ++wi) {
      // Bytes of two keys interleaved: [k0.0, k1.0, k0.1, k1.1] and [k0.2, k1.2, k0.3, k1.3].
      const uint32_t x0 = w0[wi] ^ 0x80808080u, x1 = w1[wi] ^ 0x80808080u;
      const uint32_t x2 = w2[wi] ^ 0x80808080u, x3 = w3[wi] ^ 0x80808080u;
      const uint32_t i01[2] = {__byte_perm(x0, x1, 0x5140u), __byte_perm(x0, x1, 0x7362u)};
      const uint32_t i23[2] = {__byte_perm(x2, x3, 0x5140u), __byte_perm(x2, x3, 0x7362u)};
#pragma unroll
      for (int bi = 0; bi < 4; ++bi) {
        const uint32_t sel = bi & 1 ? 0x4342u : 0x4140u;
        const uint32_t b0 = as_u32(__hsub2(as_h2(__byte_perm(i01[bi >> 1], 0x64646464u, sel)), bias));
        const uint32_t b1 = as_u32(__hsub2(as_h2(__byte_perm(i23[bi >> 1], 0x64646464u, sel)), bias));
        mma_16816(o0[16 * q + 4 * wi + bi], pa0[0], pa0[1], pa0[2], pa0[3], b0, b1);
        if constexpr (MT == 2) mma_16816(o1[16 * q + 4 * wi + bi], pa1[0], pa1[1], pa1[2], pa1[3], b0, b1);
      }
    }
  }
}

// One warp's step over one slot of 16 keys (keys key0 ..; K/V rows and scales at `slot`):
// S = Q·Kᵀ for the warp's 16 rows (rows g and g + 8 of the lane read at qa_row / qb_row),
// the K scale and the mask (keys past s_end or past the row's position), the online softmax
// on the fragments (running max m_*, this lane's part of the running sum l_*), O += P·V.
// The one-tile kernel below (decode_tc_warps_kernel<DP, false>: T * G in 9..16, or any T * G
// <= 16 with DecodeTuning::narrow_rows off) and the slot-sharing kernel further below run it.
template <int DP>
__device__ __forceinline__ void warp_slot_step(const unsigned char* slot, const __half* qa_row, const __half* qb_row,
                                               int g, int c, int key0, int s_end, int pos_a, int pos_b, float& m_a,
                                               float& m_b, float& l_a, float& l_b, float (&o)[DP / 8][4]) {
  using L = WarpLayout<DP>;
  constexpr int VQ = DP / 128;  // V chunks a lane reads per key

  float s[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) s[h][0] = s[h][1] = s[h][2] = s[h][3] = 0.0f;
#pragma unroll
  for (int jj = 0; jj < DP / 64; ++jj) {
    const int ch = c + 4 * jj;  // i8 chunk of K; halves 16 ch .. of Q
    const uint4 qa0 = *reinterpret_cast<const uint4*>(qa_row + 16 * ch);
    const uint4 qa1 = *reinterpret_cast<const uint4*>(qa_row + 16 * ch + 8);
    const uint4 qb0 = *reinterpret_cast<const uint4*>(qb_row + 16 * ch);
    const uint4 qb1 = *reinterpret_cast<const uint4*>(qb_row + 16 * ch + 8);
    const uint32_t qa[8] = {qa0.x, qa0.y, qa0.z, qa0.w, qa1.x, qa1.y, qa1.z, qa1.w};
    const uint32_t qb[8] = {qb0.x, qb0.y, qb0.z, qb0.w, qb1.x, qb1.y, qb1.z, qb1.w};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int kr = 8 * h + g;
      const uint4 kw = *reinterpret_cast<const uint4*>(slot + L::kSlotK + kr * DP + k_chunk<DP>(kr, ch) * 16);
      const uint32_t kws[4] = {kw.x, kw.y, kw.z, kw.w};
#pragma unroll
      for (int j4 = 0; j4 < 4; ++j4) {
        uint32_t b0, b1;
        i8x4_to_h2(kws[j4], b0, b1);
        mma_16816(s[h], qa[2 * j4], qb[2 * j4], qa[2 * j4 + 1], qb[2 * j4 + 1], b0, b1);
      }
    }
  }

  // The online softmax on the fragments (the exact max), O rescaled where a row's max moved.
  float corr_a, corr_b;
  uint32_t pa[4];
  slot_softmax<DP, false>(slot, c, key0, s_end, pos_a, pos_b, s, m_a, m_b, l_a, l_b, corr_a, corr_b, pa);
  if (__any_sync(0xffffffffu, corr_a != 1.0f || corr_b != 1.0f)) rescale_tiles(o, corr_a, corr_b);
  slot_pv<DP, VQ, 1>(slot, g, c, 0, pa, pa, o, o);
}

// The lean slot step (DecodeTuning::lean_share_step; the shared-slot kernel below): the
// same S = Q·Kᵀ, softmax and O += P·V as warp_slot_step, with fewer instructions per slot.
// Why: at 128K T = 4 (RT 2) a warp ran 63 slot steps in 171.7 us, ~5400 cycles each, with
// two busy warps per SM sub-partition; the step's SASS (CUDA 11.8, sm_90) was ~980
// instructions of math (64 HMMA, 160 PRMT, 128 HADD2, ~100 LOP3, ~135 register moves that
// put qa / qb words into the A operand's register order, 128 FMUL of the O rescale taken in
// most slots) plus ~220 of copy issue with four serial block-table loads.
// - qf: this lane's A fragments of the tile's Q, stored in fragment order (see the kernel):
//   qf[32 kk] is {a0, a1, a2, a3} of k-step kk = 4 jj + j4, one LDS.128 straight into the
//   HMMA operand registers (the row-major Q needed four moves per k-step).
// - The running max of a row moves only when the slot's max exceeds it by more than
//   kLazyMaxLog2 (exp2 units), so after the first slots O is almost never rescaled. The
//   result is the same softmax (O and l are kept relative to whatever max the row holds;
//   the merge and the combine take any reference); P is at most 2^kLazyMaxLog2 = 64, and
//   P times the V scale (<= 65504 / 127 for an f16 source) stays below 65504 in f16
//   (kLazyMaxLog2, declared with slot_softmax above).

// Waits until the kThreads threads (whole warps) of stream `stream` (0 or 1) have arrived at
// its named barrier (1 + stream; 0 is __syncthreads), and orders their shared-memory accesses
// as __syncthreads does for the block. Immediate barrier ids: ptxas then reserves 3 barriers,
// not all 16 as it does for an id in a register.
template <int kThreads>
__device__ __forceinline__ void stream_barrier(int stream) {
  if (stream == 0) asm volatile("bar.sync 1, %0;\n" ::"n"(kThreads) : "memory");
  else asm volatile("bar.sync 2, %0;\n" ::"n"(kThreads) : "memory");
}

// The K words of chunk ch of key rows g (kws[0]) and g + 8 (kws[1]) of a slot: the B operands
// of four k-steps for the 16-row steps.
template <int DP>
__device__ __forceinline__ void load_k_words(const unsigned char* slot, int g, int ch, uint32_t (&kws)[2][4]) {
  using L = WarpLayout<DP>;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int kr = 8 * h + g;
    const uint4 kw = *reinterpret_cast<const uint4*>(slot + L::kSlotK + kr * DP + k_chunk<DP>(kr, ch) * 16);
    kws[h][0] = kw.x, kws[h][1] = kw.y, kws[h][2] = kw.z, kws[h][3] = kw.w;
  }
}

// The lean step in two halves, so the split-V step below can put the stream's barrier between
// them: lean_scores (S, scale and mask, the online softmax: m, l, the correction factors and P
// times the V scale as the A fragment pa of the P·V mma) and slot_pv (O += P·V over V chunks
// qq0 .. qq0 + NQ - 1 of each lane's key rows, i.e. O tiles 16 qq .., for MT row tiles at once:
// the V bytes are converted once for all of them). lean_scores is lean_s (S) then slot_softmax
// (the rest), so the split-K form can put the pair's exchange of partial S between them.
template <int DP>
__device__ __forceinline__ void lean_s(const unsigned char* slot, const uint4* qf, int g, int c, float (&s)[2][4]) {
  // S in two accumulators per 8-key tile (even and odd jj), added at the end: two chains of
  // DP / 32 dependent HMMA per tile instead of one of DP / 16.
  float s2[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    s[h][0] = s[h][1] = s[h][2] = s[h][3] = 0.0f;
    s2[h][0] = s2[h][1] = s2[h][2] = s2[h][3] = 0.0f;
  }
#pragma unroll
  for (int jj = 0; jj < DP / 64; ++jj) {
    const int ch = c + 4 * jj;  // i8 chunk of K
    uint32_t kws[2][4];
    load_k_words<DP>(slot, g, ch, kws);
#pragma unroll
    for (int j4 = 0; j4 < 4; ++j4) {
      const uint4 a = qf[32 * (4 * jj + j4)];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t b0, b1;
        i8x4_to_h2(kws[h][j4], b0, b1);
        mma_16816(jj & 1 ? s2[h] : s[h], a.x, a.y, a.z, a.w, b0, b1);
      }
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[h][e] += s2[h][e];
}

// S of both row tiles of a pair (Q fragments qf0, qf1) over half the head dims: K chunks c + 4 jj
// for jj in [DP / 128 half, + DP / 128), each converted once for both tiles (the split-K form).
template <int DP>
__device__ __forceinline__ void lean_s_half(const unsigned char* slot, const uint4* qf0, const uint4* qf1, int g,
                                            int c, int half, float (&s0)[2][4], float (&s1)[2][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int e = 0; e < 4; ++e) s0[h][e] = s1[h][e] = 0.0f;
#pragma unroll
  for (int j = 0; j < DP / 128; ++j) {
    const int jj = DP / 128 * half + j, ch = c + 4 * jj;
    uint32_t kws[2][4];
    load_k_words<DP>(slot, g, ch, kws);
#pragma unroll
    for (int j4 = 0; j4 < 4; ++j4) {
      const uint4 a0 = qf0[32 * (4 * jj + j4)], a1 = qf1[32 * (4 * jj + j4)];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t b0, b1;
        i8x4_to_h2(kws[h][j4], b0, b1);
        mma_16816(s0[h], a0.x, a0.y, a0.z, a0.w, b0, b1);
        mma_16816(s1[h], a1.x, a1.y, a1.z, a1.w, b0, b1);
      }
    }
  }
}

template <int DP>
__device__ __forceinline__ void lean_scores(const unsigned char* slot, const uint4* qf, int g, int c, int key0,
                                            int s_end, int pos_a, int pos_b, float& m_a, float& m_b, float& l_a,
                                            float& l_b, float& corr_a, float& corr_b, uint32_t (&pa)[4]) {
  float s[2][4];
  lean_s<DP>(slot, qf, g, c, s);
  slot_softmax<DP, true>(slot, c, key0, s_end, pos_a, pos_b, s, m_a, m_b, l_a, l_b, corr_a, corr_b, pa);
}

template <int DP>
__device__ __forceinline__ void warp_slot_step_lean(const unsigned char* slot, const uint4* qf, int g, int c,
                                                    int key0, int s_end, int pos_a, int pos_b, float& m_a, float& m_b,
                                                    float& l_a, float& l_b, float (&o)[DP / 8][4]) {
  float corr_a, corr_b;
  uint32_t pa[4];
  lean_scores<DP>(slot, qf, g, c, key0, s_end, pos_a, pos_b, m_a, m_b, l_a, l_b, corr_a, corr_b, pa);
  if (__any_sync(0xffffffffu, corr_a != 1.0f || corr_b != 1.0f)) rescale_tiles(o, corr_a, corr_b);
  slot_pv<DP, DP / 128, 1>(slot, g, c, 0, pa, pa, o, o);
}

// The split-V step (DecodeTuning::split_v; the shared-slot kernel with 2 row tiles at DP 256,
// both tiles holding rows: T = 3..5 of the 27B shape). Why: in the lean step both warps of a
// stream convert all of the slot's V bytes for their own 16 rows; here warp rt scores its own
// tile as before (lean_scores), hands its P fragment and correction factors to its partner
// through shared memory (pbuf, cbuf: [2 tiles][32 lanes] of the stream), meets it at the
// stream's barrier, and then multiplies half the head dims (V chunk VQ g + rt: O tiles
// 16 rt ..) for both tiles' rows: half the V conversions a warp, the same 32 P·V mma, O still
// 128 floats (16 tiles x 2 row tiles). o_own / o_part: the O tiles of this warp's half for its
// own tile and its partner's. One buffer suffices: a warp writes its next P only after the
// loop's barrier, which its partner reaches only after reading this one.
// kSplitK (DecodeTuning::split_k): S the same way, each warp converting half of the slot's K
// bytes and multiplying them with both tiles' Q (lean_s_half); the partial S of the partner's
// tile goes through sbuf ([2 tiles][32 lanes][8] f32 of the stream) at a second barrier. S is
// then summed in another order than the lean step's (not its bits).
template <int DP, int kStreamThreads, bool kSplitK>
__device__ __forceinline__ void warp_slot_step_split_v(const unsigned char* slot, const uint4* qf, int g, int c,
                                                       int key0, int s_end, int pos_a, int pos_b, float& m_a,
                                                       float& m_b, float& l_a, float& l_b, float (&o_own)[16][4],
                                                       float (&o_part)[16][4], int rt, int st, int lane, uint4* pbuf,
                                                       float2* cbuf, float4* sbuf) {
  static_assert(DP == 256, "two V chunks a key row per lane: one for each warp of the pair");
  float corr_a, corr_b;
  uint32_t pa[4];
  if constexpr (kSplitK) {
    // qf is this tile's fragments; tile t's are 2 DP uint4 apart.
    const uint4* qf0 = qf - rt * (2 * DP);
    float s0[2][4], s1[2][4];
    lean_s_half<DP>(slot, qf0, qf0 + 2 * DP, g, c, rt, s0, s1);
    // Element by element (a runtime choice of a whole register array would go through memory).
    float mine[2][4], theirs[2][4];
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        mine[h][e] = rt == 0 ? s0[h][e] : s1[h][e];
        theirs[h][e] = rt == 0 ? s1[h][e] : s0[h][e];
      }
    float4* to = sbuf + ((1 - rt) * 32 + lane) * 2;
    to[0] = make_float4(theirs[0][0], theirs[0][1], theirs[0][2], theirs[0][3]);
    to[1] = make_float4(theirs[1][0], theirs[1][1], theirs[1][2], theirs[1][3]);
    stream_barrier<kStreamThreads>(st);  // the partner's half of this tile's S is in
    const float4* from = sbuf + (rt * 32 + lane) * 2;
    const float4 f0 = from[0], f1 = from[1];
    float s[2][4] = {{mine[0][0] + f0.x, mine[0][1] + f0.y, mine[0][2] + f0.z, mine[0][3] + f0.w},
                     {mine[1][0] + f1.x, mine[1][1] + f1.y, mine[1][2] + f1.z, mine[1][3] + f1.w}};
    slot_softmax<DP, true>(slot, c, key0, s_end, pos_a, pos_b, s, m_a, m_b, l_a, l_b, corr_a, corr_b, pa);
  } else {
    lean_scores<DP>(slot, qf, g, c, key0, s_end, pos_a, pos_b, m_a, m_b, l_a, l_b, corr_a, corr_b, pa);
  }
  pbuf[rt * 32 + lane] = make_uint4(pa[0], pa[1], pa[2], pa[3]);
  cbuf[rt * 32 + lane] = make_float2(corr_a, corr_b);
  stream_barrier<kStreamThreads>(st);  // the partner's P and factors of this slot are in
  const uint4 pp = pbuf[(1 - rt) * 32 + lane];
  const float2 cp = cbuf[(1 - rt) * 32 + lane];
  const uint32_t pb[4] = {pp.x, pp.y, pp.z, pp.w};
  if (__any_sync(0xffffffffu, corr_a != 1.0f || corr_b != 1.0f)) rescale_tiles(o_own, corr_a, corr_b);
  if (__any_sync(0xffffffffu, cp.x != 1.0f || cp.y != 1.0f)) rescale_tiles(o_part, cp.x, cp.y);
  slot_pv<DP, 1, 2>(slot, g, c, rt, pa, pb, o_own, o_part);
}

// O tiles t0 .. t0 + N - 1 of a 16-row tile (rows g: [0], [1]; g + 8: [2], [3]; column n of
// tile t is dim (DP / 8) n + t) into its staging rows ow [16][DP + 4] f32.
template <int DP, int N>
__device__ __forceinline__ void stash_tiles(const float (&o)[N][4], float* ow, int t0, int g, int c) {
  constexpr int NT = DP / 8, kLdO = WarpLayout<DP>::kLdO;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int d = NT * 2 * c + t0 + i;
    ow[g * kLdO + d] = o[i][0];
    ow[g * kLdO + d + NT] = o[i][1];
    ow[(g + 8) * kLdO + d] = o[i][2];
    ow[(g + 8) * kLdO + d + NT] = o[i][3];
  }
}

// The end of a 16-row warp's keys (the one-tile and slot-sharing kernels): its rows' running
// max (m_w) and sum (l_w, this lane's parts added over the row's 4 lanes), by warp and row, and
// its O into the staging Os [kWW][16][DP + 4] f32 over the drained rings, for the block's merge.
__device__ __forceinline__ void stash_row_stats(float m_a, float m_b, float l_a, float l_b, float* m_w, float* l_w,
                                                int warp, int g, int c) {
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  if (c == 0) {
    m_w[warp * 16 + g] = m_a, m_w[warp * 16 + g + 8] = m_b;
    l_w[warp * 16 + g] = l_a, l_w[warp * 16 + g + 8] = l_b;
  }
}
template <int DP>
__device__ __forceinline__ void stash_tile_partial(float m_a, float m_b, float l_a, float l_b,
                                                   const float (&o)[DP / 8][4], float* m_w, float* l_w, float* Os,
                                                   int warp, int g, int c) {
  stash_row_stats(m_a, m_b, l_a, l_b, m_w, l_w, warp, g, c);
  stash_tiles<DP, DP / 8>(o, Os + warp * 16 * WarpLayout<DP>::kLdO, 0, g, c);
}

// The narrow slot step (DecodeTuning::narrow_rows; decode_tc_warps_kernel<DP, true>): up to 8
// rows, placed in the mma's n dimension (columns) instead of its m dimension.
// Why: the step above puts the rows in the 16-row m dimension, so at T = 1 of the 27B shape
// (G 6) 10 of 16 rows are padding, O takes DP / 8 m16n8 tiles (128 floats a lane at DP 256) and
// a 16-key slot costs 32 + 32 HMMA; at 128K a warp spent ~5000 cycles a slot, two warps per
// scheduler, 2.5 TB/s. Transposed, S^T = K·Q^T is one 16-key x 8-row tile per k-step
// (A = K, exactly the bytes the step above converts; B = Q^T from registers) and
// O^T += V^T·P^T one 16-dim x 8-row tile per 16 dims: 16 + 16 HMMA a slot, O in 64 floats, and
// four independent S chains instead of two. The same conversions and shared loads.
// Lane (g, c) after S: keys g (s[0], s[1]) and g + 8 (s[2], s[3]) of rows 2c, 2c + 1. A row's
// max is reduced over the 8 lanes g of its c (xor 4, 8, 16); lazy max as the lean step. P^T,
// the B operand of O^T += V^T·P^T, needs keys 2c, 2c + 1 (+8) of row g: the two 8 x 8 f16 tiles
// of P (keys 0..7 and 8..15 by rows) transposed in registers by movmatrix.
// V^T as the A operand: row g of tile t is lane-dim t, row g + 8 lane-dim DP / 16 + t, where
// lane-dim e is dim (DP / 8) g + e (the DP / 8 consecutive dims of chunks VQ g ..); k pairs are
// keys (2c, 2c + 1) and (2c + 8, 2c + 9), byte-interleaved as in the step above.
// o[t]: rows 2c (o[t][0], lane-dim t; o[t][2], lane-dim DP / 16 + t) and 2c + 1 (o[t][1], o[t][3]).
__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t a) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(d) : "r"(a));
#else
  d = a;
  __trap();
#endif
  return d;
}

template <int DP>
__device__ __forceinline__ void warp_slot_step_narrow(const unsigned char* slot, const uint32_t (&qb)[DP / 64][8],
                                                      int g, int c, int key0, int s_end, const int (&pos)[2],
                                                      float (&m)[2], float (&l)[2], float (&o)[DP / 16][4]) {
  using L = WarpLayout<DP>;
  constexpr int NJ = DP / 64;   // 16-byte K chunks per lane and row: independent S chains
  constexpr int NO = DP / 16;   // m16n8 tiles of O^T
  constexpr int VQ = DP / 128;  // V chunks a lane reads per key

  // V first, so its shared loads are in flight through S and the softmax. vw[qq][kk]: chunk
  // VQ g + qq of key 2c + (kk & 1) + 8 (kk >> 1), offset to unsigned bytes.
  uint32_t vw[VQ][4][4];
#pragma unroll
  for (int qq = 0; qq < VQ; ++qq) {
    const int ch = VQ * g + qq;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const int r = 2 * c + (kk & 1) + 8 * (kk >> 1);
      const uint4 w = *reinterpret_cast<const uint4*>(slot + L::kSlotV + r * DP + v_chunk<DP>(r, ch) * 16);
      vw[qq][kk][0] = w.x ^ 0x80808080u, vw[qq][kk][1] = w.y ^ 0x80808080u;
      vw[qq][kk][2] = w.z ^ 0x80808080u, vw[qq][kk][3] = w.w ^ 0x80808080u;
    }
  }
  float s[NJ][4];
#pragma unroll
  for (int jj = 0; jj < NJ; ++jj) s[jj][0] = s[jj][1] = s[jj][2] = s[jj][3] = 0.0f;
#pragma unroll
  for (int jj = 0; jj < NJ; ++jj) {
    const int ch = c + 4 * jj;
    const uint4 ka = *reinterpret_cast<const uint4*>(slot + L::kSlotK + g * DP + k_chunk<DP>(g, ch) * 16);
    const uint4 kb = *reinterpret_cast<const uint4*>(slot + L::kSlotK + (g + 8) * DP + k_chunk<DP>(g + 8, ch) * 16);
    const uint32_t wa[4] = {ka.x, ka.y, ka.z, ka.w}, wb[4] = {kb.x, kb.y, kb.z, kb.w};
#pragma unroll
    for (int j4 = 0; j4 < 4; ++j4) {
      uint32_t lo_a, hi_a, lo_b, hi_b;
      i8x4_to_h2(wa[j4], lo_a, hi_a);
      i8x4_to_h2(wb[j4], lo_b, hi_b);
      mma_16816(s[jj], lo_a, lo_b, hi_a, hi_b, qb[jj][2 * j4], qb[jj][2 * j4 + 1]);
    }
  }
#pragma unroll
  for (int jj = 1; jj < NJ; ++jj)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[0][e] += s[jj][e];

  // Scale and mask: s[0][e] key g, row 2c + e; s[0][2 + e] key g + 8.
  const float* ksc = reinterpret_cast<const float*>(slot + L::kSlotKs);
  const float* vsc = reinterpret_cast<const float*>(slot + L::kSlotVs);
  const float ks_a = ksc[g], ks_b = ksc[g + 8], vs_a = vsc[g], vs_b = vsc[g + 8];
  const int key_a = key0 + g, key_b = key0 + g + 8;
  float p_a[2], p_b[2], corr[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float xa = key_a > pos[e] || key_a >= s_end ? -INFINITY : s[0][e] * ks_a;
    const float xb = key_b > pos[e] || key_b >= s_end ? -INFINITY : s[0][2 + e] * ks_b;
    float mx = fmaxf(xa, xb);
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
    const float mn = mx > m[e] + kLazyMaxLog2 ? mx : m[e];
    const bool none = mn == -INFINITY;
    corr[e] = none ? 1.0f : exp2f(m[e] - mn);
    m[e] = mn;
    p_a[e] = none ? 0.0f : exp2f(xa - mn);
    p_b[e] = none ? 0.0f : exp2f(xb - mn);
    l[e] = l[e] * corr[e] + (p_a[e] + p_b[e]);
  }
  if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
    for (int t = 0; t < NO; ++t) o[t][0] *= corr[0], o[t][1] *= corr[1], o[t][2] *= corr[0], o[t][3] *= corr[1];
  }
  // P · diag(V scale) by rows of keys (key g: rows 2c, 2c + 1), then transposed: row g, keys
  // 2c, 2c + 1 (b0) and 2c + 8, 2c + 9 (b1).
  const uint32_t b0 = movmatrix_trans(pack_half2(p_a[0] * vs_a, p_a[1] * vs_a));
  const uint32_t b1 = movmatrix_trans(pack_half2(p_b[0] * vs_b, p_b[1] * vs_b));

  // O^T += V^T·P^T with the V words loaded above.
  const __half2 bias = __float2half2_rn(1152.0f);
  // Lane-dim e of keys (2c, 2c + 1) (kp 0) or (2c + 8, 2c + 9) (kp 1) as an f16 pair.
  auto pair = [&](int e, int kp) {
    const int qq = e / 16, wi = (e % 16) / 4, bi = e % 4;
    const uint32_t il = __byte_perm(vw[qq][2 * kp][wi], vw[qq][2 * kp + 1][wi], bi >> 1 ? 0x7362u : 0x5140u);
    return as_u32(__hsub2(as_h2(__byte_perm(il, 0x64646464u, bi & 1 ? 0x4342u : 0x4140u)), bias));
  };
#pragma unroll
  for (int t = 0; t < NO; ++t) mma_16816(o[t], pair(t, 0), pair(NO + t, 0), pair(t, 1), pair(NO + t, 1), b0, b1);
}

// Grid (n_splits * n_groups, Hkv), kWThreads threads. TcParams as above; G <= 16 (rows per
// group group_tokens * G <= 16), D % 16 == 0, 16-byte aligned i8 pools (the host checks).
// kNarrow: the rows (at most 8, decode_tc_narrow_takes) through warp_slot_step_narrow, and the
// slots copied by copy_run where they are runs of pool rows; else the 16-row warp_slot_step and
// issue(). The Q staging, the split range and the merge of the warps are shared.
template <int DP, bool kNarrow>
__global__ void __launch_bounds__(kWThreads, 2)
    decode_tc_warps_kernel(const __half* __restrict__ q, const int8_t* __restrict__ k, const int8_t* __restrict__ v,
                           __half* __restrict__ out, TcParams P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = WarpLayout<DP>;
  constexpr int NSW = L::kNSW, kLdQ = L::kLdQ;
  constexpr int NT = DP / 8;      // m16n8 tiles of O (columns: dim (DP / 8) n + t)
  constexpr int KCH = DP / 16;    // 16-byte chunks per i8 row
  extern __shared__ __align__(128) unsigned char smem[];
  float* m_w = reinterpret_cast<float*>(smem + L::kOffRow);  // [kWW][16]
  float* l_w = m_w + kWW * 16;                                // [kWW][16]
  float* fac = l_w + kWW * 16;                                // [kWW][16]
  float* M_s = fac + kWW * 16;                                // [16]
  float* L_s = M_s + 16;                                      // [16]
  __half* Qs = reinterpret_cast<__half*>(smem + L::kOffQ);
  unsigned char* ring_all = smem + L::kOffRing;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int split = blockIdx.x / P.n_groups, gi = blockIdx.x % P.n_groups, hk = blockIdx.y;
  // This block's row group: tokens t0 .. t0 + Tg - 1 of the call, rows r = (t - t0) * G + gq.
  const int t0 = gi * P.group_tokens, Tg = min(P.group_tokens, P.T - t0);
  const int R = Tg * P.G;

  // PDL (launched through pdl_launch where DecodeTuning::pdl): the kernel before this one (the
  // step's K/V write) may still be running until pdl_wait. Before it the block reads only what
  // no kernel of the step writes: the position and the block table (staged before the step)
  // and the K/V rows of keys before p0 (written in earlier steps), so the copies of its slots
  // that hold only such keys go out before the wait (where DecodeTuning::pre_wait_copies) and
  // their latency overlaps that kernel's tail. The combine may launch right after the wait (its
  // own pdl_wait waits for this whole grid).
  const int p0 = P.q_pos ? P.q_pos[0] : P.q_pos0;
  const int n_keys = p0 + t0 + Tg;  // the group's last token sees keys < n_keys
  int s_begin, s_end;
  warp_split_range(P, split, p0, n_keys, s_begin, s_end);
  const int n_slots = s_end > s_begin ? (s_end - s_begin + kSlotKeys - 1) / kSlotKeys : 0;
  const int n_mine = n_slots > warp ? (n_slots - warp + kWW - 1) / kWW : 0;  // warp-uniform
  const int64_t kv_stride = int64_t(P.Hkv) * P.D;
  unsigned char* ring = ring_all + warp * NSW * L::kSlotBytes;

  // Starts the copies of this warp's i-th slot (split slot warp + kWW i) into ring slot i % NSW.
  auto issue = [&](int i) {
    unsigned char* slot = ring + (i % NSW) * L::kSlotBytes;
    const int key0 = s_begin + (warp + kWW * i) * kSlotKeys;
#pragma unroll
    for (int cidx = lane; cidx < kSlotKeys * KCH; cidx += 32) {
      const int r = cidx / KCH, ch = cidx % KCH, s = key0 + r;
      const bool ok = s < s_end && ch * 16 < P.D;
      const int64_t off = ok ? pool_row(P, s) * kv_stride + int64_t(hk) * P.D + ch * 16 : 0;
      cp_async16(slot + L::kSlotK + r * DP + k_chunk<DP>(r, ch) * 16, k + off, ok);
      cp_async16(slot + L::kSlotV + r * DP + v_chunk<DP>(r, ch) * 16, v + off, ok);
    }
    const int kr = lane & 15, s = key0 + kr;
    const bool ok = s < s_end;
    const int64_t srow = ok ? pool_row(P, s) * P.Hkv + hk : 0;
    if (lane < 16) cp_async4(slot + L::kSlotKs + kr * 4, P.k_scale + srow, ok);
    else cp_async4(slot + L::kSlotVs + kr * 4, P.v_scale + srow, ok);
  };
  // The narrow kernel's copies where a slot's 16 keys are 16 consecutive pool rows (no table,
  // or pool blocks of a power of two >= 16 keys: slots start at multiples of 16): one table
  // load per slot, loaded a step ahead, instead of one per key and chunk with a division
  // (issue() above is ~400 of a slot step's ~1000 instructions at D 256; ncu, H200). A lane
  // copies chunk lane % KCH of rows lane / KCH + (32 / KCH) it.
  const bool runs = P.runs;  // decode_tc_runs_take: the narrow step always, the 16-row step where run_copies
  auto slot_row0 = [&](int i) {  // pool row of the first key of this warp's i-th slot
    return run_first_row(P, s_begin + (warp + kWW * i) * kSlotKeys);
  };
  constexpr int kRPI = 32 / KCH;  // rows per copy step of copy_run
  const int run_ch = lane % KCH, run_r0 = lane / KCH;
  const int64_t run_col = int64_t(hk) * P.D + run_ch * 16 + int64_t(run_r0) * kv_stride;
  const int run_rows = run_ch * 16 < P.D ? kSlotKeys : 0;  // rows a lane copies (none past D)
  const int64_t run_step = kRPI * kv_stride;
  auto copy_run = [&](int i, int64_t row0) {
    unsigned char* slot = ring + (i % NSW) * L::kSlotBytes;
    const int key0 = s_begin + (warp + kWW * i) * kSlotKeys;
    const int left = min(run_rows, s_end - key0) - run_r0;  // copy step it is valid while kRPI it < left
    const int8_t* ks = k + row0 * kv_stride + run_col;
    const int8_t* vs = v + row0 * kv_stride + run_col;
#pragma unroll
    for (int it = 0; it < kSlotKeys / kRPI; ++it) {
      const int r = run_r0 + kRPI * it;
      const bool ok = kRPI * it < left;
      // Rows past s_end lie in the same pool block (or past the key bound without a table):
      // a zero-byte copy (zero fill) reads nothing there.
      cp_async16(slot + L::kSlotK + r * DP + k_chunk<DP>(r, run_ch) * 16, ks + it * run_step, ok);
      cp_async16(slot + L::kSlotV + r * DP + v_chunk<DP>(r, run_ch) * 16, vs + it * run_step, ok);
    }
    const int kr = lane & 15;
    const bool ok = key0 + kr < s_end;
    const int64_t srow = ok ? (row0 + kr) * P.Hkv + hk : 0;
    if (lane < 16) cp_async4(slot + L::kSlotKs + kr * 4, P.k_scale + srow, ok);
    else cp_async4(slot + L::kSlotVs + kr * 4, P.v_scale + srow, ok);
  };
  // Slot i of the warp (one commit group each, in slot order): its keys start at key0(i) and
  // increase with i, so the slots of keys before p0 alone are a prefix [0, n_pre).
  auto start_slot = [&](int i) {
    if (i < n_mine) {
      if (runs) copy_run(i, slot_row0(i));
      else issue(i);
    }
    cp_async_commit();
  };
  int n_pre = 0;
  if (P.pre_wait_copies)
    while (n_pre < NSW && s_begin + (warp + kWW * n_pre + 1) * kSlotKeys <= p0) ++n_pre;
#pragma unroll 1
  for (int i = 0; i < n_pre; ++i) start_slot(i);
  pdl_wait();
  pdl_trigger();
#pragma unroll 1
  for (int i = n_pre; i < NSW; ++i) start_slot(i);

  // Q (q_row_halves): warp w takes rows w, w + kWW, ... Padding rows stay zero without the
  // rotation: at T = 1 of the 27B shape 10 of the 16 rows, whose butterflies (40 shuffles a row
  // at D 256) each warp used to run.
  for (int r = warp; r < 16; r += kWW) {
    uint32_t hw[DP / 64];
    q_row_halves<DP>(q, P, hk, t0, R, r, lane, hw);
    store_q_row<DP>(Qs, kLdQ, r, lane, hw);
  }
  __syncthreads();  // every warp reads every row of Q

  if constexpr (kNarrow) {
    // Rows 2c, 2c + 1 of this lane (warp_slot_step_narrow): position (padding rows see no
    // key), running max (equal on the 8 lanes of a c), this lane's part of the running sum.
    // Q^T's B fragments of every k-step stay in registers: row g, dims 16 (c + 4 jj) + 0..15.
    constexpr int NO = DP / 16;
    uint32_t qb[DP / 64][8];
#pragma unroll
    for (int jj = 0; jj < DP / 64; ++jj) {
      const uint4 q0 = *reinterpret_cast<const uint4*>(Qs + g * kLdQ + 16 * (c + 4 * jj));
      const uint4 q1 = *reinterpret_cast<const uint4*>(Qs + g * kLdQ + 16 * (c + 4 * jj) + 8);
      qb[jj][0] = q0.x, qb[jj][1] = q0.y, qb[jj][2] = q0.z, qb[jj][3] = q0.w;
      qb[jj][4] = q1.x, qb[jj][5] = q1.y, qb[jj][6] = q1.z, qb[jj][7] = q1.w;
    }
    int pos[2];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int e = 0; e < 2; ++e) pos[e] = 2 * c + e < R ? p0 + t0 + (2 * c + e) / P.G : -1;
    float o[NO][4];
#pragma unroll
    for (int t = 0; t < NO; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
#pragma unroll 1
    for (int i = 0; i < n_mine; ++i) {
      const bool refill = i + NSW < n_mine;
      const int64_t row_next = runs && refill ? slot_row0(i + NSW) : 0;  // in flight through the step
      cp_async_wait<NSW - 1>();
      __syncwarp();
      const unsigned char* slot = ring + (i % NSW) * L::kSlotBytes;
      warp_slot_step_narrow<DP>(slot, qb, g, c, s_begin + (warp + kWW * i) * kSlotKeys, s_end, pos, m, l, o);
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (refill) {
        if (runs) copy_run(i + NSW, row_next);
        else issue(i + NSW);
      }
      cp_async_commit();
    }
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its ring; the staging goes over the rings
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], 4);
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], 8);
      l[e] += __shfl_xor_sync(0xffffffffu, l[e], 16);
    }
    // Rows 8..15 hold no query here: the merge below reads rows < 16, so they are set empty.
    if (g == 0) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        m_w[warp * 16 + 2 * c + e] = m[e], l_w[warp * 16 + 2 * c + e] = l[e];
        m_w[warp * 16 + 8 + 2 * c + e] = -INFINITY, l_w[warp * 16 + 8 + 2 * c + e] = 0.0f;
      }
    }
    float* os = reinterpret_cast<float*>(ring_all) + warp * 16 * L::kLdO;
#pragma unroll
    for (int t = 0; t < NO; ++t) {
      const int d = (DP / 8) * g + t;
      os[(2 * c) * L::kLdO + d] = o[t][0];
      os[(2 * c + 1) * L::kLdO + d] = o[t][1];
      os[(2 * c) * L::kLdO + d + NO] = o[t][2];
      os[(2 * c + 1) * L::kLdO + d + NO] = o[t][3];
    }
  } else {
    // Rows g and g + 8 of this lane: position (padding rows see no key), running max (exp2
    // units; equal on the row's 4 lanes), this lane's part of the running sum.
    const int pos_a = g < R ? p0 + t0 + g / P.G : -1, pos_b = g + 8 < R ? p0 + t0 + (g + 8) / P.G : -1;
    float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
    float o[NT][4];
#pragma unroll
    for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
    const __half* qa_row = Qs + g * kLdQ;
    const __half* qb_row = Qs + (g + 8) * kLdQ;

#pragma unroll 1
    for (int i = 0; i < n_mine; ++i) {
      const bool refill = i + NSW < n_mine;
      const int64_t row_next = runs && refill ? slot_row0(i + NSW) : 0;  // in flight through the step
      // Groups committed: NSW + i; slot i is group i.
      cp_async_wait<NSW - 1>();
      __syncwarp();  // the other lanes' copies of the slot are visible
      const unsigned char* slot = ring + (i % NSW) * L::kSlotBytes;
      const int key0 = s_begin + (warp + kWW * i) * kSlotKeys;
      warp_slot_step<DP>(slot, qa_row, qb_row, g, c, key0, s_end, pos_a, pos_b, m_a, m_b, l_a, l_b, o);
      __syncwarp();  // every lane is done with the slot before it is refilled
      if (refill) {
        if (runs) copy_run(i + NSW, row_next);
        else issue(i + NSW);
      }
      cp_async_commit();
    }

    cp_async_wait<0>();
    __syncthreads();  // every warp is done with its ring; the staging goes over the rings
    stash_tile_partial<DP>(m_a, m_b, l_a, l_b, o, m_w, l_w, reinterpret_cast<float*>(ring_all), warp, g, c);
  }
  // Merge the warps: each row's max over the warps, each warp's O and sum weighed by
  // exp2(its max - that max) (0 for a warp whose row saw no key).
  __syncthreads();
  const float* Os = reinterpret_cast<const float*>(ring_all);  // [kWW][16][kLdO]
  if (tid < 16) {
    float M = -INFINITY;
    for (int w = 0; w < kWW; ++w) M = fmaxf(M, m_w[w * 16 + tid]);
    float Lsum = 0.0f;
    for (int w = 0; w < kWW; ++w) {
      const float mw = m_w[w * 16 + tid];
      const float f = mw == -INFINITY ? 0.0f : exp2f(mw - M);
      fac[w * 16 + tid] = f;
      Lsum += l_w[w * 16 + tid] * f;
    }
    M_s[tid] = M, L_s[tid] = Lsum;
  }
  __syncthreads();
  const int64_t n_rows = int64_t(P.T) * P.Hq;
  for (int idx = tid; idx < R * P.D; idx += kWThreads) {
    const int r = idx / P.D, d = idx % P.D, t = t0 + r / P.G, gq = r % P.G;
    const int64_t orow = int64_t(t) * P.Hq + hk * P.G + gq;
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWW; ++w) a += fac[w * 16 + r] * Os[(w * 16 + r) * L::kLdO + d];
    store_split_row(P, out, split, n_rows, orow, d, a, M_s, L_s, r);
  }
#else
  (void)q, (void)k, (void)v, (void)out, (void)P;
  __trap();  // decode_split_tc takes this kernel only where sm80_code() holds
#endif
}

// ---------------------------------------------------------------------------------------
// sm_80+ (native profile), i8 K and V, more than 16 rows: the warp-split kernel with the
// row tiles of a block sharing each K/V slot.
//
// Why: with one 16-row tile per block, T = 4 of the 27B shape (24 rows) runs as two row
// groups, one block each, and each group reads the split's K/V: on the H200 at 128K it took
// 217 us against 112 for T = 1 (two waves of T = 1's blocks; the second group gained nothing
// from L2). Here a block holds RT row tiles (16 * RT rows; RT 2: up to 32 rows, e.g. T <= 5
// at G 6; RT 4: up to 64, T <= 10 at G 6) and reads each slot of K/V once for all of them.
//
// Block: kWW warps = kWW / RT streams of RT warps. Warp w belongs to stream w / RT and owns
// row tile w % RT: its 16 rows, their running max and sum and O (DP / 8 m16n8 tiles: the same
// registers per warp as the one-tile kernel above, which is why the rows are split over warps
// and not stacked in one warp). Slot n (16 keys) of the split belongs to stream n % (kWW / RT);
// the RT warps of a stream fill its ring of NSS slots together (each thread copies its share
// of the chunks), and each computes the slot step of the kernel above (warp_slot_step) for
// its own tile. cp.async groups are per thread, so a slot is visible to the stream once every
// thread has waited on its group and the stream has met at a named barrier (bar.sync 1 + stream,
// 32 * RT threads: the other stream does not wait for it). That barrier, at the top of each slot,
// also says every warp of the stream is done with the previous slot, which is refilled right
// after it. A warp whose tile holds no row of the group (e.g. tile 3 at 48 rows) still copies
// and meets the barriers; it skips the math and leaves an empty partial.
// Rows: r = (t - t0) * G + gq packed without padding between tokens (24 rows: tile 0 rows
// 0..15, tile 1 rows 16..23), each row masked with its own token's position. The warps of
// one tile in different streams are merged at the end as above. Row groups (more rows than
// 16 * RT: floor(16 * RT / G) tokens per group, one block each) work as in the kernel above.
// ---------------------------------------------------------------------------------------

template <int DP, int RT>
struct WarpShareLayout {
  using WL = WarpLayout<DP>;  // the slot: K, V [16][DP] int8 swizzled, K and V scales [16] f32
  static constexpr int kStreams = kWW / RT;
  static constexpr int kRows = 16 * RT;
  static constexpr int kLdQ = DP + 8;  // halves per Q row, as in WarpLayout
  // Block: per-warp row max, sum and merge factor, per-row max and sum, then Q, then the
  // rings (stream s's slots at s * kNSS); the output staging [kWW][16][kLdO] f32 goes over the
  // rings at the end.
  static constexpr int kOffRow = 0;  // f32 m_w, l_w, fac [kWW][16]; M, L [kRows]
  static constexpr int kOffQ = 2048;                                           // half [kRows][kLdQ]
  // The split-V step's hand-over per stream: P fragments uint4 [2][32], factors float2 [2][32],
  // the split-K form's partial S float4 [2][32][2].
  static constexpr int kOffX = (kOffQ + kRows * kLdQ * 2 + 127) / 128 * 128;
  static constexpr int kXBytes = 2 * 32 * (16 + 8 + 32);
  static constexpr int kOffRing = (kOffX + kStreams * kXBytes + 127) / 128 * 128;
  static constexpr int kNSS0 = (kBudget2 - kOffRing) / (kStreams * WL::kSlotBytes);
  static constexpr int kNSS = kNSS0 < 10 ? kNSS0 : 10;  // slots per stream
  static constexpr int kBytes = kOffRing + kStreams * kNSS * WL::kSlotBytes;
  static constexpr int kLdO = DP + 4;
  static_assert(kWW % RT == 0 && kStreams <= 2, "whole streams, each with its named barrier");
  static_assert(kNSS >= 3, "a stream keeps slots loading while it computes one");
  static_assert(kWW * 16 * kLdO * 4 <= kStreams * kNSS * WL::kSlotBytes, "the output staging fits over the rings");
  static_assert((3 * kWW * 16 + 2 * kRows) * 4 <= kOffQ, "the row area");
  static_assert(kLdO == WL::kLdO, "stash_tile_partial stages O with the one-tile kernel's row pitch");
};

// Grid (n_splits * n_groups, Hkv), kWThreads threads. TcParams as above; rows per group
// group_tokens * G <= 16 * RT, D % 16 == 0, 16-byte aligned i8 pools (the host checks).
// kLean (DecodeTuning::lean_share_step): Q in mma fragment order and warp_slot_step_lean,
// and the copies of a refill split in two: the block-table loads before the stream barrier
// (they fly while the stream waits), the cp.async after it, unrolled without guards.
// kSplitV (DecodeTuning::split_v; lean, RT 2, DP 256, both row tiles holding rows):
// warp_slot_step_split_v, each warp O of half the head dims for both tiles; kSplitK (with it,
// DecodeTuning::split_k) S too.
template <int DP, int RT, bool kLean, bool kSplitV = false, bool kSplitK = false>
__global__ void __launch_bounds__(kWThreads, 2)
    decode_tc_warps_share_kernel(const __half* __restrict__ q, const int8_t* __restrict__ k,
                                 const int8_t* __restrict__ v, __half* __restrict__ out, TcParams P) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using L = WarpShareLayout<DP, RT>;
  using WL = WarpLayout<DP>;
  constexpr int NSS = L::kNSS, kLdQ = L::kLdQ, NST = L::kStreams, kRows = L::kRows;
  constexpr int NT = DP / 8;                // m16n8 tiles of O
  constexpr int KCH = DP / 16;              // 16-byte chunks per i8 row
  constexpr int kStreamThreads = 32 * RT;
  extern __shared__ __align__(128) unsigned char smem[];
  float* m_w = reinterpret_cast<float*>(smem + L::kOffRow);  // [kWW][16]
  float* l_w = m_w + kWW * 16;                                // [kWW][16]
  float* fac = l_w + kWW * 16;                                // [kWW][16]
  float* M_s = fac + kWW * 16;                                // [kRows]
  float* L_s = M_s + kRows;                                   // [kRows]
  __half* Qs = reinterpret_cast<__half*>(smem + L::kOffQ);
  unsigned char* ring_all = smem + L::kOffRing;
  static_assert(!kSplitV || (kLean && RT == 2 && DP == 256), "the split-V step: lean, a warp pair, two V chunks");
  static_assert(!kSplitK || kSplitV, "the split-K form is a form of the split-V step");
  constexpr int kHalfT = DP / 16;  // kSplitV: O tiles a warp holds per row tile

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
  const int st = warp / RT, rt = warp % RT, stid = rt * 32 + lane;  // stream, row tile, thread of the stream
  const int split = blockIdx.x / P.n_groups, gi = blockIdx.x % P.n_groups, hk = blockIdx.y;
  // This block's row group: tokens t0 .. t0 + Tg - 1 of the call, rows r = (t - t0) * G + gq.
  const int t0 = gi * P.group_tokens, Tg = min(P.group_tokens, P.T - t0);
  const int R = Tg * P.G;
  const bool busy = 16 * rt < R;  // warp-uniform: this warp's tile holds a row of the group

  // PDL as in the one-tile kernel above: the copies of the stream's slots whose keys all
  // precede the step's first new token may start before pdl_wait.
  const int p0 = P.q_pos ? P.q_pos[0] : P.q_pos0;
  const int n_keys = p0 + t0 + Tg;  // the group's last token sees keys < n_keys
  int s_begin, s_end;
  warp_split_range(P, split, p0, n_keys, s_begin, s_end);
  const int n_slots = s_end > s_begin ? (s_end - s_begin + kSlotKeys - 1) / kSlotKeys : 0;
  const int n_mine = n_slots > st ? (n_slots - st + NST - 1) / NST : 0;  // uniform over the stream
  const int64_t kv_stride = int64_t(P.Hkv) * P.D;
  unsigned char* ring = ring_all + st * NSS * WL::kSlotBytes;

  // Starts this thread's copies of the stream's i-th slot (split slot st + NST i) into ring
  // slot i % NSS: chunk stid, stid + 32 RT, .. of K and V; tile 0's warp copies the scales.
  auto issue = [&](int i) {
    unsigned char* slot = ring + (i % NSS) * WL::kSlotBytes;
    const int key0 = s_begin + (st + NST * i) * kSlotKeys;
#pragma unroll
    for (int cidx = stid; cidx < kSlotKeys * KCH; cidx += kStreamThreads) {
      const int r = cidx / KCH, ch = cidx % KCH, s = key0 + r;
      const bool ok = s < s_end && ch * 16 < P.D;
      const int64_t off = ok ? pool_row(P, s) * kv_stride + int64_t(hk) * P.D + ch * 16 : 0;
      cp_async16(slot + WL::kSlotK + r * DP + k_chunk<DP>(r, ch) * 16, k + off, ok);
      cp_async16(slot + WL::kSlotV + r * DP + v_chunk<DP>(r, ch) * 16, v + off, ok);
    }
    if (rt == 0) {
      const int kr = lane & 15, s = key0 + kr;
      const bool ok = s < s_end;
      const int64_t srow = ok ? pool_row(P, s) * P.Hkv + hk : 0;
      if (lane < 16) cp_async4(slot + WL::kSlotKs + kr * 4, P.k_scale + srow, ok);
      else cp_async4(slot + WL::kSlotVs + kr * 4, P.v_scale + srow, ok);
    }
  };
  // The lean copies: thread stid copies chunk my_ch of rows my_r0 + kRowsPass j (j < kPer)
  // of K and V (kStreamThreads is a multiple of the chunks per row, so the chunk is fixed).
  // A pool row is rv * bs + w (rv the block-table entry of the key's block, w its place in
  // the block; without a table rv = 0 and w = the key), so the element offset of a chunk is
  // rv * mstride + add with add = w * kv_stride + the head's and chunk's offset. lookup()
  // issues the table loads and computes add (nothing waits on the loads), copy() finishes
  // the offsets and starts the cp.async; ok bit j: row j lies before the split's end and the
  // chunk before D (else the chunk is zero-filled from offset 0, nothing read). Tile 0's
  // lanes do the same for the scale rows (key lane & 15, offset rv * sstride + sadd).
  constexpr int kRowsPass = kStreamThreads / KCH;  // rows one pass of the stream's threads covers
  constexpr int kPer = kSlotKeys / kRowsPass;      // rows per thread and slot
  static_assert(kStreamThreads % KCH == 0 && kPer * kRowsPass == kSlotKeys && kPer < 31, "whole rows per pass; bit 31 of ok is the scale row");
  const int my_ch = stid % KCH, my_r0 = stid / KCH;
  const bool my_ch_ok = my_ch * 16 < P.D;
  const int64_t mstride = P.table ? int64_t(P.bs) * kv_stride : 0;
  const int64_t sstride = P.table ? int64_t(P.bs) * P.Hkv : 0;
  const int64_t chunk_off = int64_t(hk) * P.D + my_ch * 16;
  struct Refill {
    int rv[kPer];
    int64_t add[kPer];
    unsigned ok;
    int srv;
    int64_t sadd;
  };
  // Place of key s: its block's table entry (a load, or 0 without a table) and w.
  auto place = [&](int s, int& rv, int& w) {
    rv = 0, w = s;
    if (P.table) {
      const int b = P.bs_shift >= 0 ? s >> P.bs_shift : s / P.bs;
      rv = __ldg(P.table + b);
      w = s - b * P.bs;
    }
  };
  auto lookup = [&](int i, Refill& f) {
    const int key0 = s_begin + (st + NST * i) * kSlotKeys;
    f.ok = 0;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int s = key0 + my_r0 + kRowsPass * j;
      f.rv[j] = 0, f.add[j] = 0;
      if (s < s_end && my_ch_ok) {
        int w;
        place(s, f.rv[j], w);
        f.add[j] = int64_t(w) * kv_stride + chunk_off;
        f.ok |= 1u << j;
      }
    }
    f.srv = 0, f.sadd = 0;
    if (rt == 0) {
      const int s = key0 + (lane & 15);
      if (s < s_end) {
        int w;
        place(s, f.srv, w);
        f.sadd = int64_t(w) * P.Hkv + hk;
        f.ok |= 1u << 31;
      }
    }
  };
  auto copy = [&](int i, const Refill& f) {
    unsigned char* slot = ring + (i % NSS) * WL::kSlotBytes;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = my_r0 + kRowsPass * j;
      const bool ok = (f.ok >> j) & 1u;
      const int64_t off = int64_t(f.rv[j]) * mstride + f.add[j];  // 0 where !ok
      cp_async16(slot + WL::kSlotK + r * DP + k_chunk<DP>(r, my_ch) * 16, k + off, ok);
      cp_async16(slot + WL::kSlotV + r * DP + v_chunk<DP>(r, my_ch) * 16, v + off, ok);
    }
    if (rt == 0) {
      const int kr = lane & 15;
      const bool ok = f.ok >> 31;
      const int64_t srow = int64_t(f.srv) * sstride + f.sadd;  // 0 where !ok
      if (lane < 16) cp_async4(slot + WL::kSlotKs + kr * 4, P.k_scale + srow, ok);
      else cp_async4(slot + WL::kSlotVs + kr * 4, P.v_scale + srow, ok);
    }
  };

  // The lean copies where a slot's 16 keys are 16 consecutive pool rows (no table, or pool
  // blocks of a power of two >= 16 keys: split bounds and slots start at multiples of 16), as
  // the narrow kernel's copy_run: one table load per slot and thread (slot_row0, issued a step
  // ahead) and rows a fixed stride apart, instead of lookup()'s load and 64-bit offset per row.
  // lookup + copy were ~300 of a split-V warp's ~1000 instructions a slot (SASS of CUDA 11.8,
  // sm_90; docs/notes/decode_attention.md, "Run copies").
  const bool runs = P.runs;  // decode_tc_runs_take
  auto slot_row0 = [&](int i) {  // pool row of the first key of the stream's i-th slot
    return run_first_row(P, s_begin + (st + NST * i) * kSlotKeys);
  };
  const int64_t run_col = chunk_off + int64_t(my_r0) * kv_stride;
  const int run_rows = my_ch_ok ? kSlotKeys : 0;  // rows this thread copies (none past D)
  auto copy_run = [&](int i, int64_t row0) {
    unsigned char* slot = ring + (i % NSS) * WL::kSlotBytes;
    const int key0 = s_begin + (st + NST * i) * kSlotKeys;
    const int left = min(run_rows, s_end - key0) - my_r0;  // row j is valid while kRowsPass j < left
    const int8_t* ks = k + row0 * kv_stride + run_col;
    const int8_t* vs = v + row0 * kv_stride + run_col;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int r = my_r0 + kRowsPass * j;
      const bool ok = kRowsPass * j < left;
      // Rows past s_end lie in the same pool block (or past the key bound without a table):
      // a zero-byte copy (zero fill) reads nothing there.
      const int64_t at = int64_t(j) * kRowsPass * kv_stride;
      cp_async16(slot + WL::kSlotK + r * DP + k_chunk<DP>(r, my_ch) * 16, ks + at, ok);
      cp_async16(slot + WL::kSlotV + r * DP + v_chunk<DP>(r, my_ch) * 16, vs + at, ok);
    }
    if (rt == 0) {
      const int kr = lane & 15;
      const bool ok = key0 + kr < s_end;
      const int64_t srow = ok ? (row0 + kr) * P.Hkv + hk : 0;
      if (lane < 16) cp_async4(slot + WL::kSlotKs + kr * 4, P.k_scale + srow, ok);
      else cp_async4(slot + WL::kSlotVs + kr * 4, P.v_scale + srow, ok);
    }
  };

  // Slot n of the stream is cp.async group n: slots 0 .. NSS - 1 here (those of keys before p0
  // alone, a prefix, before pdl_wait), slot n >= NSS in the loop's iteration n - NSS + 1 (one
  // group per iteration from the second on).
  auto start_slot = [&](int i) {
    if (i < n_mine) {
      if constexpr (kLean) {
        if (runs) {
          copy_run(i, slot_row0(i));
        } else {
          Refill f;
          lookup(i, f);
          copy(i, f);
        }
      } else {
        issue(i);
      }
    }
    cp_async_commit();
  };
  int n_pre = 0;
  if (P.pre_wait_copies)
    while (n_pre < NSS && s_begin + (st + NST * n_pre + 1) * kSlotKeys <= p0) ++n_pre;
#pragma unroll 1
  for (int i = 0; i < n_pre; ++i) start_slot(i);
  pdl_wait();
  pdl_trigger();
#pragma unroll 1
  for (int i = n_pre; i < NSS; ++i) start_slot(i);

  // Q (q_row_halves) over kRows rows.
  for (int r = warp; r < kRows; r += kWW) {
    uint32_t hw[DP / 64];
    q_row_halves<DP>(q, P, hk, t0, R, r, lane, hw);
    if constexpr (kLean) {
      // Fragment order (warp_slot_step_lean): tile r / 16 holds 2 DP uint4, entry
      // 32 (4 jj + j4) + lane' is lane' = (g', c')'s A fragment of k-step (jj, j4),
      // {row g' dims 16 ch + 4 j4 + 0, 1 | row g' + 8, same | row g', + 2, 3 | row g' + 8,
      // same} with ch = c' + 4 jj: the head-dim order in which a K chunk feeds its k-steps.
      uint32_t* qw = reinterpret_cast<uint32_t*>(Qs) + (r >> 4) * (8 * DP);
      const int rr = r & 15, gr = rr & 7, hb = rr >> 3, d0 = lane * (DP / 32);
#pragma unroll
      for (int e = 0; e < DP / 64; ++e) {
        const int d = d0 + 2 * e, ch = d >> 4, j4 = (d >> 2) & 3, e2 = (d >> 1) & 1;
        qw[((((ch >> 2) * 4 + j4) * 32 + gr * 4 + (ch & 3)) * 4) + e2 * 2 + hb] = hw[e];
      }
    } else {
      store_q_row<DP>(Qs, kLdQ, r, lane, hw);
    }
  }
  __syncthreads();  // every warp reads its tile's rows of Q

  // Rows ra = 16 rt + g and ra + 8 of this lane (padding rows see no key).
  const int ra = 16 * rt + g, rb = ra + 8;
  const int pos_a = ra < R ? p0 + t0 + ra / P.G : -1, pos_b = rb < R ? p0 + t0 + rb / P.G : -1;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.0f, l_b = 0.0f;
  float o[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) o[t][0] = o[t][1] = o[t][2] = o[t][3] = 0.0f;
  const __half* qa_row = Qs + ra * kLdQ;
  const __half* qb_row = Qs + rb * kLdQ;
  const uint4* qf = reinterpret_cast<const uint4*>(Qs) + rt * (2 * DP) + lane;  // kLean: this lane's fragments
  // kSplitV: this warp's half of O for its own tile (oh[0]) and its partner's (oh[1]), and the
  // stream's hand-over area.
  float oh[2][kHalfT][4];
  if constexpr (kSplitV) {
#pragma unroll
    for (int t = 0; t < kHalfT; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) oh[0][t][e] = oh[1][t][e] = 0.0f;
  }
  uint4* pbuf = reinterpret_cast<uint4*>(smem + L::kOffX + st * L::kXBytes);  // [2][32]
  float2* cbuf = reinterpret_cast<float2*>(pbuf + 64);                          // [2][32]
  float4* sbuf = reinterpret_cast<float4*>(cbuf + 64);                          // [2][32][2]

#pragma unroll 1
  for (int i = 0; i < n_mine; ++i) {
    const int nxt = i - 1 + NSS;  // the slot that refills ring slot (i - 1) % NSS
    if constexpr (kLean) {
      const bool refill = i > 0 && nxt < n_mine;  // uniform over the stream
      // The refill's table loads are in flight while the stream meets.
      const int64_t row_next = runs && refill ? slot_row0(nxt) : 0;
      Refill f;
      if (!runs && refill) lookup(nxt, f);
      cp_async_wait<NSS - 2>();
      stream_barrier<kStreamThreads>(st);  // the stream's copies of slot i are visible; slot i - 1 is free
      if (i > 0) {
        if (refill) {  // into ring slot (i - 1) % NSS
          if (runs) copy_run(nxt, row_next);
          else copy(nxt, f);
        }
        cp_async_commit();
      }
    } else {
      // Groups committed: NSS before the loop, one per iteration after the first, so NSS + i - 1
      // here (i >= 1): slot i (group i) is done when NSS - 2 remain (at i = 0 this waits for
      // slot 1 too).
      cp_async_wait<NSS - 2>();
      stream_barrier<kStreamThreads>(st);  // the stream's copies of slot i are visible; slot i - 1 is free
      if (i > 0) {
        if (nxt < n_mine) issue(nxt);  // into ring slot (i - 1) % NSS
        cp_async_commit();
      }
    }
    if (busy) {
      const unsigned char* slot = ring + (i % NSS) * WL::kSlotBytes;
      const int key0 = s_begin + (st + NST * i) * kSlotKeys;
      if constexpr (kSplitV)
        warp_slot_step_split_v<DP, kStreamThreads, kSplitK>(slot, qf, g, c, key0, s_end, pos_a, pos_b, m_a, m_b,
                                                            l_a, l_b, oh[0], oh[1], rt, st, lane, pbuf, cbuf, sbuf);
      else if constexpr (kLean)
        warp_slot_step_lean<DP>(slot, qf, g, c, key0, s_end, pos_a, pos_b, m_a, m_b, l_a, l_b, o);
      else
        warp_slot_step<DP>(slot, qa_row, qb_row, g, c, key0, s_end, pos_a, pos_b, m_a, m_b, l_a, l_b, o);
    }
  }

  // Merge the streams: for each row, its tile's warp in every stream, as above.
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with its ring; the staging goes over the rings
  float* Os = reinterpret_cast<float*>(ring_all);  // [kWW][16][kLdO]
  if constexpr (kSplitV) {
    stash_row_stats(m_a, m_b, l_a, l_b, m_w, l_w, warp, g, c);
    stash_tiles<DP, kHalfT>(oh[0], Os + (st * RT + rt) * 16 * L::kLdO, kHalfT * rt, g, c);
    stash_tiles<DP, kHalfT>(oh[1], Os + (st * RT + 1 - rt) * 16 * L::kLdO, kHalfT * rt, g, c);
  } else {
    stash_tile_partial<DP>(m_a, m_b, l_a, l_b, o, m_w, l_w, Os, warp, g, c);
  }
  __syncthreads();
  if (tid < kRows) {  // row tid: tile tid / 16, whose warp in stream s2 is s2 * RT + tid / 16
    const int rr = tid % 16, w0 = tid / 16;
    float M = -INFINITY;
    for (int s2 = 0; s2 < NST; ++s2) M = fmaxf(M, m_w[(s2 * RT + w0) * 16 + rr]);
    float Lsum = 0.0f;
    for (int s2 = 0; s2 < NST; ++s2) {
      const int wr = (s2 * RT + w0) * 16 + rr;
      const float f = m_w[wr] == -INFINITY ? 0.0f : exp2f(m_w[wr] - M);
      fac[wr] = f;
      Lsum += l_w[wr] * f;
    }
    M_s[tid] = M, L_s[tid] = Lsum;
  }
  __syncthreads();
  const int64_t n_rows = int64_t(P.T) * P.Hq;
  for (int idx = tid; idx < R * P.D; idx += kWThreads) {
    const int r = idx / P.D, d = idx % P.D, t = t0 + r / P.G, gq = r % P.G;
    const int rr = r % 16, w0 = r / 16;
    const int64_t orow = int64_t(t) * P.Hq + hk * P.G + gq;
    float a = 0.0f;
#pragma unroll
    for (int s2 = 0; s2 < NST; ++s2) {
      const int wr = (s2 * RT + w0) * 16 + rr;
      a += fac[wr] * Os[wr * L::kLdO + d];
    }
    store_split_row(P, out, split, n_rows, orow, d, a, M_s, L_s, r);
  }
#else
  (void)q, (void)k, (void)v, (void)out, (void)P;
  __trap();  // decode_split_tc takes this kernel only where sm80_code() holds
#endif
}

std::atomic<DecodeTcWarps> g_tc_warps{DecodeTcWarps::kAuto};
std::atomic<DecodeTcWarpsTiles> g_tc_warps_tiles{DecodeTcWarpsTiles::kAuto};

// The warp-split kernels' shared memory for the padded head dim and the row tiles per block.
int warps_smem(int DP, int RT) {
  if (DP == 128) {
    return RT == 1 ? WarpLayout<128>::kBytes
                   : RT == 2 ? WarpShareLayout<128, 2>::kBytes : WarpShareLayout<128, 4>::kBytes;
  }
  return RT == 1 ? WarpLayout<256>::kBytes : RT == 2 ? WarpShareLayout<256, 2>::kBytes : WarpShareLayout<256, 4>::kBytes;
}

}  // namespace

void set_decode_tc_warps(DecodeTcWarps mode) { g_tc_warps.store(mode, std::memory_order_relaxed); }
DecodeTcWarps decode_tc_warps() { return g_tc_warps.load(std::memory_order_relaxed); }
void set_decode_tc_warps_tiles(DecodeTcWarpsTiles tiles) { g_tc_warps_tiles.store(tiles, std::memory_order_relaxed); }
DecodeTcWarpsTiles decode_tc_warps_tiles_mode() { return g_tc_warps_tiles.load(std::memory_order_relaxed); }

int64_t decode_tc_warps_tiles(const DecodeArgs& a) {
  switch (decode_tc_warps_tiles_mode()) {
    case DecodeTcWarpsTiles::k1: return 1;
    case DecodeTcWarpsTiles::k2: return 2;
    case DecodeTcWarpsTiles::k4: return 4;
    case DecodeTcWarpsTiles::kAuto: break;
  }
  // The tiles the rows need (one block reads K/V once for all of them), rounded up to a
  // compiled count, capped by kDecodeTcWarpsAutoMaxTiles (then in row groups).
  const int64_t G = a.Hkv > 0 ? a.Hq / a.Hkv : 0;
  const int64_t need = (a.T * G + 15) / 16;
  const int64_t tiles = need <= 1 ? 1 : need <= 2 ? 2 : 4;
  return std::min(tiles, kDecodeTcWarpsAutoMaxTiles);
}

int64_t decode_tc_warps_group_tokens(const DecodeArgs& a) {
  const int64_t G = a.Hkv > 0 ? a.Hq / a.Hkv : 0, rows = 16 * decode_tc_warps_tiles(a);
  return G >= 1 && G <= rows ? std::min<int64_t>(rows / G, a.T) : 0;
}
int64_t decode_tc_warps_groups(const DecodeArgs& a) {
  const int64_t tg = decode_tc_warps_group_tokens(a);
  return tg > 0 ? (a.T + tg - 1) / tg : 0;
}

bool decode_tc_narrow_takes(const DecodeArgs& a) {
  const int64_t G = a.Hkv > 0 ? a.Hq / a.Hkv : 0;
  return decode_tuning().narrow_rows && decode_tc_warps_tiles(a) == 1 && a.T * G <= kDecodeNarrowRows;
}

bool decode_tc_split_v_takes(const DecodeArgs& a) {
  const DecodeTuning t = decode_tuning();
  if (!t.lean_share_step || !t.split_v || decode_tc_warps_tiles(a) != 2 || a.D <= 128 || a.D > 256) return false;
  // Every row group's second tile must hold rows (a warp waits at the barrier for its partner's
  // P): the last group, the smallest, has more than 16.
  const int64_t G = a.Hkv > 0 ? a.Hq / a.Hkv : 0, tg = decode_tc_warps_group_tokens(a);
  const int64_t groups = decode_tc_warps_groups(a);
  return groups > 0 && (a.T - (groups - 1) * tg) * G > 16;
}

bool decode_tc_runs_take(const DecodeArgs& a) {
  const DecodeTuning t = decode_tuning();
  // Runs of 16 pool rows: every slot starts at a multiple of 16 keys (split bounds are), so a
  // power-of-two block of at least 16 keys holds a whole slot.
  const bool runs = a.table == nullptr || (a.block_size >= 16 && (a.block_size & (a.block_size - 1)) == 0);
  if (!runs) return false;
  if (decode_tc_warps_tiles(a) == 1) return decode_tc_narrow_takes(a) || t.run_copies;  // the narrow step always
  return t.lean_share_step && t.run_copies;  // the shared-slot kernels' old step keeps issue()
}

bool decode_tc_warps_fits(const ops::Context& ctx, const DecodeArgs& a) {
  const DecodeTcWarps mode = decode_tc_warps();
  if (mode == DecodeTcWarps::kNever || (mode == DecodeTcWarps::kAuto && !kDecodeTcWarpsByDefault)) return false;
  if (!sm80_code(ctx) || !decode_tc_fits(a) || a.k_dtype != DType::I8 || a.v_dtype != DType::I8) return false;
  // Row groups (more than 16 rows): by default up to kDecodeTcWarpsMaxGroups (header).
  const int64_t groups = decode_tc_warps_groups(a);
  if (mode == DecodeTcWarps::kAuto && groups > kDecodeTcWarpsMaxGroups) return false;
  // At least one token per group (G <= 16 * tiles); whole 16-byte i8 chunks per row, every
  // row and head starting on one.
  const bool chunks = a.D % 16 == 0 && reinterpret_cast<uintptr_t>(a.k) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(a.v) % 16 == 0;
  const int RT = static_cast<int>(decode_tc_warps_tiles(a));
  return groups >= 1 && chunks && warps_smem(padded_dim(a.D), RT) <= current_device().smem_optin;
}

void decode_tc::launch_warps(const ops::Context& ctx, const DecodeArgs& a, const DecodeSplitPlan& plan, TcParams P) {
  const int DP = padded_dim(a.D);
  const int8_t* k = static_cast<const int8_t*>(a.k);
  const int8_t* v = static_cast<const int8_t*>(a.v);
  P.group_tokens = static_cast<int>(decode_tc_warps_group_tokens(a));
  P.n_groups = static_cast<int>(decode_tc_warps_groups(a));
  const int RT = static_cast<int>(decode_tc_warps_tiles(a));
  // The groups of a split in adjacent blocks (x = split * n_groups + group): see the kernel.
  const dim3 wgrid(static_cast<unsigned>(plan.n_splits * P.n_groups), static_cast<unsigned>(a.Hkv));
  const int smem = warps_smem(DP, RT);
  const DecodeTuning tuning = decode_tuning();
  const bool pdl = tuning.pdl;
  P.pre_wait_copies = tuning.pre_wait_copies;
  P.runs = decode_tc_runs_take(a);
  const bool split_v = decode_tc_split_v_takes(a);
  auto go = [&](auto kernel) { launch(ctx, a, P, kernel, wgrid, kWThreads, smem, k, v, pdl); };
  auto share = [&](auto lean) {
    constexpr bool kLean = decltype(lean)::value;
    if (DP == 128) {
      if (RT == 2) go(decode_tc_warps_share_kernel<128, 2, kLean>);
      else go(decode_tc_warps_share_kernel<128, 4, kLean>);
    } else if (RT == 2 && split_v) {
      if constexpr (kLean) {  // decode_tc_split_v_takes holds only with the lean step
        if (tuning.split_k)
          go(decode_tc_warps_share_kernel<256, 2, true, true, true>);
        else
          go(decode_tc_warps_share_kernel<256, 2, true, true>);
      }
    } else {
      if (RT == 2) go(decode_tc_warps_share_kernel<256, 2, kLean>);
      else go(decode_tc_warps_share_kernel<256, 4, kLean>);
    }
  };
  if (RT == 1 && decode_tc_narrow_takes(a)) {
    if (DP == 128) go(decode_tc_warps_kernel<128, true>);
    else go(decode_tc_warps_kernel<256, true>);
  } else if (RT == 1) {
    if (DP == 128) go(decode_tc_warps_kernel<128, false>);
    else go(decode_tc_warps_kernel<256, false>);
  } else if (tuning.lean_share_step) {
    share(std::true_type{});
  } else {
    share(std::false_type{});
  }
}

}  // namespace vi::cuda
