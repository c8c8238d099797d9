// Handler tests over a scripted fake engine and the tiny MiniCPM4-style tokenizer: response
// shapes, SSE framing, usage, stop strings, logprobs, n, and vLLM's error texts.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>

#include "server/handlers.h"
#include "server/logprobs_json.h"
#include "server/responses.h"
#include "server/sse.h"
#include "tokenizer/tiny_tokenizer.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

// Answers every request with the same scripted tokens (one event each), then EOS; records
// what was submitted and cancelled. Prompt log-probs, when asked for, are -1 - position with
// rank 2, on the first event (a max_tokens 0 request gets one finished event with them).
class FakeEngine : public EngineClient {
 public:
  std::vector<int32_t> script;
  int32_t eos = 2;
  std::mutex mu;
  std::vector<EngineRequest> submitted;
  std::vector<std::string> cancelled;

  Status fail;         // non-OK: every request ends with this error before any token
  bool abort = false;  // every request ends with "abort" before any token (a shutdown)

  std::shared_ptr<RequestStream> Submit(EngineRequest r) override {
    auto s = std::make_shared<RequestStream>();
    if (abort) {
      TokenEvent ev;
      ev.finished = true;
      ev.finish_reason = "abort";
      s->Push(ev);
      return s;
    }
    if (!fail.ok()) {
      TokenEvent ev;
      ev.finished = true;
      ev.finish_reason = "error";
      ev.error = fail;
      s->Push(ev);
      return s;
    }
    std::vector<int32_t> out(script.begin(), script.end());
    out.push_back(eos);
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(out.size()), r.max_tokens);
    std::vector<TokenLogprobs> prompt_lps;
    for (size_t p = 1; r.prompt_logprobs >= 0 && p < r.prompt.size(); ++p) {
      TokenLogprobs lp{r.prompt[p], -1.0f - static_cast<float>(p), {}, 2};
      for (int k = 0; k < r.prompt_logprobs; ++k) lp.top.push_back({7 + k, -0.25f - k});
      prompt_lps.push_back(lp);
    }
    if (n == 0) {
      TokenEvent ev;
      ev.finished = true;
      ev.finish_reason = "length";
      ev.num_prompt_tokens = static_cast<int64_t>(r.prompt.size());
      ev.prompt_logprobs = prompt_lps;
      s->Push(ev);
    }
    for (int64_t i = 0; i < n; ++i) {
      TokenEvent ev;
      ev.tokens = {out[i]};
      if (i == 0) ev.prompt_logprobs = prompt_lps;
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
    ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), Family(), nullptr).ok());
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
  virtual TinyTokenizerFamily Family() const { return TinyTokenizerFamily::kSentencePieceBpe; }

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

  // A Responses stream's event payloads (each `event: <type>\ndata: <json>` block's JSON).
  static std::vector<Json> ResponsesEvents(const std::string& sse) {
    std::vector<Json> out;
    for (size_t pos = 0; (pos = sse.find("data: ", pos)) != std::string::npos;) {
      const size_t end = sse.find('\n', pos);
      out.push_back(Json::parse(sse.substr(pos + 6, end - pos - 6)));
      pos = end;
    }
    return out;
  }

  std::filesystem::path dir_;
  std::unique_ptr<Tokenizer> tok_;
  FakeEngine engine_;
  ServerMetrics metrics_{"tiny", 64};
  ServerContext ctx_;
};

// /tokenizer_info writes an integer past 64 bits as Python writes it, all its digits
// (transformers' default model_max_length, int(1e30)), not as nlohmann's double (1e+30).
TEST_F(HandlersTest, TokenizerInfoKeepsBigIntegers) {
  EXPECT_EQ(HandleTokenizerInfo(ctx_).status, 404);  // off unless asked for
  ctx_.tokenizer_info = Json::parse(
      R"({"model_max_length": 1000000000000000019884624838656, "small": 4096, "ratio": 0.5,)"
      R"( "nested": [{"n": -1000000000000000019884624838656}], "name": "x"})");
  const HttpReply r = HandleTokenizerInfo(ctx_);
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body,
            R"({"model_max_length":1000000000000000019884624838656,"small":4096,"ratio":0.5,)"
            R"("nested":[{"n":-1000000000000000019884624838656}],"name":"x"})");
}

TEST_F(HandlersTest, ChatCompletionShapeAndUsage) {
  int status = 0;
  Json r = Chat(R"({"model":"alias","messages":[{"role":"user","content":"Hi"}],"max_tokens":40})",
                &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["model"], "alias");  // the served name asked for (vLLM's _get_model_name)
  EXPECT_EQ(r["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello world, this is fine.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(r["choices"][0]["stop_reason"].is_null());
  // vLLM's model_dump(): every field of the choice and its message, in its order, the unused
  // ones null (clients read message.reasoning_content or .refusal without checking for it).
  std::vector<std::string> keys;
  for (const auto& [key, value] : r["choices"][0].items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"index", "message", "logprobs", "finish_reason",
                                            "stop_reason", "token_ids"}));
  keys.clear();
  for (const auto& [key, value] : r["choices"][0]["message"].items()) {
    keys.push_back(key);
    if (key != "role" && key != "content" && key != "tool_calls") {
      EXPECT_TRUE(value.is_null()) << key;
    }
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"role", "content", "refusal", "annotations", "audio",
                                            "function_call", "tool_calls", "reasoning",
                                            "reasoning_content"}));
  ASSERT_EQ(engine_.submitted.size(), 1u);
  const int64_t prompt = static_cast<int64_t>(engine_.submitted[0].prompt.size());
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(r["usage"]["completion_tokens"], engine_.script.size() + 1);  // EOS counts
  EXPECT_EQ(r["usage"]["total_tokens"], prompt + engine_.script.size() + 1);
  EXPECT_EQ(engine_.submitted[0].max_tokens, 40);
  EXPECT_EQ(engine_.submitted[0].eos_token_ids, std::vector<int32_t>{2});
}

// continue_final_message cuts where transformers' apply_chat_template does, on a template that
// keeps the message's whitespace: after its trailing whitespace only when the rendering holds the
// text exactly as sent (never with leading whitespace); an empty text continues the whole
// rendering.
TEST_F(HandlersTest, ContinueFinalMessageCutsAsTransformers) {
  const auto prompt_for = [&](const std::string& final_text) {
    int status = 0;
    Chat(Json{{"messages",
               {{{"role", "user"}, {"content", "hi"}},
                {{"role", "assistant"}, {"content", final_text}}}},
              {"max_tokens", 1},
              {"add_generation_prompt", false},
              {"continue_final_message", true}}
             .dump(),
         &status);
    EXPECT_EQ(status, 200) << final_text;
    return tok_->Decode(engine_.submitted.back().prompt, false);
  };
  EXPECT_TRUE(prompt_for("Sure, ").ends_with("assistant\nSure, ")) << prompt_for("Sure, ");
  EXPECT_TRUE(prompt_for(" lead and trail \n").ends_with("assistant\n lead and trail"))
      << prompt_for(" lead and trail \n");
  // Python's strip() takes Unicode whitespace: an ideographic space is trailing whitespace too.
  EXPECT_TRUE(prompt_for("\xE3\x80\x80好\xE3\x80\x80").ends_with("assistant\n\xE3\x80\x80好"))
      << prompt_for("\xE3\x80\x80好\xE3\x80\x80");
  const std::string whole = prompt_for("");
  EXPECT_TRUE(whole.ends_with("assistant\n<|im_end|>\n")) << whole;
}

TEST_F(HandlersTest, ChatStreamFraming) {
  HttpReply r = HandleChatCompletions(
      ctx_,
      R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"n":2,
          "stream_options":{"include_usage":true}})",
      Clock::now());
  ASSERT_EQ(r.status, 200);
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream; charset=utf-8");
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

// As vLLM's iteration stats: a stream's first token and each later gap are observed as they
// come, its finished-request statistics when it ends; a client that leaves adds none of those.
TEST_F(HandlersTest, TokenLatenciesAreObservedAsTheyCome) {
  const auto count = [&](const std::string& metric) {
    const std::string text = metrics_.Render(EngineStats{});
    const std::string key = metric + "_count{engine=\"0\",model_name=\"tiny\"} ";
    const size_t at = text.find(key);
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + key.size()));
  };
  HttpReply r = HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})", Clock::now());
  int writes = 0;
  double ttft = -1, itl = -1, e2e = -1;
  r.stream([&](const std::string&) {
    if (++writes == 3) {  // the role chunk and two tokens' chunks are out
      ttft = count("vllm:time_to_first_token_seconds");
      itl = count("vllm:inter_token_latency_seconds");
      e2e = count("vllm:e2e_request_latency_seconds");
    }
    return writes < 3;  // then the client leaves
  });
  EXPECT_EQ(ttft, 1);
  EXPECT_EQ(itl, 1);
  EXPECT_EQ(e2e, 0);
  EXPECT_EQ(count("vllm:e2e_request_latency_seconds"), 0);  // the abandoned request
  EXPECT_EQ(count("vllm:request_time_per_output_token_seconds"), 0);
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1})");
  EXPECT_EQ(count("vllm:e2e_request_latency_seconds"), 1);
  EXPECT_EQ(count("vllm:request_time_per_output_token_seconds"), 1);  // one token: 0
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

TEST_F(HandlersTest, NoStopStringInTheFirstMinTokens) {
  // "Hello world, this is fine." with the stop "o": the first "o" is in the first token(s), which
  // min_tokens keeps from being checked (vLLM's detokenizer), so the match is a later "o".
  const std::vector<int32_t> ids = tok_->Encode("Hello world, this is fine.", false);
  const auto content = [&](int64_t min_tokens, const char* stop) {
    const Json r = Chat(Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                             {"stop", {stop}},
                             {"min_tokens", min_tokens}}
                            .dump());
    return r["choices"][0]["message"]["content"].get<std::string>();
  };
  EXPECT_EQ(content(0, "o"), "Hell");
  // The tokens whose text holds the first "o", counted.
  int64_t first_o = 0;
  while (tok_->Decode({ids.begin(), ids.begin() + first_o}, false).find('o') == std::string::npos)
    ++first_o;
  const std::string unchecked = tok_->Decode({ids.begin(), ids.begin() + first_o}, false);
  const std::string after = "Hello world, this is fine.";
  const size_t next_o = after.find('o', unchecked.size());
  EXPECT_EQ(content(first_o, "o"), after.substr(0, next_o));
  // Streamed the same.
  bool done = false;
  std::string streamed;
  for (const Json& e : Events(Drain(HandleChatCompletions(
                                  ctx_,
                                  Json{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                       {"stop", {"o"}},
                                       {"min_tokens", first_o},
                                       {"stream", true}}
                                      .dump(),
                                  Clock::now())),
                              &done)) {
    if (e.contains("choices") && !e["choices"].empty() &&
        e["choices"][0]["delta"].contains("content")) {
      streamed += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(streamed, after.substr(0, next_o));
}

TEST_F(HandlersTest, ChatEchoPutsTheLastMessageFirstWhenItIsTheRepliesRole) {
  // vLLM's serving_chat: echo prepends the last message's content when its role is the reply's.
  const std::string generated = "Hello world, this is fine.";
  const auto content = [&](const Json& last, bool add_generation_prompt, bool stream) {
    const std::string body = Json{{"messages", {last}},
                                  {"echo", true},
                                  {"add_generation_prompt", add_generation_prompt},
                                  {"stream", stream}}
                                 .dump();
    if (!stream) return Chat(body)["choices"][0]["message"]["content"].get<std::string>();
    bool done = false;
    std::string text;
    for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, body, Clock::now())), &done)) {
      if (e.contains("choices") && !e["choices"].empty() &&
          e["choices"][0]["delta"].contains("content")) {
        text += e["choices"][0]["delta"]["content"].get<std::string>();
      }
    }
    return text;
  };
  const Json user = {{"role", "user"}, {"content", "Hi"}};
  const Json parts = {{"role", "user"},
                      {"content", {{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"},
                                                                        {"text", "there"}}}}};
  // Parts as the prompt takes them (vLLM echoes its parsed conversation): a refusal part's
  // text counts, a text part with a null text is skipped.
  const Json mixed = {{"role", "user"},
                      {"content", {{{"type", "input_text"}, {"text", "Hi"}},
                                   {{"type", "text"}, {"text", nullptr}},
                                   {{"type", "refusal"}, {"refusal", "no"}}}}};
  for (bool stream : {false, true}) {
    // A reply continuing the user's turn (its role "user") echoes it; an assistant reply not.
    EXPECT_EQ(content(user, false, stream), "Hi" + generated);
    EXPECT_EQ(content(parts, false, stream), "Hi\nthere" + generated);
    EXPECT_EQ(content(mixed, false, stream), "Hi\nno" + generated);
    EXPECT_EQ(content(user, true, stream), generated);
  }
  // echo also scores the prompt (vLLM: prompt_logprobs = top_logprobs, 0 by default), unless
  // prompt_logprobs says otherwise.
  Json r = Chat(Json{{"messages", {user}}, {"echo", true}}.dump());
  EXPECT_EQ(engine_.submitted.back().prompt_logprobs, 0);
  ASSERT_TRUE(r["prompt_logprobs"].is_array()) << r.dump();
  EXPECT_TRUE(r["prompt_logprobs"][0].is_null());
  Chat(Json{{"messages", {user}}, {"echo", true}, {"logprobs", true}, {"top_logprobs", 3}}.dump());
  EXPECT_EQ(engine_.submitted.back().prompt_logprobs, 3);
  Chat(Json{{"messages", {user}}, {"echo", true}, {"logprobs", true}, {"top_logprobs", 3},
            {"prompt_logprobs", 1}}.dump());
  EXPECT_EQ(engine_.submitted.back().prompt_logprobs, 1);
  Chat(Json{{"messages", {user}}}.dump());
  EXPECT_LT(engine_.submitted.back().prompt_logprobs, 0);
}

