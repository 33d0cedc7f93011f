// UTF-8 helpers for the tokenizer: code point iteration, and the lossy repair that both
// encoding (invalid input bytes) and decoding (token bytes that split a character) need.
// The repair replaces each maximal ill-formed subpart with U+FFFD, the Unicode-recommended
// practice that Rust's String::from_utf8_lossy (and so HF `tokenizers`) follows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace vi::tok {

// Length of the code point starting at s[i] (1..4), assuming s is valid UTF-8.
inline size_t utf8_len(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the code point at s[i] (s valid UTF-8) and advances i past it.
uint32_t utf8_next(std::string_view s, size_t& i);

// Appends code point cp (<= 0x10FFFF, not a surrogate) as UTF-8.
void utf8_append(std::string& out, uint32_t cp);

bool utf8_is_valid(std::string_view s);

// Appends `in` to `out` with every maximal ill-formed subpart replaced by U+FFFD.
// When `final` is false, a trailing sequence that is incomplete but could still become valid
// is held back: the return value is the number of input bytes consumed (the rest must be
// passed again with more bytes). With `final` true everything is consumed.
size_t utf8_append_lossy(std::string_view in, std::string& out, bool final);

inline std::string utf8_lossy(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  utf8_append_lossy(in, out, true);
  return out;
}

}  // namespace vi::tok
