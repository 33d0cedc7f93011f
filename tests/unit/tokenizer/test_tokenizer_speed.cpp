// Throughput: encoding 1 MB of mixed text (corpus lines plus fresh random pseudo-words, so
// that the word cache does not hide the BPE cost) must take well under a second. Prints
// MB/s and load times. The bound is skipped in sanitizer and debug builds.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace vi {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string make_text(size_t bytes, unsigned seed) {
  const auto corpus = test::read_jsonl(test::tok_data() / "corpus.jsonl");
  std::mt19937 rng(seed);
  // Letters from several scripts, so random words hit Latin, Cyrillic and CJK merges.
  const std::vector<uint32_t> alphabet_starts = {'a', 0x430, 0x4E00, 0x3042, 0xAC00};
  std::string text;
  while (text.size() < bytes) {
    if (rng() % 2) {
      text += corpus[rng() % corpus.size()]["text"].get<std::string>();
    } else {
      const uint32_t base = alphabet_starts[rng() % alphabet_starts.size()];
      const int n = 1 + rng() % 10;
      text += ' ';
      for (int i = 0; i < n; ++i) tok::utf8_append(text, base + rng() % 26);
    }
    text += rng() % 8 ? " " : "\n";
  }
  return text;
}

void run(const char* name) {
  const auto path = test::tok_data() / name / "tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  auto t0 = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::from_tokenizer_json(path.string());
  const double load_s = seconds_since(t0);
  const unsigned seed = std::random_device{}();
  const std::string text = make_text(1 << 20, seed);
  t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, false, true);
  const double enc_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const std::string back = tok.decode(ids);
  const double dec_s = seconds_since(t0);
  std::printf("%s: load %.2f s, encode %.1f MB/s (%.3f s, %zu ids), decode %.3f s (seed %u)\n", name, load_s,
              text.size() / 1e6 / enc_s, enc_s, ids.size(), dec_s, seed);
  EXPECT_FALSE(ids.empty());
  if (std::string(name) != "qwen35" && std::string(name) != "qwen3") {
    EXPECT_EQ(back, text);
  }
#if defined(__SANITIZE_ADDRESS__) || !defined(NDEBUG)
  std::printf("(no time bound in sanitizer/debug builds)\n");
#else
  // ~0.1 s on an idle core; the bound leaves room for a busy shared CI machine.
  EXPECT_LT(enc_s, 1.0) << "encoding 1 MB took " << enc_s << " s";
#endif
}

TEST(TokenizerSpeed, SmolLM2Encode1MB) { run("smollm2"); }

// Very long single pieces (one regex match, one BPE word) must neither overflow PCRE2's JIT
// stack nor go quadratic in the merge loop.
TEST(TokenizerSpeed, LongRuns) {
  for (const char* name : {"smollm2", "qwen35"}) {
    const auto path = test::tok_data() / name / "tokenizer.json";
    if (!std::filesystem::exists(path)) continue;
    const Tokenizer tok = Tokenizer::from_tokenizer_json(path.string());
    std::string emoji;
    for (int i = 0; i < 50000; ++i) emoji += "\xF0\x9F\x98\x80";
    for (const std::string& text : {std::string(300000, ' '), std::string(300000, 'a'), std::string(100000, '7'),
                                    std::string(100000, '\n') + "x", emoji,
                                    std::string("x").append(200000, '\t').append("y")}) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto ids = tok.encode(text, false, true);
      const double s = seconds_since(t0);
      EXPECT_EQ(tok.decode(ids), text) << name;
#if !defined(__SANITIZE_ADDRESS__) && defined(NDEBUG)
      EXPECT_LT(s, 1.0) << name << ": " << text.size() << "-byte run took " << s << " s";
#endif
    }
  }
}
TEST(TokenizerSpeed, Qwen35Encode1MB) { run("qwen35"); }

}  // namespace
}  // namespace vi