TEST_F(HandlersTest, GenerationConfigsOtherEosIdsAreStopTokenIds) {
  // vLLM's update_from_generation_config: the tokenizer's EOS stays the EOS; the model's other
  // EOS ids become stop token ids (a reply ending on one reports it as stop_reason), unless
  // ignore_eos, where none of them stops the reply but min_tokens still masks them all (the
  // engine's EOS ids: never a stop under ignore_eos, always masked before min_tokens).
  ctx_.eos_ids = {2, 9, 11};
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"stop_token_ids":[11,4]})");
  EXPECT_EQ(engine_.submitted.back().eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(engine_.submitted.back().stop_token_ids, (std::vector<int32_t>{11, 4, 9}));
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"ignore_eos":true})");
  EXPECT_TRUE(engine_.submitted.back().ignore_eos);
  EXPECT_TRUE(engine_.submitted.back().stop_token_ids.empty());
  EXPECT_EQ(engine_.submitted.back().eos_token_ids, (std::vector<int32_t>{2, 9, 11}));
}

// vLLM's renderer: where the template never names the developer role, developer messages are
// system messages (their tools dropped), and the system messages then one at the front, their
// texts joined by blank lines; a template that names the role gets them as sent.
TEST_F(HandlersTest, DeveloperMessagesAreSystemWhereTheTemplateKnowsNoDeveloper) {
  ctx_.trust_request_chat_template = true;
  const auto rendered = [&](const std::string& tmpl, const Json& messages) {
    int status = 0;
    const Json body = {{"messages", messages}, {"chat_template", tmpl}};
    const Json r = Chat(body.dump(), &status);
    EXPECT_EQ(status, 200) << r.dump();
    return tok_->Decode(engine_.submitted.back().prompt, true);
  };
  const std::string plain = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
  const Json three = Json::parse(R"([{"role":"system","content":"S"},
      {"role":"user","content":"u"},
      {"role":"developer","content":[{"type":"text","text":"D1"},{"type":"text","text":"D2"}],
       "tools":[{"type":"function"}]}])");
  EXPECT_EQ(rendered(plain, three), "[system:S\n\nD1\nD2][user:u]");
  // A developer message alone first: system, nothing to merge.
  EXPECT_EQ(rendered(plain, Json::parse(R"([{"role":"developer","content":"D"},
      {"role":"user","content":"u"}])")),
            "[system:D][user:u]");
  // No developer message: two system messages stay as sent.
  EXPECT_EQ(rendered(plain, Json::parse(R"([{"role":"system","content":"A"},
      {"role":"system","content":"B"}])")),
            "[system:A][system:B]");
  // The template names the role: left as sent.
  const std::string knows = "{% for m in messages %}{% if m.role == 'developer' %}<dev>"
                            "{% endif %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
  EXPECT_EQ(rendered(knows, Json::parse(R"([{"role":"user","content":"u"},
      {"role":"developer","content":"D"}])")),
            "[user:u]<dev>[developer:D]");
  ctx_.trust_request_chat_template = false;
}

// vLLM's content formats, detected per template: one that loops over a message's content takes
// a list of parts (a string content one text part); another the non-empty texts joined by
// newlines.
TEST_F(HandlersTest, ContentFormatFollowsTheTemplate) {
  ctx_.trust_request_chat_template = true;
  const auto rendered = [&](const std::string& tmpl, const Json& content) {
    int status = 0;
    const Json body = {{"messages", {{{"role", "user"}, {"content", content}}}},
                       {"chat_template", tmpl}};
    const Json r = Chat(body.dump(), &status);
    EXPECT_EQ(status, 200) << r.dump();
    return tok_->Decode(engine_.submitted.back().prompt, true);
  };
  const std::string openai = "{% for message in messages %}{{ message['role'] }}: "
                             "{% for part in message['content'] %}{% if part['type'] == 'text' %}"
                             "[{{ part['text'] }}]{% endif %}{% endfor %}\n{% endfor %}";
  // (trim_blocks takes the newline after the inner endfor.)
  EXPECT_EQ(rendered(openai, "hi"), "user: [hi]");
  EXPECT_EQ(rendered(openai, Json::parse(R"([{"type":"text","text":""},"b"])")), "user: [][b]");
  const std::string string = "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}";
  EXPECT_EQ(rendered(string, Json::parse(R"([{"type":"text","text":""},{"type":"text","text":"a"},
      {"type":"text","text":""},"b"])")),
            "user: a\nb|");
  EXPECT_EQ(rendered(string, nullptr), "user: |");
  ctx_.trust_request_chat_template = false;
}

TEST_F(HandlersTest, RequestChatTemplateOnlyWhenTrusted) {
  const std::string body = R"({"messages":[{"role":"user","content":"Hi"}],
      "chat_template":"{% for m in messages %}<<{{ m.content }}>>{% endfor %}"})";
  int status = 0;
  Json r = Chat(body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"],
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template.");
  ctx_.trust_request_chat_template = true;
  r = Chat(body, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(tok_->Decode(engine_.submitted.back().prompt, true), "<<Hi>>");
  // A broken template, or one that runs away, is the client's 400, within the render limits.
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"chat_template":"{% for %}"})", &status);
  EXPECT_EQ(status, 400);
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],
           "chat_template":"{% for i in range(100000000) %}x{% endfor %}"})", &status);
  EXPECT_EQ(status, 400);
  // chat_template_kwargs.chat_template is a request's template too (vLLM checks both); it wins
  // over the top-level one, and is not a template variable.
  const std::string in_kwargs = R"({"messages":[{"role":"user","content":"Hi"}],
      "chat_template":"ignored",
      "chat_template_kwargs":{"chat_template":"[{{ messages[0].content }}|{{ chat_template is defined }}]"}})";
  ctx_.trust_request_chat_template = false;
  r = Chat(in_kwargs, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("--trust-request-chat-template"),
            std::string::npos);
  ctx_.trust_request_chat_template = true;
  r = Chat(in_kwargs, &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(tok_->Decode(engine_.submitted.back().prompt, true), "[Hi|False]");
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

// --return-tokens-as-token-ids sets the default; a request's return_tokens_as_token_ids wins.
TEST_F(HandlersTest, LogprobTokensAsTokenIdsByDefaultOrRequest) {
  ctx_.return_tokens_as_token_ids = true;
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"max_tokens":1})");
  const std::string by_default = r["choices"][0]["logprobs"]["content"][0]["token"];
  EXPECT_EQ(by_default.rfind("token_id:", 0), 0u) << by_default;
  r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,"max_tokens":1,
               "return_tokens_as_token_ids":false})");
  const std::string text = r["choices"][0]["logprobs"]["content"][0]["token"];
  EXPECT_EQ(text.find("token_id:"), std::string::npos) << text;
  ctx_.return_tokens_as_token_ids = false;
}

// vLLM's cache_salt reaches the engine (which mixes it into the prefix-cache hashes); an empty
// or non-string one is vLLM's 400, null is none.
TEST_F(HandlersTest, CacheSaltReachesTheEngineOrIsRefused) {
  int status = 0;
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"cache_salt":"s3cret"})", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(engine_.submitted.back().cache_salt, "s3cret");
  HttpReply r = HandleCompletions(ctx_, R"({"prompt":"Hi","cache_salt":"t"})", Clock::now());
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(engine_.submitted.back().cache_salt, "t");
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"cache_salt":null})", &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(engine_.submitted.back().cache_salt, "");
  for (const char* bad : {R"("")", "1"}) {
    const Json e = Chat(std::string(R"({"messages":[{"role":"user","content":"Hi"}],"cache_salt":)") +
                            bad + "}",
                        &status);
    EXPECT_EQ(status, 400) << bad;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(
                  "Parameter 'cache_salt' must be a non-empty string if provided."),
              std::string::npos);
  }
}

TEST_F(HandlersTest, ChatErrors) {
  int status = 0;
  Json e = Chat("{not json", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["type"], "Bad Request");  // a RequestValidationError in vLLM
  EXPECT_EQ(e["error"]["code"], 400);
  e = Chat(R"({"model":"nope","messages":[{"role":"user","content":"Hi"}]})", &status);
  EXPECT_EQ(status, 404);
  EXPECT_EQ(e["error"]["message"], "The model `nope` does not exist.");
  EXPECT_EQ(e["error"]["type"], "NotFoundError");
  EXPECT_EQ(e["error"]["param"], "model");  // vLLM names the parameter where it can
  // An empty list is the template's to judge (vLLM sets no minimum); continuing a final
  // message needs one.
  Chat(R"({"messages":[],"add_generation_prompt":false,"continue_final_message":true})", &status);
  EXPECT_EQ(status, 400);
  e = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"chat_template_kwargs":{"tokenize":true}})",
           &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["message"], "Found unexpected chat template kwargs from request: {'tokenize'}");
  e = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"temperature":-1})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(e["error"]["message"], "temperature must be non-negative, got -1.0.");
  EXPECT_EQ(e["error"]["param"], "temperature");
  e = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"presence_penalty":3})", &status);
  EXPECT_TRUE(e["error"]["param"].is_null());  // vLLM names none for the penalties
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
  EXPECT_EQ(e["error"]["param"], "input_tokens");
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

// n is bounded as vLLM bounds it (VLLM_MAX_N_SEQUENCES, with its text; 1024 by default here),
// and so is a completion's prompts × n.
TEST_F(HandlersTest, NIsBoundedAsVllmBoundsIt) {
  EXPECT_EQ(ctx_.max_n_sequences, 1024);
  int status = 0;
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":1,"n":1025})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"],
            "n must be at most 1024, got 1025. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable.");
  ctx_.max_n_sequences = 4;
  HttpReply c = HandleCompletions(ctx_, R"({"prompt":"x","max_tokens":1,"n":5})", Clock::now());
  EXPECT_EQ(c.status, 400);
  EXPECT_NE(c.body.find("n must be at most 4, got 5."), std::string::npos) << c.body;
  c = HandleCompletions(ctx_, R"({"prompt":["x","y","z"],"max_tokens":1,"n":2})", Clock::now());
  EXPECT_EQ(c.status, 400);
  EXPECT_NE(c.body.find("too many prompts x n for one request (6; at most 4"), std::string::npos)
      << c.body;
  c = HandleCompletions(ctx_, R"({"prompt":["x","y"],"max_tokens":1,"n":2})", Clock::now());
  EXPECT_EQ(c.status, 200) << c.body;
}

// A model template that does not parse: each chat request's 400 says why (vLLM renders the
// template per request and answers its Jinja error), not "no chat template".
TEST_F(HandlersTest, UnparsableModelTemplateSaysWhy) {
  ctx_.chat_template.reset();
  ctx_.chat_template_error = "unexpected '}' at line 1";
  int status = 0;
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}]})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"], "the model's chat template: unexpected '}' at line 1");
}

