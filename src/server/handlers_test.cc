// Handler tests over a scripted fake engine and the tiny MiniCPM4-style tokenizer: response
// shapes, SSE framing, usage, stop strings, logprobs, n, and vLLM's error texts.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "server/handlers.h"
#include "server/sse.h"
#include "tokenizer/tiny_tokenizer.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

// Answers every request with the same scripted tokens (one event each), then EOS; records
// what was submitted and cancelled.
class FakeEngine : public EngineClient {
 public:
  std::vector<int32_t> script;
  int32_t eos = 2;
  std::mutex mu;
  std::vector<EngineRequest> submitted;
  std::vector<std::string> cancelled;

  std::shared_ptr<RequestStream> Submit(EngineRequest r) override {
    auto s = std::make_shared<RequestStream>();
    std::vector<int32_t> out(script.begin(), script.end());
    out.push_back(eos);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(out.size()), r.max_tokens);
    for (int64_t i = 0; i < n; ++i) {
      TokenEvent ev;
      ev.tokens = {out[i]};
      ev.num_prompt_tokens = static_cast<int64_t>(r.prompt.size());
      if (r.logprobs >= 0) {
        TokenLogprobs lp{out[i], -0.5f, {}};
        for (int k = 0; k < r.logprobs; ++k) lp.top.push_back({out[i] + k, -0.5f - k});
        ev.logprobs.push_back(lp);
      }
      if (i + 1 == n) {
        ev.finished = true;
        ev.finish_reason = out[i] == eos ? "stop" : "length";
      }
      s->Push(ev);
    }
    std::lock_guard<std::mutex> lock(mu);
    submitted.push_back(std::move(r));
    return s;
  }
  void Cancel(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu);
    cancelled.push_back(id);
  }
  EngineStats Stats() const override { return {}; }
};

class HandlersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("cpm_handlers_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), TinyTokenizerFamily::kSentencePieceBpe, nullptr).ok());
    auto tok = Tokenizer::Load(dir_.string());
    ASSERT_TRUE(tok.ok()) << tok.status().message();
    tok_ = std::move(*tok);
    auto tmpl = ChatTemplate::Parse(tok_->chat_template());
    ASSERT_TRUE(tmpl.ok());
    ctx_.chat_template = std::move(*tmpl);
    ctx_.model_names = {"tiny", "alias"};
    ctx_.model_root = dir_.string();
    ctx_.max_model_len = 64;
    ctx_.tokenizer = tok_.get();
    ctx_.eos_ids = {2};
    ctx_.engine = &engine_;
    ctx_.metrics = &metrics_;
    engine_.script = tok_->Encode("Hello world, this is fine.", false);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  Json Chat(const std::string& body, int* status = nullptr) {
    HttpReply r = HandleChatCompletions(ctx_, body, Clock::now());
    if (status) *status = r.status;
    return Json::parse(r.body);
  }
  // Runs a streamed reply; returns the raw SSE text.
  static std::string Drain(const HttpReply& r) {
    std::string all;
    r.stream([&](const std::string& s) {
      all += s;
      return true;
    });
    return all;
  }
  static std::vector<Json> Events(const std::string& sse, bool* done) {
    std::vector<Json> out;
    *done = false;
    size_t pos = 0;
    while (pos < sse.size()) {
      const size_t end = sse.find("\n\n", pos);
      EXPECT_NE(end, std::string::npos);
      const std::string line = sse.substr(pos, end - pos);
      EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
      EXPECT_FALSE(*done) << "event after [DONE]";
      if (line == "data: [DONE]") *done = true;
      else out.push_back(Json::parse(line.substr(6)));
      pos = end + 2;
    }
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
  FakeEngine engine_;
  ServerMetrics metrics_{"tiny", 64};
  ServerContext ctx_;
};

TEST_F(HandlersTest, ChatCompletionShapeAndUsage) {
  int status = 0;
  Json r = Chat(R"({"model":"alias","messages":[{"role":"user","content":"Hi"}],"max_tokens":40})",
                &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["model"], "tiny");
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello world, this is fine.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(r["choices"][0]["stop_reason"].is_null());
  ASSERT_EQ(engine_.submitted.size(), 1u);
  const int64_t prompt = static_cast<int64_t>(engine_.submitted[0].prompt.size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(r["usage"]["completion_tokens"], engine_.script.size() + 1);  // EOS counts
  EXPECT_EQ(r["usage"]["total_tokens"], prompt + engine_.script.size() + 1);
  EXPECT_EQ(engine_.submitted[0].max_tokens, 40);
  EXPECT_EQ(engine_.submitted[0].eos_token_ids, std::vector<int32_t>{2});
}

TEST_F(HandlersTest, ChatStreamFraming) {
  HttpReply r = HandleChatCompletions(
      ctx_,
      R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"n":2,
          "stream_options":{"include_usage":true}})",
      Clock::now());
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream");
  bool done = false;
  std::vector<Json> ev = Events(Drain(r), &done);
  EXPECT_TRUE(done);
  ASSERT_GE(ev.size(), 5u);
  EXPECT_EQ(ev[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(ev[1]["choices"][0]["delta"]["role"], "assistant");
  std::string text[2];
  int finishes = 0;
  for (size_t i = 2; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "chat.completion.chunk");
    const Json& c = ev[i]["choices"][0];
    if (c["delta"].contains("content")) text[c["index"].get<int>()] += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) ++finishes;
  }
  EXPECT_EQ(text[0], "Hello world, this is fine.");
  EXPECT_EQ(text[1], text[0]);
  EXPECT_EQ(finishes, 2);
  const Json& usage = ev.back();
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 2 * (engine_.script.size() + 1));
}

