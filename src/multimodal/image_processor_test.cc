// ImageProcessor with a scripted encoder: the pad expansion and its count checks, and the
// encoder job — one piece per call, slices in prompt order, one encoding shared by every call.
#include "multimodal/image_processor.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "multimodal/base64.h"
#include "multimodal/test_images.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tiny_tokenizer.h"
#include <thread>
#include <condition_variable>
#include <httplib.h>
#include "multimodal/test_videos.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

// Each slice takes `pieces` calls; its rows are filled with the slice's index (in call order).
class ScriptedEncoder : public VisionEncoder {
 public:
  explicit ScriptedEncoder(int pieces) : pieces_(pieces) {}
  int64_t weight_bytes() const override { return 0; }
  int64_t output_dim() const override { return 2; }
  bool Supports(int64_t patches_per_token) const override {
    return (patches_per_token == 16 && has_merger) || patches_per_token == 4;
  }
  bool has_merger = true;  // 16x possible
  int64_t default_patches_per_token() const override { return default_mode; }
  int64_t default_mode = 16;  // its model config's
  int64_t patch_size() const override { return 14; }
  int64_t OutputRows(int64_t h, int64_t w, int64_t ppt) const override {
    return (h / 14) * (w / 14) / ppt;
  }
  StatusOr<bool> EncodeSlicePiece(const float*, int64_t h, int64_t w, int64_t ppt, float* out,
                                  VisionProgress* p, ThreadPool&) override {
    ++calls;
    modes.push_back(ppt);
    sizes.push_back({h, w});
    if (++p->stage < pieces_) return false;
    std::fill(out, out + OutputRows(h, w, ppt) * output_dim(), static_cast<float>(slices_done++));
    return true;
  }
  std::vector<int64_t> modes;  // each call's patches_per_token
  std::vector<PixelSize> sizes;  // and slice size
  int calls = 0;
  int slices_done = 0;

 private:
  int pieces_;
};

class ImageProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cpm_image_processor_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "config.json") << R"({"image_token_id": 7, "video_token_id": 8})";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string DataUrl(int w, int h) {
    return "data:image/jpeg;base64," + EncodeBase64(test_images::EncodeJpeg(test_images::NoiseImage(w, h, 1), 80));
  }
  fs::path dir_;
};

TEST_F(ImageProcessorTest, EncoderJobRunsOnePiecePerCallInPromptOrder) {
  auto encoder = std::make_shared<ScriptedEncoder>(3);
  auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  std::vector<PreparedMedia> images;
  for (auto [w, h] : {std::pair{100, 100}, {900, 500}}) {  // 1 slice, then thumbnail + 1×2
    auto image = (*proc)->Load({MediaKind::kImage, DataUrl(w, h)});
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    ASSERT_EQ(image->images.size(), 1u);
    images.push_back(std::move(*image));
  }
  ASSERT_EQ(images[1].images[0].plan.rows * images[1].images[0].plan.cols, 2);
  const int64_t rows = ImageTokens(images[0].images[0].plan, (*proc)->slice_config()) +
                       ImageTokens(images[1].images[0].plan, (*proc)->slice_config());
  // Pad expansion: one pad per image, in order; a count mismatch is the client's error.
  EXPECT_FALSE((*proc)->Expand("<|image_pad|>", images).ok());
  EXPECT_FALSE((*proc)->Expand("<|image_pad|><|image_pad|><|image_pad|>", images).ok());
  auto text = (*proc)->Expand("a<|image_pad|>b<|image_pad|>c", images);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("a<image_id>0</image_id><image>", 0), 0u) << *text;
  EXPECT_NE(text->find("b<image_id>1</image_id><image>"), std::string::npos);
  // Bind: the pad token rows must be exactly the images' tokens.
  std::vector<int32_t> ids(5, 1);
  for (int64_t i = 0; i < rows; ++i) ids.push_back(7);
  ids.push_back(2);
  EXPECT_FALSE((*proc)->Bind(std::vector<int32_t>(ids.begin(), ids.end() - 2), images).ok());
  auto in = (*proc)->Bind(ids, std::move(images));
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->embed_rows.size(), static_cast<size_t>(rows));
  EXPECT_EQ(in->embed_rows.front(), 5);
  // 4 slices × 3 pieces: false 11 times, then true with every row; a second caller (another
  // choice of the request) gets the same rows without encoding again.
  ThreadPool pool(1);
  std::vector<float> embeds;
  for (int call = 1; call < 12; ++call) {
    auto done = in->encode(pool, &embeds);
    ASSERT_TRUE(done.ok());
    ASSERT_FALSE(*done) << call;
  }
  auto done = in->encode(pool, &embeds);
  ASSERT_TRUE(done.ok() && *done);
  ASSERT_EQ(embeds.size(), static_cast<size_t>(rows * 2));
  EXPECT_EQ(embeds.front(), 0.0f);  // the first image's only slice
  EXPECT_EQ(embeds.back(), 3.0f);   // the second image's last slice
  std::vector<float> again;
  ASSERT_TRUE(*in->encode(pool, &again));
  EXPECT_EQ(again, embeds);
  EXPECT_EQ(encoder->calls, 12);
}

