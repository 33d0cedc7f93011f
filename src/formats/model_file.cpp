// open_model_file: format detection, tensor map, shape checks, page prefaulting.
#include "formats/model_file.h"

#include <sys/mman.h>

#include <algorithm>
#include <filesystem>

#include <fmt/ranges.h>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"

namespace vi::formats {

namespace fs = std::filesystem;

const char* file_format_name(FileFormat f) { return f == FileFormat::kGguf ? "gguf" : "safetensors"; }

const Tensor& ModelFile::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw FormatError(fmt::format("{}: tensor '{}' not found", path, name));
  return it->second;
}

const Tensor& ModelFile::require(const std::string& name, const std::vector<int64_t>& shape) const {
  const Tensor& t = get(name);
  if (t.shape() != shape)
    throw FormatError(fmt::format("{}: tensor '{}' has shape {}, expected [{}]", path, name, t.shape_str(),
                                  fmt::join(shape, ", ")));
  return t;
}

size_t ModelFile::total_bytes() const {
  size_t n = 0;
  for (const auto& [_, t] : tensors) n += t.nbytes();
  return n;
}

namespace {

void add_tensors(ModelFile& mf, std::vector<Tensor>& ts, const std::string& file) {
  for (Tensor& t : ts) {
    std::string name = t.name();
    if (!mf.tensors.emplace(name, std::move(t)).second)
      throw FormatError(fmt::format("{}: duplicate tensor '{}'", file, name));
  }
}

// Reads one byte per page of every tensor so the pages are resident before the first
// forward pass; tensors are visited in memory order so the kernel's readahead helps.
void prefault_pages(const ModelFile& mf, const LoadProgress& progress) {
  std::vector<const Tensor*> ts;
  for (const auto& [_, t] : mf.tensors) ts.push_back(&t);
  std::sort(ts.begin(), ts.end(), [](const Tensor* a, const Tensor* b) { return a->data() < b->data(); });
  const size_t total = mf.total_bytes();
  constexpr size_t kPage = 4096;
  constexpr size_t kReport = size_t{64} << 20;  // progress granularity
  size_t done = 0, next_report = 0;
  volatile uint8_t sink = 0;
  if (progress) progress(0, total);
  for (const Tensor* t : ts) {
    const auto* p = static_cast<const uint8_t*>(t->data());
    const size_t n = t->nbytes();
    if (n == 0) continue;
    uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~(uintptr_t{kPage} - 1);
    ::madvise(reinterpret_cast<void*>(a), n + (reinterpret_cast<uintptr_t>(p) - a), MADV_WILLNEED);
    uint8_t acc = 0;
    for (size_t off = 0; off < n; off += kPage) {
      acc ^= p[off];
      if (progress && done + off >= next_report) {
        progress(done + off, total);
        next_report = done + off + kReport;
      }
    }
    acc ^= p[n - 1];
    sink = sink ^ acc;
    done += n;
  }
  if (progress) progress(total, total);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void open_safetensors_folder(ModelFile& mf, const fs::path& dir) {
  if (fs::exists(dir / "config.json")) mf.config = load_hf_config((dir / "config.json").string());
  SafetensorsFile st;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    st = read_safetensors_index((dir / "model.safetensors.index.json").string());
  } else if (fs::exists(dir / "model.safetensors")) {
    st = read_safetensors((dir / "model.safetensors").string());
  } else {
    throw FormatError(fmt::format("{}: no model.safetensors or model.safetensors.index.json in this folder",
                                  dir.string()));
  }
  mf.format = FileFormat::kSafetensors;
  mf.files = st.paths;
  add_tensors(mf, st.tensors, dir.string());
}

}  // namespace

ModelFile open_model_file(const std::string& path, const LoadProgress& progress, bool prefault) {
  ModelFile mf;
  mf.path = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    open_safetensors_folder(mf, fs::path(path));
  } else if (!fs::exists(path, ec)) {
    throw FormatError(fmt::format("{}: no such file or folder", path));
  } else if (ends_with(path, ".safetensors")) {
    SafetensorsFile st = read_safetensors(path);
    mf.format = FileFormat::kSafetensors;
    mf.files = st.paths;
    fs::path cfg = fs::path(path).parent_path() / "config.json";
    if (fs::exists(cfg)) mf.config = load_hf_config(cfg.string());
    add_tensors(mf, st.tensors, path);
  } else if (ends_with(path, ".safetensors.index.json")) {
    open_safetensors_folder(mf, fs::path(path).parent_path());
  } else {
    // Anything else is tried as GGUF; the magic check gives a clear error if it is not.
    GgufFile g = read_gguf(path);
    mf.format = FileFormat::kGguf;
    mf.files = {path};
    mf.meta = std::move(g.meta);
    add_tensors(mf, g.tensors, path);
  }
  if (prefault) prefault_pages(mf, progress);
  return mf;
}

}  // namespace vi::formats
