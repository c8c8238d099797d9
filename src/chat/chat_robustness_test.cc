// Robustness: thousands of randomly damaged versions of the real templates, and random contexts,
// must each end in a rendered string or a Status: no crash, hang or exception (a chat template
// comes from a model directory or --chat-template, a context from any client).
#include <fstream>
#include <random>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const char* kTemplates[] = {"minicpm4", "minicpmv46", "qwen3", "qwen35"};
const std::string kDir = std::string(CPM_SOURCE_DIR) + "/tests/conformance/chat";

// Deletes, duplicates or replaces a few short spans with template-significant text.
std::string Mutate(const std::string& src, std::mt19937& rng) {
  static const char* kPieces[] = {"{%", "%}", "{{", "}}", "{#", "-", "(", ")", "[", "]", "'", "\"",
                                  "|", ".", "if ", "endif", "for ", "endfor", " in ", "loop",
                                  "macro", "set ", "=", "~", "**", "not ", "\\", "\n", "é", "\xff"};
  std::string s = src;
  int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && !s.empty(); ++e) {
    size_t pos = rng() % s.size();
    size_t len = 1 + rng() % 8;
    switch (rng() % 3) {
      case 0: s.erase(pos, len); break;
      case 1: s.insert(pos, s.substr(pos, len)); break;
      default: s.replace(pos, std::min(len, s.size() - pos), kPieces[rng() % std::size(kPieces)]);
    }
  }
  return s;
}

TEST(ChatRobustness, MutatedTemplatesNeverCrash) {
  Json conversations = Json::parse(ReadFile(kDir + "/conversations.json"));
  ASSERT_FALSE(conversations.empty());
  std::mt19937 rng(12345);
  int parsed = 0, rendered = 0, total = 0;
  for (const char* name : kTemplates) {
    const std::string src = ReadFile(kDir + "/templates/" + name + ".jinja");
    ASSERT_FALSE(src.empty()) << name;
    for (int i = 0; i < 400; ++i) {
      ++total;
      StatusOr<ChatTemplate> t = ChatTemplate::Parse(Mutate(src, rng));
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().ToString();
        continue;
      }
      ++parsed;
      ChatRenderInput input;
      const Json& conv = conversations[rng() % conversations.size()];
      input.messages = conv["messages"];
      if (conv.contains("tools")) input.tools = conv["tools"];
      input.add_generation_prompt = rng() % 2;
      StatusOr<std::string> r = RenderChat(*t, input);
      if (r.ok()) ++rendered;
      else EXPECT_NE(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    }
  }
  // Both paths must have been exercised for the test to mean anything.
  EXPECT_GT(parsed, total / 10);
  EXPECT_GT(total - parsed, total / 10);
  EXPECT_GT(rendered, 0);
}

// Random JSON values in every message field the templates read.
Json RandomValue(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 2 ? 6 : 8)) {
    case 0: return nullptr;
    case 1: return static_cast<bool>(rng() % 2);
    case 2: return static_cast<int64_t>(rng() % 2000) - 1000;
    case 3: return static_cast<double>(rng() % 1000) / 7.0;
    case 4: return std::string("<think>x</think>y");
    case 5: return std::string(1 + rng() % 3, "a\n<é"[rng() % 4]);
    case 6: {
      Json a = Json::array();
      for (int i = 0, n = rng() % 3; i < n; ++i) a.push_back(RandomValue(rng, depth + 1));
      return a;
    }
    default: {
      Json o = Json::object();
      static const char* kKeys[] = {"type", "text", "image", "name", "arguments", "function"};
      for (int i = 0, n = rng() % 3; i < n; ++i) o[kKeys[rng() % 6]] = RandomValue(rng, depth + 1);
      return o;
    }
  }
}