// A request's http(s) images are fetched together, as vLLM gathers them: the server's handler
// holds each answer until a second request is in flight (or 3 s pass), and records the most it
// saw at once.
TEST_F(ImageProcessorTest, UrlImagesAreFetchedTogether) {
  ASSERT_TRUE(WriteTinyTokenizer(dir_.string(), TinyTokenizerFamily::kByteLevelBpe, nullptr).ok());
  auto tok = Tokenizer::Load(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::optional<int32_t> pad = (*tok)->TokenToId("<|image_pad|>");
  ASSERT_TRUE(pad.has_value());
  std::ofstream(dir_ / "config.json") << R"({"image_token_id": )" << *pad << "}";
  auto proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();

  const std::string jpeg = test_images::EncodeJpeg(test_images::NoiseImage(64, 64, 1), 80);
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0, most = 0;
  httplib::Server svr;
  svr.Get("/img", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    most = std::max(most, ++in_flight);
    cv.notify_all();
    cv.wait_for(lock, std::chrono::seconds(3), [&] { return most >= 2; });
    --in_flight;
    res.set_content(jpeg, "image/jpeg");
  });
  const int port = svr.bind_to_any_port("127.0.0.1");
  std::thread server([&] { svr.listen_after_bind(); });
  while (!svr.is_running()) std::this_thread::yield();
  ::setenv("no_proxy", "*", 1);
  const std::string url = "http://127.0.0.1:" + std::to_string(port) + "/img";
  auto prompt = (*proc)->Tokenize(**tok, "<|image_pad|><|image_pad|><|image_pad|>",
                                  {{MediaKind::kImage, url}, {MediaKind::kImage, url},
                                   {MediaKind::kImage, url}},
                                  false, 100000);
  svr.stop();
  server.join();
  ASSERT_TRUE(prompt.ok()) << prompt.status().ToString();
  EXPECT_GE(most, 2);
}

// The start-up warm-up encodes one slice of LargestSlice's size (slicing_test checks that no
// usual image's slices are larger), in the mode requests run: the released config, and a
// server's own scale_resolution in 4x.
TEST_F(ImageProcessorTest, WarmUpEncodesTheLargestSliceInTheRequestsMode) {
  for (const char* kwargs : {"", R"({"scale_resolution": 500, "downsample_mode": "4x"})"}) {
    auto encoder = std::make_shared<ScriptedEncoder>(2);
    auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions(), kwargs);
    ASSERT_TRUE(proc.ok()) << proc.status().ToString();
    ThreadPool pool(1);
    auto warm = (*proc)->WarmUp(pool);
    ASSERT_TRUE(warm.ok()) << warm.status().ToString();
    EXPECT_EQ(*warm, LargestSlice((*proc)->slice_config())) << kwargs;
    EXPECT_EQ(encoder->sizes, std::vector<PixelSize>(2, *warm)) << kwargs;  // one slice, 2 pieces
    const std::vector<int64_t> warm_modes = encoder->modes;
    // The mode of a request's slices.
    encoder->modes.clear();
    auto image = (*proc)->Load({MediaKind::kImage, DataUrl(300, 200)});
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    const int64_t tokens = ImageTokens(image->images[0].plan, (*proc)->slice_config());
    std::vector<PreparedMedia> media;
    media.push_back(std::move(*image));
    auto inputs = (*proc)->Bind(std::vector<int32_t>(tokens, 7), std::move(media));
    ASSERT_TRUE(inputs.ok()) << inputs.status().ToString();
    std::vector<float> embeds;
    for (;;) {
      auto done = inputs->encode(pool, &embeds);
      ASSERT_TRUE(done.ok()) << done.status().ToString();
      if (*done) break;
    }
    EXPECT_EQ(encoder->modes, warm_modes) << kwargs;
  }
}

