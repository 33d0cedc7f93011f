// Reading and validating the request fields the OpenAI and Anthropic APIs share
// (sampling, limits, stop strings, logprobs). Every invalid value is a 400 naming the
// field and the value.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "server/generation.h"
#include "server/http_error.h"
#include "server/server_context.h"

namespace vi::server {

// Optional typed fields: nullopt when absent or null; 400 when of the wrong type/range.
std::optional<double> opt_number(const nlohmann::json& body, const char* key, double lo, double hi);
std::optional<int64_t> opt_int(const nlohmann::json& body, const char* key, int64_t lo, int64_t hi);
std::optional<bool> opt_bool(const nlohmann::json& body, const char* key);
std::optional<std::string> opt_string(const nlohmann::json& body, const char* key);

// Parses the body (400 when it is not a JSON object).
nlohmann::json parse_body(const std::string& text);

// 404 when the body names a model other than the one served.
void check_model(const ServerContext& ctx, const nlohmann::json& body);

// temperature, top_p, top_k, min_p, penalties, seed, stop/stop_sequences, ignore_eos, n
// into spec.params / spec.stop. Defaults are llama.cpp's (SamplingParams); the seed is
// random unless given.
void parse_sampling(const nlohmann::json& body, ApiFlavor flavor, GenerationSpec& spec);

// max_tokens / max_completion_tokens (OpenAI) -> spec.params.max_tokens (-1 = context).
void parse_max_tokens_openai(const nlohmann::json& body, GenerationSpec& spec);

}  // namespace vi::server
