// `cpmserve serve` end to end over loopback with httplib's client, one shared server on the
// tiny model: every endpoint, SSE framing, vLLM's errors, batching invariance, prefix-cache
// hits, seeds and disconnects.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "e2e/tiny_serving_model.h"

namespace cpm {
namespace {

using e2e::Json;

// Sends a POST of `body` to `path` on a connection of its own and closes it without reading.
void PostAndHangUp(int port, const std::string& path, const std::string& body) {
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                              "Content-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  close(fd);
}

class ServerE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((std::filesystem::temp_directory_path() /
                            ("cpm_e2e_" + std::to_string(getpid()))).string());
    ASSERT_TRUE(WriteTinyServingModel(*dir_).ok());
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->Start(CPM_CPMSERVE_BIN, *dir_,
                               {"--host", "127.0.0.1", "--port", "0", "--served-model-name",
                                "tiny", "alias", "--kv-cache-memory-bytes", "4M", "--max-num-seqs",
                                "32", "--threads", "2", "--seed", "0", "--enable-log-requests"}));
    ASSERT_TRUE(server_->WaitReady()) << server_->Log();
  }
  static void TearDownTestSuite() {
    e2e::StopSuiteServer(server_);
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static int port() { return server_->port(); }

  static Json Chat(const Json& body, int* status = nullptr) {
    auto r = e2e::Post(port(), "/v1/chat/completions", body.dump());
    if (status) *status = r.status;
    if (r.status == 0) ADD_FAILURE() << r.body;  // no HTTP answer at all
    return r.json();
  }
  static std::string GreedyChat(const std::string& content, int max_tokens = 8) {
    Json r = Chat({{"messages", {{{"role", "user"}, {"content", content}}}},
                   {"temperature", 0},
                   {"max_tokens", max_tokens},
                   {"ignore_eos", true}});
    if (!r.contains("choices")) {
      ADD_FAILURE() << r.dump();
      return "";
    }
    return r["choices"][0]["message"]["content"].get<std::string>();
  }
  static std::string Metrics() { return e2e::Get(port(), "/metrics").body; }
  // Cancelled requests so far: --enable-log-requests logs each as vLLM does ("Request <id>
  // aborted."), while the metrics count none (vLLM keeps no statistics of them).
  static int AbortedRequests() {
    const std::string log = server_->Log();
    int n = 0;
    for (size_t at = log.find(" aborted.\n"); at != std::string::npos;
         at = log.find(" aborted.\n", at + 1)) {
      ++n;
    }
    return n;
  }
  static double AbortCount(const std::string& metrics) {
    return e2e::Metric(metrics, "vllm:request_success_total", "finished_reason=\"abort\"");
  }
  // A request whose client hangs up right after sending it: the server notices the closed
  // connection while waiting for the engine and cancels every choice (running or waiting).
  static void ExpectHangUpAbortsAll(const std::string& path, const std::string& body) {
    const int aborted0 = AbortedRequests();
    const double counted0 = AbortCount(Metrics());
    PostAndHangUp(port(), path, body);
    double in_engine = -1;
    int aborted = -1;
    for (int i = 0; i < 200; ++i) {
      const std::string m = Metrics();
      in_engine = e2e::Metric(m, "vllm:num_requests_running") +
                  e2e::Metric(m, "vllm:num_requests_waiting");
      aborted = AbortedRequests();
      if (in_engine == 0 && aborted > aborted0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(in_engine, 0);
    EXPECT_EQ(aborted, aborted0 + 1);
    EXPECT_EQ(AbortCount(Metrics()), counted0);
  }

  static std::string* dir_;
  static ServerProcess* server_;
};
std::string* ServerE2E::dir_ = nullptr;
ServerProcess* ServerE2E::server_ = nullptr;

// Small replies on a keep-alive connection go out at once: with Nagle's algorithm on, a reply's
// body (written after its headers) waited for the client's delayed ACK, ~40 ms every time. Not
// a speed target: 40 ms against a fraction of one, so the bound has a wide margin.
TEST_F(ServerE2E, KeepAliveRepliesAreNotHeldByNagle) {
  httplib::Client cli("127.0.0.1", port());
  cli.set_keep_alive(true);
  cli.set_tcp_nodelay(true);  // the client's own request body must not wait either
  std::vector<double> ms;
  for (int i = 0; i < 21; ++i) {
    const auto start = std::chrono::steady_clock::now();
    auto r = cli.Post("/tokenize", R"({"prompt":"hello"})", "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 25.0) << "median reply time in ms";
}

// A compressed body is read as sent, never inflated (as vLLM's server), so a small gzip of a huge
// body costs nothing: here gzip of a valid request fails to parse, as the proof that nothing was
// inflated. The connection stays usable.
TEST_F(ServerE2E, CompressedBodiesAreNotInflated) {
  // gzip of {"model":"tiny","prompt":"hi","max_tokens":1}
  const std::string gz(
      "\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03\xab\x56\xca\xcd\x4f\x49\xcd\x51\xb2\x52\x2a"
      "\xc9\xcc\xab\x54\xd2\x51\x2a\x28\xca\xcf\x2d\x28\x01\xf2\x33\x32\x81\xbc\xdc\xc4\x8a"
      "\xf8\x92\xfc\xec\xd4\xbc\x62\x25\x2b\xc3\x5a\x00\xc6\xc3\xa1\x6c\x2d\x00\x00\x00",
      62);
  httplib::Client cli("127.0.0.1", port());
  cli.set_keep_alive(true);
  auto r = cli.Post("/v1/completions", {{"Content-Encoding", "gzip"}}, gz, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("JSON decode error"), std::string::npos) << r->body;
  r = cli.Post("/v1/completions", R"({"model":"tiny","prompt":"hi","max_tokens":1})",
               "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// Replies go out as written, whatever the client accepts (as uvicorn sends vLLM's): a stream
// compressed by cpp-httplib reached the client only when it ended, and the OpenAI SDKs send
// Accept-Encoding. /metrics alone is gzipped for a client that takes gzip (prometheus_client).
TEST_F(ServerE2E, RepliesAreNotCompressedButMetricsGzipped) {
  const auto head = [&](const std::string& method, const std::string& path,
                        const std::string& body) {
    return e2e::RawHttp(port(),
                        method + " " + path +
                            " HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: gzip, deflate, br\r\n"
                            "Content-Type: application/json\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
                        30);
  };
  const std::string stream = head(
      "POST", "/v1/chat/completions",
      R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"stream":true})");
  EXPECT_NE(stream.find("text/event-stream"), std::string::npos) << stream;
  EXPECT_EQ(stream.find("Content-Encoding"), std::string::npos) << stream;
  const std::string json = head("POST", "/v1/completions", R"({"model":"tiny","prompt":"hi","max_tokens":2})");
  EXPECT_NE(json.find("HTTP/1.1 200"), std::string::npos) << json;
  EXPECT_EQ(json.find("Content-Encoding"), std::string::npos) << json;
  EXPECT_NE(head("GET", "/metrics", "").find("Content-Encoding: gzip"), std::string::npos);
}

// An empty message list is the chat template's to judge, as in vLLM: ChatML renders the
// generation prompt alone (a template that needs a message raises its own 400); only
// continue_final_message, which needs a final message, is refused here.
TEST_F(ServerE2E, EmptyMessagesAreTheTemplatesToJudge) {
  auto r = e2e::Post(port(), "/v1/chat/completions",
                     R"({"model":"tiny","messages":[],"max_tokens":2,"echo":true})");
  EXPECT_EQ(r.status, 200) << r.body;
  r = e2e::Post(port(), "/v1/chat/completions",
                R"({"model":"tiny","messages":[],"max_tokens":2,"add_generation_prompt":false,)"
                R"("continue_final_message":true})");
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("no final message to continue"), std::string::npos) << r.body;
}

// A POST with neither Content-Length nor Transfer-Encoding has an empty body (RFC 9112): it is
// answered at once, not after the server's 5 s read timeout.
TEST_F(ServerE2E, BodilessPostsAreAnsweredAtOnce) {
  // The head line of the answer to a POST of `path` with no Content-Length, within 3 s.
  const auto status_line = [&](const std::string& path, const std::string& headers = "") {
    const std::string reply = e2e::RawHttp(
        port(),
        "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers +
            "Connection: close\r\n\r\n",
        3);
    return reply.substr(0, reply.find("\r\n"));
  };
  EXPECT_EQ(status_line("/ping"), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_line("/v1/responses/resp_1/cancel").substr(0, 12), "HTTP/1.1 404");
  EXPECT_EQ(status_line("/v1/chat/completions", "Content-Type: application/json\r\n")
                .substr(0, 12),
            "HTTP/1.1 400");
  // No POST route: FastAPI's 405 or 404, also at once.
  EXPECT_EQ(status_line("/health").substr(0, 12), "HTTP/1.1 405");
  EXPECT_EQ(status_line("/nope").substr(0, 12), "HTTP/1.1 404");
  // PUT, PATCH and DELETE as plain `curl -X PUT URL` sends them: at once too (cpp-httplib read
  // their bodies until its 5 s timeout, then answered 400).
  const auto method_line = [&](const std::string& method, const std::string& path) {
    const std::string reply = e2e::RawHttp(
        port(), method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 3);
    return reply.substr(0, 12);
  };
  for (const char* method : {"PUT", "PATCH", "DELETE"}) {
    EXPECT_EQ(method_line(method, "/v1/models"), "HTTP/1.1 405") << method;
    EXPECT_EQ(method_line(method, "/nope"), "HTTP/1.1 404") << method;
  }
}

// uvicorn's h11 refuses header values with control characters (an ANSI escape in a request id
// meant for the logs, a bare CR) with its 400; a tab is fine.
TEST_F(ServerE2E, HeaderValuesWithControlCharactersAreRefused) {
  const auto reply = [&](const std::string& header) {
    return e2e::RawHttp(port(),
                        "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + header +
                            "\r\nConnection: close\r\n\r\n",
                        3);
  };
  for (const std::string& bad : {std::string("X-Request-Id: a\x1b[31mRED\x07"),
                                 std::string("X-Request-Id: a\rb")}) {
    const std::string r = reply(bad);
    EXPECT_EQ(r.substr(0, 12), "HTTP/1.1 400") << r;
    // uvicorn's body, "Invalid HTTP request received." (RawHttp returns the head only).
    EXPECT_NE(r.find("Content-Length: 30\r\n"), std::string::npos) << r;
  }
  EXPECT_EQ(reply("X-Request-Id: a\tb").substr(0, 12), "HTTP/1.1 200");
}

// vLLM mounts its Prometheus app at ^/metrics(.*)$: any method, any path under it.
TEST_F(ServerE2E, MetricsAnswerAnyMethodUnderTheirPath) {
  httplib::Client cli("127.0.0.1", port());
  for (const char* path : {"/metrics", "/metrics/", "/metrics/x"}) {
    auto get = cli.Get(path);
    ASSERT_TRUE(get);
    EXPECT_EQ(get->status, 200) << path;
    EXPECT_NE(get->body.find("vllm:num_requests_running"), std::string::npos) << path;
  }
  auto head = cli.Head("/metrics");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());
  auto post = cli.Post("/metrics", "x", "text/plain");  // a body, read and ignored
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200);
  EXPECT_NE(post->body.find("vllm:num_requests_running"), std::string::npos);
  const std::string put = e2e::RawHttp(
      port(), "PUT /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 3);
  EXPECT_EQ(put.substr(0, 12), "HTTP/1.1 200");
}

// OpenAI's models.retrieve (newer vLLM's GET /v1/models/{model}), and Starlette's redirect of
// a known path written with a trailing slash.
TEST_F(ServerE2E, ModelRetrieveAndTrailingSlashes) {
  const Json card = e2e::Get(port(), "/v1/models/alias").json();
  EXPECT_EQ(card["id"], "alias");
  EXPECT_EQ(card["object"], "model");
  EXPECT_EQ(card["max_model_len"], 256);
  httplib::Client cli("127.0.0.1", port());
  auto missing = cli.Get("/v1/models/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  const Json error = Json::parse(missing->body)["error"];
  EXPECT_EQ(error["message"], "The model `nope` does not exist.");
  EXPECT_EQ(error["param"], "model");
  auto slashed = cli.Get("/health/?x=1");
  ASSERT_TRUE(slashed);
  EXPECT_EQ(slashed->status, 307);
  EXPECT_EQ(slashed->get_header_value("Location"), "/health?x=1");
  auto post = cli.Post("/v1/completions/", R"({"prompt":"a","max_tokens":1})", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 307);
  EXPECT_EQ(post->get_header_value("Location"), "/v1/completions");
  auto head = cli.Head("/health");  // FastAPI's routes take no HEAD
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 405);
  EXPECT_EQ(head->get_header_value("Allow"), "GET");
  auto head_model = cli.Head("/v1/models/alias");  // a route with a path parameter too
  ASSERT_TRUE(head_model);
  EXPECT_EQ(head_model->status, 405);
  auto get_cancel = cli.Get("/v1/responses/resp_1/cancel");
  ASSERT_TRUE(get_cancel);
  EXPECT_EQ(get_cancel->status, 405);
  EXPECT_EQ(get_cancel->get_header_value("Allow"), "POST");
  cli.set_follow_location(true);
  auto followed = cli.Post("/v1/completions/", R"({"prompt":"a","max_tokens":1})",
                           "application/json");
  ASSERT_TRUE(followed);
  EXPECT_EQ(followed->status, 200) << followed->body;
}

TEST_F(ServerE2E, HealthVersionModelsAndStartupLog) {
  auto h = e2e::Get(port(), "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body, "");
  EXPECT_TRUE(e2e::Get(port(), "/version").json().contains("version"));
  EXPECT_EQ(e2e::Get(port(), "/load").json(), Json({{"server_load", 0}}));
  Json m = e2e::Get(port(), "/v1/models").json();
  ASSERT_EQ(m["data"].size(), 2u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][1]["id"], "alias");
  EXPECT_EQ(m["data"][0]["max_model_len"], 256);
  EXPECT_EQ(m["data"][0]["object"], "model");
  const std::string log = server_->Log();
  for (const char* line : {"Model loading took ", "Available KV cache memory: ",
                           "GPU KV cache size: ", "Maximum concurrency for 256 tokens per request: ",
                           "Using max model len 256",
                           "Chunked prefill is enabled with max_num_batched_tokens=256.",
                           "Starting cpmserve API server on http://127.0.0.1:",
                           "Route: /v1/chat/completions, Methods: POST"}) {
    EXPECT_NE(log.find(line), std::string::npos) << line;
  }
  EXPECT_EQ(e2e::Get(port(), "/nope").status, 404);
  // A known path with another method: FastAPI's 405, naming the methods it takes.
  auto wrong = e2e::Get(port(), "/v1/chat/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.json(), Json::parse(R"({"detail":"Method Not Allowed"})"));
  httplib::Client cli("127.0.0.1", port());
  auto del = cli.Delete("/v1/models");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  EXPECT_EQ(del->get_header_value("Allow"), "GET");
  // A body over the limit: httplib's 413, with the OpenAI error object.
  auto big = cli.Post("/v1/completions", std::string((128u << 20) + 1, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(Json::parse(big->body)["error"]["code"], 413) << big->body;
}

// The reply names the model the request named (vLLM's _get_model_name): one of the served
// names, or the first where it gave none or "" (Python-falsy, so no 404 in vLLM either).
TEST_F(ServerE2E, RepliesNameTheRequestedModel) {
  const auto model_of = [&](const Json& extra) {
    Json body = {{"prompt", "x"}, {"max_tokens", 1}};
    body.update(extra);
    const auto r = e2e::Post(port(), "/v1/completions", body.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json().value("model", "");
  };
  EXPECT_EQ(model_of({{"model", "alias"}}), "alias");
  EXPECT_EQ(model_of({{"model", "tiny"}}), "tiny");
  EXPECT_EQ(model_of({{"model", ""}}), "tiny");
  EXPECT_EQ(model_of(Json::object()), "tiny");
  EXPECT_EQ(e2e::Post(port(), "/tokenize", R"({"prompt":"hi","model":""})").status, 200);
}

// SageMaker's /invocations (vLLM's): the first request model the body reads as, chat then
// completion; neither is vLLM's 400 naming both.
TEST_F(ServerE2E, InvocationsRouteByBody) {
  const auto chat = e2e::Post(port(), "/invocations",
                              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})");
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["object"], "chat.completion");
  const auto text = e2e::Post(port(), "/invocations", R"({"prompt":"hi","max_tokens":2})");
  ASSERT_EQ(text.status, 200) << text.body;
  EXPECT_EQ(text.json()["object"], "text_completion");
  const auto bad = e2e::Post(port(), "/invocations", "{bad");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("JSON decode error"), std::string::npos) << bad.body;
  // A chat body that is not a valid chat request but is a valid completion one.
  const auto fallback = e2e::Post(
      port(), "/invocations", R"({"messages":"hi","prompt":"hi","max_tokens":2})");
  ASSERT_EQ(fallback.status, 200) << fallback.body;
  EXPECT_EQ(fallback.json()["object"], "text_completion");
  const auto neither = e2e::Post(port(), "/invocations", R"({"input":"hi"})");
  EXPECT_EQ(neither.status, 400);
  EXPECT_EQ(neither.json()["error"]["message"],
            "Cannot find suitable handler for request. Expected one of: "
            "['ChatCompletionRequest', 'CompletionRequest']");
}

TEST_F(ServerE2E, ChatPlainAndStreamedAgree) {
  const Json req = {{"model", "alias"},
                    {"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
                    {"temperature", 0},
                    {"max_tokens", 12},
                    {"ignore_eos", true}};
  int status = 0;
  Json plain = Chat(req, &status);
  ASSERT_EQ(status, 200) << plain.dump();
  EXPECT_EQ(plain["object"], "chat.completion");
  EXPECT_EQ(plain["model"], "alias");  // the served name the request asked for
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(plain["usage"]["completion_tokens"], 12);
  // The prompt count is what /tokenize says for the same messages.
  Json tok = e2e::Post(port(), "/tokenize", Json{{"messages", req["messages"]}}.dump()).json();
  EXPECT_EQ(plain["usage"]["prompt_tokens"], tok["count"]);
  EXPECT_EQ(plain["usage"]["total_tokens"], tok["count"].get<int>() + 12);

  Json sreq = req;
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  auto r = e2e::PostStream(port(), "/v1/chat/completions", sreq.dump());
  EXPECT_EQ(r.status, 200);
  bool framing_ok = false;
  auto data = e2e::SseData(r.body, &framing_ok);
  EXPECT_TRUE(framing_ok) << r.body;
  ASSERT_GE(data.size(), 4u);
  EXPECT_EQ(data.back(), "[DONE]");
  Json first = Json::parse(data[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  std::string finish;
  for (size_t i = 1; i + 2 < data.size(); ++i) {
    Json c = Json::parse(data[i]);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], first["id"]);
    const Json& ch = c["choices"][0];
    if (ch["delta"].contains("content")) text += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_EQ(text, plain["choices"][0]["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "length");
  // vLLM's last chunk of a choice: its last text (content, "" if none) with the finish_reason,
  // right before the usage chunk; no empty chunk of its own.
  const Json last = Json::parse(data[data.size() - 3])["choices"][0];
  EXPECT_EQ(last["finish_reason"], "length");
  EXPECT_TRUE(last["delta"].contains("content") && last["delta"]["content"].is_string())
      << last.dump();
  EXPECT_TRUE(Json::parse(data[data.size() - 4])["choices"][0]["finish_reason"].is_null());
  Json usage = Json::parse(data[data.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  // The same counts; the stream leaves a null prompt_tokens_details out (vLLM's exclude_none),
  // the reply keeps it.
  Json plain_usage = plain["usage"];
  EXPECT_TRUE(plain_usage["prompt_tokens_details"].is_null());
  plain_usage.erase("prompt_tokens_details");
  EXPECT_EQ(usage["usage"], plain_usage);
}

TEST_F(ServerE2E, CompletionsPromptForms) {
  auto post = [](const Json& body) { return e2e::Post(port(), "/v1/completions", body.dump()); };
  auto one = post({{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  ASSERT_EQ(one.status, 200) << one.body;
  Json j = one.json();
  EXPECT_EQ(j["object"], "text_completion");
  const std::string text = j["choices"][0]["text"];
  Json ids = e2e::Post(port(), "/tokenize", R"({"prompt":"Hello"})").json()["tokens"];
  auto by_ids = post({{"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}});
  EXPECT_EQ(by_ids.json()["choices"][0]["text"], text);
  // n > 1 is not greedy (vLLM refuses greedy n > 1): top_k 1 takes the same tokens.
  auto lists = post({{"prompt", {ids, ids}}, {"max_tokens", 4}, {"temperature", 1},
                     {"top_k", 1}, {"ignore_eos", true}, {"n", 2}});
  j = lists.json();
  ASSERT_EQ(j["choices"].size(), 4u) << lists.body;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], text);
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2 * ids.size());
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  auto strs = post({{"prompt", {"Hello", "Hello"}}, {"max_tokens", 4}, {"temperature", 0},
                    {"ignore_eos", true}, {"echo", true}});
  j = strs.json();
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["text"], "Hello" + text);
  auto streamed = e2e::PostStream(
      port(), "/v1/completions",
      Json{{"prompt", "Hello"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
           {"stream", true}}.dump());
  bool ok = false;
  auto data = e2e::SseData(streamed.body, &ok);
  EXPECT_TRUE(ok);
  std::string joined;
  for (size_t i = 0; i + 1 < data.size(); ++i) {
    Json c = Json::parse(data[i]);
    EXPECT_EQ(c["object"], "text_completion");
    joined += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(joined, text);
}

TEST_F(ServerE2E, TokenizeDetokenize) {
  Json t = e2e::Post(port(), "/tokenize", R"({"prompt":"Hello world","return_token_strs":true})").json();
  EXPECT_EQ(t["max_model_len"], 256);
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["token_strs"].size(), t["tokens"].size());
  Json d = e2e::Post(port(), "/detokenize", Json{{"tokens", t["tokens"]}}.dump()).json();
  EXPECT_NE(d["prompt"].get<std::string>().find("Hello world"), std::string::npos);
}

TEST_F(ServerE2E, ErrorsAreVllmShaped) {
  auto expect_error = [](const e2e::Reply& r, int status, const std::string& needle) {
    EXPECT_EQ(r.status, status) << r.body;
    Json j = r.json();
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["code"], status);
    for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(j["error"].contains(key));
    EXPECT_NE(j["error"]["message"].get<std::string>().find(needle), std::string::npos)
        << j["error"]["message"];
  };
  const std::string chat = "/v1/chat/completions";
  expect_error(e2e::Post(port(), chat, "{oops"), 400, "JSON");
  expect_error(e2e::Post(port(), chat, R"({"messages":"hi"})"), 400, "messages");
  expect_error(e2e::Post(port(), chat,
                         R"({"messages":[],"add_generation_prompt":false,"continue_final_message":true})"),
               400, "no final message");
  expect_error(e2e::Post(port(), chat, R"({"messages":[{"role":"user","content":"x"}],"temperature":-1})"),
               400, "temperature");
  expect_error(e2e::Post(port(), chat, R"({"messages":[{"role":"user","content":"x"}],"top_p":2})"),
               400, "top_p");
  expect_error(e2e::Post(port(), chat, R"({"messages":[{"role":"user","content":"x"}],"n":0})"), 400,
               "n must be");
  expect_error(e2e::Post(port(), chat,
                         R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})"),
               400, "20");
  expect_error(e2e::Post(port(), chat, R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"),
               404, "The model `gpt-4` does not exist.");
  std::string longtext;
  for (int i = 0; i < 200; ++i) longtext += "hello world ";
  const Json long_msgs = {{{"role", "user"}, {"content", longtext}}};
  const int n = e2e::Post(port(), "/tokenize", Json{{"messages", long_msgs}}.dump()).json()["count"];
  ASSERT_GT(n, 256);
  expect_error(e2e::Post(port(), chat, Json{{"messages", long_msgs}}.dump()), 400,
               "This model's maximum context length is 256 tokens. However, your request has " +
                   std::to_string(n) +
                   " input tokens. Please reduce the length of the input messages.");
  const Json short_msgs = {{{"role", "user"}, {"content", "Hi"}}};
  const int m = e2e::Post(port(), "/tokenize", Json{{"messages", short_msgs}}.dump()).json()["count"];
  expect_error(e2e::Post(port(), chat, Json{{"messages", short_msgs}, {"max_tokens", 300}}.dump()), 400,
               "'max_tokens' or 'max_completion_tokens' is too large: 300. This model's maximum "
               "context length is 256 tokens and your request has " +
                   std::to_string(m) + " input tokens (300 > 256 - " + std::to_string(m) + ").");
  // pydantic's check of the body: vLLM's RequestValidationError handler types it "Bad Request".
  EXPECT_EQ(e2e::Post(port(), chat, R"({"messages":"x"})").json()["error"]["type"], "Bad Request");
  expect_error(e2e::Post(port(), "/v1/completions", R"({"prompt":[1,100000]})"), 400, "vocabulary");
  expect_error(e2e::Post(port(), "/v1/completions", R"({"prompt":{"a":1}})"), 400, "prompt");
  // Unknown fields are ignored, not rejected.
  auto ok = e2e::Post(port(), chat,
                      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"guided_json":{"a":1}})");
  EXPECT_EQ(ok.status, 200);
  // The server is still fine after all of that.
  EXPECT_EQ(e2e::Get(port(), "/health").status, 200);
}

TEST_F(ServerE2E, StopStringsLogprobsAndSeeds) {
  const std::string free_text = GreedyChat("Stop test", 12);
  ASSERT_GE(free_text.size(), 4u);
  const std::string stop = e2e::Utf8Piece(free_text, free_text.size() / 2, 2);
  ASSERT_FALSE(stop.empty());
  Json r = Chat({{"messages", {{{"role", "user"}, {"content", "Stop test"}}}}, {"temperature", 0},
                 {"max_tokens", 12}, {"ignore_eos", true}, {"stop", {stop}}});
  const std::string cut = r["choices"][0]["message"]["content"];
  EXPECT_EQ(cut, free_text.substr(0, free_text.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["stop_reason"], stop);

  // Sampled at temperature 1 (the tiny model's flat distribution), as vLLM lists them: the
  // sampled token first, then the best of the rest, five in all.
  r = Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"max_tokens", 8},
            {"temperature", 1.0}, {"seed", 7}, {"logprobs", true}, {"top_logprobs", 5}});
  const Json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), r["usage"]["completion_tokens"].get<size_t>());
  int sampled_below_the_top = 0;
  for (const Json& e : content) {
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["top_logprobs"].size(), 5u);
    EXPECT_TRUE(e["bytes"].is_array());
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    for (int k = 2; k < 5; ++k) {  // the rest best first
      EXPECT_GE(e["top_logprobs"][k - 1]["logprob"].get<double>(),
                e["top_logprobs"][k]["logprob"].get<double>());
      EXPECT_NE(e["top_logprobs"][k]["token"], e["token"]);
    }
    sampled_below_the_top += e["logprob"] < e["top_logprobs"][1]["logprob"];
  }
  EXPECT_GT(sampled_below_the_top, 0) << "no draw below the best: the order is not tested";
  // Completions: the dict holds the sampled token first, then the top k (k + 1 keys when the
  // sampled one is not among them).
  const Json c = e2e::Post(port(), "/v1/completions",
                           Json{{"prompt", "x"}, {"max_tokens", 8}, {"temperature", 1.0},
                                {"seed", 7}, {"logprobs", 2}}.dump()).json();
  const Json& lps = c["choices"][0]["logprobs"];
  ASSERT_EQ(lps["tokens"].size(), 8u) << c.dump();
  for (size_t i = 0; i < 8; ++i) {
    const Json& tops = lps["top_logprobs"][i];
    EXPECT_EQ(tops.begin().key(), lps["tokens"][i].get<std::string>()) << tops.dump();
    EXPECT_GE(tops.size(), 2u);
  }

  const Json seeded = {{"messages", {{{"role", "user"}, {"content", "seed"}}}}, {"temperature", 1.0},
                       {"max_tokens", 10}, {"ignore_eos", true}, {"seed", 1234}, {"n", 2}};
  Json a = Chat(seeded), b = Chat(seeded);
  EXPECT_EQ(a["choices"], b["choices"]);
  Json next = seeded;
  next["seed"] = 1235;
  next["n"] = 1;
  EXPECT_EQ(Chat(next)["choices"][0]["message"], a["choices"][1]["message"]);
}

// logit_bias and allowed_token_ids over HTTP: a token pushed up by 100, or the only one
// allowed, is every greedy token; a bad request is vLLM's 400.
TEST_F(ServerE2E, LogitBiasAndAllowedTokens) {
  const Json hello = e2e::Post(port(), "/tokenize", R"({"prompt":"Hello"})").json()["tokens"];
  ASSERT_FALSE(hello.empty());
  const int t = hello.back();
  const std::string four =
      e2e::Post(port(), "/detokenize", Json{{"tokens", {t, t, t, t}}}.dump()).json()["prompt"];
  const auto complete = [&](const Json& extra) {
    Json body = {{"prompt", "x"}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}};
    body.update(extra);
    return e2e::Post(port(), "/v1/completions", body.dump());
  };
  auto biased = complete({{"logit_bias", {{std::to_string(t), 100}}}});
  ASSERT_EQ(biased.status, 200) << biased.body;
  EXPECT_EQ(biased.json()["choices"][0]["text"], four);
  auto allowed = complete({{"allowed_token_ids", {t}}});
  ASSERT_EQ(allowed.status, 200) << allowed.body;
  EXPECT_EQ(allowed.json()["choices"][0]["text"], four);
  auto bad = complete({{"logit_bias", {{"100000000", 1}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("out-of-vocab"), std::string::npos) << bad.body;
}

// return_tokens_as_token_ids: log-probs name each token "token_id:<id>", in both shapes, and
// the ids are the tokens the reply decodes from.
TEST_F(ServerE2E, LogprobTokensAsTokenIds) {
  Json c = e2e::Post(port(), "/v1/completions",
                     R"({"prompt":"x","max_tokens":3,"temperature":0,"ignore_eos":true,)"
                     R"("logprobs":2,"return_tokens_as_token_ids":true})")
               .json();
  Json ids = Json::array();
  for (const Json& t : c["choices"][0]["logprobs"]["tokens"]) {
    const std::string s = t;
    ASSERT_EQ(s.rfind("token_id:", 0), 0u) << s;
    ids.push_back(std::stoi(s.substr(9)));
  }
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(e2e::Post(port(), "/detokenize", Json{{"tokens", ids}}.dump()).json()["prompt"],
            c["choices"][0]["text"]);
  for (const auto& [key, lp] : c["choices"][0]["logprobs"]["top_logprobs"][0].items()) {
    EXPECT_EQ(key.rfind("token_id:", 0), 0u) << key;
  }
  Json chat = e2e::Post(port(), "/v1/chat/completions",
                        R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,)"
                        R"("logprobs":true,"top_logprobs":1,"return_tokens_as_token_ids":true})")
                  .json();
  const Json& first = chat["choices"][0]["logprobs"]["content"][0];
  const std::string token = first["token"];
  EXPECT_EQ(token.rfind("token_id:", 0), 0u) << token;
  EXPECT_EQ(first["bytes"].size(), token.size());
  EXPECT_EQ(first["top_logprobs"][0]["token"].get<std::string>().rfind("token_id:", 0), 0u);
}

// use_beam_search (vLLM extra): the n choices are the beams of a search. Checked against a
// search written here over the server's own next-token log-probs (one-token completions with
// the top 2n), and, at width 1, against greedy decoding, plain and streamed chat alike.
TEST_F(ServerE2E, BeamSearchMatchesASearchOverTheLogprobs) {
  const std::vector<int> prompt = {11, 12, 13};
  const auto ids_of = [](const Json& tokens) {  // "token_id:<id>" strings
    std::vector<int> ids;
    for (const Json& t : tokens) ids.push_back(std::stoi(t.get<std::string>().substr(9)));
    return ids;
  };
  // The k likeliest tokens after prompt + `out`, with their log-probs.
  const auto next = [&](const std::vector<int>& out, int k) {
    std::vector<int> ids = prompt;
    ids.insert(ids.end(), out.begin(), out.end());
    Json body = {{"prompt", ids},     {"max_tokens", 1},  {"temperature", 0},
                 {"logprobs", k},     {"ignore_eos", true}, {"return_tokens_as_token_ids", true}};
    Json r = e2e::Post(port(), "/v1/completions", body.dump()).json();
    std::vector<std::pair<int, double>> top;
    for (const auto& [key, lp] : r["choices"][0]["logprobs"]["top_logprobs"][0].items()) {
      top.push_back({std::stoi(key.substr(9)), lp.get<double>()});
    }
    return top;
  };
  // With EOS ignored every beam has the same length, so the cumulative log-prob ranks them.
  constexpr int kWidth = 2, kSteps = 4;
  std::vector<std::pair<std::vector<int>, double>> beams = {{{}, 0.0}};
  for (int step = 0; step < kSteps; ++step) {
    std::vector<std::pair<std::vector<int>, double>> grown;
    for (const auto& [out, cum] : beams) {
      for (const auto& [t, lp] : next(out, 2 * kWidth)) {
        std::vector<int> longer = out;
        longer.push_back(t);
        grown.push_back({longer, cum + lp});
      }
    }
    std::stable_sort(grown.begin(), grown.end(),
                     [](const auto& a, const auto& b) { return a.second > b.second; });
    grown.resize(kWidth);
    beams = grown;
  }

  Json body = {{"prompt", prompt}, {"max_tokens", kSteps},   {"use_beam_search", true},
               {"n", kWidth},      {"ignore_eos", true},     {"logprobs", 1},
               {"return_tokens_as_token_ids", true}};
  auto r = e2e::Post(port(), "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json choices = r.json()["choices"];
  ASSERT_EQ(choices.size(), static_cast<size_t>(kWidth));
  for (int i = 0; i < kWidth; ++i) {
    const Json& lps = choices[i]["logprobs"];
    EXPECT_EQ(ids_of(lps["tokens"]), beams[i].first) << i;
    double cum = 0;
    for (const Json& lp : lps["token_logprobs"]) cum += lp.get<double>();
    EXPECT_NEAR(cum, beams[i].second, 1e-4) << i;
    EXPECT_EQ(choices[i]["finish_reason"], "length");
  }
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], kWidth * kSteps);

  // Width 1 keeps the likeliest token each step: greedy decoding.
  Json chat = {{"messages", {{{"role", "user"}, {"content", "beam me up"}}}},
               {"max_tokens", 6}, {"ignore_eos", true}, {"use_beam_search", true}};
  Json one = Chat(chat);
  ASSERT_TRUE(one.contains("choices")) << one.dump();
  EXPECT_EQ(one["choices"][0]["message"]["content"], GreedyChat("beam me up", 6));
  chat["stream"] = true;
  auto streamed = e2e::PostStream(port(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(streamed.status, 200);
  bool framing_ok = false;
  std::string text;
  for (const std::string& data : e2e::SseData(streamed.body, &framing_ok)) {
    if (data == "[DONE]") continue;
    const Json c = Json::parse(data);
    if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content")) {
      text += c["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_TRUE(framing_ok);
  EXPECT_EQ(text, one["choices"][0]["message"]["content"]);
}

// truncate_prompt_tokens keeps the prompt's last tokens: the same reply as that tail sent alone.
TEST_F(ServerE2E, TruncatePromptTokens) {
  const auto complete = [&](const Json& prompt, const Json& extra) {
    Json body = {{"prompt", prompt}, {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true}};
    body.update(extra);
    return e2e::Post(port(), "/v1/completions", body.dump()).json();
  };
  const Json cut = complete({11, 12, 13, 14, 15, 16}, {{"truncate_prompt_tokens", 3}});
  EXPECT_EQ(cut["usage"]["prompt_tokens"], 3);
  // A text prompt is cut as Hugging Face's truncation cuts it for vLLM: the special tokens the
  // tokenizer adds (a leading <s>) stay, the text's last tokens fill the rest; the echo is the
  // text as sent (vLLM echoes the request's prompt).
  const std::string text = "one two three four five six seven";
  const Json with = e2e::Post(port(), "/tokenize", Json{{"prompt", text}}.dump()).json();
  const Json bare = e2e::Post(port(), "/tokenize",
                              Json{{"prompt", text}, {"add_special_tokens", false}}.dump())
                        .json();
  ASSERT_EQ(with["tokens"].size(), bare["tokens"].size() + 1) << with.dump();  // <s> first
  const Json bos_and_last = {with["tokens"][0], with["tokens"].back()};
  const Json echoed = complete(text, {{"truncate_prompt_tokens", 2}, {"echo", true}});
  EXPECT_EQ(echoed["usage"]["prompt_tokens"], 2);
  const std::string echoed_text = echoed["choices"][0]["text"];
  EXPECT_EQ(echoed_text.rfind(text, 0), 0u) << echoed.dump();
  EXPECT_EQ(echoed_text.substr(text.size()),
            complete(bos_and_last, Json::object())["choices"][0]["text"]);
  EXPECT_EQ(cut["choices"][0]["text"], complete({14, 15, 16}, Json::object())["choices"][0]["text"]);
  auto chat = e2e::Post(port(), "/v1/chat/completions",
                        Json{{"messages", {{{"role", "user"}, {"content", "a long question"}}}},
                             {"max_tokens", 2}, {"truncate_prompt_tokens", 4}}
                            .dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["usage"]["prompt_tokens"], 4);
  auto too_long = e2e::Post(port(), "/v1/completions",
                            R"({"prompt":"x","truncate_prompt_tokens":100000})");
  EXPECT_EQ(too_long.status, 400);
  EXPECT_NE(too_long.body.find("greater than max_model_len"), std::string::npos);
}

// Structured outputs on the tiny model's random weights: whatever the model would say, the
// text is what the schema allows. Checked here by parsing it (nlohmann) and testing each field
// by hand, not by the matcher that produced it.
TEST_F(ServerE2E, StructuredOutputsFollowTheSchema) {
  const Json schema = Json::parse(R"({
      "type": "object",
      "properties": {"name": {"type": "string", "maxLength": 6},
                     "ok": {"type": "boolean"},
                     "color": {"enum": ["red", "green", "blue"]},
                     "tags": {"type": "array", "items": {"type": "string", "maxLength": 3},
                              "maxItems": 2}},
      "required": ["name", "ok", "color"]})");
  const auto check = [](const std::string& text) {
    const Json v = Json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
    EXPECT_LE(v["name"].get<std::string>().size(), 6u * 4) << text;  // ≤ 6 characters
    ASSERT_TRUE(v.contains("ok") && v["ok"].is_boolean()) << text;
    ASSERT_TRUE(v.contains("color")) << text;
    EXPECT_TRUE(v["color"] == "red" || v["color"] == "green" || v["color"] == "blue") << text;
    size_t keys = 3;
    if (v.contains("tags")) {
      ++keys;
      ASSERT_TRUE(v["tags"].is_array()) << text;
      EXPECT_LE(v["tags"].size(), 2u) << text;
      for (const Json& t : v["tags"]) EXPECT_TRUE(t.is_string()) << text;
    }
    EXPECT_EQ(v.size(), keys) << text;
  };
  // Compact JSON (vLLM's disable_any_whitespace), sampled, several seeds and n = 2: every
  // output is complete within max_tokens and valid.
  for (int seed = 0; seed < 3; ++seed) {
    Json r = Chat({{"messages", {{{"role", "user"}, {"content", "Describe a fruit as JSON."}}}},
                   {"temperature", 1.0}, {"seed", seed}, {"n", 2}, {"max_tokens", 160},
                   {"structured_outputs", {{"json", schema}, {"disable_any_whitespace", true}}}});
    ASSERT_EQ(r["choices"].size(), 2u) << r.dump();
    for (const Json& c : r["choices"]) {
      EXPECT_EQ(c["finish_reason"], "stop") << c.dump();
      check(c["message"]["content"].get<std::string>());
    }
  }
  // OpenAI's response_format, greedy and streamed: the same text as unstreamed.
  const Json body = {{"messages", {{{"role", "user"}, {"content", "JSON please"}}}},
                     {"temperature", 0}, {"max_tokens", 200},
                     {"response_format", {{"type", "json_schema"},
                                          {"json_schema", {{"name", "fruit"},
                                                           {"schema", schema}}}}}};
  Json plain = Chat(body);
  const std::string text = plain["choices"][0]["message"]["content"];
  if (plain["choices"][0]["finish_reason"] == "stop") check(text);
  Json streamed_body = body;
  streamed_body["stream"] = true;
  bool framing_ok = false;
  const auto events = e2e::SseData(
      e2e::PostStream(port(), "/v1/chat/completions", streamed_body.dump()).body, &framing_ok);
  EXPECT_TRUE(framing_ok);
  std::string joined;
  for (const std::string& data : events) {
    const Json e = Json::parse(data, nullptr, false);
    if (e.is_object() && e.contains("choices") && !e["choices"].empty() &&
        e["choices"][0]["delta"].contains("content")) {
      joined += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(joined, text);
  // A choice: exactly one of the strings, nothing around it (completions endpoint).
  for (int seed = 0; seed < 4; ++seed) {
    auto r = e2e::Post(port(), "/v1/completions",
                       Json{{"prompt", "The answer is"}, {"temperature", 1.0}, {"seed", seed},
                            {"max_tokens", 20},
                            {"structured_outputs", {{"choice", {"yes", "no", "not sure"}}}}}
                           .dump())
                 .json();
    const std::string answer = r["choices"][0]["text"];
    EXPECT_TRUE(answer == "yes" || answer == "no" || answer == "not sure") << answer;
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  }
  // json_object: an object, or a prefix of one cut by max_tokens.
  Json obj = Chat({{"messages", {{{"role", "user"}, {"content", "{}"}}}}, {"temperature", 0},
                   {"max_tokens", 60}, {"response_format", {{"type", "json_object"}}}});
  const std::string o = obj["choices"][0]["message"]["content"];
  ASSERT_FALSE(o.empty());
  EXPECT_EQ(o.find_first_not_of(" \t\n\r"), o.find('{')) << o;
  if (obj["choices"][0]["finish_reason"] == "stop") {
    EXPECT_TRUE(Json::parse(o, nullptr, false).is_object()) << o;
  }
  // A requested stop token that is text (here each token the reply above is made of) ends a
  // structured output only once it is complete, as vLLM passes every stop id to the grammar
  // as a stop token (its fix of vllm#42403): never a cut object.
  const Json reply_ids =
      e2e::Post(port(), "/tokenize", Json{{"prompt", o}, {"add_special_tokens", false}}.dump())
          .json()["tokens"];
  // (From its second token: a stop id that is the only way to open the object leaves the
  // grammar nothing to start with, and generation ends there.)
  ASSERT_GE(reply_ids.size(), 2u);
  for (size_t k = 1; k < reply_ids.size(); ++k) {
    const Json& id = reply_ids[k];
    const Json r = Chat({{"messages", {{{"role", "user"}, {"content", "{}"}}}},
                         {"temperature", 0}, {"max_tokens", 60}, {"stop_token_ids", {id}},
                         {"response_format", {{"type", "json_object"}}}});
    const Json& c = r["choices"][0];
    if (c["finish_reason"] != "stop") continue;
    const std::string text = c["message"]["content"].is_string() ? c["message"]["content"] : "";
    EXPECT_TRUE(Json::parse(text, nullptr, false).is_object()) << id << ": " << r.dump();
  }
  // A regex: the whole reply matches it (std::regex, ECMAScript, as the reference), streamed
  // or not; nothing but the end of generation once it can take no more.
  const std::string pattern = R"((yes|no), [0-9]{1,3}( units)?\.)";
  const std::regex reference(pattern);
  for (int seed = 0; seed < 4; ++seed) {
    const Json body = {{"messages", {{{"role", "user"}, {"content", "How many?"}}}},
                       {"temperature", 1.0}, {"seed", seed}, {"max_tokens", 30},
                       {"structured_outputs", {{"regex", pattern}}}};
    const Json r = Chat(body);
    const std::string answer = r["choices"][0]["message"]["content"];
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << answer;
    EXPECT_TRUE(std::regex_match(answer, reference)) << answer;
  }
  // An EBNF grammar: the reply derives from root (checked by the regex it spells out).
  const std::string grammar = "root ::= verb \" \" noun\nverb ::= \"get\" | \"put\"\n"
                              "noun ::= [a-z]{1,8} (\"/\" [0-9]{1,3})?";
  const std::regex spelled(R"((get|put) [a-z]{1,8}(/[0-9]{1,3})?)");
  for (int seed = 0; seed < 3; ++seed) {
    const Json r = Chat({{"messages", {{{"role", "user"}, {"content", "A command"}}}},
                         {"temperature", 1.0}, {"seed", seed}, {"max_tokens", 30},
                         {"structured_outputs", {{"grammar", grammar}}}});
    const std::string command = r["choices"][0]["message"]["content"];
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << command;
    EXPECT_TRUE(std::regex_match(command, spelled)) << command;
  }
  // A recursive grammar: nested parentheses, checked by counting.
  for (int seed = 0; seed < 3; ++seed) {
    const Json r = Chat({{"messages", {{{"role", "user"}, {"content", "Nest"}}}},
                         {"temperature", 1.0}, {"seed", seed}, {"max_tokens", 40},
                         {"structured_outputs", {{"grammar", "root ::= \"(\" root? \")\" | \"x\""}}}});
    const std::string text = r["choices"][0]["message"]["content"];
    int depth = 0, most = 0;
    bool ok = true;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '(') most = std::max(most, ++depth);
      else if (text[i] == ')') ok = ok && --depth >= 0;
      else ok = ok && text[i] == 'x' && i == static_cast<size_t>(most);
    }
    if (r["choices"][0]["finish_reason"] == "stop") {
      EXPECT_TRUE(ok && depth == 0 && !text.empty()) << text;
    } else {
      EXPECT_TRUE(ok) << text;  // cut by max_tokens: a prefix of such a text
    }
  }
  // What cannot be enforced is an error, not free text.
  int status = 0;
  Json err = Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                   {"structured_outputs", {{"grammar", "root ::= root \"+\" \"1\" | \"1\""}}}},
                  &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("rule 'root' is left-recursive"),
            std::string::npos);
  err = Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
              {"structured_outputs", {{"regex", "(a|b"}}}},
             &status);
  EXPECT_EQ(status, 400);
  EXPECT_NE(err["error"]["message"].get<std::string>().find("missing ), unterminated"),
            std::string::npos);
}

// tool_choice "required" over HTTP: the random model's reply is constrained to calls of the
// given tools with arguments of their schema (or cut by max_tokens, then left as content).
TEST_F(ServerE2E, RequiredToolChoiceMakesCalls) {
  const Json tools = Json::parse(R"([
      {"type": "function", "function": {"name": "get_temp", "parameters": {
          "type": "object", "properties": {"unit": {"enum": ["c", "f"]}}, "required": ["unit"]}}},
      {"type": "function", "function": {"name": "now"}}])");
  // A random model often spends max_tokens inside an object of free keys ("now" takes any
  // parameters): seeds go on until one reply completes its calls.
  int calls_seen = 0;
  for (int seed = 0; seed < 16 && (seed < 4 || calls_seen == 0); ++seed) {
    Json r = Chat({{"messages", {{{"role", "user"}, {"content", "What is the temperature?"}}}},
                   {"tools", tools}, {"tool_choice", "required"}, {"temperature", 1.0},
                   {"seed", seed}, {"max_tokens", 200}});
    const Json& c = r["choices"][0];
    if (c["finish_reason"] == "length") {
      EXPECT_EQ(c["message"]["content"].get<std::string>().find_first_not_of(" \t\n\r"),
                c["message"]["content"].get<std::string>().find('['));
      continue;
    }
    EXPECT_EQ(c["finish_reason"], "tool_calls") << r.dump();
    ASSERT_GE(c["message"]["tool_calls"].size(), 1u) << r.dump();
    for (const Json& call : c["message"]["tool_calls"]) {
      const std::string name = call["function"]["name"];
      const Json args = Json::parse(call["function"]["arguments"].get<std::string>());
      ASSERT_TRUE(name == "get_temp" || name == "now") << r.dump();
      ASSERT_TRUE(args.is_object()) << r.dump();
      if (name == "get_temp") {
        EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << r.dump();
      }
      ++calls_seen;
    }
  }
  EXPECT_GT(calls_seen, 0);
}

TEST_F(ServerE2E, BatchingInvariance) {
  std::vector<std::string> prompts;
  for (int i = 0; i < 16; ++i) prompts.push_back("request number " + std::to_string(i * 7));
  std::vector<std::string> alone;
  for (const std::string& p : prompts) alone.push_back(GreedyChat(p, 10));
  std::vector<std::string> together(prompts.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < prompts.size(); ++i) {
    threads.emplace_back([&, i] { together[i] = GreedyChat(prompts[i], 10); });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(together, alone);
}

// A burst of clients connecting at once is answered in full (cpp-httplib's listen backlog of 5
// used to drop some of them before any handler ran).
TEST_F(ServerE2E, BurstOfConcurrentStreamsAllAnswered) {
  constexpr int kClients = 96;
  std::vector<std::string> bodies(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      bodies[i] = e2e::PostStream(port(), "/v1/completions",
                                  Json{{"prompt", "burst " + std::to_string(i)},
                                       {"max_tokens", 4}, {"stream", true}}.dump())
                      .body;
    });
  }
  for (auto& t : threads) t.join();
  int answered = 0;
  for (const std::string& b : bodies) answered += b.find("data: [DONE]") != std::string::npos;
  EXPECT_EQ(answered, kClients);
}

// vLLM's reply ids: "chatcmpl-" / "cmpl-" and the X-Request-Id header, else the body's
// request_id; a client may reuse one, even for requests in flight together.
TEST_F(ServerE2E, ClientChosenRequestIds) {
  const std::string chat = R"({"messages":[{"role":"user","content":"ids"}],"max_tokens":3})";
  EXPECT_EQ(e2e::Post(port(), "/v1/chat/completions", chat, {{"X-Request-Id", "trace-7"}})
                .json()["id"],
            "chatcmpl-trace-7");
  const std::string completion = R"({"prompt":"ids","max_tokens":3,"request_id":"from-body"})";
  EXPECT_EQ(e2e::Post(port(), "/v1/completions", completion).json()["id"], "cmpl-from-body");
  EXPECT_EQ(e2e::Post(port(), "/v1/completions", completion, {{"X-Request-Id", "hdr"}})
                .json()["id"],
            "cmpl-hdr");
  const std::string streamed = e2e::PostStream(port(), "/v1/completions",
                                               R"({"prompt":"ids","max_tokens":2,"stream":true,)"
                                               R"("request_id":"s1"})")
                                   .body;
  EXPECT_NE(streamed.find(R"("id":"cmpl-s1")"), std::string::npos) << streamed;
  EXPECT_EQ(e2e::Post(port(), "/v1/completions", R"({"prompt":"ids","request_id":5})").status,
            400);
  // Without --scheduling-policy priority a priority other than 0 is vLLM's 400.
  const e2e::Reply prio = e2e::Post(port(), "/v1/chat/completions",
                                    R"({"messages":[{"role":"user","content":"p"}],"priority":1})");
  EXPECT_EQ(prio.status, 400);
  EXPECT_NE(prio.body.find("Got priority 1 but Priority scheduling is not enabled."),
            std::string::npos) << prio.body;
  const std::string empty =
      e2e::Post(port(), "/v1/completions", R"({"prompt":"ids","max_tokens":1,"request_id":""})")
          .json()["id"];
  EXPECT_EQ(empty.size(), std::string("cmpl-").size() + 32) << empty;  // a fresh random id
  // Eight requests in flight at once under one id: each answered in full.
  std::vector<e2e::Reply> replies(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < replies.size(); ++i) {
    threads.emplace_back([&, i] {
      replies[i] = e2e::Post(port(), "/v1/completions",
                             R"({"prompt":"same id )" + std::to_string(i) +
                                 R"(","max_tokens":16,"ignore_eos":true})",
                             {{"X-Request-Id", "shared"}});
    });
  }
  for (auto& t : threads) t.join();
  for (const e2e::Reply& r : replies) {
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["id"], "cmpl-shared");
    EXPECT_EQ(r.json()["usage"]["completion_tokens"], 16);
  }
}

