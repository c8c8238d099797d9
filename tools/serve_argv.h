// `cpmserve serve`'s command line as vLLM's argument parser reads it, before CLI11 sees it:
// vLLM's two-letter single-dash aliases (-tp, -pp, -dp), which CLI11 cannot declare, become their long
// names, and long options spelled with underscores (--max_model_len) get dashes, as vLLM's
// FlexibleArgumentParser does. Other subcommands' arguments pass unchanged.
#pragma once

#include <string>
#include <vector>

namespace cpm {

// argv as strings (argv[0] included), rewritten only when argv[1] is "serve"; tokens after a
// bare "--" are left alone.
inline std::vector<std::string> TranslateServeArgv(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  if (argc < 2 || out[1] != "serve") return out;
  static const std::pair<const char*, const char*> kAliases[] = {
      {"-tp", "--tensor-parallel-size"},
      {"-pp", "--pipeline-parallel-size"},
      {"-dp", "--data-parallel-size"}};
  for (size_t i = 2; i < out.size(); ++i) {
    std::string& a = out[i];
    if (a == "--") break;
    for (const auto& [alias, name] : kAliases) {
      const std::string al(alias);
      if (a == al) {
        a = name;
      } else if (a.compare(0, al.size() + 1, al + "=") == 0) {
        a = name + a.substr(al.size());
      }
    }
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      const size_t eq = a.find('=');
      for (size_t k = 2; k < std::min(eq, a.size()); ++k) {
        if (a[k] == '_') a[k] = '-';
      }
    }
  }
  return out;
}

// argparse's form of a stray argument: "unrecognized arguments: --x 1".
inline std::string UnrecognizedArguments(const std::vector<std::string>& extras) {
  std::string joined;
  for (const std::string& e : extras) joined += (joined.empty() ? "" : " ") + e;
  return "unrecognized arguments: " + joined;
}

}  // namespace cpm
