// Helpers shared by the tokenizer tests: fixture paths, JSONL reading, and building GGUF-style
// vi::Metadata (as llama.cpp's convert script would write it) from a tokenizer.json or from
// the dumped keys of the real SmolLM2 GGUF.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/metadata.h"

namespace vi::test {

inline std::filesystem::path tok_data() { return std::filesystem::path(VI_TEST_DATA_DIR) / "tokenizer"; }

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One JSON value per '\n'-separated line (never split on U+2028 and friends).
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::string all = read_text(p), line;
  std::istringstream ss(all);
  while (std::getline(ss, line, '\n')) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

inline MetaValue str_array(const std::vector<std::string>& v) {
  MetaValue a;
  a.kind = MetaValue::Kind::kArray;
  a.gguf_type = 9;
  a.i = 8;
  for (const auto& s : v) a.arr.push_back(Metadata::make_string(s));
  return a;
}

inline MetaValue int_array(const std::vector<int64_t>& v) {
  MetaValue a;
  a.kind = MetaValue::Kind::kArray;
  a.gguf_type = 9;
  a.i = 5;
  for (auto x : v) a.arr.push_back(Metadata::make_int(x, 5));
  return a;
}

// GGUF keys for a HF byte-level BPE tokenizer.json: tokens by id, type 3 for special added
// tokens, 4 for the other added tokens, merges as "a b".
inline Metadata gguf_meta_from_tokenizer_json(const std::filesystem::path& p, const std::string& pre) {
  const auto j = nlohmann::json::parse(read_text(p));
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  auto put = [&](int64_t id, const std::string& text, int64_t type) {
    if (static_cast<size_t>(id) >= tokens.size()) {
      tokens.resize(id + 1);
      types.resize(id + 1, 5);
    }
    tokens[id] = text;
    types[id] = type;
  };
  for (const auto& [k, v] : j["model"]["vocab"].items()) put(v.get<int64_t>(), k, 1);
  for (const auto& a : j["added_tokens"]) put(a["id"].get<int64_t>(), a["content"], a["special"].get<bool>() ? 3 : 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]";  // as convert_hf_to_gguf fills holes
  }
  std::vector<std::string> merges;
  for (const auto& m : j["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  Metadata md;
  md.set("tokenizer.ggml.model", Metadata::make_string("gpt2"));
  md.set("tokenizer.ggml.pre", Metadata::make_string(pre));
  md.set("tokenizer.ggml.tokens", str_array(tokens));
  md.set("tokenizer.ggml.token_type", int_array(types));
  md.set("tokenizer.ggml.merges", str_array(merges));
  md.set("tokenizer.ggml.add_bos_token", Metadata::make_bool(false));
  return md;
}

// The tokenizer.* keys of the SmolLM2 GGUF as dumped by scripts/tokenizer_make_fixtures.py:
// {key: {"type": [gguf type codes], "value": ...}}.
inline Metadata gguf_meta_from_dump(const std::filesystem::path& p) {
  const auto j = nlohmann::json::parse(read_text(p));
  Metadata md;
  for (const auto& [k, v] : j.items()) {
    const auto& types = v["type"];
    const int t0 = types[0].get<int>();
    const auto& val = v["value"];
    if (t0 == 9) {
      const int et = types[1].get<int>();
      if (et == 8) {
        md.set(k, str_array(val.get<std::vector<std::string>>()));
      } else {
        md.set(k, int_array(val.get<std::vector<int64_t>>()));
      }
    } else if (t0 == 8) {
      md.set(k, Metadata::make_string(val.get<std::string>()));
    } else if (t0 == 7) {
      md.set(k, Metadata::make_bool(val.get<bool>()));
    } else if (t0 == 6 || t0 == 12) {
      md.set(k, Metadata::make_float(val.get<double>(), t0));
    } else {
      md.set(k, Metadata::make_int(val.get<int64_t>(), t0));
    }
  }
  return md;
}

}  // namespace vi::test
