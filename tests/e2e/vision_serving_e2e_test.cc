// MiniCPM-V-4.6 with images and videos, end to end: `cpmserve serve` on a tiny checkpoint (real
// tensor names, real chat template and preprocessor config) answers OpenAI image_url requests
// (data: URLs, file:// under --allowed-local-media-path), and its first token's log-probs equal
// those of `cpmserve generate --image` on the same rendered prompt (checked against the numpy
// reference in tests/model's vision_generate scenario); video_url requests take their sampled
// frames (--media-io-kwargs); bad images and videos are 400s.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "eval/server_figures.h"
#include "multimodal/base64.h"
#include "multimodal/test_images.h"
#include "multimodal/test_videos.h"

namespace cpm {
namespace {

using e2e::Json;
namespace fs = std::filesystem;

class VisionServingE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string((fs::temp_directory_path() / ("cpm_e2e_vision_" + std::to_string(getpid()))).string());
    const std::string cmd = std::string(CPM_CPMSERVE_BIN) + " make-tiny --arch minicpmv4_6 " + *dir_ +
                            "/model --dtype float32 > /dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    fs::create_directories(*dir_ + "/media");
    jpeg_ = new std::string(test_images::EncodeJpeg(test_images::NoiseImage(900, 500, 7), 90));
    std::ofstream(*dir_ + "/media/a.jpg", std::ios::binary) << *jpeg_;
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->Start(CPM_CPMSERVE_BIN, *dir_ + "/model",
                               {"--host", "127.0.0.1", "--port", "0", "--served-model-name", "v",
                                "--kv-cache-memory-bytes", "16M", "--max-num-seqs", "4", "--threads",
                                "2", "--max-model-len", "2048", "--allowed-local-media-path",
                                *dir_ + "/media", "--limit-mm-per-prompt", R"({"image": 2, "video": 1})",
                                "--mm-processor-kwargs", R"({"max_slice_nums": 4})",
                                "--media-io-kwargs", R"({"video": {"num_frames": 4}})",
                                "--trust-request-chat-template"}));
    ASSERT_TRUE(server_->WaitReady()) << server_->Log();
  }
  static void TearDownTestSuite() {
    e2e::StopSuiteServer(server_);
    fs::remove_all(*dir_);
    delete dir_;
    delete jpeg_;
  }

  static Json Body(const Json& content) {
    return {{"model", "v"},
            {"messages", {{{"role", "user"}, {"content", content}}}},
            {"temperature", 0},
            {"max_tokens", 4},
            {"ignore_eos", true},
            {"logprobs", true},
            {"top_logprobs", 3}};
  }
  static Json ImagePart(const std::string& url) { return {{"type", "image_url"}, {"image_url", {{"url", url}}}}; }
  static Json TextPart(const std::string& text) { return {{"type", "text"}, {"text", text}}; }
  static Json VideoPart(const std::string& url) { return {{"type", "video_url"}, {"video_url", {{"url", url}}}}; }
  // A video of `frames` solid-colour 900×600 frames (each a 392×560 thumbnail of 70 pads and two
  // 504×392 slices of 63).
  static std::string VideoUrl(int frames, int first_colour = 0) {
    const std::string mp4 = test_videos::EncodeTestVideo(frames + first_colour, 900, 600, "mpeg4", "mp4");
    EXPECT_FALSE(mp4.empty());
    return "data:video/mp4;base64," + EncodeBase64(mp4);
  }
  static int64_t TokenCount(const Json& content) {
    Json tok = {{"model", "v"}, {"messages", {{{"role", "user"}, {"content", content}}}}};
    auto r = e2e::Post(server_->port(), "/tokenize", tok.dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json()["count"].get<int64_t>();
  }
  static std::string DataUrl() { return "data:image/jpeg;base64," + EncodeBase64(*jpeg_); }

  static std::string* dir_;
  static std::string* jpeg_;
  static ServerProcess* server_;
};

std::string* VisionServingE2E::dir_ = nullptr;
std::string* VisionServingE2E::jpeg_ = nullptr;
ServerProcess* VisionServingE2E::server_ = nullptr;

