// GGUF writer -> reader round trips: every metadata value type (incl. nested and empty
// arrays, u64 above INT64_MAX), every tensor dtype with random bytes and odd shapes,
// chunked streaming writes, and writer misuse errors.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "format_test_util.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"

using namespace vi;
using namespace vi::formats;

namespace {

MetaValue arr(std::vector<MetaValue> v, int elem_type = -1) {
  MetaValue m;
  m.kind = MetaValue::Kind::kArray;
  m.arr = std::move(v);
  if (elem_type >= 0) {
    m.gguf_type = kGgufArray;
    m.i = elem_type;
  }
  return m;
}

MetaValue typed_bool(bool b) {
  MetaValue m = Metadata::make_bool(b);
  m.gguf_type = kGgufBool;
  return m;
}

// Compares a value read back with the value written; `type` is the GGUF type expected.
void expect_same(const MetaValue& got, const MetaValue& want, int type, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.gguf_type, type);
  switch (want.kind) {
    case MetaValue::Kind::kInt: EXPECT_EQ(got.i, want.i); break;
    case MetaValue::Kind::kFloat:
      if (type == kGgufF32) EXPECT_EQ(got.f, static_cast<double>(static_cast<float>(want.f)));
      else EXPECT_EQ(got.f, want.f);
      break;
    case MetaValue::Kind::kBool: EXPECT_EQ(got.b, want.b); break;
    case MetaValue::Kind::kString: EXPECT_EQ(got.s, want.s); break;
    case MetaValue::Kind::kArray:
      ASSERT_EQ(got.arr.size(), want.arr.size());
      for (size_t k = 0; k < want.arr.size(); ++k) {
        int et = static_cast<int>(got.i);  // element type the reader saw
        expect_same(got.arr[k], want.arr[k], et, key + "[" + std::to_string(k) + "]");
      }
      break;
  }
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& x : v) x = static_cast<uint8_t>(rng());
  return v;
}

}  // namespace