// A video: its sampled frames, each sliced as an image of its size, behind one
// <image_id>v</image_id> (vLLM's MiniCPM-V-4.6 layout), in prompt order among the images.
// vLLM's per-request downsample_mode (mm_processor_kwargs): "4x" gives a slice four times the
// tokens (448² → 256, 16x's 64), images and videos alike, and the encoder runs in that mode; a
// mode the checkpoint cannot run (16x without the ViT merger) is the request's 400.
TEST_F(ImageProcessorTest, DownsampleModePerRequest) {
  auto encoder = std::make_shared<ScriptedEncoder>(1);
  auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  auto four = (*proc)->WithKwargs(R"({"downsample_mode": "4x"})", "");
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  for (auto [p, want] : {std::pair{proc->get(), 64}, {four->get(), 256}}) {
    auto image = p->Load({MediaKind::kImage, DataUrl(448, 448)});
    ASSERT_TRUE(image.ok()) << image.status().ToString();
    EXPECT_EQ(ImageTokens(image->images[0].plan, p->slice_config()), want);
    EXPECT_EQ(image->images[0].patches_per_token, want == 256 ? 4 : 16);
    std::vector<PreparedMedia> media;
    media.push_back(std::move(*image));
    auto inputs = p->Bind(std::vector<int32_t>(want, 7), std::move(media));
    ASSERT_TRUE(inputs.ok()) << inputs.status().ToString();
    std::vector<float> embeds;
    ThreadPool pool(1);
    encoder->modes.clear();
    ASSERT_TRUE(*inputs->encode(pool, &embeds));
    EXPECT_EQ(static_cast<int64_t>(embeds.size()), want * 2);
    EXPECT_EQ(encoder->modes, std::vector<int64_t>{want == 256 ? 4 : 16});
  }
  EXPECT_NE((*proc)->WithKwargs(R"({"downsample_mode": "2x"})", "").status().message().find(
                "'downsample_mode' must be \"16x\" or \"4x\""),
            std::string::npos);
  encoder->has_merger = false;
  EXPECT_NE((*proc)->WithKwargs(R"({"downsample_mode": "16x"})", "").status().message().find(
                "downsample_mode 16x needs the vision tower's ViT merger"),
            std::string::npos);
  EXPECT_TRUE((*proc)->WithKwargs(R"({"downsample_mode": "4x"})", "").ok());
}

// The vision tower's own mode (config.json's downsample_mode) is the default where
// preprocessor_config.json names none; the preprocessor's wins when it does.
TEST_F(ImageProcessorTest, ModelConfigsDownsampleModeIsTheDefault) {
  auto encoder = std::make_shared<ScriptedEncoder>(1);
  encoder->default_mode = 4;
  auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_EQ((*proc)->slice_config().patches_per_token, 4);
  std::ofstream(dir_ / "preprocessor_config.json") << R"({"downsample_mode": "16x"})";
  proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_EQ((*proc)->slice_config().patches_per_token, 16);
}

