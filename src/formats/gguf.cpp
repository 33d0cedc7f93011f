// GGUF reader: a bounds-checked cursor over the bytes, metadata decoding, tensor infos.
// Every size read from the file is checked against the bytes left before it is used to
// allocate or index, so a hostile file can only produce a FormatError.
#include "formats/gguf.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string_view>

#include "core/error.h"

namespace vi::formats {

namespace {

struct GgmlType {
  uint32_t id;
  const char* name;
  std::optional<DType> dtype;
};
// Known ggml type ids; the ones without a DType are named in errors but not loadable.
constexpr GgmlType kGgmlTypes[] = {
    {0, "f32", DType::F32},     {1, "f16", DType::F16},     {2, "q4_0", DType::Q4_0},
    {3, "q4_1", DType::Q4_1},   {6, "q5_0", std::nullopt},  {7, "q5_1", std::nullopt},
    {8, "q8_0", DType::Q8_0},   {9, "q8_1", std::nullopt},  {10, "q2_k", std::nullopt},
    {11, "q3_k", std::nullopt}, {12, "q4_k", DType::Q4_K},  {13, "q5_k", DType::Q5_K},
    {14, "q6_k", DType::Q6_K},  {15, "q8_k", std::nullopt}, {16, "iq2_xxs", std::nullopt},
    {17, "iq2_xs", std::nullopt}, {18, "iq3_xxs", std::nullopt}, {19, "iq1_s", std::nullopt},
    {20, "iq4_nl", std::nullopt}, {21, "iq3_s", std::nullopt}, {22, "iq2_s", std::nullopt},
    {23, "iq4_xs", std::nullopt}, {24, "i8", DType::I8},    {25, "i16", std::nullopt},
    {26, "i32", DType::I32},    {27, "i64", std::nullopt},  {28, "f64", std::nullopt},
    {29, "iq1_m", std::nullopt}, {30, "bf16", DType::BF16}, {34, "tq1_0", std::nullopt},
    {35, "tq2_0", std::nullopt}, {39, "mxfp4", std::nullopt},
};

// Fixed byte size of a scalar GGUF value type, 0 for string/array, -1 for unknown.
int scalar_size(uint32_t t) {
  switch (t) {
    case kGgufU8: case kGgufI8: case kGgufBool: return 1;
    case kGgufU16: case kGgufI16: return 2;
    case kGgufU32: case kGgufI32: case kGgufF32: return 4;
    case kGgufU64: case kGgufI64: case kGgufF64: return 8;
    case kGgufString: case kGgufArray: return 0;
    default: return -1;
  }
}

// Smallest number of bytes one value of type t can occupy (bounds array counts).
size_t min_value_size(uint32_t t) {
  if (t == kGgufString) return 8;   // length
  if (t == kGgufArray) return 12;   // element type + count
  return static_cast<size_t>(scalar_size(t));
}

constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are not real files

class Cursor {
 public:
  Cursor(const ByteSource& src) : src_(src) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("{}: {}", src_.name, what));
  }
  size_t pos() const { return pos_; }
  size_t left() const { return src_.size - pos_; }

