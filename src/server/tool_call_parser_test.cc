// ToolCallParser against what vLLM's qwen3_coder parser returns for the same text (worked out
// from its regular expressions and _convert_param_value), whole replies and streams.
#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "scale": {"type": "number"},
      "metric": {"type": "boolean"}, "filter": {"type": "object"}, "hours": {"type": "array"},
      "note": {"description": "no type: a string"}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping", "parameters": {}}}
])");

std::string Call(const std::string& name, const std::string& params) {
  return "<tool_call>\n<function=" + name + ">\n" + params + "</function>\n</tool_call>";
}
std::string Param(const std::string& name, const std::string& value) {
  return "<parameter=" + name + ">\n" + value + "\n</parameter>\n";
}

// `arguments` of the only call parsed out of one get_weather call with these parameters.
std::string Arguments(const std::string& params) {
  ToolCallParser p(kTools, 1);
  auto e = p.Extract(Call("get_weather", params));
  EXPECT_EQ(e.calls.size(), 1u) << params;
  return e.calls.empty() ? "" : e.calls[0].arguments;
}

TEST(ToolCallParser, TextWithoutACallIsContent) {
  ToolCallParser p(kTools, 1);
  for (const std::string t : {"", "It is sunny.", "<tool_call> talk about tags </tool_call>"}) {
    auto e = p.Extract(t);
    EXPECT_TRUE(e.calls.empty()) << t;
    EXPECT_EQ(e.content, t);
  }
}

TEST(ToolCallParser, ACallWithContentBeforeIt) {
  ToolCallParser p(kTools, 7);
  const std::string text = "I will look it up.\n\n" +
                           Call("get_weather", Param("city", "Paris") + Param("days", "3"));
  auto e = p.Extract(text);
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.content, "I will look it up.\n\n");
  EXPECT_EQ(e.calls[0].name, "get_weather");
  // json.dumps(..., ensure_ascii=False): ", " and ": " separators, declared order.
  EXPECT_EQ(e.calls[0].arguments, R"({"city": "Paris", "days": 3})");
  ASSERT_EQ(e.calls[0].id.size(), std::string("chatcmpl-tool-").size() + 32);
  EXPECT_EQ(e.calls[0].id.rfind("chatcmpl-tool-", 0), 0u);
  // Only a call: no content at all (null in the reply).
  EXPECT_EQ(p.Extract(Call("ping", "")).content, std::nullopt);
  EXPECT_EQ(p.Extract(Call("ping", "")).calls[0].arguments, "{}");
}

TEST(ToolCallParser, ValuesTakeTheirDeclaredTypes) {
  EXPECT_EQ(Arguments(Param("days", "1_000") + Param("scale", "2.5") + Param("metric", "True")),
            R"({"days": 1000, "scale": 2.5, "metric": true})");
  // number: integral floats become ints; inf is no int in Python, so it stays text.
  EXPECT_EQ(Arguments(Param("scale", "4.0") + Param("days", " -7 ")),
            R"({"scale": 4, "days": -7})");
  EXPECT_EQ(Arguments(Param("scale", "inf") + Param("scale", "1e-05")), R"({"scale": 1e-05})");
  EXPECT_EQ(Arguments(Param("scale", "inf")), R"({"scale": "inf"})");
  // Not a number / not true: text, and false.
  EXPECT_EQ(Arguments(Param("days", "three") + Param("metric", "yes")),
            R"({"days": "three", "metric": false})");
  // null is null whatever the type; JSON for objects and arrays, text when it is not JSON.
  EXPECT_EQ(Arguments(Param("city", "NULL") + Param("filter", R"({"a": [1, 2.5, "x"]})") +
                      Param("hours", "[9, 12]")),
            R"({"city": null, "filter": {"a": [1, 2.5, "x"]}, "hours": [9, 12]})");
  EXPECT_EQ(Arguments(Param("hours", "9 to 12")), R"({"hours": "9 to 12"})");
  // Undeclared parameters and ones without a type are text; non-ASCII stays as it is.
  EXPECT_EQ(Arguments(Param("note", "42") + Param("other", "true") + Param("city", "Zürich")),
            R"({"note": "42", "other": "true", "city": "Zürich"})");
  // One newline is taken off each end of a value, no more; inner lines stay.
  EXPECT_EQ(Arguments(Param("city", "\nline 1\nline 2\n")), R"({"city": "\nline 1\nline 2\n"})");
  // A repeated parameter keeps its first place and its last value (a Python dict).
  EXPECT_EQ(Arguments(Param("city", "A") + Param("days", "1") + Param("city", "B")),
            R"({"city": "B", "days": 1})");
}

// A tool without "type" is a function (vLLM's ChatCompletionToolsParam defaults it), so its
// parameters keep their declared types.
TEST(ToolCallParser, AToolWithoutTypeIsAFunction) {
  const Json tools = Json::parse(R"([{"function": {"name": "f", "parameters": {
    "type": "object", "properties": {"n": {"type": "integer"}}}}}])");
  ToolCallParser p(tools, 1);
  auto e = p.Extract(Call("f", Param("n", "5")));
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.calls[0].arguments, R"({"n": 5})");
}

