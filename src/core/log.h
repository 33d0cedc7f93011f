// Logging through spdlog. Messages go to stderr so that stdout stays clean for
// generated text and machine-readable output.
#pragma once

#include <spdlog/spdlog.h>

namespace vi {
// Sets up the stderr logger; level is one of trace, debug, info, warn, error, off.
void log_init(const std::string& level = "info");
}  // namespace vi

#define VI_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define VI_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define VI_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
#define VI_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