TEST(GgufRoundTrip, EveryMetadataType) {
  test::ScratchDir dir;
  struct Case {
    std::string key;
    MetaValue v;
    int type;  // GGUF type the file must hold
  };
  const std::string big_string(1000, 'x');
  std::vector<Case> cases = {
      {"u8", Metadata::make_int(255, kGgufU8), kGgufU8},
      {"i8", Metadata::make_int(-128, kGgufI8), kGgufI8},
      {"u16", Metadata::make_int(65535, kGgufU16), kGgufU16},
      {"i16", Metadata::make_int(-32768, kGgufI16), kGgufI16},
      {"u32", Metadata::make_int(4294967295LL, kGgufU32), kGgufU32},
      {"i32", Metadata::make_int(-2147483648LL, kGgufI32), kGgufI32},
      {"u64", Metadata::make_int(static_cast<int64_t>(0x8000000000000005ULL), kGgufU64), kGgufU64},
      {"i64", Metadata::make_int(INT64_MIN + 1, kGgufI64), kGgufI64},
      {"f32", Metadata::make_float(1.0 / 3.0, kGgufF32), kGgufF32},
      {"f64", Metadata::make_float(1.0 / 3.0, kGgufF64), kGgufF64},
      {"bool_t", typed_bool(true), kGgufBool},
      {"bool_f", Metadata::make_bool(false), kGgufBool},
      {"str", Metadata::make_string("h\xc3\xa9llo"), kGgufString},
      {"str_empty", Metadata::make_string(""), kGgufString},
      {"str_big", Metadata::make_string(big_string), kGgufString},
      // Untyped values get the documented defaults.
      {"int_default", Metadata::make_int(-7), kGgufI32},
      {"int_wide", Metadata::make_int(int64_t{1} << 40), kGgufI64},
      {"float_default", Metadata::make_float(0.1), kGgufF32},
      {"arr_str", arr({Metadata::make_string("a"), Metadata::make_string(""), Metadata::make_string("zz")}),
       kGgufArray},
      {"arr_u8", arr({Metadata::make_int(1, kGgufU8), Metadata::make_int(250, kGgufU8)}), kGgufArray},
      {"arr_f64", arr({Metadata::make_float(1e300, kGgufF64), Metadata::make_float(-2.5, kGgufF64)}),
       kGgufArray},
      {"arr_widen", arr({Metadata::make_int(1), Metadata::make_int(int64_t{1} << 40)}), kGgufArray},
      {"arr_bool", arr({typed_bool(true), typed_bool(false)}), kGgufArray},
      {"arr_empty_u16", arr({}, kGgufU16), kGgufArray},
      {"arr_nested", arr({arr({Metadata::make_int(1, kGgufI16)}), arr({}, kGgufI16),
                          arr({Metadata::make_int(-3, kGgufI16), Metadata::make_int(4, kGgufI16)})}),
       kGgufArray},
  };
  const std::string path = dir.file("types.gguf");
  {
    GgufWriter w(path);
    for (const Case& c : cases) w.set(c.key, c.v);
    w.finish();
  }
  GgufFile f = read_gguf(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_TRUE(f.tensors.empty());
  ASSERT_EQ(f.key_order.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    EXPECT_EQ(f.key_order[k], cases[k].key);  // writer keeps insertion order
    const MetaValue* v = f.meta.find(cases[k].key);
    ASSERT_NE(v, nullptr) << cases[k].key;
    expect_same(*v, cases[k].v, cases[k].type, cases[k].key);
  }
  // Element types that the writer had to choose.
  EXPECT_EQ(f.meta.find("arr_str")->i, kGgufString);
  EXPECT_EQ(f.meta.find("arr_widen")->i, kGgufI64);
  EXPECT_EQ(f.meta.find("arr_empty_u16")->i, kGgufU16);
  EXPECT_EQ(f.meta.find("arr_nested")->i, kGgufArray);
  EXPECT_EQ(f.meta.get_string_array("arr_str"), (std::vector<std::string>{"a", "", "zz"}));

  // Reading then rewriting the metadata gives the same file bytes (exact type round trip).
  const std::string path2 = dir.file("types2.gguf");
  {
    GgufWriter w(path2);
    for (const std::string& k : f.key_order) w.set(k, *f.meta.find(k));
    w.finish();
  }
  std::ifstream a(path, std::ios::binary), b(path2, std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  EXPECT_EQ(sa, sb);
}

TEST(GgufRoundTrip, EveryTensorTypeRandomBytes) {
  test::ScratchDir dir;
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const std::vector<DType> types = {DType::F32,  DType::F16,  DType::BF16, DType::I32,  DType::I8,
                                    DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q5_K,
                                    DType::Q6_K};
  struct Want {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Want> want;
  std::uniform_int_distribution<int> odd(1, 4);
  for (DType t : types) {
    const int64_t be = dtype_info(t).block_elems;
    // Odd sizes of every rank 1..4; the innermost dimension a whole number of blocks.
    for (int rank = 1; rank <= 4; ++rank) {
      std::vector<int64_t> shape;
      for (int d = 0; d < rank - 1; ++d) shape.push_back(2 * odd(rng) + 1);
      shape.push_back(be == 1 ? 2 * odd(rng) + 1 : be * odd(rng));
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      size_t nbytes = static_cast<size_t>(n / be) * dtype_info(t).block_bytes;
      want.push_back({std::string(dtype_name(t)) + ".r" + std::to_string(rank), t, shape,
                      random_bytes(rng, nbytes)});
    }
  }
  const std::string path = dir.file("tensors.gguf");
  {
    GgufWriter w(path);
    w.set("general.architecture", Metadata::make_string("test"));
    for (const Want& x : want) w.add_tensor_info(x.name, x.dtype, x.shape);
    w.write_header();
    for (const Want& x : want) {
      Tensor t = Tensor::view(x.dtype, x.shape, const_cast<uint8_t*>(x.bytes.data()), nullptr);
      t.set_name(x.name);
      w.write_tensor(t);
    }
    w.finish();
  }
  GgufFile f = read_gguf(path);
  ASSERT_EQ(f.tensors.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    const Tensor& t = f.tensors[k];
    SCOPED_TRACE(want[k].name);
    EXPECT_EQ(t.name(), want[k].name);
    EXPECT_EQ(t.dtype(), want[k].dtype);
    EXPECT_EQ(t.shape(), want[k].shape);
    ASSERT_EQ(t.nbytes(), want[k].bytes.size());
    EXPECT_EQ(std::memcmp(t.data(), want[k].bytes.data(), t.nbytes()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 32, 0u) << "data not 32-byte aligned";
    EXPECT_NE(t.owner(), nullptr);  // keeps the mapping alive
  }
}

TEST(GgufRoundTrip, StreamedChunksAndCustomAlignment) {
  test::ScratchDir dir;
  std::mt19937 rng(std::random_device{}());
  const std::vector<int64_t> s1 = {7, 96}, s2 = {3, 256}, s3 = {5};
  auto b1 = random_bytes(rng, dtype_row_bytes(DType::Q4_1, 96) * 7);
  auto b2 = random_bytes(rng, dtype_row_bytes(DType::Q6_K, 256) * 3);
  auto b3 = random_bytes(rng, 5 * 4);
  const std::string path = dir.file("stream.gguf");
  {
    GgufWriter w(path);
    w.set("general.alignment", Metadata::make_int(128, kGgufU32));
    w.add_tensor_info("a", DType::Q4_1, s1);
    w.add_tensor_info("b", DType::Q6_K, s2);
    w.add_tensor_info("c", DType::F32, s3);
    w.write_header();
    // Chunks that straddle tensor boundaries, in odd sizes.
    std::vector<uint8_t> all = b1;
    all.insert(all.end(), b2.begin(), b2.end());
    all.insert(all.end(), b3.begin(), b3.end());
    for (size_t off = 0; off < all.size(); off += 37) w.write_tensor_data(all.data() + off, std::min<size_t>(37, all.size() - off));
    w.finish();
  }
  GgufFile f = read_gguf(path);
  EXPECT_EQ(f.alignment, 128u);
  ASSERT_EQ(f.tensors.size(), 3u);
  EXPECT_EQ(std::memcmp(f.tensors[0].data(), b1.data(), b1.size()), 0);
  EXPECT_EQ(std::memcmp(f.tensors[1].data(), b2.data(), b2.size()), 0);
  EXPECT_EQ(std::memcmp(f.tensors[2].data(), b3.data(), b3.size()), 0);
  for (const Tensor& t : f.tensors) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 128, 0u);
}

TEST(GgufRoundTrip, WriterMisuseThrows) {
  test::ScratchDir dir;
  std::vector<uint8_t> bytes(64 * 4);
  Tensor a = Tensor::view(DType::F32, {64}, bytes.data(), nullptr);
  a.set_name("a");
  Tensor b = a;
  b.set_name("b");
  {
    GgufWriter w(dir.file("order.gguf"));
    w.add_tensor_info(a);
    w.add_tensor_info(b);
    w.write_header();
    EXPECT_THROW(w.write_tensor(b), vi::Error);  // out of order
    w.write_tensor(a);
    EXPECT_THROW(w.finish(), vi::Error);  // b never written
  }
  {
    GgufWriter w(dir.file("dup.gguf"));
    w.add_tensor_info(a);
    EXPECT_THROW(w.add_tensor_info(a), vi::Error);
    EXPECT_THROW(w.add_tensor_info("q", DType::Q8_0, {3, 33}), vi::Error);  // rows not whole blocks
  }
  {
    GgufWriter w(dir.file("too_much.gguf"));
    w.add_tensor_info(a);
    w.write_header();
    w.write_tensor(a);
    EXPECT_THROW(w.write_tensor_data(bytes.data(), 1), vi::Error);
  }
  EXPECT_THROW(GgufWriter(dir.file("x.gguf"), 48), vi::Error);
  MetaValue bad = Metadata::make_string("s");
  bad.gguf_type = kGgufU32;
  GgufWriter w(dir.file("badtype.gguf"));
  EXPECT_THROW(w.set("k", bad), vi::Error);
  // Values outside their declared type are refused, never truncated.
  EXPECT_THROW(w.set("u8", Metadata::make_int(256, kGgufU8)), vi::Error);
  EXPECT_THROW(w.set("i16", Metadata::make_int(-40000, kGgufI16)), vi::Error);
  EXPECT_THROW(w.set("u32", Metadata::make_int(-1, kGgufU32)), vi::Error);
  EXPECT_THROW(w.set("f32", Metadata::make_float(1e300, kGgufF32)), vi::Error);
  EXPECT_THROW(w.set("arr", arr({Metadata::make_int(1, kGgufU8), Metadata::make_int(999, kGgufU8)})), vi::Error);
}

TEST(GgufRoundTrip, UntypedHugeFloatBecomesF64) {
  test::ScratchDir dir;
  const std::string path = dir.file("f64.gguf");
  GgufWriter w(path);
  w.set("big", Metadata::make_float(1e300));
  w.set("inf", Metadata::make_float(INFINITY));
  w.finish();
  GgufFile f = read_gguf(path);
  EXPECT_EQ(f.meta.find("big")->gguf_type, kGgufF64);
  EXPECT_EQ(f.meta.get_float("big"), 1e300);
  EXPECT_EQ(f.meta.find("inf")->gguf_type, kGgufF32);
  EXPECT_TRUE(std::isinf(f.meta.get_float("inf")));
}
