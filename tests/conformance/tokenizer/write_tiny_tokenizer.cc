// Writes a tiny test tokenizer (cpm::WriteTinyTokenizer) into a directory, so that scripts can
// feed it to the reference libraries.
// Usage: write_tiny_tokenizer <sentencepiece|bytelevel|tiny_metaspace|tiny_bytelevel_gpt2> <dir>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tiny_variants.h"
#include "tokenizer/tiny_tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <sentencepiece|bytelevel> <dir>\n", argv[0]);
    return 2;
  }
  const std::string kind = argv[1];
  const auto family = kind == "bytelevel" ? cpm::TinyTokenizerFamily::kByteLevelBpe
                                          : cpm::TinyTokenizerFamily::kSentencePieceBpe;
  std::filesystem::create_directories(argv[2]);
  int32_t vocab_size = 0;
  const cpm::Status s = kind.rfind("tiny_", 0) == 0
                            ? cpm::WriteTinyVariant(kind, argv[2])
                            : cpm::WriteTinyTokenizer(argv[2], family, &vocab_size);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("%s vocab_size=%d\n", kind.c_str(), vocab_size);
  return 0;
}
