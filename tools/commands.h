// Each cmd_*.cc file exposes one Register*Command that adds its subcommand to the CLI app;
// main.cc calls them all. A subcommand's callback stores its exit code in `*exit_code`.
#pragma once

#include <CLI/CLI.hpp>

namespace cpm {

void RegisterBenchCommand(CLI::App& app, int* exit_code);
void RegisterBenchServeCommand(CLI::App& bench, int* exit_code);  // `bench serve`
void RegisterEvalCommand(CLI::App& app, int* exit_code);
void RegisterGenerateCommand(CLI::App& app, int* exit_code);
void RegisterMakeTinyCommand(CLI::App& app, int* exit_code);
void RegisterServeCommand(CLI::App& app, int* exit_code);
void RegisterValidateCommand(CLI::App& app, int* exit_code);

// A numeric option's check that it is not negative, with a message a person reads (CLI11's
// NonNegativeNumber prints the range up to DBL_MAX in full).
inline CLI::Validator NonNegative() {
  return CLI::Validator(
      [](std::string& v) {
        return !v.empty() && v[0] == '-' ? std::string("must be at least 0, got " + v)
                                         : std::string();
      },
      ">= 0");
}

}  // namespace cpm
