// UTF-8 iteration and lossy repair (see utf8.h).
#include "tokenizer/utf8.h"

namespace vi::tok {

uint32_t utf8_next(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  const size_t n = utf8_len(b0);
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

// Well-formed sequences (Unicode Table 3-7): the lead byte fixes the length and the allowed
// range of the second byte; later bytes are always 80..BF. Returns 0 for a byte that cannot lead.
struct Lead {
  int len;
  unsigned char lo, hi;  // range of the second byte
};

Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};  // excludes surrogates
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};  // up to U+10FFFF
  return {0, 0, 0};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

size_t utf8_append_lossy(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(in[i]);
    if (b < 0x80) {  // ASCII run: the common case, copied in one go
      size_t j = i + 1;
      while (j < n && static_cast<unsigned char>(in[j]) < 0x80) ++j;
      out.append(in.data() + i, j - i);
      i = j;
      continue;
    }
    const Lead l = lead_of(b);
    if (l.len == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    int k = 1;  // bytes of the sequence seen valid so far
    bool bad = false;
    for (; k < l.len; ++k) {
      if (i + k >= n) break;
      const auto c = static_cast<unsigned char>(in[i + k]);
      const bool ok = k == 1 ? (c >= l.lo && c <= l.hi) : (c >= 0x80 && c <= 0xBF);
      if (!ok) {
        bad = true;
        break;
      }
    }
    if (k == l.len) {
      out.append(in.data() + i, k);
      i += k;
    } else if (bad) {  // the maximal subpart [i, i+k) is replaced as one unit
      out += kReplacement;
      i += k;
    } else {  // truncated by the end of the input
      if (!final) return i;
      out += kReplacement;
      i = n;
    }
  }
  return n;
}

bool utf8_is_valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    const Lead l = lead_of(b);
    if (l.len == 0 || i + l.len > s.size()) return false;
    const auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < l.lo || c1 > l.hi) return false;
    for (int k = 2; k < l.len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < 0x80 || c > 0xBF) return false;
    }
    i += l.len;
  }
  return true;
}

}  // namespace vi::tok
