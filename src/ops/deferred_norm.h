// The residual stream's RMS norm with its 1/rms left to the matmul that reads it, so a decode
// step needs no norm kernel between two GEMVs: the GEMV before the norm adds its product to the
// residual and writes u and the sum of squares in its epilogue; the GEMV after it multiplies u
// and scales its sums by s before rounding them (docs/notes/decode_profile.md, "The deferred
// norm"). With
//   norm(x)[t] = x[t] ⊙ (w_offset + w) · rsqrt(mean(x[t]²) + eps)   (add_rms_norm's y)
// a DeferredNorm holds
//   u[t]  = x[t] ⊙ (w_offset + w) / kDeferredNormUnit   (the activation dtype)
//   ss[t] = Σ_i x[t, i]² in fixed point (below)
// and norm(x)[t] = u[t] · s[t], s[t] = kDeferredNormUnit · rsqrt(Σ_i x[t, i]² / d + eps). The unit
// keeps u inside f16 where w_offset + w > 1 multiplies a residual value near f16's limit (x itself
// is f16 on GPUs); values it pushes below f16's normal range lose bits only below 2^-24 · 16 in
// absolute terms.
//
// The sum of squares is kept as integers so that its parts can be added in any order and still
// give the same bits: a producer's blocks add theirs with atomics, and each consumer block reads
// one total per token instead of adding up partial sums (which cost the consumer ~10% more
// instructions than the plain GEMV). Each value v = min(x², 2^32) goes to one of two words:
// round(v · 2^32) to the fine word where v < 2^16, round(v · 2^4) to the coarse word otherwise
// (exact to 2^-33 absolute, respectively 2^-21 relative; no overflow below d = 65536). A token
// has kDeferredNormSlots (fine, coarse) pairs that the producer spreads its adds over; the total
// is Σ fine · 2^-32 + Σ coarse · 2^-4. Non-finite residual values are clamped here, and reach the
// output through u.
//
// Each op below equals the classic ops up to where s is applied and what is rounded: the
// producer's x and u are add_rms_norm's x and (its y / s) rounded once; a consumer's outputs are
// its op on norm(x) with the products scaled by s before their rounding. Where a device has no
// fused kernel for a weight, the op runs as its pieces (matmul, add_deferred_norm,
// finish_deferred_norm, the consumer op on norm(x)); deferred_norm_fused says where a device
// fuses both sides, which is where a model should take this path.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/registry.h"