TEST_F(VisionServingE2E, ImageAnswerEqualsTheOfflineRunOfTheSamePrompt) {
  auto r = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({ImagePart(DataUrl()), TextPart("What is this?")}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  const Json& lp = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 4u) << r.body;

  // The same prompt as the template renders it, through `cpmserve generate --image`.
  const std::string dump = *dir_ + "/offline.json";
  const std::string cmd = std::string(CPM_CPMSERVE_BIN) + " generate --model " + *dir_ +
                          "/model --threads 2 --max-tokens 4 --ignore-eos --logprobs 3 --dump-logprobs " +
                          dump + " --image " + *dir_ + "/media/a.jpg --prompt $'<|im_start|>user\\n" +
                          "<|image_pad|>\\nWhat is this?<|im_end|>\\n<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n'" +
                          " > /dev/null 2>&1";
  ASSERT_EQ(std::system(("bash -c \"" + cmd + "\"").c_str()), 0) << cmd;
  std::ifstream in(dump);
  const Json off = Json::parse(in);
  const Json& seq = off["sequences"][0];
  EXPECT_EQ(j["usage"]["prompt_tokens"].get<size_t>(), seq["prompt_ids"].size());
  // Same greedy tokens (as text pieces) and the same first-token log-prob.
  const Json& row = seq["logprobs"][0];
  const int32_t first = seq["generated_ids"][0];
  EXPECT_NEAR(lp[0]["logprob"].get<double>(), row[first].get<double>(), 1e-4) << r.body;
}

// The start-up warm-up runs the vision encoder on one slice (vLLM's multimodal profiling run)
// before the language model's steps, unless --skip-mm-profiling; images are served either way.
TEST_F(VisionServingE2E, SkipMmProfilingLeavesOutTheEncodersWarmUp) {
  const std::string encoder_line = "Warm-up: the vision encoder on one ";
  const std::string steps_line = "-token prompt step and a decode step";
  const std::string log = server_->Log();
  ASSERT_NE(log.find(encoder_line), std::string::npos) << log;
  EXPECT_LT(log.find(encoder_line), log.find(steps_line)) << log;
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, *dir_ + "/model",
                      {"--host", "127.0.0.1", "--port", "0", "--served-model-name", "v",
                       "--kv-cache-memory-bytes", "16M", "--max-num-seqs", "2", "--threads", "2",
                       "--max-model-len", "2048", "--skip-mm-profiling"}));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_EQ(p.Log().find(encoder_line), std::string::npos) << p.Log();
  EXPECT_NE(p.Log().find(steps_line), std::string::npos) << p.Log();
  auto r = e2e::Post(p.port(), "/v1/chat/completions",
                     Body({ImagePart(DataUrl()), TextPart("What is this?")}).dump());
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(VisionServingE2E, FileUrlsAndDataUrlsGiveTheSameAnswer) {
  auto a = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({ImagePart(DataUrl()), TextPart("Describe.")}).dump());
  auto b = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({ImagePart("file://" + *dir_ + "/media/a.jpg"), TextPart("Describe.")}).dump());
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(a.json()["choices"][0]["logprobs"], b.json()["choices"][0]["logprobs"]);
  EXPECT_EQ(a.json()["usage"]["prompt_tokens"], b.json()["usage"]["prompt_tokens"]);
  // /tokenize counts an image as its placeholder tokens, as the chat request does.
  Json tok = {{"model", "v"}, {"messages", Body({ImagePart(DataUrl()), TextPart("Describe.")})["messages"]}};
  auto t = e2e::Post(server_->port(), "/tokenize", tok.dump());
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.json()["count"], a.json()["usage"]["prompt_tokens"]) << t.body;
  // A different image changes the answer's distribution.
  const std::string other = test_images::EncodeJpeg(test_images::NoiseImage(900, 500, 8), 90);
  auto c = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({ImagePart("data:image/jpeg;base64," + EncodeBase64(other)), TextPart("Describe.")}).dump());
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_NE(a.json()["choices"][0]["logprobs"], c.json()["choices"][0]["logprobs"]);
}

