// Matrix multiplication with a weight matrix: y = x · wᵀ.
#pragma once

#include <vector>

#include "ops/registry.h"

namespace vi::ops {

// x: [T, K] activations; w: [N, K] weights of any supported dtype (dequantized block by
// block; quantized types need K to be a whole number of blocks); y: [T, N].
// Leading dimensions of x/y beyond the last are flattened into T.
// x may also be Q8_KX (int8 activation blocks, core/dtype.h) where matmul_input_dtype(w) says
// so; y is then f16. The three matmul ops take such an x alike.
void matmul(Context& ctx, const Tensor& x, const Tensor& w, Tensor& y);
using MatmulFn = void (*)(Context&, const Tensor& x, const Tensor& w, Tensor& y);
OpTable<MatmulFn>& matmul_table();  // keyed by w dtype

// The SwiGLU MLP's first half on a stacked gate|up weight w [2F, K]: h[T, F] =
// silu(x · w[0:F]ᵀ) ⊙ (x · w[F:2F]ᵀ), i.e. matmul into gu [T, 2F] then swiglu_halves(gu, h),
// with the products rounded to the activation dtype where matmul stores them. A device kernel
// may do both in one pass (CUDA: the tensor-core decode GEMVs, T <= 8; they leave gu unwritten);
// everywhere else the two ops run, with gu as their scratch.
void matmul_swiglu(Context& ctx, const Tensor& x, const Tensor& w, Tensor& gu, Tensor& h);
// With h null: whether the kernel takes this call (else the two ops run); with h: runs it.
using MatmulSwigluFn = bool (*)(Context&, const Tensor& x, const Tensor& w, Tensor* h);
OpTable<MatmulSwigluFn>& matmul_swiglu_table();  // keyed by w dtype; optional

// The row blocks of a stacked weight in one call, each block's product in a tensor of its own:
// parts[p] [T, w_p] = x · w[o_p : o_p + w_p]ᵀ, o_p the widths of the parts before it (they sum
// to N; at most kSplitMaxParts of them, ops/copy.h). Equals matmul(x, w, all) then split_cols(all, parts),
// bit for bit. A device kernel may write the parts directly (CUDA: the Q4_KT decode GEMV, whose
// parts are whole 16-row tiles) and leave all [T, N] unwritten: for T > 1 the parts are not
// column views of one row-major product, and the copy was a kernel per call.
void matmul_split(Context& ctx, const Tensor& x, const Tensor& w, Tensor& all, const std::vector<Tensor*>& parts);
// Whether a device kernel takes matmul_split(x, w, all, parts) and writes the parts itself, so
// that `all` is not touched (the caller may then pass a buffer the parts alias).
bool matmul_split_direct(Context& ctx, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts);
// run false: whether the kernel takes this call (else matmul + split_cols run); true: runs it.
using MatmulSplitFn = bool (*)(Context&, const Tensor& x, const Tensor& w, const std::vector<Tensor*>& parts,
                               bool run);
OpTable<MatmulSplitFn>& matmul_split_table();  // keyed by w dtype; optional

// The dtype in which the matmul ops want x for T rows of activations on weight w: Q8_KX where the
// device multiplies w with int8 activations (CUDA: Q4_KI, T <= 8), so the op that writes x can
// write it so (ops::add_rms_norm); ctx.act otherwise. Any x of ctx.act is still taken (the
// matmul then converts it itself, one more kernel).
DType matmul_input_dtype(Context& ctx, const Tensor& w, int64_t T);
using MatmulInputDtypeFn = DType (*)(Context&, const Tensor& w, int64_t T);
OpTable<MatmulInputDtypeFn>& matmul_input_dtype_table();  // keyed by w dtype; optional

// The activation dtype of x: x's own, f16 for Q8_KX blocks (what y and the parts are).
inline DType matmul_act_dtype(const Tensor& x) { return x.dtype() == DType::Q8_KX ? DType::F16 : x.dtype(); }

}  // namespace vi::ops
