// Files written by the official Python writers (llama.cpp's `gguf` package, the
// `safetensors` package; see scripts/make_format_fixtures.py) read back with the values
// the script used, recomputed here from the same formulas.
#include <gtest/gtest.h>

#include <cmath>

#include "core/half.h"
#include "format_test_util.h"
#include "formats/gguf.h"
#include "formats/gguf_writer.h"
#include "formats/safetensors.h"

using namespace vi;
using namespace vi::formats;

namespace {

const std::string kDir = std::string(VI_TEST_DATA_DIR) + "/formats/";

// The script's ramp(): (i % 17) * 0.25 - 2, exact in f16 and bf16.
double ramp(int64_t i) { return static_cast<double>(i % 17) * 0.25 - 2.0; }

float value_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return t.ptr<float>()[i];
    case DType::F16: return fp16_to_fp32(t.ptr<uint16_t>()[i]);
    case DType::BF16: return bf16_to_fp32(t.ptr<uint16_t>()[i]);
    case DType::I32: return static_cast<float>(t.ptr<int32_t>()[i]);
    case DType::I8: return static_cast<float>(t.ptr<int8_t>()[i]);
    default: ADD_FAILURE() << "unexpected dtype"; return NAN;
  }
}

const Tensor& find(const std::vector<Tensor>& ts, const std::string& name) {
  for (const Tensor& t : ts)
    if (t.name() == name) return t;
  throw std::runtime_error("tensor " + name + " not in fixture");
}

}  // namespace