TEST_F(VisionServingE2E, MmProcessorKwargsCapTheSlices) {
  // A 1344×1344 image is 3×3 slices under the file's max_slice_nums 9; the server runs with
  // --mm-processor-kwargs '{"max_slice_nums": 4}', so it is 2×2: beyond a small (unsliced)
  // image's count, 4 slices of 64 pads, 4 <slice></slice> pairs and one row break.
  auto request = [&](int side, const Json& kwargs) {
    const std::string jpg = test_images::EncodeJpeg(test_images::NoiseImage(side, side, 1), 80);
    Json tok = {{"model", "v"},
                {"messages", {{{"role", "user"},
                               {"content", {ImagePart("data:image/jpeg;base64," + EncodeBase64(jpg)),
                                            TextPart("x")}}}}}};
    if (!kwargs.empty()) tok["mm_processor_kwargs"] = kwargs;
    return tok;
  };
  auto count = [&](int side, const Json& kwargs = Json::object()) {
    auto r = e2e::Post(server_->port(), "/tokenize", request(side, kwargs).dump());
    EXPECT_EQ(r.status, 200) << r.body;
    return r.json()["count"].get<int64_t>();
  };
  EXPECT_EQ(count(1344) - count(100), 4 * 64 + 4 * 2 + 1);
  EXPECT_NE(server_->Log().find("up to 4 slices"), std::string::npos) << server_->Log();

  // A request's mm_processor_kwargs over the server's, as vLLM merges them: 3×3 slices again.
  const Json nine = {{"max_slice_nums", 9}};
  EXPECT_EQ(count(1344, nine) - count(100), 9 * 64 + 9 * 2 + 2);
  Json chat = request(1344, nine);
  chat["max_tokens"] = 1;
  auto reply = e2e::Post(server_->port(), "/v1/chat/completions", chat.dump());
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["usage"]["prompt_tokens"], count(1344, nine));
  // vLLM's downsample_mode per request: 4x skips the ViT merger, four times the pads of a
  // slice (a 448² image: 256 instead of 64), and the request is answered.
  const Json four = {{"downsample_mode", "4x"}};
  EXPECT_EQ(count(448, four) - count(448), 256 - 64);
  Json chat4 = request(448, four);
  chat4["max_tokens"] = 1;
  auto reply4 = e2e::Post(server_->port(), "/v1/chat/completions", chat4.dump());
  ASSERT_EQ(reply4.status, 200) << reply4.body;
  EXPECT_EQ(reply4.json()["usage"]["prompt_tokens"], count(448, four));
  // Other processors' keys are ignored (with a warning), as vLLM drops them: the same count.
  auto other = e2e::Post(server_->port(), "/tokenize",
                         request(100, {{"max_pixels", 100000}, {"fps", 2}}).dump());
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(other.json()["count"], count(100));
  EXPECT_NE(server_->Log().find("key \"max_pixels\" ignored"), std::string::npos);
  // A known key's bad value is still a 400.
  auto bad = e2e::Post(server_->port(), "/tokenize", request(100, {{"max_slice_nums", "x"}}).dump());
  EXPECT_EQ(bad.status, 400) << bad.body;
}

