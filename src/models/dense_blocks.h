// The pieces every decoder here ends its layers and its pass with: the SwiGLU MLP (its
// weights, loaded with gate and up stacked where they can be, and its forward), and the
// output head over the rows the batch wants logits for. The norms around them are the
// caller's: a layer's residual add and the next norm run as one ops::add_rms_norm.
#pragma once

#include <string>

#include "core/tensor.h"
#include "models/batch.h"
#include "models/model.h"
#include "ops/registry.h"

namespace vi {

class WeightLoader;

struct SwigluWeights {
  Tensor gate, up;  // [d_ff, d] each
  Tensor down;      // [d, d_ff]
  // gate and up stacked, [2 * d_ff, d], when they share a dtype (then gate and up are row
  // views of it, so the weights are held once): one matmul reads both.
  Tensor gate_up;
};

// Loads ffn_gate/ffn_up/ffn_down (GGUF names after the prefix g) or mlp.gate_proj/up_proj/
// down_proj (HF names after h) and stacks gate|up when it can.
SwigluWeights load_swiglu(WeightLoader& w, const std::string& g, const std::string& h, int64_t d, int64_t d_ff);
// Moves the weights to ctx's device (to_device); gate and up stay row views of gate_up, or are
// left empty where the device keeps gate_up in a layout without row views (ops::MatmulUse::kSwiglu).
void swiglu_to_device(ops::Context& ctx, SwigluWeights& m);

// Steps of at most this many rows (decode, verify) run gate|up as one matmul over the stack.
// Longer ones (prefill) run two matmuls into the halves of gu and SwiGLU in place: the same
// GEMM work, without an [N, d_ff] buffer for the SwiGLU output (71 MB at 2048 rows of a
// 27B model's d_ff in f16). Where gate and up have no row views (a device layout that pairs
// their rows, CUDA's Q4_KTS) the device writes the two halves of one split matmul instead.
constexpr int64_t kStackedMlpMaxRows = 8;

// The SwiGLU output scratch of a step of N rows: [N, d_ff] where the stacked path runs (N <=
// kStackedMlpMaxRows), else empty. Allocate it with the step's other scratch, before the layers:
// an allocation inside a recorded step is a graph node between two kernels, and the second then
// cannot start (programmatic launch, backends/cuda/pdl.cuh) before the first has finished.
Tensor swiglu_scratch(ops::Context& ctx, int64_t N, int64_t d_ff);

// o = down(silu(gate(n)) * up(n)). n, o: [N, d]; gu: [N, 2 * d_ff] scratch (stacked: each
// row's gate|up product; else: the gate products of all rows, then the up products); h: what
// swiglu_scratch(N) gave.
void swiglu_mlp(ops::Context& ctx, const Tensor& n, const SwigluWeights& m, Tensor& gu, Tensor& h, Tensor& o);
// Its first half: silu(gate(n)) * up(n), returned as the tensor the down projection reads (h on
// the stacked path, else the gate half of gu).
Tensor swiglu_hidden(ops::Context& ctx, const Tensor& n, const SwigluWeights& m, Tensor& gu, Tensor& h);

// logits = head(rows of the normed stream n that the plan returns), [rows, n_vocab] in
// ctx.act, then moved to the host as f32 when `where` asks for it. n: [N, d], already through
// the final norm (norms are per row, so norming all rows and then picking equals picking
// then norming).
// out: logits_scratch(plan, n_vocab), allocated with the step's other scratch (see swiglu_scratch).
void output_logits(ops::Context& ctx, const BatchPlan& plan, const Tensor& n, const Tensor& lm_head, LogitsOn where,
                   const Tensor& out, Tensor& logits);
// [rows the plan wants logits for, n_vocab] in ctx.act.
Tensor logits_scratch(ops::Context& ctx, const BatchPlan& plan, int64_t n_vocab);

}  // namespace vi
