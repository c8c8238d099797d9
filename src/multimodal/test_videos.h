// Test-only videos: solid-colour frames whose colour says which frame they are, encoded by
// libavcodec / libavformat, for the decoder and request-pipeline tests.
#pragma once

#include <cstdint>
#include <string>

namespace cpm::test_videos {

// Frame i's colour: far apart from its neighbours' so lossy coding cannot confuse them.
void FrameColour(int i, uint8_t rgb[3]);

// A `frames`-frame video of w × h frames, `codec_name` ("mpeg4", "mjpeg") in `container`
// ("mp4", "avi"), through a temporary file; empty on failure (the test then fails on it).
std::string EncodeTestVideo(int frames, int w, int h, const char* codec_name, const char* container);

}  // namespace cpm::test_videos
