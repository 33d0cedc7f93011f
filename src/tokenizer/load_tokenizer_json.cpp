// Tokenizer::from_tokenizer_json: reads a Hugging Face tokenizer.json (plus the BOS/EOS names
// of a tokenizer_config.json beside it). Supported: model BPE (merges as "a b" strings or
// [a, b] pairs), normalizer null/NFC, pre-tokenizers Sequence/Split/Digits/ByteLevel,
// post-processors ByteLevel/TemplateProcessing/RobertaProcessing/Sequence, decoder ByteLevel.
// Anything else is refused with the offending type named, never silently ignored.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/tokenizer_impl.h"

namespace vi {

namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& origin, const std::string& what) {
  throw FormatError(fmt::format("{}: {}", origin, what));
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : "";
}

bool flag(const json& j, const char* key, bool dflt) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return j[key].get<bool>();
}

void parse_pre(const json& j, tok::PreTokenizer& pre, const std::string& origin) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "Sequence") {
    for (const auto& p : j.at("pretokenizers")) parse_pre(p, pre, origin);
  } else if (t == "ByteLevel") {
    pre.add_byte_level(flag(j, "add_prefix_space", true), flag(j, "use_regex", true));
  } else if (t == "Digits") {
    pre.add_digits(flag(j, "individual_digits", false));
  } else if (t == "Split") {
    const json& pat = j.at("pattern");
    const bool literal = pat.contains("String");
    const std::string p = literal ? pat.at("String").get<std::string>() : pat.at("Regex").get<std::string>();
    if (flag(j, "invert", false)) bad(origin, "pre_tokenizer Split with invert=true is not supported");
    const std::string b = j.value("behavior", "Isolated");
    tok::SplitBehavior behavior;
    if (b == "Isolated") {
      behavior = tok::SplitBehavior::kIsolated;
    } else if (b == "Removed") {
      behavior = tok::SplitBehavior::kRemoved;
    } else if (b == "MergedWithPrevious") {
      behavior = tok::SplitBehavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      behavior = tok::SplitBehavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      behavior = tok::SplitBehavior::kContiguous;
    } else {
      bad(origin, fmt::format("pre_tokenizer Split behavior '{}' is not supported", b));
    }
    pre.add_split(p, literal, behavior);
  } else {
    bad(origin, fmt::format("pre_tokenizer type '{}' is not supported", t));
  }
}

bool parse_normalizer(const json& j, const std::string& origin) {
  if (j.is_null()) return false;
  const std::string t = type_of(j);
  if (t == "NFC") return true;
  if (t == "Sequence") {
    bool nfc = false;
    for (const auto& n : j.at("normalizers")) nfc = parse_normalizer(n, origin) || nfc;
    return nfc;
  }
  bad(origin, fmt::format("normalizer type '{}' is not supported", t));
}

int32_t special_id(const json& j, const std::string& name, const std::string& origin) {
  const json& ids = j.at("special_tokens").at(name).at("ids");
  if (ids.size() != 1) bad(origin, fmt::format("post_processor special token '{}' must map to one id", name));
  return ids[0].get<int32_t>();
}

void parse_post(const json& j, Tokenizer::Impl& m, const std::string& origin) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return;  // offsets only
  if (t == "Sequence") {
    for (const auto& p : j.at("processors")) parse_post(p, m, origin);
  } else if (t == "TemplateProcessing") {
    bool seen_a = false;
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        const int32_t id = special_id(j, item["SpecialToken"].at("id").get<std::string>(), origin);
        (seen_a ? m.suffix : m.prefix).push_back(id);
      } else {
        bad(origin, "post_processor TemplateProcessing item is neither Sequence nor SpecialToken");
      }
    }
  } else if (t == "RobertaProcessing" || t == "BertProcessing") {
    m.prefix.push_back(j.at("cls").at(1).get<int32_t>());
    m.suffix.push_back(j.at("sep").at(1).get<int32_t>());
  } else {
    bad(origin, fmt::format("post_processor type '{}' is not supported", t));
  }
}

void check_decoder(const json& j, const std::string& origin) {
  if (j.is_null()) return;
  const std::string t = type_of(j);
  if (t == "ByteLevel") return;
  if (t == "Sequence") {
    for (const auto& d : j.at("decoders")) check_decoder(d, origin);
    return;
  }
  bad(origin, fmt::format("decoder type '{}' is not supported (byte-level BPE only)", t));
}

// tokenizer_config.json writes tokens as "text" or {"content": "text", ...}.
std::optional<std::string> config_token(const json& cfg, const char* key) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  if (cfg[key].is_string()) return cfg[key].get<std::string>();
  if (cfg[key].is_object() && cfg[key].contains("content")) return cfg[key]["content"].get<std::string>();
  return std::nullopt;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FormatError(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  const std::string text = read_file(path);
  const auto cfg_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::string cfg;
  if (std::filesystem::exists(cfg_path)) cfg = read_file(cfg_path.string());
  return from_tokenizer_json_text(text, cfg, path);
}