namespace vi::ops {

constexpr float kDeferredNormUnit = 16.0f;
constexpr int64_t kDeferredNormSlots = 2;
constexpr int64_t kDeferredNormMaxWidth = 65536;  // the fine words cannot overflow below it
constexpr float kDeferredNormFineLimit = 65536.0f;           // 2^16: v below goes to the fine word
constexpr float kDeferredNormFineScale = 4294967296.0f;      // 2^32
constexpr float kDeferredNormCoarseScale = 16.0f;            // 2^4
constexpr float kDeferredNormClamp = 4294967296.0f;          // 2^32: v = min(x², this)

// sums16 (optional; empty where d % 256 != 0): for each 16 consecutive values of u as rounded,
// their sum (f32, in an order of the producer's choosing) / 16 as an f16 pair (hi, lo), hi + lo
// within 2^-22 of it, at deferred_norm_sums_index. A consumer multiplying Q4_K weights needs Σ u
// per 32-value sub-block for the mins' term; a producer kernel that can write these in its
// epilogue sets sums_written, and a consumer may then read them instead of summing u itself.
// Nothing else writes them; a consumer must not read them unless sums_written.
struct DeferredNorm {
  Tensor u;   // [T, d] activation dtype
  Tensor ss;  // [T, 2 * kDeferredNormSlots] i64 (unsigned): (fine, coarse) per slot; zero before the producer
  float eps = 0.0f;
  Tensor sums16;              // [T, d / 8] f16, or empty
  bool sums_written = false;  // set by the producer op that wrote sums16 for this u
};

// Where group i (u's values 16 i .. 16 i + 15) keeps its hi in a row of sums16 (lo follows): per
// 256-value super-block s, 32 halves ordered (c, j / 4, half, hi / lo) for sub-block j = 4 (j / 4)
// + c of 32 values, so the lane of the Q4_K decode GEMV that holds sub-blocks c and 4 + c reads
// its four pairs with one 16-byte load.
constexpr int64_t deferred_norm_sums_index(int64_t i) {
  return 32 * (i >> 4) + 8 * ((i >> 1) & 3) + 4 * ((i >> 3) & 1) + 2 * (i & 1);
}

// Scratch for T rows of width d on ctx's device: u, sums16 (where d % 256 == 0) and `sites` zeroed
// sets of sums of squares, one per norm the caller defers (deferred_norm_site picks one). A set is
// used once: its producer adds to it. u and sums16 are overwritten whole by each producer.
DeferredNorm deferred_norm_scratch(Context& ctx, int64_t T, int64_t d, float eps, int64_t sites = 1);
// The DeferredNorm of site i of a scratch from deferred_norm_scratch (the same u and sums16).
DeferredNorm deferred_norm_site(const DeferredNorm& scratch, int64_t i);
// The sum of squares of row t that ss holds, as every backend computes it (f32: the fine and
// coarse words added over the slots, each converted once and scaled). Host tensors only.
float deferred_norm_total(const Tensor& ss_host, int64_t t);

// x += a · wᵀ (each sum rounded to x's dtype, then the add rounded: matmul then add_rms_norm's
// x), then out = the deferred norm of the new x with norm weight norm_w [d] f32. out.sums_written
// says afterwards whether out.sums16 was written too (only by a fused kernel that can).
// a: [T, K]; w: [d, K]; x: [T, d] activation dtype.
void matmul_add_deferred_norm(Context& ctx, const Tensor& a, const Tensor& w, Tensor& x, const Tensor& norm_w,
                              float w_offset, DeferredNorm& out);
// out null: whether the kernel takes this call; else runs it.
using MatmulAddDeferredNormFn = bool (*)(Context&, const Tensor& a, const Tensor& w, Tensor& x, const Tensor& norm_w,
                                         float w_offset, DeferredNorm* out);
OpTable<MatmulAddDeferredNormFn>& matmul_add_deferred_norm_table();  // keyed by w dtype; optional

// The consumers: matmul, matmul_split and matmul_swiglu (ops/matmul.h) of norm(x) given as `in`.
void matmul_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& y);
void matmul_split_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& all,
                           const std::vector<Tensor*>& parts);
void matmul_swiglu_deferred(Context& ctx, const DeferredNorm& in, const Tensor& w, Tensor& gu, Tensor& h);
// run false: whether the kernel takes this call (outs may be empty then: the check without
// them); true: runs it, writing outs (matmul: {y}; split: the parts; swiglu: {h}).
enum class DeferredConsumer : uint8_t { kMatmul, kSplit, kSwiglu };
using MatmulDeferredFn = bool (*)(Context&, const DeferredNorm& in, const Tensor& w, DeferredConsumer kind,
                                  const std::vector<Tensor*>& outs, bool run);
OpTable<MatmulDeferredFn>& matmul_deferred_table();  // keyed by w dtype; optional

// Whether the device fuses both sides for T rows: the producer on producer_w and the consumer
// `kind` on consumer_w, and the path is on. On by default (the H200's 27B Q4_K rounds take
// ~0.15 ms less at T = 1 and 4, docs/notes/decode_profile.md, "The deferred norm"); the
// environment variable VI_DEFER_NORM=0 turns it off, set_deferred_norm_allowed (tests)
// overrides both: 1 on, 0 off, -1 back to the environment.
bool deferred_norm_fused(Context& ctx, const Tensor& producer_w, const Tensor& consumer_w, DeferredConsumer kind,
                         int64_t T);
void set_deferred_norm_allowed(int allowed);

// The pieces the unfused ops run as. add_deferred_norm: x += o (rounded to x's dtype), out = the
// deferred norm of the new x (its sums added to out.ss, which must be zero before). finish_deferred_norm: y = u · s (y [T, d] of u's dtype).
void add_deferred_norm(Context& ctx, Tensor& x, const Tensor& o, const Tensor& norm_w, float w_offset,
                       DeferredNorm& out);
using AddDeferredNormFn = void (*)(Context&, Tensor& x, const Tensor& o, const Tensor& norm_w, float w_offset,
                                   DeferredNorm& out);
OpTable<AddDeferredNormFn>& add_deferred_norm_table();  // keyed by x dtype
void finish_deferred_norm(Context& ctx, const DeferredNorm& in, Tensor& y);
using FinishDeferredNormFn = void (*)(Context&, const DeferredNorm& in, Tensor& y);
OpTable<FinishDeferredNormFn>& finish_deferred_norm_table();  // keyed by u dtype

}  // namespace vi::ops
