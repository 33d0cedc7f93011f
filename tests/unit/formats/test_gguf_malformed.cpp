// Malformed GGUF files, built byte by byte here (not with our writer): each must throw
// vi::FormatError naming the file and, where relevant, the tensor. Also: every prefix
// of a valid file and random byte mutations must fail cleanly, never crash.
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <random>

#include "format_test_util.h"
#include "formats/gguf.h"

using namespace vi;
using namespace vi::formats;
using vi::test::Bytes;
using vi::test::expect_format_error;

namespace {

struct TI {
  std::string name;
  std::vector<uint64_t> ne;  // ggml order (innermost first)
  uint32_t type;
  uint64_t offset;
};

// A GGUF v3 file: one u32 KV "a.b" = 7, the given tensor infos, data section of `data_bytes`.
struct Spec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::vector<TI> tensors = {{"w", {64, 3}, 0, 0}};
  size_t data_bytes = 64 * 3 * 4;
  std::function<void(Bytes&)> extra_kv;  // appends more KV pairs (counted by n_extra_kv)
  uint64_t n_extra_kv = 0;
  std::optional<uint64_t> n_tensors, n_kv;  // overrides of the counts
  uint32_t alignment = 32;
};

std::vector<uint8_t> build(const Spec& s) {
  Bytes b;
  b.put<uint32_t>(s.magic).put<uint32_t>(s.version);
  b.put<uint64_t>(s.n_tensors.value_or(s.tensors.size()));
  b.put<uint64_t>(s.n_kv.value_or(1 + s.n_extra_kv));
  b.str("a.b").put<uint32_t>(kGgufU32).put<uint32_t>(7);
  if (s.extra_kv) s.extra_kv(b);
  for (const TI& t : s.tensors) {
    b.str(t.name).put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.put<uint64_t>(d);
    b.put<uint32_t>(t.type).put<uint64_t>(t.offset);
  }
  b.pad_to(s.alignment);
  b.zeros(s.data_bytes);
  return b.b;
}

class GgufMalformed : public ::testing::Test {
 protected:
  // Writes the bytes and expects a FormatError naming the file plus `parts`.
  void expect_bad(const std::vector<uint8_t>& bytes, std::vector<std::string> parts) {
    const std::string path = dir_.file("bad.gguf");
    test::write_bytes(path, bytes);
    parts.push_back(path);
    expect_format_error([&] { read_gguf(path); }, parts);
    // The in-memory parser (used by the fuzzer) must agree.
    ByteSource src{bytes.data(), bytes.size(), nullptr, "mem"};
    expect_format_error([&] { parse_gguf(src); }, {"mem"});
  }
  test::ScratchDir dir_;
};

}  // namespace

TEST_F(GgufMalformed, ValidBaselineParses) {
  auto bytes = build(Spec{});
  ByteSource src{bytes.data(), bytes.size(), nullptr, "mem"};
  GgufFile f = parse_gguf(src);
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].shape(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(f.meta.get_int("a.b"), 7);
}

TEST_F(GgufMalformed, HeaderErrors) {
  expect_bad({}, {"truncated"});
  expect_bad({'G', 'G'}, {"truncated"});
  Spec s;
  s.magic = 0x12345678;
  expect_bad(build(s), {"bad magic"});
  s = {};
  s.version = 1;
  expect_bad(build(s), {"unsupported GGUF version 1"});
  s.version = 4;
  expect_bad(build(s), {"unsupported GGUF version 4"});
  s.version = 0x03000000;
  expect_bad(build(s), {"big-endian"});
  auto full = build(Spec{});
  expect_bad(std::vector<uint8_t>(full.begin(), full.begin() + 12), {"truncated", "tensor count"});
}

TEST_F(GgufMalformed, AbsurdCounts) {
  Spec s;
  s.n_kv = uint64_t{1} << 60;
  expect_bad(build(s), {"metadata count"});
  s = {};
  s.n_tensors = uint64_t{1} << 60;
  expect_bad(build(s), {"tensor count"});
  s = {};
  s.n_extra_kv = 1;
  s.extra_kv = [](Bytes& b) { b.str("arr").put<uint32_t>(kGgufArray).put<uint32_t>(kGgufU64).put<uint64_t>(uint64_t{1} << 58); };
  expect_bad(build(s), {"arr", "past the end"});
  s.extra_kv = [](Bytes& b) { b.str("arr").put<uint32_t>(kGgufArray).put<uint32_t>(kGgufString).put<uint64_t>(1000000); };
  expect_bad(build(s), {"arr", "past the end"});
}

TEST_F(GgufMalformed, MetadataErrors) {
  Spec s;
  s.n_extra_kv = 1;
  s.extra_kv = [](Bytes& b) { b.str("s").put<uint32_t>(kGgufString).put<uint64_t>(uint64_t{1} << 40).raw("abc"); };
  expect_bad(build(s), {"string length", "past the end"});
  s.extra_kv = [](Bytes& b) { b.put<uint64_t>(~uint64_t{0}); };  // key length
  expect_bad(build(s), {"string length"});
  s.extra_kv = [](Bytes& b) { b.str("k").put<uint32_t>(13).put<uint32_t>(0); };
  expect_bad(build(s), {"'k'", "unknown value type 13"});
  s.extra_kv = [](Bytes& b) { b.str("k").put<uint32_t>(kGgufArray).put<uint32_t>(77).put<uint64_t>(1); };
  expect_bad(build(s), {"'k'", "unknown array element type 77"});
  s.extra_kv = [](Bytes& b) { b.str("a.b").put<uint32_t>(kGgufU8).put<uint8_t>(1); };
  expect_bad(build(s), {"duplicate metadata key 'a.b'"});
  s.extra_kv = [](Bytes& b) { b.str("general.alignment").put<uint32_t>(kGgufU32).put<uint32_t>(48); };
  expect_bad(build(s), {"general.alignment"});
  s.extra_kv = [](Bytes& b) { b.str("general.alignment").put<uint32_t>(kGgufString).str("32"); };
  expect_bad(build(s), {"general.alignment"});
  s.extra_kv = [](Bytes& b) {  // arrays nested 20 deep
    b.str("deep").put<uint32_t>(kGgufArray);
    for (int d = 0; d < 20; ++d) b.put<uint32_t>(kGgufArray).put<uint64_t>(1);
    b.put<uint32_t>(kGgufU8).put<uint64_t>(0);
  };
  expect_bad(build(s), {"'deep'", "nested"});
}

