// Conformance: every template in tests/conformance/chat/templates.json over every conversation
// and option set renders byte-identically to the reference renders in expected/ (made by
// @huggingface/jinja through generate.mjs), except cases listed in divergences.json, where
// jinja2 (what transformers runs) is the truth. CPM_CHAT_EXPECTED_DIR points elsewhere for the
// regenerate-and-compare test.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

const std::string kDir = std::string(CPM_SOURCE_DIR) + "/tests/conformance/chat";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Json ReadJson(const std::string& path) {
  std::string text = ReadFile(path);
  return text.empty() ? Json() : Json::parse(text);
}

std::string ExpectedDir() {
  const char* env = std::getenv("CPM_CHAT_EXPECTED_DIR");
  return env && *env ? env : kDir + "/expected";
}

// Keep in step with OPTION_SETS in generate.mjs and jinja2_reference.py.
struct OptionSet {
  const char* name;
  bool add_generation_prompt;
  Json kwargs;
};
std::vector<OptionSet> OptionSets() {
  return {{"nogen", false, Json::object()},
          {"gen", true, Json::object()},
          {"gen_think_off", true, Json{{"enable_thinking", false}}},
          {"gen_think_on", true, Json{{"enable_thinking", true}}},
          {"gen_vision_id", true, Json{{"add_vision_id", true}, {"enable_thinking", false}}}};
}

// Returns "" when `got` matches the expectation, else a description of the difference.
std::string Compare(const StatusOr<std::string>& got, const Json& want) {
  if (want.contains("output")) {
    if (!got.ok()) return "expected output, got error: " + got.status().ToString();
    const std::string expected = want["output"].get<std::string>();
    if (*got == expected) return "";
    size_t i = 0;
    while (i < got->size() && i < expected.size() && (*got)[i] == expected[i]) ++i;
    return "output differs at byte " + std::to_string(i) + "\n  want: " +
           Json(expected.substr(i > 40 ? i - 40 : 0, 120)).dump() + "\n  got:  " +
           Json(got->substr(i > 40 ? i - 40 : 0, 120)).dump();
  }
  if (got.ok()) return "expected an error, got output " + Json(*got).dump();
  if (want.contains("raise")) {
    // raise_exception's message reaches the client verbatim.
    if (got.status().message() != want["raise"].get<std::string>()) {
      return "raise_exception message differs: got '" + got.status().message() + "'";
    }
    if (got.status().code() != StatusCode::kInvalidArgument) return "raise_exception must be kInvalidArgument";
  }
  return "";
}

class ChatConformanceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ChatConformanceTest, MatchesReference) {
  const std::string name = GetParam();
  Json templates = ReadJson(kDir + "/templates.json");
  Json conversations = ReadJson(kDir + "/conversations.json");
  Json divergences = ReadJson(kDir + "/divergences.json");
  Json expected = ReadJson(ExpectedDir() + "/" + name + ".json");
  ASSERT_TRUE(templates.contains(name));
  ASSERT_TRUE(conversations.is_array() && !conversations.empty());
  ASSERT_TRUE(expected.is_object()) << "missing " << ExpectedDir() << "/" << name << ".json";
  const Json& spec = templates[name];

  StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(ReadFile(kDir + "/" + spec["file"].get<std::string>()));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();

  int total = 0, passed = 0, from_jinja2 = 0;
  for (const Json& conv : conversations) {
    for (const OptionSet& opt : OptionSets()) {
      const std::string id = conv["name"].get<std::string>() + "/" + opt.name;
      ChatRenderInput input;
      input.messages = conv["messages"];
      if (conv.contains("tools")) input.tools = conv["tools"];
      input.add_generation_prompt = opt.add_generation_prompt;
      if (spec.contains("bos_token")) input.bos_token = spec["bos_token"].get<std::string>();
      if (spec.contains("eos_token")) input.eos_token = spec["eos_token"].get<std::string>();
      input.chat_template_kwargs = opt.kwargs;

      const std::string key = name + ":" + id;
      Json want;
      if (divergences.is_object() && divergences.contains(key)) {
        want = divergences[key]["jinja2"];
        ++from_jinja2;
      } else {
        ASSERT_TRUE(expected.contains(id)) << "no expectation for " << id;
        want = expected[id];
      }
      ++total;
      std::string diff = Compare(RenderChat(*tmpl, input), want);
      if (diff.empty()) {
        ++passed;
      } else {
        ADD_FAILURE() << name << " " << id << ": " << diff;
      }
    }
  }
  std::printf("[ conformance ] %s: %d/%d cases byte-equal (%d judged by jinja2)\n", name.c_str(),
              passed, total, from_jinja2);
  EXPECT_EQ(passed, total);
  EXPECT_GE(total, 100);  // guards against an empty or truncated conversation file
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatConformanceTest,
                         ::testing::Values("minicpm4", "minicpmv46", "qwen3", "qwen35"));

}  // namespace
}  // namespace cpm