TEST_F(ImageProcessorTest, VideoFramesExpandAndEncodeInPromptOrder) {
  auto encoder = std::make_shared<ScriptedEncoder>(1);
  MediaOptions media;
  media.video_num_frames = 3;
  auto proc = ImageProcessor::Create(dir_.string(), encoder, media);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  ASSERT_TRUE((*proc)->takes_videos());
  // 900×600 frames: a 1×2 grid of slices besides the thumbnail, as an image this size.
  const std::string mp4 = test_videos::EncodeTestVideo(7, 900, 600, "mpeg4", "mp4");
  ASSERT_FALSE(mp4.empty());
  auto video = (*proc)->Load({MediaKind::kVideo, "data:video/mp4;base64," + EncodeBase64(mp4)});
  ASSERT_TRUE(video.ok()) << video.status().ToString();
  ASSERT_EQ(video->images.size(), 3u);  // frames 0, 3, 6
  const SlicePlan& plan = video->images[0].plan;
  EXPECT_EQ(plan.rows, 1);
  EXPECT_EQ(plan.cols, 2);
  const SliceConfig& vc = (*proc)->video_slice_config();
  const int64_t frame_tokens = ImageTokens(plan, vc);
  const int64_t slices_per_frame = 1 + plan.rows * plan.cols;
  auto image = (*proc)->Load({MediaKind::kImage, DataUrl(100, 100)});
  ASSERT_TRUE(image.ok());
  const int64_t image_tokens = ImageTokens(image->images[0].plan, (*proc)->slice_config());
  std::vector<PreparedMedia> media_items;
  media_items.push_back(std::move(*video));
  media_items.push_back(std::move(*image));
  // Kinds must match the pads' order; the image after the video is still image 0.
  EXPECT_FALSE((*proc)->Expand("<|image_pad|><|video_pad|>", media_items).ok());
  auto text = (*proc)->Expand("v<|video_pad|>i<|image_pad|>", media_items);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto pads = [](int64_t n) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += "<|video_pad|>";
    return out;
  };
  std::string frame = "<image>" + pads(SliceTokens(plan.thumbnail, vc)) + "</image>";
  for (int64_t c = 0; c < plan.cols; ++c) {
    frame += "<slice>" + pads(SliceTokens(plan.slice, vc)) + "</slice>";
  }
  EXPECT_EQ(text->rfind("v<image_id>0</image_id>" + frame + frame + frame +
                            "i<image_id>0</image_id><image>",
                        0),
            0u)
      << *text;
  // Bind: video pads (8) and image pads (7) together, in prompt order.
  std::vector<int32_t> ids = {1};
  for (int64_t i = 0; i < 3 * frame_tokens; ++i) ids.push_back(8);
  ids.push_back(1);
  for (int64_t i = 0; i < image_tokens; ++i) ids.push_back(7);
  EXPECT_FALSE((*proc)->Bind(std::vector<int32_t>(ids.begin(), ids.end() - 1), media_items).ok());
  auto in = (*proc)->Bind(ids, std::move(media_items));
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_EQ(in->embed_rows.size(), static_cast<size_t>(3 * frame_tokens + image_tokens));
  EXPECT_EQ(in->embed_rows[0], 1);
  EXPECT_EQ(in->embed_rows[3 * frame_tokens], 3 * frame_tokens + 2);
  ThreadPool pool(1);
  std::vector<float> embeds;
  const int64_t slices = 3 * slices_per_frame + 1;
  for (int64_t call = 0; call + 1 < slices; ++call) ASSERT_FALSE(*in->encode(pool, &embeds));
  ASSERT_TRUE(*in->encode(pool, &embeds));
  // Rows hold their slice's encoding order: the frames' slices, then the image.
  EXPECT_EQ(embeds[0], 0.0f);
  EXPECT_EQ(embeds[2 * (3 * frame_tokens - 1)], static_cast<float>(3 * slices_per_frame - 1));
  EXPECT_EQ(embeds.back(), static_cast<float>(3 * slices_per_frame));
}

