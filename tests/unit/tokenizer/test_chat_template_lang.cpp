// Language-level tests of the chat-template interpreter that the Python reference file
// cannot express: error messages (syntax errors with line/column, runtime errors with
// line, raise_exception), and seeded random inputs checked against plain C++ references
// (Python floor division, str.split, loop variables, json.dumps via nlohmann).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <random>

#include "tokenizer/chat_template.h"

namespace {

using ojson = nlohmann::ordered_json;

std::string render(const std::string& src, const ojson& ctx = ojson::object()) {
  return vi::ChatTemplate(src).render(ctx);
}

std::string error_of(const std::string& src, const ojson& ctx = ojson::object()) {
  try {
    vi::ChatTemplate(src).render(ctx);
  } catch (const vi::Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(ChatTemplateErrors, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    const char* src;
    const char* where;  // "line L, column C"
    const char* what;
  };
  const Case cases[] = {
      {"{{ x }", "line 1, column 6", "unexpected '}'"},
      {"ab\n{% if x %}b", "line 2, column 12", "expected 'elif' or 'else' or 'endif'"},
      {"{% for x in xs %}{% endif %}", "line 1, column 21", "unknown tag 'endif'"},
      {"x\n  y {# never closed", "line 2, column 5", "Missing end of comment tag"},
      {"{{ 'abc }}", "line 1, column 4", "unexpected end of string literal"},
      {"{% set %}", "line 1, column 8", "expected a name"},
      {"{{ x | }}", "line 1, column 8", "expected a name"},
      {"{% break %}", "line 1, column 4", "'break' outside of a for loop"},
      {"one\ntwo\n  {{ a ? b }}", "line 3, column 8", "unexpected char '?'"},
      // Inside open brackets "%}" is not a tag end (as in Jinja), so the lexer trips on '}'.
      {"{% macro m(a, %}{% endmacro %}", "line 1, column 16", "unexpected '}', expected ')'"},
      {"{% macro m(a, 1) %}{% endmacro %}", "line 1, column 15", "expected a name"},
      {"{{ (1 + 2 }}", "line 1, column 11", "unexpected '}', expected ')'"},
      {"{% if x %}{% else %}{% elif y %}{% endif %}", "line 1, column 24", "unknown tag 'elif'"},
  };
  for (const auto& c : cases) {
    try {
      vi::ChatTemplate t(c.src);
      ADD_FAILURE() << "no syntax error for: " << c.src;
    } catch (const vi::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("chat template syntax error at " + std::string(c.where)), std::string::npos)
          << c.src << " -> " << msg;
      EXPECT_NE(msg.find(c.what), std::string::npos) << c.src << " -> " << msg;
    }
  }
}

TEST(ChatTemplateErrors, RuntimeErrorsNameTheLine) {
  EXPECT_EQ(error_of("a\nb\n{{ x.y }}"), "chat template error at line 3: 'x' is undefined");
  EXPECT_EQ(error_of("{% for m in messages %}\n{{ m.content.z.w }}{% endfor %}",
                     {{"messages", ojson::array({{{"role", "user"}}})}}),
            "chat template error at line 2: 'dict object' has no attribute 'content'");
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("can only concatenate str (not \"int\") to str"), std::string::npos);
  EXPECT_NE(error_of("{{ nope(1) }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ x|nosuchfilter }}").find("No filter named 'nosuchfilter'"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(a=1) %}{% set ns._p = 2 %}").find("underscore-prefixed"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.a = 2 %}").find("non-namespace"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").find("recursed too deeply"), std::string::npos);
  EXPECT_NE(error_of("{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}").find("takes not more than 1 argument"), std::string::npos);
}

TEST(ChatTemplateErrors, HostileNestingFailsCleanly) {
  const std::string deep = "{{ " + std::string(20000, '(') + "1" + std::string(20000, ')') + " }}";
  EXPECT_THROW(vi::ChatTemplate{deep}, vi::Error);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_THROW(vi::ChatTemplate{ifs}, vi::Error);
  ojson v = 1;
  for (int i = 0; i < 600; ++i) v = ojson::array({v});
  EXPECT_THROW(vi::ChatTemplate("{{ v }}").render(ojson{{"v", v}}), vi::Error);
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}"), "1");
}

TEST(ChatTemplateErrors, RaiseExceptionCarriesTheMessageVerbatim) {
  const vi::ChatTemplate t("{% if messages|length == 0 %}{{ raise_exception('No messages: ' ~ n) }}{% endif %}ok");
  try {
    t.render(ojson{{"messages", ojson::array()}, {"n", 3}});
    FAIL() << "raise_exception did not throw";
  } catch (const vi::ChatTemplateRaise& e) {
    EXPECT_STREQ(e.what(), "No messages: 3");
  }
  EXPECT_EQ(t.render(ojson{{"messages", ojson::array({1})}, {"n", 3}}), "ok");
}

