// A compiled PCRE2 pattern in UTF + UCP mode (\s, \d and \p{..} are Unicode-aware, as in the
// Oniguruma engine HF `tokenizers` uses), JIT-compiled where available. Used by the
// pre-tokenizer splits. Subjects must be valid UTF-8: the tokenizer repairs its input first,
// so matching skips PCRE2's per-call validity scan (which would make splitting quadratic).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vi::tok {

class Regex {
 public:
  // Throws vi::Error naming the pattern and PCRE2's message when it does not compile.
  // `literal` matches the pattern text as-is (HF Split's {"String": ...} patterns).
  explicit Regex(std::string_view pattern, bool literal = false);

  // Appends the [begin, end) byte ranges of all non-overlapping matches in `subject`, left to
  // right. An empty match advances by one character so that the scan always terminates.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8, freed by pcre2_code_free
};

}  // namespace vi::tok