TEST(ToolCallParser, LooseXmlAsVllmReadsIt) {
  ToolCallParser p(kTools, 1);
  // A parameter without its closing tag ends at the next one or at </function>.
  auto e = p.Extract("<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
                     "<parameter=days>\n2\n</function>\n</tool_call>");
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.calls[0].arguments, R"({"city": "Oslo", "days": 2})");
  // Cut off inside the call (max_tokens): what is there is the call; `$` matches before a last
  // newline, so only one of the two is left after the value's own is taken off.
  e = p.Extract("Sure. <tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n\n");
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.content, "Sure. ");
  EXPECT_EQ(e.calls[0].arguments, R"({"city": "Rome"})");
  // No <tool_call> tags at all: a bare <function=...> is still a call, content before it.
  e = p.Extract("ok <function=ping>\n</function>");
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.content, "ok ");
  // Two calls; text between and after them is not content (vLLM's content is what precedes
  // the first call).
  e = p.Extract("a" + Call("ping", "") + "\nb\n" + Call("get_weather", Param("city", "X")) + "c");
  ASSERT_EQ(e.calls.size(), 2u);
  EXPECT_EQ(e.content, "a");
  EXPECT_EQ(e.calls[1].name, "get_weather");
  EXPECT_NE(e.calls[0].id, e.calls[1].id);
  // A function or parameter name without '>' breaks the XML: everything is content.
  for (const std::string broken :
       {"<tool_call><function=ping</tool_call>",
        "<tool_call><function=ping>\n<parameter=x</function></tool_call>"}) {
    e = p.Extract(broken);
    EXPECT_TRUE(e.calls.empty()) << broken;
    EXPECT_EQ(e.content, broken);
  }
}

// Feeds `text` in pieces of `step` bytes; returns the released content and the calls.
std::pair<std::string, std::vector<ToolCall>> Streamed(const std::string& text, size_t step) {
  ToolCallParser p(kTools, 3);
  std::string content;
  std::vector<ToolCall> calls;
  for (size_t i = 0; i < text.size(); i += step) {
    const bool final = i + step >= text.size();
    ToolCallParser::Delta d = p.Feed(std::string_view(text).substr(i, step), final);
    content += d.content;
    for (ToolCall& c : d.calls) calls.push_back(std::move(c));
  }
  if (text.empty()) {
    ToolCallParser::Delta d = p.Feed("", true);
    content += d.content;
  }
  EXPECT_EQ(p.calls_sent(), static_cast<int>(calls.size()));
  return {content, calls};
}

// A stream releases the text between and after calls as content too (less the whitespace right
// after a </tool_call>), as vLLM's streaming parser does; a whole reply keeps only the text before
// the first call, as vLLM's non-streaming one.
TEST(ToolCallParser, StreamsGiveTheReplysContentAndCalls) {
  const std::string text = "Checking <the> weather.\n" +
                           Call("get_weather", Param("city", "Paris") + Param("days", "3")) +
                           "\nThen:\n" + Call("ping", "") + " trailing";
  ToolCallParser whole(kTools, 1);
  const auto e = whole.Extract(text);
  EXPECT_EQ(*e.content, "Checking <the> weather.\n");
  for (size_t step : {size_t{1}, size_t{3}, size_t{7}, text.size()}) {
    auto [content, calls] = Streamed(text, step);
    EXPECT_EQ(content, "Checking <the> weather.\nThen:\ntrailing") << step;
    ASSERT_EQ(calls.size(), e.calls.size()) << step;
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(calls[k].name, e.calls[k].name);
      EXPECT_EQ(calls[k].arguments, e.calls[k].arguments);
      EXPECT_EQ(calls[k].id.rfind("call_", 0), 0u);  // the streaming parser's ids
      EXPECT_EQ(calls[k].id.size(), 5u + 24);
    }
  }
}

TEST(ToolCallParser, StreamsHoldBackOnlyWhatMayStartACall) {
  ToolCallParser p(kTools, 1);
  EXPECT_EQ(p.Feed("a < b <tool", false).content, "a < b ");
  EXPECT_EQ(p.Feed("s>", false).content, "<tools>");  // not <tool_call> after all
  EXPECT_EQ(p.Feed(" <tool_", false).content, " ");
  ToolCallParser::Delta d = p.Feed("", true);  // the reply ends: nothing was a call
  EXPECT_EQ(d.content, "<tool_");
  EXPECT_TRUE(d.calls.empty());
  // Cut off inside a call: the call goes out when the stream ends.
  auto [content, calls] = Streamed("x<tool_call>\n<function=get_weather>\n<parameter=days>\n5", 4);
  EXPECT_EQ(content, "x");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"days": 5})");
  EXPECT_EQ(Streamed("", 1).first, "");
}

TEST(ToolCallParser, ParserNames) {
  EXPECT_TRUE(ValidateToolCallParserName("qwen3_coder").ok());
  EXPECT_TRUE(ValidateToolCallParserName("qwen3_xml").ok());
  EXPECT_TRUE(ValidateToolCallParserName("minicpmv").ok());  // vLLM's MiniCPMVEngineToolParser
  EXPECT_FALSE(ValidateToolCallParserName("hermes").ok());
}

}  // namespace
}  // namespace cpm
