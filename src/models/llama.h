// Dense transformer family: llama (SmolLM2), qwen2 (q/k/v biases), qwen3 (per-head q/k norms).
#pragma once

#include <memory>

#include "models/model.h"

namespace vi {

std::unique_ptr<Model> load_llama(const WeightSource& src, const LoadOptions& opts);

}  // namespace vi
