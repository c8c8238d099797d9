// Where request images and videos come from: the `url` of an OpenAI `image_url` or `video_url`
// content part, resolved to the encoded bytes (decode them with DecodeImage or DecodeVideo).
// Policies follow vLLM's MediaConnector.
#pragma once

#include <cstdint>
#include <string>
#include <vector>
#include <string_view>

#include "base/status.h"

namespace cpm {

struct MediaOptions {
  // vLLM's --allowed-local-media-path: file:// URLs must resolve inside this directory;
  // empty refuses every file:// URL.
  std::string allowed_local_media_path;
  // vLLM's --allowed-media-domains: http(s) media only from these hosts (and their redirects
  // only to them); empty allows any.
  std::vector<std::string> allowed_media_domains;
  int64_t fetch_timeout_s = 5;          // vLLM's VLLM_IMAGE_FETCH_TIMEOUT default
  int64_t video_fetch_timeout_s = 30;   // vLLM's VLLM_VIDEO_FETCH_TIMEOUT default
  int64_t max_bytes = 64 << 20;
  bool follow_redirects = true;  // vLLM's VLLM_MEDIA_URL_ALLOW_REDIRECTS
  // vLLM's --media-io-kwargs '{"video": {"num_frames": N}}': frames sampled from each video
  // (-1: every frame).
  int64_t video_num_frames = 32;
};

// vLLM's --media-io-kwargs JSON (or "") over `options`: {"video": {"num_frames": N}}. Other
// keys and bad values are errors naming `where` (the flag, or a request's media_io_kwargs).
Status ApplyMediaIoKwargs(const std::string& kwargs_json, MediaOptions* options,
                          const std::string& where = "--media-io-kwargs");

// Accepts data:<media type>;base64,<data>, http://, https:// and (by policy) file:// URLs.
// Every failure is InvalidArgument with a message fit for the client.
StatusOr<std::string> FetchImageBytes(const std::string& url, const MediaOptions& options);
// The same for any content part: `part` ("image_url", "video_url") names it in errors. A
// video's data URL is decoded as Python's base64.b64decode does (characters outside the
// alphabet, such as line breaks, are skipped); an image's strictly, as vLLM's.
StatusOr<std::string> FetchMediaBytes(const std::string& url, const MediaOptions& options,
                                      std::string_view part);

// An http:// or https:// URL (any case), which FetchMediaBytes downloads.
bool IsHttpUrl(std::string_view url);

// vLLM's video as JPEG frames, data:video/jpeg;base64,<frame>,<frame>,... (what its
// encode_video_base64 writes): true for such a URL.
bool IsJpegFramesDataUrl(std::string_view url);
// Its first options.video_num_frames frames' bytes (-1: all), in order, as vLLM's load_base64
// keeps them (it samples none).
StatusOr<std::vector<std::string>> JpegFramesOfDataUrl(std::string_view url,
                                                       const MediaOptions& options);

}  // namespace cpm