// The encoder cache (--mm-processor-cache-gb): an image sent again takes its rows from the cache
// without a piece of encoder work, a request whose every image is cached needs no encoder job at
// all, and the rows are the ones first encoded. Keys are what the tower reads: the same image in
// another downsample mode is encoded anew. vLLM's counters count items.
TEST_F(ImageProcessorTest, EncoderCacheReusesAnImagesRows) {
  auto encoder = std::make_shared<ScriptedEncoder>(2);
  auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_FALSE((*proc)->cache_stats().enabled);
  (*proc)->SetEncoderCache(std::make_shared<EncoderCache>(1 << 20));
  ThreadPool pool(1);
  // Binds `urls`' images to a prompt of just their pads; runs their job to the end if any.
  const auto bind = [&](const ImageProcessor& p, const std::vector<std::string>& urls,
                        std::vector<float>* embeds) -> StatusOr<MultimodalInputs> {
    std::vector<PreparedMedia> media;
    int64_t rows = 0;
    for (const std::string& url : urls) {
      CPM_ASSIGN_OR_RETURN(PreparedMedia m, p.Load({MediaKind::kImage, url}));
      rows += ImageTokens(m.images[0].plan, p.slice_config());
      media.push_back(std::move(m));
    }
    CPM_ASSIGN_OR_RETURN(MultimodalInputs in,
                         p.Bind(std::vector<int32_t>(rows, 7), std::move(media)));
    *embeds = in.embeds;
    for (bool done = in.encode == nullptr; !done;) {
      CPM_ASSIGN_OR_RETURN(done, in.encode(pool, embeds));
    }
    return in;
  };
  const std::string a = DataUrl(900, 500), b = DataUrl(100, 100);  // 3 slices, 1 slice
  std::vector<float> first, again, mixed;
  auto in = bind(**proc, {a}, &first);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  ASSERT_NE(in->encode, nullptr);
  EXPECT_EQ(encoder->calls, 6);  // 3 slices × 2 pieces
  in = bind(**proc, {a}, &again);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->encode, nullptr);
  EXPECT_EQ(again, first);
  EXPECT_EQ(encoder->calls, 6);
  // A new image before the cached one: only its slice is encoded; rows stay in prompt order.
  in = bind(**proc, {b, a}, &mixed);
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(encoder->calls, 8);
  ASSERT_GT(mixed.size(), first.size());
  const auto a_rows = mixed.end() - static_cast<ptrdiff_t>(first.size());
  EXPECT_EQ(std::vector<float>(a_rows, mixed.end()), first);
  EXPECT_EQ(mixed.front(), 3.0f);  // the fourth slice encoded
  EncoderCacheStats stats = (*proc)->cache_stats();
  EXPECT_TRUE(stats.enabled);
  EXPECT_EQ(stats.queries, 4);
  EXPECT_EQ(stats.hits, 2);
  // A request's mm_processor_kwargs: the same cache, another key for another mode.
  auto four = (*proc)->WithKwargs(R"({"downsample_mode": "4x"})", "");
  ASSERT_TRUE(four.ok());
  std::vector<float> four_rows;
  ASSERT_TRUE(bind(**four, {b}, &four_rows).ok());
  EXPECT_EQ(encoder->calls, 10);
  EXPECT_EQ(four_rows.size(), 4 * (mixed.size() - first.size()));
  ASSERT_TRUE(bind(**four, {b}, &four_rows).ok());
  EXPECT_EQ(encoder->calls, 10);
  EXPECT_EQ((*proc)->cache_stats().queries, 6);
  EXPECT_EQ((*proc)->cache_stats().hits, 3);
  // Rows larger than the whole cache are not kept.
  (*proc)->SetEncoderCache(std::make_shared<EncoderCache>(static_cast<int64_t>(sizeof(float))));
  ASSERT_TRUE(bind(**proc, {b}, &again).ok());
  ASSERT_TRUE(bind(**proc, {b}, &again).ok());
  EXPECT_EQ(encoder->calls, 14);
  EXPECT_EQ((*proc)->cache_stats().hits, 0);
}

