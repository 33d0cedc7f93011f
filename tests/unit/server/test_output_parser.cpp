// OutputParser (reasoning / tool calls / content) on streamed text. The random test builds
// replies from known parts — reasoning, an answer, tool calls whose arguments are known
// JSON objects, written in Qwen's XML or JSON form — renders them as a model would, cuts
// the text into random pieces and checks that the parser recovers exactly those parts,
// and that the deltas it streamed add up to the same result. A second test feeds real
// Qwen3.5 tokens through the StreamDecoder. Hand-written cases cover cut-offs and
// malformed markup.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <random>

#include "server/output_parser.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

using nlohmann::json;
using vi::server::OutputDelta;
using vi::server::OutputParser;
using vi::server::ParserOptions;

namespace {

struct Streamed {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments text
};

// Feeds `pieces` and collects the deltas as a client would assemble them.
Streamed feed(OutputParser& p, const std::vector<std::string>& pieces) {
  Streamed s;
  auto take = [&](const std::vector<OutputDelta>& ds) {
    for (const auto& d : ds) {
      switch (d.kind) {
        case OutputDelta::Kind::kContent: s.content += d.text; break;
        case OutputDelta::Kind::kReasoning: s.reasoning += d.text; break;
        case OutputDelta::Kind::kToolStart:
          ASSERT_EQ(d.tool_index, static_cast<int>(s.calls.size()));
          ASSERT_FALSE(d.id.empty());
          s.calls.push_back({d.text, ""});
          break;
        case OutputDelta::Kind::kToolArgs:
          ASSERT_EQ(d.tool_index + 1, static_cast<int>(s.calls.size()));
          s.calls.back().second += d.text;
          break;
      }
    }
  };
  for (const auto& piece : pieces) take(p.push(piece));
  take(p.finish());
  return s;
}

std::vector<std::string> random_pieces(std::mt19937& rng, const std::string& text) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 1 + rng() % 7;
    out.push_back(text.substr(pos, len));
    pos += len;
  }
  return out;
}

std::string word(std::mt19937& rng) {
  static const char* kWords[] = {"the", "weather", "in", "Paris", "is", "<b>", "a<", "x=1", "tool", "think",
                                 "call", "</p>", "{", "}", "\"q\"", "42", "é", "日本"};
  return kWords[rng() % std::size(kWords)];
}

std::string sentence(std::mt19937& rng) {
  std::string s = word(rng);
  for (int i = 0, n = 1 + static_cast<int>(rng() % 6); i < n; ++i) {
    s += rng() % 5 == 0 ? "\n" : " ";  // appended apart: GCC 12 warns (-Wrestrict) on "x" + string
    s += word(rng);
  }
  return s;
}

}  // namespace

TEST(OutputParser, RandomRepliesRandomSplits) {
  std::mt19937 rng(std::random_device{}());
  // Tool schema: p_str is a string, p_int an integer, p_obj an object.
  json schemas = {{"get_weather", {{"type", "object"}, {"properties", {{"p_str", {{"type", "string"}}},
                                                                        {"p_int", {{"type", "integer"}}},
                                                                        {"p_obj", {{"type", "object"}}}}}}},
                  {"lookup", {{"type", "object"}, {"properties", {{"p_str", {{"type", "string"}}}}}}}};
  for (int trial = 0; trial < 2000; ++trial) {
    const bool prefilled = rng() % 3 == 0;  // the template opened <think> in the prompt
    const bool thinks = prefilled || rng() % 2 == 0;
    const bool json_form = rng() % 2 == 0;
    std::string reasoning = thinks ? sentence(rng) : "";
    std::string answer = rng() % 4 == 0 ? "" : sentence(rng);
    int n_calls = static_cast<int>(rng() % 3);

    std::string text;
    if (thinks) text += (prefilled ? "" : "<think>") + reasoning + "</think>\n\n";
    text += answer;
    std::vector<std::pair<std::string, json>> calls;
    for (int c = 0; c < n_calls; ++c) {
      std::string name = rng() % 2 ? "get_weather" : "lookup";
      json args = json::object();
      args["p_str"] = sentence(rng);
      if (name == "get_weather" && rng() % 2) args["p_int"] = static_cast<int>(rng() % 1000) - 500;
      if (name == "get_weather" && rng() % 2) args["p_obj"] = {{"k", word(rng)}, {"n", {1, 2}}};
      calls.push_back({name, args});
      text += (text.empty() ? "" : "\n") + std::string("<tool_call>\n");
      if (json_form) {
        text += json{{"name", name}, {"arguments", args}}.dump();
      } else {
        text += "<function=" + name + ">\n";
        for (auto it = args.begin(); it != args.end(); ++it)
          text += "<parameter=" + it.key() + ">\n" + (it->is_string() ? it->get<std::string>() : it->dump()) +
                  "\n</parameter>\n";
        text += "</function>";
      }
      text += "\n</tool_call>";
    }

    ParserOptions opts;
    opts.start_in_reasoning = prefilled;
    opts.tools = true;
    opts.tool_parameters = schemas;
    OutputParser p(opts);
    Streamed s = feed(p, random_pieces(rng, text));
    SCOPED_TRACE(text);
    ASSERT_EQ(s.reasoning, reasoning);
    ASSERT_EQ(s.content, answer);
    ASSERT_EQ(s.calls.size(), calls.size());
    for (size_t c = 0; c < calls.size(); ++c) {
      ASSERT_EQ(s.calls[c].first, calls[c].first);
      json got = json::parse(s.calls[c].second, nullptr, false);
      ASSERT_FALSE(got.is_discarded()) << s.calls[c].second;
      ASSERT_EQ(got, calls[c].second);
    }
    // The accumulated result equals what was streamed.
    ASSERT_EQ(p.content(), s.content);
    ASSERT_EQ(p.reasoning(), s.reasoning);
    ASSERT_EQ(p.tool_calls().size(), s.calls.size());
  }
}

