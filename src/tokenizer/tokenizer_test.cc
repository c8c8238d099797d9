// Unit tests of Tokenizer: MiniCPM4 facts, API details (TokenBytes, specials, eos union),
// added-token flags, config handling and load errors, thread safety.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <thread>

#include "tokenizer/test_util.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

using namespace tokenizer_test;
using nlohmann::json;

std::unique_ptr<Tokenizer> LoadOrDie(const std::filesystem::path& dir) {
  auto tok = Tokenizer::Load(dir.string());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

std::filesystem::path TinyDir(const std::string& name, TinyTokenizerFamily family) {
  const auto dir = FreshDir(name);
  EXPECT_TRUE(WriteTinyTokenizer(dir.string(), family, nullptr).ok());
  return dir;
}

// Rewrites one JSON file of `dir` through `edit`.
template <typename F>
void EditJson(const std::filesystem::path& file, F edit) {
  json j = json::parse(ReadText(file));
  edit(j);
  WriteText(file, j.dump(1));
}

class MiniCpm4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(MiniCpm4Dir() / "tokenizer.model")) {
      GTEST_SKIP() << "shared/models/MiniCPM4-0.5B not present";
    }
    tok_ = LoadOrDie(MiniCpm4Dir());
    ASSERT_NE(tok_, nullptr);
  }
  std::unique_ptr<Tokenizer> tok_;
};

// The example of ../shared/models/README.md: BOS comes from the tokenizer, the template's
// special tokens are single ids, "\n" is the user-defined piece 5.
TEST_F(MiniCpm4Test, ChatPromptEncodesAsTransformersDoes) {
  EXPECT_EQ(tok_->Encode("<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"),
            (std::vector<int32_t>{1, 73441, 1836, 5, 23523, 73440, 5, 73441, 43686, 5}));
}

TEST_F(MiniCpm4Test, NoDummyPrefixAndAtomicUserDefinedPieces) {
  const auto ids = tok_->Encode("Hello world", false);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(tok_->IdToToken(ids[0]), "Hello");
  EXPECT_EQ(tok_->IdToToken(ids[1]), "\xE2\x96\x81world");
  EXPECT_EQ(tok_->TokenBytes(ids[1]), " world");
  EXPECT_EQ(tok_->Encode("\n", false), std::vector<int32_t>{5});
  EXPECT_EQ(tok_->Encode("...", false).size(), 1u);
}

TEST_F(MiniCpm4Test, SettingsFromConfigs) {
  EXPECT_EQ(tok_->vocab_size(), 73448);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_ids(), (std::vector<int32_t>{73440, 2}));
  EXPECT_EQ(tok_->pad_id(), std::nullopt);
  EXPECT_EQ(tok_->bos_token(), "<s>");
  EXPECT_EQ(tok_->eos_token(), "<|im_end|>");
  EXPECT_NE(tok_->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_TRUE(tok_->IsSpecial(73441));
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_FALSE(tok_->IsSpecial(5));
  EXPECT_EQ(tok_->TokenToId("<|fim_suffix|>"), 73447);
  EXPECT_EQ(tok_->TokenToId("no such piece"), std::nullopt);
  EXPECT_EQ(tok_->IdToToken(73440), "<|im_end|>");
  EXPECT_EQ(tok_->IdToToken(1089 + 0x0A), "<0x0A>");
  EXPECT_EQ(tok_->TokenBytes(1089 + 0xE4), "\xE4");  // byte fallback: a partial UTF-8 sequence
}

TEST_F(MiniCpm4Test, DecodeRoundTripsAndSkipsSpecials) {
  const std::string text = "<|im_start|>user\n  Tabs\tand 😀 e\xCC\x81<|im_end|>";
  const auto ids = tok_->Encode(text);
  EXPECT_EQ(tok_->Decode(ids, false), "<s>" + text);
  EXPECT_EQ(tok_->Decode(ids, true), "user\n  Tabs\tand 😀 e\xCC\x81");
}

