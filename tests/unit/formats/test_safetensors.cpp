// safetensors: writer -> reader round trips with random data, sharded folders, and
// malformed headers built by hand (each must throw FormatError naming file and tensor).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "format_test_util.h"
#include "formats/safetensors.h"

using namespace vi;
using namespace vi::formats;
using vi::test::expect_format_error;

namespace {

std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes) {
  test::Bytes b;
  b.put<uint64_t>(header.size()).raw(header).zeros(data_bytes);
  return b.b;
}

class SafetensorsMalformed : public ::testing::Test {
 protected:
  void expect_bad(const std::vector<uint8_t>& bytes, std::vector<std::string> parts) {
    const std::string path = dir_.file("bad.safetensors");
    test::write_bytes(path, bytes);
    parts.push_back(path);
    expect_format_error([&] { read_safetensors(path); }, parts);
  }
  void expect_bad(const std::string& header, size_t data, std::vector<std::string> parts) {
    expect_bad(st_bytes(header, data), std::move(parts));
  }
  test::ScratchDir dir_;
};

}  // namespace

TEST(Safetensors, RoundTripRandom) {
  test::ScratchDir dir;
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<Tensor> ts;
  const std::vector<std::pair<DType, std::vector<int64_t>>> specs = {
      {DType::F16, {3}},  // 6 bytes: the next f32 tensor would be misaligned without care
      {DType::F32, {5, 7}}, {DType::BF16, {3, 1, 9}}, {DType::I32, {11}},
      {DType::I8, {2, 3, 5, 1}}, {DType::F32, {}}, {DType::F16, {0, 4}}};
  for (size_t k = 0; k < specs.size(); ++k) {
    Tensor t = Tensor::empty(specs[k].first, specs[k].second);
    for (size_t i = 0; i < t.nbytes(); ++i) t.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng());
    t.set_name("t" + std::to_string(k));
    ts.push_back(t);
  }
  const std::string path = dir.file("rt.safetensors");
  SafetensorsWriter::write_file(path, ts, {{"format", "pt"}});
  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata.at("format"), "pt");
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (size_t k = 0; k < ts.size(); ++k) {
    SCOPED_TRACE(ts[k].name());
    const Tensor& t = f.tensors[k];  // written back to back, so file order == write order
    EXPECT_EQ(t.name(), ts[k].name());
    EXPECT_EQ(t.dtype(), ts[k].dtype());
    EXPECT_EQ(t.shape(), ts[k].shape());
    ASSERT_EQ(t.nbytes(), ts[k].nbytes());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(t.data(), ts[k].data(), t.nbytes()), 0);
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % dtype_info(t.dtype()).block_bytes, 0u);
  }
  // The header is 8-byte padded like the official writer's.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, ChunkedWriter) {
  test::ScratchDir dir;
  std::mt19937 rng(std::random_device{}());
  std::vector<uint8_t> all(4 * 10 * 3 + 2 * 17);
  for (auto& x : all) x = static_cast<uint8_t>(rng());
  const std::string path = dir.file("chunks.safetensors");
  SafetensorsWriter w(path);
  w.add_tensor_info("a", DType::F32, {10, 3});
  w.add_tensor_info("b", DType::BF16, {17});
  w.write_header();
  for (size_t off = 0; off < all.size(); off += 13) w.write_tensor_data(all.data() + off, std::min<size_t>(13, all.size() - off));
  w.finish();
  SafetensorsFile f = read_safetensors(path);
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(std::memcmp(f.tensors[0].data(), all.data(), 120), 0);
  EXPECT_EQ(std::memcmp(f.tensors[1].data(), all.data() + 120, 34), 0);
}

TEST_F(SafetensorsMalformed, HeaderErrors) {
  expect_bad(std::vector<uint8_t>{1, 2, 3}, {"too short"});
  test::Bytes b;
  b.put<uint64_t>(1000).raw("{}");
  expect_bad(b.b, {"header length 1000", "past the end"});
  test::Bytes c;
  c.put<uint64_t>(~uint64_t{0}).raw("{}");
  expect_bad(c.b, {"header length", "past the end"});
  expect_bad(R"({"a": )", 0, {"bad JSON"});
  expect_bad("[1, 2]", 0, {"not a JSON object"});
  expect_bad(std::string(200, '[') + std::string(200, ']'), 0, {"nested deeper"});
}

TEST_F(SafetensorsMalformed, TensorErrors) {
  expect_bad(R"({"w": 3})", 0, {"'w'", "not a JSON object"});
  expect_bad(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 8, {"'w'", "dtype"});
  expect_bad(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 8, {"'w'", "shape"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [2]}})", 8, {"'w'", "data_offsets"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8, {"'w'", "data_offsets"});
  expect_bad(R"({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}})", 2,
             {"'w'", "unsupported dtype 'F8_E4M3'"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [25], "data_offsets": [0, 100]}})", 8, {"'w'", "out of range"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8, {"'w'", "out of range"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 8, {"'w'", "need 8"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, {"'w'", "shape entry"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 8]}})", 8, {"'w'", "shape entry"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0.0, 8]}})", 8, {"'w'", "data_offsets"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [1,1,1,1,2], "data_offsets": [0, 8]}})", 8, {"'w'", "rank 5"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 8]}})", 8,
             {"'w'", "too large"});
  expect_bad(R"({"w": {"dtype": "F32", "shape": [9223372036854775808], "data_offsets": [0, 8]}})", 8,
             {"'w'", "too large"});
  expect_bad(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, {"'b'", "overlaps", "'a'"});
}

