// Tests of IncrementalDetokenizer: deltas are always whole code points and add up to Decode().
#include "tokenizer/incremental_detokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/test_util.h"
#include "tokenizer/tiny_tokenizer.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

using namespace tokenizer_test;
using nlohmann::json;

// Streams `ids` and returns the deltas; fails the test if one is not valid UTF-8.
std::vector<std::string> Stream(const Tokenizer& tok, std::span<const int32_t> ids, bool skip,
                                std::span<const int32_t> prompt = {}) {
  IncrementalDetokenizer detok(tok, skip, prompt);
  std::vector<std::string> out;
  for (int32_t id : ids) out.push_back(detok.Push(id));
  for (const auto& d : out) EXPECT_TRUE(IsValidUtf8(d)) << json(Utf8Lossy(d)).dump();
  return out;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string s;
  for (const auto& p : parts) s += p;
  return s;
}

struct Case {
  std::string name;
  std::filesystem::path dir;
};

// The tiny tokenizers, a Llama-style variant of the SentencePiece one (Prepend "▁" + Strip
// decoder, which has first-token effects), and the real ones when present.
std::vector<Case> Tokenizers() {
  std::vector<Case> cases;
  auto sp = FreshDir("detok_sp"), bl = FreshDir("detok_bl"), llama = FreshDir("detok_llama");
  EXPECT_TRUE(WriteTinyTokenizer(sp.string(), TinyTokenizerFamily::kSentencePieceBpe, nullptr).ok());
  EXPECT_TRUE(WriteTinyTokenizer(bl.string(), TinyTokenizerFamily::kByteLevelBpe, nullptr).ok());
  EXPECT_TRUE(
      WriteTinyTokenizer(llama.string(), TinyTokenizerFamily::kSentencePieceBpe, nullptr).ok());
  json j = json::parse(ReadText(llama / "tokenizer.json"));
  j["normalizer"] = json{{"type", "Sequence"},
                         {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                          j["normalizer"]}}};
  j["decoder"]["decoders"].push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  WriteText(llama / "tokenizer.json", j.dump());
  cases = {{"tiny_sp", sp}, {"tiny_bl", bl}, {"tiny_llama_style", llama}};
  if (std::filesystem::exists(MiniCpm4Dir())) cases.push_back({"minicpm4", MiniCpm4Dir()});
  return cases;
}

class DetokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const auto& c : Tokenizers()) {
      auto tok = Tokenizer::Load(c.dir.string());
      ASSERT_TRUE(tok.ok()) << c.name << ": " << tok.status().ToString();
      toks_->emplace_back(c.name, std::move(tok).value());
    }
  }
  static void TearDownTestSuite() { toks_->clear(); }
  static std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>>* toks_;
};
std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>>* DetokenizerTest::toks_ =
    new std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>>();

TEST_F(DetokenizerTest, ConcatenationEqualsDecodeOverCorpus) {
  const auto corpus = Corpus();
  ASSERT_GT(corpus.size(), 100u);
  for (const auto& [name, tok] : *toks_) {
    for (const auto& text : corpus) {
      const auto ids = tok->Encode(text, false);
      for (bool skip : {false, true}) {
        EXPECT_EQ(Join(Stream(*tok, ids, skip)), tok->Decode(ids, skip))
            << name << " skip=" << skip << " text " << json(text).dump();
      }
    }
  }
}

// After a prompt the stream is what the generated ids add to the prompt's text, so the
// SentencePiece "▁" of the first generated word is a space; without a prompt it is stripped.
TEST_F(DetokenizerTest, LeadingSpaceAtStartVersusAfterPrompt) {
  for (const auto& [name, tok] : *toks_) {
    const auto prompt = tok->Encode("<|im_start|>assistant\nHello", false);
    const auto full = tok->Encode("<|im_start|>assistant\nHello world, 你好 😀!", false);
    ASSERT_GT(full.size(), prompt.size()) << name;
    const std::span<const int32_t> gen(full.begin() + prompt.size(), full.end());
    const std::string with_prompt = Join(Stream(*tok, gen, true, prompt));
    EXPECT_EQ(with_prompt, " world, 你好 😀!") << name;
    const std::string alone = Join(Stream(*tok, gen, true));
    EXPECT_EQ(alone, tok->Decode(gen, true)) << name;
  }
}

TEST_F(DetokenizerTest, HoldsBackSplitCharacters) {
  for (const auto& [name, tok] : *toks_) {
    // A rare emoji is several byte-fallback or byte-level tokens in the small vocabularies.
    const std::string text = "a\xF0\x9F\xA6\x80" "b";
    const auto ids = tok->Encode(text, false);
    const auto deltas = Stream(*tok, ids, false);
    EXPECT_EQ(Join(deltas), text) << name;
    for (const auto& d : deltas) {
      EXPECT_TRUE(d.find("\xEF\xBF\xBD") == std::string::npos) << name << " emitted U+FFFD";
    }
  }
  // In the tiny SentencePiece tokenizer the emoji is exactly 4 byte tokens: 3 pushes say nothing.
  const auto& tok = *(*toks_)[0].second;
  const auto ids = tok.Encode("\xF0\x9F\xA6\x80", false);
  ASSERT_EQ(ids.size(), 4u);
  IncrementalDetokenizer detok(tok, false);
  EXPECT_EQ(detok.Push(ids[0]), "");
  EXPECT_EQ(detok.Push(ids[1]), "");
  EXPECT_EQ(detok.Push(ids[2]), "");
  EXPECT_EQ(detok.Push(ids[3]), "\xF0\x9F\xA6\x80");
}

