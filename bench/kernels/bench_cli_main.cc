// A binary with only the `bench` subcommand of cpmserve (see tools/cmd_bench.cc).
#include <CLI/CLI.hpp>

#include "base/log.h"
#include "commands.h"

int main(int argc, char** argv) {
  cpm::InitLogging();
  CLI::App app{"cpmserve bench only"};
  app.require_subcommand(1);
  int exit_code = 0;
  cpm::RegisterBenchCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