TEST(TokenizerTest, Qwen3ByteLevelDetails) {
  if (!std::filesystem::exists(NpmModelDir("qwen3"))) GTEST_SKIP() << "npm models not present";
  auto tok = LoadOrDie(NpmModelDir("qwen3"));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  EXPECT_EQ(tok->IdToToken(1879), "\xC4\xA0world");
  EXPECT_EQ(tok->TokenBytes(1879), " world");
  const auto e4 = tok->TokenToId("\xC3\xA4");  // "ä" stands for byte 0xE4
  ASSERT_TRUE(e4.has_value());
  EXPECT_EQ(tok->TokenBytes(*e4), "\xE4");
  EXPECT_EQ(tok->Encode("<think>"), std::vector<int32_t>{151667});
  EXPECT_FALSE(tok->IsSpecial(151667));
  EXPECT_TRUE(tok->IsSpecial(151645));
  EXPECT_EQ(tok->vocab_size(), 151669);
  EXPECT_EQ(tok->bos_id(), std::nullopt);
}

TEST(TokenizerTest, AddedTokenStripFlags) {
  const auto dir = TinyDir("strip_flags", TinyTokenizerFamily::kSentencePieceBpe);
  auto base = LoadOrDie(dir);
  ASSERT_NE(base, nullptr);
  const int32_t im_end = *base->TokenToId("<|im_end|>");
  const int32_t im_start = *base->TokenToId("<|im_start|>");
  EditJson(dir / "tokenizer.json", [&](json& j) {
    for (auto& t : j["added_tokens"]) {
      if (t["content"] == "<|im_end|>") t["lstrip"] = t["rstrip"] = true;
      if (t["content"] == "<|im_start|>") t["single_word"] = true;
    }
  });
  std::filesystem::remove(dir / "tokenizer_config.json");  // its copy would win otherwise
  auto tok = LoadOrDie(dir);
  ASSERT_NE(tok, nullptr);
  std::vector<int32_t> want = base->Encode("a", false);
  want.push_back(im_end);
  for (int32_t id : base->Encode("b", false)) want.push_back(id);
  EXPECT_EQ(tok->Encode("a \t <|im_end|>  b", false), want);
  // single_word: only matched between non-word characters.
  const auto glued = tok->Encode("x<|im_start|>y", false);
  EXPECT_EQ(std::count(glued.begin(), glued.end(), im_start), 0);
  const auto spaced = tok->Encode("x <|im_start|> y", false);
  EXPECT_EQ(std::count(spaced.begin(), spaced.end(), im_start), 1);
}

TEST(TokenizerTest, AddBosEosFromConfigOverrideTemplate) {
  const auto dir = TinyDir("add_eos", TinyTokenizerFamily::kSentencePieceBpe);
  EditJson(dir / "tokenizer_config.json", [](json& j) {
    j["add_bos_token"] = false;
    j["add_eos_token"] = true;
  });
  auto tok = LoadOrDie(dir);
  ASSERT_NE(tok, nullptr);
  const auto ids = tok->Encode("hi");
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), 1);
  EXPECT_EQ(ids.back(), *tok->TokenToId("<|im_end|>"));
}

TEST(TokenizerTest, ChatTemplateFileWinsOverConfig) {
  const auto dir = TinyDir("template_file", TinyTokenizerFamily::kSentencePieceBpe);
  WriteText(dir / "chat_template.jinja", "{{ messages }}");
  auto tok = LoadOrDie(dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->chat_template(), "{{ messages }}");
}

