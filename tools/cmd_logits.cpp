// `voltinfer logits`: raw logits at every position of a token sequence, written as a
// safetensors file (tensor "logits", f32 [T, vocab]; "tokens", i32 [T]) — what golden
// tests and comparisons with other engines read.
#include <cstdio>

#include "core/error.h"
#include "formats/safetensors.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

struct LogitsArgs {
  ModelFlags model;
  std::string tokens;
  std::string prompt;
  std::string out;
  int64_t n_batch = 512;
  bool decode = false;
};

void run_logits(const LogitsArgs& a) {
  Loaded L = load(a.model, /*need_tokenizer=*/a.tokens.empty());
  std::vector<int32_t> ids;
  if (!a.tokens.empty()) {
    ids = parse_token_list(a.tokens);
  } else {
    VI_CHECK(!a.prompt.empty(), "give the input as --tokens 1,2,3 or -p TEXT");
    ids = L.tokenizer->encode(a.prompt, true, true);
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t V = L.model->info().n_vocab;
  for (int32_t id : ids) VI_CHECK(id < V, "token id {} is outside the vocabulary of {}", id, V);
  // Without -c the context grows to fit the tokens; an explicit -c is a limit.
  auto seq = L.model->new_sequence(a.model.ctx_size > 0 ? L.n_ctx : std::max<int64_t>(L.n_ctx, T));
  Tensor all = Tensor::empty(DType::F32, {T, V});  // [T, vocab]
  // Whole-prompt prefill in chunks of n_batch, or token-by-token decode (--decode).
  const int64_t step = a.decode ? 1 : std::max<int64_t>(a.n_batch, 1);
  for (int64_t i = 0; i < T; i += step) {
    int64_t n = std::min(step, T - i);
    Tensor logits;
    L.model->forward(L.ctx, std::span<const int32_t>(ids.data() + i, n), *seq, logits, /*all_logits=*/true);
    std::copy(logits.ptr<float>(), logits.ptr<float>() + n * V, all.row<float>(i));
  }
  Tensor tok = Tensor::empty(DType::I32, {T});
  std::copy(ids.begin(), ids.end(), tok.ptr<int32_t>());
  all.set_name("logits");
  tok.set_name("tokens");
  formats::SafetensorsWriter::write_file(a.out, {all, tok});
  std::fprintf(stderr, "wrote logits [%lld, %lld] to %s\n", static_cast<long long>(T), static_cast<long long>(V),
               a.out.c_str());
}

}  // namespace

void register_logits(CLI::App& app) {
  auto a = std::make_shared<LogitsArgs>();
  CLI::App* cmd = app.add_subcommand(
      "logits", "Write the raw logits at every position to a safetensors file (tensor 'logits', f32 [T, vocab])");
  a->model.add(*cmd);
  cmd->add_option("--tokens", a->tokens, "Comma-separated token ids, e.g. 1,2,3");
  cmd->add_option("-p,--prompt", a->prompt, "Text to tokenize instead of --tokens (BOS added if the model wants it)");
  cmd->add_option("--out", a->out, "Output .safetensors file")->required();
  cmd->add_option("-b,--batch-size", a->n_batch, "Tokens per forward pass");
  cmd->add_flag("--decode", a->decode, "Feed the tokens one at a time (the decode path) instead of as one prompt");
  cmd->callback([a] { run_logits(*a); });
}

}  // namespace vi::cli