TEST_F(HandlersTest, CompletionsMaxTokensNullIsTheDefault) {
  // Absent or null: OpenAI's 16 (vLLM's normalize_null_max_tokens).
  HttpReply r = HandleCompletions(ctx_, R"({"prompt":[5,6,7,8]})", Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.back().max_tokens, 16);
  r = HandleCompletions(ctx_, R"({"prompt":[5,6,7,8],"max_tokens":null})", Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.back().max_tokens, 16);
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

// The chat form's tools are validated as a chat request's are (vLLM's pydantic types).
TEST_F(HandlersTest, TokenizeValidatesTools) {
  for (const char* tools : {R"("abc")", "[1]", R"([{"type":"function"}])"}) {
    const HttpReply r = HandleTokenize(
        ctx_, std::string(R"({"messages":[{"role":"user","content":"x"}],"tools":)") + tools + "}");
    EXPECT_EQ(r.status, 400) << tools << " " << r.body;
  }
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

// echo with logprobs: the prompt's tokens lead the logprobs (the first unscored), as vLLM.
TEST_F(HandlersTest, CompletionsEchoWithLogprobs) {
  HttpReply r = HandleCompletions(
      ctx_, R"({"prompt":[1,5,6],"max_tokens":2,"logprobs":1,"echo":true})", Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = Json::parse(r.body);
  const Json& c = j["choices"][0];
  const Json& lp = c["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 5u);  // 3 prompt + 2 generated
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][1].get<double>(), -2.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][2].get<double>(), -3.0);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][3].get<double>(), -0.5);  // the first generated
  EXPECT_EQ(lp["text_offset"][0], 0);
  std::string joined;
  for (const Json& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(lp["text_offset"][4].get<int64_t>(), static_cast<int64_t>(
      joined.size() - lp["tokens"][4].get<std::string>().size()));
  ASSERT_EQ(engine_.submitted.size(), 1u);
  EXPECT_EQ(engine_.submitted[0].prompt_logprobs, 1);
  // prompt_logprobs in vLLM's shape: null, then {id: {logprob, rank, decoded_token}}.
  ASSERT_EQ(c["prompt_logprobs"].size(), 3u);
  EXPECT_TRUE(c["prompt_logprobs"][0].is_null());
  EXPECT_DOUBLE_EQ(c["prompt_logprobs"][1]["5"]["logprob"].get<double>(), -2.0);
  EXPECT_EQ(c["prompt_logprobs"][1]["5"]["rank"], 2);
  EXPECT_EQ(c["prompt_logprobs"][1]["7"]["rank"], 1);

  // The request's own prompt_logprobs wins over echo's (vLLM's to_sampling_params).
  r = HandleCompletions(
      ctx_, R"({"prompt":[1,5,6],"max_tokens":2,"logprobs":1,"echo":true,"prompt_logprobs":3})",
      Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.submitted.back().prompt_logprobs, 3);
  const Json with_own = Json::parse(r.body);  // named: a range-for over a temporary's member
  for (const Json& tops : with_own["choices"][0]["logprobs"]["top_logprobs"]) {
    EXPECT_LE(tops.size(), 2u) << tops.dump();  // logprobs 1, plus the token when not in it
  }
  // A prompt token that is its position's top 1 (the fake's tops are 7, 8, 9): vLLM keeps the
  // first logprobs + 1 entries of {token, top 3}, so the next one shows too.
  r = HandleCompletions(
      ctx_, R"({"prompt":[1,7,6],"max_tokens":1,"logprobs":1,"echo":true,"prompt_logprobs":3})",
      Clock::now());
  const Json top1 = Json::parse(r.body)["choices"][0]["logprobs"]["top_logprobs"][1];
  EXPECT_EQ(top1.size(), 2u) << top1.dump();

  // Echo without generation: max_tokens 0 returns the prompt and its log-probs only; the one
  // token vLLM generates anyway counts in the usage.
  for (bool stream : {false, true}) {
    const Json body = {{"prompt", "Hello world"}, {"max_tokens", 0}, {"logprobs", 0},
                       {"echo", true},           {"stream", stream},
                       {"stream_options", stream ? Json{{"include_usage", true}} : Json()}};
    r = HandleCompletions(ctx_, body.dump(), Clock::now());
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(engine_.submitted.back().max_tokens, 1);
    if (stream) {
      bool done = false;
      std::string text;
      size_t tokens = 0;
      const auto events = Events(Drain(std::move(r)), &done);
      for (const Json& e : events) {
        if (e["choices"].empty()) continue;
        text += e["choices"][0]["text"].get<std::string>();
        if (e["choices"][0]["logprobs"].is_object()) {
          tokens += e["choices"][0]["logprobs"]["tokens"].size();
        }
      }
      EXPECT_EQ(text, "Hello world");
      EXPECT_EQ(tokens, tok_->Encode("Hello world", true).size());
      EXPECT_EQ(events.back()["usage"]["completion_tokens"], 1);
      continue;
    }
    j = Json::parse(r.body);
    EXPECT_EQ(j["choices"][0]["text"], "Hello world");
    EXPECT_EQ(j["usage"]["completion_tokens"], 1);
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(),
              tok_->Encode("Hello world", true).size());
  }
  // vLLM refuses any suffix, an empty one included.
  r = HandleCompletions(ctx_, R"({"prompt":"Hi","max_tokens":1,"suffix":""})", Clock::now());
  EXPECT_EQ(r.status, 400);
  // Without echo max_tokens must still be at least 1.
  r = HandleCompletions(ctx_, R"({"prompt":"Hi","max_tokens":0})", Clock::now());
  EXPECT_EQ(r.status, 400);

  // Streamed: the first chunk carries the echoed prompt and its log-probs.
  bool done = false;
  auto events = Events(Drain(HandleCompletions(
      ctx_, R"({"prompt":[1,5,6],"max_tokens":2,"logprobs":0,"echo":true,"stream":true})",
      Clock::now())), &done);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events[0]["choices"][0]["logprobs"]["tokens"].size(), 4u);  // prompt + first
  EXPECT_TRUE(events[0]["choices"][0]["logprobs"]["token_logprobs"][0].is_null());
}

// vLLM's prompt_logprobs dict: the token first, then the top k; a token among the top k takes
// the top-k entry's rank (its own rank is the worst of its tie, here 2: 7 and 9 tie).
TEST_F(HandlersTest, PromptLogprobsRankOfATokenAmongTheTop) {
  const TokenLogprobs lp{7, -1.0f, {{7, -1.0f}, {9, -1.0f}, {8, -2.0f}}, 2};
  const Json j = PromptLogprobsJson(*tok_, {lp}, 3);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[1].begin().key(), "7");  // keeps its first place
  EXPECT_EQ(j[1]["7"]["rank"], 1);
  EXPECT_EQ(j[1]["9"]["rank"], 2);
  EXPECT_EQ(j[1]["8"]["rank"], 3);
  EXPECT_EQ(j[1].size(), 3u);
}

TEST_F(HandlersTest, ChatPromptLogprobs) {
  Json r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"prompt_logprobs":2})");
  ASSERT_TRUE(r["prompt_logprobs"].is_array()) << r.dump();
  const size_t n = engine_.submitted.back().prompt.size();
  ASSERT_EQ(r["prompt_logprobs"].size(), n);
  EXPECT_TRUE(r["prompt_logprobs"][0].is_null());
  EXPECT_EQ(r["prompt_logprobs"][1].size(), 3u);  // the token and the top 2
  int status = 0;
  r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"prompt_logprobs":2,"stream":true})",
           &status);
  EXPECT_EQ(status, 400);
  r = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"prompt_logprobs":21})", &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("greater than max allowed: 20"),
            std::string::npos);
}

// return_token_ids (vLLM): the prompt's ids and each choice's generated ids (an EOS that ended
// it included), whole in a reply; streamed, the prompt's on a choice's first chunk and each
// chunk's new ids.
TEST_F(HandlersTest, ReturnTokenIds) {
  std::vector<int32_t> generated(engine_.script.begin(), engine_.script.end());
  generated.push_back(engine_.eos);
  const Json expected_ids = generated;
  for (bool chat : {false, true}) {
    for (bool stream : {false, true}) {
      Json body = {{"max_tokens", 40}, {"stream", stream}, {"return_token_ids", true}};
      if (chat) {
        body["messages"] = {{{"role", "user"}, {"content", "Hi"}}};
      } else {
        body["prompt"] = {1, 5, 6};
      }
      HttpReply r = chat ? HandleChatCompletions(ctx_, body.dump(), Clock::now())
                         : HandleCompletions(ctx_, body.dump(), Clock::now());
      ASSERT_EQ(r.status, 200) << r.body;
      const Json prompt_ids = engine_.submitted.back().prompt;
      if (!chat) { EXPECT_EQ(prompt_ids, Json({1, 5, 6})); }
      Json ids = Json::array(), prompts = Json::array();
      if (!stream) {
        const Json j = Json::parse(r.body);
        const Json& c = j["choices"][0];
        ids = c["token_ids"];
        prompts.push_back(chat ? j["prompt_token_ids"] : c["prompt_token_ids"]);
      } else {
        bool done = false;
        for (const Json& e : Events(Drain(std::move(r)), &done)) {
          if (e["choices"].empty()) continue;
          const Json& c = e["choices"][0];
          ASSERT_TRUE(c.contains("token_ids") || chat) << e.dump();
          for (const Json& id : c.value("token_ids", Json::array())) ids.push_back(id);
          const Json& holder = chat ? e : c;
          if (holder.contains("prompt_token_ids") && !holder["prompt_token_ids"].is_null()) {
            prompts.push_back(holder["prompt_token_ids"]);
          }
        }
      }
      EXPECT_EQ(ids, expected_ids) << chat << stream;
      EXPECT_EQ(prompts, Json::array({prompt_ids})) << chat << stream;
    }
  }
  // With echo, vLLM echoes no text: the prompt is in prompt_token_ids.
  const Json echoed = Json::parse(
      HandleCompletions(ctx_, R"({"prompt":"Hello","max_tokens":1,"echo":true,
                                 "return_token_ids":true})", Clock::now()).body);
  const std::vector<int32_t> first = {engine_.script[0]};
  EXPECT_EQ(echoed["choices"][0]["text"], tok_->Decode(first, true));
  // Not asked for: both null (vLLM dumps every field of its completion choice).
  const Json plain = Json::parse(HandleCompletions(ctx_, R"({"prompt":[1],"max_tokens":1})",
                                                   Clock::now()).body);
  EXPECT_TRUE(plain["choices"][0]["token_ids"].is_null()) << plain.dump();
  EXPECT_TRUE(plain["choices"][0]["prompt_token_ids"].is_null());
  bool done = false;
  for (const Json& e : Events(Drain(HandleCompletions(
           ctx_, R"({"prompt":[1],"max_tokens":2,"stream":true})", Clock::now())), &done)) {
    const Json& c = e.at("choices").at(0);
    EXPECT_TRUE(e.contains("usage") && e.at("usage").is_null() && c.contains("token_ids") &&
                c.at("token_ids").is_null() && c.contains("prompt_token_ids") &&
                c.at("prompt_token_ids").is_null())
        << e.dump();
  }
  // Chat's stream: the role chunk's prompt_token_ids and later chunks' token_ids null.
  const auto events = Events(Drain(HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"stream":true})",
      Clock::now())), &done);
  ASSERT_GE(events.size(), 2u);
  EXPECT_TRUE(events[0].contains("prompt_token_ids") && events[0]["prompt_token_ids"].is_null());
  EXPECT_TRUE(events[1]["choices"][0].contains("token_ids") &&
              events[1]["choices"][0]["token_ids"].is_null()) << events[1].dump();
}

// Batches of prompts as evaluation harnesses send them: hundreds are one request; past vLLM's
// bound of 1024 prompts, a 400.
TEST_F(HandlersTest, CompletionsTakeLargePromptBatches) {
  Json body = {{"prompt", Json::array()}, {"max_tokens", 1}};
  for (int i = 0; i < 300; ++i) body["prompt"].push_back({1, 5});
  HttpReply r = HandleCompletions(ctx_, body.dump(), Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(Json::parse(r.body)["choices"].size(), 300u);
  body["prompt"] = Json::array();
  for (int i = 0; i < 1025; ++i) body["prompt"].push_back({1, 5});
  r = HandleCompletions(ctx_, body.dump(), Clock::now());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["message"],
            "prompt list length 1025 exceeds the maximum allowed count of 1024. To increase this "
            "limit, set the VLLM_MAX_COMPLETION_PROMPTS environment variable.");
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "prompt");
}

// Byte-fallback pieces as vLLM shows them: each token decoded alone, so a piece that is not
// whole UTF-8 is U+FFFD in tokens, in the top_logprobs keys (one key, where the raw bytes made
// several that the JSON dump then repeated) and in text_offset (one character). Streams send a
// chunk for every token, its text "" while bytes are held back, as vLLM's.
TEST_F(HandlersTest, BytePiecesAsVllmShowsThem) {
  // 你好 as its six byte pieces.
  engine_.script.clear();
  for (unsigned char b : std::string("\xE4\xBD\xA0\xE5\xA5\xBD")) {
    for (int32_t id = 0; id < tok_->vocab_size(); ++id) {
      if (tok_->TokenBytes(id) == std::string(1, static_cast<char>(b))) {
        engine_.script.push_back(id);
        break;
      }
    }
  }
  const int n = static_cast<int>(engine_.script.size());
  ASSERT_EQ(n, 6) << "the tiny tokenizer has byte pieces";
  const std::string replacement = "\xEF\xBF\xBD";
  Json body = {{"prompt", "x"}, {"max_tokens", n}, {"logprobs", 3}};
  HttpReply r = HandleCompletions(ctx_, body.dump(), Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json lp = Json::parse(r.body)["choices"][0]["logprobs"];
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(lp["tokens"][i], replacement) << i;
    EXPECT_EQ(lp["text_offset"][i], i);
  }
  size_t keys = 0;
  for (size_t at = 0; (at = r.body.find("\"" + replacement + "\":", at)) != std::string::npos; ++at) {
    ++keys;
  }
  EXPECT_EQ(keys, static_cast<size_t>(n)) << r.body;  // one per position

  for (const bool chat : {false, true}) {
    body = {{"max_tokens", n}, {"stream", true}};
    if (chat) body["messages"] = Json::array({{{"role", "user"}, {"content", "x"}}});
    else body["prompt"] = "x";
    bool done = false;
    const std::vector<Json> ev =
        Events(Drain(chat ? HandleChatCompletions(ctx_, body.dump(), Clock::now())
                          : HandleCompletions(ctx_, body.dump(), Clock::now())),
               &done);
    std::string text;
    int token_chunks = 0;
    for (const Json& e : ev) {
      const Json& c = e["choices"][0];
      if (chat && c["delta"].contains("role")) continue;  // the role chunk (content "")
      text += chat ? c["delta"]["content"].get<std::string>() : c["text"].get<std::string>();
      ++token_chunks;
    }
    EXPECT_EQ(text, "\xE4\xBD\xA0\xE5\xA5\xBD") << chat;
    EXPECT_EQ(token_chunks, n) << chat;  // the held bytes' chunks carry ""
  }
}

