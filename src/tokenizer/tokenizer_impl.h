// Internal state of vi::Tokenizer, shared by the encoder (tokenizer.cpp) and the two loaders
// (load_gguf.cpp, load_tokenizer_json.cpp). Not part of the public interface.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace vi {

struct Tokenizer::Impl {
  std::string origin;  // file or "GGUF metadata", for messages
  tok::Bpe bpe;
  tok::PreTokenizer pre;
  bool nfc = false;
  tok::AddedTokenMatcher added;

  std::vector<std::string> text;   // [n_vocab] token as stored
  std::vector<std::string> piece;  // [n_vocab] bytes the token decodes to
  std::vector<TokenAttr> attr;     // [n_vocab]
  std::unordered_map<std::string, int32_t> added_by_content;

  std::vector<int32_t> prefix, suffix;  // what add_special puts around the ids
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, pad = -1;
  std::vector<int32_t> stops;
  std::vector<bool> is_stop;  // [n_vocab]

  // Fills `piece` from `text`: byte-level decoding, with the added tokens' text taken as
  // raw UTF-8 where raw_added_text (llama.cpp) or where it is not byte-level text (HF).
  // Then picks end-of-turn / stop tokens. Loaders call it last.
  void finish(bool raw_added_text);
};

}  // namespace vi
