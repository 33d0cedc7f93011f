// config.json loading (hf_config.h).
#include "formats/hf_config.h"

#include <filesystem>

#include "formats/mapped_file.h"

namespace vi::formats {

nlohmann::json load_hf_config(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "config.json").string();
  if (!std::filesystem::exists(file)) throw FormatError(fmt::format("{}: no such file", file));
  auto m = MappedFile::open(file);
  const char* p = reinterpret_cast<const char*>(m->data());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(p, p + m->size());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(fmt::format("{}: bad JSON: {}", file, e.what()));
  }
  if (!j.is_object()) throw FormatError(fmt::format("{}: not a JSON object", file));
  return j;
}

const nlohmann::json* hf_find(const nlohmann::json& cfg, const std::string& key) {
  if (!cfg.is_object()) return nullptr;
  auto tc = cfg.find("text_config");
  if (tc != cfg.end() && tc->is_object()) {
    auto it = tc->find(key);
    if (it != tc->end()) return &*it;
  }
  auto it = cfg.find(key);
  return it == cfg.end() ? nullptr : &*it;
}

}  // namespace vi::formats