// A stream's text_offset values are the reply's (vLLM's test_completion_text_offset): they run
// on over the token texts, the echoed prompt's included, also while a stop string holds text
// back (the chunks' text then lags the tokens).
TEST_F(HandlersTest, StreamedTextOffsetsAreTheReplys) {
  for (const bool echo : {false, true}) {
    Json body = {{"prompt", "Hello"}, {"max_tokens", 6}, {"logprobs", 0}, {"echo", echo},
                 {"stop", "\n\nzz"}};
    const HttpReply reply = HandleCompletions(ctx_, body.dump(), Clock::now());
    ASSERT_EQ(reply.status, 200) << reply.body;
    const Json whole = Json::parse(reply.body)["choices"][0]["logprobs"]["text_offset"];
    body["stream"] = true;
    bool done = false;
    const std::vector<Json> ev =
        Events(Drain(HandleCompletions(ctx_, body.dump(), Clock::now())), &done);
    Json streamed = Json::array();
    for (const Json& e : ev) {
      if (e["choices"].empty() || e["choices"][0]["logprobs"].is_null()) continue;
      for (const Json& o : e["choices"][0]["logprobs"]["text_offset"]) streamed.push_back(o);
    }
    EXPECT_EQ(streamed, whole) << echo;
    EXPECT_GT(whole.size(), echo ? 6u : 5u) << whole.dump();  // echo: the prompt's tokens too
    EXPECT_GT(whole.back().get<int64_t>(), 0);
  }
}

TEST_F(HandlersTest, BeamSearchRefusesWhatItCannotServe) {
  HttpReply r = HandleCompletions(
      ctx_, R"({"prompt":"a","use_beam_search":true,"n":2,"stream":true})", Clock::now());
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(Json::parse(r.body)["error"]["message"],
            "Streaming is not currently supported with beam search");
  r = HandleCompletions(
      ctx_, R"({"prompt":"a","use_beam_search":true,"n":2,"echo":true,"logprobs":1})",
      Clock::now());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(Json::parse(r.body)["error"]["param"], "echo");
  // vLLM's null fields of a whole response.
  r = HandleCompletions(ctx_, R"({"prompt":"a","max_tokens":1})", Clock::now());
  const Json j = Json::parse(r.body);
  for (const char* field : {"service_tier", "system_fingerprint", "kv_transfer_params"}) {
    ASSERT_TRUE(j.contains(field)) << field;
    EXPECT_TRUE(j[field].is_null()) << field;
  }
}

// A beam search the engine aborts (a shutdown) ends its choices with "abort", as sampled ones
// end; it read as a search that ran out of candidates: empty beams finished by "length".
TEST_F(HandlersTest, AbortedBeamSearchFinishesWithAbort) {
  engine_.abort = true;
  const HttpReply r = HandleCompletions(
      ctx_, R"({"prompt":"a","use_beam_search":true,"n":2,"max_tokens":5})", Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u) << r.body;
  for (const Json& c : j["choices"]) EXPECT_EQ(c["finish_reason"], "abort") << r.body;
}

// continuous_usage_stats: every chunk carries its choice's running usage.
TEST_F(HandlersTest, ContinuousUsageStats) {
  bool done = false;
  auto events = Events(Drain(HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"stream":true,
               "stream_options":{"include_usage":true,"continuous_usage_stats":true}})",
      Clock::now())), &done);
  ASSERT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  int64_t last = -1;
  for (const Json& e : events) {
    ASSERT_TRUE(e.contains("usage")) << e.dump();
    const int64_t c = e["usage"]["completion_tokens"];
    EXPECT_GE(c, last);
    last = c;
    EXPECT_EQ(e["usage"]["total_tokens"], e["usage"]["prompt_tokens"].get<int64_t>() + c);
  }
  EXPECT_EQ(events.front()["usage"]["completion_tokens"], 0);
  EXPECT_EQ(last, 4);
  // Without include_usage it has no effect.
  events = Events(Drain(HandleCompletions(
      ctx_, R"({"prompt":"Hi","max_tokens":2,"stream":true,
               "stream_options":{"include_usage":false,"continuous_usage_stats":true}})",
      Clock::now())), &done);
  for (const Json& e : events) {
    EXPECT_TRUE(e.contains("usage") && e.at("usage").is_null()) << e.dump();  // vLLM: null
  }
}

// The role chunk goes out with the first token (vLLM's first iteration), not on admission: a
// request that fails before its first token streams the error alone.
TEST_F(HandlersTest, ChatRoleChunkWaitsForTheFirstToken) {
  engine_.fail = Internal("engine failed");
  bool done = false;
  const auto events = Events(Drain(HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"n":2})",
      Clock::now())), &done);
  EXPECT_TRUE(done);
  ASSERT_EQ(events.size(), 1u) << Json(events).dump();
  EXPECT_TRUE(events[0].contains("error")) << events[0].dump();
  // With tokens: both role chunks first, then both echoes, then the text.
  engine_.fail = OkStatus();
  std::vector<std::string> order;
  for (const Json& e : Events(Drain(HandleChatCompletions(
           ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,"n":2,
                     "echo":true,"add_generation_prompt":false,"max_tokens":1})",
           Clock::now())), &done)) {
    if (e["choices"].empty()) continue;
    const Json& d = e["choices"][0]["delta"];
    const std::string kind =
        d.contains("role") ? "role" : d.value("content", "") == "Hi" ? "echo" : "text";
    order.push_back(kind + std::to_string(e["choices"][0]["index"].get<int>()));
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"role0", "role1", "echo0", "echo1", "text0", "text1"}));
}

// vLLM's StreamOptions default include_usage to true: any stream_options object (even {})
// brings the usage chunk; --enable-force-include-usage brings it to every stream.
TEST_F(HandlersTest, StreamOptionsIncludeUsageByDefault) {
  const auto usage_chunks = [&](const std::string& extra) {
    bool done = false;
    const auto events = Events(
        Drain(HandleCompletions(ctx_, R"({"prompt":"Hi","max_tokens":2,"stream":true)" + extra + "}",
                                Clock::now())),
        &done);
    EXPECT_TRUE(done);
    int n = 0;
    for (const Json& e : events) n += e.contains("usage") && !e["usage"].is_null();
    return n;
  };
  EXPECT_EQ(usage_chunks(""), 0);
  EXPECT_EQ(usage_chunks(R"(,"stream_options":{})"), 1);
  EXPECT_EQ(usage_chunks(R"(,"stream_options":null)"), 0);
  EXPECT_GE(usage_chunks(R"(,"stream_options":{"continuous_usage_stats":true})"), 3);
  int status = 0;
  Chat(R"({"messages":[{"role":"user","content":"Hi"}],"stream_options":{}})", &status);
  EXPECT_EQ(status, 200);  // empty options on a request that does not stream: no 400
  ctx_.enable_force_include_usage = true;
  EXPECT_EQ(usage_chunks(""), 1);
  EXPECT_EQ(usage_chunks(R"(,"stream_options":{"include_usage":false})"), 1);
}

// --reasoning-parser minicpmv over MiniCPM-V-4.6's tokenizer and chat template: the model's
// scripted output is split as vLLM's parser splits it, the same way streamed and not.
class ReasoningHandlersTest : public HandlersTest {
 protected:
  void SetUp() override {
    HandlersTest::SetUp();
    const int32_t im_end = *tok_->TokenToId("<|im_end|>");
    engine_.eos = im_end;
    ctx_.eos_ids = {im_end};
    ctx_.max_model_len = 512;
    ctx_.reasoning_parser = "minicpmv";
    // A literal backslash-n as the model sometimes writes it, then the end of its thinking.
    engine_.script = tok_->Encode("Two plus two.\\nSo 4.\n</think>\n\nIt is 4.", false);
  }
  TinyTokenizerFamily Family() const override { return TinyTokenizerFamily::kByteLevelBpe; }

  static std::string Body(bool thinking, bool stream) {
    Json b = {{"messages", {{{"role", "user"}, {"content", "2+2?"}}}},
              {"max_tokens", 100},
              {"stream", stream}};
    if (thinking) b["chat_template_kwargs"] = {{"enable_thinking", true}};
    return b.dump();
  }
  // Streams a request; returns the concatenated reasoning and content deltas.
  std::pair<std::string, std::string> StreamedSplit(bool thinking) {
    bool done = false;
    std::string reasoning, content;
    for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, Body(thinking, true),
                                                            Clock::now())), &done)) {
      if (!e.contains("choices") || e["choices"].empty()) continue;
      const Json& d = e["choices"][0]["delta"];
      if (d.contains("reasoning")) {
        EXPECT_EQ(d["reasoning"], d["reasoning_content"]);
        reasoning += d["reasoning"].get<std::string>();
      }
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    EXPECT_TRUE(done);
    return {reasoning, content};
  }
};

TEST_F(ReasoningHandlersTest, ThinkingSplitsReasoningFromContent) {
  int status = 0;
  Json r = Chat(Body(true, false), &status);
  ASSERT_EQ(status, 200) << r.dump();
  const Json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning"], "Two plus two.\nSo 4.\n");
  EXPECT_EQ(m["reasoning_content"], m["reasoning"]);
  EXPECT_EQ(m["content"], "\n\nIt is 4.");
  // The prompt ends inside <think>: that is what put the parser in reasoning.
  const std::string prompt = tok_->Decode(engine_.submitted.back().prompt, false);
  EXPECT_EQ(prompt.substr(prompt.size() - 8), "<think>\n");
  EXPECT_EQ(StreamedSplit(true), std::make_pair(std::string("Two plus two.\nSo 4.\n"),
                                                std::string("\n\nIt is 4.")));
}

// reasoning_effort (vLLM's build_chat_params): a template variable, and enable_thinking unless
// the request's chat_template_kwargs set it, so "high" opens MiniCPM-V-4.6's thinking.
// vLLM's qwen3 and deepseek_r1 parsers (not streamed) give a reply that ends its thinking at
// once an empty-string reasoning, where minicpmv's and a streamed reply's are absent (null).
TEST_F(ReasoningHandlersTest, EmptyReasoningIsAStringForQwen3AndDeepSeekR1) {
  engine_.script = tok_->Encode("</think>This is the rest", false);
  for (const char* parser : {"qwen3", "deepseek_r1", "minicpmv"}) {
    ctx_.reasoning_parser = parser;
    const Json r = Chat(Body(true, false));
    const Json& m = r["choices"][0]["message"];
    EXPECT_EQ(m["content"], "This is the rest") << parser << r.dump();
    if (std::string(parser) == "minicpmv") {
      EXPECT_TRUE(m["reasoning"].is_null()) << r.dump();
    } else {
      EXPECT_EQ(m["reasoning"], "") << parser << r.dump();
      EXPECT_EQ(m["reasoning_content"], "") << parser << r.dump();
    }
  }
}

TEST_F(ReasoningHandlersTest, ReasoningEffortSwitchesThinking) {
  const auto prompt_end = [&](const Json& extra, int want_status = 200) {
    Json body = Json::parse(Body(false, false));
    body.update(extra);
    int status = 0;
    const Json r = Chat(body.dump(), &status);
    EXPECT_EQ(status, want_status) << r.dump();
    if (status != 200) return r["error"]["message"].get<std::string>();
    const std::string prompt = tok_->Decode(engine_.submitted.back().prompt, false);
    return prompt.substr(prompt.rfind("assistant"));
  };
  const std::string thinking = "assistant\n<think>\n";
  const std::string plain = prompt_end(Json::object());
  EXPECT_NE(plain, thinking);
  EXPECT_EQ(prompt_end({{"reasoning_effort", "high"}}), thinking);
  EXPECT_EQ(prompt_end({{"reasoning_effort", "none"}}), plain);
  EXPECT_EQ(prompt_end({{"reasoning_effort", "high"},
                        {"chat_template_kwargs", {{"enable_thinking", false}}}}),
            plain);
  EXPECT_NE(prompt_end({{"reasoning_effort", "extreme"}}, 400).find("reasoning_effort"),
            std::string::npos);
}

// A reply cut off while thinking has no content: null, except with echo, whose content vLLM
// builds as the echoed text plus the reply's, always a string.
TEST_F(ReasoningHandlersTest, CutOffThinkingHasNullContentUnlessEchoed) {
  engine_.script = tok_->Encode("still thinking", false);
  Json body = Json::parse(Body(true, false));
  int status = 0;
  Json r = Chat(body.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null()) << r.dump();
  body["echo"] = true;  // the last message is the user's: nothing to echo
  r = Chat(body.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["content"], "") << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["reasoning"], "still thinking");
}

