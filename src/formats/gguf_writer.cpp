// GgufWriter: metadata encoding (with type inference for values not read from GGUF),
// tensor info table, and streamed tensor data through DataStream.
#include "formats/gguf_writer.h"

#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "formats/data_stream.h"
#include "formats/gguf.h"

namespace vi::formats {

namespace {

// The GGUF type a value will be written as.
int resolve_type(const MetaValue& v, const std::string& key) {
  using K = MetaValue::Kind;
  if (v.gguf_type >= 0) {
    int t = v.gguf_type;
    bool ok = false;
    switch (v.kind) {
      case K::kInt: ok = t <= kGgufI32 || t == kGgufU64 || t == kGgufI64; break;
      case K::kFloat: ok = t == kGgufF32 || t == kGgufF64; break;
      case K::kBool: ok = t == kGgufBool; break;
      case K::kString: ok = t == kGgufString; break;
      case K::kArray: ok = t == kGgufArray; break;
    }
    VI_CHECK(ok, "metadata key '{}': GGUF type {} does not fit the value", key, gguf_type_name(t));
    return t;
  }
  switch (v.kind) {
    case K::kInt: return v.i >= INT32_MIN && v.i <= INT32_MAX ? kGgufI32 : kGgufI64;
    case K::kFloat:  // f32 like llama.cpp's converters, unless the value needs f64's range
      return std::isfinite(v.f) && std::fabs(v.f) > FLT_MAX ? kGgufF64 : kGgufF32;
    case K::kBool: return kGgufBool;
    case K::kString: return kGgufString;
    case K::kArray: return kGgufArray;
  }
  return -1;
}

// Element type of an array: one type for all elements (ints widen to i64 if any needs it).
int array_elem_type(const MetaValue& v, const std::string& key) {
  if (v.arr.empty()) return v.gguf_type == kGgufArray ? static_cast<int>(v.i) : kGgufI32;
  int t = resolve_type(v.arr[0], key);
  for (const MetaValue& e : v.arr) {
    int te = resolve_type(e, key);
    if (te == t) continue;
    // Untyped ints default to i32; one that needs 64 bits widens the whole array.
    bool widen = (t == kGgufI32 || t == kGgufI64) && (te == kGgufI32 || te == kGgufI64) &&
                 e.gguf_type < 0 && v.arr[0].gguf_type < 0;
    VI_CHECK(widen, "metadata key '{}': array mixes {} and {}", key, gguf_type_name(t), gguf_type_name(te));
    t = kGgufI64;
  }
  return t;
}

class Bytes {
 public:
  template <class T>
  void put(T v) {
    size_t n = buf_.size();
    buf_.resize(n + sizeof(T));
    std::memcpy(buf_.data() + n, &v, sizeof(T));
  }
  void put_string(const std::string& s) {
    put<uint64_t>(s.size());
    buf_.insert(buf_.end(), s.begin(), s.end());
  }
  const std::vector<uint8_t>& data() const { return buf_; }

 private:
  std::vector<uint8_t> buf_;
};

// Refuses a value the chosen type cannot hold instead of silently truncating it.
void check_range(const MetaValue& v, int type, const std::string& key) {
  auto fits = [&](int64_t lo, int64_t hi) {
    VI_CHECK(v.i >= lo && v.i <= hi, "metadata key '{}': value {} does not fit GGUF type {}", key, v.i,
             gguf_type_name(type));
  };
  switch (type) {
    case kGgufU8: fits(0, UINT8_MAX); break;
    case kGgufI8: fits(INT8_MIN, INT8_MAX); break;
    case kGgufU16: fits(0, UINT16_MAX); break;
    case kGgufI16: fits(INT16_MIN, INT16_MAX); break;
    case kGgufU32: fits(0, UINT32_MAX); break;
    case kGgufI32: fits(INT32_MIN, INT32_MAX); break;
    case kGgufF32:
      VI_CHECK(!std::isfinite(v.f) || std::fabs(v.f) <= FLT_MAX, "metadata key '{}': value {} does not fit f32",
               key, v.f);
      break;
    default: break;  // u64 holds any int64 bit pattern; i64, f64 hold everything
  }
}

void put_value(Bytes& b, const MetaValue& v, int type, const std::string& key) {
  check_range(v, type, key);
  switch (type) {
    case kGgufU8: b.put<uint8_t>(static_cast<uint8_t>(v.i)); break;
    case kGgufI8: b.put<int8_t>(static_cast<int8_t>(v.i)); break;
    case kGgufU16: b.put<uint16_t>(static_cast<uint16_t>(v.i)); break;
    case kGgufI16: b.put<int16_t>(static_cast<int16_t>(v.i)); break;
    case kGgufU32: b.put<uint32_t>(static_cast<uint32_t>(v.i)); break;
    case kGgufI32: b.put<int32_t>(static_cast<int32_t>(v.i)); break;
    case kGgufU64: b.put<uint64_t>(static_cast<uint64_t>(v.i)); break;
    case kGgufI64: b.put<int64_t>(v.i); break;
    case kGgufF32: b.put<float>(static_cast<float>(v.f)); break;
    case kGgufF64: b.put<double>(v.f); break;
    case kGgufBool: b.put<uint8_t>(v.b ? 1 : 0); break;
    case kGgufString: b.put_string(v.s); break;
    case kGgufArray: {
      int et = array_elem_type(v, key);
      VI_CHECK(et >= 0 && et <= kGgufF64, "metadata key '{}': bad array element type {}", key, et);
      b.put<uint32_t>(static_cast<uint32_t>(et));
      b.put<uint64_t>(v.arr.size());
      for (const MetaValue& e : v.arr) put_value(b, e, et, key);
      break;
    }
    default: VI_FAIL("metadata key '{}': bad GGUF type {}", key, type);
  }
}

}  // namespace

GgufWriter::GgufWriter(const std::string& path, uint32_t alignment)
    : path_(path), alignment_(alignment) {
  VI_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "{}: alignment {} is not a power of two",
           path, alignment);
}

