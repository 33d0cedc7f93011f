// Tiny golden models (tests/golden/NAME, Hugging Face form) for tests that drive whole models:
// one loaded on the CPU (the weight source must outlive the model: its tensors may be views of
// the mapped file), a golden Qwen3.5 with a random MTP head added, and a scratch folder.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"
#include "formats/weight_source.h"
#include "models/model.h"

namespace vi::test {

struct GoldenModel {
  std::unique_ptr<WeightSource> src;
  std::unique_ptr<Model> model;
};

// tests/golden of the source tree this was built from, else of the current directory (a test
// binary carried to a GPU machine runs from a copy of the repository root there).
inline std::filesystem::path golden_dir() {
  const std::filesystem::path built = std::filesystem::path(VI_SOURCE_DIR) / "tests" / "golden";
  return std::filesystem::is_directory(built) ? built : std::filesystem::current_path() / "tests" / "golden";
}

inline GoldenModel load_golden(const std::string& name) {
  GoldenModel g;
  g.src = formats::open_weight_source((golden_dir() / name).string());
  g.model = load_model(*g.src);
  return g;
}

// A golden Qwen3.5 with a random MTP head: a folder whose config asks for one MTP layer, whose
// first shard is the fixture's weights and whose second holds the head's (HF names).
inline std::string with_mtp_head(const std::string& name, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path src = golden_dir() / name;
  fs::create_directories(dir);
  std::ifstream cin(src / "config.json");
  VI_CHECK(cin.good(), "with_mtp_head: no {}", (src / "config.json").string());
  nlohmann::json cfg = nlohmann::json::parse(cin);
  cfg["mtp_num_hidden_layers"] = 1;
  std::ofstream(dir / "config.json") << cfg.dump(2);
  fs::copy_file(src / "model.safetensors", dir / "main.safetensors", fs::copy_options::overwrite_existing);
  const int64_t d = cfg["hidden_size"], hq = cfg["num_attention_heads"], hkv = cfg["num_key_value_heads"],
                hd = cfg["head_dim"], f = cfg["intermediate_size"];
  std::mt19937 rng(77);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<Tensor> head;
  auto add = [&](const std::string& n, std::vector<int64_t> shape, float scale) {
    Tensor t = Tensor::empty(DType::F32, shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.ptr<float>()[i] = scale * n01(rng);
    t.set_name(n);
    head.push_back(t);
  };
  const float w = 0.15f, nrm = 0.1f;  // matrices; 1 + w norms
  add("mtp.pre_fc_norm_embedding.weight", {d}, nrm);
  add("mtp.pre_fc_norm_hidden.weight", {d}, nrm);
  add("mtp.fc.weight", {d, 2 * d}, w);
  add("mtp.norm.weight", {d}, nrm);
  const std::string l = "mtp.layers.0.";
  add(l + "input_layernorm.weight", {d}, nrm);
  add(l + "post_attention_layernorm.weight", {d}, nrm);
  add(l + "self_attn.q_proj.weight", {2 * hq * hd, d}, w);
  add(l + "self_attn.k_proj.weight", {hkv * hd, d}, w);
  add(l + "self_attn.v_proj.weight", {hkv * hd, d}, w);
  add(l + "self_attn.o_proj.weight", {d, hq * hd}, w);
  add(l + "self_attn.q_norm.weight", {hd}, nrm);
  add(l + "self_attn.k_norm.weight", {hd}, nrm);
  add(l + "mlp.gate_proj.weight", {f, d}, w);
  add(l + "mlp.up_proj.weight", {f, d}, w);
  add(l + "mlp.down_proj.weight", {d, f}, w);
  formats::SafetensorsWriter::write_file((dir / "mtp.safetensors").string(), head);
  nlohmann::json map = nlohmann::json::object();
  auto main_src = formats::open_weight_source((dir / "main.safetensors").string());
  for (const std::string& n : main_src->names()) map[n] = "main.safetensors";
  for (const Tensor& t : head) map[t.name()] = "mtp.safetensors";
  std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", map}}.dump();
  for (const char* extra : {"tokenizer.json", "tokenizer_config.json"})
    if (fs::exists(src / extra)) fs::copy_file(src / extra, dir / extra, fs::copy_options::overwrite_existing);
  return dir.string();
}

// A folder for the test's files, removed with it.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path = std::filesystem::temp_directory_path() /
           (std::string("vi_spec_") + info->name() + "_" + std::to_string(::getpid()));
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

}  // namespace vi::test
