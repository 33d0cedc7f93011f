#include "formats/weight_source.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"

namespace fs = std::filesystem;

namespace vi::formats {

namespace {

class MapWeightSource final : public WeightSource {
 public:
  MapWeightSource(std::string path, WeightFormat fmt, Metadata meta, std::vector<Tensor> tensors)
      : path_(std::move(path)), format_(fmt), meta_(std::move(meta)) {
    for (Tensor& t : tensors) {
      std::string n = t.name();
      if (!map_.emplace(n, std::move(t)).second)
        throw FormatError(fmt::format("{}: tensor '{}' appears twice", path_, n));
    }
  }
  const std::string& path() const override { return path_; }
  WeightFormat format() const override { return format_; }
  const Metadata& metadata() const override { return meta_; }
  bool has(const std::string& name) const override { return map_.count(name) != 0; }
  const Tensor& get(const std::string& name) const override {
    auto it = map_.find(name);
    if (it == map_.end()) throw FormatError(fmt::format("{}: tensor '{}' is missing", path_, name));
    return it->second;
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    out.reserve(map_.size());
    for (const auto& [n, t] : map_) out.push_back(n);
    return out;
  }

 private:
  std::string path_;
  WeightFormat format_;
  Metadata meta_;
  std::map<std::string, Tensor> map_;
};

void flatten_into(Metadata& m, const std::string& prefix, const nlohmann::json& j) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    const auto& v = it.value();
    if (v.is_object()) {
      flatten_into(m, key, v);
    } else if (v.is_boolean()) {
      m.set(key, Metadata::make_bool(v.get<bool>()));
    } else if (v.is_number_integer()) {
      m.set(key, Metadata::make_int(v.get<int64_t>()));
    } else if (v.is_number()) {
      m.set(key, Metadata::make_float(v.get<double>()));
    } else if (v.is_string()) {
      m.set(key, Metadata::make_string(v.get<std::string>()));
    } else if (v.is_array()) {
      MetaValue arr;
      arr.kind = MetaValue::Kind::kArray;
      for (const auto& e : v) {
        if (e.is_boolean()) arr.arr.push_back(Metadata::make_bool(e.get<bool>()));
        else if (e.is_number_integer()) arr.arr.push_back(Metadata::make_int(e.get<int64_t>()));
        else if (e.is_number()) arr.arr.push_back(Metadata::make_float(e.get<double>()));
        else if (e.is_string()) arr.arr.push_back(Metadata::make_string(e.get<std::string>()));
      }
      m.set(key, std::move(arr));
    }
  }
}

nlohmann::json read_config(const fs::path& p) {
  std::ifstream f(p);
  if (!f.good()) throw FormatError(fmt::format("{}: cannot read", p.string()));
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) throw FormatError(fmt::format("{}: not a JSON object", p.string()));
  return j;
}

}  // namespace

Metadata flatten_config(const nlohmann::json& config) {
  Metadata m;
  flatten_into(m, "", config);
  return m;
}

std::unique_ptr<WeightSource> open_weight_source(const std::string& path) {
  fs::path p(path);
  if (!fs::exists(p)) throw Error(fmt::format("model '{}' does not exist", path));
  if (fs::is_regular_file(p) && p.extension() == ".gguf") {
    GgufFile g = read_gguf(path);
    return std::make_unique<MapWeightSource>(path, WeightFormat::kGguf, std::move(g.meta), std::move(g.tensors));
  }
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  SafetensorsFile st;
  if (fs::is_regular_file(p)) {
    VI_CHECK(p.extension() == ".safetensors", "'{}' is neither a .gguf nor a .safetensors file nor a folder",
             path);
    st = read_safetensors(path);
  } else if (fs::exists(dir / "model.safetensors.index.json")) {
    st = read_safetensors_index((dir / "model.safetensors.index.json").string());
  } else if (fs::exists(dir / "model.safetensors")) {
    st = read_safetensors((dir / "model.safetensors").string());
  } else {
    throw Error(fmt::format("{}: no model.safetensors or model.safetensors.index.json in this folder", path));
  }
  if (!fs::exists(dir / "config.json"))
    throw FormatError(fmt::format("{}: config.json is missing next to the safetensors weights", dir.string()));
  Metadata meta = flatten_config(read_config(dir / "config.json"));
  return std::make_unique<MapWeightSource>(path, WeightFormat::kSafetensors, std::move(meta),
                                           std::move(st.tensors));
}

}  // namespace vi::formats
