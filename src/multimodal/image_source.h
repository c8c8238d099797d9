// Where request images come from: the `url` of an OpenAI `image_url` content part, resolved to
// the encoded bytes (decode them with DecodeImage). Policies follow vLLM's MediaConnector.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace cpm {

struct MediaOptions {
  // vLLM's --allowed-local-media-path: file:// URLs must resolve inside this directory;
  // empty refuses every file:// URL.
  std::string allowed_local_media_path;
  int64_t fetch_timeout_s = 5;  // vLLM's VLLM_IMAGE_FETCH_TIMEOUT default
  int64_t max_bytes = 64 << 20;
};

// Accepts data:<media type>;base64,<data>, http://, https:// and (by policy) file:// URLs.
// Every failure is InvalidArgument with a message fit for the client.
StatusOr<std::string> FetchImageBytes(const std::string& url, const MediaOptions& options);

}  // namespace cpm
