// Added-token matching (see added_tokens.h).
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/utf8.h"

namespace vi::tok {

bool is_unicode_whitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

void AddedTokenMatcher::add(AddedToken t) {
  if (t.content.empty()) return;  // an empty token can never be matched
  const auto first = static_cast<unsigned char>(t.content[0]);
  has_normalized_ = has_normalized_ || t.normalized;
  tokens_.push_back(std::move(t));
  auto& list = by_first_byte_[first];
  list.push_back(static_cast<uint32_t>(tokens_.size() - 1));
  std::stable_sort(list.begin(), list.end(),
                   [&](uint32_t a, uint32_t b) { return tokens_[a].content.size() > tokens_[b].content.size(); });
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, bool normalized,
                              std::vector<Segment>& out) const {
  size_t plain_start = 0;  // start of the pending plain-text span
  size_t p = 0;
  while (p < text.size()) {
    const auto& cands = by_first_byte_[static_cast<unsigned char>(text[p])];
    const AddedToken* hit = nullptr;
    for (uint32_t idx : cands) {
      const AddedToken& t = tokens_[idx];
      if (t.normalized != normalized) continue;
      if (t.content.size() <= text.size() - p && std::memcmp(text.data() + p, t.content.data(), t.content.size()) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++p;
      continue;
    }
    size_t start = p, stop = p + hit->content.size();
    if (hit->special && !parse_special) {  // stays plain text, but its span is consumed
      p = stop;
      continue;
    }
    if (hit->lstrip) {  // walk back over whitespace code points, not past the previous token
      size_t s = start;
      while (s > plain_start) {
        size_t k = s - 1;
        while (k > plain_start && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
        size_t kk = k;
        if (!is_unicode_whitespace(utf8_next(text, kk))) break;
        s = k;
      }
      start = s;
    }
    if (hit->rstrip) {
      while (stop < text.size()) {
        size_t k = stop;
        if (!is_unicode_whitespace(utf8_next(text, k))) break;
        stop = k;
      }
    }
    if (start > plain_start) out.push_back({plain_start, start, -1});
    out.push_back({start, stop, hit->id});
    plain_start = p = stop;
  }
  if (plain_start < text.size()) out.push_back({plain_start, text.size(), -1});
}

}  // namespace vi::tok