// vLLM checks max_tokens against an image prompt's text (each image one <|image_pad|>) before
// the processor expands it, and stops generation where the expanded prompt leaves the context
// (finish_reason "length"): a max_tokens that only the expansion leaves no room for is no 400.
TEST_F(VisionServingE2E, MaxTokensIsCheckedAgainstTheUnexpandedPrompt) {
  const auto content = [&](int words) {
    std::string text;
    for (int i = 0; i < words; ++i) text += "w ";
    return Json{ImagePart(DataUrl()), TextPart(text)};
  };
  const int64_t base = TokenCount(content(0));
  const int64_t per_100 = TokenCount(content(100)) - base;
  ASSERT_GT(per_100, 0);
  // Text enough that the expanded prompt leaves ~40 tokens of the 2048.
  const int words = static_cast<int>((2048 - 40 - base) * 100 / per_100);
  const int64_t prompt = TokenCount(content(words));
  ASSERT_LT(prompt, 2048);
  ASSERT_GT(prompt, 2048 - 80);
  Json body = Body(content(words));
  body.erase("logprobs");
  body.erase("top_logprobs");
  body["max_tokens"] = 2048 - prompt + 10;  // within the text's room, past the expanded one
  auto r = e2e::Post(server_->port(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["usage"]["prompt_tokens"], prompt);
  EXPECT_EQ(r.json()["usage"]["completion_tokens"], 2048 - prompt);
  EXPECT_EQ(r.json()["choices"][0]["finish_reason"], "length");
}

TEST_F(VisionServingE2E, MmProcessorKwargsCannotMakeAnImageTooLarge) {
  auto request = [&](const RgbImage& image, const Json& kwargs) {
    Json body = Body({ImagePart("data:image/jpeg;base64," + EncodeBase64(test_images::EncodeJpeg(image, 80))),
                      TextPart("x")});
    body["mm_processor_kwargs"] = kwargs;
    return body;
  };
  auto expect_400 = [&](const Json& body, const std::string& message) {
    auto r = e2e::Post(server_->port(), "/v1/chat/completions", body.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    const Json j = r.json();
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_EQ(j["error"]["type"], "BadRequestError") << r.body;
    EXPECT_EQ(j["error"]["code"], 400) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(message), std::string::npos) << r.body;
  };
  // The tiny tower's position grid (112) is below the server's scale_resolution (448): that is
  // the most a request may ask for. 40000 would upscale a 64×64 image to 19 GB of floats.
  const RgbImage small = test_images::GradientImage(64, 64);
  expect_400(request(small, {{"scale_resolution", 40000}}),
             "mm_processor_kwargs: scale_resolution must be at most 448, got 40000");
  expect_400(request(small, {{"scale_resolution", 2240}}), "scale_resolution must be at most 448");
  // max_slice_nums 36 cuts a 2688² image into 6×6 slices: with its thumbnail 37 × 64 = 2368
  // placeholders, over --max-model-len 2048 before the text is counted: refused from its slice
  // plan, with vLLM's context-length text, before the slices are resized.
  const RgbImage large = test_images::GradientImage(2688, 2688);
  expect_400(request(large, {{"max_slice_nums", 36}}),
             "This model's maximum context length is 2048 tokens. However, your request has at least 2368 "
             "input tokens");
  // /tokenize only counts (as vLLM's): the same prompt is 2368 placeholders and more.
  Json tok = request(large, {{"max_slice_nums", 36}});
  for (const char* k : {"temperature", "max_tokens", "ignore_eos", "logprobs", "top_logprobs"}) tok.erase(k);
  auto counted = e2e::Post(server_->port(), "/tokenize", tok.dump());
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_GT(counted.json()["count"].get<int64_t>(), 2368);
  // Overrides within the bounds still work, and the server still serves.
  auto ok = e2e::Post(server_->port(), "/v1/chat/completions",
                      request(small, {{"scale_resolution", 224}, {"max_slice_nums", 2}}).dump());
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(e2e::Post(server_->port(), "/v1/chat/completions", Body("hi").dump()).status, 200);
}

TEST_F(VisionServingE2E, TwoImagesStreamedAndSeveralChoices) {
  Json body = Body({ImagePart(DataUrl()), ImagePart(DataUrl()), TextPart("Compare.")});
  body["n"] = 2;
  body["temperature"] = 1;  // greedy n > 1 is refused (vLLM's); top_k 1 draws the argmax
  body["top_k"] = 1;
  auto r = e2e::Post(server_->port(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  ASSERT_EQ(j["choices"].size(), 2u);
  // The argmax over one shared encoding: the same tokens (batched rows may differ in the last
  // bits).
  const Json& a = j["choices"][0]["logprobs"]["content"];
  const Json& b = j["choices"][1]["logprobs"]["content"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["token"], b[i]["token"]);
    EXPECT_NEAR(a[i]["logprob"].get<double>(), b[i]["logprob"].get<double>(), 1e-4);
  }
  body["n"] = 1;
  body["stream"] = true;
  auto s = e2e::PostStream(server_->port(), "/v1/chat/completions", body.dump());
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_NE(s.body.find("data: [DONE]"), std::string::npos) << s.body;
}

// Parts without a "type", as vLLM takes them: named by the URL field they carry (the URL
// as a string or as {"url": ...}); a part with neither is vLLM's 400.
TEST_F(VisionServingE2E, PartsWithoutATypeAreNamedByTheirUrlField) {
  const int64_t typed = TokenCount({ImagePart(DataUrl()), TextPart("x")});
  EXPECT_EQ(TokenCount({{{"image_url", {{"url", DataUrl()}}}}, TextPart("x")}), typed);
  EXPECT_EQ(TokenCount({{{"image_url", DataUrl()}}, TextPart("x")}), typed);
  // The Responses API's input_image part, which vLLM's chat parser takes too.
  EXPECT_EQ(TokenCount({{{"type", "input_image"}, {"image_url", DataUrl()}}, TextPart("x")}), typed);
  Json tok = {{"model", "v"},
              {"messages", {{{"role", "user"}, {"content", {{{"text", "no type"}}}}}}}};
  auto r = e2e::Post(server_->port(), "/tokenize", tok.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("Missing 'type' field in multimodal part."), std::string::npos) << r.body;
  // A part typed image_url or video_url wants {"url": ...} (vLLM's TypedDict check), unless it
  // carries a uuid.
  for (const char* kind : {"image_url", "video_url"}) {
    tok["messages"][0]["content"] = {{{"type", kind}, {kind, DataUrl()}}, TextPart("x")};
    r = e2e::Post(server_->port(), "/tokenize", tok.dump());
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("Input should be a valid dictionary"), std::string::npos) << r.body;
    EXPECT_EQ(r.json()["error"]["type"], "BadRequestError") << r.body;
  }
  EXPECT_EQ(TokenCount({{{"type", "image_url"}, {"image_url", DataUrl()}, {"uuid", "a"}},
                        TextPart("x")}),
            typed);
  // A uuid alone would be served from vLLM's processor cache; this server keeps none.
  tok["messages"][0]["content"] = {{{"type", "image_url"}, {"image_url", nullptr}, {"uuid", "a"}}};
  r = e2e::Post(server_->port(), "/tokenize", tok.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("does not keep"), std::string::npos) << r.body;
}

// vLLM's other video data URLs: frames as JPEGs (data:video/jpeg;base64,<f1>,<f2>,...; the first
// num_frames kept, none sampled), and base64 wrapped in lines (Python's b64decode skips them).
TEST_F(VisionServingE2E, JpegFramesAndWrappedBase64Videos) {
  const auto frames = [&](int n) {
    std::string url = "data:video/jpeg;base64,";
    for (int i = 0; i < n; ++i) url += (i ? "," : "") + EncodeBase64(*jpeg_);
    return TokenCount({VideoPart(url), TextPart("x")});
  };
  const int64_t one = frames(1), two = frames(2);
  EXPECT_GT(two, one);
  EXPECT_EQ(frames(4) - frames(3), two - one);
  EXPECT_EQ(frames(6), frames(4));  // over num_frames 4: the first 4, as vLLM's load_base64
  std::string wrapped = EncodeBase64(test_videos::EncodeTestVideo(2, 900, 600, "mpeg4", "mp4"));
  for (size_t at = 76; at < wrapped.size(); at += 77) wrapped.insert(at, "\n");
  EXPECT_EQ(TokenCount({VideoPart("data:video/mp4;base64," + wrapped), TextPart("x")}),
            TokenCount({VideoPart(VideoUrl(2)), TextPart("x")}));
}

// A template in vLLM's "string" content format (ChatML: no loop over a message's content)
// takes a message with an image as its text with the image's pad line first
// (_get_full_multimodal_text_prompt), empty texts dropped; the pad then expands as the model's
// template's does.
TEST_F(VisionServingE2E, StringFormatTemplatesTakeThePadBeforeTheText) {
  const std::string chatml =
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
      "{% endfor %}<|im_start|>assistant\n";
  const Json content = {TextPart(""), ImagePart(DataUrl()), TextPart("What?")};
  Json tok = {{"model", "v"},
              {"messages", {{{"role", "user"}, {"content", content}}}},
              {"chat_template", chatml}};
  auto r = e2e::Post(server_->port(), "/tokenize", tok.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json ids = r.json()["tokens"];
  auto d = e2e::Post(server_->port(), "/detokenize", Json{{"model", "v"}, {"tokens", ids}}.dump());
  const std::string prompt = d.json()["prompt"];
  EXPECT_EQ(prompt.rfind("<|im_start|>user\n", 0), 0u) << prompt;
  EXPECT_NE(prompt.find("</slice>\nWhat?<|im_end|>\n<|im_start|>assistant"), std::string::npos)
      << Json(prompt.substr(prompt.size() - 40)).dump();
  // The image's rows are those the model's own template makes of it.
  const int64_t own = TokenCount({ImagePart(DataUrl()), TextPart("What?")});
  const int64_t own_text = TokenCount(Json::array({TextPart("What?")}));
  tok["messages"][0]["content"] = Json::array({TextPart("What?")});
  const int64_t plain = e2e::Post(server_->port(), "/tokenize", tok.dump()).json()["count"];
  EXPECT_EQ(static_cast<int64_t>(ids.size()) - plain, own - own_text);
  // A pad the text already holds counts; more pads than images is vLLM's 400.
  tok["messages"][0]["content"] = {ImagePart(DataUrl()), TextPart("<|image_pad|><|image_pad|>")};
  r = e2e::Post(server_->port(), "/tokenize", tok.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("Found more '<|image_pad|>' placeholders"), std::string::npos) << r.body;
}

// vLLM's VLLM_IMAGE_FETCH_TIMEOUT / VLLM_VIDEO_FETCH_TIMEOUT: read at start-up, a bad value a
// start-up error naming the variable.
TEST_F(VisionServingE2E, FetchTimeoutsFromTheEnvironment) {
  for (const char* env : {"VLLM_IMAGE_FETCH_TIMEOUT=soon", "VLLM_VIDEO_FETCH_TIMEOUT=0"}) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, *dir_ + "/model",
                        {"--host", "127.0.0.1", "--port", "0", "--threads", "2",
                         "--kv-cache-memory-bytes", "16M"},
                        {env}));
    EXPECT_NE(p.Wait(60), 0) << p.Log();
    const std::string name = std::string(env).substr(0, std::string(env).find('='));
    EXPECT_NE(p.Log().find(name + ": '"), std::string::npos) << p.Log();
  }
}

