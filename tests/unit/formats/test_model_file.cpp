// open_model_file on every accepted input (HF folder with sharded safetensors, a single
// .safetensors, a .gguf, the real SmolLM2 GGUF when present), its get/require errors,
// the load progress callback, and the config.json helpers.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/half.h"
#include "format_test_util.h"
#include "formats/gguf_writer.h"
#include "formats/hf_config.h"
#include "formats/model_file.h"
#include "formats/safetensors.h"

using namespace vi;
using namespace vi::formats;
using vi::test::expect_format_error;

namespace {
const std::string kDir = std::string(VI_TEST_DATA_DIR) + "/formats/";
double ramp(int64_t i) { return static_cast<double>(i % 17) * 0.25 - 2.0; }
}  // namespace

TEST(ModelFile, HfShardedFolder) {
  const std::string dir = kDir + "py_hf";
  std::vector<std::pair<size_t, size_t>> calls;
  ModelFile mf = open_model_file(dir, [&](size_t done, size_t total) { calls.emplace_back(done, total); });
  EXPECT_EQ(mf.format, FileFormat::kSafetensors);
  EXPECT_EQ(mf.files.size(), 2u);
  EXPECT_EQ(mf.tensors.size(), 4u);
  EXPECT_TRUE(mf.meta.items().empty());
  ASSERT_TRUE(mf.config.is_object());
  EXPECT_EQ(hf_get<int>(mf.config, "hidden_size"), 6);
  EXPECT_EQ(hf_get<int>(mf.config, "vocab_size"), 10);  // text_config wins over the top level
  EXPECT_FALSE(hf_get<bool>(mf.config, "tie_word_embeddings"));  // only at the top level
  EXPECT_EQ(hf_get<std::string>(mf.config, "model_type"), "qwen3_5_text");
  EXPECT_DOUBLE_EQ(hf_get<double>(mf.config, "rms_norm_eps"), 1e-6);
  EXPECT_FALSE(hf_opt<int>(mf.config, "no_such_field").has_value());

  const Tensor& emb = mf.require("model.embed_tokens.weight", {10, 6});
  EXPECT_EQ(emb.dtype(), DType::BF16);
  EXPECT_EQ(emb.name(), "model.embed_tokens.weight");
  for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(bf16_to_fp32(emb.ptr<uint16_t>()[i]), ramp(i));
  const Tensor& head = mf.require("lm_head.weight", {10, 6});
  EXPECT_EQ(head.dtype(), DType::F16);
  for (int64_t i = 0; i < 60; ++i) EXPECT_EQ(fp16_to_fp32(head.ptr<uint16_t>()[i]), ramp(i) * 0.5);
  const Tensor& n1 = mf.get("model.layers.1.input_layernorm.weight");
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(n1.ptr<float>()[i], ramp(i) - 1);

  // Progress: starts at 0, never goes back, ends at total == sum of tensor bytes.
  ASSERT_GE(calls.size(), 2u);
  const size_t total = 60 * 2 + 60 * 2 + 6 * 4 * 2;
  EXPECT_EQ(calls.front(), std::make_pair(size_t{0}, total));
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  for (size_t k = 1; k < calls.size(); ++k) EXPECT_GE(calls[k].first, calls[k - 1].first);

  expect_format_error([&] { mf.get("model.norm.weight"); }, {dir, "'model.norm.weight'", "not found"});
  expect_format_error([&] { mf.require("lm_head.weight", {6, 10}); },
                      {dir, "'lm_head.weight'", "[10, 6]", "[6, 10]"});
}

TEST(ModelFile, TensorsOutliveTheModelFile) {
  Tensor keep;
  {
    ModelFile mf = open_model_file(kDir + "py_hf/model.safetensors.index.json");
    keep = mf.get("model.layers.0.input_layernorm.weight");
  }
  // The mapping lives as long as a view does.
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(keep.ptr<float>()[i], ramp(i) + 1);
}

