// Error bodies per API flavour (see http_error.h).
#include "server/http_error.h"

namespace vi::server {

void bad_field(const std::string& field, const std::string& why) {
  throw HttpError(400, "invalid '" + field + "': " + why, field);
}

namespace {
std::string openai_type(int status) {
  switch (status) {
    case 400: case 404: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 503: return "server_overloaded";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string anthropic_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: case 529: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}
}  // namespace

nlohmann::json error_body(ApiFlavor flavor, int status, const std::string& message, const std::string& param,
                          const std::string& code) {
  if (flavor == ApiFlavor::kAnthropic)
    return {{"type", "error"}, {"error", {{"type", anthropic_type(status)}, {"message", message}}}};
  nlohmann::json err = {{"message", message}, {"type", openai_type(status)}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) err["param"] = param;
  if (!code.empty()) err["code"] = code;
  return {{"error", err}};
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace vi::server