TEST_F(VisionServingE2E, BadImagesAreClientErrors) {
  struct Case {
    Json content;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{ImagePart("data:image/png;base64,@@@"), TextPart("x")}, "base64"},
      {{ImagePart("data:image/png;base64," + EncodeBase64("not an image")), TextPart("x")}, "unrecognised format"},
      {{ImagePart("ftp://example.com/a.png")}, "ftp"},
      {{ImagePart("file:///etc/passwd")}, "allowed-local-media-path"},
      {{ImagePart("http://127.0.0.1:1/a.png")}, "127.0.0.1:1"},
      {{{{"type", "image_url"}, {"image_url", {{"detail", "auto"}}}}}, "image_url"},
      {{{{"type", "input_audio"}, {"input_audio", {{"data", "x"}}}}}, "input_audio"},
  };
  for (const Case& c : cases) {
    auto r = e2e::Post(server_->port(), "/v1/chat/completions", Body(c.content).dump());
    EXPECT_EQ(r.status, 400) << c.content.dump() << " -> " << r.body;
    const Json j = r.json();
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  // More images than --limit-mm-per-prompt allows.
  auto many = e2e::Post(server_->port(), "/v1/chat/completions",
                        Body({ImagePart(DataUrl()), ImagePart(DataUrl()), ImagePart(DataUrl())}).dump());
  EXPECT_EQ(many.status, 400) << many.body;
  EXPECT_NE(many.body.find("At most 2 image(s) may be provided in one prompt."), std::string::npos) << many.body;
  // A system message cannot hold images (the template raises): also a 400.
  Json body = Body("hi");
  body["messages"] = {{{"role", "system"}, {"content", {ImagePart(DataUrl())}}},
                      {{"role", "user"}, {"content", "hi"}}};
  auto r = e2e::Post(server_->port(), "/v1/chat/completions", body.dump());
  EXPECT_EQ(r.status, 400) << r.body;
  // The server still serves after every refusal.
  EXPECT_EQ(e2e::Post(server_->port(), "/v1/chat/completions", Body("hi").dump()).status, 200);
}