TEST_F(ReasoningHandlersTest, ResponsesStreamPlacesItemsAsTheFinalOutput) {
  // OpenAI's SDKs assemble a streamed response's output by output_index: the items the events
  // add must be the final response's output, in its order, and the unstreamed reply's.
  const Json body = {{"input", "2+2?"},
                     {"max_output_tokens", 100},
                     {"chat_template_kwargs", {{"enable_thinking", true}}}};
  HttpReply plain = HandleResponses(ctx_, body.dump(), Clock::now());
  ASSERT_EQ(plain.status, 200) << plain.body;
  Json streamed_body = body;
  streamed_body["stream"] = true;
  const std::string sse = Drain(HandleResponses(ctx_, streamed_body.dump(), Clock::now()));
  Json added = Json::array(), final_output;
  for (const Json& e : ResponsesEvents(sse)) {
    const std::string type = e["type"];
    if (type == "response.output_item.added") {
      EXPECT_EQ(e["output_index"], added.size());
      added.push_back(e["item"]["type"]);
    }
    if (type == "response.output_text.delta") { EXPECT_NE(e["delta"], "") << e.dump(); }
    if (type == "response.completed") final_output = e["response"]["output"];
  }
  ASSERT_TRUE(final_output.is_array()) << sse;
  Json final_types = Json::array(), plain_types = Json::array();
  for (const Json& item : final_output) final_types.push_back(item["type"]);
  const Json plain_reply = Json::parse(plain.body);
  for (const Json& item : plain_reply["output"]) plain_types.push_back(item["type"]);
  EXPECT_EQ(added, final_types);
  EXPECT_EQ(final_types, plain_types);
  EXPECT_EQ(final_types, Json::array({"reasoning", "message"}));
}

// The response object as vLLM's ResponsesResponse.from_request writes it: the sampling used
// (the server's defaults, a greedy request's top_p 1, max_output_tokens after the context),
// OpenAI's fields null or defaulted, a cut message still "completed", the reasoning item's
// every field, and vLLM's usage lists.
TEST_F(ReasoningHandlersTest, ResponsesObjectAsVllm) {
  ctx_.generation_defaults.temperature = 0.8;
  ctx_.generation_defaults.top_p = 0.8;
  const Json body = {{"input", "2+2?"}, {"chat_template_kwargs", {{"enable_thinking", true}}}};
  HttpReply plain = HandleResponses(ctx_, body.dump(), Clock::now());
  ASSERT_EQ(plain.status, 200) << plain.body;
  Json r = Json::parse(plain.body);
  EXPECT_EQ(r["temperature"], 0.8);
  EXPECT_EQ(r["top_p"], 0.8);
  EXPECT_EQ(r["max_output_tokens"], 512 - r["usage"]["input_tokens"].get<int64_t>());
  for (const char* key : {"metadata", "text", "max_tool_calls", "previous_response_id", "prompt",
                          "reasoning", "user", "error", "instructions", "top_logprobs"}) {
    EXPECT_TRUE(r.contains(key) && r[key].is_null()) << key << ": " << r.dump();
  }
  EXPECT_EQ(r["background"], false);
  EXPECT_EQ(r["service_tier"], "auto");
  EXPECT_FALSE(r.contains("store"));
  // A previous_response_id names nothing stored: vLLM's 404 (store off), as GET's.
  Json previous = body;
  previous["previous_response_id"] = "resp_x";
  HttpReply missing = HandleResponses(ctx_, previous.dump(), Clock::now());
  EXPECT_EQ(missing.status, 404) << missing.body;
  const Json err = Json::parse(missing.body)["error"];
  EXPECT_EQ(err["message"], "Response with id 'resp_x' not found.");
  EXPECT_EQ(err["type"], "invalid_request_error");
  EXPECT_EQ(err["param"], "response_id");
  EXPECT_EQ(r["usage"]["output_tokens_details"]["tool_output_tokens"], 0);
  EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens_per_turn"], Json::array());
  ASSERT_EQ(r["output"].size(), 2u) << r.dump();
  const Json& reasoning = r["output"][0];
  EXPECT_EQ(reasoning["type"], "reasoning");
  EXPECT_TRUE(reasoning.contains("encrypted_content") && reasoning["encrypted_content"].is_null());
  EXPECT_TRUE(reasoning.contains("status") && reasoning["status"].is_null());
  EXPECT_TRUE(r["output"][1]["content"][0]["logprobs"].is_null());

  // Greedy, cut short: temperature 0, top_p 1, the message "completed", the response not.
  Json cut = body;
  cut.update({{"temperature", 0}, {"top_p", 0.5}, {"max_output_tokens", 6}});
  r = Json::parse(HandleResponses(ctx_, cut.dump(), Clock::now()).body);
  EXPECT_EQ(r["temperature"], 0.0);
  EXPECT_EQ(r["top_p"], 1.0);
  EXPECT_EQ(r["max_output_tokens"], 6);
  EXPECT_EQ(r["status"], "incomplete");
  for (const Json& item : r["output"]) {
    if (item["type"] == "message") { EXPECT_EQ(item["status"], "completed"); }
  }

  // Streamed: the reasoning item opens in progress with no content, its part events around
  // its text, and closes completed.
  Json streamed = body;
  streamed["stream"] = true;
  const std::string sse = Drain(HandleResponses(ctx_, streamed.dump(), Clock::now()));
  std::vector<std::string> types;
  for (const Json& e : ResponsesEvents(sse)) {
    const std::string type = e["type"];
    if (type.find("reasoning") != std::string::npos ||
        (type.rfind("response.output_item.", 0) == 0 && e["item"]["type"] == "reasoning")) {
      if (types.empty() || types.back() != type) types.push_back(type);
    }
    if (type == "response.output_item.added" && e["item"]["type"] == "reasoning") {
      EXPECT_EQ(e["item"]["status"], "in_progress");
      EXPECT_TRUE(e["item"]["content"].is_null());
    }
    if (type == "response.output_item.done" && e["item"]["type"] == "reasoning") {
      EXPECT_EQ(e["item"]["status"], "completed");
    }
    if (type == "response.reasoning_part.done") {
      EXPECT_EQ(e["part"]["text"], "Two plus two.\nSo 4.\n");
    }
    if (type == "response.content_part.added") { EXPECT_EQ(e["part"]["logprobs"], Json::array()); }
    if (type == "response.content_part.done") { EXPECT_TRUE(e["part"]["logprobs"].is_null()); }
    if (type == "response.created") { EXPECT_EQ(e["response"]["temperature"], 0.8); }
  }
  EXPECT_EQ(types, (std::vector<std::string>{
                       "response.output_item.added", "response.reasoning_part.added",
                       "response.reasoning_text.delta", "response.reasoning_text.done",
                       "response.reasoning_part.done", "response.output_item.done"}));
}

// Whatever a Responses request's fields hold, the reply (plain or streamed, whose events are
// made after the handler returned) is an answer or a 4xx, never an exception: the fields the
// response object echoes (tools, text, metadata, ...) are validated or echoed as given.
TEST_F(ReasoningHandlersTest, ResponsesOddFieldsNeverThrow) {
  const std::vector<Json> junk = {nullptr, 1, "s", true, Json::array({1}), Json::object(),
                                  Json::array({Json{{"type", "web_search"}}})};
  for (const char* key : {"tools", "text", "metadata", "instructions", "reasoning", "user",
                          "service_tier", "max_tool_calls", "truncation", "parallel_tool_calls"}) {
    for (const Json& value : junk) {
      for (bool stream : {false, true}) {
        Json body = {{"input", "hi"}, {"max_output_tokens", 4}, {"tool_choice", "none"},
                     {"stream", stream}};
        body[key] = value;
        EXPECT_NO_THROW({
          HttpReply r = HandleResponses(ctx_, body.dump(), Clock::now());
          EXPECT_LT(r.status, 500) << body.dump() << r.body;
          if (r.stream) Drain(r);
        }) << body.dump();
      }
    }
  }
  Json tools = {{"input", "hi"}, {"tools", Json::array({1})}, {"tool_choice", "none"}};
  EXPECT_EQ(HandleResponses(ctx_, tools.dump(), Clock::now()).status, 400);
}

// include_reasoning: false (vLLM extra): the reasoning is parsed out and left out of the reply,
// plain and streamed; the content is what follows it.
TEST_F(ReasoningHandlersTest, IncludeReasoningFalseLeavesItOut) {
  Json body = Json::parse(Body(true, false));
  body["include_reasoning"] = false;
  Json r = Chat(body.dump());
  const Json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["reasoning"].is_null()) << m.dump();
  EXPECT_TRUE(m["reasoning_content"].is_null());
  EXPECT_EQ(m["content"], "\n\nIt is 4.");
  body["stream"] = true;
  bool done = false;
  std::string content;
  for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, body.dump(), Clock::now())), &done)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const Json& d = e["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("reasoning") || d.contains("reasoning_content")) << d.dump();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(content, "\n\nIt is 4.");
}

// With include_reasoning false vLLM suppresses the logprobs and token_ids as well: their tokens
// would show the reasoning left out (suppress_metadata, hide_stream_metadata). Chunks that
// bring nothing else are not sent.
TEST_F(ReasoningHandlersTest, IncludeReasoningFalseHidesLogprobsAndTokenIds) {
  Json body = Json::parse(Body(true, false));
  body["include_reasoning"] = false;
  body["logprobs"] = true;
  body["return_token_ids"] = true;
  Json r = Chat(body.dump());
  EXPECT_TRUE(r["choices"][0]["logprobs"].is_null()) << r.dump();
  EXPECT_TRUE(r["choices"][0]["token_ids"].is_null()) << r.dump();
  body["stream"] = true;
  bool done = false;
  int chunks = 0;
  for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, body.dump(), Clock::now())), &done)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const Json& c = e["choices"][0];
    EXPECT_TRUE(c["logprobs"].is_null()) << c.dump();
    EXPECT_TRUE(!c.contains("token_ids") || c["token_ids"].is_null()) << c.dump();
    ++chunks;
  }
  EXPECT_TRUE(done);
  // The role chunk and the content's chunks ("\n\nIt is 4." and the finishing one), none for
  // the hidden reasoning's tokens.
  EXPECT_LT(chunks, static_cast<int>(engine_.script.size()) / 2);
  body["include_reasoning"] = true;  // shown reasoning: its metadata is shown too
  body["stream"] = false;
  r = Chat(body.dump());
  EXPECT_EQ(r["choices"][0]["token_ids"].size(), engine_.script.size() + 1) << r.dump();
  EXPECT_EQ(r["choices"][0]["logprobs"]["content"].size(), engine_.script.size() + 1);
}

// usage.completion_tokens_details.reasoning_tokens with a reasoning parser (recent vLLM's
// count_reasoning_tokens): the ids up to the first </think> when the reply starts in thinking,
// none when it does not (no <think> generated); plain and in the stream's usage chunk.
TEST_F(ReasoningHandlersTest, UsageCountsReasoningTokens) {
  const std::vector<int32_t> thinking = tok_->Encode("Two plus two.\\nSo 4.\n", false);
  Json r = Chat(Body(true, false));
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], thinking.size())
      << r.dump();
  r = Chat(Body(false, false));
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 0) << r.dump();
  Json body = Json::parse(Body(true, true));
  body["n"] = 2;
  body["stream_options"] = {{"include_usage", true}};
  bool done = false;
  Json usage;
  for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, body.dump(), Clock::now())), &done)) {
    if (e.contains("usage") && e["usage"].is_object()) usage = e["usage"];
  }
  EXPECT_EQ(usage["completion_tokens_details"]["reasoning_tokens"], 2 * thinking.size())
      << usage.dump();
  // The Responses API's output_tokens_details.reasoning_tokens are the chat's (vLLM's
  // count_reasoning_tokens), replied and streamed; reasoning.effort turns the thinking on.
  const Json responses = {{"input", "2+2?"}, {"max_output_tokens", 100},
                          {"reasoning", {{"effort", "high"}}}, {"request_id", "resp_mine"}};
  HttpReply plain = HandleResponses(ctx_, responses.dump(), Clock::now());
  ASSERT_EQ(plain.status, 200) << plain.body;
  const Json pr = Json::parse(plain.body);
  EXPECT_EQ(pr["id"], "resp_mine");  // the client's request_id names the response (vLLM)
  EXPECT_EQ(pr["usage"]["output_tokens_details"]["reasoning_tokens"], thinking.size()) << pr.dump();
  EXPECT_EQ(pr["output"][0]["type"], "reasoning") << pr.dump();
  Json streamed_responses = responses;
  streamed_responses["stream"] = true;
  Json completed;
  for (const Json& e : ResponsesEvents(Drain(HandleResponses(ctx_, streamed_responses.dump(), Clock::now())))) {
    if (e["type"] == "response.completed") completed = e["response"];
  }
  EXPECT_EQ(completed["usage"]["output_tokens_details"]["reasoning_tokens"], thinking.size())
      << completed.dump();
  ctx_.reasoning_parser.clear();
  r = Chat(Body(true, false));
  EXPECT_FALSE(r["usage"].contains("completion_tokens_details")) << r.dump();
}

