// Qwen3.5 dense hybrid: Gated DeltaNet layers + gated full-attention layers (+ MTP head
// weights, loaded and shape-checked for speculative decoding). MODEL_QWEN35.md has the math.
#pragma once

#include <memory>

#include "models/model.h"

namespace vi {

std::unique_ptr<Model> load_qwen3_5(const WeightSource& src, const LoadOptions& opts);

}  // namespace vi
