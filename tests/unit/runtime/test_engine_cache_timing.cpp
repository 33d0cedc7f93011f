// Time to first token of the second turn vs the first, for a ~4K-token conversation
// through the engine, on SmolLM2-135M (Q4_1 GGUF, models/) and the tiny Qwen3.5
// (tests/golden/qwen35_a). Slow on a small CPU, so it runs only with VI_CACHE_BENCH=1;
// it prints the numbers docs/PERFORMANCE.md reports and checks the cache pays off
// (turn 2 reuses turn 1 and is faster) and gives the same greedy tokens as no cache.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "formats/weight_source.h"
#include "runtime/engine.h"

namespace vi {
namespace {

using Clock = std::chrono::steady_clock;

struct Turn {
  double ttft_ms = 0;
  int64_t cached = 0;
  std::vector<int32_t> tokens;
};

Turn run(Engine& e, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto req = std::make_shared<Request>();
  req->prompt = prompt;
  req->params.sampling.temperature = 0;
  req->params.max_tokens = max_tokens;
  req->params.ignore_stop_tokens = true;
  const auto t0 = Clock::now();
  EXPECT_EQ(e.submit(req), Engine::SubmitStatus::kOk);
  Turn t;
  for (;;) {
    auto ev = req->events->pop(std::chrono::seconds(600));
    if (!ev || ev->kind == Event::Kind::kError) {
      ADD_FAILURE() << (ev ? ev->error : "timeout");
      return t;
    }
    if (ev->kind == Event::Kind::kToken) {
      if (t.tokens.empty()) t.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      t.tokens.push_back(ev->token);
    }
    if (ev->kind == Event::Kind::kDone) {
      t.cached = ev->cached_tokens;
      return t;
    }
  }
}

void measure(const std::string& path, int64_t n_prompt) {
  if (!std::getenv("VI_CACHE_BENCH")) GTEST_SKIP() << "set VI_CACHE_BENCH=1 to run";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is missing";
  auto src = formats::open_weight_source(path);
  auto model = load_model(*src);
  const int64_t V = model->info().n_vocab;
  std::mt19937 rng(1234);
  std::vector<int32_t> conv(static_cast<size_t>(n_prompt));
  for (auto& x : conv) x = static_cast<int32_t>(rng() % V);
  std::vector<int32_t> user(40);  // the next user message
  for (auto& x : user) x = static_cast<int32_t>(rng() % V);
  std::vector<std::vector<int32_t>> outputs;
  EngineOptions o;
  o.max_seqs = 1;
  o.n_ctx = 8192;
  o.step_tokens = 512;
  o.snapshot_interval = 512;
  for (bool cache : {true, false}) {
    o.prefix_cache = cache;
    Engine e(*model, {}, o);
    auto c = conv;
    Turn t1 = run(e, c, 16);
    c.insert(c.end(), t1.tokens.begin(), t1.tokens.end());
    c.insert(c.end(), user.begin(), user.end());
    Turn t2 = run(e, c, 16);
    std::printf("[ result   ] %s cache %s: turn 1 prompt %zu ttft %.1f ms (cached %lld); turn 2 prompt %zu "
                "ttft %.1f ms (cached %lld); speed-up %.1fx\n",
                model->info().name.c_str(), cache ? "on " : "off", conv.size(), t1.ttft_ms,
                static_cast<long long>(t1.cached), c.size(), t2.ttft_ms, static_cast<long long>(t2.cached),
                t1.ttft_ms / t2.ttft_ms);
    if (cache) {
      EXPECT_EQ(t2.cached, static_cast<int64_t>(conv.size() + t1.tokens.size()) - 1);
      EXPECT_LT(t2.ttft_ms, t1.ttft_ms);
    }
    outputs.push_back(t1.tokens);
    outputs.back().insert(outputs.back().end(), t2.tokens.begin(), t2.tokens.end());
  }
  EXPECT_EQ(outputs[0], outputs[1]) << "greedy tokens differ with and without the cache";
}

TEST(EngineCacheTiming, SmolLM2SecondTurn) {
  measure(std::string(VI_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf", 4000);
}

TEST(EngineCacheTiming, TinyQwen35SecondTurn) {
  measure(std::string(VI_SOURCE_DIR) + "/tests/golden/qwen35_a", 4000);
}

}  // namespace
}  // namespace vi
