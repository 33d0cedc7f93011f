// `voltinfer logits`: raw logits at every position of a token sequence, written as a
// safetensors file (tensor "logits", f32 [T, vocab]; "tokens", i32 [T]) — what golden
// tests and comparisons with other engines read. --draft adds the draft head's view (Qwen3.5's
// MTP block): "hidden", f32 [T, d], the final hidden states, and "draft_logits", f32
// [T - 1, vocab], row t the head's logits from hidden state t and token t + 1 (its guess at
// token t + 2).
#include <cstdio>

#include "core/error.h"
#include "formats/safetensors.h"
#include "models/loader.h"
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
  bool draft = false;
};

void run_logits(const LogitsArgs& a) {
  ModelFlags mf = a.model;
  mf.draft_head = a.draft;
  Loaded L = load(mf, /*need_tokenizer=*/a.tokens.empty());
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
  const int64_t d = L.model->info().d_model;
  std::unique_ptr<SequenceState> dseq;
  Tensor hidden_all, draft_all;  // --draft: [T, d] and [T - 1, vocab] f32
  if (a.draft) {
    VI_CHECK(T >= 2, "--draft needs at least 2 tokens (the head reads a hidden state and the token after it)");
    dseq = L.model->new_draft_sequence(*seq);  // throws for a model without a draft head
    hidden_all = Tensor::empty(DType::F32, {T, d});
    draft_all = Tensor::empty(DType::F32, {T - 1, V});
  }
  // Whole-prompt prefill in chunks of n_batch, or token-by-token decode (--decode).
  const int64_t step = a.decode ? 1 : std::max<int64_t>(a.n_batch, 1);
  for (int64_t i = 0; i < T; i += step) {
    int64_t n = std::min(step, T - i);
    Tensor logits, hidden;
    BatchItem item{seq.get(), std::span<const int32_t>(ids.data() + i, n), /*all_logits=*/true};
    L.model->forward_batch(L.ctx, {&item, 1}, logits, LogitsOn::kHostF32, a.draft ? &hidden : nullptr);
    std::copy(logits.ptr<float>(), logits.ptr<float>() + n * V, all.row<float>(i));
    if (!a.draft) continue;
    const Tensor h = logits_to_host_f32(L.ctx, hidden);
    std::copy(h.ptr<float>(), h.ptr<float>() + n * d, hidden_all.row<float>(i));
    // One slot at a time: the head returns the last slot's logits.
    for (int64_t r = 0; r < n && i + r + 1 < T; ++r) {
      Tensor dl, head_out;
      L.model->draft_forward(L.ctx, *dseq, std::span<const int32_t>(ids.data() + i + r + 1, 1),
                             hidden.slice_rows(r, r + 1), &dl, head_out, LogitsOn::kHostF32);
      std::copy(dl.ptr<float>(), dl.ptr<float>() + V, draft_all.row<float>(i + r));
    }
  }
  Tensor tok = Tensor::empty(DType::I32, {T});
  std::copy(ids.begin(), ids.end(), tok.ptr<int32_t>());
  all.set_name("logits");
  tok.set_name("tokens");
  std::vector<Tensor> outs{all, tok};
  if (a.draft) {
    hidden_all.set_name("hidden");
    draft_all.set_name("draft_logits");
    outs.push_back(hidden_all);
    outs.push_back(draft_all);
  }
  formats::SafetensorsWriter::write_file(a.out, outs);
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
  cmd->add_flag("--draft", a->draft,
                "Also write the final hidden states ('hidden') and the draft head's logits ('draft_logits', "
                "[T-1, vocab]; Qwen3.5's MTP block)");
  cmd->callback([a] { run_logits(*a); });
}

}  // namespace vi::cli
