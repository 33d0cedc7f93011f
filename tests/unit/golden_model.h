// A tiny golden model (tests/golden/NAME, Hugging Face form) loaded on the CPU, for tests that
// drive whole models: the weight source must outlive the model (its tensors may be views of
// the mapped file).
#pragma once

#include <memory>
#include <string>

#include "formats/weight_source.h"
#include "models/model.h"

namespace vi::test {

struct GoldenModel {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> model;
};

inline GoldenModel load_golden(const std::string& name) {
  GoldenModel g;
  g.src = formats::open_weight_source(std::string(VI_SOURCE_DIR) + "/tests/golden/" + name);
  g.model = load_model(*g.src);
  return g;
}

}  // namespace vi::test
