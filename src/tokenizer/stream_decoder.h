// Incremental detokenization for streaming: push ids one at a time and get back only
// complete UTF-8 text. Bytes of a character split across tokens (an emoji is often 2-4
// byte tokens) are held until the character is complete; bytes that can never become valid
// are emitted as U+FFFD exactly as Tokenizer::decode would, so the concatenation of all
// push() results and flush() equals decode() of the whole sequence.
#pragma once

#include <cstdint>
#include <string>

#include "tokenizer/tokenizer.h"

namespace vi {

class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tok, bool skip_special = false)
      : tok_(std::move(tok)), skip_special_(skip_special) {}

  // Text completed by this token (possibly empty). Throws on an out-of-range id.
  std::string push(int32_t id);
  // Whatever is still held (an incomplete character becomes U+FFFD); resets the state.
  std::string flush();
  // Bytes held back waiting for the rest of a character (0..3).
  size_t pending() const { return pending_.size(); }

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace vi
