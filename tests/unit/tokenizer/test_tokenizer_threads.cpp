// A Tokenizer is shared by the server's HTTP threads: concurrent encodes (which share the
// BPE word cache) must give the same ids as a single thread does.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/tokenizer.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace vi {
namespace {

TEST(TokenizerThreads, ConcurrentEncodeMatchesSerial) {
  const auto corpus = test::read_jsonl(test::tok_data() / "corpus.jsonl");
  const auto path = (test::tok_data() / "smollm2" / "tokenizer.json").string();
  std::vector<std::vector<int32_t>> serial;
  {
    const Tokenizer fresh = Tokenizer::from_tokenizer_json(path);
    for (const auto& line : corpus) serial.push_back(fresh.encode(line["text"].get<std::string>(), false, true));
  }
  const Tokenizer tok = Tokenizer::from_tokenizer_json(path);  // cold cache, filled concurrently
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        // Each thread walks the corpus from a different start so that cache fills interleave.
        for (size_t k = 0; k < corpus.size(); ++k) {
          const size_t i = (k + t * corpus.size() / kThreads) % corpus.size();
          if (tok.encode(corpus[i]["text"].get<std::string>(), false, true) != serial[i]) ++mismatches[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace vi
