// What Model::forward_batch keeps between steps: the arena the step inputs live in on the
// device, and the recorded small steps (ops/graph.h) keyed by everything their recording
// depends on. Private to models/model.cpp and the tests.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "models/batch.h"
#include "ops/graph.h"

namespace vi {

struct RecordedStep {
  std::unique_ptr<ops::Graph> graph;
  Tensor logits;  // [rows wanted, n_vocab] the recording writes, in the activation dtype
  Tensor hidden;  // [n_rows, d_model] the final hidden states, where the step was asked for them
};

struct StepRunner {
  std::mutex mu;  // one step at a time per model
  StepArena arena;
  // Key: a hash of the plan's shape and of every address the recording bakes in.
  std::map<uint64_t, RecordedStep> steps;
  bool disabled = false;  // a recording failed once: run eagerly from then on (said once)
  Tensor input;  // the draft passes' hidden input [kMaxRecordedRows, d_model], copied in before a replay
  Model::StepStats stats;
};

}  // namespace vi