TEST_F(HandlersTest, StreamStopsWhenClientLeaves) {
  HttpReply r = HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})", Clock::now());
  int writes = 0;
  r.stream([&](const std::string&) { return ++writes < 2; });
  EXPECT_EQ(writes, 2);
  ASSERT_EQ(engine_.cancelled.size(), 1u);
}

TEST_F(HandlersTest, StopStringTruncatesAndCancels) {
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"stop":["this"],"seed":5,"n":2})");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r["choices"][i]["message"]["content"], "Hello world, ");
    EXPECT_EQ(r["choices"][i]["finish_reason"], "stop");
    EXPECT_EQ(r["choices"][i]["stop_reason"], "this");
  }
  ASSERT_EQ(engine_.submitted.size(), 2u);
  EXPECT_EQ(*engine_.submitted[0].sampling.seed + 1, *engine_.submitted[1].sampling.seed);
  EXPECT_EQ(engine_.cancelled.size(), 2u);
  // Fewer tokens than the whole script were counted.
  EXPECT_LT(r["usage"]["completion_tokens"].get<int64_t>(), 2 * (engine_.script.size() + 1));
  Json inc = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"stop":["this"],
                      "include_stop_str_in_output":true})");
  EXPECT_EQ(inc["choices"][0]["message"]["content"], "Hello world, this");
}

TEST_F(HandlersTest, ChatLogprobs) {
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":3,
                    "max_tokens":2})");
  const Json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["logprob"], -0.5);
  EXPECT_EQ(content[0]["top_logprobs"].size(), 3u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(engine_.submitted[0].logprobs, 3);
}

TEST_F(HandlersTest, ChatErrors) {
  int status = 0;
  Json e = Chat("{not json", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["type"], "BadRequestError");
  EXPECT_EQ(e["error"]["code"], 400);
  e = Chat(R"({"model":"nope","messages":[{"role":"user","content":"Hi"}]})", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(e["error"]["message"], "The model `nope` does not exist.");
  EXPECT_EQ(e["error"]["type"], "NotFoundError");
  Chat(R"({"messages":[]})", &status);
  EXPECT_EQ(status, 400);
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"temperature":-1})", &status);
  EXPECT_EQ(status, 400);
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"top_logprobs":21})",
       &status);
  EXPECT_EQ(status, 400);
  std::string longtext;
  for (int i = 0; i < 100; ++i) longtext += "hello world ";
  e = Chat(R"({"messages":[{"role":"user","content":")" + longtext + R"("}]})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(e["error"]["message"].get<std::string>().find(
                "This model's maximum context length is 64 tokens. However, your request has "),
            std::string::npos);
  e = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1000})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["message"].get<std::string>().rfind(
                "'max_tokens' or 'max_completion_tokens' is too large: 1000. ", 0),
            0u);
  e = Chat(R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
           &status);
  EXPECT_EQ(status, 400);
  EXPECT_TRUE(engine_.submitted.empty());
}

