// Images of a chat request, from URL to the language model's input embeddings, in the steps
// vLLM's multimodal processor takes for MiniCPM-V-4.6:
//   Load     (HTTP thread)  fetch, decode, plan the slices, resize and normalize them;
//   Expand   (HTTP thread)  the k-th `<|image_pad|>` of the rendered prompt becomes image k's
//                           placeholder layout (<image_id>k</image_id><image>pads</image><slice>…);
//   Bind     (HTTP thread)  after tokenization: the prompt rows of the pad tokens, checked
//                           against the images' token counts, and an encoder job;
//   encode   (engine thread) the vision tower, about one encoder layer per engine step, on the
//                           compute pool.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/vision_encoder.h"
#include "multimodal/image_source.h"
#include "multimodal/slicing.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

// One image, ready for the encoder.
struct PreparedImage {
  SlicePlan plan;
  std::vector<PixelSlice> slices;  // thumbnail, then the grid row-major
};

// A tokenized multimodal prompt's extra inputs for the engine (EngineRequest::embed_rows,
// EngineRequest::encode). Each call of `encode` runs one piece (about one encoder layer of a
// slice) and returns true, with `embeds` filled, once every slice is done; the n choices of a
// request share the work.
struct MultimodalInputs {
  std::vector<int64_t> embed_rows;
  std::function<StatusOr<bool>(ThreadPool& pool, std::vector<float>* embeds)> encode;
};

// A prompt's token ids, each `<|image_pad|>` expanded to its image's placeholder layout, and
// what the engine needs for those rows.
struct MultimodalPrompt {
  std::vector<int32_t> ids;
  MultimodalInputs inputs;
};

class ImageProcessor {
 public:
  // Reads `model_dir`/preprocessor_config.json (defaults when absent) and config.json's
  // image_token_id (the id of kPadText); `mm_processor_kwargs`: vLLM's --mm-processor-kwargs
  // JSON over the file's values (or "").
  static StatusOr<std::unique_ptr<ImageProcessor>> Create(const std::string& model_dir,
                                                          std::shared_ptr<VisionEncoder> encoder,
                                                          MediaOptions media,
                                                          const std::string& mm_processor_kwargs = "");

  StatusOr<PreparedImage> Load(const std::string& url) const;
  // Replaces the pads of `prompt`, one per image, in order; their count must match.
  StatusOr<std::string> Expand(const std::string& prompt, const std::vector<PreparedImage>& images) const;
  // The pad tokens of `prompt_ids` must be exactly the images' placeholder tokens.
  StatusOr<MultimodalInputs> Bind(const std::vector<int32_t>& prompt_ids,
                                  std::vector<PreparedImage> images) const;

  // Load, Expand, tokenize and Bind in one: `urls` are the images of `text`'s pads, in order.
  StatusOr<MultimodalPrompt> Tokenize(const Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<std::string>& urls, bool add_special_tokens) const;

  const SliceConfig& slice_config() const { return slices_; }
  static constexpr const char* kPadText = "<|image_pad|>";

 private:
  SliceConfig slices_;
  MediaOptions media_;
  std::shared_ptr<VisionEncoder> encoder_;
  int32_t image_token_id_ = -1;
};

}  // namespace cpm
