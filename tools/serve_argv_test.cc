// `cpmserve serve`'s argv as vLLM's parser reads it (serve_argv.h).
#include "serve_argv.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cpm {
namespace {

std::vector<std::string> Translate(std::vector<std::string> args) {
  args.insert(args.begin(), {"cpmserve", "serve"});
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::vector<std::string> out = TranslateServeArgv(static_cast<int>(argv.size()), argv.data());
  return {out.begin() + 2, out.end()};
}

TEST(ServeArgv, ListFlagsKeepTheirLastOccurrence) {
  EXPECT_EQ(Translate({"m", "--served-model-name", "a", "b", "--port", "1",
                       "--served_model_name=c", "--api-key", "k"}),
            (std::vector<std::string>{"m", "--port", "1", "--served-model-name=c", "--api-key",
                                      "k"}));
  // Past the first bare "--" nothing is rewritten, another "--" included.
  EXPECT_EQ(Translate({"--api-key", "a", "--", "--api-key", "b", "--", "--api-key", "c"}),
            (std::vector<std::string>{"--api-key", "a", "--", "--api-key", "b", "--",
                                      "--api-key", "c"}));
}

TEST(ServeArgv, AliasesUnderscoresAndDottedKeys) {
  EXPECT_EQ(Translate({"-tp", "1", "--max_model_len=8k", "--limit-mm-per-prompt.image", "2"}),
            (std::vector<std::string>{"--tensor-parallel-size", "1", "--max-model-len=8k",
                                      "--limit-mm-per-prompt", R"({"image":2})"}));
}

// argparse's abbreviations: a unique prefix is its option, an ambiguous one argparse's error.
TEST(ServeArgv, AbbreviationsAsArgparse) {
  const std::vector<std::string> names = {"max-model-len", "max-num-seqs", "max-num-batched-tokens",
                                          "gpu-memory-utilization", "port"};
  std::vector<std::string> args = {"m", "--max-model", "128", "--gpu-memory=0.5", "--port", "1",
                                   "--", "--max-model"};
  EXPECT_EQ(ExpandAbbreviations(&args, 0, names), "");
  EXPECT_EQ(args, (std::vector<std::string>{"m", "--max-model-len", "128",
                                            "--gpu-memory-utilization=0.5", "--port", "1", "--",
                                            "--max-model"}));
  args = {"--max-num", "4"};
  EXPECT_EQ(ExpandAbbreviations(&args, 0, names),
            "ambiguous option: --max-num could match --max-num-seqs, --max-num-batched-tokens");
  args = {"--nope", "1"};
  EXPECT_EQ(ExpandAbbreviations(&args, 0, names), "");  // unrecognized: CLI11 says so
  EXPECT_EQ(args[0], "--nope");
}

}  // namespace
}  // namespace cpm
