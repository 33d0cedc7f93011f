// Tokenizer for the Jinja2 subset chat templates use, with the environment options
// transformers sets: trim_blocks=True (first newline after a block/comment tag is
// dropped), lstrip_blocks=True (spaces before a block/comment tag at line start are
// dropped), keep_trailing_newline=False, `-`/`+` whitespace control, {% raw %}.
// Newlines are normalised to "\n" first, as Jinja does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace vi::jinja {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // data text, name, operator, or the unescaped string literal
  size_t pos;        // byte offset in the normalised source, for line/column messages
  int64_t ival = 0;
  double fval = 0;
};

struct LexResult {
  std::string source;  // normalised source the positions refer to
  std::vector<Token> tokens;
};

// Throws vi::Error("chat template syntax error at line L, column C: ...") on malformed input.
LexResult lex(std::string_view source);

// 1-based line and column of a byte offset.
void line_col(std::string_view source, size_t pos, int& line, int& col);
[[noreturn]] void syntax_error(std::string_view source, size_t pos, const std::string& msg);

}  // namespace vi::jinja