TEST_F(ImageProcessorTest, VideosNeedAVideoTokenAndAVideo) {
  auto encoder = std::make_shared<ScriptedEncoder>(1);
  auto proc = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(proc.ok());
  auto bad = (*proc)->Load({MediaKind::kVideo, "data:video/mp4;base64," + EncodeBase64("not a video")});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("video"), std::string::npos) << bad.status().message();
  std::ofstream(dir_ / "config.json", std::ios::trunc) << R"({"image_token_id": 7})";
  auto images_only = ImageProcessor::Create(dir_.string(), encoder, MediaOptions());
  ASSERT_TRUE(images_only.ok());
  EXPECT_FALSE((*images_only)->takes_videos());
  auto refused = (*images_only)->Load({MediaKind::kVideo, "data:video/mp4;base64,AAAA"});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("takes no videos"), std::string::npos);
}

// The process's peak resident memory so far, in MiB (ctest runs each case in its own process).
int64_t PeakRssMib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024;
}

// A prompt's placeholder tokens are taken from its budget after planning, before any pixel is
// resized: one image, several, and video frames, at the max_model_len boundary.
TEST_F(ImageProcessorTest, PlaceholdersBeyondMaxModelLenAreRefusedBeforeSlicing) {
  MediaOptions media;
  media.video_num_frames = 3;
  auto proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), media);
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  const MediaRef image{MediaKind::kImage, DataUrl(100, 100)};  // one 448² thumbnail: 64 tokens
  {
    PlaceholderBudget budget(65);  // 64 placeholders leave room for a generated token
    auto ok = (*proc)->Load(image, &budget);
    ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    EXPECT_EQ(budget.used(), 64);
  }
  PlaceholderBudget full(64);  // ... 64 do not, as the prompt-length check after tokenization
  auto refused = (*proc)->Load(image, &full);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message().rfind(
                "This model's maximum context length is 64 tokens. However, your request has at least 64 input "
                "tokens",
                0),
            0u)
      << refused.status().message();
  // The budget is the prompt's: the second image's placeholders are counted on top of the first's.
  PlaceholderBudget two(128);
  ASSERT_TRUE((*proc)->Load(image, &two).ok());
  refused = (*proc)->Load(image, &two);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("at least 128 input tokens"), std::string::npos);
  // A video's frames too, frame by frame: 196 placeholders each for 900×600 (its 70-pad
  // thumbnail and two 63-pad slices).
  const std::string mp4 = test_videos::EncodeTestVideo(3, 900, 600, "mpeg4", "mp4");
  const MediaRef video{MediaKind::kVideo, "data:video/mp4;base64," + EncodeBase64(mp4)};
  PlaceholderBudget frames(3 * 196 + 1);
  ASSERT_TRUE((*proc)->Load(video, &frames).ok());
  PlaceholderBudget short_of_frames(3 * 196);
  EXPECT_FALSE((*proc)->Load(video, &short_of_frames).ok());
  // A budget without max_model_len (what /tokenize counts) has no limit.
  PlaceholderBudget unlimited;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*proc)->Load(image, &unlimited).ok());
  EXPECT_EQ(unlimited.used(), 3 * 64);
}

// The reviewer's case: scale_resolution 4480 makes a 64×64 image one 4480² thumbnail (6400
// placeholders, 300 MB of pixels as bytes and floats). With max_model_len 2048 it is refused
// from its plan, before any of that is allocated. The server's own --mm-processor-kwargs can
// ask for it (the operator's choice); a request cannot (next test).
TEST_F(ImageProcessorTest, HugeScaleResolutionIsRefusedWithoutAllocatingIt) {
  auto proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions(),
                                     R"({"scale_resolution": 4480})");
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  const MediaRef image{MediaKind::kImage, DataUrl(64, 64)};
  const int64_t before = PeakRssMib();
  PlaceholderBudget budget(2048);
  auto refused = (*proc)->Load(image, &budget);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(
                "maximum context length is 2048 tokens. However, your request has at least 6400 input tokens"),
            std::string::npos)
      << refused.status().message();
  EXPECT_LT(PeakRssMib() - before, 50);
  // 8960 would be 80 Mpixel of thumbnail, over the plan's limit: refused without a budget.
  proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions(),
                                R"({"scale_resolution": 8960})");
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  refused = (*proc)->Load(image);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more than the limit of 67108864"), std::string::npos)
      << refused.status().message();
  EXPECT_LT(PeakRssMib() - before, 50);
}

