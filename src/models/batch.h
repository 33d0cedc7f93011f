// Per-step batch metadata shared by the model files: where each sequence's rows sit in
// the concatenated batch, token ids and positions per row, and which rows need logits.
// Built (and validated) once per forward pass, before any state is touched.
#pragma once

#include <span>
#include <vector>

#include "core/tensor.h"
#include "models/model.h"
#include "ops/registry.h"

namespace vi {

// Device home of a step's inputs (token ids, positions, KV rows, block tables): one per model,
// reused by every step, so a recorded step (ops/graph.h) finds its inputs at the addresses it
// was recorded with. Grows (and moves: a new generation) when a step needs more room.
struct StepArena {
  Tensor buf;               // [capacity] i32 on the model's device
  uint64_t generation = 0;  // bumped whenever buf moves
};

struct BatchPlan {
  int64_t n_rows = 0;
  std::vector<int64_t> row0;       // first row of item i; row0[i+1] - row0[i] = T_i
  std::vector<int64_t> pos0;       // n_past of item i's sequence
  Tensor ids;                      // [n_rows] i32
  Tensor pos;                      // [n_rows] i32, absolute positions
  std::vector<int64_t> out_rows;   // rows whose logits are returned, in order
  std::vector<Tensor> block_tables;  // item i's block table: [n_tbl] i32 view
  std::vector<int32_t> kv_rows;     // [n_rows] KV pool row each new token is written to
  // Per item: the key count its attention launch is sized for (>= pos0 + T; stage() sets it).
  std::vector<int64_t> kv_bound;

  // What the kernels read, on the model's device (the host tensors above on the CPU): ids,
  // pos, kv_rows [n_rows] i32 and each item's block table [>= kv_bound / block_size] i32.
  struct DeviceInputs {
    Tensor ids, pos, kv_rows;
    std::vector<Tensor> tables;
  } dev;

  int64_t rows_of(size_t i) const { return row0[i + 1] - row0[i]; }

  // Throws vi::Error (nothing changed) for an empty item, a sequence listed twice, a
  // context overflow, a block table too short for the new tokens, or a token id outside
  // [0, n_vocab).
  static BatchPlan make(std::span<const BatchItem> items, int64_t n_vocab);

  // Moves the step's inputs to ctx.device in one copy into `arena` and fills `dev`. With
  // `bucketed`, each item's kv_bound is its length rounded up to a power of two (at least
  // 256, at most its capacity) and its table is padded to that bound, so the steps of one
  // bucket have launches of one shape and can replay one recording; otherwise kv_bound is
  // exact. On the CPU `dev` views the host data and the arena is unused.
  void stage(ops::Context& ctx, std::span<const BatchItem> items, StepArena& arena, bool bucketed);
};

// Copies the rows listed in plan.out_rows of x [n_rows, d] into a compact [M, d] tensor
// (returns x itself when every row is wanted).
Tensor gather_output_rows(ops::Context& ctx, const BatchPlan& plan, const Tensor& x);

}  // namespace vi