  template <class T>
  T read(const char* what) {
    if (left() < sizeof(T))
      fail(fmt::format("truncated at byte {} while reading {}", pos_, what));
    T v;
    std::memcpy(&v, src_.data + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    uint64_t n = read<uint64_t>(what.c_str());
    if (n > left())
      fail(fmt::format("{}: string length {} runs past the end of the file ({} bytes left)",
                       what, n, left()));
    std::string s(reinterpret_cast<const char*>(src_.data + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  const ByteSource& src_;
  size_t pos_ = 0;
};

MetaValue read_value(Cursor& c, uint32_t type, const std::string& key, int depth) {
  MetaValue v;
  v.gguf_type = static_cast<int>(type);
  const char* what = key.c_str();
  switch (type) {
    case kGgufU8: v.kind = MetaValue::Kind::kInt; v.i = c.read<uint8_t>(what); break;
    case kGgufI8: v.kind = MetaValue::Kind::kInt; v.i = c.read<int8_t>(what); break;
    case kGgufU16: v.kind = MetaValue::Kind::kInt; v.i = c.read<uint16_t>(what); break;
    case kGgufI16: v.kind = MetaValue::Kind::kInt; v.i = c.read<int16_t>(what); break;
    case kGgufU32: v.kind = MetaValue::Kind::kInt; v.i = c.read<uint32_t>(what); break;
    case kGgufI32: v.kind = MetaValue::Kind::kInt; v.i = c.read<int32_t>(what); break;
    case kGgufU64:
      v.kind = MetaValue::Kind::kInt;
      v.i = static_cast<int64_t>(c.read<uint64_t>(what));
      break;
    case kGgufI64: v.kind = MetaValue::Kind::kInt; v.i = c.read<int64_t>(what); break;
    case kGgufF32: v.kind = MetaValue::Kind::kFloat; v.f = c.read<float>(what); break;
    case kGgufF64: v.kind = MetaValue::Kind::kFloat; v.f = c.read<double>(what); break;
    case kGgufBool: v.kind = MetaValue::Kind::kBool; v.b = c.read<uint8_t>(what) != 0; break;
    case kGgufString: v.kind = MetaValue::Kind::kString; v.s = c.read_string(key); break;
    case kGgufArray: {
      if (depth >= kMaxArrayDepth)
        c.fail(fmt::format("metadata key '{}': arrays nested deeper than {}", key, kMaxArrayDepth));
      v.kind = MetaValue::Kind::kArray;
      uint32_t et = c.read<uint32_t>(what);
      if (scalar_size(et) < 0)
        c.fail(fmt::format("metadata key '{}': unknown array element type {}", key, et));
      v.i = et;
      uint64_t n = c.read<uint64_t>(what);
      if (n > c.left() / min_value_size(et))
        c.fail(fmt::format("metadata key '{}': array of {} {} elements runs past the end of the file",
                           key, n, gguf_type_name(static_cast<int>(et))));
      v.arr.reserve(static_cast<size_t>(n));
      for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, et, key, depth + 1));
      break;
    }
    default:
      c.fail(fmt::format("metadata key '{}': unknown value type {}", key, type));
  }
  return v;
}

}  // namespace

const char* gguf_type_name(int t) {
  static const char* const names[] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  return t >= 0 && t <= kGgufF64 ? names[t] : "unknown";
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  for (const GgmlType& g : kGgmlTypes)
    if (g.id == ggml_type) return g.dtype;
  return std::nullopt;
}

uint32_t ggml_from_dtype(DType t) {
  for (const GgmlType& g : kGgmlTypes)
    if (g.dtype == t) return g.id;
  VI_FAIL("dtype {} has no ggml type id", dtype_name(t));
}

const char* ggml_type_name(uint32_t ggml_type) {
  for (const GgmlType& g : kGgmlTypes)
    if (g.id == ggml_type) return g.name;
  return "unknown";
}

GgufFile parse_gguf(const ByteSource& src) {
  Cursor c(src);
  GgufFile f;
  f.path = src.name;

  uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kGgufMagic) c.fail(fmt::format("bad magic 0x{:08x}, not a GGUF file", magic));
  f.version = c.read<uint32_t>("version");
  if (f.version == 0x02000000 || f.version == 0x03000000)
    c.fail("big-endian GGUF files are not supported");
  if (f.version != 2 && f.version != 3)
    c.fail(fmt::format("unsupported GGUF version {} (2 and 3 are supported)", f.version));
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");

