// The reasoning parser and the escaped-newline normalizer: the behaviour of vLLM's minicpmv
// parser on hand-written outputs, and streaming (every split point, and character by
// character) always releasing exactly what the one-shot form gives.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/escaped_newline_normalizer.h"
#include "server/reasoning_parser.h"

namespace cpm {
namespace {

struct Split {
  std::string reasoning, content;
};

// Feeds `pieces` in order (the last with final = true) and concatenates the deltas.
Split RunParser(bool thinking, const std::vector<std::string>& pieces,
                const std::string& name = "minicpmv") {
  auto p = MakeReasoningParser(name, thinking);
  Split s;
  for (size_t i = 0; i < pieces.size(); ++i) {
    ReasoningDelta d = p->Feed(pieces[i], i + 1 == pieces.size());
    s.reasoning += d.reasoning;
    s.content += d.content;
  }
  return s;
}

Split OneShot(bool thinking, const std::string& text, const std::string& name = "minicpmv") {
  return RunParser(thinking, {text}, name);
}

std::string Normalize(const std::vector<std::string>& pieces) {
  EscapedNewlineNormalizer n;
  std::string out;
  for (size_t i = 0; i < pieces.size(); ++i) out += n.Feed(pieces[i], i + 1 == pieces.size());
  return out;
}

// Texts that exercise every marker, escape and span, including their halves at the ends.
const std::vector<std::string>& Corpus() {
  static const std::vector<std::string> corpus = {
      "plain answer",
      "step one\\nstep two\n</think>\n\nThe answer\\r\\nis 4<|im_end|>",
      "<think>stray</think>after</think>more",
      "r<tool_call>\n<function=f>\n</function>\n</tool_call>",
      "<think>hidden\\n</think>Answer\\n",
      "Ans</think>wer<think>tail never closed",
      "<|reserved_12|>a<reserved_15>b<reserved_16>c<|reserved_11|>",
      "<b>bold</b> a < b <thinking> <",
      "code: ```\nx = \"a\\nb\"\n``` then\\n `inline\\n` and $x\\ny$ $$y\\n$$ \\(p\\nq\\) \\[r\\ns\\]",
      "double \\\\n stays, \\\\\\n too, \\t stays, lone \\",
      "ends in half escape \\r\\",
      "cost $5\\nand more",
      "``",
      "</think",
      "<|im_end",
  };
  return corpus;
}

TEST(EscapedNewlineNormalizer, RecoversNewlinesOutsideProtectedSpans) {
  EXPECT_EQ(RecoverEscapedNewlines("a\\nb"), "a\nb");
  EXPECT_EQ(RecoverEscapedNewlines("a\\r\\nb\\rc"), "a\nb\nc");
  EXPECT_EQ(RecoverEscapedNewlines("`a\\nb` c\\nd"), "`a\\nb` c\nd");
  EXPECT_EQ(RecoverEscapedNewlines("```\nx\\ny\n```\\n"), "```\nx\\ny\n```\n");
  EXPECT_EQ(RecoverEscapedNewlines("$a\\nb$ $$c\\nd$$\\n"), "$a\\nb$ $$c\\nd$$\n");
  EXPECT_EQ(RecoverEscapedNewlines("\\(a\\nb\\) \\[c\\nd\\]\\n"), "\\(a\\nb\\) \\[c\\nd\\]\n");
  EXPECT_EQ(RecoverEscapedNewlines("\\\\n \\t \\"), "\\\\n \\t \\");
  // An unterminated span protects the rest of the text, as in vLLM.
  EXPECT_EQ(RecoverEscapedNewlines("cost $5\\nmore"), "cost $5\\nmore");
}

TEST(EscapedNewlineNormalizer, EverySplitGivesTheOneShotResult) {
  for (const std::string& text : Corpus()) {
    const std::string whole = RecoverEscapedNewlines(text);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      EXPECT_EQ(Normalize({text.substr(0, cut), text.substr(cut)}), whole) << text << " @" << cut;
    }
    std::vector<std::string> chars;
    for (char c : text) chars.emplace_back(1, c);
    chars.emplace_back();
    EXPECT_EQ(Normalize(chars), whole) << text;
  }
}

TEST(ReasoningParser, ThinkingSplitsAtTheFirstThinkEnd) {
  Split s = OneShot(true, "step one\\nstep two\n</think>\n\nThe answer<|im_end|>");
  EXPECT_EQ(s.reasoning, "step one\nstep two\n");
  EXPECT_EQ(s.content, "\n\nThe answer");
  // A stray <think> while reasoning and a second </think> are dropped.
  s = OneShot(true, "<think>r</think>c</think>d");
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "cd");
  // Cut off while thinking: all reasoning.
  s = OneShot(true, "still thinking");
  EXPECT_EQ(s.reasoning, "still thinking");
  EXPECT_EQ(s.content, "");
  // <tool_call> ends reasoning; the call stays in the content.
  s = OneShot(true, "r<tool_call>x</tool_call>");
  EXPECT_EQ(s.reasoning, "r");
  EXPECT_EQ(s.content, "<tool_call>x</tool_call>");
}