TEST_F(VisionServingE2E, VideosTakeTheirSampledFrames) {
  // --media-io-kwargs num_frames 4: a 2- or 3-frame video keeps every frame, a 7-frame one 4 of
  // them. Each 900×600 frame is sliced as an image of its size (vLLM's MiniCPM-V-4.6): <image>,
  // 70 pads (its 392×560 thumbnail), </image>, then one row of two <slice>s of 63 pads (504×392).
  constexpr int64_t kFrame = (1 + 70 + 1) + 2 * (1 + 63 + 1);
  const int64_t two = TokenCount({VideoPart(VideoUrl(2)), TextPart("x")});
  EXPECT_EQ(TokenCount({VideoPart(VideoUrl(3)), TextPart("x")}) - two, kFrame);
  EXPECT_EQ(TokenCount({VideoPart(VideoUrl(7)), TextPart("x")}) - two, 2 * kFrame);
  // One <image_id> before the whole video.
  Json tok = {{"model", "v"},
              {"messages", {{{"role", "user"}, {"content", {VideoPart(VideoUrl(2))}}}}}};
  const Json ids = e2e::Post(server_->port(), "/tokenize", tok.dump()).json()["tokens"];
  const std::string text =
      e2e::Post(server_->port(), "/detokenize", Json{{"tokens", ids}}.dump()).json()["prompt"];
  EXPECT_NE(text.find("<image_id>0</image_id><image><|video_pad|>"), std::string::npos) << text;
  EXPECT_EQ(text.find("<image_id>1</image_id>"), std::string::npos) << text;
  // A request's media_io_kwargs over the server's: 6 of the 7 frames; a bad one is a 400.
  Json six = {{"model", "v"},
              {"messages", {{{"role", "user"}, {"content", {VideoPart(VideoUrl(7)), TextPart("x")}}}}},
              {"media_io_kwargs", {{"video", {{"num_frames", 6}}}}}};
  auto r = e2e::Post(server_->port(), "/tokenize", six.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json()["count"].get<int64_t>() - two, 4 * kFrame);
  six["media_io_kwargs"] = {{"video", {{"fps", 2}}}};
  auto bad = e2e::Post(server_->port(), "/tokenize", six.dump());
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("media_io_kwargs: video option 'fps' is not supported"), std::string::npos)
      << bad.body;
  // A chat request over a video, its prompt as /tokenize counts it; an image beside it.
  const std::string video = VideoUrl(7);
  auto a = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({VideoPart(video), TextPart("What happens?")}).dump());
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json()["usage"]["prompt_tokens"].get<int64_t>(),
            TokenCount({VideoPart(video), TextPart("What happens?")}));
  auto b = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({VideoPart(video), ImagePart(DataUrl()), TextPart("What happens?")}).dump());
  ASSERT_EQ(b.status, 200) << b.body;
  // The frames reach the model: other frames (colours), another answer distribution; the same
  // video again, the same one.
  auto c = e2e::Post(server_->port(), "/v1/chat/completions",
                     Body({VideoPart(VideoUrl(7, 1)), TextPart("What happens?")}).dump());
  auto again = e2e::Post(server_->port(), "/v1/chat/completions",
                         Body({VideoPart(video), TextPart("What happens?")}).dump());
  ASSERT_EQ(c.status, 200) << c.body;
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_NE(a.json()["choices"][0]["logprobs"], c.json()["choices"][0]["logprobs"]);
  EXPECT_EQ(a.json()["choices"][0]["logprobs"], again.json()["choices"][0]["logprobs"]);
}