// A character the prompt begins and the generated ids finish is emitted whole with the id that
// finishes it (vLLM primes its DecodeStream with the prompt's last ids); one the output leaves
// unfinished is never emitted (vLLM's detokenizer holds it back and never flushes).
TEST_F(DetokenizerTest, CharacterSplitAcrossThePromptAndTheOutput) {
  int checked = 0;
  for (const auto& [name, tok] : *toks_) {
    const std::string emoji = "\xF0\x9F\xA6\x80";
    const auto ids = tok->Encode("hello" + emoji, false);
    const auto head = tok->Encode("hello", false);
    // Where the emoji is several byte tokens after those of "hello" (not in MiniCPM4's vocabulary).
    if (ids.size() < head.size() + 2 || !std::equal(head.begin(), head.end(), ids.begin())) {
      continue;
    }
    ++checked;
    for (size_t cut = head.size() + 1; cut < ids.size(); ++cut) {
      const std::span<const int32_t> all(ids);
      IncrementalDetokenizer detok(*tok, false, all.first(cut));
      std::string out;
      for (size_t i = cut; i < ids.size(); ++i) {
        const std::string d = detok.Push(ids[i]);
        EXPECT_EQ(d, i + 1 == ids.size() ? emoji : "") << name << " cut " << cut << " id " << i;
        out += d;
      }
      EXPECT_EQ(out, emoji) << name << " cut " << cut;
    }
    // Generation ends inside the emoji: nothing of it comes out.
    IncrementalDetokenizer detok(*tok, false, std::span(head));
    for (size_t i = head.size(); i + 1 < ids.size(); ++i) EXPECT_EQ(detok.Push(ids[i]), "") << name;
  }
  EXPECT_GE(checked, 2);  // the tiny SentencePiece and byte-level tokenizers
}

TEST_F(DetokenizerTest, SpecialTokensOnAndOff) {
  for (const auto& [name, tok] : *toks_) {
    const auto ids = tok->Encode("Hi<|im_end|> there<|im_start|>\n", false);
    EXPECT_EQ(Join(Stream(*tok, ids, true)), tok->Decode(ids, true)) << name;
    EXPECT_EQ(Join(Stream(*tok, ids, false)), tok->Decode(ids, false)) << name;
    const auto im_end = tok->TokenToId("<|im_end|>");
    if (!im_end || !tok->IsSpecial(*im_end)) continue;  // plain text in Llama 2's vocabulary
    EXPECT_NE(Join(Stream(*tok, ids, false)).find("<|im_end|>"), std::string::npos) << name;
    EXPECT_EQ(Join(Stream(*tok, ids, true)).find("<|im_end|>"), std::string::npos) << name;
  }
}

// The large real vocabularies (slow to load, so one test case) over the corpus.
TEST(DetokenizerRealTest, Qwen3AndLlama2OverCorpus) {
  const auto corpus = Corpus();
  int checked = 0;
  for (const char* name : {"qwen3", "llama2"}) {
    if (!std::filesystem::exists(NpmModelDir(name))) continue;
    auto tok = Tokenizer::Load(NpmModelDir(name).string());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    for (const auto& text : corpus) {
      const auto ids = (*tok)->Encode(text, false);
      for (bool skip : {false, true}) {
        EXPECT_EQ(Join(Stream(**tok, ids, skip)), (*tok)->Decode(ids, skip))
            << name << " skip=" << skip << " text " << json(text).dump();
      }
      const auto prompt = (*tok)->Encode("User: hi\nAssistant:", false);
      std::vector<int32_t> all = prompt;
      all.insert(all.end(), ids.begin(), ids.end());
      const std::string prompt_text = (*tok)->Decode(prompt, false);
      const std::string all_text = (*tok)->Decode(all, false);
      ASSERT_EQ(all_text.compare(0, prompt_text.size(), prompt_text), 0);
      EXPECT_EQ(Join(Stream(**tok, ids, false, prompt)), all_text.substr(prompt_text.size()))
          << name << " after prompt, text " << json(text).dump();
    }
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "npm models not present";
}

// Random well-formed token sequences (concatenations of encoded words), as a model would emit.
TEST_F(DetokenizerTest, RandomSequencesOfEncodedPieces) {
  const auto corpus = Corpus();
  std::mt19937 rng(1234);
  for (const auto& [name, tok] : *toks_) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<int32_t> ids;
      for (int k = 0; k < 8; ++k) {
        const auto piece = tok->Encode(corpus[rng() % corpus.size()], false);
        ids.insert(ids.end(), piece.begin(), piece.end());
      }
      const bool skip = trial % 2 == 0;
      EXPECT_EQ(Join(Stream(*tok, ids, skip)), tok->Decode(ids, skip)) << name << " trial " << trial;
    }
  }
}

}  // namespace
}  // namespace cpm
