// cpmserve: entry point. Each subcommand lives in its own cmd_*.cc and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "base/log.h"
#include "commands.h"

int main(int argc, char** argv) {
  cpm::InitLogging();
  CLI::App app{"cpmserve: serve MiniCPM models on the CPU behind an OpenAI-compatible API"};
  app.require_subcommand(1);
  int exit_code = 0;
  app.add_subcommand("version", "print the version")->callback([] {
    std::printf("cpmserve %s\n", CPM_VERSION);
  });
  cpm::RegisterBenchCommand(app, &exit_code);
  cpm::RegisterGenerateCommand(app, &exit_code);
  cpm::RegisterMakeTinyCommand(app, &exit_code);
  cpm::RegisterServeCommand(app, &exit_code);
  cpm::RegisterEvalCommand(app, &exit_code);
  cpm::RegisterValidateCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
