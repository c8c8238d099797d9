#include "server/reasoning_parser.h"

#include <array>
#include <cctype>

#include "server/escaped_newline_normalizer.h"

namespace cpm {
namespace {

constexpr std::string_view kThinkStart = "<think>";
constexpr std::string_view kThinkEnd = "</think>";
constexpr std::string_view kToolCall = "<tool_call>";
// Markers that never reach the client.
constexpr std::array<std::string_view, 9> kSwallowed = {
    "<|im_end|>",       "<reserved_12>",    "<reserved_13>",    "<reserved_14>",
    "<reserved_15>",    "<|reserved_12|>",  "<|reserved_13|>",  "<|reserved_14|>",
    "<|reserved_15|>"};

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

class MiniCpmvParser final : public ReasoningParser {
 public:
  MiniCpmvParser(bool thinking, bool recover_content_newlines)
      : thinking_(thinking),
        recover_content_(recover_content_newlines),
        reasoning_(thinking),
        saw_reasoning_(thinking) {}

  ReasoningDelta Feed(std::string_view chunk, bool final) override {
    const std::string text = pending_ + std::string(chunk);
    pending_.clear();
    std::string reasoning, content;
    bool content_started = false;  // this call produced content: reasoning is over
    size_t i = 0;
    while (i < text.size()) {
      const std::string_view rest = std::string_view(text).substr(i);
      if (text[i] != '<') {
        // Copy up to the next possible marker in one go.
        const size_t next = text.find('<', i + 1);
        const size_t end = next == std::string::npos ? text.size() : next;
        Emit(std::string_view(text).substr(i, end - i), &reasoning, &content, &content_started);
        i = end;
        continue;
      }
      if (!final && MayBecomeMarker(rest)) {
        pending_ = std::string(rest);
        break;
      }
      i += Marker(rest, &reasoning, &content, &content_started);
    }
    ReasoningDelta d;
    // The reasoning stream ends once content has begun (or at the end of the output), so a
    // half escape at its end is flushed rather than held for text that will never come.
    d.reasoning = reasoning_norm_.Feed(reasoning, final || content_started || !reasoning_);
    d.content = recover_content_ ? content_norm_.Feed(content, final) : std::move(content);
    return d;
  }

  bool saw_reasoning() const override { return saw_reasoning_; }

 private:
  void Emit(std::string_view s, std::string* reasoning, std::string* content,
            bool* content_started) {
    if (!reasoning_) {
      content->append(s);
      *content_started = *content_started || !s.empty();
    } else if (thinking_) {
      reasoning->append(s);
    }  // else: inside a <think> span of a non-thinking answer, hidden
  }

  // True if `rest` (starting with '<') is a proper prefix of a marker this state reacts to.
  static bool MayBecomeMarker(std::string_view rest) {
    auto proper_prefix = [&](std::string_view m) {
      return rest.size() < m.size() && StartsWith(m, rest);
    };
    if (proper_prefix(kThinkStart) || proper_prefix(kThinkEnd) || proper_prefix(kToolCall)) {
      return true;
    }
    for (std::string_view m : kSwallowed) {
      if (proper_prefix(m)) return true;
    }
    return false;
  }

  // Acts on the marker at the start of `rest` (or copies its '<' as text); returns the number
  // of characters consumed.
  size_t Marker(std::string_view rest, std::string* reasoning, std::string* content,
                bool* content_started) {
    for (std::string_view m : kSwallowed) {
      if (StartsWith(rest, m)) return m.size();
    }
    if (StartsWith(rest, kThinkEnd)) {
      if (reasoning_) saw_reasoning_ = true;
      reasoning_ = false;  // ends reasoning; a duplicate in content is dropped
      return kThinkEnd.size();
    }
    if (StartsWith(rest, kThinkStart)) {
      if (reasoning_) return kThinkStart.size();  // stray <think> while reasoning
      if (!thinking_) {                          // a hidden span starts
        reasoning_ = true;
        saw_reasoning_ = true;
        return kThinkStart.size();
      }
      // Thinking mode, after </think>: no transition in the grammar, so it is plain text.
    } else if (thinking_ && reasoning_ && StartsWith(rest, kToolCall)) {
      reasoning_ = false;  // a tool call ends reasoning implicitly; the call itself is content
      Emit(kToolCall, reasoning, content, content_started);
      return kToolCall.size();
    }
    Emit(rest.substr(0, 1), reasoning, content, content_started);
    return 1;
  }

