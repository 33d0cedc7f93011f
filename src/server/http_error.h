// Errors a client can cause, with their HTTP status, rendered in the shape of the API
// the client speaks (OpenAI {"error": {...}} or Anthropic {"type": "error", ...}).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"

namespace vi::server {

enum class ApiFlavor { kOpenAI, kAnthropic };

class HttpError : public Error {
 public:
  HttpError(int status, std::string message, std::string param = {}, std::string code = {})
      : Error(message), status(status), param(std::move(param)), code(std::move(code)) {}
  int status;
  std::string param;  // the offending field, when one is to blame
  std::string code;   // OpenAI's machine-readable code (e.g. context_length_exceeded)
};

// 400 naming the field: "invalid 'temperature': must be >= 0 (got -1)".
[[noreturn]] void bad_field(const std::string& field, const std::string& why);

// The JSON body for an error in the given flavour.
nlohmann::json error_body(ApiFlavor flavor, int status, const std::string& message, const std::string& param = {},
                          const std::string& code = {});

// Serialises JSON for the wire; invalid UTF-8 (a token that is half a character) becomes
// U+FFFD instead of throwing.
std::string dump_json(const nlohmann::json& j);

}  // namespace vi::server
