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

struct BatchPlan {
  int64_t n_rows = 0;
  std::vector<int64_t> row0;       // first row of item i; row0[i+1] - row0[i] = T_i
  std::vector<int64_t> pos0;       // n_past of item i's sequence
  Tensor ids;                      // [n_rows] i32
  Tensor pos;                      // [n_rows] i32, absolute positions
  std::vector<int64_t> out_rows;   // rows whose logits are returned, in order
  std::vector<Tensor> block_tables;  // item i's block table: [n_tbl] i32 view

  int64_t rows_of(size_t i) const { return row0[i + 1] - row0[i]; }

  // Throws vi::Error (nothing changed) for an empty item, a sequence listed twice, a
  // context overflow, a block table too short for the new tokens, or a token id outside
  // [0, n_vocab).
  static BatchPlan make(std::span<const BatchItem> items, int64_t n_vocab);
};

// Copies the rows listed in plan.out_rows of x [n_rows, d] into a compact [M, d] tensor
// (returns x itself when every row is wanted).
Tensor gather_output_rows(ops::Context& ctx, const BatchPlan& plan, const Tensor& x);

}  // namespace vi
