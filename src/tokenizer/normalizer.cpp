// NFC normalisation through ICU's UTF-8 API (see normalizer.h).
#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>

#include "core/error.h"

namespace vi::tok {

namespace {

const icu::Normalizer2& nfc_instance() {
  static const icu::Normalizer2* n = [] {
    UErrorCode err = U_ZERO_ERROR;
    const icu::Normalizer2* p = icu::Normalizer2::getNFCInstance(err);
    if (U_FAILURE(err) || !p) VI_FAIL("tokenizer: ICU NFC normaliser unavailable: {}", u_errorName(err));
    return p;
  }();
  return *n;
}

// Every code point below U+0300 is NFC and never combines with what precedes it; UTF-8 lead
// bytes below 0xCC encode exactly those.
bool below_combining(std::string_view text) {
  for (unsigned char c : text) {
    if (c >= 0xCC) return false;
  }
  return true;
}

}  // namespace

bool is_nfc(std::string_view text) {
  if (below_combining(text)) return true;
  UErrorCode err = U_ZERO_ERROR;
  const bool ok = nfc_instance().isNormalizedUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), err);
  return U_SUCCESS(err) && ok;
}

std::string nfc(std::string_view text) {
  if (is_nfc(text)) return std::string(text);
  std::string out;
  out.reserve(text.size());
  icu::StringByteSink<std::string> sink(&out);
  UErrorCode err = U_ZERO_ERROR;
  nfc_instance().normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr,
                               err);
  if (U_FAILURE(err)) VI_FAIL("tokenizer: NFC normalisation failed: {}", u_errorName(err));
  return out;
}

}  // namespace vi::tok
