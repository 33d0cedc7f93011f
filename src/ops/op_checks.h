// Small helpers for the op entry points' argument checks: every message names the op,
// the tensor (its name when it has one), its shape and dtype.
#pragma once

#include <string>

#include "core/tensor.h"

namespace vi::ops {

// "'blk.0.attn_q.weight' [576, 576] q8_0" or "[3, 576] f32" for unnamed tensors.
inline std::string describe(const Tensor& t) {
  std::string s = t.name().empty() ? "" : "'" + t.name() + "' ";
  return s + t.shape_str() + " " + dtype_name(t.dtype());
}

inline bool same_shape(const Tensor& a, const Tensor& b) { return a.shape() == b.shape(); }

}  // namespace vi::ops
