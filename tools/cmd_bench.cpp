// `voltinfer bench`: prefill and decode speed with the conditions BENCHMARK.md asks for.
// Prompts are deterministic (code or Chinese templates cut to an exact token count);
// each configuration is repeated with several seeds and reported as mean and min–max,
// as a markdown table on stdout and raw samples as JSON lines (--json FILE).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "ops/memory.h"
#include "tools/bench_prompts.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

struct BenchArgs {
  ModelFlags model;
  std::vector<int64_t> prompt_lens = {512};
  int64_t n_gen = 128;
  int reps = 4;
  std::string style = "code";
  std::string json_out;
  int64_t n_batch = 512;
};

struct Stats {
  double mean, min, max;
};
Stats summarize(const std::vector<double>& v) {
  double s = std::accumulate(v.begin(), v.end(), 0.0);
  return {s / v.size(), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

void run_bench(BenchArgs a) {
  int64_t longest = *std::max_element(a.prompt_lens.begin(), a.prompt_lens.end());
  if (a.model.ctx_size == 0) a.model.ctx_size = longest + a.n_gen;
  Loaded L = load(a.model);
  VI_CHECK(longest + a.n_gen <= L.n_ctx, "prompt {} + {} generated tokens exceed the context {} (-c)", longest,
           a.n_gen, L.n_ctx);
  // Tokenize a long enough text once and cut it to each length.
  std::vector<int32_t> text;
  for (size_t chars = 4 * static_cast<size_t>(longest) + 1024; static_cast<int64_t>(text.size()) < longest;
       chars *= 2)
    text = L.tokenizer->encode(bench_text(a.style, chars), false, false);
  const ModelInfo& info = L.model->info();
  std::ofstream json;
  if (!a.json_out.empty()) json.open(a.json_out);
  std::printf("\n| model | params | weights | device | threads | prompt | test | tok/s (mean) | min–max | ms/token |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (int64_t P : a.prompt_lens) {
    std::vector<double> pf, dec;
    for (int rep = 0; rep < a.reps; ++rep) {
      // Each repetition shifts the prompt window so the runs see different tokens.
      std::vector<int32_t> prompt(text.begin() + rep % 7, text.begin() + rep % 7 + P);
      if (static_cast<int64_t>(text.size()) < P + 7) prompt.assign(text.begin(), text.begin() + P);
      auto seq = L.model->new_sequence(L.n_ctx);
      Timer t;
      Tensor logits = prefill(*L.model, L.ctx, *seq, prompt, a.n_batch);
      ops::synchronize(L.ctx);
      double prefill_s = t.s();
      // Greedy decode of n_gen tokens (the first sampled token is excluded from the timing
      // by starting the clock after it, as BENCHMARK.md prescribes).
      Sampler sampler(SamplingParams{.temperature = 0});
      std::vector<int32_t> hist = prompt;
      int32_t tok = sampler.sample({logits.ptr<float>(), static_cast<size_t>(info.n_vocab)}, hist).token;
      t.reset();
      for (int64_t i = 0; i < a.n_gen; ++i) {
        L.model->forward(L.ctx, {&tok, 1}, *seq, logits, false);
        hist.push_back(tok);
        tok = sampler.sample({logits.ptr<float>(), static_cast<size_t>(info.n_vocab)}, hist).token;
      }
      ops::synchronize(L.ctx);
      double decode_s = t.s();
      pf.push_back(P / prefill_s);
      dec.push_back(a.n_gen / decode_s);
      if (json.is_open()) {
        json << nlohmann::json{{"model", info.name},      {"arch", info.arch},
                               {"params", info.n_params}, {"weight_bytes", info.weight_bytes},
                               {"device", a.model.device}, {"threads", ThreadPool::global().size()},
                               {"prompt_style", a.style}, {"prompt_tokens", P},
                               {"gen_tokens", a.n_gen},   {"rep", rep},
                               {"prefill_s", prefill_s},  {"decode_s", decode_s}}
                    .dump()
             << "\n";
      }
    }
    auto row = [&](const char* test, const std::vector<double>& v) {
      Stats s = summarize(v);
      std::printf("| %s | %.1fM | %.1f MB | %s | %d | %s %lld | %s | %.1f | %.1f–%.1f | %.2f |\n", info.name.c_str(),
                  info.n_params / 1e6, info.weight_bytes / 1e6, a.model.device.c_str(), ThreadPool::global().size(),
                  a.style.c_str(), static_cast<long long>(P), test, s.mean, s.min, s.max, 1000.0 / s.mean);
    };
    row(("prefill " + std::to_string(P)).c_str(), pf);
    row(("decode " + std::to_string(a.n_gen) + " @" + std::to_string(P)).c_str(), dec);
  }
  std::printf("\n%d repetitions per row; decode is greedy, timed after the first sampled token.\n", a.reps);
}

}  // namespace

void register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed (deterministic prompts, repeated runs)");
  a->model.add(*cmd);
  cmd->add_option("-p,--n-prompt", a->prompt_lens, "Prompt lengths in tokens (several allowed)")->delimiter(',');
  cmd->add_option("-n,--n-gen", a->n_gen, "Tokens to decode per run")->check(CLI::PositiveNumber);
  cmd->add_option("-r,--repetitions", a->reps, "Runs per configuration")->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-style", a->style, "code or zh (Chinese prose)")->check(CLI::IsMember({"code", "zh"}));
  cmd->add_option("--json", a->json_out, "Write every raw sample as JSON lines to this file");
  cmd->add_option("-b,--batch-size", a->n_batch, "Prompt tokens per forward pass")->check(CLI::PositiveNumber);
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace vi::cli
