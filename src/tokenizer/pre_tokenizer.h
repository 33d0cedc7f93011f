// Pre-tokenization: splitting text into the pieces ("words") that BPE encodes one at a time.
// Models HF `tokenizers` pre-tokenizers as a list of steps applied in order, each step
// splitting every piece the previous step produced: Split (regex or literal, with HF's
// behaviours), Digits (= Split on \p{N}), ByteLevel (optional prefix space, optional GPT-2
// regex split; its byte -> character mapping happens in the BPE stage). Also maps GGUF
// `tokenizer.ggml.pre` names (llama.cpp's) to the equivalent step lists.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace vi::tok {

// GPT-2's split (HF ByteLevel use_regex; llama.cpp pre "gpt2").
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Qwen2 / Qwen2.5 / Qwen3 (llama.cpp pre "qwen2"): single digits, letters may take one
// leading non-letter, punctuation runs keep trailing newlines.
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5 (llama.cpp pre "qwen35"): as Qwen2 but combining marks (\p{M}) stay with letters.
inline constexpr std::string_view kQwen35Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3 (llama.cpp pre "llama-bpe"): digits in groups of up to three.
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// What happens to the matched part of a piece (HF SplitDelimiterBehavior).
enum class SplitBehavior { kIsolated, kRemoved, kMergedWithPrevious, kMergedWithNext, kContiguous };

class PreTokenizer {
 public:
  void add_split(std::string_view pattern, bool literal, SplitBehavior behavior);
  // HF Digits: each digit its own piece (individual) or runs of digits.
  void add_digits(bool individual);
  // HF ByteLevel pre-tokenizer.
  void add_byte_level(bool add_prefix_space, bool use_regex);

  bool has_byte_level() const { return has_byte_level_; }
  bool empty() const { return steps_.empty(); }

  // Splits `text` (valid UTF-8) and appends the pieces to `out`.
  void split(std::string_view text, std::vector<std::string>& out) const;

 private:
  struct Step {
    std::shared_ptr<const Regex> regex;  // null: no split (ByteLevel without regex)
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool add_prefix_space = false;
  };
  void apply(const Step& step, std::string_view piece, std::vector<std::string>& out) const;

  std::vector<Step> steps_;
  bool has_byte_level_ = false;
};

// A GGUF `tokenizer.ggml.pre` name resolved to our pipeline.
struct GgufPrePreset {
  PreTokenizer pre;
  bool nfc = false;  // the HF tokenizer of that family normalises to NFC first (Qwen)
};

// Throws vi::Error naming `name` (and the known names) when it is not supported.
GgufPrePreset gguf_pre_preset(std::string_view name);

}  // namespace vi::tok