  const bool thinking_;   // the output starts inside <think>
  const bool recover_content_;  // literal "\n" in the content made newlines
  bool reasoning_;        // current state: inside reasoning (hidden when !thinking_)
  bool saw_reasoning_;
  std::string pending_;   // a held-back '<…' that may become a marker
  EscapedNewlineNormalizer reasoning_norm_, content_norm_;
};

// vLLM's qwen3 and deepseek_r1 parsers: the <think> grammar alone. Before the first </think>
// everything is reasoning (a <think> there is dropped); after it everything is content,
// verbatim. qwen3 also ends reasoning at a <tool_call> that opens a call (whitespace, then
// "<function" and a blank or '='), which stays in the content for the tool parser.
class ThinkParser final : public ReasoningParser {
 public:
  ThinkParser(bool reasoning, bool tool_call_ends_reasoning)
      : reasoning_(reasoning), saw_reasoning_(reasoning),
        tool_call_ends_reasoning_(tool_call_ends_reasoning) {}

  ReasoningDelta Feed(std::string_view chunk, bool final) override {
    std::string text = pending_ + std::string(chunk);
    pending_.clear();
    ReasoningDelta d;
    size_t i = 0;
    while (reasoning_ && i < text.size()) {
      const size_t lt = text.find('<', i);
      if (lt == std::string::npos) {
        d.reasoning.append(text, i, std::string::npos);
        i = text.size();
        break;
      }
      d.reasoning.append(text, i, lt - i);
      i = lt;
      const std::string_view rest = std::string_view(text).substr(i);
      const Match m = AtMarker(rest);
      if (m == Match::kMaybe && !final) {
        pending_ = std::string(rest);
        return d;
      }
      if (m == Match::kThinkStart) {
        i += kThinkStart.size();
      } else if (m == Match::kThinkEnd) {
        reasoning_ = false;
        i += kThinkEnd.size();
      } else if (m == Match::kToolCall) {
        reasoning_ = false;  // the call itself is content
      } else {
        d.reasoning.push_back('<');
        ++i;
      }
    }
    if (i < text.size()) d.content.append(text, i, std::string::npos);
    return d;
  }

  bool saw_reasoning() const override { return saw_reasoning_; }
  bool reports_empty_reasoning() const override { return saw_reasoning_; }

 private:
  enum class Match { kNone, kMaybe, kThinkStart, kThinkEnd, kToolCall };

  // What the text at a '<' is while reasoning; kMaybe when more text could still decide it.
  Match AtMarker(std::string_view rest) const {
    const auto prefix_of = [&](std::string_view m) {
      return rest.size() < m.size() && StartsWith(m, rest);
    };
    if (StartsWith(rest, kThinkStart)) return Match::kThinkStart;
    if (StartsWith(rest, kThinkEnd)) return Match::kThinkEnd;
    if (prefix_of(kThinkStart) || prefix_of(kThinkEnd)) return Match::kMaybe;
    if (!tool_call_ends_reasoning_) return Match::kNone;
    if (prefix_of(kToolCall)) return Match::kMaybe;
    if (!StartsWith(rest, kToolCall)) return Match::kNone;
    // vLLM's lookahead: <tool_call>, blanks, then <function followed by a blank or '='.
    std::string_view after = rest.substr(kToolCall.size());
    while (!after.empty() && std::isspace(static_cast<unsigned char>(after.front()))) {
      after.remove_prefix(1);
    }
    constexpr std::string_view kFunction = "<function";
    if (after.size() <= kFunction.size()) {
      return StartsWith(kFunction, after) ? Match::kMaybe : Match::kNone;
    }
    const char next = after[kFunction.size()];
    return StartsWith(after, kFunction) &&
                   (next == '=' || std::isspace(static_cast<unsigned char>(next)))
               ? Match::kToolCall
               : Match::kNone;
  }

