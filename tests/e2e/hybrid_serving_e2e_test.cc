// MiniCPM-V-4.6 text serving end to end: `cpmserve make-tiny --arch minicpmv4_6` (the real
// chat template, the model's special tokens, the hybrid Qwen3.5 language model) served by
// `cpmserve serve`, with the reasoning parser on by default. Thinking on and off through
// chat_template_kwargs.enable_thinking; the split equals the minicpmv parser applied to what a
// server without a parser returns for the same greedy request; streamed equals non-streamed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "server/reasoning_parser.h"

namespace cpm {
namespace {

using e2e::Json;

class HybridServingE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() /
                            ("cpm_e2e_hybrid_" + std::to_string(getpid()))).string());
    const std::string cmd = std::string(CPM_CPMSERVE_BIN) + " make-tiny --arch minicpmv4_6 " +
                            *dir_ + " --dtype float32 > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const std::vector<std::string> common = {"--host", "127.0.0.1", "--port", "0",
                                             "--served-model-name", "minicpmv",
                                             "--kv-cache-memory-bytes", "8M", "--max-num-seqs",
                                             "8", "--threads", "2", "--max-model-len", "1024"};
    parsed_ = new ServerProcess();
    ASSERT_TRUE(parsed_->Start(CPM_CPMSERVE_BIN, *dir_, common));
    raw_ = new ServerProcess();
    std::vector<std::string> raw_args = common;
    raw_args.insert(raw_args.end(), {"--reasoning-parser", "none"});
    ASSERT_TRUE(raw_->Start(CPM_CPMSERVE_BIN, *dir_, raw_args));
    ASSERT_TRUE(parsed_->WaitReady()) << parsed_->Log();
    ASSERT_TRUE(raw_->WaitReady()) << raw_->Log();
  }
  static void TearDownTestSuite() {
    e2e::StopSuiteServer(parsed_);
    e2e::StopSuiteServer(raw_);
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static Json Body(bool thinking, bool stream) {
    Json b = {{"model", "minicpmv"},
              {"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
              {"temperature", 0},
              {"max_tokens", 24},
              {"ignore_eos", true},
              {"stream", stream}};
    if (thinking) b["chat_template_kwargs"] = {{"enable_thinking", true}};
    return b;
  }
  static Json Message(ServerProcess* s, bool thinking) {
    auto r = e2e::Post(s->port(), "/v1/chat/completions", Body(thinking, false).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    Json j = r.json();
    return j.contains("choices") ? j["choices"][0]["message"] : Json();
  }
  static std::string Str(const Json& v) { return v.is_string() ? v.get<std::string>() : ""; }

  static std::string* dir_;
  static ServerProcess* parsed_;
  static ServerProcess* raw_;
};

std::string* HybridServingE2E::dir_ = nullptr;
ServerProcess* HybridServingE2E::parsed_ = nullptr;
ServerProcess* HybridServingE2E::raw_ = nullptr;

TEST_F(HybridServingE2E, StartsAsAHybridModelWithTheReasoningParser) {
  const std::string log = parsed_->Log();
  EXPECT_NE(log.find("Reasoning parser: minicpmv (the model's default)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("disabling prefix caching"), std::string::npos) << log;
  // One recurrent-state slot per running sequence, out of the cache memory.
  EXPECT_NE(log.find("Linear-attention state: 8 slots of"), std::string::npos) << log;
  EXPECT_EQ(raw_->Log().find("Reasoning parser"), std::string::npos);
}

// Speculative decoding over the Gated DeltaNet layers: a draft token that does not stand has
// already updated the recurrent state, which is put back from its copy and fed again, so the
// output is the same as without it (tokens and log-probs), with drafts both standing and not.
TEST_F(HybridServingE2E, NgramSpeculationGivesTheSameOutput) {
  ServerProcess spec;
  std::vector<std::string> args = {"--host", "127.0.0.1", "--port", "0", "--served-model-name",
                                   "minicpmv", "--kv-cache-memory-bytes", "8M", "--max-num-seqs",
                                   "8", "--threads", "2", "--max-model-len", "1024",
                                   "--speculative-config",
                                   R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":2})"};
  ASSERT_TRUE(spec.Start(CPM_CPMSERVE_BIN, *dir_, args));
  ASSERT_TRUE(spec.WaitReady()) << spec.Log();
  EXPECT_NE(spec.Log().find("for the states of drafting sequences"), std::string::npos)
      << spec.Log();
  const std::vector<Json> bodies = {
      {{"prompt", "one two one two one two"}},
      {{"prompt", "What is 2+2? What is"}, {"logprobs", 2}},
      {{"prompt", "x"}, {"logit_bias", {{"100", 100}}}},
      {{"prompt", "seeded"}, {"temperature", 1.0}, {"seed", 3}}};
  for (Json body : bodies) {
    body["model"] = "minicpmv";
    body["max_tokens"] = 32;
    body["ignore_eos"] = true;
    if (!body.contains("temperature")) body["temperature"] = 0;
    const Json a = e2e::Post(raw_->port(), "/v1/completions", body.dump()).json();
    const Json b = e2e::Post(spec.port(), "/v1/completions", body.dump()).json();
    ASSERT_TRUE(b.contains("choices")) << b.dump() << spec.Log();
    EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]) << body.dump();
    EXPECT_EQ(b["choices"][0]["logprobs"], a["choices"][0]["logprobs"]) << body.dump();
  }
  const std::string m = e2e::Get(spec.port(), "/metrics").body;
  const double drafted = e2e::Metric(m, "vllm:spec_decode_num_draft_tokens_total");
  const double accepted = e2e::Metric(m, "vllm:spec_decode_num_accepted_tokens_total");
  EXPECT_GT(accepted, 20) << m;
  EXPECT_LT(accepted, drafted);  // some drafts fell short: the state was put back
}

TEST_F(HybridServingE2E, TemplateOpensThinkingOnlyWhenAskedTo) {
  for (bool thinking : {false, true}) {
    Json t = {{"model", "minicpmv"},
              {"messages", {{{"role", "user"}, {"content", "Hi"}}}},
              {"add_generation_prompt", true}};
    if (thinking) t["chat_template_kwargs"] = {{"enable_thinking", true}};
    auto r = e2e::Post(parsed_->port(), "/tokenize", t.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    Json ids = {{"model", "minicpmv"}, {"tokens", r.json()["tokens"]}};
    auto d = e2e::Post(parsed_->port(), "/detokenize", ids.dump());
    const std::string prompt = d.json()["prompt"];
    const std::string tail = thinking ? "<|im_start|>assistant\n<think>\n"
                                      : "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    ASSERT_GE(prompt.size(), tail.size());
    EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail) << prompt;
  }
}

// MiniCPM-V-4.6's template refuses a developer message ("Unexpected message role."); vLLM's
// renderer makes it a system message first, as newer OpenAI clients send it.
TEST_F(HybridServingE2E, DeveloperMessagesRenderAsSystem) {
  const auto ids = [&](const char* role) {
    const Json t = {{"model", "minicpmv"},
                    {"messages", {{{"role", role}, {"content", "Be brief."}},
                                  {{"role", "user"}, {"content", "Hi"}}}}};
    auto r = e2e::Post(parsed_->port(), "/tokenize", t.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json()["tokens"];
  };
  EXPECT_EQ(ids("developer"), ids("system"));
  // Merged into the system message, an image would lose its place: refused, saying so.
  const Json t = {{"model", "minicpmv"},
                  {"messages", Json::parse(R"([{"role":"system","content":"S"},
                      {"role":"developer","content":[
                        {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}},
                        {"type":"text","text":"D"}]},
                      {"role":"user","content":"Hi"}])")}};
  auto r = e2e::Post(parsed_->port(), "/tokenize", t.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("cannot hold images or videos"), std::string::npos) << r.body;
}

TEST_F(HybridServingE2E, SplitEqualsTheParserOnTheRawOutput) {
  for (bool thinking : {false, true}) {
    const Json raw = Message(raw_, thinking);
    ASSERT_TRUE(raw["content"].is_string()) << raw.dump();
    EXPECT_TRUE(raw["reasoning"].is_null()) << raw.dump();
    auto parser = MakeReasoningParser("minicpmv", thinking);
    const ReasoningDelta want = parser->Feed(raw["content"].get<std::string>(), true);
    const Json m = Message(parsed_, thinking);
    EXPECT_EQ(Str(m["reasoning"]), want.reasoning) << raw.dump();
    EXPECT_EQ(m["reasoning_content"], m["reasoning"]);
    EXPECT_EQ(Str(m["content"]), want.content) << raw.dump();
    if (thinking) {
      // A random model rarely writes </think>: its whole output is reasoning then.
      EXPECT_FALSE(want.reasoning.empty());
    } else {
      EXPECT_TRUE(m["reasoning"].is_null());
    }
  }
}

// A structured output on a thinking prompt starts after </think> (as vLLM applies it after the
// reasoning): the random model, which rarely writes </think>, then thinks exactly as without
// it. Without the reasoning parser, or without thinking, it applies from the first token.
TEST_F(HybridServingE2E, StructuredOutputStartsAfterTheReasoning) {
  const auto message = [](ServerProcess* s, bool thinking) {
    Json b = Body(thinking, false);
    b["response_format"] = {{"type", "json_object"}};
    auto r = e2e::Post(s->port(), "/v1/chat/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    Json j = r.json();
    return j.contains("choices") ? j["choices"][0]["message"] : Json();
  };
  const Json free_thinking = Message(parsed_, true);
  const Json constrained_thinking = message(parsed_, true);
  if (Str(free_thinking["content"]).empty()) {  // no </think> in the free reply
    EXPECT_EQ(constrained_thinking["reasoning"], free_thinking["reasoning"]);
  }
  for (const Json& m : {message(parsed_, false), message(raw_, true)}) {
    const std::string content = Str(m["content"]);
    ASSERT_FALSE(content.empty()) << m.dump();
    EXPECT_EQ(content.find_first_not_of(" \t\n\r"), content.find('{')) << m.dump();
  }
}

// The parser's recovery of literal "\n" escapes leaves a structured output alone: in JSON an
// escape is JSON, a raw newline inside a string would break it.
TEST_F(HybridServingE2E, StructuredOutputKeepsItsEscapes) {
  Json b = Body(false, false);
  b["max_tokens"] = 30;
  b["structured_outputs"] = {{"regex", R"(\{"t":"a\\nb"\})"}};
  auto r = e2e::Post(parsed_->port(), "/v1/chat/completions", b.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string content = Str(r.json()["choices"][0]["message"]["content"]);
  EXPECT_EQ(content, R"({"t":"a\nb"})") << r.body;
  EXPECT_TRUE(Json::parse(content, nullptr, false).is_object()) << content;
}

// thinking_token_budget (vLLM extra): the thinking the prompt opened holds that many generated
// tokens, then </think> is forced and the model answers after it; the reply splits there. A
// server without a reasoning parser ignores it, as vLLM does.
TEST_F(HybridServingE2E, ThinkingTokenBudgetForcesTheEndOfThinking) {
  const auto ids = [](ServerProcess* s, std::optional<int> budget, Json* message) {
    Json b = Body(true, false);
    b["logprobs"] = true;
    b["return_tokens_as_token_ids"] = true;
    b["skip_special_tokens"] = false;  // the text /detokenize gives for the same ids
    if (budget) b["thinking_token_budget"] = *budget;
    auto r = e2e::Post(s->port(), "/v1/chat/completions", b.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<int64_t> out;
    const Json j = r.json();
    if (!j.contains("choices")) return out;
    for (const Json& t : j["choices"][0]["logprobs"]["content"]) {
      out.push_back(std::stoll(t["token"].get<std::string>().substr(9)));  // "token_id:<id>"
    }
    if (message) *message = j["choices"][0]["message"];
    return out;
  };
  auto end = e2e::Post(parsed_->port(), "/tokenize",
                       Json{{"prompt", "</think>"}, {"add_special_tokens", false}}.dump());
  ASSERT_EQ(end.json()["tokens"].size(), 1u) << end.body;
  const int64_t think_end = end.json()["tokens"][0];

  const std::vector<int64_t> free = ids(parsed_, std::nullopt, nullptr);
  ASSERT_EQ(free.size(), 24u);
  ASSERT_NE(free[5], think_end);  // else the budget would change nothing visible
  Json m;
  const std::vector<int64_t> capped = ids(parsed_, 5, &m);
  ASSERT_EQ(capped.size(), 24u);
  EXPECT_EQ(std::vector<int64_t>(capped.begin(), capped.begin() + 5),
            std::vector<int64_t>(free.begin(), free.begin() + 5));
  EXPECT_EQ(capped[5], think_end);
  // The reply is split at the forced </think>: the parser's split of the detokenized output.
  auto text = e2e::Post(parsed_->port(), "/detokenize", Json{{"tokens", capped}}.dump());
  ASSERT_EQ(text.status, 200) << text.body;
  // Less an unfinished character at the end, which a reply never emits (vLLM's detokenizer).
  std::string shown = text.json()["prompt"].get<std::string>();
  while (shown.ends_with("\xEF\xBF\xBD")) shown.resize(shown.size() - 3);
  const ReasoningDelta want = MakeReasoningParser("minicpmv", true)->Feed(shown, true);
  EXPECT_EQ(Str(m["reasoning"]), want.reasoning);
  EXPECT_EQ(Str(m["content"]), want.content);
  EXPECT_FALSE(want.content.empty());

  // No reasoning parser: ignored (the greedy output is the free one).
  EXPECT_EQ(ids(raw_, 5, nullptr), ids(raw_, std::nullopt, nullptr));
  // -1 is vLLM's "no budget"; below it, the client's mistake.
  Json bad = Body(true, false);
  bad["thinking_token_budget"] = -2;
  auto r = e2e::Post(parsed_->port(), "/v1/chat/completions", bad.dump());
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("thinking_token_budget must be non-negative"), std::string::npos);
}

TEST_F(HybridServingE2E, StreamedSplitEqualsTheWholeResponse) {
  for (bool thinking : {false, true}) {
    const Json m = Message(parsed_, thinking);
    auto r = e2e::PostStream(parsed_->port(), "/v1/chat/completions", Body(thinking, true).dump());
    ASSERT_EQ(r.status, 200);
    std::string reasoning, content;
    size_t pos = 0;
    bool done = false;
    while ((pos = r.body.find("data: ", pos)) != std::string::npos) {
      const size_t end = r.body.find("\n\n", pos);
      const std::string data = r.body.substr(pos + 6, end - pos - 6);
      pos = end;
      if (data == "[DONE]") {
        done = true;
        break;
      }
      Json c = Json::parse(data);
      if (c["choices"].empty()) continue;
      const Json& d = c["choices"][0]["delta"];
      if (d.contains("reasoning")) reasoning += d["reasoning"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(reasoning, Str(m["reasoning"]));
    EXPECT_EQ(content, Str(m["content"]));
  }
}

}  // namespace
}  // namespace cpm