// vLLM's qwen3 and deepseek_r1 parsers are made from the markers' token ids: a tokenizer
// without them (MiniCPM4's) makes every chat request vLLM's 400; minicpmv reads text.
TEST_F(HandlersTest, ThinkParsersNeedTheMarkersAsTokens) {
  ASSERT_FALSE(tok_->TokenToId("</think>").has_value());
  const std::string body = R"({"messages":[{"role":"user","content":"Hi"}],"max_tokens":2})";
  ctx_.reasoning_parser = "deepseek_r1";
  int status = 0;
  Json r = Chat(body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"],
            "DeepSeekR1ReasoningParser reasoning parser could not locate think start/end "
            "tokens in the tokenizer!");
  ctx_.reasoning_parser = "qwen3";
  r = Chat(body, &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find("Qwen3ReasoningParser"),
            std::string::npos);
  ctx_.reasoning_parser = "minicpmv";
  r = Chat(body, &status);
  EXPECT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
}

// thinking_token_budget reaches the engine with the parser's markers as this tokenizer's ids,
// from chat and completions alike; without a reasoning parser it is dropped (vLLM's processor
// is off then), and a negative one is a 400.
TEST_F(ReasoningHandlersTest, ThinkingTokenBudgetCarriesTheParsersMarkers) {
  const auto submitted_budget = [&](bool chat, const Json& budget) {
    Json body = chat ? Json::parse(Body(true, false)) : Json{{"prompt", "Hi"}, {"max_tokens", 4}};
    body["thinking_token_budget"] = budget;
    HttpReply r = chat ? HandleChatCompletions(ctx_, body.dump(), Clock::now())
                       : HandleCompletions(ctx_, body.dump(), Clock::now());
    EXPECT_EQ(r.status, 200) << r.body;
    return engine_.submitted.back().thinking_budget;
  };
  const std::vector<int32_t> start = {*tok_->TokenToId("<think>")};
  const std::vector<int32_t> end = {*tok_->TokenToId("</think>")};
  for (bool chat : {true, false}) {
    auto b = submitted_budget(chat, 7);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->budget, 7);
    EXPECT_EQ(b->start, start);
    EXPECT_EQ(b->end, end);
    EXPECT_EQ(submitted_budget(chat, nullptr), nullptr);
  }
  HttpReply bad = HandleChatCompletions(
      ctx_, R"({"messages":[{"role":"user","content":"Hi"}],"thinking_token_budget":-2})",
      Clock::now());
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("thinking_token_budget must be non-negative or -1, got -2."),
            std::string::npos);
  // --reasoning-config's texts: the end may lead with a transition phrase; either text alone
  // replaces that marker only; with both, no parser is needed.
  ctx_.reasoning_config.end = "Time is up.</think>";
  auto b = submitted_budget(true, 3);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->start, start);
  EXPECT_EQ(b->end, tok_->Encode("Time is up.</think>", false));
  EXPECT_GT(b->end.size(), 1u);
  ctx_.reasoning_parser.clear();
  EXPECT_EQ(submitted_budget(true, 7), nullptr);
  ctx_.reasoning_config.start = "<think>";
  b = submitted_budget(true, 7);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->start, start);
  EXPECT_EQ(b->end, tok_->Encode("Time is up.</think>", false));
}

// A structured output waits for </think> when the prompt opens thinking, unless the server
// constrains the thinking too (--structured-outputs-config '{"enable_in_reasoning": true}').
TEST_F(ReasoningHandlersTest, StructuredOutputStartsAfterThinking) {
  const auto starts_after = [&](bool thinking) {
    Json body = Json::parse(Body(thinking, false));
    body["response_format"] = {{"type", "json_object"}};
    HttpReply r = HandleChatCompletions(ctx_, body.dump(), Clock::now());
    EXPECT_EQ(r.status, 200) << r.body;
    return engine_.submitted.back().constraint->starts_after;
  };
  const std::optional<int32_t> end = tok_->TokenToId("</think>");
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(starts_after(true), *end);
  EXPECT_EQ(starts_after(false), -1);
  ctx_.structured_in_reasoning = true;
  EXPECT_EQ(starts_after(true), -1);
}

TEST_F(ReasoningHandlersTest, ThinkingOffKeepsEverythingAsContent) {
  Json r = Chat(Body(false, false));
  const Json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["reasoning"].is_null());
  EXPECT_TRUE(m["reasoning_content"].is_null());
  // The dangling </think> is dropped; the escaped newline recovered.
  EXPECT_EQ(m["content"], "Two plus two.\nSo 4.\n\n\nIt is 4.");
  EXPECT_EQ(StreamedSplit(false),
            std::make_pair(std::string(), std::string("Two plus two.\nSo 4.\n\n\nIt is 4.")));
}

TEST_F(ReasoningHandlersTest, CutOffWhileThinkingHasNoContent) {
  Json b = Json::parse(Body(true, false));
  b["max_tokens"] = 3;
  Json r = Chat(b.dump());
  const Json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null()) << r.dump();
  EXPECT_EQ(m["reasoning"], tok_->Decode(std::vector<int32_t>(engine_.script.begin(),
                                                              engine_.script.begin() + 3),
                                         true));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
}

// An empty reply with a parser: content null, as vLLM's parsers leave it (the parsed content
// is None), not "".
TEST_F(ReasoningHandlersTest, EmptyReplyHasNullContent) {
  engine_.script.clear();  // the first token is <|im_end|>
  Json r = Chat(Body(false, false));
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_null()) << r.dump();
  EXPECT_TRUE(r["choices"][0]["message"]["reasoning"].is_null());
}

// Streamed, the finish chunk of a reply whose text a parser holds (here none at all) has an
// empty delta, as vLLM sends DeltaMessage() for a parser's None; without a parser it is
// DeltaMessage(content=""), {"content": ""}.
TEST_F(ReasoningHandlersTest, StreamedFinishWithHeldTextHasAnEmptyDelta) {
  engine_.script.clear();
  const auto finish_delta = [&] {
    bool done = false;
    const auto events =
        Events(Drain(HandleChatCompletions(ctx_, Body(false, true), Clock::now())), &done);
    EXPECT_TRUE(done);
    EXPECT_EQ(events.size(), 2u);
    if (events.size() < 2) return Json();
    EXPECT_EQ(events[0]["choices"][0]["delta"], Json({{"role", "assistant"}, {"content", ""}}));
    EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "stop") << events[1].dump();
    return events[1]["choices"][0]["delta"];
  };
  EXPECT_EQ(finish_delta(), Json::object());
  ctx_.reasoning_parser.clear();
  EXPECT_EQ(finish_delta(), Json({{"content", ""}}));
}

// An empty Responses answer as vLLM's: no message item where a reasoning parser reads the
// reply, a message without content parts where none does; streamed, no item at all.
TEST_F(ReasoningHandlersTest, EmptyResponsesAnswerAsVllm) {
  engine_.script.clear();  // the first token is <|im_end|>
  const Json body = {{"input", "hi"}, {"max_output_tokens", 8}};
  Json r = Json::parse(HandleResponses(ctx_, body.dump(), Clock::now()).body);
  EXPECT_EQ(r["output"], Json::array()) << r.dump();
  Json streamed = body;
  streamed["stream"] = true;
  Json completed;
  int added = 0;
  for (const Json& e : ResponsesEvents(Drain(HandleResponses(ctx_, streamed.dump(), Clock::now())))) {
    added += e["type"] == "response.output_item.added";
    if (e["type"] == "response.completed") completed = e["response"];
  }
  EXPECT_EQ(added, 0);
  EXPECT_EQ(completed["output"], Json::array()) << completed.dump();
  ctx_.reasoning_parser.clear();
  r = Json::parse(HandleResponses(ctx_, body.dump(), Clock::now()).body);
  ASSERT_EQ(r["output"].size(), 1u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "message");
  EXPECT_EQ(r["output"][0]["content"], Json::array());
}

TEST_F(ReasoningHandlersTest, WithoutAParserTheTextIsUntouched) {
  ctx_.reasoning_parser.clear();
  Json r = Chat(Body(true, false));
  const Json& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["reasoning"].is_null()) << m.dump();
  EXPECT_TRUE(m["reasoning_content"].is_null());
  EXPECT_EQ(m["content"], "Two plus two.\\nSo 4.\n</think>\n\nIt is 4.");
}

// --enable-auto-tool-choice --tool-call-parser qwen3_coder over MiniCPM-V-4.6's tokenizer and
// chat template (reasoning parser on, thinking off): the scripted call comes back as tool_calls,
// the same streamed and not; without the parser, vLLM's 400s.
class ToolHandlersTest : public ReasoningHandlersTest {
 protected:
  void SetUp() override {
    ReasoningHandlersTest::SetUp();
    ctx_.max_model_len = 4096;  // the template's tool instructions are long
    ctx_.tool_call_parser = "qwen3_coder";
    engine_.script = tok_->Encode(
        "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
        false);
  }
  static std::string Body(bool stream, const Json& tool_choice = Json()) {
    Json b = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
              {"max_tokens", 200},
              {"stream", stream},
              {"tools",
               {{{"type", "function"},
                 {"function",
                  {{"name", "get_weather"},
                   {"parameters",
                    {{"type", "object"},
                     {"properties",
                      {{"city", {{"type", "string"}}}, {"days", {{"type", "integer"}}}}}}}}}}}}};
    if (!tool_choice.is_null()) b["tool_choice"] = tool_choice;
    return b.dump();
  }
  // A streamed reply's content, tool call deltas and finish reason.
  struct Streamed {
    bool done = false;
    std::string content, finish;
    Json calls = Json::array();
  };
  Streamed Stream(const Json& tool_choice = Json()) {
    Streamed out;
    const std::string sse =
        Drain(HandleChatCompletions(ctx_, Body(true, tool_choice), Clock::now()));
    for (const Json& e : Events(sse, &out.done)) {
      if (!e.contains("choices") || e["choices"].empty()) continue;
      const Json& c = e["choices"][0];
      if (c["delta"].contains("content")) out.content += c["delta"]["content"].get<std::string>();
      if (c["delta"].contains("tool_calls")) {
        for (const Json& t : c["delta"]["tool_calls"]) out.calls.push_back(t);
      }
      if (!c["finish_reason"].is_null()) out.finish = c["finish_reason"];
    }
    return out;
  }
};