GgufWriter::~GgufWriter() = default;

void GgufWriter::set(const std::string& key, const MetaValue& v) {
  VI_CHECK(!header_written_, "{}: metadata '{}' set after the header was written", path_, key);
  if (key == "general.alignment") {
    VI_CHECK(v.kind == MetaValue::Kind::kInt && v.i > 0 && v.i <= (1 << 30) && (v.i & (v.i - 1)) == 0,
             "{}: general.alignment must be a positive power of two", path_);
    VI_CHECK(tensors_.empty(), "{}: general.alignment set after tensors were declared", path_);
    alignment_ = static_cast<uint32_t>(v.i);
  }
  Bytes probe;  // encode once now so a bad type or range fails here, not at write time
  put_value(probe, v, resolve_type(v, key), key);
  for (auto& [k, old] : kv_) {
    if (k == key) {
      old = v;
      return;
    }
  }
  kv_.emplace_back(key, v);
}

void GgufWriter::set_all(const Metadata& m) {
  for (const auto& [k, v] : m.items()) set(k, v);
}

void GgufWriter::add_tensor_info(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  VI_CHECK(!header_written_, "{}: tensor '{}' declared after the header was written", path_, name);
  VI_CHECK(shape.size() <= static_cast<size_t>(kMaxDims), "{}: tensor '{}' has rank {} > {}", path_, name,
           shape.size(), kMaxDims);
  for (int64_t d : shape) VI_CHECK(d > 0, "{}: tensor '{}' has a dimension of size {}", path_, name, d);
  for (const Info& t : tensors_) VI_CHECK(t.name != name, "{}: duplicate tensor '{}'", path_, name);
  ggml_from_dtype(dtype);  // throws for a dtype GGUF cannot hold
  const int64_t cols = shape.empty() ? 1 : shape.back();
  VI_CHECK(cols % dtype_info(dtype).block_elems == 0, "{}: tensor '{}': {} values per row is not a whole number of {} blocks",
           path_, name, cols, dtype_name(dtype));
  tensors_.push_back({name, dtype, shape, 0});
}

void GgufWriter::write_header() {
  VI_CHECK(!header_written_, "{}: header written twice", path_);
  out_ = std::make_unique<DataStream>(path_, alignment_);
  for (Info& t : tensors_) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    int64_t cols = t.shape.empty() ? 1 : t.shape.back();
    size_t nbytes = dtype_row_bytes(t.dtype, cols) * static_cast<size_t>(numel / cols);
    t.offset = out_->declare(t.name, nbytes);
  }
  Bytes b;
  b.put<uint32_t>(kGgufMagic);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(kv_.size());
  for (const auto& [k, v] : kv_) {
    int type = resolve_type(v, k);
    b.put_string(k);
    b.put<uint32_t>(static_cast<uint32_t>(type));
    put_value(b, v, type, k);
  }
  for (const Info& t : tensors_) {
    b.put_string(t.name);
    b.put<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) b.put<uint64_t>(static_cast<uint64_t>(*it));
    b.put<uint32_t>(ggml_from_dtype(t.dtype));
    b.put<uint64_t>(t.offset);
  }
  out_->write_raw(b.data().data(), b.data().size());
  out_->pad_to(alignment_);
  header_written_ = true;
}

void GgufWriter::write_tensor_data(const void* data, size_t nbytes) {
  VI_CHECK(header_written_, "{}: tensor data written before the header", path_);
  out_->write_data(data, nbytes);
}

void GgufWriter::write_tensor(const Tensor& t) {
  VI_CHECK(header_written_, "{}: tensor data written before the header", path_);
  VI_CHECK(t.device() == Device::CPU, "{}: tensor '{}' is not in host memory", path_, t.name());
  out_->expect_next(t.name(), t.nbytes());
  out_->write_data(t.data(), t.nbytes());
}

void GgufWriter::finish() {
  if (!header_written_) write_header();
  out_->finish();
}

void GgufWriter::write_file(const std::string& path, const Metadata& meta, const std::vector<Tensor>& tensors,
                            uint32_t alignment) {
  GgufWriter w(path, alignment);
  w.set_all(meta);
  for (const Tensor& t : tensors) w.add_tensor_info(t);
  w.write_header();
  for (const Tensor& t : tensors) w.write_tensor(t);
  w.finish();
}

}  // namespace vi::formats
