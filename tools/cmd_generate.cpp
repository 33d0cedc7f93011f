// `voltinfer generate` (continue a text) and `voltinfer chat` (multi-turn conversation
// with the model's chat template), both streaming tokens to the terminal.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/chat_template.h"
#include "tools/commands.h"
#include "tools/common.h"

namespace vi::cli {

namespace {

void print_stats(const GenerateStats& st) {
  double pf = st.prefill_ms > 0 ? st.prompt_tokens / (st.prefill_ms / 1e3) : 0;
  int64_t decoded = st.generated_tokens > 1 ? st.generated_tokens - 1 : 0;
  double dec = st.decode_ms > 0 ? decoded / (st.decode_ms / 1e3) : 0;
  std::string spec;
  if (st.spec.drafted > 0)
    spec = fmt::format(" | drafts: {} of {} kept ({:.0f}%) in {} rounds", st.spec.accepted, st.spec.drafted,
                       100.0 * static_cast<double>(st.spec.accepted) / static_cast<double>(st.spec.drafted),
                       st.spec.rounds);
  std::fprintf(stderr, "\n[prompt %lld tokens, %.1f ms, %.1f tok/s | generated %lld tokens, %.1f tok/s%s]\n",
               static_cast<long long>(st.prompt_tokens), st.prefill_ms, pf,
               static_cast<long long>(st.generated_tokens), dec, spec.c_str());
}

struct GenerateArgs {
  ModelFlags model;
  std::string prompt;
  SamplingParams sampling;
  int64_t n_predict = 128;
  bool no_bos = false;
  bool verbose_stats = true;
  SpecFlags spec;
};

void run_generate(const GenerateArgs& a) {
  ModelFlags mf = a.model;
  mf.draft_head = a.spec.kind == "mtp";
  Loaded L = load(mf);
  auto seq = L.model->new_sequence(L.n_ctx);
  std::vector<int32_t> prompt = L.tokenizer->encode(a.prompt, !a.no_bos, /*parse_special=*/true);
  GenerateOptions opts;
  opts.n_predict = a.n_predict;
  opts.sampling = a.sampling;
  opts.stop_tokens = L.tokenizer->stop_tokens();
  opts.spec = a.spec.options();
  check_spec_options(*L.model, opts.spec);
  std::fputs(a.prompt.c_str(), stdout);
  std::fflush(stdout);
  StreamDecoder dec(*L.tokenizer);
  std::vector<int32_t> history;
  GenerateStats st = generate(*L.model, L.ctx, *seq, prompt, opts, history, [&](int32_t id) {
    std::fputs(dec.push(id).c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputs(dec.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  if (a.verbose_stats) print_stats(st);
}

struct ChatArgs {
  ModelFlags model;
  SamplingParams sampling;
  int64_t n_predict = -1;
  std::string system_prompt;
  std::string prompt;  // first user message
  bool single_turn = false;
  bool show_stats = false;
  SpecFlags spec;
};

void run_chat(const ChatArgs& a) {
  ModelFlags mf = a.model;
  mf.draft_head = a.spec.kind == "mtp";
  Loaded L = load(mf);
  VI_CHECK(!L.chat_template.empty(),
           "the model has no chat template; use `voltinfer generate` for plain text completion");
  ChatTemplate tmpl(L.chat_template);
  auto seq = L.model->new_sequence(L.n_ctx);
  std::vector<int32_t> history;  // tokens held in seq
  const SpecOptions spec = a.spec.options();
  std::unique_ptr<SpecSession> spec_session;  // the conversation's, across turns
  if (spec.kind != SpecKind::kOff) spec_session = std::make_unique<SpecSession>(*L.model, spec, *seq);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!a.system_prompt.empty()) messages.push_back({{"role", "system"}, {"content", a.system_prompt}});
  const bool interactive = isatty(STDIN_FILENO);
  if (interactive)
    std::fprintf(stderr, "Chatting with %s. Type a message and press Enter; /exit or Ctrl-D to quit.\n",
                 L.model->info().name.c_str());

  std::string first = a.prompt;
  for (int turn = 0;; ++turn) {
    std::string user;
    if (turn == 0 && !first.empty()) {
      user = first;
      if (interactive) std::printf("> %s\n", user.c_str());
    } else {
      if (a.single_turn && turn > 0) break;
      if (interactive) {
        std::printf("> ");
        std::fflush(stdout);
      }
      if (!std::getline(std::cin, user)) break;
      if (user == "/exit" || user == "/quit") break;
      if (user.empty()) continue;
    }
    messages.push_back({{"role", "user"}, {"content", user}});
    nlohmann::ordered_json extra = nlohmann::ordered_json::object();
    if (L.tokenizer->bos() >= 0) extra["bos_token"] = L.tokenizer->token_to_piece(L.tokenizer->bos());
    if (L.tokenizer->eos() >= 0) extra["eos_token"] = L.tokenizer->token_to_piece(L.tokenizer->eos());
    std::string text = tmpl.render_chat(messages, nullptr, /*add_generation_prompt=*/true, extra);
    std::vector<int32_t> tokens = L.tokenizer->encode(text, /*add_special=*/false, /*parse_special=*/true);
    // Reuse the longest cached prefix of the conversation; feed only what is new.
    size_t common = 0;
    while (common < history.size() && common < tokens.size() && history[common] == tokens[common]) ++common;
    if (common == tokens.size()) --common;  // at least one token must be fed to get logits
    if (!seq->can_truncate_to(static_cast<int64_t>(common))) common = 0;  // recurrent state: start over
    seq->truncate(static_cast<int64_t>(common));
    history.resize(common);
    std::span<const int32_t> fresh(tokens.data() + common, tokens.size() - common);
    if (static_cast<int64_t>(tokens.size()) >= L.n_ctx) {
      std::fprintf(stderr, "error: the conversation (%zu tokens) no longer fits the context of %lld tokens; "
                           "restart with a larger -c/--ctx-size\n", tokens.size(), static_cast<long long>(L.n_ctx));
      break;
    }
    GenerateOptions opts;
    opts.n_predict = a.n_predict;
    opts.sampling = a.sampling;
    opts.sampling.seed = a.sampling.seed + static_cast<uint64_t>(turn);
    opts.stop_tokens = L.tokenizer->stop_tokens();
    opts.spec = spec;
    opts.spec_session = spec_session.get();
    StreamDecoder dec(*L.tokenizer);
    std::string reply;
    GenerateStats st = generate(*L.model, L.ctx, *seq, fresh, opts, history, [&](int32_t id) {
      std::string piece = dec.push(id);
      reply += piece;
      std::fputs(piece.c_str(), stdout);
      std::fflush(stdout);
      return true;
    });
    std::string tail = dec.flush();
    reply += tail;
    std::fputs(tail.c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (a.show_stats) print_stats(st);
    if (st.finish == FinishReason::kContextFull)
      std::fprintf(stderr, "(stopped: the context of %lld tokens is full)\n", static_cast<long long>(L.n_ctx));
    messages.push_back({{"role", "assistant"}, {"content", reply}});
  }
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Continue a prompt with the model (plain text, no chat template)");
  a->model.add(*cmd);
  cmd->add_option("-p,--prompt", a->prompt, "The text to continue")->required();
  add_sampling_flags(*cmd, a->sampling, a->n_predict);
  cmd->add_flag("--no-bos", a->no_bos, "Do not add the model's begin-of-sequence token");
  a->spec.add(*cmd);
  cmd->callback([a] { run_generate(*a); });
}

void register_chat(CLI::App& app) {
  auto a = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with the model in the terminal (multi-turn, streaming)");
  a->model.add(*cmd);
  add_sampling_flags(*cmd, a->sampling, a->n_predict);
  cmd->add_option("--system-prompt", a->system_prompt, "System message (also -sys)");
  cmd->add_option("-p,--prompt", a->prompt, "First user message");
  cmd->add_flag("--single-turn", a->single_turn, "Answer the first message and exit (also -st)");
  cmd->add_flag("--stats", a->show_stats, "Print token counts and speed after each answer");
  a->spec.add(*cmd);
  cmd->callback([a] { run_chat(*a); });
}

}  // namespace vi::cli
