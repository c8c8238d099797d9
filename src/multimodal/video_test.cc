// Video decoding: frame sampling against numpy's linspace, and decoding of videos encoded here
// by libavcodec / libavformat (MPEG-4 in MP4, MJPEG in AVI; test_videos.h), whose frames are
// solid colours that say which frame they are.
#include "multimodal/video.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "multimodal/test_videos.h"

namespace cpm {
namespace {

// DecodeVideo's frames, collected.
StatusOr<std::vector<RgbImage>> Decode(std::string_view bytes, int64_t num_frames) {
  std::vector<RgbImage> frames;
  CPM_ASSIGN_OR_RETURN(int64_t n, DecodeVideo(bytes, num_frames, [&](const RgbImage& f) {
                         frames.push_back(f);
                         return OkStatus();
                       }));
  EXPECT_EQ(n, static_cast<int64_t>(frames.size()));
  return frames;
}

// Whether `image` is frame i's solid colour (within lossy coding's error).
void ExpectFrame(const RgbImage& image, int i, int w, int h) {
  ASSERT_EQ(image.width, w);
  ASSERT_EQ(image.height, h);
  uint8_t c[3];
  test_videos::FrameColour(i, c);
  int worst = 0;
  for (size_t p = 0; p < image.pixels.size(); ++p) {
    worst = std::max(worst, std::abs(int{image.pixels[p]} - int{c[p % 3]}));
  }
  EXPECT_LE(worst, 12) << "frame " << i;
}

// Indices from numpy 1.24: np.linspace(0, total - 1, n, dtype=int).tolist().
TEST(VideoFrameIndices, MatchNumpyLinspace) {
  EXPECT_EQ(VideoFrameIndices(10, 4), (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(VideoFrameIndices(1000, 7), (std::vector<int64_t>{0, 166, 333, 499, 666, 832, 999}));
  EXPECT_EQ(VideoFrameIndices(100, 32),
            (std::vector<int64_t>{0,  3,  6,  9,  12, 15, 19, 22, 25, 28, 31, 35, 38, 41, 44, 47,
                                  51, 54, 57, 60, 63, 67, 70, 73, 76, 79, 83, 86, 89, 92, 95, 99}));
  EXPECT_EQ(VideoFrameIndices(301, 32),
            (std::vector<int64_t>{0,   9,   19,  29,  38,  48,  58,  67,  77,  87,  96,
                                  106, 116, 125, 135, 145, 154, 164, 174, 183, 193, 203,
                                  212, 222, 232, 241, 251, 261, 270, 280, 290, 300}));
  std::vector<int64_t> all33(32);
  for (int i = 0; i < 31; ++i) all33[i] = i;
  all33[31] = 32;
  EXPECT_EQ(VideoFrameIndices(33, 32), all33);
  EXPECT_EQ(VideoFrameIndices(7, 3), (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(VideoFrameIndices(5, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(VideoFrameIndices(2, 2), (std::vector<int64_t>{0, 1}));
  // Fewer frames than asked for, or -1: every frame (vLLM's full read).
  EXPECT_EQ(VideoFrameIndices(3, 32), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(VideoFrameIndices(4, -1), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(VideoFrameIndices(0, 32).empty());
}

TEST(DecodeVideo, Mpeg4InMp4KeepsTheSampledFrames) {
  const int w = 64, h = 48;
  const std::string mp4 = test_videos::EncodeTestVideo(10, w, h, "mpeg4", "mp4");
  ASSERT_FALSE(mp4.empty());
  StatusOr<std::vector<RgbImage>> frames = Decode(mp4, 4);
  ASSERT_TRUE(frames.ok()) << frames.status().message();
  ASSERT_EQ(frames->size(), 4u);
  const int expected[] = {0, 3, 6, 9};
  for (int j = 0; j < 4; ++j) ExpectFrame((*frames)[j], expected[j], w, h);
  // More frames asked for than there are, or every frame: all ten, in order.
  for (int64_t n : {int64_t{32}, int64_t{-1}}) {
    frames = Decode(mp4, n);
    ASSERT_TRUE(frames.ok()) << frames.status().message();
    ASSERT_EQ(frames->size(), 10u);
    for (int i = 0; i < 10; ++i) ExpectFrame((*frames)[i], i, w, h);
  }
}

// What real videos hold: H.264 with B-frames (x264 makes 3 by default; decoded out of order,
// kept in presentation order), VP9 in WebM, AV1 in MP4, each through Debian's encoder libraries.
TEST(DecodeVideo, H264Vp9Av1) {
  const std::pair<const char*, const char*> codecs[] = {
      {"libx264", "mp4"}, {"libvpx-vp9", "webm"}, {"libaom-av1", "mp4"}};
  for (const auto& [codec, container] : codecs) {
    const std::string video = test_videos::EncodeTestVideo(12, 64, 48, codec, container);
    ASSERT_FALSE(video.empty()) << codec << " in " << container;
    StatusOr<std::vector<RgbImage>> frames = Decode(video, 5);
    ASSERT_TRUE(frames.ok()) << codec << ": " << frames.status().message();
    ASSERT_EQ(frames->size(), 5u) << codec;
    const int expected[] = {0, 2, 5, 8, 11};  // np.linspace(0, 11, 5).astype(int)
    for (int j = 0; j < 5; ++j) ExpectFrame((*frames)[j], expected[j], 64, 48);
  }
}

// A GIF is also an image (OpenAI's fourth image format): its first frame, as Pillow opens it.
TEST(DecodeImage, GifIsItsFirstFrame) {
  const int w = 40, h = 30;
  const std::string gif = test_videos::EncodeTestVideo(3, w, h, "gif", "gif");
  ASSERT_FALSE(gif.empty());
  StatusOr<std::vector<RgbImage>> frames = Decode(gif, -1);
  ASSERT_TRUE(frames.ok()) << frames.status().message();
  ASSERT_EQ(frames->size(), 3u);
  StatusOr<RgbImage> image = DecodeImage(gif, AlphaPolicy::kVllmWhiteBackground);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->width, w);
  EXPECT_EQ(image->height, h);
  EXPECT_EQ(image->pixels, (*frames)[0].pixels);
  EXPECT_NE(image->pixels, (*frames)[1].pixels);
  const StatusOr<RgbImage> cut = DecodeImage(gif.substr(0, 20), AlphaPolicy::kVllmWhiteBackground);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().message().rfind("image: GIF", 0), 0u) << cut.status().message();
}

TEST(DecodeVideo, MjpegInAvi) {
  const int w = 40, h = 30;  // odd chroma sizes are not needed: 4:2:0 of even sides
  const std::string avi = test_videos::EncodeTestVideo(7, w, h, "mjpeg", "avi");
  ASSERT_FALSE(avi.empty());
  StatusOr<std::vector<RgbImage>> frames = Decode(avi, 3);
  ASSERT_TRUE(frames.ok()) << frames.status().message();
  ASSERT_EQ(frames->size(), 3u);
  const int expected[] = {0, 3, 6};
  for (int j = 0; j < 3; ++j) ExpectFrame((*frames)[j], expected[j], w, h);
}

TEST(DecodeVideo, BadDataIsAClientError) {
  for (const std::string& bytes : {std::string(), std::string("not a video at all"),
                                   std::string(4096, '\x01')}) {
    StatusOr<std::vector<RgbImage>> frames = Decode(bytes, 8);
    ASSERT_FALSE(frames.ok());
    EXPECT_EQ(frames.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(frames.status().message().find("video"), std::string::npos) << frames.status().message();
  }
  const std::string mp4 = test_videos::EncodeTestVideo(6, 32, 32, "mpeg4", "mp4");
  ASSERT_FALSE(mp4.empty());
  EXPECT_EQ(Decode(mp4, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(mp4, -2).status().code(), StatusCode::kInvalidArgument);
  // Every truncation of a real file decodes what it holds or fails cleanly, never crashes.
  for (size_t len = 0; len < mp4.size(); len += 97) {
    StatusOr<std::vector<RgbImage>> frames = Decode(std::string_view(mp4).substr(0, len), 4);
    if (frames.ok()) {
      EXPECT_LE(frames->size(), 4u);
    } else {
      EXPECT_EQ(frames.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

// A container that names other files opens none of them: FFmpeg's concat demuxer, probed by
// its first line, would read the files its script lists (relative names pass its "safe" check).
TEST(DecodeVideo, ScriptsOpenNoOtherFile) {
  const std::string name = "cpm_concat_target_" + std::to_string(getpid()) + ".mp4";
  std::ofstream(name, std::ios::binary) << test_videos::EncodeTestVideo(4, 32, 32, "mpeg4", "mp4");
  StatusOr<std::vector<RgbImage>> frames = Decode("ffconcat version 1.0\nfile " + name + "\n", 4);
  std::remove(name.c_str());
  ASSERT_FALSE(frames.ok()) << "the script's file was read";
  EXPECT_EQ(frames.status().code(), StatusCode::kInvalidArgument) << frames.status().message();
}

// Containers outside the self-contained list are refused, video or not (NUT holds one here).
TEST(DecodeVideo, OtherContainersAreRefused) {
  const std::string nut = test_videos::EncodeTestVideo(4, 32, 32, "mpeg4", "nut");
  ASSERT_FALSE(nut.empty());
  StatusOr<std::vector<RgbImage>> frames = Decode(nut, 4);
  ASSERT_FALSE(frames.ok());
  EXPECT_NE(frames.status().message().find("not a video this server can read"), std::string::npos)
      << frames.status().message();
}

TEST(DecodeVideo, CorruptDataNeverCrashes) {
  const std::string mp4 = test_videos::EncodeTestVideo(12, 48, 32, "mpeg4", "mp4");
  ASSERT_FALSE(mp4.empty());
  uint32_t seed = 12345;
  for (int round = 0; round < 200; ++round) {
    std::string bad = mp4;
    for (int flips = 0; flips < 1 + round % 8; ++flips) {
      seed = seed * 1664525u + 1013904223u;
      bad[(seed >> 8) % bad.size()] ^= static_cast<char>(1 + (seed & 0x7f));
    }
    StatusOr<std::vector<RgbImage>> frames = Decode(bad, 5);
    if (frames.ok()) {
      EXPECT_LE(frames->size(), 12u);
      for (const RgbImage& f : *frames) EXPECT_EQ(f.pixels.size(), size_t{3} * f.width * f.height);
    } else {
      EXPECT_EQ(frames.status().code(), StatusCode::kInvalidArgument) << frames.status().message();
    }
  }
}

TEST(DecodeVideo, FrameCallbackErrorsAndFrameLimit) {
  const std::string mp4 = test_videos::EncodeTestVideo(6, 32, 32, "mpeg4", "mp4");
  ASSERT_FALSE(mp4.empty());
  int calls = 0;
  StatusOr<int64_t> r = DecodeVideo(mp4, -1, [&](const RgbImage&) {
    return ++calls == 2 ? InvalidArgument("stop here") : OkStatus();
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "stop here");
  EXPECT_EQ(calls, 2);
  // More frames to keep than kMaxVideoFrames: refused before any is decoded.
  const std::string long_video =
      test_videos::EncodeTestVideo(static_cast<int>(kMaxVideoFrames) + 1, 16, 16, "mjpeg", "avi");
  ASSERT_FALSE(long_video.empty());
  calls = 0;
  r = DecodeVideo(long_video, -1, [&](const RgbImage&) { return ++calls, OkStatus(); });
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than 256"), std::string::npos) << r.status().message();
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(Decode(long_video, 8)->size(), 8u);
}

}  // namespace
}  // namespace cpm
