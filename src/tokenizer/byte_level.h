// GPT-2's byte-level alphabet: every byte 0..255 maps to one printable code point so that
// BPE vocabularies can be stored as text. Printable Latin-1 bytes map to themselves, the
// other 68 bytes to U+0100.. in byte order (space 0x20 -> U+0120 'Ġ', '\n' -> U+010A 'Ċ').
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace vi::tok {

// The code point standing for byte b.
uint32_t byte_to_codepoint(uint8_t b);

// The byte a code point stands for, or nullopt when cp is not in the alphabet.
std::optional<uint8_t> codepoint_to_byte(uint32_t cp);

// UTF-8 of the code point for each byte, precomputed.
const std::array<std::string, 256>& byte_to_utf8_table();

// Bytes -> byte-level text ("a b" -> "aĠb").
std::string bytes_to_byte_level(std::string_view bytes);

// Byte-level text -> bytes; nullopt when some character is outside the alphabet (HF's
// ByteLevel decoder then keeps that token's raw UTF-8, and so do we).
std::optional<std::string> byte_level_to_bytes(std::string_view text);

}  // namespace vi::tok