// vLLM's usage: chat and completions report cached prompt tokens only under
// --enable-prompt-tokens-details; the Responses API always does.
TEST_F(ServerE2E, CachedPromptTokensInUsage) {
  std::string text;
  for (int i = 0; i < 6; ++i) text += "A prompt long enough to fill whole blocks, part " + std::to_string(i) + ". ";
  const std::string chat =
      Json{{"messages", {{{"role", "user"}, {"content", text}}}}, {"max_tokens", 1}}.dump();
  e2e::Post(port(), "/v1/chat/completions", chat);
  const Json again = e2e::Post(port(), "/v1/chat/completions", chat).json();
  EXPECT_TRUE(again["usage"]["prompt_tokens_details"].is_null()) << again.dump();
  const std::string responses = Json{{"input", text}, {"max_output_tokens", 1}}.dump();
  e2e::Post(port(), "/v1/responses", responses);
  const Json r = e2e::Post(port(), "/v1/responses", responses).json();
  ASSERT_TRUE(r.contains("usage")) << r.dump();
  EXPECT_GE(r["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>(), 16) << r.dump();
}

// include ["message.output_text.logprobs"]: the output text's tokens with their log-probs and
// top_logprobs alternatives, the chat completion's for the same greedy request, whole in the
// reply and spread over the stream's text deltas; without include, none.
TEST_F(ServerE2E, ResponsesOutputTextLogprobs) {
  const Json request = {{"input", "logprobs, please"}, {"max_output_tokens", 5},
                        {"temperature", 0},         {"ignore_eos", true},
                        {"include", {"message.output_text.logprobs"}}, {"top_logprobs", 2}};
  const auto message_part = [](const Json& response) {
    for (const Json& item : response["output"]) {
      if (item["type"] == "message") return item["content"][0];
    }
    ADD_FAILURE() << response.dump();
    return Json();
  };
  const Json r = e2e::Post(port(), "/v1/responses", request.dump()).json();
  const Json lp = message_part(r)["logprobs"];
  ASSERT_EQ(lp.size(), 5u) << r.dump();
  const Json chat = Chat({{"messages", {{{"role", "user"}, {"content", "logprobs, please"}}}},
                          {"max_tokens", 5}, {"temperature", 0}, {"ignore_eos", true},
                          {"logprobs", true}, {"top_logprobs", 2}});
  const Json& want = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(want.size(), 5u);
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_EQ(lp[i]["token"], want[i]["token"]);
    EXPECT_EQ(lp[i]["bytes"], want[i]["bytes"]);
    EXPECT_EQ(lp[i]["logprob"], want[i]["logprob"]);
    ASSERT_EQ(lp[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(lp[i]["top_logprobs"][0]["token"], lp[i]["token"]);  // greedy: the best
    EXPECT_EQ(lp[i]["top_logprobs"][1]["logprob"], want[i]["top_logprobs"][1]["logprob"]);
  }

  Json streamed_request = request;
  streamed_request["stream"] = true;
  const std::string sse = e2e::PostStream(port(), "/v1/responses", streamed_request.dump()).body;
  Json deltas = Json::array(), done;
  for (size_t pos = 0, end; (end = sse.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string event = sse.substr(pos, end - pos);
    const size_t data = event.find("data: ");
    ASSERT_NE(data, std::string::npos) << event;
    const Json e = Json::parse(event.substr(data + 6));
    if (e["type"] == "response.output_text.delta") {
      for (const Json& l : e["logprobs"]) deltas.push_back(l);
    }
    // max_output_tokens ends it: "incomplete", in vLLM's last event, response.completed.
    if (e["type"] == "response.completed") done = e["response"];
  }
  // The deltas' entries are vLLM's text delta Logprob: token, logprob, top_logprobs, no bytes.
  ASSERT_EQ(deltas.size(), lp.size());
  for (size_t i = 0; i < lp.size(); ++i) {
    EXPECT_FALSE(deltas[i].contains("bytes"));
    EXPECT_EQ(deltas[i]["token"], lp[i]["token"]);
    EXPECT_EQ(deltas[i]["logprob"], lp[i]["logprob"]);
    EXPECT_EQ(deltas[i]["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(message_part(done)["logprobs"], lp);
  EXPECT_EQ(r["top_logprobs"], 2);

  Json plain = request;
  plain.erase("include");
  const Json without = e2e::Post(port(), "/v1/responses", plain.dump()).json();
  EXPECT_TRUE(message_part(without)["logprobs"].is_null());  // vLLM: null when not asked
  EXPECT_TRUE(without["top_logprobs"].is_null());
}

// Responses are not stored: retrieving or cancelling one is vLLM's 404 for an unknown id.
TEST_F(ServerE2E, StoredResponsesAreNotFound) {
  for (const bool cancel : {false, true}) {
    httplib::Client cli("127.0.0.1", port());
    auto r = cancel ? cli.Post("/v1/responses/resp_123/cancel", "", "application/json")
                    : cli.Get("/v1/responses/resp_123");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404);
    const Json e = Json::parse(r->body)["error"];
    EXPECT_EQ(e["message"], "Response with id 'resp_123' not found.");
    EXPECT_EQ(e["type"], "invalid_request_error");
    EXPECT_EQ(e["param"], "response_id");
  }
}

// Browser clients: vLLM's CORS defaults (every origin) on the preflight and the request.
TEST_F(ServerE2E, CrossOriginRequestsAsVllm) {
  httplib::Client cli("127.0.0.1", port());
  auto pre = cli.Options("/v1/chat/completions",
                         {{"Origin", "http://ui.example"},
                          {"Access-Control-Request-Method", "POST"},
                          {"Access-Control-Request-Headers", "content-type,authorization"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
  // Once: a browser refuses an Access-Control-Allow-Origin with several values.
  EXPECT_EQ(pre->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  EXPECT_EQ(pre->get_header_value_count("Access-Control-Allow-Methods"), 1u);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "content-type,authorization");
  auto post = cli.Post("/v1/completions", {{"Origin", "http://ui.example"}},
                       R"({"prompt":"cors","max_tokens":1})", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 200);
  EXPECT_EQ(post->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(post->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  auto same_origin = cli.Get("/health");
  ASSERT_TRUE(same_origin);
  EXPECT_FALSE(same_origin->has_header("Access-Control-Allow-Origin"));
}

// vLLM's validate_json_request: the JSON routes refuse another or a missing Content-Type with
// a 400 before reading the body; a charset parameter is fine.
TEST_F(ServerE2E, JsonRoutesTakeOnlyJsonBodies) {
  httplib::Client cli("127.0.0.1", port());
  const std::string body = R"({"prompt":"media","max_tokens":1})";
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/tokenize"}) {
    auto form = cli.Post(path, body, "application/x-www-form-urlencoded");  // curl -d's type
    ASSERT_TRUE(form);
    EXPECT_EQ(form->status, 400) << path;
    const Json e = Json::parse(form->body)["error"];
    EXPECT_EQ(e["message"], "Unsupported Media Type: Only 'application/json' is allowed");
    EXPECT_EQ(e["type"], "Bad Request");
    EXPECT_EQ(e["code"], 400);
  }
  auto charset = cli.Post("/v1/completions", body, "Application/JSON; charset=utf-8");
  ASSERT_TRUE(charset);
  EXPECT_EQ(charset->status, 200) << charset->body;
}

TEST_F(ServerE2E, PrefixCacheHitsGiveSameOutput) {
  std::string shared;
  for (int i = 0; i < 4; ++i) shared += "The same long system prompt, sentence " + std::to_string(i) + ". ";
  const std::string before = Metrics();
  const double hits0 = e2e::Metric(before, "vllm:prefix_cache_hits_total");
  const double queries0 = e2e::Metric(before, "vllm:prefix_cache_queries_total");
  const std::string first = GreedyChat(shared, 8);
  const std::string second = GreedyChat(shared, 8);
  EXPECT_EQ(first, second);
  const std::string after = Metrics();
  EXPECT_GT(e2e::Metric(after, "vllm:prefix_cache_queries_total"), queries0);
  EXPECT_GE(e2e::Metric(after, "vllm:prefix_cache_hits_total"), hits0 + 16);
}

TEST_F(ServerE2E, DisconnectMidStreamFreesBlocks) {
  const std::string m0 = Metrics();
  const int aborted0 = AbortedRequests();
  const double counted0 = AbortCount(m0);
  const double prompts0 = e2e::Metric(m0, "vllm:request_params_n_count");
  const double finished0 = e2e::Metric(m0, "vllm:e2e_request_latency_seconds_count");
  int chunks = 0;
  // Long enough that the engine cannot finish before the hang-up however the threads are
  // scheduled: 64 choices × 200 tokens with top-20 log-probs, two rounds of --max-num-seqs 32
  // (2.3 s on the dev VM when not cancelled; 200 plain tokens of this tiny model take ~40 ms,
  // and every chunk then fit in the socket's buffers before the client left).
  e2e::PostStream(port(), "/v1/chat/completions",
                  Json{{"messages", {{{"role", "user"}, {"content", "go on"}}}},
                       {"max_tokens", 200}, {"n", 64}, {"logprobs", true}, {"top_logprobs", 20},
                       {"ignore_eos", true}, {"stream", true}}.dump(),
                  [&](const std::string& all) {
                    chunks = static_cast<int>(std::count(all.begin(), all.end(), '\n')) / 2;
                    return chunks < 4;  // hang up after a few events
                  });
  // The engine notices at the next write and releases the request's blocks.
  double in_engine = -1, usage = -1;
  int aborted = -1;
  for (int i = 0; i < 200; ++i) {
    const std::string m = Metrics();
    in_engine = e2e::Metric(m, "vllm:num_requests_running") +
                e2e::Metric(m, "vllm:num_requests_waiting");
    usage = e2e::Metric(m, "vllm:kv_cache_usage_perc");
    aborted = AbortedRequests();
    if (in_engine == 0 && usage == 0 && aborted > aborted0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(in_engine, 0);  // every choice cancelled, running or waiting
  EXPECT_EQ(usage, 0);
  EXPECT_EQ(aborted, aborted0 + 1);
  // An aborted request is no finished request, nor its prompt a parent-request observation
  // (vLLM records no statistics for aborts).
  const std::string m = Metrics();
  EXPECT_EQ(AbortCount(m), counted0);
  EXPECT_EQ(e2e::Metric(m, "vllm:e2e_request_latency_seconds_count"), finished0);
  EXPECT_EQ(e2e::Metric(m, "vllm:request_params_n_count"), prompts0);
}

// As long as in DisconnectMidStreamFreesBlocks: a handler thread starved for the ~40 ms that
// 4 × 200 plain tokens took missed the hang-up under a loaded ctest -j2.
Json LongChat() {
  return Json{{"messages", {{{"role", "user"}, {"content", "go on"}}}}, {"max_tokens", 200},
              {"n", 64}, {"logprobs", true}, {"top_logprobs", 20}, {"ignore_eos", true}};
}

TEST_F(ServerE2E, DisconnectBeforeANonStreamingReplyCancelsIt) {
  ExpectHangUpAbortsAll("/v1/chat/completions", LongChat().dump());
}

// A stream waiting in the queue writes nothing: it is cancelled as soon as its client leaves,
// not once admitted, when its first write would fail (after a prefill for nobody).
TEST_F(ServerE2E, DisconnectFromAQueuedStreamCancelsIt) {
  const int aborted0 = AbortedRequests();
  std::thread busy([&] {  // 64 choices: two rounds of --max-num-seqs 32
    EXPECT_EQ(e2e::Post(port(), "/v1/chat/completions", LongChat().dump()).status, 200);
  });
  double busy_running = 0;
  for (int i = 0; i < 2000 && busy_running < 32; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    busy_running = e2e::Metric(Metrics(), "vllm:num_requests_running");
  }
  ASSERT_EQ(busy_running, 32) << "the other request never filled the running set";
  PostAndHangUp(port(), "/v1/chat/completions",
                Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}}.dump());
  // Cancelled while the other request's choices were still in the engine, running or waiting
  // between its two rounds (once admitted, its first write would have failed and cancelled it
  // too, but only after the queue had emptied).
  int aborted = -1;
  double in_engine = -1;
  for (int i = 0; i < 2000 && aborted < aborted0 + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const std::string m = Metrics();
    aborted = AbortedRequests();
    in_engine = e2e::Metric(m, "vllm:num_requests_running") +
                e2e::Metric(m, "vllm:num_requests_waiting");
  }
  EXPECT_GT(in_engine, 0) << "the queued stream was cancelled only once the queue had emptied";
  busy.join();
  EXPECT_EQ(aborted, aborted0 + 1);
}

TEST_F(ServerE2E, MetricsExposition) {
  GreedyChat("metrics", 3);
  // The HTTP series count a request once its answer is written (as the instrumentator's
  // middleware does), which may be just after the client has read it: scrape until it shows.
  std::string m = Metrics();
  for (int i = 0; i < 200 && m.find("handler=\"/v1/chat/completions\"") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = Metrics();
  }
  for (const char* name :
       {"vllm:num_requests_running{", "vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{",
        "vllm:prefix_cache_queries_total{", "vllm:prefix_cache_hits_total{",
        "vllm:num_preemptions_total{", "vllm:prompt_tokens_total{", "vllm:generation_tokens_total{",
        "vllm:request_success_total{", "vllm:time_to_first_token_seconds_bucket{",
        "vllm:inter_token_latency_seconds_bucket{", "vllm:e2e_request_latency_seconds_count{",
        "vllm:request_queue_time_seconds_sum{", "vllm:request_prompt_tokens_bucket{",
        "vllm:request_generation_tokens_bucket{", "model_name=\"tiny\"",
        // The process collector's and the HTTP instrumentator's series around vLLM's.
        "process_resident_memory_bytes ",
        "http_requests_total{handler=\"/v1/chat/completions\",method=\"POST\",status=\"2xx\"}",
        "http_request_duration_seconds_bucket{handler=\"/v1/chat/completions\""}) {
    EXPECT_NE(m.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(m.find("handler=\"/metrics\""), std::string::npos);  // vLLM's excluded routes
  EXPECT_GE(e2e::Metric(m, "vllm:generation_tokens_total"), 3);
  EXPECT_GE(e2e::Metric(m, "vllm:e2e_request_latency_seconds_count"), 1);
  // The engine's phases, vLLM's: RUNNING = PREFILL (to the first token) + DECODE (to the last).
  const double prefill = e2e::Metric(m, "vllm:request_prefill_time_seconds_sum");
  const double decode = e2e::Metric(m, "vllm:request_decode_time_seconds_sum");
  const double inference = e2e::Metric(m, "vllm:request_inference_time_seconds_sum");
  EXPECT_GE(e2e::Metric(m, "vllm:request_prefill_time_seconds_count"), 1);
  EXPECT_EQ(e2e::Metric(m, "vllm:request_decode_time_seconds_count"),
            e2e::Metric(m, "vllm:request_inference_time_seconds_count"));
  EXPECT_GT(prefill, 0);
  EXPECT_GT(decode, 0);
  EXPECT_NEAR(inference, prefill + decode, 1e-6 * (1 + inference));
  // Every token the counters count, counted once in the step that produced it (vLLM's
  // iteration_tokens_total: prompt tokens at a request's first token).
  EXPECT_GE(e2e::Metric(m, "vllm:iteration_tokens_total_count"), 3);
  EXPECT_EQ(e2e::Metric(m, "vllm:iteration_tokens_total_sum"),
            e2e::Metric(m, "vllm:prompt_tokens_total") +
                e2e::Metric(m, "vllm:generation_tokens_total"));
  EXPECT_GE(e2e::Metric(m, "vllm:request_max_num_generation_tokens_count"), 1);
  EXPECT_GE(e2e::Metric(m, "vllm:request_params_n_count"), 1);
  EXPECT_EQ(e2e::Metric(m, "vllm:cache_config_info", "block_size=\"16\""), 1);

  // n = 3: each choice in the per-request histograms, the prompt once in n's and in the most
  // tokens one of its choices generated (vLLM's parent request).
  const auto delta = [&](const std::string& before, const std::string& after, const char* metric,
                         const std::string& label = "") {
    return e2e::Metric(after, metric, label) - e2e::Metric(before, metric, label);
  };
  const std::string before = Metrics();
  Chat({{"messages", {{{"role", "user"}, {"content", "three"}}}},
        {"n", 3},
        {"max_tokens", 4},
        {"ignore_eos", true}});
  const std::string after = Metrics();
  EXPECT_EQ(delta(before, after, "vllm:request_generation_tokens_count"), 3);
  EXPECT_EQ(delta(before, after, "vllm:request_params_n_count"), 1);
  EXPECT_EQ(delta(before, after, "vllm:request_params_n_bucket", "le=\"2.0\""), 0);
  EXPECT_EQ(delta(before, after, "vllm:request_params_n_bucket", "le=\"5.0\""), 1);
  EXPECT_EQ(delta(before, after, "vllm:request_max_num_generation_tokens_count"), 1);
  EXPECT_EQ(delta(before, after, "vllm:request_max_num_generation_tokens_bucket",
                  "le=\"2.0\""), 0);
  EXPECT_EQ(delta(before, after, "vllm:request_max_num_generation_tokens_bucket",
                  "le=\"5.0\""), 1);
}

}  // namespace
}  // namespace cpm
