// Tests of WriteTinyTokenizer: layout of ids, determinism, configs and real templates.
#include "tokenizer/tiny_tokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/test_util.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

using namespace tokenizer_test;

std::unique_ptr<Tokenizer> WriteAndLoad(TinyTokenizerFamily family, const std::string& name,
                                        int32_t* vocab_size = nullptr) {
  const auto dir = FreshDir(name);
  int32_t n = 0;
  const Status s = WriteTinyTokenizer(dir.string(), family, &n);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (vocab_size != nullptr) *vocab_size = n;
  auto tok = Tokenizer::Load(dir.string());
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return tok.ok() ? std::move(tok).value() : nullptr;
}

TEST(TinyTokenizerTest, SentencePieceFamilyLayout) {
  int32_t n = 0;
  auto tok = WriteAndLoad(TinyTokenizerFamily::kSentencePieceBpe, "sp_layout", &n);
  ASSERT_NE(tok, nullptr);
  EXPECT_LE(n, 1000);
  EXPECT_GE(n, 600);  // a few hundred merges beyond 259 fixed tokens
  EXPECT_EQ(tok->vocab_size(), n);
  EXPECT_EQ(tok->TokenToId("<unk>"), 0);
  EXPECT_EQ(tok->TokenToId("<s>"), 1);
  EXPECT_EQ(tok->TokenToId("</s>"), 2);
  EXPECT_EQ(tok->TokenToId("<0x00>"), 3);
  EXPECT_EQ(tok->TokenToId("<0xFF>"), 258);
  const char* added[] = {"<|im_end|>", "<|im_start|>", "<|tool_call|>", "<|execute_start|>",
                         "<|execute_end|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"};
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(tok->TokenToId(added[i]), n - 8 + i) << added[i];
    EXPECT_TRUE(tok->IsSpecial(n - 8 + i));
  }
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->bos_token(), "<s>");
  EXPECT_EQ(tok->eos_token(), "<|im_end|>");
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{n - 8, 2}));
  // BOS added; real words become multi-character tokens; no leading "▁" (as MiniCPM4).
  const auto ids = tok->Encode("Hello world, 你好");
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_LE(ids.size(), 6u);
  EXPECT_EQ(tok->IdToToken(ids[1]), "Hello");
  EXPECT_EQ(tok->IdToToken(ids[2]), "\xE2\x96\x81world");
  EXPECT_EQ(tok->Decode(ids, true), "Hello world, 你好");
  // Rare characters fall back to bytes.
  EXPECT_EQ(tok->Encode("\xF0\x9F\xA6\x80", false),
            (std::vector<int32_t>{3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x80}));
}

TEST(TinyTokenizerTest, ByteLevelFamilyLayout) {
  int32_t n = 0;
  auto tok = WriteAndLoad(TinyTokenizerFamily::kByteLevelBpe, "bl_layout", &n);
  ASSERT_NE(tok, nullptr);
  EXPECT_LE(n, 1000);
  EXPECT_GE(n, 600);
  const char* added[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>",
                         "<|video_pad|>", "<image>", "</image>", "<slice>", "</slice>",
                         "<image_id>", "</image_id>", "<think>", "</think>", "<tool_call>",
                         "</tool_call>", "<|vision_start|>", "<|vision_end|>"};
  for (int i = 0; i < 17; ++i) {
    const int32_t id = n - 17 + i;
    EXPECT_EQ(tok->TokenToId(added[i]), id) << added[i];
    const bool non_special = std::string(added[i]).find('|') == std::string::npos &&
                             (std::string(added[i]).find("think") != std::string::npos ||
                              std::string(added[i]).find("tool_call") != std::string::npos);
    EXPECT_EQ(tok->IsSpecial(id), !non_special) << added[i];
  }
  const int32_t eot = n - 17, im_start = n - 16, im_end = n - 15;
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{im_end, eot}));
  EXPECT_EQ(tok->bos_id(), im_start);
  EXPECT_EQ(tok->pad_id(), eot);
  // No BOS for byte-level; <think> survives skip_special_tokens because it is not special.
  const auto ids = tok->Encode("<think>\nok</think>Hello world<|im_end|>");
  EXPECT_EQ(ids[0], n - 6);
  EXPECT_EQ(tok->Decode(ids, true), "<think>\nok</think>Hello world");
  EXPECT_EQ(tok->IdToToken(tok->Encode("Hello world")[1]), "\xC4\xA0world");  // "Ġworld"
  EXPECT_EQ(tok->TokenBytes(tok->Encode("Hello world")[1]), " world");
}

TEST(TinyTokenizerTest, OutputIsDeterministic) {
  for (auto family : {TinyTokenizerFamily::kSentencePieceBpe, TinyTokenizerFamily::kByteLevelBpe}) {
    const auto a = FreshDir(std::string("det_a_") + ToString(family));
    const auto b = FreshDir(std::string("det_b_") + ToString(family));
    ASSERT_TRUE(WriteTinyTokenizer(a.string(), family, nullptr).ok());
    ASSERT_TRUE(WriteTinyTokenizer(b.string(), family, nullptr).ok());
    for (const auto& entry : std::filesystem::directory_iterator(a)) {
      EXPECT_EQ(ReadText(entry.path()), ReadText(b / entry.path().filename()))
          << entry.path().filename();
    }
  }
}

TEST(TinyTokenizerTest, CarriesTheRealChatTemplates) {
  auto sp = WriteAndLoad(TinyTokenizerFamily::kSentencePieceBpe, "sp_tpl");
  auto bl = WriteAndLoad(TinyTokenizerFamily::kByteLevelBpe, "bl_tpl");
  const auto bl_dir = FreshDir("bl_tpl_files");
  ASSERT_TRUE(WriteTinyTokenizer(bl_dir.string(), TinyTokenizerFamily::kByteLevelBpe, nullptr).ok());
  ASSERT_NE(sp, nullptr);
  ASSERT_NE(bl, nullptr);
  EXPECT_NE(sp->chat_template().find("<|im_start|>"), std::string::npos);
  EXPECT_NE(bl->chat_template().find("enable_thinking"), std::string::npos);
  if (!std::filesystem::exists(MiniCpm4Dir())) GTEST_SKIP() << "shared/models not present";
  const auto m4 = nlohmann::json::parse(ReadText(MiniCpm4Dir() / "tokenizer_config.json"));
  EXPECT_EQ(sp->chat_template(), m4["chat_template"].get<std::string>());
  EXPECT_EQ(bl->chat_template(), ReadText(MiniCpmV46Dir() / "chat_template.jinja"));
  const auto v46 = nlohmann::json::parse(ReadText(MiniCpmV46Dir() / "tokenizer_config.json"));
  const auto written = nlohmann::json::parse(
      ReadText(bl_dir / "tokenizer_config.json"));
  EXPECT_EQ(written["pretokenize_regex"], v46["pretokenize_regex"]);
  EXPECT_EQ(written["extra_special_tokens"], v46["extra_special_tokens"]);
}

TEST(TinyTokenizerTest, MissingDirectoryIsAnError) {
  EXPECT_EQ(WriteTinyTokenizer("/nonexistent/cpm_tiny", TinyTokenizerFamily::kByteLevelBpe, nullptr)
                .code(),
            StatusCode::kNotFound);
}

}  // namespace
}  // namespace cpm
