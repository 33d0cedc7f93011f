// Opens a model file as a vi::WeightSource (core/weights.h): a .gguf file, a
// .safetensors file, or a Hugging Face folder (config.json + model.safetensors or
// shards listed in model.safetensors.index.json).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/weights.h"

namespace vi::formats {

std::unique_ptr<WeightSource> open_weight_source(const std::string& path);

// Flattens a config.json object into dotted keys ("text_config.hidden_size"); arrays of
// numbers/strings become metadata arrays.
Metadata flatten_config(const nlohmann::json& config);

}  // namespace vi::formats
