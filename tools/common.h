// Shared pieces of the voltinfer commands: flags that several commands take, model and
// tokenizer loading with a progress bar, and the default-model lookup.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/weights.h"
#include "models/model.h"
#include "ops/registry.h"
#include "runtime/generate.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace vi::cli {

struct ModelFlags {
  std::string model;      // -m/--model; empty: the bundled default model
  int64_t ctx_size = 0;   // -c/--ctx-size; 0: min(model's trained context, 4096)
  int threads = 0;        // -t/--threads; 0: all hardware threads
  int tp = 1;             // --tp/-tp: ranks of a tensor-parallel group (LoadOptions::tp)
  std::string device = "cpu";
  std::string kernel_profile = "auto";  // --kernel-profile: auto, volta, native (cuda only)
  bool no_graphs = false;                // --no-cuda-graphs: decode steps op by op
  bool int8_act = false;                 // --int8-activations (cuda only): ops::Context::int8_act
  std::string cache_type_k, cache_type_v;  // -ctk/-ctv: f16, f32, int8; empty: the activation dtype
  std::string log_level = "warn";
  bool draft_head = false;  // not a flag: set by commands that draft with the MTP head (--spec mtp)
  void add(CLI::App& app);
};

void add_sampling_flags(CLI::App& app, SamplingParams& s, int64_t& n_predict);

// --spec / --draft-max: speculative decoding (runtime/speculative.h).
struct SpecFlags {
  std::string kind = "off";
  int draft_max = 3;
  void add(CLI::App& app);
  SpecOptions options() const;  // throws vi::Error for an unknown kind
};

// Everything a command needs to run a model.
struct Loaded {
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // Jinja source from the model ("" if it has none)
  ops::Context ctx;
  int64_t n_ctx = 0;
};

// Resolves the model path (flag, $VOLTINFER_MODEL, the bundled default), loads weights
// with a progress bar on stderr, the tokenizer and the chat template.
Loaded load(const ModelFlags& flags, bool need_tokenizer = true);

// The default model's path, or an error explaining how to get it.
std::string default_model_path();

// Parses "1,2,3" into token ids.
std::vector<int32_t> parse_token_list(const std::string& s);

// Rewrites llama.cpp-style single-dash long flags (-np, -sys, -st, -ngl ...) to the
// double-dash names CLI11 understands.
std::vector<std::string> normalize_args(int argc, char** argv);

}  // namespace vi::cli