TEST(ChatRobustness, RandomMessagesNeverCrash) {
  std::mt19937 rng(777);
  static const char* kRoles[] = {"system", "user", "assistant", "tool", "x"};
  int ok = 0, errors = 0;
  for (const char* name : kTemplates) {
    StatusOr<ChatTemplate> t = ChatTemplate::Parse(ReadFile(kDir + "/templates/" + name + ".jinja"));
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    for (int i = 0; i < 500; ++i) {
      ChatRenderInput input;
      for (int m = 0, n = 1 + rng() % 4; m < n; ++m) {
        Json msg = {{"role", kRoles[rng() % 5]}, {"content", RandomValue(rng, 0)}};
        if (rng() % 3 == 0) msg["reasoning_content"] = RandomValue(rng, 0);
        if (rng() % 3 == 0) msg["tool_calls"] = Json::array({{{"function", RandomValue(rng, 1)}}});
        input.messages.push_back(msg);
      }
      if (rng() % 2) input.tools = RandomValue(rng, 0);
      input.chat_template_kwargs = {{"enable_thinking", RandomValue(rng, 2)}};
      StatusOr<std::string> r = RenderChat(*t, input);
      if (r.ok()) {
        ++ok;
      } else {
        ++errors;
        EXPECT_NE(r.status().code(), StatusCode::kInternal) << r.status().ToString();
      }
    }
  }
  EXPECT_GT(ok, 0);
  EXPECT_GT(errors, 0);
}

// A request's own chat template (--trust-request-chat-template) is hostile input: the int64
// edges (INT64_MIN // -1 traps on x86), chains whose trees are as deep as they are long, and
// sizes a filter's argument multiplies must each end in a value or a Status.
TEST(ChatRobustness, HostileTemplatesEndInAStatus) {
  const auto render = [](const std::string& src) -> StatusOr<std::string> {
    CPM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::Parse(src));
    return t.Render(Json{{"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})},
                         {"text", "a\nb"}});
  };
  const auto value = [&](const std::string& src) {
    auto r = render(src);
    return r.ok() ? *r : "error: " + r.status().message();
  };
  // Python's ints: the quotient overflows int64 (an error here), the remainder is 0.
  EXPECT_NE(value("{{ (-9223372036854775807 - 1) // -1 }}").find("integer overflow"),
            std::string::npos);
  EXPECT_EQ(value("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
  EXPECT_EQ(value("{{ 7 // -1 }}"), "-7");
  // range() counted without overflow: capped, or Python's three items.
  EXPECT_NE(value("{{ range(-9223372036854775807, 9223372036854775807)|length }}").find("Range too big"),
            std::string::npos);
  EXPECT_EQ(value("{{ range(-5, 9223372036854775807, 4611686018427387904)|list }}"),
            "[-5, 4611686018427387899, 9223372036854775803]");
  // Chains: a long one still renders, a very long one is refused before it is evaluated.
  std::string sum = "{{ 1", filters = "{{ text", attrs = "{{ messages", calls = "{{ range";
  for (int i = 0; i < 1000; ++i) sum += " + 1";
  EXPECT_EQ(value(sum + " }}"), "1001");
  for (int i = 0; i < 20000; ++i) {
    sum += " + 1";
    filters += "|default(1)";
    attrs += ".a";
    calls += "()";
  }
  for (const std::string& deep : {sum, filters, attrs, calls}) {
    EXPECT_NE(value(deep + " }}").find("expression nested too deeply"), std::string::npos)
        << deep.substr(0, 40);
  }
  // Filters with arguments in a filter block and a set block: each argument is an expression
  // of its own, and the tag's budget counts them all.
  std::string chain;
  for (int i = 0; i < 20000; ++i) chain += "|default(1)";
  for (const std::string& block : {"{% filter upper" + chain + " %}x{% endfilter %}",
                                   "{% set x" + chain + " %}x{% endset %}{{ x }}"}) {
    EXPECT_NE(value(block).find("expression nested too deeply"), std::string::npos)
        << block.substr(0, 40);
  }
  std::string short_chain;
  for (int i = 0; i < 100; ++i) short_chain += "|default(1)";
  EXPECT_EQ(value("{% filter upper" + short_chain + " %}x{% endfilter %}"), "X");
  // Sizes a filter's width multiplies, refused by the render's size limit before they exist.
  EXPECT_NE(value("{{ messages|tojson(indent=1000000000) }}").find("error"), std::string::npos);
  EXPECT_NE(value("{{ text|indent(1000000000) }}").find("error"), std::string::npos);
  EXPECT_EQ(value("{{ text|indent(2) }}"), "a\n  b");
  EXPECT_EQ(value("{{ messages|tojson(indent=2) }}"),
            "[\n  {\n    \"role\": \"user\",\n    \"content\": \"hi\"\n  }\n]");
  EXPECT_NE(value("{{ messages.99999999999999999999 }}").find("error"), std::string::npos);
}

}  // namespace
}  // namespace cpm
