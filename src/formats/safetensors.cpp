// safetensors: header validation, tensor views, sharded folders, and the writer.
// Layout: u64 little-endian header length N, N bytes of JSON, then the data section;
// each tensor's data_offsets are [begin, end) relative to the data section.
#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "formats/data_stream.h"

namespace vi::formats {

namespace {

using nlohmann::json;

constexpr int kMaxJsonDepth = 16;  // real headers nest 3 deep; bounds a hostile header

struct StDType {
  const char* name;
  DType dtype;
};
constexpr StDType kDTypes[] = {
    {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
    {"I32", DType::I32}, {"I8", DType::I8},
};

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw FormatError(fmt::format("{}: {}", file, what));
}

// Parses JSON text, turning syntax errors and absurd nesting into FormatError.
json parse_json(const char* begin, const char* end, const std::string& file) {
  auto limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) fail(file, fmt::format("JSON nested deeper than {}", kMaxJsonDepth));
    return true;
  };
  try {
    return json::parse(begin, end, limit_depth);
  } catch (const json::exception& e) {
    fail(file, fmt::format("bad JSON: {}", e.what()));
  }
}

json read_json_file(const std::string& path) {
  auto m = MappedFile::open(path);
  const char* p = reinterpret_cast<const char*>(m->data());
  return parse_json(p, p + m->size(), path);
}

uint64_t get_u64(const json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_unsigned()) fail(file, fmt::format("{} is not a non-negative integer", what));
  return v.get<uint64_t>();
}

}  // namespace

const char* safetensors_dtype_name(DType t) {
  for (const StDType& d : kDTypes)
    if (d.dtype == t) return d.name;
  VI_FAIL("dtype {} cannot be stored in safetensors", dtype_name(t));
}

SafetensorsFile parse_safetensors(const ByteSource& src) {
  const std::string& file = src.name;
  if (src.size < 8) fail(file, fmt::format("{} bytes is too short for a safetensors header", src.size));
  uint64_t n;
  std::memcpy(&n, src.data, 8);
  if (n > src.size - 8)
    fail(file, fmt::format("header length {} runs past the end of the file ({} bytes)", n, src.size));
  const char* hb = reinterpret_cast<const char*>(src.data + 8);
  json header = parse_json(hb, hb + n, file);
  if (!header.is_object()) fail(file, "header is not a JSON object");
  const uint8_t* data = src.data + 8 + n;
  const size_t data_size = src.size - 8 - static_cast<size_t>(n);

  SafetensorsFile out;
  out.paths.push_back(file);
  struct Info {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Info> infos;
  for (const auto& item : header.items()) {
    const std::string name = item.key();
    const json& v = item.value();
    if (name == "__metadata__") {
      // Free-form string map; anything else there is ignored rather than rejected.
      if (v.is_object())
        for (const auto& [k, s] : v.items())
          if (s.is_string()) out.metadata[k] = s.get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& what) { fail(file, fmt::format("tensor '{}': {}", name, what)); };
    if (!v.is_object()) bad("entry is not a JSON object");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("missing dtype");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("missing shape");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("data_offsets must be [begin, end]");
    Info ti;
    ti.name = name;
    const std::string dt = v["dtype"].get<std::string>();
    const StDType* found = nullptr;
    for (const StDType& d : kDTypes)
      if (dt == d.name) found = &d;
    if (!found) bad(fmt::format("unsupported dtype '{}'", dt));
    ti.dtype = found->dtype;
    const json& shape = v["shape"];
    if (shape.size() > static_cast<size_t>(kMaxDims))
      bad(fmt::format("rank {} is more than {}", shape.size(), kMaxDims));
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : shape) {
      uint64_t x = get_u64(d, file, fmt::format("tensor '{}': shape entry", name));
      if (x > static_cast<uint64_t>(INT64_MAX)) bad(fmt::format("dimension {} is too large", x));
      overflow |= __builtin_mul_overflow(numel, x, &numel);
      ti.shape.push_back(static_cast<int64_t>(x));
    }
    ti.begin = get_u64(v["data_offsets"][0], file, fmt::format("tensor '{}': data_offsets", name));
    ti.end = get_u64(v["data_offsets"][1], file, fmt::format("tensor '{}': data_offsets", name));
    if (ti.begin > ti.end || ti.end > data_size)
      bad(fmt::format("data_offsets [{}, {}) out of range (data section is {} bytes)", ti.begin, ti.end,
                      data_size));
    uint64_t want = 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_info(ti.dtype).block_bytes), &want);
    if (overflow) bad("shape is too large for any file");
    if (ti.end - ti.begin != want)
      bad(fmt::format("data_offsets [{}, {}) hold {} bytes but shape and dtype {} need {}", ti.begin, ti.end,
                      ti.end - ti.begin, dt, want));
    infos.push_back(std::move(ti));
  }
  std::sort(infos.begin(), infos.end(), [](const Info& a, const Info& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t k = 1; k < infos.size(); ++k)
    if (infos[k].begin < infos[k - 1].end)
      fail(file, fmt::format("tensor '{}': data overlaps tensor '{}'", infos[k].name, infos[k - 1].name));

  for (const Info& ti : infos) {
    auto* p = const_cast<uint8_t*>(data + ti.begin);
    Tensor t;
    size_t elem = static_cast<size_t>(dtype_info(ti.dtype).block_bytes);
    if (reinterpret_cast<uintptr_t>(p) % elem == 0) {
      t = Tensor::view(ti.dtype, ti.shape, p, src.owner);
    } else {
      // The format does not align tensors; a misaligned one is copied so kernels can
      // load whole elements. Files written by the official writers never need this.
      t = Tensor::empty(ti.dtype, ti.shape);
      if (ti.end > ti.begin) std::memcpy(t.data(), p, ti.end - ti.begin);
    }
    t.set_name(ti.name);
    out.tensors.push_back(std::move(t));
  }
  return out;
}

