// Renders every case of tests/data/chat_templates/expected.jsonl (real model templates
// over many conversations, plus one small template per language feature) and compares
// byte for byte with what Python jinja2 produced through transformers'
// render_jinja_template (scripts/chat_template_reference.py). Expected failures must fail
// here too: raise_exception() cases with the same message, other cases with a vi::Error.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "tokenizer/chat_template.h"

namespace {

using ojson = nlohmann::ordered_json;

const std::string kDir = std::string(VI_TEST_DATA_DIR) + "/chat_templates/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Case {
  std::string name;
  ojson row;
};

std::vector<Case> load_cases() {
  std::vector<Case> cases;
  std::ifstream f(kDir + "expected.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    ojson row = ojson::parse(line);
    std::string name = row["name"].get<std::string>();
    for (char& c : name)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    cases.push_back({name, std::move(row)});
  }
  return cases;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> c = load_cases();
  return c;
}

class Reference : public testing::TestWithParam<size_t> {};

TEST_P(Reference, MatchesPythonJinja2) {
  const ojson& row = cases()[GetParam()].row;
  const std::string source =
      row.contains("template") ? read_file(kDir + row["template"].get<std::string>() + ".jinja") : row["source"].get<std::string>();
  const vi::ChatTemplate tpl(source);
  auto render = [&] {
    return tpl.render_chat(row["messages"], row["tools"], row["add_generation_prompt"].get<bool>(), row["extra"]);
  };
  if (row.contains("expected")) {
    EXPECT_EQ(render(), row["expected"].get<std::string>());
    return;
  }
  const std::string want = row["error"].get<std::string>();
  try {
    const std::string got = render();
    ADD_FAILURE() << "expected an error (" << want << "), rendered: " << got;
  } catch (const vi::ChatTemplateRaise& e) {
    EXPECT_EQ(row["error_kind"], "raise") << "raise_exception fired where Python failed with: " << want;
    EXPECT_EQ(std::string(e.what()), want);
  } catch (const vi::Error& e) {
    EXPECT_EQ(row["error_kind"], "other") << "got " << e.what() << ", Python raised via raise_exception: " << want;
    EXPECT_NE(std::string(e.what()).find("chat template error at line"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(ChatTemplate, Reference, testing::Range<size_t>(0, cases().size()),
                         [](const testing::TestParamInfo<size_t>& info) { return cases()[info.param].name; });

TEST(ChatTemplateReferenceData, CoversAllTemplatesAndFeatures) {
  // Guards against a truncated or stale expected.jsonl silently shrinking the suite.
  std::set<std::string> templates;
  size_t features = 0, errors = 0;
  for (const auto& c : cases()) {
    if (c.row.contains("template")) templates.insert(c.row["template"].get<std::string>());
    else ++features;
    errors += c.row.contains("error");
  }
  EXPECT_EQ(templates, (std::set<std::string>{"qwen2_5", "qwen3", "qwen3_5", "smollm2"}));
  EXPECT_GE(features, 40u);
  EXPECT_GE(errors, 10u);
  EXPECT_GE(cases().size(), 140u);
}

}  // namespace