TEST(PythonFixtures, GgufMetadata) {
  GgufFile f = read_gguf(kDir + "py_types.gguf");
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 64u);
  const Metadata& m = f.meta;
  EXPECT_EQ(m.get_string("general.architecture"), "testarch");
  auto typed = [&](const std::string& k, int type) {
    const MetaValue* v = m.find(k);
    EXPECT_NE(v, nullptr) << k;
    if (v) {
      EXPECT_EQ(v->gguf_type, type) << k;
    }
  };
  typed("t.u8", kGgufU8);
  typed("t.i8", kGgufI8);
  typed("t.u16", kGgufU16);
  typed("t.i16", kGgufI16);
  typed("t.u32", kGgufU32);
  typed("t.i32", kGgufI32);
  typed("t.f32", kGgufF32);
  typed("t.u64", kGgufU64);
  typed("t.i64", kGgufI64);
  typed("t.f64", kGgufF64);
  typed("t.bool", kGgufBool);
  typed("t.string", kGgufString);
  typed("t.arr_nested", kGgufArray);
  EXPECT_EQ(m.get_int("t.u8"), 200);
  EXPECT_EQ(m.get_int("t.i8"), -100);
  EXPECT_EQ(m.get_int("t.u16"), 60000);
  EXPECT_EQ(m.get_int("t.i16"), -30000);
  EXPECT_EQ(m.get_int("t.u32"), 4000000000LL);
  EXPECT_EQ(m.get_int("t.i32"), -2000000000LL);
  EXPECT_EQ(m.get_float("t.f32"), 0.15625);
  EXPECT_EQ(static_cast<uint64_t>(m.get_int("t.u64")), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(m.get_int("t.i64"), -(int64_t{1} << 62) - 3);
  EXPECT_EQ(m.get_float("t.f64"), 3.141592653589793);
  EXPECT_TRUE(m.get_bool("t.bool"));
  EXPECT_FALSE(m.get_bool("t.bool_false"));
  EXPECT_EQ(m.get_string("t.string"), "h\xc3\xa9llo \xe2\x98\x83");
  EXPECT_EQ(m.get_string_array("t.arr_str"), (std::vector<std::string>{"a", "", "xyz"}));
  EXPECT_EQ(m.get_int_array("t.arr_i32"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(m.find("t.arr_i32")->i, kGgufI32);
  EXPECT_EQ(m.get_float_array("t.arr_f32"), (std::vector<double>{0.5, -1.25}));
  EXPECT_EQ(m.get_int_array("t.arr_u8"), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(m.find("t.arr_u8")->i, kGgufU8);
  const MetaValue* b = m.find("t.arr_bool");
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->arr.size(), 3u);
  EXPECT_TRUE(b->arr[0].b && !b->arr[1].b && b->arr[2].b);
  const MetaValue* nested = m.find("t.arr_nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->arr.size(), 2u);
  ASSERT_EQ(nested->arr[0].arr.size(), 2u);
  ASSERT_EQ(nested->arr[1].arr.size(), 1u);
  EXPECT_EQ(nested->arr[0].arr[1].i, 2);
  EXPECT_EQ(nested->arr[1].arr[0].i, 3);
}

TEST(PythonFixtures, GgufTensors) {
  GgufFile f = read_gguf(kDir + "py_types.gguf");
  ASSERT_EQ(f.tensors.size(), 13u);
  struct Plain {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Plain& p : {Plain{"f32_2d", DType::F32, {3, 5}}, Plain{"f32_3d", DType::F32, {2, 3, 4}},
                         Plain{"f32_4d", DType::F32, {2, 1, 3, 2}}, Plain{"f16", DType::F16, {2, 7}},
                         Plain{"bf16", DType::BF16, {3, 4}}}) {
    const Tensor& t = find(f.tensors, p.name);
    SCOPED_TRACE(p.name);
    EXPECT_EQ(t.dtype(), p.dtype);
    EXPECT_EQ(t.shape(), p.shape);
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(value_at(t, i), ramp(i)) << "at " << i;
  }
  const Tensor& i32 = find(f.tensors, "i32");
  EXPECT_EQ(i32.dtype(), DType::I32);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(i32.ptr<int32_t>()[i], i * 1000 - 7);
  const Tensor& i8 = find(f.tensors, "i8");
  EXPECT_EQ(i8.shape(), (std::vector<int64_t>{2, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(i8.ptr<int8_t>()[i], i - 3);

  struct Quant {
    const char* name;
    DType dtype;
    uint32_t ggml;
    std::vector<int64_t> shape;
  };
  for (const Quant& q : {Quant{"q8_0", DType::Q8_0, 8, {2, 64}}, Quant{"q4_0", DType::Q4_0, 2, {3, 32}},
                         Quant{"q4_1", DType::Q4_1, 3, {1, 96}}, Quant{"q4_k", DType::Q4_K, 12, {2, 256}},
                         Quant{"q5_k", DType::Q5_K, 13, {1, 512}}, Quant{"q6_k", DType::Q6_K, 14, {3, 256}}}) {
    const Tensor& t = find(f.tensors, q.name);
    SCOPED_TRACE(q.name);
    EXPECT_EQ(t.dtype(), q.dtype);
    EXPECT_EQ(t.shape(), q.shape);
    for (size_t k = 0; k < t.nbytes(); ++k)
      ASSERT_EQ(t.ptr<uint8_t>()[k], static_cast<uint8_t>((k * 37 + 11 + q.ggml) & 255)) << "byte " << k;
  }
  for (const Tensor& t : f.tensors) EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data()) % 64, 0u) << t.name();
}

TEST(PythonFixtures, GgufRewriteIsByteIdentical) {
  // Our writer, fed what our reader read, reproduces the Python writer's file exactly:
  // same header encoding, tensor offsets and padding.
  test::ScratchDir dir;
  const std::string src = kDir + "py_types.gguf";
  GgufFile f = read_gguf(src);
  const std::string out = dir.file("rewrite.gguf");
  {
    GgufWriter w(out);
    for (const std::string& k : f.key_order) w.set(k, *f.meta.find(k));
    for (const Tensor& t : f.tensors) w.add_tensor_info(t);
    w.write_header();
    for (const Tensor& t : f.tensors) w.write_tensor(t);
    w.finish();
  }
  std::ifstream a(src, std::ios::binary), b(out, std::ios::binary);
  std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
  ASSERT_EQ(sa.size(), sb.size());
  EXPECT_TRUE(sa == sb);
}

TEST(PythonFixtures, Safetensors) {
  SafetensorsFile f = read_safetensors(kDir + "py_tensors.safetensors");
  EXPECT_EQ(f.metadata.at("format"), "pt");
  EXPECT_EQ(f.metadata.at("note"), "fixture");
  ASSERT_EQ(f.tensors.size(), 6u);
  struct Plain {
    const char* name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  for (const Plain& p : {Plain{"f32", DType::F32, {4, 5}}, Plain{"f16", DType::F16, {3, 3}},
                         Plain{"bf16", DType::BF16, {2, 6}}}) {
    const Tensor& t = find(f.tensors, p.name);
    SCOPED_TRACE(p.name);
    EXPECT_EQ(t.dtype(), p.dtype);
    EXPECT_EQ(t.shape(), p.shape);
    for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(value_at(t, i), ramp(i)) << "at " << i;
  }
  const Tensor& i32 = find(f.tensors, "i32");
  EXPECT_EQ(i32.shape(), (std::vector<int64_t>{7}));
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(i32.ptr<int32_t>()[i], i * 3 - 5);
  const Tensor& i8 = find(f.tensors, "i8");
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(i8.ptr<int8_t>()[i], i - 1);
  const Tensor& s = find(f.tensors, "scalar");
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.ptr<float>()[0], 2.5f);
}
