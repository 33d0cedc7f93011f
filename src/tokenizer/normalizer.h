// Unicode normalisation for tokenizers that ask for it (Qwen's tokenizer.json has an NFC
// normalizer). Backed by ICU; text that cannot change (all code points below U+0300, or
// already NFC) is returned without a copy through the fast paths.
#pragma once

#include <string>
#include <string_view>

namespace vi::tok {

// NFC of valid UTF-8 text.
std::string nfc(std::string_view text);

// True when nfc(text) == text, cheaply for the common cases.
bool is_nfc(std::string_view text);

}  // namespace vi::tok