TEST(OutputParser, CutOffMidThoughtIsAllReasoning) {
  ParserOptions opts;
  opts.start_in_reasoning = true;
  OutputParser p(opts);
  Streamed s = feed(p, {"Let me", " think </th", "ink"});  // "</think" never completed
  EXPECT_EQ(s.reasoning, "Let me think </think");
  EXPECT_EQ(s.content, "");
}

TEST(OutputParser, NoThinkWithoutMarkup) {
  OutputParser p(ParserOptions{});
  Streamed s = feed(p, {"  <thi", "s is not a tag> but text"});
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "  <this is not a tag> but text");
}

TEST(OutputParser, ToolMarkupIgnoredWithoutTools) {
  OutputParser p(ParserOptions{});
  Streamed s = feed(p, {"<tool_call>\n<function=f>\n</function>\n</tool_call>"});
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "<tool_call>\n<function=f>\n</function>\n</tool_call>");
}

TEST(OutputParser, CutOffInsideCallKeepsCompletedParameters) {
  ParserOptions opts;
  opts.tools = true;
  OutputParser p(opts);
  Streamed s = feed(p, {"<tool_call>\n<function=search>\n<parameter=q>\ncats\n</parameter>\n<parameter=n>\n1"});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].first, "search");
  EXPECT_EQ(json::parse(s.calls[0].second), (json{{"q", "cats"}}));
}

TEST(OutputParser, MalformedCallIsContent) {
  ParserOptions opts;
  opts.tools = true;
  OutputParser p(opts);
  Streamed s = feed(p, {"see <tool_call> here", " and {not json</tool_call> end"});
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "see<tool_call> here and {not json</tool_call> end");
}

TEST(OutputParser, MissingParameterCloseAndUntypedValues) {
  ParserOptions opts;
  opts.tools = true;  // no schema: values stay strings, as Qwen's reference parser does
  OutputParser p(opts);
  Streamed s = feed(p, {"<tool_call><function=f><parameter=a>\n12\n<parameter=b>x</parameter></function></tool_call>"});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(json::parse(s.calls[0].second), (json{{"a", "12"}, {"b", "x"}}));
}

TEST(OutputParser, NamedToolChoiceParsesOnlyThatTool) {
  // tool_choice naming one function: a call to another name is not a call but text, in
  // either form, whether it arrives whole or one character at a time.
  const std::string other_xml = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                "</function>\n</tool_call>";
  const std::string other_json = R"(<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>)";
  const std::string named = "<tool_call>\n<function=get_time>\n<parameter=zone>\nCET\n</parameter>\n</function>\n"
                            "</tool_call>";
  const std::string text = other_xml + other_json + named;
  for (bool by_char : {false, true}) {
    ParserOptions opts;
    opts.tools = true;
    opts.only_tool = "get_time";
    OutputParser p(opts);
    std::vector<std::string> pieces;
    if (by_char) {
      for (char c : text) pieces.push_back(std::string(1, c));
    } else {
      pieces.push_back(text);
    }
    Streamed s = feed(p, pieces);
    ASSERT_EQ(s.calls.size(), 1u) << "by_char=" << by_char;
    EXPECT_EQ(s.calls[0].first, "get_time");
    EXPECT_EQ(json::parse(s.calls[0].second), (json{{"zone", "CET"}}));
    EXPECT_NE(s.content.find("<function=get_weather>"), std::string::npos) << s.content;
    EXPECT_NE(s.content.find(R"("city": "Oslo")"), std::string::npos) << s.content;
  }
  // Without the restriction both other calls are calls.
  ParserOptions any;
  any.tools = true;
  OutputParser p(any);
  EXPECT_EQ(feed(p, {text}).calls.size(), 3u);
}

TEST(OutputParser, QwenTokensThroughStreamDecoder) {
  const std::string path = std::string(VI_TEST_DATA_DIR) + "/tokenizer/qwen35/tokenizer.json";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " missing";
  vi::Tokenizer tok = vi::Tokenizer::from_tokenizer_json(path);
  const std::string reply =
      "Need the weather.\n</think>\n\nChecking Zürich 🌤.\n\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\nZürich\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  std::vector<int32_t> ids = tok.encode(reply, false, true);
  // <think>-family markers are single added tokens in Qwen's vocabulary.
  ASSERT_EQ(tok.token_id("</think>").value_or(-1),
            *std::find(ids.begin(), ids.end(), tok.token_id("</think>").value_or(-2)));
  ParserOptions opts;
  opts.start_in_reasoning = true;
  opts.tools = true;
  opts.tool_parameters = {{"get_weather", {{"properties", {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}}}}};
  OutputParser p(opts);
  vi::StreamDecoder dec(tok, /*skip_special=*/true);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(dec.push(id));
  pieces.push_back(dec.flush());
  Streamed s = feed(p, pieces);
  EXPECT_EQ(s.reasoning, "Need the weather.\n");
  EXPECT_EQ(s.content, "Checking Zürich 🌤.");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].first, "get_weather");
  EXPECT_EQ(json::parse(s.calls[0].second), (json{{"city", "Zürich"}, {"days", 3}}));
}
