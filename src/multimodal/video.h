// Request videos: the bytes of an OpenAI `video_url` content part (a self-contained container:
// MP4/MOV, WebM/MKV, AVI, FLV, MPEG-TS/PS, Ogg, ASF, IVF, raw H.264/HEVC, GIF, MJPEG; with any
// codec this system's libavcodec reads: H.264, HEVC, VP9, AV1, MPEG-4, MJPEG, ...; never a
// playlist or script that names other files or URLs) to the RGB frames the model sees, sampled as vLLM's default video loader samples
// them (vllm/multimodal/video.py, OpenCV backend): `num_frames` frames at
// np.linspace(0, total - 1, num_frames) truncated to integers, or every frame of a video that
// has fewer. vLLM takes `total` from the container (OpenCV's CAP_PROP_FRAME_COUNT); this counts
// the video stream's packets, which is the same number for every well-formed file and needs no
// guess when the container does not state it.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "multimodal/image.h"

namespace cpm {

// The most frames one video may yield, whatever num_frames asks: each becomes at least 64
// prompt tokens, a vision-tower pass and ~2.4 MB of normalized thumbnail pixels.
inline constexpr int64_t kMaxVideoFrames = 256;

// The indices vLLM's OpenCV loader keeps of `total` frames: all of them when num_frames is -1
// or total < num_frames, else np.linspace(0, total − 1, num_frames).astype(int).
std::vector<int64_t> VideoFrameIndices(int64_t total, int64_t num_frames);

// Decodes `bytes` and hands `on_frame` the frames at VideoFrameIndices(frames in the file,
// num_frames) in order, converted to RGB by libswscale as OpenCV's FFmpeg reader converts them;
// one full-size frame is held at a time. Returns how many it handed over. Data that is not a
// video, has no video stream, cannot be decoded, or has frames over kMaxImagePixels or more
// than kMaxVideoFrames to keep is InvalidArgument naming the problem; an error of `on_frame`
// ends the decoding and is returned.
StatusOr<int64_t> DecodeVideo(std::string_view bytes, int64_t num_frames,
                              const std::function<Status(const RgbImage& frame)>& on_frame);

}  // namespace cpm