TEST(TokenizerTest, PretokenizeRegexOverride) {
  const auto dir = TinyDir("regex_override", TinyTokenizerFamily::kByteLevelBpe);
  auto plain = LoadOrDie(dir);
  // A regex that isolates every character forbids all merges across characters.
  EditJson(dir / "tokenizer_config.json", [](json& j) { j["pretokenize_regex"] = "."; });
  auto tok = LoadOrDie(dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_LT(plain->Encode("Hello").size(), 5u);
  EXPECT_EQ(tok->Encode("Hello").size(), 5u);
}

TEST(TokenizerTest, LoadErrorsNameFileAndField) {
  EXPECT_EQ(Tokenizer::Load(FreshDir("empty").string()).status().code(), StatusCode::kNotFound);

  auto dir = TinyDir("broken_json", TinyTokenizerFamily::kByteLevelBpe);
  WriteText(dir / "tokenizer.json", "{ not json");
  auto s = Tokenizer::Load(dir.string()).status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tokenizer.json"), std::string::npos) << s.message();

  dir = TinyDir("bad_bos_flag", TinyTokenizerFamily::kSentencePieceBpe);
  EditJson(dir / "tokenizer_config.json", [](json& j) { j["add_bos_token"] = "yes"; });
  s = Tokenizer::Load(dir.string()).status();
  EXPECT_NE(s.message().find("tokenizer_config.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("add_bos_token"), std::string::npos) << s.message();

  dir = TinyDir("bad_eos", TinyTokenizerFamily::kSentencePieceBpe);
  EditJson(dir / "generation_config.json", [](json& j) { j["eos_token_id"] = "x"; });
  s = Tokenizer::Load(dir.string()).status();
  EXPECT_NE(s.message().find("generation_config.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("eos_token_id"), std::string::npos) << s.message();

  dir = TinyDir("bad_merge", TinyTokenizerFamily::kSentencePieceBpe);
  EditJson(dir / "tokenizer.json", [](json& j) { j["model"]["merges"][0] = "nosuch token"; });
  s = Tokenizer::Load(dir.string()).status();
  EXPECT_NE(s.message().find("merges[0]"), std::string::npos) << s.message();

  // Ids index dense tables: negative or absurd ones are refused, naming the entry (a negative
  // one wrote before the table, a huge one allocated gigabytes or wrapped to a real id).
  for (const int64_t bad : {int64_t{-5}, int64_t{1} << 40, int64_t{100000000}}) {
    dir = TinyDir("bad_vocab_id", TinyTokenizerFamily::kByteLevelBpe);
    EditJson(dir / "tokenizer.json", [&](json& j) { j["model"]["vocab"]["zzqq"] = bad; });
    s = Tokenizer::Load(dir.string()).status();
    EXPECT_NE(s.message().find("tokenizer.json: model.vocab['zzqq']: id " + std::to_string(bad) +
                               " is not an integer in [0, 16777216)"),
              std::string::npos) << s.message();
    dir = TinyDir("bad_added_id", TinyTokenizerFamily::kByteLevelBpe);
    EditJson(dir / "tokenizer.json", [&](json& j) { j["added_tokens"][0]["id"] = bad; });
    s = Tokenizer::Load(dir.string()).status();
    EXPECT_NE(s.message().find("field 'added_tokens[0].id'"), std::string::npos) << s.message();
  }

  dir = TinyDir("bad_type", TinyTokenizerFamily::kByteLevelBpe);
  EditJson(dir / "tokenizer.json", [](json& j) { j["decoder"]["type"] = "Frobnicate"; });
  s = Tokenizer::Load(dir.string()).status();
  EXPECT_NE(s.message().find("Frobnicate"), std::string::npos) << s.message();
}

TEST(TokenizerTest, MergesInStringFormatEqualArrayFormat) {
  const auto dir = TinyDir("string_merges", TinyTokenizerFamily::kByteLevelBpe);
  auto arrays = LoadOrDie(dir);
  EditJson(dir / "tokenizer.json", [](json& j) {
    for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  });
  auto strings = LoadOrDie(dir);
  ASSERT_NE(strings, nullptr);
  for (const auto& text : Corpus()) EXPECT_EQ(arrays->Encode(text), strings->Encode(text));
}

TEST(TokenizerTest, InvalidUtf8InputIsRepaired) {
  auto tok = LoadOrDie(TinyDir("bad_utf8", TinyTokenizerFamily::kByteLevelBpe));
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->Encode("a\xFF" "b"), tok->Encode("a\xEF\xBF\xBD" "b"));
  EXPECT_EQ(tok->Decode(tok->Encode("a\xFF" "b"), false), "a\xEF\xBF\xBD" "b");
}

TEST(TokenizerTest, ConcurrentEncodeMatchesSequential) {
  auto tok = LoadOrDie(TinyDir("threads", TinyTokenizerFamily::kByteLevelBpe));
  ASSERT_NE(tok, nullptr);
  const auto corpus = Corpus();
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : corpus) want.push_back(tok->Encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < corpus.size(); ++i) {
          if (tok->Encode(corpus[(i + w * 7) % corpus.size()]) != want[(i + w * 7) % corpus.size()]) {
            ++mismatches[w];
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(Utf8Test, LossyFollowsMaximalSubpartRule) {
  EXPECT_EQ(Utf8Lossy("a\xE4\xBD"), "a\xEF\xBF\xBD");                   // one truncated char
  EXPECT_EQ(Utf8Lossy("\xE4\x41"), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(Utf8Lossy("\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");         // two stray bytes
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_TRUE(IsValidUtf8("你好😀"));
  EXPECT_FALSE(IsValidUtf8("\xF0\x9F\x98"));
}

}  // namespace
}  // namespace cpm