  bool reasoning_;
  const bool saw_reasoning_;
  const bool tool_call_ends_reasoning_;
  std::string pending_;  // held-back text from a '<' that may still become a marker
};

bool PromptClosesReasoning(std::string_view prompt) {
  const size_t end = prompt.rfind(kThinkEnd);
  if (end == std::string_view::npos) return false;
  const size_t start = prompt.rfind(kThinkStart);
  return start == std::string_view::npos || start < end;
}

}  // namespace

const std::vector<std::string>& ReasoningParserNames() {
  static const std::vector<std::string> names = {"minicpmv", "qwen3", "deepseek_r1"};
  return names;
}

Status ValidateReasoningParserName(const std::string& name) {
  if (name.empty() || name == "none") return OkStatus();
  for (const std::string& n : ReasoningParserNames()) {
    if (n == name) return OkStatus();
  }
  std::string choices;
  for (const std::string& n : ReasoningParserNames()) choices += (choices.empty() ? "" : ", ") + n;
  return InvalidArgument("invalid reasoning parser: " + name + " (chose from { " + choices +
                              " })");
}

std::string DefaultReasoningParser(const std::string& architecture) {
  return architecture == "MiniCPMV4_6ForConditionalGeneration" ? "minicpmv" : "";
}

ReasoningMarkers ReasoningParserMarkers(const std::string& name) {
  (void)name;  // every parser so far reads Qwen3's <think> grammar
  return {kThinkStart, kThinkEnd};
}

ReasoningMarkerIds FindReasoningMarkerIds(const std::string& name, const Tokenizer& tokenizer) {
  const ReasoningMarkers markers = ReasoningParserMarkers(name);
  return {tokenizer.TokenToId(markers.start), tokenizer.TokenToId(markers.end)};
}

Status CheckReasoningMarkerIds(const std::string& name, const ReasoningMarkerIds& ids) {
  if (ids.start && ids.end) return OkStatus();
  const char* cls = name == "qwen3"         ? "Qwen3ReasoningParser"
                    : name == "deepseek_r1" ? "DeepSeekR1ReasoningParser"
                                            : nullptr;
  if (!cls) return OkStatus();  // minicpmv reads text
  return InvalidArgument(std::string(cls) +
                         " reasoning parser could not locate think start/end tokens in the "
                         "tokenizer!");
}

int64_t CountReasoningTokens(std::span<const int32_t> token_ids, const ReasoningMarkerIds& ids,
                             bool starts_in_reasoning) {
  const auto find = [&](const std::optional<int32_t>& id) -> std::optional<size_t> {
    if (!id) return std::nullopt;
    for (size_t i = 0; i < token_ids.size(); ++i) {
      if (token_ids[i] == *id) return i;
    }
    return std::nullopt;
  };
  size_t begin = 0;
  if (auto start = find(ids.start)) {
    begin = *start + 1;
  } else if (!starts_in_reasoning) {
    return 0;
  }
  const size_t end = find(ids.end).value_or(token_ids.size());
  return end > begin ? static_cast<int64_t>(end - begin) : 0;
}

std::unique_ptr<ReasoningParser> MakeReasoningParser(const std::string& name,
                                                     bool opens_in_reasoning,
                                                     bool recover_content_newlines) {
  if (name == "minicpmv") {
    return std::make_unique<MiniCpmvParser>(opens_in_reasoning, recover_content_newlines);
  }
  if (name == "qwen3" || name == "deepseek_r1") {
    return std::make_unique<ThinkParser>(opens_in_reasoning, name == "qwen3");
  }
  return nullptr;
}

bool RecoversEscapedNewlines(const std::string& name) { return name == "minicpmv"; }

bool OutputStartsInReasoning(const std::string& name, std::string_view prompt,
                             bool thinking_disabled) {
  if (name == "minicpmv") return PromptOpensReasoning(prompt);
  if (name == "qwen3" && thinking_disabled) return false;
  return !PromptClosesReasoning(prompt);
}

bool PromptOpensReasoning(std::string_view prompt) {
  const size_t start = prompt.rfind(kThinkStart);
  if (start == std::string_view::npos) return false;
  const size_t end = prompt.rfind(kThinkEnd);
  if (end != std::string_view::npos && end > start) return false;
  for (char c : prompt.substr(start + kThinkStart.size())) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return false;
  }
  return true;
}

}  // namespace cpm
