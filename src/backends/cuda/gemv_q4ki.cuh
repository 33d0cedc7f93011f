// The int8-activation decode GEMV on Q4_KI weights (native profile, sm_80+): y[T, N] = x[T, K] ·
// w[N, K]ᵀ for T <= 8 tokens whose activations come as Q8_KX blocks (core/dtype.h), w in the
// tiled layout Q4_KI made from Q4_K.
//
// Why: the f16 GEMV on Q4_KT (gemv_q4kt.cu) spends ~280 instructions per warp and super-block
// turning nibbles into sc·q in f16 and running 32 m16n8k16 mmas, 16 of them for the mins; with
// the math removed the same loads ran 10–26% faster (docs/notes/gemv.md run 22). Here a
// super-block is 8 mma.m16n8k32 (u8 weights × s8 activations, one sub-block each: the nibbles
// need only a mask), the 6-bit scales applied to the int32 sums by IMAD, and the mins by one f16
// mma against the activations' sub-block sums, exact in fp32: about half the instructions.
// The price is the activations' rounding to int8 (one scale per 256 values), as llama.cpp's
// Q4_K paths do: ~17x the f16 path's logit error against transformers (scripts/golden_q4k.sh),
// so models take this path only with ops::Context::int8_act (--int8-activations). The kernels
// that write a projection's input make the Q8_KX blocks.
//
// Work layout as gemv_q4kt: 4 warps per 16-row tile split K, two super-blocks loaded ahead, the
// fused gate|up + SwiGLU and the split outputs the same.
#pragma once

#include <vector>

#include "ops/registry.h"  // host-only: the op tests and the benchmark include this header

namespace vi::cuda {

// w: Q4_KR [N, K] with N % 16 == 0. Returns the same matrix as Q4_KI.
Tensor q4ki_from_q4kr(ops::Context& ctx, const Tensor& w);

// xq[T, K] (Q8_KX) from x[T, K] (f16, K % 256 == 0; x may be a row view with a stride).
void quantize_q8kx(const ops::Context& ctx, const Tensor& x, Tensor& xq);

// Whether this context runs the int8 GEMV at all: the native profile on sm_80+ code.
bool gemv_q4ki_available(const ops::Context& ctx);

int gemv_q4ki_default_blocks(int64_t N);
std::vector<int> gemv_q4ki_shapes();

// Whether gemv_q4ki can take this call: xq Q8_KX [T, K] with T <= 8, w Q4_KI [N, K], sm_80+ code.
bool gemv_q4ki_supports(const ops::Context& ctx, const Tensor& xq, const Tensor& w);
void gemv_q4ki(const ops::Context& ctx, const Tensor& xq, const Tensor& w, Tensor& y, int blocks = 0);
void gemv_q4ki_split(const ops::Context& ctx, const Tensor& xq, const Tensor& w, const std::vector<Tensor*>& parts);
// h[T, F] = silu(x · w[0:F]ᵀ) ⊙ (x · w[F:2F]ᵀ) for a stacked gate|up w [2F, K], F % 16 == 0.
void gemv_q4ki_swiglu(const ops::Context& ctx, const Tensor& xq, const Tensor& w, Tensor& h);

}  // namespace vi::cuda