SafetensorsFile read_safetensors(const std::string& path) { return parse_safetensors(source_from_file(path)); }

SafetensorsFile read_safetensors_index(const std::string& index_path) {
  namespace fs = std::filesystem;
  json index = read_json_file(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    fail(index_path, "no \"weight_map\" object");
  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, std::string> where;  // tensor -> shard file name
  std::vector<std::string> shards;           // first-seen order
  for (const auto& [name, v] : index["weight_map"].items()) {
    if (!v.is_string()) fail(index_path, fmt::format("weight_map entry for '{}' is not a file name", name));
    std::string shard = v.get<std::string>();
    // Shards live next to the index; a path leaving the folder is refused.
    fs::path sp(shard);
    if (shard.empty() || sp.is_absolute() || sp.has_parent_path())
      fail(index_path, fmt::format("tensor '{}': shard '{}' is not a plain file name", name, shard));
    where[name] = shard;
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  }
  SafetensorsFile out;
  std::set<std::string> seen;
  for (const std::string& shard : shards) {
    const std::string path = (dir / shard).string();
    SafetensorsFile part = read_safetensors(path);
    if (out.paths.empty()) out.metadata = part.metadata;
    out.paths.push_back(path);
    for (Tensor& t : part.tensors) {
      if (!seen.insert(t.name()).second)
        fail(path, fmt::format("tensor '{}' appears in more than one shard", t.name()));
      out.tensors.push_back(std::move(t));
    }
  }
  for (const auto& [name, shard] : where)
    if (!seen.count(name))
      fail((dir / shard).string(), fmt::format("tensor '{}' listed in {} is missing", name, index_path));
  return out;
}

// ---- writers ----

void write_safetensors_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  json j = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  VI_CHECK(f.good(), "{}: write failed", path);
}

SafetensorsWriter::SafetensorsWriter(const std::string& path) : path_(path) {}
SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) {
  VI_CHECK(!header_written_, "{}: metadata set after the header was written", path_);
  metadata_[key] = value;
}

void SafetensorsWriter::add_tensor_info(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  VI_CHECK(!header_written_, "{}: tensor '{}' declared after the header was written", path_, name);
  VI_CHECK(name != "__metadata__", "{}: '__metadata__' is not a tensor name", path_);
  for (const Info& t : tensors_) VI_CHECK(t.name != name, "{}: duplicate tensor '{}'", path_, name);
  safetensors_dtype_name(dtype);  // throws for a dtype the format cannot hold
  size_t n = static_cast<size_t>(dtype_info(dtype).block_bytes);
  for (int64_t d : shape) {
    VI_CHECK(d >= 0, "{}: tensor '{}' has a negative dimension", path_, name);
    n *= static_cast<size_t>(d);
  }
  tensors_.push_back({name, dtype, shape, n});
}

void SafetensorsWriter::write_header() {
  VI_CHECK(!header_written_, "{}: header written twice", path_);
  out_ = std::make_unique<DataStream>(path_, 1);  // safetensors packs tensors back to back
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata_.empty()) h["__metadata__"] = metadata_;
  for (const Info& t : tensors_) {
    size_t off = out_->declare(t.name, t.nbytes);
    h[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {off, off + t.nbytes}}};
  }
  std::string text = h.dump();
  // Pad with spaces so the data section starts 8-byte aligned, as the official writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  out_->write_raw(&n, 8);
  out_->write_raw(text.data(), text.size());
  header_written_ = true;
}

void SafetensorsWriter::write_tensor_data(const void* data, size_t nbytes) {
  VI_CHECK(header_written_, "{}: tensor data written before the header", path_);
  out_->write_data(data, nbytes);
}

void SafetensorsWriter::write_tensor(const Tensor& t) {
  VI_CHECK(header_written_, "{}: tensor data written before the header", path_);
  VI_CHECK(t.device() == Device::CPU, "{}: tensor '{}' is not in host memory", path_, t.name());
  out_->expect_next(t.name(), t.nbytes());
  out_->write_data(t.data(), t.nbytes());
}

void SafetensorsWriter::finish() {
  if (!header_written_) write_header();
  out_->finish();
}

void SafetensorsWriter::write_file(const std::string& path, const std::vector<Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter w(path);
  for (const auto& [k, v] : metadata) w.set_metadata(k, v);
  for (const Tensor& t : tensors) w.add_tensor_info(t);
  w.write_header();
  for (const Tensor& t : tensors) w.write_tensor(t);
  w.finish();
}

}  // namespace vi::formats