  // Each KV pair needs >= 13 bytes (key length, type, 1-byte value); each tensor info >= 24.
  if (n_kv > c.left() / 13)
    c.fail(fmt::format("metadata count {} is impossible for a file of {} bytes", n_kv, src.size));
  f.key_order.reserve(static_cast<size_t>(n_kv));
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.read_string(fmt::format("metadata key #{}", k));
    if (f.meta.has(key)) c.fail(fmt::format("duplicate metadata key '{}'", key));
    uint32_t type = c.read<uint32_t>(key.c_str());
    f.meta.set(key, read_value(c, type, key, 0));
    f.key_order.push_back(std::move(key));
  }

  if (const MetaValue* a = f.meta.find("general.alignment")) {
    if (a->kind != MetaValue::Kind::kInt || a->i <= 0 || a->i > (1 << 30) || (a->i & (a->i - 1)) != 0)
      c.fail("general.alignment must be a positive power of two");
    f.alignment = static_cast<uint32_t>(a->i);
  }

  if (n_tensors > c.left() / 24)
    c.fail(fmt::format("tensor count {} is impossible for a file of {} bytes", n_tensors, src.size));

  struct Info {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    uint64_t offset;
    size_t nbytes;
  };
  std::vector<Info> infos;
  infos.reserve(static_cast<size_t>(n_tensors));
  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info ti;
    ti.name = c.read_string(fmt::format("tensor #{} name", k));
    auto bad = [&](const std::string& what) { c.fail(fmt::format("tensor '{}': {}", ti.name, what)); };
    if (!names.insert(ti.name).second) bad("duplicate tensor name");
    uint32_t n_dims = c.read<uint32_t>(ti.name.c_str());
    if (n_dims > static_cast<uint32_t>(kMaxDims))
      bad(fmt::format("{} dimensions (at most {} supported)", n_dims, kMaxDims));
    uint64_t ne[kMaxDims];
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      ne[d] = c.read<uint64_t>(ti.name.c_str());
      if (ne[d] == 0 || ne[d] > static_cast<uint64_t>(INT64_MAX))
        bad(fmt::format("dimension {} has invalid size {}", d, ne[d]));
      if (static_cast<int64_t>(ne[d]) > INT64_MAX / numel)
        bad("element count overflows");
      numel *= static_cast<int64_t>(ne[d]);
    }
    for (int d = static_cast<int>(n_dims) - 1; d >= 0; --d) ti.shape.push_back(static_cast<int64_t>(ne[d]));
    uint32_t type = c.read<uint32_t>(ti.name.c_str());
    std::optional<DType> dt = dtype_from_ggml(type);
    if (!dt) bad(fmt::format("unsupported tensor type {} ({})", ggml_type_name(type), type));
    ti.dtype = *dt;
    const DTypeInfo& info = dtype_info(ti.dtype);
    int64_t cols = n_dims ? static_cast<int64_t>(ne[0]) : 1;
    if (cols % info.block_elems != 0)
      bad(fmt::format("innermost dimension {} is not a multiple of the {} block size {}", cols,
                      info.name, info.block_elems));
    uint64_t blocks = static_cast<uint64_t>(numel / info.block_elems);
    if (blocks > src.size / static_cast<uint64_t>(info.block_bytes))
      bad(fmt::format("{} data of {} values is larger than the file", info.name, numel));
    ti.nbytes = static_cast<size_t>(blocks) * static_cast<size_t>(info.block_bytes);
    ti.offset = c.read<uint64_t>(ti.name.c_str());
    if (ti.offset % f.alignment != 0)
      bad(fmt::format("data offset {} is not a multiple of the alignment {}", ti.offset, f.alignment));
    infos.push_back(std::move(ti));
  }

  // The data section starts at the next alignment boundary after the tensor infos.
  size_t header_end = c.pos();
  f.data_offset = (header_end + f.alignment - 1) / f.alignment * f.alignment;
  size_t data_size = f.data_offset <= src.size ? src.size - f.data_offset : 0;
  for (const Info& ti : infos) {
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset)
      c.fail(fmt::format("tensor '{}': {} bytes at data offset {} run past the end of the file "
                         "(data section is {} bytes)", ti.name, ti.nbytes, ti.offset, data_size));
  }
  // Tensors must not share bytes: a writer bug or a crafted file would alias weights.
  std::vector<const Info*> by_offset;
  for (const Info& ti : infos) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const Info* a, const Info* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const Info* prev = by_offset[k - 1];
    if (prev->nbytes > 0 && by_offset[k]->offset < prev->offset + prev->nbytes)
      c.fail(fmt::format("tensor '{}': data overlaps tensor '{}'", by_offset[k]->name, prev->name));
  }

  f.tensors.reserve(infos.size());
  for (Info& ti : infos) {
    auto* p = const_cast<uint8_t*>(src.data + f.data_offset + ti.offset);
    Tensor t = Tensor::view(ti.dtype, ti.shape, p, src.owner);
    t.set_name(std::move(ti.name));
    f.tensors.push_back(std::move(t));
  }
  return f;
}

GgufFile read_gguf(const std::string& path) { return parse_gguf(source_from_file(path)); }

}  // namespace vi::formats
