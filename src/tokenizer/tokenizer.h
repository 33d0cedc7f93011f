// voltinfer's tokenizer: byte-level BPE as used by GPT-2, SmolLM2, Llama 3, Qwen2/3/3.5,
// loaded from GGUF metadata (llama.cpp's tokenizer.ggml.* keys) or from a Hugging Face
// tokenizer.json, and meant to give the ids HF `tokenizers` gives. The pipeline per call:
//   repair invalid UTF-8 -> split out added/special tokens (longest match first) ->
//   normalise (NFC for Qwen) -> pre-tokenize (PCRE2 splits) -> BPE per piece -> BOS/EOS.
// Chat templates live in chat_template.h (a separate component); incremental, UTF-8-safe
// detokenization in stream_decoder.h.
//
// A Tokenizer is an immutable, cheaply copyable handle (shared state); every method is
// safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace vi {

class Metadata;

// Kinds of tokens; the values are GGUF's tokenizer.ggml.token_type codes.
enum class TokenAttr : uint8_t {
  kNormal = 1,       // a BPE vocabulary entry
  kUnknown = 2,
  kControl = 3,      // special token (<|im_start|>): matched in text only when parse_special
  kUserDefined = 4,  // non-special added token (<think> in Qwen3): always matched in text
  kUnused = 5,       // padding slot / id hole; never produced by encode
  kByte = 6,
};

class Tokenizer {
 public:
  // From GGUF key/values (tokenizer.ggml.model must be "gpt2"; .pre picks the splitter, and
  // an unknown .pre is an error naming it). Throws vi::Error / vi::FormatError.
  static Tokenizer from_gguf_metadata(const Metadata& md);

  // From a HF tokenizer.json (model BPE with a ByteLevel pre-tokenizer). BOS/EOS names are
  // taken from a tokenizer_config.json in the same folder when there is one.
  static Tokenizer from_tokenizer_json(const std::string& path);
  // The same from JSON text; config_json may be empty. `origin` names the source in errors.
  static Tokenizer from_tokenizer_json_text(std::string_view json, std::string_view config_json,
                                            const std::string& origin);

  // add_special: add the model's BOS/EOS (GGUF add_bos_token/add_eos_token, or the
  //   tokenizer.json post-processor template).
  // parse_special: recognise special (control) tokens written in the text. Non-special added
  //   tokens (e.g. <think> in Qwen3) are recognised either way, as in HF and llama.cpp.
  // Invalid UTF-8 in `text` is replaced by U+FFFD first.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // Concatenated token bytes, repaired to valid UTF-8 (U+FFFD per maximal invalid subpart).
  // Special tokens appear as their text unless skip_special. Throws on an out-of-range id.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The raw bytes a token stands for (may be part of a UTF-8 character).
  const std::string& token_to_piece(int32_t id) const;
  // The token as the vocabulary stores it (byte-level text such as "Ġthe" for BPE entries).
  const std::string& token_text(int32_t id) const;
  // Id of a vocabulary text or added-token content, if any.
  std::optional<int32_t> token_id(std::string_view text) const;

  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when the model has none
  int32_t eos() const;
  int32_t eot() const;  // end of turn (<|im_end|>, <|eot_id|>), -1 when none
  int32_t pad() const;
  bool adds_bos() const;
  TokenAttr attr(int32_t id) const;
  bool is_special(int32_t id) const;  // control token
  // Tokens that end generation (EOS, end of turn and the family's other end markers).
  const std::vector<int32_t>& stop_tokens() const;
  bool is_stop(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace vi
