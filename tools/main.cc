// cpmserve: entry point. Each subcommand lives in its own cmd_*.cc and registers itself here.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "base/log.h"
#include "commands.h"
#include "serve_argv.h"
#include "serve_config_file.h"

namespace {

// CLI11's message for a usage error, and exit status 2 for every such error (argparse's, and
// the one src/eval/README.md documents), where CLI11 numbers them 100-120; --help and
// --version stay 0.
int UsageError(CLI::App& app, const CLI::ParseError& e) {
  return app.exit(e) == 0 ? 0 : 2;
}

// A serve flag's value that is not of its type, in argparse's words ("argument --port: invalid
// int value: 'abc'") rather than CLI11's ("Could not convert: --port = abc"); other errors as
// CLI11 words them.
std::string ServeParseError(const CLI::App& serve, const CLI::ParseError& e) {
  static const std::regex conversion(R"(Could not convert: (\S+) = (.*))");
  static const std::regex out_of_range(R"((--\S+): Value (.*) not in range (\S+) to .*)");
  static const std::regex missing(R"((--\S+): 1 required \S+ missing)");
  const std::string what = e.what();
  std::smatch m;
  if (std::regex_match(what, m, missing)) {
    return "argument " + m[1].str() + ": expected one argument";
  }
  if (std::regex_match(what, m, out_of_range)) {
    // A range validator runs before the conversion: a value that is no number is a type error.
    const std::string value = m[2].str();
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0') {
      return "argument " + m[1].str() + ": invalid int value: '" + value + "'";
    }
    return "argument " + m[1].str() + ": " + value + " is below its least value, " +
           std::to_string(static_cast<long long>(std::strtod(m[3].str().c_str(), nullptr)));
  }
  if (!std::regex_match(what, m, conversion)) return what;
  std::string type = "int";
  try {
    const CLI::Option* option = serve.get_option(m[1].str());
    std::string name = option->get_type_name();
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name == "float" || name == "double" || name == "number") type = "float";
  } catch (const CLI::OptionNotFound&) {
  }
  return "argument " + m[1].str() + ": invalid " + type + " value: '" + m[2].str() + "'";
}

}  // namespace

int main(int argc, char** argv) {
  cpm::InitLogging();
  CLI::App app{"cpmserve: serve MiniCPM models on the CPU behind an OpenAI-compatible API"};
  app.require_subcommand(1);
  // `vllm --version` prints the version; so does `cpmserve --version` (and `cpmserve version`).
  app.set_version_flag("--version", std::string("cpmserve ") + CPM_VERSION);
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
  // `serve` reads vLLM's --config file and spellings (-tp, -pp, --max_model_len) as vLLM does.
  auto expanded = cpm::ExpandServeConfigFile(std::vector<std::string>(argv, argv + argc));
  if (!expanded.ok()) {
    std::fprintf(stderr, "cpmserve serve: error: %s\n", expanded.status().message().c_str());
    return 2;
  }
  std::vector<char*> expanded_c;
  for (std::string& a : *expanded) expanded_c.push_back(a.data());
  std::vector<std::string> args =
      cpm::TranslateServeArgv(static_cast<int>(expanded_c.size()), expanded_c.data());
  if (args.size() > 1 && args[1] == "serve") {
    std::vector<std::string> names;
    for (const CLI::Option* o : app.get_subcommand("serve")->get_options()) {
      for (const std::string& n : o->get_lnames()) names.push_back(n);
    }
    if (const std::string error = cpm::ExpandAbbreviations(&args, 2, names); !error.empty()) {
      std::fprintf(stderr, "usage: cpmserve serve MODEL_DIR [options] (--help lists them)\n"
                           "cpmserve serve: error: %s\n",
                   error.c_str());
      return 2;
    }
  }
  std::vector<char*> args_c;
  for (std::string& a : args) args_c.push_back(a.data());
  try {
    app.parse(static_cast<int>(args_c.size()), args_c.data());
  } catch (const CLI::ExtrasError& e) {
    // vLLM's argparse: "vllm serve: error: unrecognized arguments: --x 1", exit status 2.
    if (app.got_subcommand("serve")) {
      std::fprintf(stderr, "usage: cpmserve serve MODEL_DIR [options] (--help lists them)\n"
                           "cpmserve serve: error: %s\n",
                   cpm::UnrecognizedArguments(app.remaining(true)).c_str());
      return 2;
    }
    return UsageError(app, e);
  } catch (const CLI::ParseError& e) {
    // A serve flag's bad value ("--swap-space abc"): argparse's form and status too.
    if (e.get_exit_code() != 0 && args.size() > 1 && args[1] == "serve") {
      std::fprintf(stderr, "usage: cpmserve serve MODEL_DIR [options] (--help lists them)\n"
                           "cpmserve serve: error: %s\n",
                   ServeParseError(*app.get_subcommand("serve"), e).c_str());
      return 2;
    }
    return UsageError(app, e);
  }
  return exit_code;
}
