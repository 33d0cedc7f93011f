// `voltinfer perplexity`: how well the model predicts a text, computed as llama.cpp's
// perplexity tool does so numbers compare: the text is cut into windows of n_ctx tokens,
// each window starts with BOS when the model uses one, and only the second half of every
// window is scored (each scored token then has at least n_ctx/2 tokens of context).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/timer.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

struct PplArgs {
  ModelFlags model;
  std::string file;
  int64_t chunks = -1;
  int64_t n_batch = 512;
};

void run_perplexity(PplArgs a) {
  if (a.model.ctx_size == 0) a.model.ctx_size = 512;  // llama.cpp's default window
  Loaded L = load(a.model);
  std::ifstream f(a.file, std::ios::binary);
  VI_CHECK(f.good(), "cannot read '{}'", a.file);
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<int32_t> toks = L.tokenizer->encode(ss.str(), /*add_special=*/false, /*parse_special=*/false);
  const int64_t n_ctx = L.n_ctx;
  const int64_t n_chunk_max = static_cast<int64_t>(toks.size()) / n_ctx;
  VI_CHECK(n_chunk_max > 0, "'{}' has {} tokens; at least {} (one window of -c tokens) are needed", a.file,
           toks.size(), n_ctx);
  const int64_t n_chunk = a.chunks > 0 ? std::min(a.chunks, n_chunk_max) : n_chunk_max;
  const bool add_bos = L.tokenizer->adds_bos();
  const int64_t V = L.model->info().n_vocab;
  const int64_t first = n_ctx / 2;
  std::fprintf(stderr, "perplexity over %lld windows of %lld tokens (%zu tokens in the file)\n",
               static_cast<long long>(n_chunk), static_cast<long long>(n_ctx), toks.size());

  double nll = 0, nll2 = 0;
  int64_t count = 0;
  Timer timer;
  for (int64_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> window(toks.begin() + c * n_ctx, toks.begin() + (c + 1) * n_ctx);
    if (add_bos) window[0] = L.tokenizer->bos();
    auto seq = L.model->new_sequence(n_ctx);
    Tensor logits_all = Tensor::empty(DType::F32, {n_ctx, V});
    for (int64_t i = 0; i < n_ctx; i += a.n_batch) {
      int64_t n = std::min(a.n_batch, n_ctx - i);
      Tensor logits;
      L.model->forward(L.ctx, std::span<const int32_t>(window.data() + i, n), *seq, logits, true);
      std::copy(logits.ptr<float>(), logits.ptr<float>() + n * V, logits_all.row<float>(i));
    }
    for (int64_t j = first; j < n_ctx - 1; ++j) {
      const float* lg = logits_all.row<float>(j);
      double mx = lg[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max<double>(mx, lg[v]);
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(lg[v] - mx);
      int32_t target = toks[c * n_ctx + j + 1];
      double nl = -(lg[target] - mx - std::log(sum));
      nll += nl;
      nll2 += nl * nl;
      ++count;
    }
    std::printf("[%lld]%.4f,", static_cast<long long>(c + 1), std::exp(nll / count));
    std::fflush(stdout);
  }
  double mean = nll / count;
  double var = nll2 / count - mean * mean;
  double err = count > 1 ? std::sqrt(std::max(var, 0.0) / (count - 1)) : 0;
  double ppl = std::exp(mean);
  std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", ppl, ppl * err);
  std::fprintf(stderr, "scored %lld tokens in %.1f s (%.1f tok/s evaluated)\n", static_cast<long long>(count),
               timer.s(), n_chunk * n_ctx / timer.s());
}

}  // namespace

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PplArgs>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of the model on a text file (lower is better)");
  a->model.add(*cmd);
  cmd->add_option("-f,--file", a->file, "Text file to score")->required();
  cmd->add_option("--chunks", a->chunks, "Score at most this many windows; -1 = all");
  cmd->add_option("-b,--batch-size", a->n_batch, "Tokens per forward pass")->check(CLI::PositiveNumber);
  cmd->callback([a] { run_perplexity(*a); });
}

}  // namespace vi::cli
