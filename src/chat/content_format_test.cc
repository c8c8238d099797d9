// vLLM's content-format detection (content_format.h) on the template shapes its tests name.
#include "chat/content_format.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "tokenizer/test_util.h"

namespace cpm::jinja {
namespace {

ContentFormat Of(const std::string& source) {
  auto t = ChatTemplate::Parse(source);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? t->content_format() : ContentFormat::kString;
}

TEST(ContentFormat, LoopsOverAMessagesContentAreOpenAi) {
  EXPECT_EQ(Of("{% for m in messages %}{{ m['content'] }}{% endfor %}"), ContentFormat::kString);
  EXPECT_EQ(Of("{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}"
               "{% endfor %}"),
            ContentFormat::kOpenAi);
  EXPECT_EQ(Of("{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::kOpenAi);
  // Through assignments, slices, filters and tests.
  EXPECT_EQ(Of("{% set loop_messages = messages[1:] %}{% set rest = loop_messages | list %}"
               "{% for m in rest %}{% for p in m['content'] | selectattr('type') %}{% endfor %}"
               "{% endfor %}"),
            ContentFormat::kOpenAi);
  // A loop over a variable named content (vLLM's newer rule: a macro's parameter).
  EXPECT_EQ(Of("{% macro r(content) %}{% for item in content %}{{ item }}{% endfor %}"
               "{% endmacro %}{% for m in messages %}{{ r(m.content) }}{% endfor %}"),
            ContentFormat::kOpenAi);
  // A macro given a message's content, whatever its parameter's name (MiMo-V2.5's shape).
  EXPECT_EQ(Of("{% macro rc(message_content) %}{% for c in message_content %}{{ c.text }}"
               "{% endfor %}{% endmacro %}{% for m in messages %}{{ rc(m.content) }}{% endfor %}"),
            ContentFormat::kOpenAi);
  EXPECT_EQ(Of("{% macro rc(x, parts) %}{% for c in parts %}{% endfor %}{% endmacro %}"
               "{% for m in messages %}{{ rc(1, parts=m['content']) }}{% endfor %}"),
            ContentFormat::kOpenAi);
  EXPECT_EQ(Of("{% macro rc(parts) %}{% for c in parts %}{% endfor %}{% endmacro %}"
               "{% for m in messages %}{{ rc(m.tool_calls) }}{% endfor %}"),
            ContentFormat::kString);
  // Where vLLM's detector asserts a plain name (a tuple target over the messages or their
  // content, a namespace assigned from them), its fallback: string.
  EXPECT_EQ(Of("{% for i, m in messages|batch(1) %}{% endfor %}{% for m in messages %}"
               "{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  EXPECT_EQ(Of("{% set ns = namespace(m=[]) %}{% set ns.m = messages %}{% for m in messages %}"
               "{% for p in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  EXPECT_EQ(Of("{% for m in messages %}{% for k, v in m.content %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  // A loop over something else's content, or over the messages only: string.
  EXPECT_EQ(Of("{% for t in tools %}{% for p in t['content'] %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
  EXPECT_EQ(Of("{% for m in messages %}{% for x in m['tool_calls'] %}{% endfor %}{% endfor %}"),
            ContentFormat::kString);
}

TEST(ContentFormat, TheReleasedTemplates) {
  const auto read = [](const std::filesystem::path& p) {
    std::ifstream in(p);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  const auto v46 = tokenizer_test::MiniCpmV46Dir() / "chat_template.jinja";
  if (!std::filesystem::exists(v46)) GTEST_SKIP() << "no shared/models";
  EXPECT_EQ(Of(read(v46)), ContentFormat::kOpenAi);
  const auto config = nlohmann::json::parse(
      read(tokenizer_test::MiniCpm4Dir() / "tokenizer_config.json"), nullptr, false);
  ASSERT_TRUE(config.contains("chat_template"));
  EXPECT_EQ(Of(config["chat_template"].get<std::string>()), ContentFormat::kString);
}

}  // namespace
}  // namespace cpm::jinja