TEST(ChatTemplateLanguage, UndefinedIsFalsyEmptyAndNotDefined) {
  EXPECT_EQ(render("[{{ x }}]|{{ x is defined }}|{{ x is undefined }}|{% if x %}t{% else %}f{% endif %}|"
                   "{{ x|default('d') }}|{{ x|length }}|{{ m.missing is defined }}|{{ not m.missing }}",
                   {{"m", ojson::object()}}),
            "[]|False|True|f|d|0|False|True");
}

TEST(ChatTemplateLanguage, WorksWithUnorderedJsonToo) {
  nlohmann::json ctx = {{"b", 1}, {"a", {{"y", 2}, {"x", 1}}}};
  // nlohmann::json keeps keys sorted, so tojson sees them sorted.
  EXPECT_EQ(vi::ChatTemplate("{{ a|tojson }} {{ b }}").render(ctx), "{\"x\": 1, \"y\": 2} 1");
}

TEST(ChatTemplateLanguage, RenderChatNormalisesLikeTransformers) {
  const vi::ChatTemplate t(
      "{% for m in messages %}{{ m|items|map('first')|join(',') }}={{ m.thinking }}/{{ m.reasoning_content }};"
      "{% endfor %}{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ eos_token }}");
  const ojson msgs = ojson::parse(R"([
    {"role": "user", "content": "hi", "name": null},
    {"role": "assistant", "content": null, "reasoning": "r1", "tool_calls": [{"function": {"name": "f"}}]},
    {"role": "assistant", "thinking": "t2", "reasoning_content": "rc2", "content": "c"}
  ])");
  EXPECT_EQ(t.render_chat(msgs, nullptr, true, {{"eos_token", "</s>"}}),
            "role,content=/;"
            "thinking,role,reasoning,tool_calls,reasoning_content=r1/r1;"
            "thinking,role,reasoning_content,content=t2/rc2;"
            "True True True </s>");
  EXPECT_THROW(t.render_chat(msgs, nullptr, false, {{"messages", 1}}), vi::Error);
  EXPECT_THROW(t.render_chat(ojson::object(), nullptr, false), vi::Error);
}

TEST(ChatTemplateLanguage, PickChatTemplateLikeTransformers) {
  EXPECT_EQ(vi::pick_chat_template("plain", true), "plain");
  const nlohmann::json named = nlohmann::json::parse(
      R"([{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}])");
  EXPECT_EQ(vi::pick_chat_template(named, false), "D");
  EXPECT_EQ(vi::pick_chat_template(named, true), "T");
  EXPECT_EQ(vi::pick_chat_template(nlohmann::json{{"default", "D"}}, true), "D");
  EXPECT_THROW(vi::pick_chat_template(nlohmann::json{{"rag", "R"}}, false), vi::Error);
  EXPECT_THROW(vi::pick_chat_template(nullptr, false), vi::Error);
}

TEST(ChatTemplateLanguage, StrftimeNowUsesTheLocalClock) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  EXPECT_EQ(render("{{ strftime_now('%Y') }}"), std::to_string(tm.tm_year + 1900));
}

// Python's floor division and modulo, written independently of the interpreter.
TEST(ChatTemplateRandom, FloorDivisionAndModuloMatchPython) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> d(-1000, 1000);
  const vi::ChatTemplate t("{{ a // b }} {{ a % b }} {{ a * b - a }} {{ -a }}");
  for (int it = 0; it < 300; ++it) {
    const int a = d(rng);
    int b = d(rng);
    if (b == 0) b = 7;
    const auto q = static_cast<long long>(std::floor(static_cast<double>(a) / b));
    const long long r = a - q * b;
    EXPECT_EQ(t.render(ojson{{"a", a}, {"b", b}}),
              std::to_string(q) + " " + std::to_string(r) + " " + std::to_string(1LL * a * b - a) + " " + std::to_string(-a))
        << a << " " << b;
  }
}

// str.split() / str.split(',') / strip() on random ASCII text vs plain loops.
TEST(ChatTemplateRandom, SplitAndStripMatchPythonOnAscii) {
  std::mt19937 rng(777);
  const std::string alphabet = "ab, \t\n,";
  const vi::ChatTemplate t("{{ s.split()|tojson }}|{{ s.split(',')|tojson }}|{{ s.strip()|tojson }}|{{ s|length }}");
  for (int it = 0; it < 300; ++it) {
    std::string s;
    const int n = static_cast<int>(rng() % 14);
    for (int i = 0; i < n; ++i) s.push_back(alphabet[rng() % alphabet.size()]);
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n'; };
    ojson words = ojson::array(), parts = ojson::array();
    std::string cur;
    for (char c : s) {
      if (ws(c)) {
        if (!cur.empty()) words.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(c);
      }
    }
    if (!cur.empty()) words.push_back(cur);
    cur.clear();
    for (char c : s) {
      if (c == ',') {
        parts.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(c);
      }
    }
    parts.push_back(cur);
    size_t b = 0, e = s.size();
    while (b < e && ws(s[b])) ++b;
    while (e > b && ws(s[e - 1])) --e;
    // json.dumps separators (", ", ": ") differ from nlohmann's compact form; re-space lists.
    auto py = [](const ojson& arr) {
      std::string out = "[";
      for (size_t i = 0; i < arr.size(); ++i) out += (i ? ", " : "") + arr[i].dump();
      return out + "]";
    };
    const std::string want = py(words) + "|" + py(parts) + "|" + ojson(s.substr(b, e - b)).dump() + "|" + std::to_string(s.size());
    EXPECT_EQ(t.render(ojson{{"s", s}}), want) << ojson(s).dump();
  }
}

