// Tool calls in a chat reply, as vLLM's `qwen3_coder` parser reads them (`vllm serve
// --enable-auto-tool-choice --tool-call-parser qwen3_coder`): the XML format MiniCPM-V-4.6's
// chat template (Qwen3.5's) asks the model to answer in,
//   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// Each parameter's text becomes a JSON value by the type the request's tool declares for it
// (string, integer, number, boolean, object/array), and the call's `arguments` is Python's
// json.dumps of them (", " and ": " separators, non-ASCII kept), as vLLM sends it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cpm {

// The names --tool-call-parser takes (vLLM's qwen3_coder, and qwen3_xml and minicpmv for the same
// format).
Status ValidateToolCallParserName(const std::string& name);

struct ToolCall {
  std::string id;  // vLLM's: chatcmpl-tool-<32 hex> in a reply, call_<24 hex> in a stream
  std::string name;
  std::string arguments;  // a JSON object's text
};

// Python's json.dumps(x, ensure_ascii=False), as vLLM writes `arguments`.
std::string PyJsonDumps(const nlohmann::ordered_json& j);
// A call id: `prefix` and `hex_digits` hex digits from the splitmix64 sequence at *state.
std::string ToolCallId(uint64_t* state, const char* prefix, int hex_digits);

class ToolCallParser {
 public:
  // `tools`: the request's tools (OpenAI's [{type: function, function: {name, parameters}}]);
  // `id_seed` makes the call ids (unique per request and choice). `stream_text_after_calls`:
  // whether Feed releases the text between and after calls (vLLM's chat stream does; its
  // Responses output, as a whole reply, keeps only the text before the first call).
  ToolCallParser(nlohmann::ordered_json tools, uint64_t id_seed,
                 bool stream_text_after_calls = true);

  // A whole reply: the text before the first call (nullopt when empty) and the calls. When the
  // text holds no call, or one whose XML is broken (a name without '>'), it is all content and
  // there are no calls, as in vLLM.
  struct Extracted {
    std::optional<std::string> content;
    std::vector<ToolCall> calls;
  };
  Extracted Extract(const std::string& text);

  // A stream: the reply's text as it comes (`final` with its last piece). Content is released
  // as soon as it cannot be the start of "<tool_call>"; each call goes out whole once its
  // </tool_call> arrives (or the reply ends inside it). Text between and after calls is content
  // too (unless the constructor said otherwise), less the whitespace right after a </tool_call>,
  // as vLLM's chat stream releases it (its non-streaming reply, as Extract, keeps only the text
  // before the first call).
  struct Delta {
    std::string content;
    std::vector<ToolCall> calls;  // in order; their indexes continue from earlier deltas
  };
  Delta Feed(std::string_view text, bool final);
  int calls_sent() const { return calls_sent_; }

 private:
  // The calls of one <tool_call> block's text, or nullopt when its XML is broken.
  std::optional<std::vector<ToolCall>> ParseBlock(std::string_view block, const char* id_prefix,
                                                  int id_hex);
  std::optional<ToolCall> ParseFunction(std::string_view function, const char* id_prefix,
                                        int id_hex);
  nlohmann::ordered_json ConvertValue(const std::string& function, const std::string& param,
                                      const std::string& value) const;
  std::string NewId(const char* prefix, int hex_digits);

  nlohmann::ordered_json tools_;
  uint64_t id_state_;
  bool text_after_calls_;
  // Streaming state: all text so far, how much of it is settled (released or parsed), whether a
  // call has started, and the calls sent.
  std::string text_;
  size_t settled_ = 0;
  bool in_calls_ = false;
  bool after_call_ = false;  // settled_ is right after a </tool_call>
  int calls_sent_ = 0;
};

}  // namespace cpm