TEST_F(HandlersTest, CompletionsPromptsAndEcho) {
  HttpReply r = HandleCompletions(
      ctx_, R"({"model":"tiny","prompt":["Hello","world"],"n":2,"max_tokens":3,"echo":true})",
      Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = Json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["choices"][0]["text"].get<std::string>().rfind("Hello", 0), 0u);
  EXPECT_EQ(j["choices"][3]["text"].get<std::string>().rfind("world", 0), 0u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  const int64_t p = static_cast<int64_t>(tok_->Encode("Hello", true).size() +
                                         tok_->Encode("world", true).size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], p);

  r = HandleCompletions(ctx_, R"({"prompt":[1,5,6],"max_tokens":2,"logprobs":2})", Clock::now());
  j = Json::parse(r.body);
  ASSERT_EQ(r.status, 200) << r.body;
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_GE(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);

  r = HandleCompletions(ctx_, R"({"prompt":[1,99999]})", Clock::now());
  EXPECT_EQ(r.status, 400);
  r = HandleCompletions(ctx_, R"({"prompt":"x","max_tokens":64})", Clock::now());
  EXPECT_EQ(r.status, 400);
}

TEST_F(HandlersTest, CompletionsStream) {
  HttpReply r = HandleCompletions(
      ctx_, R"({"prompt":"Hello","stream":true,"max_tokens":4,"stream_options":{"include_usage":true}})",
      Clock::now());
  bool done = false;
  std::vector<Json> ev = Events(Drain(r), &done);
  EXPECT_TRUE(done);
  std::string text;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["object"], "text_completion");
    text += ev[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, tok_->Decode(std::vector<int32_t>(engine_.script.begin(), engine_.script.begin() + 4), true));
  EXPECT_EQ(ev.back()["usage"]["completion_tokens"], 4);
}

TEST_F(HandlersTest, TokenizeDetokenizeModels) {
  HttpReply r = HandleTokenize(ctx_, R"({"prompt":"Hello world","return_token_strs":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = Json::parse(r.body);
  const std::vector<int32_t> ids = tok_->Encode("Hello world", true);
  EXPECT_EQ(j["tokens"], ids);
  EXPECT_EQ(j["count"], ids.size());
  EXPECT_EQ(j["max_model_len"], 64);
  EXPECT_EQ(j["token_strs"].size(), ids.size());
  r = HandleTokenize(ctx_, R"({"messages":[{"role":"user","content":"Hi"}]})");
  j = Json::parse(r.body);
  EXPECT_GT(j["count"].get<int>(), 1);
  EXPECT_TRUE(j["token_strs"].is_null());
  r = HandleDetokenize(ctx_, Json{{"tokens", ids}}.dump());
  EXPECT_EQ(Json::parse(r.body)["prompt"], tok_->Decode(ids, false));
  EXPECT_EQ(HandleDetokenize(ctx_, R"({"tokens":[-1]})").status, 400);
  EXPECT_EQ(HandleTokenize(ctx_, R"({"model":"x","prompt":"a"})").status, 404);
  j = Json::parse(HandleModels(ctx_).body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 2u);
  EXPECT_EQ(j["data"][0]["id"], "tiny");
  EXPECT_EQ(j["data"][0]["owned_by"], "vllm");
  EXPECT_EQ(j["data"][0]["max_model_len"], 64);
  EXPECT_EQ(j["data"][0]["permission"][0]["object"], "model_permission");
}

}  // namespace
}  // namespace cpm
