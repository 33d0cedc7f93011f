// GPT-2 byte <-> code point table (see byte_level.h).
#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace vi::tok {

namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points used are < 0x144
  std::array<std::string, 256> utf8;
  Tables() {
    from_cp.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
      utf8_append(utf8[b], to_cp[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t b) { return tables().to_cp[b]; }

std::optional<uint8_t> codepoint_to_byte(uint32_t cp) {
  if (cp >= tables().from_cp.size() || tables().from_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(tables().from_cp[cp]);
}

const std::array<std::string, 256>& byte_to_utf8_table() { return tables().utf8; }

std::string bytes_to_byte_level(std::string_view bytes) {
  const auto& t = tables().utf8;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += t[b];
  return out;
}

std::optional<std::string> byte_level_to_bytes(std::string_view text) {
  if (!utf8_is_valid(text)) return std::nullopt;
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto b = codepoint_to_byte(utf8_next(text, i));
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace vi::tok
