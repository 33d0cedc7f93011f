#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace vi {

void log_init(const std::string& level) {
  static auto logger = spdlog::stderr_color_mt("voltinfer");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^%L%$ %H:%M:%S.%e %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace vi
