// Jinja2 tokenizer (see jinja_lexer.h). The rules follow jinja2/lexer.py: text up to
// the next "{{", "{%" or "{#", then the tag's tokens up to its end marker, where an end
// marker inside open brackets is an operator (so `{{ {'a': 1}}}` works).
#include "tokenizer/jinja_lexer.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "tokenizer/jinja_strings.h"

namespace vi::jinja {

void line_col(std::string_view source, size_t pos, int& line, int& col) {
  line = 1;
  col = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++col;
    }
  }
}

void syntax_error(std::string_view source, size_t pos, const std::string& msg) {
  int line, col;
  line_col(source, pos, line, col);
  throw Error(fmt::format("chat template syntax error at line {}, column {}: {}", line, col, msg));
}

namespace {

// Python's `\s` on str: ASCII and Unicode whitespace.
size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    const auto c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      if (!py_isspace(c)) break;
      ++pos;
      continue;
    }
    // Decode one multi-byte code point to test it.
    const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    const std::u32string cp = utf8_decode(s.substr(pos, len));
    if (cp.size() != 1 || !py_isspace(cp[0])) break;
    pos += len;
  }
  return pos;
}

bool all_ws(std::string_view s) { return !s.empty() && skip_ws(s, 0) == s.size(); }

std::string rstrip_ws(std::string_view s) { return py_strip(s, std::nullopt, false, true); }

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  LexResult run() {
    size_t pos = 0;
    const size_t n = s_.size();
    while (pos < n) {
      size_t p = find_tag(pos);
      if (p == std::string::npos) {
        emit_data(s_.substr(pos), pos);
        break;
      }
      const char kind = s_[p + 1];
      size_t after = p + 2;
      char sign = 0;
      if (after < n && (s_[after] == '-' || s_[after] == '+')) sign = s_[after++];

      // {% raw %} is recognised together with its opening tag.
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(after, raw_end);
      emit_data(strip_before(s_.substr(pos, p - pos), sign, kind != '{'), pos);

      if (raw) {
        pos = lex_raw(raw_end);
      } else if (kind == '#') {
        pos = lex_comment(after, p);
      } else {
        out_.tokens.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", p});
        pos = lex_tag(after, kind == '%', p);
      }
    }
    out_.tokens.push_back({Tok::Eof, "", s_.size()});
    out_.source = std::move(s_);
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t p = s_.find('{', pos);
      if (p == std::string::npos || p + 1 >= s_.size()) return std::string::npos;
      const char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  void emit_data(std::string text, size_t pos) {
    if (!text.empty()) out_.tokens.push_back({Tok::Data, std::move(text), pos});
  }

  // Whitespace control for the text before a tag: `-` strips all trailing whitespace;
  // otherwise lstrip_blocks drops spaces between the line start and a block/comment tag.
  std::string strip_before(std::string_view text, char sign, bool block_like) const {
    if (sign == '-') return rstrip_ws(text);
    if (sign != '+' && block_like) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_ws(text.substr(l_pos))) return std::string(text.substr(0, l_pos));
    }
    return std::string(text);
  }

  // After a tag's end marker: `-` eats all whitespace, `+` nothing, plain eats one newline
  // (trim_blocks) for block and comment tags.
  size_t after_end(size_t pos, char sign, bool trim_newline) {
    if (sign == '-') pos = skip_ws(s_, pos);
    else if (sign != '+' && trim_newline && pos < s_.size() && s_[pos] == '\n') ++pos;
    line_starting_ = pos > 0 && s_[pos - 1] == '\n';
    return pos;
  }

  bool match_raw_begin(size_t pos, size_t& end) const {
    pos = skip_ws(s_, pos);
    if (s_.compare(pos, 3, "raw") != 0) return false;
    pos += 3;
    if (pos < s_.size() && (is_name_start(s_[pos]) || is_digit(s_[pos]))) return false;
    pos = skip_ws(s_, pos);
    if (s_.compare(pos, 3, "-%}") == 0) {
      end = skip_ws(s_, pos + 3);
      return true;
    }
    if (s_.compare(pos, 2, "%}") == 0) {
      end = pos + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t pos) {
    line_starting_ = pos > 0 && s_[pos - 1] == '\n';
    size_t search = pos;
    while (true) {
      const size_t p = s_.find("{%", search);
      if (p == std::string::npos) syntax_error(s_, pos, "Missing end of raw directive");
      size_t q = p + 2;
      char sign = 0;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) sign = s_[q++];
      q = skip_ws(s_, q);
      if (s_.compare(q, 6, "endraw") == 0) {
        q = skip_ws(s_, q + 6);
        char end_sign = 0;
        if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) end_sign = s_[q++];
        if (s_.compare(q, 2, "%}") == 0) {
          emit_data(strip_before(s_.substr(pos, p - pos), sign, true), pos);
          return after_end(q + 2, end_sign, true);
        }
      }
      search = p + 2;
    }
  }

  size_t lex_comment(size_t pos, size_t start) {
    size_t q = pos;
    while (true) {
      q = s_.find("#}", q);
      if (q == std::string::npos) syntax_error(s_, start, "Missing end of comment tag");
      char sign = 0;
      if (q > pos && (s_[q - 1] == '-' || s_[q - 1] == '+')) sign = s_[q - 1];
      return after_end(q + 2, sign, true);
    }
  }

  size_t lex_tag(size_t pos, bool block, size_t start) {
    std::vector<char> balance;
    const size_t n = s_.size();
    while (true) {
      if (pos >= n)
        syntax_error(s_, start, block ? "unexpected end of template, expected end of block tag '%}'"
                                      : "unexpected end of template, expected end of print statement '}}'");
      if (balance.empty()) {
        const char* end = block ? "%}" : "}}";
        if ((s_[pos] == '-' || (block && s_[pos] == '+')) && s_.compare(pos + 1, 2, end) == 0) {
          out_.tokens.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", pos});
          return after_end(pos + 3, s_[pos], block);
        }
        if (s_.compare(pos, 2, end) == 0) {
          out_.tokens.push_back({block ? Tok::BlockEnd : Tok::VarEnd, "", pos});
          return after_end(pos + 2, 0, block);
        }
      }
      const size_t ws = skip_ws(s_, pos);
      if (ws != pos) {
        pos = ws;
        continue;
      }
      const char c = s_[pos];
      if (is_digit(c)) {
        pos = lex_number(pos);
      } else if (is_name_start(c)) {
        size_t e = pos;
        while (e < n && (is_name_start(s_[e]) || is_digit(s_[e]))) ++e;
        out_.tokens.push_back({Tok::Name, s_.substr(pos, e - pos), pos});
        pos = e;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (s_.compare(pos, 2, t) == 0) op = t;
        if (op.empty()) {
          if (!std::strchr("+-/*%~[](){}<>=.:|,;", c)) syntax_error(s_, pos, fmt::format("unexpected char '{}'", c));
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) syntax_error(s_, pos, fmt::format("unexpected '{}'", op));
          if (balance.back() != op[0])
            syntax_error(s_, pos, fmt::format("unexpected '{}', expected '{}'", op, balance.back()));
          balance.pop_back();
        }
        out_.tokens.push_back({Tok::Op, op, pos});
        pos += op.size();
      }
    }
  }

  size_t digits(size_t pos) const {
    // (\d+_)*\d+
    size_t e = pos;
    while (e < s_.size() && (is_digit(s_[e]) || (s_[e] == '_' && e + 1 < s_.size() && is_digit(s_[e + 1]) && e > pos)))
      ++e;
    return e;
  }

  size_t lex_number(size_t pos) {
    const size_t int_end = digits(pos);
    size_t e = int_end;
    bool is_float = false;
    const bool after_dot = pos > 0 && s_[pos - 1] == '.';
    if (!after_dot) {
      if (e + 1 < s_.size() && s_[e] == '.' && is_digit(s_[e + 1])) {
        e = digits(e + 1);
        is_float = true;
      }
      if (e < s_.size() && (s_[e] == 'e' || s_[e] == 'E')) {
        size_t x = e + 1;
        if (x < s_.size() && (s_[x] == '+' || s_[x] == '-')) ++x;
        if (x < s_.size() && is_digit(s_[x])) {
          e = digits(x);
          is_float = true;
        }
      }
    }
    std::string text;
    for (size_t i = pos; i < e; ++i)
      if (s_[i] != '_') text.push_back(s_[i]);
    Token t{is_float ? Tok::Float : Tok::Int, text, pos};
    if (is_float) t.fval = std::stod(text);
    else {
      try {
        t.ival = std::stoll(text);
      } catch (const std::exception&) {
        syntax_error(s_, pos, fmt::format("integer literal {} is too large", text));
      }
    }
    out_.tokens.push_back(std::move(t));
    return e;
  }

  static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // String literal with Python's unicode-escape rules (what Jinja applies).
  size_t lex_string(size_t pos) {
    const char q = s_[pos];
    std::string val;
    size_t i = pos + 1;
    while (true) {
      if (i >= s_.size()) syntax_error(s_, pos, "unexpected end of string literal");
      const char c = s_[i];
      if (c == q) break;
      if (c != '\\') {
        val.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= s_.size()) syntax_error(s_, pos, "unexpected end of string literal");
      const char e = s_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': val.push_back('\\'); break;
        case '\'': val.push_back('\''); break;
        case '"': val.push_back('"'); break;
        case 'a': val.push_back('\a'); break;
        case 'b': val.push_back('\b'); break;
        case 'f': val.push_back('\f'); break;
        case 'n': val.push_back('\n'); break;
        case 'r': val.push_back('\r'); break;
        case 't': val.push_back('\t'); break;
        case 'v': val.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          const int len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (int k = 0; k < len; ++k) {
            const int h = i + k < s_.size() ? hexval(s_[i + k]) : -1;
            if (h < 0) syntax_error(s_, i - 2, fmt::format("truncated \\{} escape in string literal", e));
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          i += len;
          if (cp > 0x10FFFF) syntax_error(s_, i - 2, "illegal Unicode character in string literal");
          utf8_append(val, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < s_.size() && s_[i] >= '0' && s_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<uint32_t>(s_[i] - '0');
            utf8_append(val, cp);
          } else {
            val.push_back('\\');  // unknown escapes stay as written
            val.push_back(e);
          }
      }
    }
    out_.tokens.push_back({Tok::String, std::move(val), pos});
    return i + 1;
  }

  std::string s_;
  LexResult out_;
  bool line_starting_ = true;
};

}  // namespace

LexResult lex(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s.push_back(source[i]);
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();  // keep_trailing_newline=False
  return Lexer(std::move(s)).run();
}

}  // namespace vi::jinja