TEST_F(VisionServingE2E, ResponsesApiTakesInputImages) {
  // /v1/responses with an input_image part: the same greedy answer as the chat request.
  auto chat = e2e::Post(server_->port(), "/v1/chat/completions",
                        Body({ImagePart(DataUrl()), TextPart("What is this?")}).dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  const Json request = {
      {"model", "v"}, {"temperature", 0}, {"max_output_tokens", 4}, {"ignore_eos", true},
      {"input", {{{"role", "user"},
                  {"content", {{{"type", "input_image"}, {"image_url", DataUrl()}},
                               {{"type", "input_text"}, {"text", "What is this?"}}}}}}}};
  auto r = e2e::Post(server_->port(), "/v1/responses", request.dump());
  ASSERT_EQ(r.status, 200) << r.body;
  const Json j = r.json();
  EXPECT_EQ(j["output"].back()["content"][0]["text"], chat.json()["choices"][0]["message"]["content"]) << r.body;
  EXPECT_EQ(j["usage"]["input_tokens"], chat.json()["usage"]["prompt_tokens"]);
}

TEST_F(VisionServingE2E, BadVideosAreClientErrors) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json::array({VideoPart("data:video/mp4;base64," + EncodeBase64("not a video")), TextPart("x")}),
       "video: the data is not a video"},
      {Json::array({VideoPart("file:///etc/passwd")}), "allowed-local-media-path"},
      {Json::array({Json{{"type", "video_url"}, {"video_url", {{"detail", "auto"}}}}}), "video_url"},
      {Json::array({VideoPart(VideoUrl(2)), VideoPart(VideoUrl(2))}),
       "At most 1 video(s) may be provided in one prompt."},
  };
  for (const auto& [content, message] : cases) {
    auto r = e2e::Post(server_->port(), "/v1/chat/completions", Body(content).dump());
    EXPECT_EQ(r.status, 400) << content.dump().substr(0, 200) << " -> " << r.body;
    EXPECT_NE(r.body.find(message), std::string::npos) << r.body;
  }
  EXPECT_EQ(e2e::Post(server_->port(), "/v1/chat/completions", Body("hi").dump()).status, 200);
}

