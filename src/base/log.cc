#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <string>

namespace cpm {

void InitLogging() {
  static bool done = false;
  if (done) return;
  done = true;
  auto logger = spdlog::stderr_color_mt("cpmserve");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%^%L%$ %m-%d %H:%M:%S.%e %v");
}

void SetLogLevel(const char* name) {
  std::string n = name;
  if (n == "warn") n = "warning";
  spdlog::set_level(spdlog::level::from_str(n));
}

}  // namespace cpm