TEST_F(SafetensorsMalformed, OddButValid) {
  // Free-form __metadata__ is ignored, tensors may leave gaps, a misaligned f32 is copied.
  const std::string h = R"({"__metadata__": {"format": "pt", "n": 3, "o": {"x": 1}},
     "w": {"dtype": "F32", "shape": [2], "data_offsets": [1, 9]}})";
  auto bytes = st_bytes(h, 16);
  for (int k = 0; k < 8; ++k) bytes[8 + h.size() + 1 + k] = static_cast<uint8_t>(k + 1);
  const std::string path = dir_.file("odd.safetensors");
  test::write_bytes(path, bytes);
  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata.size(), 1u);
  ASSERT_EQ(f.tensors.size(), 1u);
  const Tensor& t = f.tensors[0];
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 4, 0u);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(t.ptr<uint8_t>()[k], k + 1);
}

TEST_F(SafetensorsMalformed, PrefixesAndMutationsFailCleanly) {
  std::vector<Tensor> ts;
  for (int k = 0; k < 3; ++k) {
    Tensor t = Tensor::empty(k == 1 ? DType::BF16 : DType::F32, {2, 3});
    std::memset(t.data(), 0x3c, t.nbytes());
    t.set_name("t" + std::to_string(k));
    ts.push_back(t);
  }
  const std::string path = dir_.file("ok.safetensors");
  SafetensorsWriter::write_file(path, ts);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> full((std::istreambuf_iterator<char>(in)), {});
  for (size_t n = 0; n < full.size(); ++n) {
    ByteSource src{full.data(), n, nullptr, "mem"};
    EXPECT_THROW(parse_safetensors(src), vi::FormatError) << "prefix of " << n << " bytes";
  }
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  for (int it = 0; it < 3000; ++it) {
    auto b = full;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng() % 128);
    ByteSource src{b.data(), b.size(), nullptr, "mem"};
    try {
      SafetensorsFile f = parse_safetensors(src);
      for (const Tensor& t : f.tensors) {
        if (t.owner()) continue;  // a copied (misaligned) tensor owns its memory
        const auto* p = static_cast<const uint8_t*>(t.data());
        ASSERT_GE(p, b.data());
        ASSERT_LE(p + t.nbytes(), b.data() + b.size());
      }
    } catch (const vi::FormatError&) {
    }
  }
}

TEST(SafetensorsSharded, WrittenIndexReadsBack) {
  test::ScratchDir dir;
  std::mt19937 rng(std::random_device{}());
  std::map<std::string, std::string> weight_map;
  std::vector<Tensor> all;
  uint64_t total = 0;
  for (int shard = 0; shard < 3; ++shard) {
    std::vector<Tensor> ts;
    for (int k = 0; k < 2; ++k) {
      Tensor t = Tensor::empty(DType::BF16, {3 + shard, 5 + k});
      for (size_t i = 0; i < t.nbytes(); ++i) t.ptr<uint8_t>()[i] = static_cast<uint8_t>(rng());
      t.set_name("s" + std::to_string(shard) + ".t" + std::to_string(k));
      ts.push_back(t);
      all.push_back(t);
      total += t.nbytes();
    }
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00003.safetensors";
    SafetensorsWriter::write_file(dir.file(file), ts);
    for (const Tensor& t : ts) weight_map[t.name()] = file;
  }
  write_safetensors_index(dir.file("model.safetensors.index.json"), weight_map, total);
  SafetensorsFile f = read_safetensors_index(dir.file("model.safetensors.index.json"));
  EXPECT_EQ(f.paths.size(), 3u);
  ASSERT_EQ(f.tensors.size(), all.size());
  for (const Tensor& want : all) {
    auto it = std::find_if(f.tensors.begin(), f.tensors.end(), [&](const Tensor& t) { return t.name() == want.name(); });
    ASSERT_NE(it, f.tensors.end()) << want.name();
    EXPECT_EQ(it->shape(), want.shape());
    EXPECT_EQ(std::memcmp(it->data(), want.data(), want.nbytes()), 0) << want.name();
  }
}

TEST(SafetensorsSharded, IndexErrors) {
  test::ScratchDir dir;
  Tensor a = Tensor::empty(DType::F32, {3});
  std::memset(a.data(), 0, a.nbytes());
  a.set_name("a");
  Tensor b = a;
  b.set_name("b");
  SafetensorsWriter::write_file(dir.file("s1.safetensors"), {a});
  SafetensorsWriter::write_file(dir.file("s2.safetensors"), {a, b});
  auto index = [&](const std::string& text) {
    const std::string p = dir.file("model.safetensors.index.json");
    std::ofstream(p) << text;
    return p;
  };
  std::string p = index(R"({"metadata": {}})");
  expect_format_error([&] { read_safetensors_index(p); }, {p, "weight_map"});
  p = index(R"({"weight_map": {"a": "s1.safetensors", "zz": "s1.safetensors"}})");
  expect_format_error([&] { read_safetensors_index(p); }, {"s1.safetensors", "'zz'", "missing"});
  p = index(R"({"weight_map": {"a": "nope.safetensors"}})");
  expect_format_error([&] { read_safetensors_index(p); }, {"nope.safetensors", "cannot open"});
  p = index(R"({"weight_map": {"a": "../s1.safetensors"}})");
  expect_format_error([&] { read_safetensors_index(p); }, {"'a'", "plain file name"});
  p = index(R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
  expect_format_error([&] { read_safetensors_index(p); }, {"'a'", "more than one shard"});
  p = index(R"({"weight_map": {"a": "s1.safetensors", "b": )");
  expect_format_error([&] { read_safetensors_index(p); }, {p, "bad JSON"});
}