TEST(ReasoningParser, NotThinkingHidesThinkSpans) {
  Split s = OneShot(false, "<think>hidden</think>Answer");
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Answer");
  EXPECT_EQ(OneShot(false, "Ans</think>wer").content, "Answer");
  EXPECT_EQ(OneShot(false, "Answer<think>unterminated tail").content, "Answer");
  EXPECT_EQ(OneShot(false, "<|reserved_12|>a<reserved_15>b<|im_end|>").content, "ab");
  EXPECT_EQ(OneShot(false, "<b>x</b> a < b <thinking> <").content, "<b>x</b> a < b <thinking> <");
  EXPECT_EQ(OneShot(false, "line\\nbreak").content, "line\nbreak");
  auto p = MakeReasoningParser("minicpmv", false);
  (void)p->Feed("plain", true);
  EXPECT_FALSE(p->saw_reasoning());
}

TEST(ReasoningParser, EverySplitGivesTheOneShotResult) {
  for (bool thinking : {false, true}) {
    for (const std::string& text : Corpus()) {
      const Split whole = OneShot(thinking, text);
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        const Split s = RunParser(thinking, {text.substr(0, cut), text.substr(cut)});
        EXPECT_EQ(s.reasoning, whole.reasoning) << thinking << " " << text << " @" << cut;
        EXPECT_EQ(s.content, whole.content) << thinking << " " << text << " @" << cut;
      }
      std::vector<std::string> chars;
      for (char c : text) chars.emplace_back(1, c);
      chars.emplace_back();
      const Split s = RunParser(thinking, chars);
      EXPECT_EQ(s.reasoning, whole.reasoning) << text;
      EXPECT_EQ(s.content, whole.content) << text;
    }
  }
}

TEST(ReasoningParser, HoldsBackOnlyWhatMayBeAMarker) {
  auto p = MakeReasoningParser("minicpmv", true);
  ReasoningDelta d = p->Feed("thinking </thi", false);
  EXPECT_EQ(d.reasoning, "thinking ");
  d = p->Feed("nk>answer", false);
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "answer");
}

