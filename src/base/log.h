// Logging: a thin layer over spdlog so that every module logs in one format
// ("INFO 11-30 12:00:00 [file] message", close to vLLM's), and tests can silence it.
#pragma once

#include <spdlog/spdlog.h>

namespace cpm {

// Sets the global level from a name: trace, debug, info, warning, error, off.
void SetLogLevel(const char* name);
// Installs cpm's pattern on the default logger (stderr). Idempotent.
void InitLogging();

}  // namespace cpm

#define CPM_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define CPM_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define CPM_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
#define CPM_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
