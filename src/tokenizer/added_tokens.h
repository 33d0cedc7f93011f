// Added tokens (special/control tokens like <|im_start|> and non-special ones like <think>)
// are cut out of the text before pre-tokenization. Matching follows HF `tokenizers`: scan
// left to right, at each position take the longest token that matches; a special token
// that is not to be parsed still consumes its span (it is left as plain text), so a shorter
// token inside it is not matched either. lstrip/rstrip tokens absorb adjacent whitespace.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vi::tok {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;     // skipped unless parse_special
  bool lstrip = false;      // swallow whitespace before the token
  bool rstrip = false;      // swallow whitespace after the token
  bool normalized = false;  // matched on normalised text instead of raw text
};

class AddedTokenMatcher {
 public:
  void add(AddedToken t);
  bool empty() const { return tokens_.empty(); }
  bool has_normalized() const { return has_normalized_; }

  // A piece of the input: an added token (id >= 0) or plain text (id == -1).
  struct Segment {
    size_t begin, end;
    int32_t id;
  };
  // Splits `text`, considering only tokens whose `normalized` flag equals `normalized`.
  void split(std::string_view text, bool parse_special, bool normalized, std::vector<Segment>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // indices, longest content first
  bool has_normalized_ = false;
};

// Unicode White_Space (Rust's char::is_whitespace, which HF uses for lstrip/rstrip).
bool is_unicode_whitespace(uint32_t cp);

}  // namespace vi::tok
