// StreamDecoder and Tokenizer::decode on token sequences that split UTF-8 characters:
// against HF `tokenizers` decode of seeded random sequences (<name>.decode.jsonl), and for
// fresh random sequences the stream must equal decode() and never emit half a character.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace vi {
namespace {

std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamDecoder sd(tok, skip_special);
  std::string out;
  for (int32_t id : ids) {
    const std::string part = sd.push(id);
    EXPECT_TRUE(tok::utf8_is_valid(part)) << "push emitted invalid UTF-8";
    EXPECT_LE(sd.pending(), 3u);
    out += part;
  }
  out += sd.flush();
  EXPECT_EQ(sd.pending(), 0u);
  return out;
}

class StreamDecode : public ::testing::TestWithParam<const char*> {};

TEST_P(StreamDecode, MatchesHfDecode) {
  const auto path = test::tok_data() / GetParam() / "tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent";
  const Tokenizer tok = Tokenizer::from_tokenizer_json(path.string());
  const auto cases = test::read_jsonl(test::tok_data() / (std::string(GetParam()) + ".decode.jsonl"));
  ASSERT_GE(cases.size(), 100u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto ids = cases[i]["ids"].get<std::vector<int32_t>>();
    const std::string want = cases[i]["decoded"], want_skip = cases[i]["decoded_skip"];
    EXPECT_EQ(tok.decode(ids), want) << "case " << i;
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), want_skip) << "case " << i;
    EXPECT_EQ(stream_all(tok, ids, false), want) << "case " << i;
    EXPECT_EQ(stream_all(tok, ids, true), want_skip) << "case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StreamDecode, ::testing::Values("smollm2", "gpt2", "qwen3", "qwen35", "tiny"),
                         [](const auto& info) { return std::string(info.param); });

TEST(StreamDecoder, RandomSequencesEqualDecode) {
  const Tokenizer tok = Tokenizer::from_tokenizer_json((test::tok_data() / "smollm2" / "tokenizer.json").string());
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  // Single-byte tokens 0x80..0xFF come up often so that characters are split and left broken.
  std::vector<int32_t> byte_tokens;
  for (int b = 0x80; b < 0x100; ++b) {
    const std::string one(1, static_cast<char>(b));
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      if (tok.token_to_piece(id) == one) {
        byte_tokens.push_back(id);
        break;
      }
    }
  }
  // SmolLM2 has no tokens for the bytes that never occur in UTF-8 (C0, C1, F5..FF).
  ASSERT_GE(byte_tokens.size(), 100u);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<int32_t> ids(1 + rng() % 24);
    for (auto& id : ids) {
      id = rng() % 2 ? byte_tokens[rng() % byte_tokens.size()] : static_cast<int32_t>(rng() % tok.n_vocab());
    }
    ASSERT_EQ(stream_all(tok, ids, false), tok.decode(ids)) << "iteration " << iter;
  }
}

TEST(StreamDecoder, HoldsSplitCharacter) {
  const Tokenizer tok = Tokenizer::from_tokenizer_json((test::tok_data() / "smollm2" / "tokenizer.json").string());
  // U+1F600 as four single-byte tokens: nothing comes out until the last byte arrives.
  std::vector<int32_t> ids;
  for (unsigned char b : std::string("\xF0\x9F\x98\x80")) {
    ids.push_back(tok.token_id(tok::byte_to_utf8_table()[b]).value());
  }
  StreamDecoder sd(tok);
  EXPECT_EQ(sd.push(tok.token_id("a").value()), "a");
  EXPECT_EQ(sd.push(ids[0]), "");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.push(ids[2]), "");
  EXPECT_EQ(sd.pending(), 3u);
  EXPECT_EQ(sd.push(ids[3]), "\xF0\x9F\x98\x80");
  EXPECT_EQ(sd.pending(), 0u);
  // A lead byte followed by ASCII can never complete: it becomes U+FFFD at once.
  EXPECT_EQ(sd.push(ids[0]), "");
  EXPECT_EQ(sd.push(tok.token_id("a").value()), "\xEF\xBF\xBD" "a");
  // An incomplete tail is flushed as one U+FFFD.
  EXPECT_EQ(sd.push(ids[0]), "");
  EXPECT_EQ(sd.push(ids[1]), "");
  EXPECT_EQ(sd.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(sd.flush(), "");
}

}  // namespace
}  // namespace vi