// A request's scale_resolution may reach the vision tower's position grid
// (vision_config.image_size), or the server's own value where that is larger, and no further.
TEST_F(ImageProcessorTest, RequestScaleResolutionIsBoundedByThePositionGrid) {
  std::ofstream(dir_ / "config.json", std::ios::trunc)
      << R"({"image_token_id": 7, "video_token_id": 8, "vision_config": {"image_size": 980, "patch_size": 14}})";
  auto proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions());
  ASSERT_TRUE(proc.ok()) << proc.status().ToString();
  EXPECT_EQ((*proc)->max_scale_resolution(), 980);
  for (const char* bad : {R"({"scale_resolution": 981})", R"({"scale_resolution": 40000})"}) {
    auto r = (*proc)->WithKwargs(bad, "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("mm_processor_kwargs: scale_resolution must be at most 980"),
              std::string::npos)
        << r.status().message();
  }
  // Ordinary overrides still work, and their images load within a budget.
  auto hi = (*proc)->WithKwargs(R"({"scale_resolution": 980, "max_slice_nums": 36})", "");
  ASSERT_TRUE(hi.ok()) << hi.status().ToString();
  EXPECT_EQ((*hi)->slice_config().scale_resolution, 980);
  EXPECT_EQ((*hi)->max_scale_resolution(), 980);  // a request cannot raise the bound for itself
  PlaceholderBudget budget(4096);
  auto image = (*hi)->Load({MediaKind::kImage, DataUrl(900, 500)}, &budget);
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(budget.used(), ImageTokens(image->images[0].plan, (*hi)->slice_config()));
  // The server's --mm-processor-kwargs above the grid raise the bound to their value.
  auto wide = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions(),
                                     R"({"scale_resolution": 1120})");
  ASSERT_TRUE(wide.ok()) << wide.status().ToString();
  EXPECT_EQ((*wide)->max_scale_resolution(), 1120);
  // Without vision_config (or with a smaller grid, as tiny test towers have) the server's value.
  std::ofstream(dir_ / "config.json", std::ios::trunc) << R"({"image_token_id": 7})";
  auto plain = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions());
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->max_scale_resolution(), 448);
  EXPECT_FALSE((*plain)->WithKwargs(R"({"scale_resolution": 896})", "").ok());
  std::ofstream(dir_ / "config.json", std::ios::trunc)
      << R"({"image_token_id": 7, "vision_config": {"image_size": 0}})";
  EXPECT_FALSE(ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions()).ok());
}

// Settings that would fail every image request are refused at start-up, naming the file: a
// preprocessor patch_size other than the vision tower's, placeholder ids outside the vocabulary.
TEST_F(ImageProcessorTest, ConfigsThatFailEveryImageAreRefusedAtLoad) {
  std::ofstream(dir_ / "preprocessor_config.json") << R"({"patch_size": 16})";
  auto mismatch = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions());
  ASSERT_FALSE(mismatch.ok());
  EXPECT_NE(mismatch.status().message().find(
                "preprocessor_config.json: patch_size 16 disagrees with config.json's "
                "vision_config.patch_size 14"),
            std::string::npos) << mismatch.status().message();
  fs::remove(dir_ / "preprocessor_config.json");
  auto proc = ImageProcessor::Create(dir_.string(), std::make_shared<ScriptedEncoder>(1), MediaOptions());
  ASSERT_TRUE(proc.ok());
  EXPECT_TRUE((*proc)->CheckTokenIds(dir_.string(), 9).ok());  // image 7, video 8
  const Status s = (*proc)->CheckTokenIds(dir_.string(), 8);
  EXPECT_NE(s.message().find("config.json: field 'video_token_id': 8 is not a token of the "
                             "vocabulary (8 ids)"),
            std::string::npos) << s.message();
  EXPECT_NE((*proc)->CheckTokenIds(dir_.string(), 5).message().find("'image_token_id': 7"),
            std::string::npos);
}

}  // namespace
}  // namespace cpm
