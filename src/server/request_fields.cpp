// Shared request-field parsing and validation (see request_fields.h).
#include "server/request_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "server/http_error.h"

namespace vi::server {

using nlohmann::json;

namespace {
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}
}  // namespace

std::optional<double> opt_number(const json& body, const char* key, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_field(key, fmt::format("must be a number (got {})", v->dump()));
  double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) bad_field(key, fmt::format("must be in [{}, {}] (got {})", lo, hi, d));
  return d;
}

std::optional<int64_t> opt_int(const json& body, const char* key, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad_field(key, fmt::format("must be an integer (got {})", v->dump()));
  int64_t i = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                  ? INT64_MAX
                  : v->get<int64_t>();
  if (i < lo || i > hi) bad_field(key, fmt::format("must be in [{}, {}] (got {})", lo, hi, i));
  return i;
}

std::optional<bool> opt_bool(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_field(key, fmt::format("must be true or false (got {})", v->dump()));
  return v->get<bool>();
}

std::optional<std::string> opt_string(const json& body, const char* key) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_field(key, fmt::format("must be a string (got {})", v->dump()));
  return v->get<std::string>();
}

json parse_body(const std::string& text) {
  json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) throw HttpError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw HttpError(400, "the request body must be a JSON object");
  return body;
}

void check_model(const ServerContext& ctx, const json& body) {
  auto model = opt_string(body, "model");
  if (model && *model != ctx.opts.model_id)
    throw HttpError(404,
                    fmt::format("the model '{}' does not exist; this server serves '{}'", *model, ctx.opts.model_id),
                    "model", "model_not_found");
}

void parse_sampling(const json& body, ApiFlavor flavor, GenerationSpec& spec) {
  SamplingParams& s = spec.params.sampling;
  if (auto v = opt_number(body, "temperature", 0, 100)) s.temperature = static_cast<float>(*v);
  if (auto v = opt_number(body, "top_p", 0, 1)) {
    if (*v == 0) bad_field("top_p", "must be > 0 (got 0)");
    s.top_p = static_cast<float>(*v);
  }
  if (auto v = opt_int(body, "top_k", -1, 1 << 30)) s.top_k = static_cast<int>(*v);
  if (auto v = opt_number(body, "min_p", 0, 1)) s.min_p = static_cast<float>(*v);
  if (auto v = opt_number(body, "presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*v);
  if (auto v = opt_number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*v);
  // vLLM's name and llama.cpp's name for the same multiplicative penalty.
  for (const char* key : {"repetition_penalty", "repeat_penalty"}) {
    if (auto v = opt_number(body, key, 0, 10)) {
      if (*v == 0) bad_field(key, "must be > 0 (got 0)");
      s.repeat_penalty = static_cast<float>(*v);
    }
  }
  if (auto v = opt_int(body, "repeat_last_n", -1, 1 << 30)) s.repeat_last_n = static_cast<int>(*v);
  if (auto v = opt_int(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*v);
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    s.seed = rng();
  }
  if (auto v = opt_bool(body, "ignore_eos")) spec.params.ignore_stop_tokens = *v;
  if (auto n = opt_int(body, "n", 1, 1 << 20); n && *n != 1)
    bad_field("n", fmt::format("only n = 1 is supported (got {})", *n));

  const char* stop_key = flavor == ApiFlavor::kAnthropic ? "stop_sequences" : "stop";
  if (const json* v = field(body, stop_key)) {
    if (v->is_string()) {
      spec.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 16) bad_field(stop_key, fmt::format("at most 16 stop strings (got {})", v->size()));
      for (const auto& e : *v) {
        if (!e.is_string()) bad_field(stop_key, "must be a string or an array of strings");
        spec.stop.push_back(e.get<std::string>());
      }
    } else {
      bad_field(stop_key, "must be a string or an array of strings");
    }
  }
}

void parse_max_tokens_openai(const json& body, GenerationSpec& spec) {
  auto a = opt_int(body, "max_completion_tokens", 0, INT64_MAX);
  auto b = opt_int(body, "max_tokens", 0, INT64_MAX);
  if (a) spec.params.max_tokens = *a;
  else if (b) spec.params.max_tokens = *b;
  if (spec.params.max_tokens == 0)
    bad_field(a ? "max_completion_tokens" : "max_tokens", "must be at least 1 (got 0)");
}

}  // namespace vi::server
