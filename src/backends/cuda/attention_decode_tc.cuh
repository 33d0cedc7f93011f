// What the tensor-core split kernels of decode attention share: attention_decode_tc.cu (the
// WMMA and cp.async-ring kernels, and decode_split_tc, which picks one) and
// attention_decode_tc_warps.cu (the warp-split kernels, sm_80+, i8 K and V).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backends/cuda/attention_decode.cuh"
#include "backends/cuda/cuda_util.cuh"
#include "backends/cuda/pdl.cuh"

namespace vi::cuda::decode_tc {

constexpr float kLn2 = 0.6931471805599453f;

// The cp.async kernels' slots: 16 keys (K and V rows and their i8 scales) each.
constexpr int kSlotKeys = 16;
constexpr int kBudget2 = 113 * 1024;  // per block, two blocks on a 228 KB SM (1 KB reserved each)
constexpr int kBudget1 = 227 * 1024;  // the opt-in limit of one block (H100/H200)

// The kernels' parameters, filled by decode_split_tc (the warp-split launch adds its row groups).
struct TcParams {
  const int32_t* table;  // [n_tbl] pool block of each run of bs positions (null: key s is row s)
  const int32_t* q_pos;  // [1] device position of query 0 (null: q_pos0)
  const float* k_scale;  // [n_rows, Hkv] (i8 K)
  const float* v_scale;  // [n_rows, Hkv] (i8 V)
  int bs, q_pos0, T, Hq, Hkv, D, G, R, MT, keys_per_split;
  int bs_shift;  // log2(bs) when bs is a power of two, else -1 (the row lookups by shift)
  int group_tokens, n_groups;  // the warp-split kernel's row groups: tokens per group, groups
  int n_splits;   // splits (blocks per row group and KV head)
  bool balanced;  // warp-split kernels: splits spread the true key count (warp_split_range)
  bool pre_wait_copies;  // warp-split kernels: DecodeTuning::pre_wait_copies
  bool runs;             // warp-split kernels: slots copied as runs of pool rows (decode_tc_runs_take)
  float qscale;  // scale * log2(e)
  bool rotate_q, vec_k, vec_v;
  float* part_acc;  // [n_splits, T * Hq, D] unnormalised (null: one split, write out)
  float* part_ml;   // [n_splits, T * Hq, 2] (max in natural-log units, sum)
};

// The pool row of key s: through the block table where there is one (by shift where the
// block size is a power of two: an integer division is ~20 instructions).
__device__ __forceinline__ int64_t pool_row(const TcParams& P, int s) {
  if (!P.table) return s;
  const int b = P.bs_shift >= 0 ? s >> P.bs_shift : s / P.bs;
  return int64_t(__ldg(P.table + b)) * P.bs + (s - b * P.bs);
}

// Stores value a at dim d of merged row orow (row r of the block's m_s / l_s: running max in
// exp2 units, sum): with one split (no partial buffer) the final out = a / l; else the
// unnormalised partial of `split` and, at d 0, the row's (max in natural-log units, sum) that
// the combine reads.
__device__ __forceinline__ void store_split_row(const TcParams& P, __half* out, int split, int64_t n_rows,
                                                int64_t orow, int d, float a, const float* m_s, const float* l_s,
                                                int r) {
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

// The head dim the kernels are compiled for.
inline int padded_dim(int64_t D) { return D <= 128 ? 128 : 256; }

// Launches one split kernel (q, k, v, out, P) on ctx's stream, opting into its dynamic shared
// memory (opt_in_dynamic_smem); pdl: through pdl_launch (only the
// warp-split kernels call pdl_wait, the rule in pdl.cuh; the others keep <<<>>>).
template <class Kernel, class TK, class TV>
void launch(const ops::Context& ctx, const DecodeArgs& a, const TcParams& P, Kernel kernel, dim3 grid, int threads,
            int smem, const TK* k, const TV* v, bool pdl) {
  opt_in_dynamic_smem(reinterpret_cast<const void*>(kernel), smem);
  if (pdl) {
    VI_CUDA_CHECK(pdl_launch(kernel, grid, dim3(threads), static_cast<size_t>(smem), stream_of(ctx),
                             static_cast<const __half*>(a.q), k, v, static_cast<__half*>(a.out), P));
    return;
  }
  kernel<<<grid, threads, smem, stream_of(ctx)>>>(static_cast<const __half*>(a.q), k, v, static_cast<__half*>(a.out),
                                                  P);
  VI_CUDA_LAUNCH_CHECK();
}

// decode_split_tc where decode_tc_warps_fits holds (attention_decode_tc_warps.cu): P as it
// filled it; the row groups, tuning and the kernel of the shape are picked here.
void launch_warps(const ops::Context& ctx, const DecodeArgs& a, const DecodeSplitPlan& plan, TcParams P);

}  // namespace vi::cuda::decode_tc