TEST(ModelFile, SingleFilesAndGguf) {
  ModelFile st = open_model_file(kDir + "py_tensors.safetensors", nullptr, false);
  EXPECT_EQ(st.format, FileFormat::kSafetensors);
  EXPECT_TRUE(st.config.is_null());
  EXPECT_EQ(st.tensors.size(), 6u);
  EXPECT_TRUE(st.has("bf16"));
  EXPECT_FALSE(st.has("nope"));

  ModelFile g = open_model_file(kDir + "py_types.gguf");
  EXPECT_EQ(g.format, FileFormat::kGguf);
  EXPECT_TRUE(g.config.is_null());
  EXPECT_EQ(g.meta.get_string("general.architecture"), "testarch");
  EXPECT_EQ(g.require("q6_k", {3, 256}).dtype(), DType::Q6_K);
}

TEST(ModelFile, OpenErrors) {
  test::ScratchDir dir;
  expect_format_error([&] { open_model_file(dir.file("missing.gguf")); }, {"missing.gguf", "no such file"});
  const std::string empty_dir = dir.file("emptydir");
  std::filesystem::create_directories(empty_dir);
  expect_format_error([&] { open_model_file(empty_dir); }, {empty_dir, "model.safetensors"});
  const std::string txt = dir.file("notes.txt");
  std::ofstream(txt) << "hello, not a model";
  expect_format_error([&] { open_model_file(txt); }, {txt, "bad magic"});
  // A folder whose config.json is broken names config.json.
  const std::string bad_cfg = dir.file("badcfg");
  std::filesystem::create_directories(bad_cfg);
  std::ofstream(bad_cfg + "/config.json") << "{\"hidden_size\": ";
  expect_format_error([&] { open_model_file(bad_cfg); }, {"config.json", "bad JSON"});
}

TEST(HfConfig, LookupAndErrors) {
  test::ScratchDir dir;
  const std::string p = dir.file("config.json");
  std::ofstream(p) << R"({"a": 1, "eps": 1e-6, "name": "x", "text_config": {"a": 2, "n": null}})";
  nlohmann::json cfg = load_hf_config(dir.file(""));  // a folder works too
  EXPECT_EQ(hf_get<int>(cfg, "a", p), 2);
  EXPECT_EQ(hf_get<std::string>(cfg, "name", p), "x");
  expect_format_error([&] { hf_get<int>(cfg, "missing", p); }, {p, "'missing'", "missing"});
  expect_format_error([&] { hf_get<int>(cfg, "n", p); }, {p, "'n'"});
  expect_format_error([&] { hf_get<int>(cfg, "eps", p); }, {p, "'eps'", "integer"});
  expect_format_error([&] { hf_get<int>(cfg, "name", p); }, {p, "'name'"});
  expect_format_error([&] { load_hf_config(dir.file("nope.json")); }, {"nope.json"});
  std::ofstream(dir.file("arr.json")) << "[1]";
  expect_format_error([&] { load_hf_config(dir.file("arr.json")); }, {"arr.json", "not a JSON object"});
}

TEST(ModelFile, SmolLM2Gguf) {
  const std::string path = std::string(VI_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not present";
  size_t last_done = 0, last_total = 0;
  ModelFile mf = open_model_file(path, [&](size_t d, size_t t) {
    last_done = d;
    last_total = t;
  });
  EXPECT_EQ(mf.format, FileFormat::kGguf);
  EXPECT_EQ(mf.tensors.size(), 272u);
  EXPECT_EQ(mf.meta.get_int("llama.block_count"), 30);
  EXPECT_EQ(mf.meta.get_string("general.architecture"), "llama");
  const Tensor& emb = mf.require("token_embd.weight", {49152, 576});
  EXPECT_EQ(emb.dtype(), DType::Q8_0);
  EXPECT_EQ(mf.meta.get_string_array("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(last_done, last_total);
  EXPECT_EQ(last_total, mf.total_bytes());
  EXPECT_GT(last_total, size_t{50} << 20);
}
