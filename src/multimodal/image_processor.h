// Images and videos of a chat request, from URL to the language model's input embeddings, in
// the steps vLLM's multimodal processor takes for MiniCPM-V-4.6:
//   Load     (HTTP thread)  fetch, decode (a video: its sampled frames, video.h), plan the
//                           slices, resize and normalize them;
//   Expand   (HTTP thread)  the k-th `<|image_pad|>` or `<|video_pad|>` of the rendered prompt
//                           becomes item k's placeholder layout: an image's
//                           <image_id>k</image_id><image>pads</image><slice>…, a video's
//                           <image_id>v</image_id> and then each frame's <image>pads</image>
//                           <slice>… (spec minicpmv46.md §6.2, vLLM's 4.6 processor);
//   Bind     (HTTP thread)  after tokenization: the prompt rows of the pad tokens, checked
//                           against the images' token counts, and an encoder job;
//   encode   (engine thread) the vision tower, about one encoder layer per engine step, on the
//                           compute pool; images the cache holds (encoder_cache.h) are not
//                           encoded again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/vision_encoder.h"
#include "multimodal/encoder_cache.h"
#include "multimodal/image_source.h"
#include "multimodal/placeholder_budget.h"
#include "multimodal/slicing.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

// One image (or video frame), ready for the encoder.
struct PreparedImage {
  SlicePlan plan;
  std::vector<PixelSlice> slices;  // thumbnail, then the grid row-major
  int64_t patches_per_token = 16;  // the downsample mode it is encoded in (SliceConfig's)
};

enum class MediaKind { kImage, kVideo };

// An image_url or video_url content part of a request, in prompt order.
struct MediaRef {
  MediaKind kind = MediaKind::kImage;
  std::string url;
};

// One image, or one video as its sampled frames, ready for the encoder.
struct PreparedMedia {
  MediaKind kind = MediaKind::kImage;
  std::vector<PreparedImage> images;  // the image alone, or the video's frames in order
};

// A tokenized multimodal prompt's extra inputs for the engine (EngineRequest::embed_rows,
// ::embeds, ::encode). Each call of `encode` runs one piece (about one encoder layer of a
// slice) and returns true, with `embeds` filled, once every slice is done; the n choices of a
// request share the work. Without `encode` (every item was in the cache), `embeds` holds the
// rows already.
struct MultimodalInputs {
  std::vector<int64_t> embed_rows;
  std::vector<float> embeds;
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
  // image_token_id (the id of kPadText), video_token_id (kVideoPadText's; without it the
  // model takes no videos) and vision_config.image_size (see max_scale_resolution());
  // `mm_processor_kwargs`: vLLM's --mm-processor-kwargs JSON over the file's values (or "").
  // Video frames are sliced as vLLM slices them for MiniCPM-V-4.6 (the server's slicing; a
  // request's mm_processor_kwargs apply to its images only, as vLLM's).
  static StatusOr<std::unique_ptr<ImageProcessor>> Create(const std::string& model_dir,
                                                          std::shared_ptr<VisionEncoder> encoder,
                                                          MediaOptions media,
                                                          const std::string& mm_processor_kwargs = "");

  // Fetches, decodes, plans and slices one item (`fetched`: its URL's bytes, already fetched).
  // With a `budget`, each image's (or frame's) placeholder tokens are taken from it after
  // planning, before any pixel is resized.
  StatusOr<PreparedMedia> Load(const MediaRef& ref, PlaceholderBudget* budget = nullptr,
                               StatusOr<std::string>* fetched = nullptr) const;
  // Replaces the pads of `prompt`, one per item, in order (an image's kPadText, a video's
  // kVideoPadText); their count and kinds must match.
  StatusOr<std::string> Expand(const std::string& prompt, const std::vector<PreparedMedia>& media) const;
  // The pad tokens of `prompt_ids` must be exactly the items' placeholder tokens.
  StatusOr<MultimodalInputs> Bind(const std::vector<int32_t>& prompt_ids,
                                  std::vector<PreparedMedia> media) const;

  // Load, Expand, tokenize and Bind in one: `media` are the items of `text`'s pads, in order.
  // `max_model_len` > 0 (a prompt to generate from): items whose placeholders alone reach it
  // are refused (vLLM's context-length 400) before their pixels are resized; 0: no limit.
  StatusOr<MultimodalPrompt> Tokenize(const Tokenizer& tokenizer, const std::string& text,
                                      const std::vector<MediaRef>& media, bool add_special_tokens,
                                      int64_t max_model_len = 0) const;

  // A copy with a request's mm_processor_kwargs (a JSON object's text: max_slice_nums,
  // scale_resolution, slice_mode, use_image_id) over this one's slicing and its
  // media_io_kwargs ({"video": {"num_frames": N}}) over its media options, as vLLM merges a
  // request's over --mm-processor-kwargs / --media-io-kwargs. Either may be empty. An unknown
  // key or a bad value is an error naming the field; so is a scale_resolution above
  // max_scale_resolution() (vLLM takes any).
  StatusOr<std::unique_ptr<ImageProcessor>> WithKwargs(const std::string& mm_processor_kwargs,
                                                       const std::string& media_io_kwargs) const;

  // Keeps the tower's outputs in `cache` (shared with the copies WithKwargs makes) and reuses
  // them for images that slice to the same pixels. No cache (the default): every image is
  // encoded.
  void SetEncoderCache(std::shared_ptr<EncoderCache> cache) { cache_ = std::move(cache); }
  EncoderCacheStats cache_stats() const { return cache_ ? cache_->stats() : EncoderCacheStats{}; }

  const SliceConfig& slice_config() const { return slices_; }
  const SliceConfig& video_slice_config() const { return video_slices_; }
  // The largest scale_resolution a request may ask for: the vision tower's position grid
  // (vision_config.image_size, 980 pixels = 70×70 patches), or the server's own value where
  // that is larger. A slice is about scale_resolution² pixels; beyond the grid neighbouring
  // patches share a position embedding, and the tower's attention over a slice grows with the
  // square of its patches (scale_resolution 4480: 102 400 patches a slice, 100 times the
  // released 448's, 10 000 times the attention). CheckPlan's pixel limit bounds the slice count.
  int64_t max_scale_resolution() const { return max_scale_resolution_; }
  bool takes_videos() const { return video_token_id_ >= 0; }
  // config.json's image_token_id and video_token_id must be tokens of the model's vocabulary
  // (else no prompt ever holds them, and every image request fails on its placeholders).
  Status CheckTokenIds(const std::string& model_dir, int64_t vocab_size) const;
  // Encodes one slice of zeros of LargestSlice's size, so that the encoder grows and first
  // touches its buffers at start-up rather than in the first image requests (~0.2 s of
  // MiniCPM-V-4.6's first on a 2-vCPU VM, and again at the first image with a larger slice).
  // Returns that size.
  StatusOr<PixelSize> WarmUp(ThreadPool& pool) const;
  static constexpr const char* kPadText = "<|image_pad|>";
  static constexpr const char* kVideoPadText = "<|video_pad|>";

 private:
  StatusOr<PreparedImage> Prepare(const RgbImage& image, const SliceConfig& c,
                                  PlaceholderBudget* budget) const;

  SliceConfig slices_, video_slices_;
  MediaOptions media_;
  std::shared_ptr<VisionEncoder> encoder_;
  std::shared_ptr<EncoderCache> cache_;  // null: off
  int32_t image_token_id_ = -1;
  int32_t video_token_id_ = -1;  // -1: no videos
  int64_t max_scale_resolution_ = 0;
};

}  // namespace cpm
