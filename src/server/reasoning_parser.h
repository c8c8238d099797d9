// --reasoning-parser: splits a chat completion's generated text into `reasoning` (the model's
// thinking) and `content` (the answer), incrementally for streams and in one go otherwise.
//
// "minicpmv" mirrors vLLM's MiniCPM-V parser (Qwen3's <think> grammar):
//  - thinking (the prompt ends inside an open <think>): text up to the first </think> is
//    reasoning, the rest content; a stray <think> while reasoning is dropped, a second
//    </think> after it too; <tool_call> also ends reasoning (and stays in the content, since
//    tool calls are not parsed here).
//  - not thinking: everything is content, except that a <think>…</think> span is removed, a
//    dangling </think> dropped and an unterminated <think>… tail hidden.
//  - in both: <|im_end|> and the reserved markers <reserved_12..15>, <|reserved_12..15|> are
//    swallowed, and literal "\n" escapes are recovered separately in reasoning and content
//    (EscapedNewlineNormalizer).
// "qwen3" and "deepseek_r1" are vLLM's parsers of those names: the <think> grammar without the
// MiniCPM-V extras (no hidden spans, swallowed markers or escape recovery): before the first
// </think> all output is reasoning, after it all is content; qwen3 also ends reasoning at a
// <tool_call> that opens a call.
// Unlike vLLM, whether the output starts in reasoning is read from the rendered prompt, not
// only from chat_template_kwargs.enable_thinking: for MiniCPM-V-4.6's template the two agree,
// and a template that opens <think> by default (the Thinking checkpoint) is handled too.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  // Takes the next piece of generated text; returns what can be released (text that may be
  // the start of a marker is held back). `final` (the last call) flushes everything.
  virtual ReasoningDelta Feed(std::string_view text, bool final) = 0;
  // True once any reasoning text or marker was seen (so an empty content means "none").
  virtual bool saw_reasoning() const = 0;
  // Whether a whole (non-streamed) reply shows an empty reasoning as "" rather than none, as
  // vLLM's qwen3 and deepseek_r1 extract_reasoning do for a reply that began in reasoning.
  virtual bool reports_empty_reasoning() const { return false; }
};

// The parser names --reasoning-parser accepts ("none" turns a model's default off).
const std::vector<std::string>& ReasoningParserNames();
// OK for a known name or "" / "none"; else vLLM's "invalid reasoning parser" message.
Status ValidateReasoningParserName(const std::string& name);
// The parser a model gets when --reasoning-parser is not given ("" for none).
std::string DefaultReasoningParser(const std::string& architecture);

// The text that opens and the text that closes a thinking section for parser `name` (a valid,
// non-empty name): what thinking_token_budget counts from and forces.
struct ReasoningMarkers {
  std::string_view start, end;
};
ReasoningMarkers ReasoningParserMarkers(const std::string& name);

// vLLM's --reasoning-config: the texts thinking_token_budget counts from and forces at its end
// (the end may put a transition phrase before the parser's end marker); an empty text is the
// marker of `reasoning_parser` (else of --reasoning-parser's parser), which splits no reply's
// reasoning out.
struct ReasoningConfig {
  std::string reasoning_parser, start, end;
};

// The token ids of parser `name`'s markers, where the vocabulary has each as one token.
struct ReasoningMarkerIds {
  std::optional<int32_t> start, end;
};
ReasoningMarkerIds FindReasoningMarkerIds(const std::string& name, const Tokenizer& tokenizer);
// vLLM's qwen3 and deepseek_r1 parsers work on the markers' token ids and cannot be made for a
// tokenizer without them (BaseThinkingReasoningParser's RuntimeError, answered as a 400): that
// error for those parsers when `ids` lacks one, else OK.
Status CheckReasoningMarkerIds(const std::string& name, const ReasoningMarkerIds& ids);

// usage.completion_tokens_details.reasoning_tokens for one choice, counted on its token ids as
// vLLM's BaseThinkingReasoningParser.count_reasoning_tokens counts them: from after the first
// start marker (or from the first token when the output starts in reasoning, else none) to the
// first end marker (or the end).
int64_t CountReasoningTokens(std::span<const int32_t> token_ids, const ReasoningMarkerIds& ids,
                             bool starts_in_reasoning);

// A fresh parser for one choice. `opens_in_reasoning`: see OutputStartsInReasoning.
// `recover_content_newlines` false leaves the content as generated where the parser would turn
// literal "\n" into newlines (RecoversEscapedNewlines): a tool-call parser reading that content
// must see its calls' arguments as written (vLLM recovers newlines in content, never in tool
// call arguments), and recovers them itself in the content it releases.
std::unique_ptr<ReasoningParser> MakeReasoningParser(const std::string& name,
                                                     bool opens_in_reasoning,
                                                     bool recover_content_newlines = true);
// Whether parser `name` turns a model's literal "\n" in its content into newlines (minicpmv:
// escaped_newline_normalizer.h).
bool RecoversEscapedNewlines(const std::string& name);

// True if the rendered prompt leaves the model inside a <think> block: its last <think> comes
// after its last </think> and is followed by whitespace only.
bool PromptOpensReasoning(std::string_view prompt_text);

// Whether the generated text starts inside reasoning for parser `name`: for minicpmv when the
// prompt opens it (PromptOpensReasoning); for qwen3 and deepseek_r1, as vLLM runs them, unless
// the prompt has already closed its thinking (its last marker is </think>: vLLM's
// prompt_is_reasoning_end) or, for qwen3, the request's enable_thinking is false.
bool OutputStartsInReasoning(const std::string& name, std::string_view prompt_text,
                             bool thinking_disabled);

}  // namespace cpm