// A streamed reply cut by max_tokens after its call still finishes with "tool_calls" (vLLM's
// stream says so once a call went out, whatever stopped the reply).
TEST_F(ToolHandlersTest, StreamedCallsCutShortFinishWithToolCalls) {
  Json body = Json::parse(Body(true));
  body["max_tokens"] = static_cast<int64_t>(engine_.script.size());  // the EOS never comes
  bool done = false;
  std::string finish;
  int calls = 0;
  for (const Json& e :
       Events(Drain(HandleChatCompletions(ctx_, body.dump(), Clock::now())), &done)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const Json& c = e["choices"][0];
    if (c["delta"].contains("tool_calls")) calls += static_cast<int>(c["delta"]["tool_calls"].size());
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(finish, "tool_calls");
  EXPECT_EQ(Stream().finish, "tool_calls");  // the whole reply, ended by EOS
}

TEST_F(ToolHandlersTest, AutoToolChoiceReturnsTheCalls) {
  for (const Json& choice : {Json(), Json("auto")}) {  // tools alone mean "auto"
    int status = 0;
    Json r = Chat(Body(false, choice), &status);
    ASSERT_EQ(status, 200) << r.dump();
    const Json& m = r["choices"][0]["message"];
    EXPECT_EQ(m["content"], "Let me check.\n");
    ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
    const Json& call = m["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
    EXPECT_EQ(call["function"], Json({{"name", "get_weather"},
                                      {"arguments", R"({"city": "Paris", "days": 3})"}}));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
  }
  // The template put the tools into the prompt.
  EXPECT_NE(tok_->Decode(engine_.submitted.back().prompt, false).find("<tools>"),
            std::string::npos);

  const Streamed st = Stream();
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.content, "Let me check.\n");
  ASSERT_EQ(st.calls.size(), 1u);
  EXPECT_EQ(st.calls[0]["index"], 0);
  EXPECT_EQ(st.calls[0]["id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(st.calls[0]["function"]["arguments"], R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(st.finish, "tool_calls");
}

// MiniCPM-V's literal "\n" recovery applies to the content, never to a call's arguments, where a
// backslash-n is what the model meant (vLLM's minicpmv parser leaves tool call arguments alone).
TEST_F(ToolHandlersTest, EscapedNewlinesAreRecoveredInContentNotInArguments) {
  engine_.script = tok_->Encode(
      "Line one.\\nLine two.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
      "Paris\\nFrance\n</parameter>\n</function>\n</tool_call>",
      false);
  const std::string args = R"({"city": "Paris\\nFrance"})";  // the JSON of Paris\nFrance
  Json r = Chat(Body(false));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Line one.\nLine two.\n") << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], args);
  const Streamed st = Stream();
  EXPECT_EQ(st.content, "Line one.\nLine two.\n");
  ASSERT_EQ(st.calls.size(), 1u);
  EXPECT_EQ(st.calls[0]["function"]["arguments"], args);
}

// Text after a call: vLLM's chat stream sends it as content (less the whitespace right after
// the </tool_call>); its non-streaming reply keeps only the text before the first call.
TEST_F(ToolHandlersTest, TextAfterACallIsStreamedAsContent) {
  engine_.script = tok_->Encode(
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
      "</parameter>\n</function>\n</tool_call>\nDone.",
      false);
  const Streamed st = Stream();
  EXPECT_EQ(st.content, "Let me check.\nDone.");
  ASSERT_EQ(st.calls.size(), 1u);
  EXPECT_EQ(st.finish, "tool_calls");
  Json r = Chat(Body(false));
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Let me check.\n");
}

// tools: [] with "auto": nothing to call, so nothing is parsed (vLLM needs `request.tools`).
TEST_F(ToolHandlersTest, NoToolsNoParsing) {
  Json body = Json::parse(Body(false));
  body["tools"] = Json::array();
  body["tool_choice"] = "auto";
  int status = 0;
  Json r = Chat(body.dump(), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_TRUE(r["choices"][0]["message"]["tool_calls"].empty());
  EXPECT_NE(r["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
            std::string::npos);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

// Calls first known at the reply's end ("required", whose JSON is parsed once complete) go out
// in a chunk of their own, then the finishing chunk: the OpenAI SDKs' stream helpers record a
// call only from a chunk without finish_reason.
TEST_F(ToolHandlersTest, CallsKnownAtTheEndPrecedeTheFinishingChunk) {
  engine_.script = tok_->Encode(R"([{"name": "get_weather", "parameters": {"city": "Paris"}}])",
                                false);
  bool done = false;
  int calls_chunk = -1, finish_chunk = -1, n = 0;
  for (const Json& e : Events(Drain(HandleChatCompletions(ctx_, Body(true, "required"),
                                                          Clock::now())),
                              &done)) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const Json& c = e["choices"][0];
    if (c["delta"].contains("tool_calls")) {
      calls_chunk = n;
      EXPECT_TRUE(c["finish_reason"].is_null()) << e.dump();
    }
    if (!c["finish_reason"].is_null()) finish_chunk = n;
    ++n;
  }
  ASSERT_GE(calls_chunk, 0);
  EXPECT_EQ(finish_chunk, calls_chunk + 1);
}

// tool_choice "required" and named functions: the engine gets the constraint (the scripted
// engine here ignores it and answers the JSON a constrained model would), and the reply's JSON
// comes back as calls, as vLLM's serving_chat builds them.
TEST_F(ToolHandlersTest, ForcedToolChoiceReturnsTheCalls) {
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  engine_.script = tok_->Encode(R"({"city": "Paris", "days": 3})", false);
  int status = 0;
  Json r = Chat(Body(false, named), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_NE(engine_.submitted.back().constraint, nullptr);
  Json m = r["choices"][0]["message"];
  EXPECT_EQ(m["content"], "");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"],
            Json({{"name", "get_weather"}, {"arguments", R"({"city": "Paris", "days": 3})"}}));
  EXPECT_EQ(m["tool_calls"][0]["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  // Streamed, the arguments go out as they come, the first piece with the id and the name.
  Streamed st = Stream(named);
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.content, "");
  ASSERT_GE(st.calls.size(), 2u);
  EXPECT_EQ(st.calls[0]["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(st.calls[0]["function"]["name"], "get_weather");
  std::string arguments;
  for (const Json& c : st.calls) {
    EXPECT_EQ(c["index"], 0);
    EXPECT_EQ(c.contains("id"), &c == &st.calls[0]);
    arguments += c["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(st.finish, "stop");

  engine_.script = tok_->Encode(
      R"([{"name": "get_weather", "parameters": {"city":"Paris","days":3}},
          {"name": "get_weather", "parameters": {"city": "Oslo", "days": 1}}])",
      false);
  r = Chat(Body(false, "required"), &status);
  ASSERT_EQ(status, 200) << r.dump();
  m = r["choices"][0]["message"];
  EXPECT_EQ(m["content"], "");
  ASSERT_EQ(m["tool_calls"].size(), 2u) << r.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(m["tool_calls"][1]["function"]["arguments"], R"({"city": "Oslo", "days": 1})");
  EXPECT_NE(m["tool_calls"][0]["id"], m["tool_calls"][1]["id"]);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");

  // Streamed: the calls in one delta once the reply is complete.
  st = Stream("required");
  EXPECT_TRUE(st.done);
  EXPECT_EQ(st.content, "");
  ASSERT_EQ(st.calls.size(), 2u);
  EXPECT_EQ(st.calls[1]["index"], 1);
  EXPECT_EQ(st.calls[1]["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  EXPECT_EQ(st.calls[1]["function"]["name"], "get_weather");
  EXPECT_EQ(st.finish, "tool_calls");

  // parallel_tool_calls false: the first call only, in the reply and in the stream (vLLM's
  // maybe_filter_parallel_tool_calls).
  for (bool stream : {false, true}) {
    Json body = Json::parse(Body(stream, "required"));
    body["parallel_tool_calls"] = false;
    HttpReply reply = HandleChatCompletions(ctx_, body.dump(), Clock::now());
    Json calls = Json::array();
    if (!stream) {
      calls = Json::parse(reply.body)["choices"][0]["message"]["tool_calls"];
    } else {
      bool done = false;
      for (const Json& e : Events(Drain(reply), &done)) {
        if (e.contains("choices") && !e["choices"].empty() &&
            e["choices"][0]["delta"].contains("tool_calls")) {
          for (const Json& c : e["choices"][0]["delta"]["tool_calls"]) calls.push_back(c);
        }
      }
    }
    ASSERT_EQ(calls.size(), 1u) << stream;
    EXPECT_EQ(calls[0]["function"]["arguments"], R"({"city": "Paris", "days": 3})");
  }

  // A "required" reply that is not the whole JSON (max_tokens cut it) stays content; a named
  // function's call carries whatever text there is (vLLM).
  engine_.script = tok_->Encode(R"([{"name": "get_weather", "para)", false);
  r = Chat(Body(false, "required"), &status);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(r["choices"][0]["message"]["tool_calls"].empty());
  EXPECT_EQ(r["choices"][0]["message"]["content"], R"([{"name": "get_weather", "para)");
  r = Chat(Body(false, named), &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
            R"([{"name": "get_weather", "para)");

  // vLLM's error: a function that is not among the tools.
  r = Chat(Body(false, {{"type", "function"}, {"function", {{"name", "nope"}}}}), &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(r["error"]["message"].get<std::string>().find(
                "The tool specified in `tool_choice` does not match any of the specified `tools`"),
            std::string::npos);
}

// A forced call with a response format besides: the tool's schema constrains the reply, the
// format is dropped (vLLM's ToolParser.adjust_request). structured_outputs' json, regex or
// choice beside a named function is vLLM's 400 (check_structured_outputs_count); beside
// "required" it gives way too.
TEST_F(ToolHandlersTest, ForcedToolChoiceReplacesTheResponseFormat) {
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const Json string_schema = {{"type", "string"}};
  const Json formats[] = {
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "s"}, {"schema", string_schema}}}}}},
      {{"response_format", {{"type", "json_object"}}}},
  };
  {
    Json body = Json::parse(Body(false, named));
    body["structured_outputs"] = {{"regex", "abc"}};
    int status = 0;
    Json r = Chat(body.dump(), &status);
    EXPECT_EQ(status, 400);
    EXPECT_EQ(r["error"]["message"],
              "1 validation error: Value error, You can only either use constraints for "
              "structured outputs or tools, not both.");
    body["tool_choice"] = "required";
    body["structured_outputs"] = {{"json", string_schema}};
    Chat(body.dump(), &status);
    EXPECT_EQ(status, 200);
    body["structured_outputs"] = {{"json", string_schema}, {"regex", "a"}};
    r = Chat(body.dump(), &status);
    EXPECT_EQ(status, 400);
    EXPECT_NE(r["error"]["message"].get<std::string>().find(
                  "You can only use one kind of constraints for structured outputs"),
              std::string::npos);
  }
  engine_.script = tok_->Encode(R"({"city": "Paris", "days": 3})", false);
  for (const Json& format : formats) {
    Json body = Json::parse(Body(false, named));
    body.update(format);
    int status = 0;
    Json r = Chat(body.dump(), &status);
    ASSERT_EQ(status, 200) << format.dump() << r.dump();
    ASSERT_NE(engine_.submitted.back().constraint, nullptr);
    const structured::SchemaNode* root = engine_.submitted.back().constraint->schema->root();
    EXPECT_EQ(root->kind, structured::Kind::kObject) << format.dump();
    EXPECT_EQ(root->properties.size(), 2u) << format.dump();  // the tool's city and days
    EXPECT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  }
}

// The Responses API's own rules (vLLM's serving_responses): tools need no tool parser (they
// are rendered; the reply is text), and max_output_tokens beyond the room left is held to it.
TEST_F(ToolHandlersTest, ResponsesRulesWhereTheyDifferFromChats) {
  ctx_.tool_call_parser.clear();
  const Json body = {
      {"input", "Weather in Paris?"},
      {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}},
      {"max_output_tokens", 100000000}};
  HttpReply r = HandleResponses(ctx_, body.dump(), Clock::now());
  ASSERT_EQ(r.status, 200) << r.body;
  const EngineRequest& submitted = engine_.submitted.back();
  EXPECT_EQ(submitted.max_tokens,
            ctx_.max_model_len - static_cast<int64_t>(submitted.prompt.size()));
  const std::string prompt = tok_->Decode(submitted.prompt, false);
  EXPECT_NE(prompt.find(R"({"type": "function", "function": {"name": "get_weather", )"
                        R"("parameters": {"type": "object"}, "strict": null, "type": "function", )"
                        R"("description": null}})"),
            std::string::npos)
      << prompt;
  EXPECT_EQ(Json::parse(r.body)["output"][0]["type"], "message");
}

// A streamed Responses call: its arguments' done event names the function (vLLM's
// emit_simple_tool_call_done), and the tools come back in openai's FunctionTool dump.
TEST_F(ToolHandlersTest, ResponsesStreamedCallNamesItsFunction) {
  const Json body = {
      {"input", "Weather in Paris?"}, {"stream", true},
      {"tools", {{{"type", "function"}, {"name", "get_weather"},
                  {"parameters", {{"type", "object"},
                                  {"properties", {{"city", {{"type", "string"}}},
                                                  {"days", {{"type", "integer"}}}}}}}}}}};
  const std::string sse = Drain(HandleResponses(ctx_, body.dump(), Clock::now()));
  int done_events = 0;
  for (const Json& e : ResponsesEvents(sse)) {
    if (e["type"] == "response.function_call_arguments.done") {
      ++done_events;
      EXPECT_EQ(e["name"], "get_weather") << e.dump();
      EXPECT_EQ(e["arguments"], R"({"city": "Paris", "days": 3})");
    }
    if (e["type"] == "response.completed") {
      EXPECT_EQ(e["response"]["tools"][0],
                Json::parse(R"({"name": "get_weather", "parameters": {"type": "object",
                    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
                    "strict": null, "type": "function", "description": null})"));
    }
  }
  EXPECT_EQ(done_events, 1) << sse;

  // A named function: its arguments stream as they are generated, one delta per piece, inside
  // the call's item.
  engine_.script = tok_->Encode(R"({"city": "Paris", "days": 3})", false);
  Json named = body;
  named["tool_choice"] = {{"type", "function"}, {"name", "get_weather"}};
  const std::string pieces = Drain(HandleResponses(ctx_, named.dump(), Clock::now()));
  std::vector<std::string> order;
  std::string arguments;
  int deltas = 0;
  for (const Json& e : ResponsesEvents(pieces)) {
    const std::string type = e["type"];
    if (type == "response.function_call_arguments.delta") {
      arguments += e["delta"].get<std::string>();
      ++deltas;
    }
    if (type.find("function_call") != std::string::npos ||
        type.find("output_item") != std::string::npos) {
      if (order.empty() || order.back() != type) order.push_back(type);
    }
  }
  EXPECT_EQ(arguments, R"({"city": "Paris", "days": 3})");
  EXPECT_EQ(order, (std::vector<std::string>{"response.output_item.added",
                                             "response.function_call_arguments.delta",
                                             "response.function_call_arguments.done",
                                             "response.output_item.done"}));
  EXPECT_GT(deltas, 3) << "the arguments came whole, not as they were generated";
}

// A streamed reply's items open and close in turn: no event names an item after its
// output_item.done, and the final output is the items as added, each with its own text (the
// tool parser drops text after the last call, as vLLM's qwen3_coder does).
TEST_F(ToolHandlersTest, ResponsesStreamItemsCloseInTurn) {
  engine_.script = tok_->Encode(
      "Let me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
      "</parameter>\n</function>\n</tool_call>\nDone.",
      false);
  const Json body = {
      {"input", "Weather in Paris?"}, {"stream", true},
      {"tools", {{{"type", "function"}, {"name", "get_weather"},
                  {"parameters", {{"type", "object"},
                                  {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  std::set<std::string> done;
  Json added = Json::array(), final_output;
  for (const Json& e : ResponsesEvents(Drain(HandleResponses(ctx_, body.dump(), Clock::now())))) {
    const std::string type = e["type"];
    if (e.contains("item_id")) { EXPECT_FALSE(done.count(e["item_id"])) << e.dump(); }
    if (type == "response.output_item.added") added.push_back(e["item"]["type"]);
    if (type == "response.output_item.done") done.insert(e["item"]["id"].get<std::string>());
    if (type == "response.completed") final_output = e["response"]["output"];
  }
  Json final_types = Json::array();
  for (const Json& item : final_output) final_types.push_back(item["type"]);
  EXPECT_EQ(added, final_types);
  ASSERT_EQ(final_types, Json::array({"message", "function_call"})) << final_output;
  EXPECT_EQ(final_output[0]["content"][0]["text"], "Let me check.\n");
  EXPECT_EQ(final_output[1]["arguments"], R"({"city": "Paris"})");
}

TEST_F(ToolHandlersTest, WhatVllmServeRefuses) {
  int status = 0;
  ctx_.tool_call_parser.clear();
  Json r = Chat(Body(false), &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"],
            "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
            "set");
  // "none": the tools are in the prompt, the reply is text.
  r = Chat(Body(false, "none"), &status);
  ASSERT_EQ(status, 200);
  EXPECT_TRUE(r["choices"][0]["message"]["tool_calls"].empty());
  EXPECT_NE(r["choices"][0]["message"]["content"].get<std::string>().find("<tool_call>"),
            std::string::npos);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
}

// A forced call's content is its JSON: MiniCPM-V's literal-"\n" recovery (the reasoning parser's,
// on here) must leave the arguments' escapes alone, streamed or not, named or "required".
TEST_F(ToolHandlersTest, ForcedCallsKeepTheirEscapes) {
  const Json named = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  const std::string args = R"({"city": "Paris\nFrance", "days": 3})";
  engine_.script = tok_->Encode(args, false);
  int status = 0;
  Json r = Chat(Body(false, named), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], args);
  std::string streamed;
  for (const Json& c : Stream(named).calls) streamed += c["function"]["arguments"].get<std::string>();
  EXPECT_EQ(streamed, args);
  engine_.script = tok_->Encode(R"([{"name": "get_weather", "parameters": )" + args + "}]", false);
  r = Chat(Body(false, "required"), &status);
  ASSERT_EQ(status, 200) << r.dump();
  ASSERT_EQ(r["choices"][0]["message"]["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], args);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");
}

// --exclude-tools-when-tool-choice-none: tool_choice "none" renders no tools (vLLM's flag);
// without it the template gets them.
TEST_F(ToolHandlersTest, ExcludeToolsWhenToolChoiceNone) {
  const auto prompt = [&] {
    int status = 0;
    const Json r = Chat(Body(false, "none"), &status);
    EXPECT_EQ(status, 200) << r.dump();
    return tok_->Decode(engine_.submitted.back().prompt, false);
  };
  EXPECT_NE(prompt().find("get_weather"), std::string::npos);
  ctx_.exclude_tools_when_tool_choice_none = true;
  EXPECT_EQ(prompt().find("get_weather"), std::string::npos);
  // Only "none": "auto" still renders them.
  int status = 0;
  Chat(Body(false), &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(tok_->Decode(engine_.submitted.back().prompt, false).find("get_weather"),
            std::string::npos);
}

// "required" gathers the tools' $defs at the schema's root: one name with two meanings is
// vLLM's 400.
TEST_F(ToolHandlersTest, ClashingDefsAreRefused) {
  const auto tool = [](const char* name, const char* def_type) {
    return Json{{"type", "function"},
                {"function",
                 {{"name", name},
                  {"parameters",
                   {{"type", "object"},
                    {"properties", {{"x", {{"$ref", "#/$defs/X"}}}}},
                    {"$defs", {{"X", {{"type", def_type}}}}}}}}}};
  };
  Json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
            {"tool_choice", "required"},
            {"tools", {tool("a", "string"), tool("b", "integer")}}};
  int status = 0;
  Json r = Chat(b.dump(), &status);
  EXPECT_EQ(status, 400);
  EXPECT_EQ(r["error"]["message"], "Tool definition 'X' has multiple schemas, which is not supported.");
  b["tools"] = {tool("a", "string"), tool("b", "string")};  // the same schema twice is fine
  engine_.script = tok_->Encode(R"([{"name": "a", "parameters": {"x": "s"}}])", false);
  r = Chat(b.dump(), &status);
  EXPECT_EQ(status, 200) << r.dump();
  // ...whatever the order of its keys (vLLM compares dicts).
  Json reordered = tool("b", "string");
  reordered["function"]["parameters"]["$defs"]["X"] = Json::parse(R"({"maxLength": 9, "type": "string"})");
  Json first = tool("a", "string");
  first["function"]["parameters"]["$defs"]["X"] = Json::parse(R"({"type": "string", "maxLength": 9})");
  b["tools"] = {first, reordered};
  r = Chat(b.dump(), &status);
  EXPECT_EQ(status, 200) << r.dump();
}

// A conversation's history as OpenAI clients send it, rendered as vLLM renders it: the tool
// calls' arguments as JSON strings become the objects the template iterates, null content is
// "", text-like part types are text, an assistant's `reasoning` reaches the template.
class ConversationHandlersTest : public ToolHandlersTest {
 protected:
  // The prompt the engine got for `messages` (200 expected), or the 400's message.
  std::string Prompt(const Json& messages, int want_status = 200) {
    int status = 0;
    const Json r = Chat(Json{{"messages", messages}, {"max_tokens", 1}}.dump(), &status);
    EXPECT_EQ(status, want_status) << r.dump();
    if (status != 200) return r["error"]["message"].get<std::string>();
    return tok_->Decode(engine_.submitted.back().prompt, false);
  }
  static Json Call(const Json& arguments) {
    return {{"id", "call_1"},
            {"type", "function"},
            {"function", {{"name", "get_weather"}, {"arguments", arguments}}}};
  }
  static Json ToolTurn(const Json& call) {
    return Json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                        {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}},
                        {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}});
  }
};

TEST_F(ConversationHandlersTest, ToolCallArgumentsAsJsonStringsRenderAsObjects) {
  const std::string rendered = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                               "</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                               "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny";
  // The OpenAI format (a string), and an object as some clients send it: the same prompt.
  const std::string from_string = Prompt(ToolTurn(Call(R"({"city": "Paris", "days": 3})")));
  EXPECT_NE(from_string.find(rendered), std::string::npos) << from_string;
  EXPECT_EQ(Prompt(ToolTurn(Call({{"city", "Paris"}, {"days", 3}}))), from_string);
  // Empty, null, malformed or not an object: no parameters, as vLLM coerces them to {}.
  const std::string none = "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>";
  // (A string nested 100k deep is refused by the depth-limited parser, not by the stack.)
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const Json& args :
       {Json(""), Json(), Json("{not json"), Json("[1, 2]"), Json("42"), Json(deep)}) {
    EXPECT_NE(Prompt(ToolTurn(Call(args))).find(none), std::string::npos) << args.dump();
  }
  // An empty list is no call at all.
  Json turn = ToolTurn(Call("{}"));
  turn[1]["tool_calls"] = Json::array();
  turn[1]["content"] = "Let me check.";
  EXPECT_EQ(Prompt(turn).find("<tool_call>"), std::string::npos);
  // What vLLM refuses.
  turn[1]["tool_calls"] = {"call_1"};
  EXPECT_EQ(Prompt(turn, 400), "assistant tool_calls entries must be objects.");
  Json custom = Call("{}");
  custom["type"] = "custom";
  EXPECT_EQ(Prompt(ToolTurn(custom), 400),
            "chat completions only support assistant tool_calls of type 'function'.");
}

// The template prints each tool as vLLM's pydantic dump of it: type first, the function's
// name, description and parameters (null when absent) before its other keys.
TEST_F(ConversationHandlersTest, ToolsRenderAsVllmsDumpOfThem) {
  const Json tools = Json::array(
      {{{"function", {{"strict", true}, {"parameters", {{"type", "object"}}}, {"name", "f"}}}},
       {{"x-extra", 1},
        {"type", "function"},
        {"function", {{"name", "g"}, {"description", "d"}}}}});
  int status = 0;
  const Json r = Chat(Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                           {"tools", tools},
                           {"tool_choice", "none"},
                           {"max_tokens", 1}}
                          .dump(),
                      &status);
  ASSERT_EQ(status, 200) << r.dump();
  const std::string prompt = tok_->Decode(engine_.submitted.back().prompt, false);
  EXPECT_NE(prompt.find(R"({"type": "function", "function": {"name": "f", "description": null, )"
                        R"("parameters": {"type": "object"}, "strict": true}})"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find(R"({"type": "function", "function": {"name": "g", "description": "d", )"
                        R"("parameters": null}, "x-extra": 1})"),
            std::string::npos)
      << prompt;
}

TEST_F(ConversationHandlersTest, NullOrAbsentContentIsEmpty) {
  const Json null_system = {{{"role", "system"}, {"content", nullptr}},
                            {{"role", "user"}, {"content", "hi"}}};
  const Json empty_system = {{{"role", "system"}, {"content", ""}},
                             {{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(Prompt(null_system), Prompt(empty_system));
  Json turn = ToolTurn(Call("{}"));
  turn[1].erase("content");  // an assistant turn that only calls a tool
  EXPECT_NE(Prompt(turn).find("<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>"),
            std::string::npos)
      << Prompt(turn);
}

TEST_F(ConversationHandlersTest, TextLikePartsAreText) {
  const auto user = [](const Json& parts) {
    return Json::array({{{"role", "user"}, {"content", parts}}});
  };
  const std::string plain = Prompt(user(Json::array({{{"type", "text"}, {"text", "a"}},
                                                     {{"type", "text"}, {"text", "b"}}})));
  EXPECT_NE(plain.find("a\nb"), std::string::npos);
  EXPECT_EQ(Prompt(user(Json::array({{{"type", "input_text"}, {"text", "a"}},
                                     {{"type", "output_text"}, {"text", "b"}}}))),
            plain);
  EXPECT_EQ(Prompt(user(Json::array({{{"type", "refusal"}, {"refusal", "a"}},
                                     {{"type", "thinking"}, {"thinking", "b"}}}))),
            plain);
  // A text-like part without its text is skipped, as vLLM skips it.
  EXPECT_EQ(Prompt(user(Json::array({{{"type", "text"}, {"text", "a"}},
                                     {{"type", "text"}, {"text", nullptr}},
                                     {{"type", "thinking"}},
                                     {{"type", "input_text"}, {"text", nullptr}},
                                     {{"type", "text"}, {"text", "b"}}}))),
            plain);
  EXPECT_EQ(Prompt(user(Json::array({{{"type", "thinking"}, {"thinking", 3}}})), 400),
            "messages: a thinking content part needs a string 'thinking'");
  EXPECT_EQ(Prompt(user(Json::array({{{"type", "input_audio"}}})), 400),
            "messages: content part type 'input_audio' is not supported by this model");
}

TEST_F(ConversationHandlersTest, AnAssistantsReasoningReachesTheTemplate) {
  // vLLM's reply field `reasoning`, sent back by a client for interleaved thinking, is what the
  // template reads as reasoning_content (after the last user turn it renders the thinking).
  Json turn = ToolTurn(Call("{}"));
  turn[1]["reasoning"] = "MYREASON";
  EXPECT_NE(Prompt(turn).find("<think>\nMYREASON\n</think>"), std::string::npos) << Prompt(turn);
}

TEST_F(ConversationHandlersTest, ContinueFinalMessageThroughATrimmingTemplate) {
  // MiniCPM-V-4.6's template renders `content|trim`: the final message's trailing space is not
  // in the prompt, so it continues after "Sure," (transformers' fallback to the stripped text).
  int status = 0;
  const auto body = [](const std::string& final_text) {
    return Json{{"messages",
                 {{{"role", "user"}, {"content", "hi"}},
                  {{"role", "assistant"}, {"content", final_text}}}},
                {"max_tokens", 1},
                {"add_generation_prompt", false},
                {"continue_final_message", true}}
        .dump();
  };
  for (const std::string final_text : {"Sure,", "Sure, ", "  Sure,\n"}) {
    const Json r = Chat(body(final_text), &status);
    ASSERT_EQ(status, 200) << final_text << r.dump();
    const std::string prompt = tok_->Decode(engine_.submitted.back().prompt, false);
    const std::string tail = "<|im_start|>assistant\n<think>\n\n</think>\n\nSure,";
    EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail) << prompt;
  }
  Chat(body("not in the template"), &status);
  EXPECT_EQ(status, 200);  // it is: the template renders it
  Chat(body("   "), &status);
  EXPECT_EQ(status, 200);  // transformers: "" is found at the end, the whole rendering
}

}  // namespace
}  // namespace cpm