// loop.* variables on random lengths, with a filtered loop, vs a plain loop.
TEST(ChatTemplateRandom, LoopVariablesMatchAPlainLoop) {
  std::mt19937 rng(4242);
  const vi::ChatTemplate t(
      "{% for x in xs if x % 3 != 0 %}{{ loop.index }},{{ loop.index0 }},{{ loop.revindex }},{{ loop.revindex0 }},"
      "{{ loop.first }},{{ loop.last }},{{ loop.length }},{{ loop.previtem }},{{ loop.nextitem }};{% else %}empty{% endfor %}");
  for (int it = 0; it < 100; ++it) {
    std::vector<int> xs(rng() % 9);
    for (int& x : xs) x = static_cast<int>(rng() % 20);
    std::vector<int> kept;
    for (int x : xs)
      if (x % 3 != 0) kept.push_back(x);
    std::string want;
    const size_t n = kept.size();
    for (size_t i = 0; i < n; ++i) {
      want += std::to_string(i + 1) + "," + std::to_string(i) + "," + std::to_string(n - i) + "," + std::to_string(n - i - 1) + "," +
              (i == 0 ? "True" : "False") + "," + (i == n - 1 ? "True" : "False") + "," + std::to_string(n) + "," +
              (i > 0 ? std::to_string(kept[i - 1]) : "") + "," + (i + 1 < n ? std::to_string(kept[i + 1]) : "") + ";";
    }
    if (n == 0) want = "empty";
    EXPECT_EQ(t.render(ojson{{"xs", xs}}), want);
  }
}

// tojson with compact separators equals nlohmann's dump for random nested JSON, and
// keeps insertion order (as Python dicts do).
ojson random_json(std::mt19937& rng, int depth) {
  const int kind = static_cast<int>(rng() % (depth > 2 ? 5 : 7));
  switch (kind) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int>(rng() % 200001) - 100000;
    case 3: return static_cast<double>(static_cast<int>(rng() % 4001) - 2000) / 8.0;
    case 4: {
      std::string s;
      const char* pool[] = {"a", "\"", "\\", "\n", "\t", "\x01", "é", "🙂", " ", "<", "&", "'"};
      for (int i = static_cast<int>(rng() % 6); i > 0; --i) s += pool[rng() % 12];
      return s;
    }
    case 5: {
      ojson a = ojson::array();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) a.push_back(random_json(rng, depth + 1));
      return a;
    }
    default: {
      ojson o = ojson::object();
      for (int i = static_cast<int>(rng() % 4); i > 0; --i) o["k" + std::to_string(rng() % 50)] = random_json(rng, depth + 1);
      return o;
    }
  }
}

TEST(ChatTemplateRandom, TojsonCompactMatchesNlohmannDump) {
  std::mt19937 rng(99);
  const vi::ChatTemplate t("{{ v|tojson(separators=(',', ':')) }}");
  for (int it = 0; it < 300; ++it) {
    const ojson v = random_json(rng, 0);
    EXPECT_EQ(t.render(ojson{{"v", v}}), v.dump()) << v.dump();
  }
}

TEST(ChatTemplatePerf, LongConversationRendersInLinearTime) {
  // Qwen3.5's template walks the messages twice and calls a macro per message; a quadratic
  // slip (copying the history per turn) would show up here.
  ojson msgs = ojson::array();
  for (int i = 0; i < 3000; ++i) {
    msgs.push_back({{"role", "user"}, {"content", "question " + std::to_string(i)}});
    msgs.push_back({{"role", "assistant"}, {"content", "answer " + std::to_string(i)}});
  }
  const std::string src = R"({%- set ns = namespace(n=0) -%}
{%- for m in messages[::-1] %}{% if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif %}{% endfor -%}
{%- macro body(c) %}{{ c|trim }}{% endmacro -%}
{%- for m in messages %}<{{ m.role }}>{{ body(m.content) }}{% if loop.last %}{{ ns.n }}{% endif %}{% endfor %})";
  const vi::ChatTemplate t(src);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string out = t.render_chat(msgs, nullptr, true);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(out.find("<assistant>answer 2999" "3000"), std::string::npos);
  EXPECT_LT(s, 2.0) << "6000 messages took " << s << " s";
}

}  // namespace