TEST_F(GgufMalformed, TensorInfoErrors) {
  auto with = [](TI t, size_t data = 4096) {
    Spec s;
    s.tensors = {std::move(t)};
    s.data_bytes = data;
    return build(s);
  };
  expect_bad(with({"t.unk", {32}, 99, 0}), {"'t.unk'", "unsupported tensor type unknown (99)"});
  expect_bad(with({"t.q51", {32}, 7, 0}), {"'t.q51'", "q5_1"});
  expect_bad(with({"t.dims", {1, 1, 1, 1, 1}, 0, 0}), {"'t.dims'", "5 dimensions"});
  expect_bad(with({"t.zero", {4, 0}, 0, 0}), {"'t.zero'", "invalid size 0"});
  expect_bad(with({"t.huge", {uint64_t{1} << 63}, 0, 0}), {"'t.huge'", "invalid size"});
  expect_bad(with({"t.ovf", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0}), {"'t.ovf'", "overflows"});
  expect_bad(with({"t.big", {uint64_t{1} << 40}, 0, 0}), {"'t.big'", "larger than the file"});
  expect_bad(with({"t.blk", {33, 2}, 8, 0}), {"'t.blk'", "not a multiple", "q8_0"});
  expect_bad(with({"t.k", {128}, 12, 0}), {"'t.k'", "not a multiple", "q4_k"});
  expect_bad(with({"t.mis", {8}, 0, 16}), {"'t.mis'", "alignment"});
  expect_bad(with({"t.past", {8}, 0, 1 << 20}), {"'t.past'", "past the end"});
  expect_bad(with({"t.end", {64}, 0, 4096 - 128}), {"'t.end'", "past the end"});  // overlaps the end
  expect_bad(with({"t.wrap", {8}, 0, ~uint64_t{0} - 31}), {"'t.wrap'"});

  Spec s;
  s.tensors = {{"dup", {8}, 0, 0}, {"dup", {8}, 0, 32}};
  expect_bad(build(s), {"'dup'", "duplicate tensor name"});
  s.tensors = {{"first", {64}, 0, 0}, {"second", {8}, 0, 128}};  // first spans [0, 256)
  expect_bad(build(s), {"'second'", "overlaps", "'first'"});
}

TEST_F(GgufMalformed, EveryPrefixFailsCleanly) {
  Spec s;
  s.n_extra_kv = 2;
  s.extra_kv = [](Bytes& b) {
    b.str("names").put<uint32_t>(kGgufArray).put<uint32_t>(kGgufString).put<uint64_t>(2).str("ab").str("c");
    b.str("f").put<uint32_t>(kGgufF64).put<double>(1.5);
  };
  s.tensors = {{"x", {32, 2}, 8, 0}, {"y", {4}, 0, 96}};
  s.data_bytes = 96 + 16;
  auto full = build(s);
  ByteSource whole{full.data(), full.size(), nullptr, "mem"};
  ASSERT_EQ(parse_gguf(whole).tensors.size(), 2u);
  for (size_t n = 0; n < full.size(); ++n) {
    ByteSource src{full.data(), n, nullptr, "mem"};
    EXPECT_THROW(parse_gguf(src), vi::FormatError) << "prefix of " << n << " bytes";
  }
}

TEST_F(GgufMalformed, RandomMutationsNeverCrash) {
  Spec s;
  s.n_extra_kv = 1;
  s.extra_kv = [](Bytes& b) {
    b.str("arr").put<uint32_t>(kGgufArray).put<uint32_t>(kGgufArray).put<uint64_t>(1).put<uint32_t>(kGgufI16).put<uint64_t>(2).put<int16_t>(1).put<int16_t>(2);
  };
  s.tensors = {{"x", {32, 2}, 8, 0}, {"y", {4}, 0, 96}};
  s.data_bytes = 96 + 16;
  const auto full = build(s);
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  int ok = 0;
  for (int it = 0; it < 5000; ++it) {
    auto b = full;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<uint8_t>(rng());
    ByteSource src{b.data(), b.size(), nullptr, "mem"};
    try {
      GgufFile f = parse_gguf(src);
      // Whatever parsed must lie inside the buffer.
      for (const Tensor& t : f.tensors) {
        const auto* p = static_cast<const uint8_t*>(t.data());
        ASSERT_GE(p, b.data());
        ASSERT_LE(p + t.nbytes(), b.data() + b.size());
      }
      ++ok;
    } catch (const vi::FormatError&) {
    }
  }
  EXPECT_GT(ok, 0);  // some mutations only touch tensor data, which is never validated
}
