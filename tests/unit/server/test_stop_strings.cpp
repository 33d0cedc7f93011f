// StopStringFilter against a whole-text reference: for random texts over a tiny alphabet
// (so partial matches are frequent) cut into random pieces, the streamed output must equal
// the text up to the earliest stop string, and no piece may ever release a byte past it.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "server/stop_strings.h"

using vi::server::StopStringFilter;

namespace {

// Reference: generation stops when the first stop string is complete, so the answer is
// the text before the occurrence that ends first; the stop strings ending there (and
// starting at the same place) are all acceptable as "the" match.
std::pair<std::string, std::vector<std::string>> reference(const std::string& text,
                                                           const std::vector<std::string>& stops) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const auto& s : stops)
      if (!s.empty() && s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
        start = std::min(start, end - s.size());
    if (start == std::string::npos) continue;
    std::vector<std::string> here;
    for (const auto& s : stops)
      if (!s.empty() && s.size() == end - start && text.compare(start, s.size(), s) == 0) here.push_back(s);
    return {text.substr(0, start), here};
  }
  return {text, {}};
}

std::string random_string(std::mt19937& rng, size_t n, const std::string& alphabet) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back(alphabet[rng() % alphabet.size()]);
  return s;
}

}  // namespace

TEST(StopStrings, RandomTextsRandomSplits) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    int n_stops = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n_stops; ++k) stops.push_back(random_string(rng, 1 + rng() % 4, "abc"));
    std::string text = random_string(rng, rng() % 41, "abcd");
    auto [expected, which] = reference(text, stops);

    StopStringFilter f(stops);
    std::string out;
    size_t pos = 0;
    while (pos < text.size() && !f.matched()) {
      size_t len = 1 + rng() % 5;
      out += f.push(std::string_view(text).substr(pos, len));
      pos += len;
      // Never release anything that is not part of the final answer.
      ASSERT_EQ(expected.compare(0, out.size(), out), 0) << "text=" << text << " out=" << out << " expected=" << expected << " stops=" << ::testing::PrintToString(stops);
    }
    if (!f.matched()) out += f.flush();
    ASSERT_EQ(out, expected) << "text=" << text;
    ASSERT_EQ(f.matched(), !which.empty());
    if (f.matched()) {
      ASSERT_NE(std::find(which.begin(), which.end(), f.matched_stop()), which.end());
    }
  }
}

TEST(StopStrings, HoldsBackSplitStopAndReleasesFalseStart) {
  StopStringFilter f({"Observation:"});
  EXPECT_EQ(f.push("The answer. Obs"), "The answer. ");
  EXPECT_EQ(f.push("erva"), "");
  EXPECT_EQ(f.push("nt fact"), "Observant fact");  // it was not the stop string after all
  EXPECT_EQ(f.push(" Observation: more"), " ");
  EXPECT_TRUE(f.matched());
  EXPECT_EQ(f.push("ignored"), "");
}

TEST(StopStrings, MultiByteCharactersAreNotSplit) {
  StopStringFilter f({"\xC3\xA9t\xC3\xA9"});  // "été"
  std::string out = f.push("caf\xC3\xA9 \xC3\xA9");
  EXPECT_EQ(out, "caf\xC3\xA9 ");
  out += f.push("tudiant");
  out += f.flush();
  EXPECT_EQ(out, "caf\xC3\xA9 \xC3\xA9tudiant");
}

TEST(StopStrings, EmptyStopListPassesEverything) {
  StopStringFilter f({"", ""});
  EXPECT_EQ(f.push("abc"), "abc");
  EXPECT_FALSE(f.matched());
}