// The server's vllm:prompt_tokens_total counter.
double PromptTokensTotal(int port) {
  const auto m = ParsePrometheus(e2e::Get(port, "/metrics").body);
  const auto it = m.find("vllm:prompt_tokens_total");
  return it == m.end() ? -1 : it->second;
}

// An image sent again (each turn of a chat resends it) comes from the encoder cache: the same
// answer, and vLLM's mm_cache counters count one query per image and the hit.
TEST_F(VisionServingE2E, AnImageSentAgainComesFromTheEncoderCache) {
  const auto counters = [&] {
    const auto m = ParsePrometheus(e2e::Get(server_->port(), "/metrics").body);
    return std::pair{m.at("vllm:mm_cache_queries_total"), m.at("vllm:mm_cache_hits_total")};
  };
  const std::string image = "data:image/jpeg;base64," +
      EncodeBase64(test_images::EncodeJpeg(test_images::NoiseImage(700, 300, 11), 90));
  const auto [queries, hits] = counters();
  auto first = e2e::Post(server_->port(), "/v1/chat/completions",
                         Body({ImagePart(image), TextPart("Once.")}).dump());
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_EQ(counters(), std::pair(queries + 1, hits));
  // The next turn: the image again, behind the first answer.
  Json turn = Body({ImagePart(image), TextPart("Once.")});
  turn["messages"].push_back({{"role", "assistant"}, {"content", "Yes."}});
  turn["messages"].push_back({{"role", "user"}, {"content", "Again?"}});
  auto second = e2e::Post(server_->port(), "/v1/chat/completions", turn.dump());
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(counters(), std::pair(queries + 2, hits + 1));
  auto same = e2e::Post(server_->port(), "/v1/chat/completions",
                        Body({ImagePart(image), TextPart("Once.")}).dump());
  ASSERT_EQ(same.status, 200) << same.body;
  EXPECT_EQ(same.json()["choices"][0]["logprobs"], first.json()["choices"][0]["logprobs"]);
  EXPECT_EQ(counters(), std::pair(queries + 3, hits + 2));
}

TEST_F(VisionServingE2E, BenchServeSendsRandomImages) {
  // `cpmserve bench serve` with vLLM's random-mm workload: every request carries one 112×112
  // noise JPEG. Against the same text prompts without images (same seed), each request's
  // prompt grows by at least the image's placeholder: <image_id> 0 </image_id> <image>, 64
  // pads (a small image is upscaled to one 448×448 thumbnail), </image>, and the newline
  // joining it to the text (the counter also counts recomputed prefills, hence at least).
  auto run = [&](const std::string& flags) {
    const double before = PromptTokensTotal(server_->port());
    const std::string result = *dir_ + "/bench_mm.json";
    const std::string cmd = std::string(CPM_CPMSERVE_BIN) + " bench serve --port " +
                            std::to_string(server_->port()) +
                            " --endpoint /v1/chat/completions --num-prompts 3 --random-input-len 8"
                            " --random-output-len 2 --seed 5 --tokenizer " + *dir_ +
                            "/model --save-result --result-filename " + result + " " + flags +
                            " > " + *dir_ + "/bench_mm.log 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(result);
    const Json r = Json::parse(in, nullptr, false);
    EXPECT_TRUE(r.is_object() && r["completed"] == 3) << r.dump();
    return PromptTokensTotal(server_->port()) - before;
  };
  const double text_only = run("");
  const double with_images =
      run("--random-mm-base-items-per-request 1 --random-mm-image-size 112x112");
  EXPECT_GE(with_images - text_only, 3 * (4 + 64 + 1 + 1)) << text_only << " " << with_images;
  // Images need the chat endpoint.
  const std::string bad = std::string(CPM_CPMSERVE_BIN) + " bench serve --port " +
                          std::to_string(server_->port()) +
                          " --random-mm-base-items-per-request 1 > /dev/null 2>&1";
  EXPECT_EQ(WEXITSTATUS(std::system(bad.c_str())), 2);
}

}  // namespace
}  // namespace cpm