TEST(ReasoningParser, PromptDecidesTheInitialState) {
  EXPECT_TRUE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(PromptOpensReasoning("<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptOpensReasoning("<think>\nx"));
}

// vLLM's qwen3 and deepseek_r1: reasoning up to the first </think> (a <think> dropped), the
// rest verbatim as content; qwen3 also ends at a <tool_call> that opens a call.
TEST(ReasoningParser, Qwen3AndDeepseekR1SplitAtTheFirstThinkEnd) {
  for (const std::string name : {"qwen3", "deepseek_r1"}) {
    Split s = OneShot(true, "<think>step\n</think>\n\nAnswer</think><|im_end|>", name);
    EXPECT_EQ(s.reasoning, "step\n") << name;  // no escape recovery, no swallowed markers
    EXPECT_EQ(s.content, "\n\nAnswer</think><|im_end|>") << name;
    s = OneShot(true, "cut off while thinking <thi", name);
    EXPECT_EQ(s.reasoning, "cut off while thinking <thi") << name;
    EXPECT_EQ(s.content, "") << name;
    // Started in content (the prompt closed the thinking): everything verbatim.
    s = OneShot(false, "<think>x</think>y", name);
    EXPECT_EQ(s.reasoning, "") << name;
    EXPECT_EQ(s.content, "<think>x</think>y") << name;
  }
  const std::string call = "plan<tool_call>\n<function=f>\n</function>\n</tool_call>";
  Split s = OneShot(true, call, "qwen3");
  EXPECT_EQ(s.reasoning, "plan");
  EXPECT_EQ(s.content, "<tool_call>\n<function=f>\n</function>\n</tool_call>");
  EXPECT_EQ(OneShot(true, call, "deepseek_r1").reasoning, call);
  // A <tool_call> that opens no call is reasoning text.
  EXPECT_EQ(OneShot(true, "about <tool_call> tags</think>x", "qwen3").reasoning,
            "about <tool_call> tags");
  for (const std::string name : {"qwen3", "deepseek_r1"}) {
    for (bool thinking : {false, true}) {
      for (const std::string& text : Corpus()) {
        const Split whole = OneShot(thinking, text, name);
        for (size_t cut = 0; cut <= text.size(); ++cut) {
          const Split p = RunParser(thinking, {text.substr(0, cut), text.substr(cut)}, name);
          EXPECT_EQ(p.reasoning, whole.reasoning) << name << " " << text << " @" << cut;
          EXPECT_EQ(p.content, whole.content) << name << " " << text << " @" << cut;
        }
      }
    }
  }
}

TEST(ReasoningParser, WhereEachParserStarts) {
  const std::string open = "<|im_start|>assistant\n<think>\n";
  const std::string closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const std::string plain = "<|im_start|>assistant\n";
  EXPECT_TRUE(OutputStartsInReasoning("minicpmv", open, false));
  EXPECT_FALSE(OutputStartsInReasoning("minicpmv", plain, false));
  for (const std::string name : {"qwen3", "deepseek_r1"}) {
    EXPECT_TRUE(OutputStartsInReasoning(name, open, false)) << name;
    EXPECT_TRUE(OutputStartsInReasoning(name, plain, false)) << name;  // the model may think
    EXPECT_FALSE(OutputStartsInReasoning(name, closed, false)) << name;
  }
  EXPECT_FALSE(OutputStartsInReasoning("qwen3", plain, true));  // enable_thinking false
  EXPECT_TRUE(OutputStartsInReasoning("deepseek_r1", plain, true));
}

// vLLM's count_reasoning_tokens: from after the first start marker (or from the first id when
// the output starts in reasoning) to the first end marker; nothing when neither applies.
TEST(ReasoningParser, CountReasoningTokens) {
  const ReasoningMarkerIds ids{7, 8};
  using V = std::vector<int32_t>;
  EXPECT_EQ(CountReasoningTokens(V{1, 2, 8, 3}, ids, true), 2);
  EXPECT_EQ(CountReasoningTokens(V{1, 2, 8, 3}, ids, false), 0);
  EXPECT_EQ(CountReasoningTokens(V{1, 7, 2, 3, 8, 4}, ids, false), 2);
  EXPECT_EQ(CountReasoningTokens(V{7, 2, 3}, ids, false), 2);    // cut off while thinking
  EXPECT_EQ(CountReasoningTokens(V{1, 2, 3}, ids, true), 3);
  EXPECT_EQ(CountReasoningTokens(V{8, 7, 1}, ids, true), 0);     // the end before the start
  EXPECT_EQ(CountReasoningTokens(V{}, ids, true), 0);
  EXPECT_EQ(CountReasoningTokens(V{1, 2}, ReasoningMarkerIds{}, true), 2);
  EXPECT_TRUE(CheckReasoningMarkerIds("deepseek_r1", ids).ok());
  EXPECT_FALSE(CheckReasoningMarkerIds("deepseek_r1", ReasoningMarkerIds{7, std::nullopt}).ok());
  EXPECT_TRUE(CheckReasoningMarkerIds("minicpmv", ReasoningMarkerIds{}).ok());
}

TEST(ReasoningParser, Names) {
  EXPECT_TRUE(ValidateReasoningParserName("minicpmv").ok());
  EXPECT_TRUE(ValidateReasoningParserName("qwen3").ok());
  EXPECT_TRUE(ValidateReasoningParserName("deepseek_r1").ok());
  EXPECT_TRUE(ValidateReasoningParserName("none").ok());
  EXPECT_TRUE(ValidateReasoningParserName("").ok());
  Status s = ValidateReasoningParserName("bogus");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("invalid reasoning parser: bogus"), std::string::npos);
  EXPECT_EQ(DefaultReasoningParser("MiniCPMV4_6ForConditionalGeneration"), "minicpmv");
  EXPECT_EQ(DefaultReasoningParser("MiniCPMForCausalLM"), "");
}

}  // namespace
}  // namespace cpm
