#include "models/hparams.h"

#include "core/error.h"

namespace vi {

HParamReader::HParamReader(const WeightSource& src, const std::string& arch) : src_(src) {
  if (src.format() == WeightFormat::kGguf) prefix_ = gguf_arch(src) + ".";
  (void)arch;
}

std::string HParamReader::key(const std::string& gguf_key, const std::string& hf_key) const {
  const Metadata& m = src_.metadata();
  if (src_.format() == WeightFormat::kGguf) {
    if (gguf_key.empty()) return "";
    return m.has(prefix_ + gguf_key) ? prefix_ + gguf_key : "";
  }
  if (hf_key.empty()) return "";
  // Multimodal checkpoints (Qwen3.5) keep the text model's fields under text_config.
  if (m.has("text_config." + hf_key)) return "text_config." + hf_key;
  if (m.has(hf_key)) return hf_key;
  return "";
}

int64_t HParamReader::get_int(const std::string& gguf_key, const std::string& hf_key) const {
  auto v = opt_int(gguf_key, hf_key);
  if (!v) {
    throw FormatError(fmt::format("{}: hyper-parameter '{}' is missing", src_.path(),
                                  src_.format() == WeightFormat::kGguf ? prefix_ + gguf_key : hf_key));
  }
  return *v;
}

double HParamReader::get_float(const std::string& gguf_key, const std::string& hf_key) const {
  auto v = opt_float(gguf_key, hf_key);
  if (!v) {
    throw FormatError(fmt::format("{}: hyper-parameter '{}' is missing", src_.path(),
                                  src_.format() == WeightFormat::kGguf ? prefix_ + gguf_key : hf_key));
  }
  return *v;
}

std::optional<int64_t> HParamReader::opt_int(const std::string& gguf_key, const std::string& hf_key) const {
  std::string k = key(gguf_key, hf_key);
  if (k.empty()) return std::nullopt;
  const MetaValue* v = src_.metadata().find(k);
  if (v->kind == MetaValue::Kind::kArray) return std::nullopt;  // per-layer arrays are read elsewhere
  if (v->kind == MetaValue::Kind::kFloat) return static_cast<int64_t>(v->f);
  return src_.metadata().get_int(k);
}

std::optional<double> HParamReader::opt_float(const std::string& gguf_key, const std::string& hf_key) const {
  std::string k = key(gguf_key, hf_key);
  if (k.empty()) return std::nullopt;
  return src_.metadata().get_float(k);
}

std::optional<bool> HParamReader::opt_bool(const std::string& gguf_key, const std::string& hf_key) const {
  std::string k = key(gguf_key, hf_key);
  if (k.empty()) return std::nullopt;
  return src_.metadata().get_bool(k);
}

std::string gguf_arch(const WeightSource& src) {
  if (src.format() != WeightFormat::kGguf) return "";
  auto a = src.metadata().opt_string("general.architecture");
  if (!a) throw FormatError(fmt::format("{}: GGUF file has no general.architecture", src.path()));
  return *a;
}

std::string model_arch(const WeightSource& src) {
  const Metadata& m = src.metadata();
  std::string a;
  if (src.format() == WeightFormat::kGguf) {
    a = gguf_arch(src);
  } else {
    a = m.opt_string("model_type").value_or(m.opt_string("text_config.model_type").value_or(""));
    if (a.empty()) throw FormatError(fmt::format("{}: config.json has no model_type", src.path()));
  }
  if (a == "qwen35" || a == "qwen3_5_text") a = "qwen3_5";
  return a;
}

std::string model_display_name(const WeightSource& src) {
  const Metadata& m = src.metadata();
  if (auto n = m.opt_string("general.name")) return *n;
  if (auto n = m.opt_string("_name_or_path")) return *n;
  return src.path();
}

}  // namespace vi
