// Failures a user can cause (bad GGUF keys, malformed or unsupported tokenizer.json, bad ids,
// invalid UTF-8 input) end in a vi::Error that names the culprit, never in a crash.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/metadata.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace vi {
namespace {

using nlohmann::json;

// A minimal valid byte-level BPE tokenizer.json: the 256 byte characters, merges "a b" -> "ab"
// and "ab c" -> "abc", one special token.
json tiny_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[tok::byte_to_utf8_table()[b]] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  return json{{"version", "1.0"},
              {"added_tokens", json::array({json{{"id", 258}, {"content", "<|x|>"}, {"special", true}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", json{{"type", "ByteLevel"}}},
              {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b", "ab c"})}}}};
}

Tokenizer load(const json& j) { return Tokenizer::from_tokenizer_json_text(j.dump(), "", "test.json"); }

// Runs f, expects vi::Error (or a subclass) whose message contains every needle.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

Metadata smollm2_meta() {
  return test::gguf_meta_from_dump(test::tok_data() / "smollm2" / "gguf_tokenizer_meta.json");
}

TEST(TokenizerErrors, TinyJsonWorks) {  // the base case the error cases below perturb
  const Tokenizer tok = load(tiny_json());
  EXPECT_EQ(tok.encode("abc<|x|>ab", false, true), (std::vector<int32_t>{257, 258, 256}));
  EXPECT_EQ(tok.encode("abc<|x|>", false, false), (std::vector<int32_t>{257, '<', '|', 'x', '|', '>'}));
  EXPECT_EQ(tok.n_vocab(), 259);
}

TEST(TokenizerErrors, UnknownGgufPreNamesIt) {
  Metadata md = smollm2_meta();
  md.set("tokenizer.ggml.pre", Metadata::make_string("my-new-pre"));
  expect_error([&] { Tokenizer::from_gguf_metadata(md); }, {"my-new-pre", "tokenizer.ggml.pre"});
}

TEST(TokenizerErrors, GgufModelAndKeys) {
  Metadata md = smollm2_meta();
  md.set("tokenizer.ggml.model", Metadata::make_string("llama"));
  expect_error([&] { Tokenizer::from_gguf_metadata(md); }, {"'llama'", "not supported"});

  Metadata no_pre = smollm2_meta();
  Metadata copy;
  for (const auto& [k, v] : no_pre.items()) {
    if (k != "tokenizer.ggml.pre") copy.set(k, v);
  }
  expect_error([&] { Tokenizer::from_gguf_metadata(copy); }, {"tokenizer.ggml.pre is missing"});

  Metadata bad_types = smollm2_meta();
  bad_types.set("tokenizer.ggml.token_type", test::int_array({1, 1, 1}));
  expect_error([&] { Tokenizer::from_gguf_metadata(bad_types); }, {"token_type has 3 entries"});

  Metadata bad_bos = smollm2_meta();
  bad_bos.set("tokenizer.ggml.bos_token_id", Metadata::make_int(999999, 4));
  expect_error([&] { Tokenizer::from_gguf_metadata(bad_bos); }, {"bos_token_id", "999999"});

  Metadata bad_merge = smollm2_meta();
  bad_merge.set("tokenizer.ggml.merges", test::str_array({"Ġ t", "zzzq qqqz"}));
  expect_error([&] { Tokenizer::from_gguf_metadata(bad_merge); }, {"merge 1", "zzzq"});

  Metadata no_tokens;
  no_tokens.set("tokenizer.ggml.model", Metadata::make_string("gpt2"));
  no_tokens.set("tokenizer.ggml.pre", Metadata::make_string("gpt2"));
  expect_error([&] { Tokenizer::from_gguf_metadata(no_tokens); }, {"tokenizer.ggml.tokens"});
}

TEST(TokenizerErrors, MalformedTokenizerJson) {
  const std::string text = tiny_json().dump();
  expect_error([&] { Tokenizer::from_tokenizer_json_text(text.substr(0, text.size() / 2), "", "half.json"); },
               {"half.json", "malformed"});
  expect_error([&] { Tokenizer::from_tokenizer_json_text("[1, 2]", "", "arr.json"); }, {"arr.json"});
  expect_error([&] { Tokenizer::from_tokenizer_json("/nonexistent/dir/tokenizer.json"); },
               {"/nonexistent/dir/tokenizer.json", "cannot open"});

  json j = tiny_json();
  j["model"]["merges"].push_back("a zzz");
  expect_error([&] { load(j); }, {"test.json", "merge 2", "zzz"});

  j = tiny_json();
  j["model"]["merges"].push_back("b c");  // both known, but "bc" is not in the vocabulary
  expect_error([&] { load(j); }, {"'bc'"});

  j = tiny_json();
  j["model"]["merges"].push_back("abc");
  expect_error([&] { load(j); }, {"merge 2", "not two tokens"});

  j = tiny_json();
  j["model"]["vocab"] = "oops";
  expect_error([&] { load(j); }, {"test.json"});
}

TEST(TokenizerErrors, UnsupportedPartsAreNamed) {
  json j = tiny_json();
  j["model"]["type"] = "Unigram";
  expect_error([&] { load(j); }, {"'Unigram'"});

  j = tiny_json();
  j["pre_tokenizer"] = json{{"type", "Metaspace"}};
  expect_error([&] { load(j); }, {"'Metaspace'"});

  j = tiny_json();
  j["pre_tokenizer"] = json{{"type", "Digits"}, {"individual_digits", true}};
  expect_error([&] { load(j); }, {"no ByteLevel"});

  j = tiny_json();
  j["normalizer"] = json{{"type", "Lowercase"}};
  expect_error([&] { load(j); }, {"'Lowercase'"});

  j = tiny_json();
  j["decoder"] = json{{"type", "WordPiece"}};
  expect_error([&] { load(j); }, {"'WordPiece'"});

  j = tiny_json();
  j["pre_tokenizer"] = json{{"type", "Sequence"},
                            {"pretokenizers", json::array({json{{"type", "Split"},
                                                                {"pattern", json{{"Regex", "(unclosed"}}},
                                                                {"behavior", "Isolated"}},
                                                           json{{"type", "ByteLevel"}}})}};
  expect_error([&] { load(j); }, {"(unclosed", "does not compile"});

  j = tiny_json();
  j["model"]["byte_fallback"] = true;
  expect_error([&] { load(j); }, {"byte_fallback"});

  j = tiny_json();
  j["added_tokens"][0]["single_word"] = true;
  expect_error([&] { load(j); }, {"<|x|>", "single_word"});
}

TEST(TokenizerErrors, BadIdsThrow) {
  const Tokenizer tok = load(tiny_json());
  expect_error([&] { tok.decode(std::vector<int32_t>{1, 259}); }, {"259"});
  expect_error([&] { tok.decode(std::vector<int32_t>{-1}); }, {"-1"});
  expect_error([&] { tok.token_to_piece(100000); }, {"100000"});
  EXPECT_FALSE(tok.is_stop(-5));
}

TEST(TokenizerErrors, InvalidUtf8InputIsRepaired) {
  const Tokenizer tok = Tokenizer::from_tokenizer_json((test::tok_data() / "smollm2" / "tokenizer.json").string());
  const std::string fffd = "\xEF\xBF\xBD";
  struct Case {
    std::string bad, repaired;
  };
  const Case cases[] = {
      {"\xff\xfe" "abc", fffd + fffd + "abc"},
      {"a\xF0\x9F\x98", "a" + fffd},                       // truncated 4-byte character
      {"\xE0\x80\x80x", fffd + fffd + fffd + "x"},         // overlong: E0 must be followed by A0..BF
      {"\xED\xA0\x80", fffd + fffd + fffd},                // UTF-8-encoded surrogate
      {"\xC3" "a\xC3\xA9", fffd + "a\xC3\xA9"},            // lone lead byte, then a valid é
      {"\xF4\x90\x80\x80", fffd + fffd + fffd + fffd},     // above U+10FFFF
      {std::string("nul\0in", 6), std::string("nul\0in", 6)},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(tok.encode(c.bad, false, true), tok.encode(c.repaired, false, true)) << json(c.repaired).dump();
    EXPECT_EQ(tok.decode(tok.encode(c.bad, false, true)), c.repaired);
  }
}

}  // namespace
}  // namespace vi
