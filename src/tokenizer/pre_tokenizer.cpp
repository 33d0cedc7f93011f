// Pre-tokenizer step pipeline and the GGUF pre-name table (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include <array>
#include <utility>

#include "core/error.h"

namespace vi::tok {

void PreTokenizer::add_split(std::string_view pattern, bool literal, SplitBehavior behavior) {
  steps_.push_back({std::make_shared<const Regex>(pattern, literal), behavior, false});
}

void PreTokenizer::add_digits(bool individual) {
  add_split(individual ? R"(\p{N})" : R"(\p{N}+)", false, SplitBehavior::kIsolated);
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Step s;
  if (use_regex) s.regex = std::make_shared<const Regex>(kGpt2Pattern);
  s.add_prefix_space = add_prefix_space;
  steps_.push_back(std::move(s));
  has_byte_level_ = true;
}

void PreTokenizer::apply(const Step& step, std::string_view piece, std::vector<std::string>& out) const {
  std::string prefixed;
  if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) {
    prefixed = " ";
    prefixed += piece;
    piece = prefixed;
  }
  if (!step.regex) {
    if (!piece.empty()) out.emplace_back(piece);
    return;
  }
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  step.regex->find_all(piece, matches);
  // Walk gaps and matches in order; `pending` carries a match that merges with the next part.
  std::string pending;
  bool last_was_match = false;
  size_t pos = 0;
  auto emit = [&](std::string_view part, bool is_match) {
    if (part.empty()) return;
    switch (step.behavior) {
      case SplitBehavior::kIsolated:
        out.emplace_back(part);
        break;
      case SplitBehavior::kRemoved:
        if (!is_match) out.emplace_back(part);
        break;
      case SplitBehavior::kMergedWithPrevious:  // a match joins the gap just before it
        if (is_match && !last_was_match && pos > 0) {
          out.back() += part;
        } else {
          out.emplace_back(part);
        }
        break;
      case SplitBehavior::kMergedWithNext:  // a match joins the gap just after it
        if (is_match) {
          if (!pending.empty()) out.emplace_back(std::move(pending));
          pending = std::string(part);
        } else {
          out.emplace_back(pending + std::string(part));
          pending.clear();
        }
        break;
      case SplitBehavior::kContiguous:  // runs of adjacent matches become one piece
        if (is_match && last_was_match && !out.empty()) {
          out.back() += part;
        } else {
          out.emplace_back(part);
        }
        break;
    }
    last_was_match = is_match;
  };
  for (const auto& [b, e] : matches) {
    if (b > pos) {
      emit(piece.substr(pos, b - pos), false);
      pos = b;
    }
    emit(piece.substr(b, e - b), true);
    pos = e;
  }
  if (pos < piece.size()) emit(piece.substr(pos), false);
  if (!pending.empty()) out.emplace_back(std::move(pending));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    out.emplace_back(text);
    return;
  }
  if (steps_.size() == 1) {
    apply(steps_[0], text, out);
    return;
  }
  std::vector<std::string> cur{std::string(text)}, next;
  for (size_t si = 0; si < steps_.size(); ++si) {
    auto& dst = si + 1 == steps_.size() ? out : next;
    for (const auto& p : cur) apply(steps_[si], p, dst);
    if (si + 1 < steps_.size()) {
      cur.swap(next);
      next.clear();
    }
  }
}

GgufPrePreset gguf_pre_preset(std::string_view name) {
  static constexpr std::array kGpt2 = {"gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2"};
  static constexpr std::array kDigitsGpt2 = {"smollm", "starcoder", "refact"};
  static constexpr std::array kQwen2 = {"qwen2", "deepseek-r1-qwen", "stablelm2"};
  static constexpr std::array kLlama3 = {"llama3", "llama-bpe", "llama-v3", "smaug-bpe", "dbrx"};
  auto in = [&](const auto& list) {
    for (const char* n : list) {
      if (name == n) return true;
    }
    return false;
  };
  GgufPrePreset p;
  if (in(kGpt2)) {
    p.pre.add_byte_level(false, true);
  } else if (in(kDigitsGpt2)) {
    // HF: Sequence[Digits(individual_digits), ByteLevel(use_regex)]; llama.cpp: \p{N} then GPT-2.
    p.pre.add_digits(true);
    p.pre.add_byte_level(false, true);
  } else if (in(kQwen2) || name == "qwen35") {
    p.pre.add_split(name == "qwen35" ? kQwen35Pattern : kQwen2Pattern, false, SplitBehavior::kIsolated);
    p.pre.add_byte_level(false, false);
    p.nfc = true;
  } else if (in(kLlama3)) {
    p.pre.add_split(kLlama3Pattern, false, SplitBehavior::kIsolated);
    p.pre.add_byte_level(false, false);
  } else {
    VI_FAIL(
        "tokenizer: unsupported tokenizer.ggml.pre '{}' (supported: gpt2, gpt-2, mpt, olmo, jais, phi-2, smollm, "
        "starcoder, refact, qwen2, qwen35, deepseek-r1-qwen, stablelm2, llama3, llama-bpe, llama-v3, smaug-bpe, "
        "dbrx)",
        name);
  }
  return p;
}

}  // namespace vi::tok