Tokenizer Tokenizer::from_tokenizer_json_text(std::string_view json_text, std::string_view config_json,
                                              const std::string& origin) {
  auto m = std::make_shared<Impl>();
  m->origin = origin;
  try {
    const json j = json::parse(json_text);
    if (!j.is_object() || !j.contains("model")) bad(origin, "not a tokenizer.json (no \"model\")");
    const json& model = j["model"];
    const std::string mt = type_of(model);
    if (mt != "BPE" && !(mt.empty() && model.contains("merges"))) {
      bad(origin, fmt::format("model type '{}' is not supported (byte-level BPE only)", mt));
    }
    if (model.contains("byte_fallback") && flag(model, "byte_fallback", false)) {
      bad(origin, "BPE byte_fallback is not supported");
    }
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (model.contains(k) && !model[k].is_null() && !model[k].get<std::string>().empty()) {
        bad(origin, fmt::format("BPE {} is not supported", k));
      }
    }
    if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"].get<double>() > 0) {
      bad(origin, "BPE dropout is not supported");
    }

    std::unordered_map<std::string, int32_t> vocab;
    int32_t max_id = -1;
    for (const auto& [k, v] : model.at("vocab").items()) {
      const int32_t id = v.get<int32_t>();
      if (id < 0) bad(origin, fmt::format("vocab entry '{}' has negative id {}", k, id));
      vocab.emplace(k, id);
      max_id = std::max(max_id, id);
    }
    std::vector<std::pair<std::string, std::string>> merges;
    const json& mj = model.at("merges");
    merges.reserve(mj.size());
    for (size_t i = 0; i < mj.size(); ++i) {
      const json& e = mj[i];
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
          bad(origin, fmt::format("merge {} '{}' is not two tokens separated by one space", i, s));
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        bad(origin, fmt::format("merge {} is neither \"a b\" nor [a, b]", i));
      }
    }

    // Added tokens: their ids may extend past the model vocabulary.
    std::vector<tok::AddedToken> added;
    if (j.contains("added_tokens")) {
      for (const auto& a : j["added_tokens"]) {
        tok::AddedToken t;
        t.content = a.at("content").get<std::string>();
        t.id = a.at("id").get<int32_t>();
        t.special = flag(a, "special", false);
        t.lstrip = flag(a, "lstrip", false);
        t.rstrip = flag(a, "rstrip", false);
        t.normalized = flag(a, "normalized", !t.special);
        if (flag(a, "single_word", false)) {
          bad(origin, fmt::format("added token '{}' uses single_word, which is not supported", t.content));
        }
        if (t.id < 0) bad(origin, fmt::format("added token '{}' has negative id", t.content));
        max_id = std::max(max_id, t.id);
        added.push_back(std::move(t));
      }
    }

    m->text.assign(static_cast<size_t>(max_id) + 1, std::string());
    m->attr.assign(m->text.size(), TokenAttr::kUnused);
    for (const auto& [k, id] : vocab) {
      m->text[id] = k;
      m->attr[id] = TokenAttr::kNormal;
    }
    m->nfc = j.contains("normalizer") && parse_normalizer(j["normalizer"], origin);
    if (j.contains("pre_tokenizer")) parse_pre(j["pre_tokenizer"], m->pre, origin);
    if (!m->pre.has_byte_level()) bad(origin, "pre_tokenizer has no ByteLevel step (only byte-level BPE is supported)");
    if (j.contains("post_processor")) parse_post(j["post_processor"], *m, origin);
    if (j.contains("decoder")) check_decoder(j["decoder"], origin);
    m->bpe = tok::Bpe(std::move(vocab), merges, flag(model, "ignore_merges", false), origin);

    for (auto& t : added) {
      m->text[t.id] = t.content;
      m->attr[t.id] = t.special ? TokenAttr::kControl : TokenAttr::kUserDefined;
      m->added_by_content[t.content] = t.id;
      m->added.add(std::move(t));
    }
    for (int32_t id : m->prefix) {
      if (id < 0 || static_cast<size_t>(id) >= m->text.size()) bad(origin, fmt::format("post_processor id {} out of range", id));
    }
    for (int32_t id : m->suffix) {
      if (id < 0 || static_cast<size_t>(id) >= m->text.size()) bad(origin, fmt::format("post_processor id {} out of range", id));
    }

    // BOS/EOS: tokenizer_config.json names them; otherwise the template's first token is BOS.
    auto lookup = [&](const std::string& name) -> int32_t {
      auto it = m->added_by_content.find(name);
      if (it != m->added_by_content.end()) return it->second;
      return m->bpe.find(name);
    };
    if (!config_json.empty()) {
      const json cfg = json::parse(config_json);
      if (auto b = config_token(cfg, "bos_token")) m->bos = lookup(*b);
      if (auto e = config_token(cfg, "eos_token")) m->eos = lookup(*e);
      if (auto p = config_token(cfg, "pad_token")) m->pad = lookup(*p);
    }
    if (m->bos < 0 && !m->prefix.empty()) m->bos = m->prefix.front();
    if (m->eos < 0) {
      for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>"}) {
        if ((m->eos = lookup(name)) >= 0) break;
      }
    }
  } catch (const nlohmann::json::exception& e) {
    bad(origin, fmt::format("malformed tokenizer JSON: {}", e.what()));
  }
  m->finish(/*raw_added_text=*/false);
  return Tokenizer(std::move(m));
}

}  // namespace vi
