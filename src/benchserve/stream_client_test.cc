// RunRequest against a local server that streams scripted events: where the output-token count
// comes from (a usage-only event as OpenAI and vLLM send it, usage on the last choice event as
// llama.cpp's server sends it, or none), and the chunk count and text it collects.
#include "benchserve/stream_client.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace cpm::benchserve {
namespace {

// Serves POST /v1/completions with `events` as server-sent events, then [DONE].
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<std::string> events) : events_(std::move(events)) {
    svr_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      std::string body;
      for (const std::string& e : events_) body += "data: " + e + "\n\n";
      body += "data: [DONE]\n\n";
      res.set_content(body, "text/event-stream");
    });
    port_ = svr_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    while (!svr_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~ScriptedServer() {
    svr_.stop();
    thread_.join();
  }
  Server server() const { return Server("http://127.0.0.1:" + std::to_string(port_), "", ""); }

 private:
  std::vector<std::string> events_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread thread_;
};

RequestOutput Stream(std::vector<std::string> events) {
  ScriptedServer s(std::move(events));
  return RunRequest(s.server(), "/v1/completions", Api::kCompletions, R"({"prompt":[1]})", 1);
}

const char* kChoiceA = R"({"choices":[{"text":"a","index":0,"finish_reason":null}]})";
const char* kChoiceB = R"({"choices":[{"text":"b","index":0,"finish_reason":null}]})";

TEST(BenchServeStream, UsageInAnEventOfItsOwn) {
  const RequestOutput o = Stream({kChoiceA, kChoiceB,
                               R"({"choices":[],"usage":{"completion_tokens":7}})"});
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.output_tokens, 7);
  EXPECT_EQ(o.chunks, 2);
  EXPECT_EQ(o.generated_text, "ab");
  EXPECT_EQ(o.itl.size(), 1u);
}

TEST(BenchServeStream, UsageOnTheLastChoiceEventAsLlamaCppSendsIt) {
  const RequestOutput o =
      Stream({kChoiceA, kChoiceB,
           R"({"choices":[{"text":"","index":0,"finish_reason":"length"}],)"
           R"("usage":{"completion_tokens":3,"prompt_tokens":1}})"});
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.output_tokens, 3);
  EXPECT_EQ(o.chunks, 3);  // the last event is a (empty) chunk as well
  EXPECT_EQ(o.generated_text, "ab");
}

TEST(BenchServeStream, NoUsageLeavesTheCountToTheFallback) {
  const RequestOutput o = Stream({kChoiceA, kChoiceB});
  ASSERT_TRUE(o.success) << o.error;
  EXPECT_EQ(o.output_tokens, 0);
  EXPECT_EQ(o.chunks, 2);
}

}  // namespace
}  // namespace cpm::benchserve
