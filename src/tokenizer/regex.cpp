// PCRE2 wrapper for pre-tokenizer splits (see regex.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace vi::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// One match-data block per thread: splitting runs once per pre-token, and allocating a fresh
// block each time would dominate short matches. One ovector pair suffices: only the whole
// match is read (rc == 0 only says further groups did not fit).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  return h.md;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP;
  if (literal) opts |= PCRE2_LITERAL;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err,
                                   &err_off, nullptr);
  if (!code) {
    VI_FAIL("tokenizer: regex '{}' does not compile at offset {}: {}", pattern, err_off, pcre2_message(err));
  }
  // JIT is an optimisation only: if the platform lacks it, the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = std::shared_ptr<void>(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

void Regex::find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  pcre2_match_data* md = thread_match_data();
  const auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t off = 0;
  while (off <= subject.size()) {
    const int rc = pcre2_match(code, s, subject.size(), off, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0 && rc != 0) {
      VI_FAIL("tokenizer: regex '{}' failed on a {}-byte piece: {}", pattern_, subject.size(), pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      out.emplace_back(b, e);
      off = e;
    } else {  // empty match: step over one character
      if (b >= subject.size()) break;
      off = b + utf8_len(static_cast<unsigned char>(subject[b]));
    }
  }
}

}  // namespace vi::tok
