#include "formats/weight_source.h"

#include <map>

#include "core/error.h"
#include "formats/model_file.h"

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

}  // namespace

Metadata flatten_config(const nlohmann::json& config) {
  Metadata m;
  flatten_into(m, "", config);
  return m;
}

std::unique_ptr<WeightSource> open_weight_source(const std::string& path) {
  // Pages are touched later by the model loader, tensor by tensor, with its progress bar.
  ModelFile mf = open_model_file(path, nullptr, /*prefault=*/false);
  std::vector<Tensor> tensors;
  tensors.reserve(mf.tensors.size());
  for (auto& [name, t] : mf.tensors) tensors.push_back(t);
  if (mf.format == FileFormat::kGguf)
    return std::make_unique<MapWeightSource>(path, WeightFormat::kGguf, std::move(mf.meta), std::move(tensors));
  if (mf.config.is_null())
    throw FormatError(fmt::format("{}: config.json is missing next to the safetensors weights", path));
  return std::make_unique<MapWeightSource>(path, WeightFormat::kSafetensors, flatten_config(mf.config),
                                           std::move(tensors));
}

}  // namespace vi::formats
