// From image and video URLs to encoder jobs (see image_processor.h).
#include "multimodal/image_processor.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <optional>
#include <semaphore>

#include <nlohmann/json.hpp>

#include "io/mmap_file.h"
#include "model/config_file.h"
#include "multimodal/image.h"
#include "multimodal/video.h"

namespace cpm {
namespace {

// Media decoded (and sliced) at once, over all requests: vLLM decodes in a pool of
// VLLM_MEDIA_LOADING_THREAD_COUNT threads (8 unless set). Each decode may hold an image of up to
// kMaxImagePixels (0.5 GB of RGB) a few times over, and requests run on up to 128-512 HTTP
// threads (--http-threads).
class DecodeSlot {
 public:
  DecodeSlot() { Slots().acquire(); }
  ~DecodeSlot() { Slots().release(); }
  DecodeSlot(const DecodeSlot&) = delete;
  DecodeSlot& operator=(const DecodeSlot&) = delete;

 private:
  static std::counting_semaphore<>& Slots() {
    static std::counting_semaphore<> slots([] {
      const char* env = std::getenv("VLLM_MEDIA_LOADING_THREAD_COUNT");
      const long n = env ? std::strtol(env, nullptr, 10) : 0;
      return n > 0 ? static_cast<std::ptrdiff_t>(n) : std::ptrdiff_t{8};
    }());
    return slots;
  }
};

// One image (or video frame) of a request for the vision tower: its rows from the cache, or
// its slices to encode (and, with a cache, the digest to keep the rows under).
struct EncoderJob {
  PreparedImage image;
  MediaDigest digest;
  EncoderCache::Rows cached;
};

// Encodes a request's images once, one piece (about one encoder layer) per call, whichever of
// its choices' requests the engine calls it for; every choice gets the whole result. Images
// found in the cache are copied in their place; the others go into it once encoded.
class SharedEncoding {
 public:
  SharedEncoding(std::shared_ptr<VisionEncoder> encoder, std::shared_ptr<EncoderCache> cache,
                 std::vector<EncoderJob> jobs)
      : encoder_(std::move(encoder)), cache_(std::move(cache)), jobs_(std::move(jobs)) {}

  StatusOr<bool> Next(ThreadPool& pool, std::vector<float>* embeds) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok() && job_ < jobs_.size()) {
      status_ = EncodeOnePiece(pool);
      if (job_ == jobs_.size()) jobs_.clear();  // the pixels are not needed any more
    }
    CPM_RETURN_IF_ERROR(status_);
    if (!jobs_.empty()) return false;
    *embeds = embeds_;
    return true;
  }

 private:
  // Copies the cached images from job_ on, then runs one piece of the next slice in prompt
  // order (image by image, thumbnail first); a slice's rows are appended to embeds_ when it is
  // done, and an image's rows go into the cache when its last slice is.
  Status EncodeOnePiece(ThreadPool& pool) {
    SkipCached();
    if (job_ == jobs_.size()) return OkStatus();
    EncoderJob& job = jobs_[job_];
    const PixelSlice& s = job.image.slices[slice_];
    const int64_t mode = job.image.patches_per_token;
    if (progress_.stage == 0) {
      if (slice_ == 0) job_start_ = embeds_.size();
      const int64_t rows = encoder_->OutputRows(s.size.height, s.size.width, mode);
      slice_out_.assign(static_cast<size_t>(rows * encoder_->output_dim()), 0.0f);
    }
    CPM_ASSIGN_OR_RETURN(bool done,
                         encoder_->EncodeSlicePiece(s.pixels.data(), s.size.height, s.size.width, mode,
                                                    slice_out_.data(), &progress_, pool));
    if (!done) return OkStatus();
    embeds_.insert(embeds_.end(), slice_out_.begin(), slice_out_.end());
    progress_ = VisionProgress();
    if (++slice_ < job.image.slices.size()) return OkStatus();
    if (cache_) {
      const auto start = embeds_.begin() + static_cast<ptrdiff_t>(job_start_);
      cache_->Insert(job.digest, std::make_shared<const std::vector<float>>(start, embeds_.end()));
    }
    slice_ = 0;
    ++job_;
    SkipCached();
    return OkStatus();
  }

  void SkipCached() {
    for (; job_ < jobs_.size() && jobs_[job_].cached; ++job_) {
      embeds_.insert(embeds_.end(), jobs_[job_].cached->begin(), jobs_[job_].cached->end());
    }
  }

  std::mutex mu_;
  std::shared_ptr<VisionEncoder> encoder_;
  std::shared_ptr<EncoderCache> cache_;  // null: off
  std::vector<EncoderJob> jobs_;
  size_t job_ = 0, slice_ = 0;  // the slice being encoded
  size_t job_start_ = 0;        // ... where its image's rows start in embeds_
  VisionProgress progress_;     // ... how far it is
  std::vector<float> slice_out_;  // ... its rows
  Status status_;
  std::vector<float> embeds_;
};

// config.json's image_token_id (required), video_token_id (-1 when absent) and
// vision_config.image_size (0 when absent).
Status ReadModelConfig(const std::string& model_dir, int32_t* image_id, int32_t* video_id,
                       int64_t* vision_image_size) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadModelConfigText(model_dir));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  auto it = j.find("image_token_id");
  if (it == j.end() || !it->is_number_integer())
    return InvalidArgument(path + ": field 'image_token_id' must be an integer");
  *image_id = it->get<int32_t>();
  *video_id = -1;
  if (it = j.find("video_token_id"); it != j.end()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int32_t>() == *image_id)
      return InvalidArgument(path + ": field 'video_token_id' must be an integer other than image_token_id");
    *video_id = it->get<int32_t>();
  }
  *vision_image_size = 0;
  if (auto v = j.find("vision_config"); v != j.end() && v->is_object()) {
    if (it = v->find("image_size"); it != v->end()) {
      if (!it->is_number_integer() || it->get<int64_t>() <= 0)
        return InvalidArgument(path + ": field 'vision_config.image_size' must be a positive integer");
      *vision_image_size = it->get<int64_t>();
    }
  }
  return OkStatus();
}

const char* KindName(MediaKind k) { return k == MediaKind::kVideo ? "a video" : "an image"; }

// The encoder gives one row per placeholder token in `c`'s downsample mode: it supports the
// mode, and agrees with the slicing on a slice's token count. `where` names the setting.
Status CheckEncoderMode(const VisionEncoder& encoder, const SliceConfig& c, const std::string& where) {
  const std::string mode = c.patches_per_token == 16 ? "16x" : "4x";
  if (!encoder.Supports(c.patches_per_token))
    return InvalidArgument(where + ": downsample_mode " + mode +
                           " needs the vision tower's ViT merger (vit_merger.*), which this "
                           "checkpoint does not have");
  if (encoder.patch_size() != c.patch_size)
    return InvalidArgument(where + ": patch_size " + std::to_string(c.patch_size) +
                           " disagrees with config.json's vision_config.patch_size " +
                           std::to_string(encoder.patch_size()));
  const int64_t unit = 4 * c.patch_size;
  if (encoder.OutputRows(unit, unit, c.patches_per_token) != SliceTokens({unit, unit}, c))
    return InvalidArgument(where + ": patch_size / downsample_mode disagree with config.json's vision_config");
  return OkStatus();
}

}  // namespace

StatusOr<PixelSize> ImageProcessor::WarmUp(ThreadPool& pool) const {
  const PixelSize size = LargestSlice(slices_);
  const int64_t mode = slices_.patches_per_token;
  const std::vector<float> pixels(static_cast<size_t>(size.height * size.width * 3), 0.0f);
  std::vector<float> out(static_cast<size_t>(encoder_->OutputRows(size.height, size.width, mode) *
                                             encoder_->output_dim()));
  CPM_RETURN_IF_ERROR(
      encoder_->EncodeSlice(pixels.data(), size.height, size.width, mode, out.data(), pool));
  return size;
}

Status ImageProcessor::CheckTokenIds(const std::string& model_dir, int64_t vocab_size) const {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  for (const auto& [field, id] : {std::pair{"image_token_id", image_token_id_},
                                  std::pair{"video_token_id", video_token_id_}}) {
    if (id == -1 && std::string(field) == "video_token_id") continue;  // no videos
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument(path + ": field '" + field + "': " + std::to_string(id) +
                             " is not a token of the vocabulary (" + std::to_string(vocab_size) +
                             " ids)");
    }
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<ImageProcessor>> ImageProcessor::Create(const std::string& model_dir,
                                                                 std::shared_ptr<VisionEncoder> encoder,
                                                                 MediaOptions media,
                                                                 const std::string& mm_processor_kwargs) {
  auto p = std::make_unique<ImageProcessor>();
  int64_t vision_image_size = 0;
  CPM_RETURN_IF_ERROR(
      ReadModelConfig(model_dir, &p->image_token_id_, &p->video_token_id_, &vision_image_size));
  // The vision tower's own mode (its model config's) unless the preprocessor names one.
  p->slices_.patches_per_token = encoder->default_patches_per_token();
  const std::filesystem::path pre = std::filesystem::path(model_dir) / "preprocessor_config.json";
  if (std::filesystem::exists(pre)) {
    CPM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(pre.string()));
    CPM_ASSIGN_OR_RETURN(p->slices_, ParseSliceConfig(text, pre.string(), p->slices_));
  }
  CPM_RETURN_IF_ERROR(ApplySliceOverrides(mm_processor_kwargs, "--mm-processor-kwargs", &p->slices_));
  p->max_scale_resolution_ = std::max(vision_image_size, p->slices_.scale_resolution);
  // Video frames: sliced like images, with the processor's max_slice_nums (vLLM's MiniCPM-V-4.6
  // get_video_max_slice_num: transformers' video processor keeps the image processor's, 9, so
  // that high-resolution frames are sliced); the <image_id> goes once before the whole video.
  p->video_slices_ = p->slices_;
  p->video_slices_.use_image_id = false;
  // The placeholder count per slice must be what the encoder gives for it.
  CPM_RETURN_IF_ERROR(CheckEncoderMode(*encoder, p->slices_, pre.string()));
  p->encoder_ = std::move(encoder);
  p->media_ = std::move(media);
  return p;
}

StatusOr<std::unique_ptr<ImageProcessor>> ImageProcessor::WithKwargs(
    const std::string& mm_processor_kwargs, const std::string& media_io_kwargs) const {
  auto p = std::make_unique<ImageProcessor>(*this);
  CPM_RETURN_IF_ERROR(
      ApplySliceOverrides(mm_processor_kwargs, "mm_processor_kwargs", &p->slices_, max_scale_resolution_));
  // vLLM: a flat downsample_mode is the videos' too.
  p->video_slices_.patches_per_token = p->slices_.patches_per_token;
  CPM_RETURN_IF_ERROR(CheckEncoderMode(*encoder_, p->slices_, "mm_processor_kwargs"));
  CPM_RETURN_IF_ERROR(ApplyMediaIoKwargs(media_io_kwargs, &p->media_, "media_io_kwargs"));
  return p;
}

StatusOr<PreparedImage> ImageProcessor::Prepare(const RgbImage& image, const SliceConfig& c,
                                                PlaceholderBudget* budget) const {
  PreparedImage p;
  p.plan = PlanSlices({image.height, image.width}, c);
  // Every check on the plan alone, before MakeSlices allocates its pixels.
  CPM_RETURN_IF_ERROR(CheckPlan(p.plan, {image.height, image.width}, c));
  if (budget) CPM_RETURN_IF_ERROR(budget->Take(ImageTokens(p.plan, c)));
  p.slices = MakeSlices(image, p.plan, c);
  p.patches_per_token = c.patches_per_token;
  return p;
}

StatusOr<PreparedMedia> ImageProcessor::Load(const MediaRef& ref, PlaceholderBudget* budget,
                                             StatusOr<std::string>* fetched) const {
  PreparedMedia out;
  out.kind = ref.kind;
  if (ref.kind == MediaKind::kImage) {
    CPM_ASSIGN_OR_RETURN(std::string bytes,
                         fetched ? std::move(*fetched) : FetchImageBytes(ref.url, media_));
    const DecodeSlot slot;
    // As vLLM loads request images: an RGBA image is pasted over white, other modes drop alpha.
    CPM_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, AlphaPolicy::kVllmWhiteBackground));
    CPM_ASSIGN_OR_RETURN(PreparedImage p, Prepare(image, slices_, budget));
    out.images.push_back(std::move(p));
    return out;
  }
  if (!takes_videos()) return InvalidArgument("video_url: this model takes no videos");
  if (IsJpegFramesDataUrl(ref.url)) {
    // vLLM's frames-as-JPEGs form: its first num_frames frames, each decoded as an image.
    CPM_ASSIGN_OR_RETURN(std::vector<std::string> frames, JpegFramesOfDataUrl(ref.url, media_));
    if (frames.size() > static_cast<size_t>(kMaxVideoFrames)) {
      return InvalidArgument("video_url: " + std::to_string(frames.size()) +
                             " JPEG frames; at most " + std::to_string(kMaxVideoFrames));
    }
    const DecodeSlot slot;
    for (const std::string& bytes : frames) {
      CPM_ASSIGN_OR_RETURN(RgbImage frame, DecodeImage(bytes, AlphaPolicy::kVllmWhiteBackground));
      CPM_ASSIGN_OR_RETURN(PreparedImage p, Prepare(frame, video_slices_, budget));
      out.images.push_back(std::move(p));
    }
    return out;
  }
  CPM_ASSIGN_OR_RETURN(std::string bytes, fetched ? std::move(*fetched)
                                                  : FetchMediaBytes(ref.url, media_, "video_url"));
  const DecodeSlot slot;
  // Each frame is planned and sliced as it is decoded; the decoded frame is not kept.
  const auto prepare = [&](const RgbImage& frame) -> Status {
    CPM_ASSIGN_OR_RETURN(PreparedImage p, Prepare(frame, video_slices_, budget));
    out.images.push_back(std::move(p));
    return OkStatus();
  };
  CPM_RETURN_IF_ERROR(DecodeVideo(bytes, media_.video_num_frames, prepare).status());
  return out;
}

StatusOr<std::string> ImageProcessor::Expand(const std::string& prompt,
                                             const std::vector<PreparedMedia>& media) const {
  const std::string image_pad = kPadText, video_pad = kVideoPadText;
  // The next pad of either kind at or after `from`, and its kind.
  const auto next_pad = [&](size_t from, MediaKind* kind) {
    const size_t i = prompt.find(image_pad, from);
    const size_t v = takes_videos() ? prompt.find(video_pad, from) : std::string::npos;
    *kind = v < i ? MediaKind::kVideo : MediaKind::kImage;
    return std::min(i, v);
  };
  std::string out;
  size_t from = 0, k = 0;
  int64_t image_index = 0, video_index = 0;  // <image_id>: each kind counts its own items
  MediaKind kind;
  for (size_t at; (at = next_pad(from, &kind)) != std::string::npos; ++k) {
    if (k >= media.size()) break;
    if (kind != media[k].kind)
      return InvalidArgument("the prompt's placeholder " + std::to_string(k + 1) + " is for " +
                             KindName(kind) + ", but the request's item " + std::to_string(k + 1) +
                             " is " + KindName(media[k].kind));
    out.append(prompt, from, at - from);
    if (kind == MediaKind::kImage) {
      out += PlaceholderText(media[k].images[0].plan, image_index++, slices_, image_pad);
    } else {
      // <image_id>v</image_id>, then the frames one after another, each <image>{pads}</image>
      // and its slice rows, no separator (vLLM's get_video_prompt_texts, HF's processor).
      out += "<image_id>" + std::to_string(video_index++) + "</image_id>";
      for (const PreparedImage& frame : media[k].images) {
        out += PlaceholderText(frame.plan, 0, video_slices_, video_pad);
      }
    }
    from = at + (kind == MediaKind::kImage ? image_pad : video_pad).size();
  }
  if (k != media.size() || next_pad(from, &kind) != std::string::npos)
    return InvalidArgument("the prompt has a different number of " + image_pad + " / " + video_pad +
                           " placeholders than the " + std::to_string(media.size()) +
                           " image(s) and video(s) of the request");
  out.append(prompt, from, std::string::npos);
  return out;
}

StatusOr<MultimodalInputs> ImageProcessor::Bind(const std::vector<int32_t>& prompt_ids,
                                                std::vector<PreparedMedia> media) const {
  int64_t expected = 0;
  for (const PreparedMedia& m : media) {
    const SliceConfig& c = m.kind == MediaKind::kImage ? slices_ : video_slices_;
    for (const PreparedImage& image : m.images) expected += ImageTokens(image.plan, c);
  }
  MultimodalInputs in;
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    if (prompt_ids[i] == image_token_id_ || (takes_videos() && prompt_ids[i] == video_token_id_))
      in.embed_rows.push_back(static_cast<int64_t>(i));
  }
  if (static_cast<int64_t>(in.embed_rows.size()) != expected)
    return InvalidArgument("the prompt holds " + std::to_string(in.embed_rows.size()) +
                           " image and video placeholder tokens, but its images and videos need " +
                           std::to_string(expected));
  std::vector<EncoderJob> jobs;  // every image and video frame in prompt order
  bool all_cached = true;
  for (PreparedMedia& m : media) {
    bool item_cached = true;  // an item counts as a hit when all its images are
    for (PreparedImage& image : m.images) {
      EncoderJob job{std::move(image), {}, nullptr};
      if (cache_) {
        job.digest = DigestSlices(job.image.slices, job.image.patches_per_token);
        job.cached = cache_->Find(job.digest);
      }
      if (job.cached) job.image.slices.clear();
      item_cached = item_cached && job.cached;
      jobs.push_back(std::move(job));
    }
    if (cache_) cache_->CountQuery(item_cached);
    all_cached = all_cached && item_cached;
  }
  if (cache_ && all_cached) {  // nothing to encode: the request need not queue for the tower
    for (const EncoderJob& job : jobs) {
      in.embeds.insert(in.embeds.end(), job.cached->begin(), job.cached->end());
    }
    return in;
  }
  auto shared = std::make_shared<SharedEncoding>(encoder_, cache_, std::move(jobs));
  in.encode = [shared](ThreadPool& pool, std::vector<float>* embeds) { return shared->Next(pool, embeds); };
  return in;
}

StatusOr<MultimodalPrompt> ImageProcessor::Tokenize(const Tokenizer& tokenizer, const std::string& text,
                                                    const std::vector<MediaRef>& refs, bool add_special_tokens,
                                                    int64_t max_model_len) const {
  std::vector<PreparedMedia> media;
  PlaceholderBudget budget(max_model_len);
  // vLLM fetches a request's media together (asyncio.gather): up to kParallelFetches http(s)
  // downloads run ahead of the item being decoded, which are decoded in order as before. Each
  // runs on a detached thread with its own copy of the options, so an error answers at once
  // (a download still running ends by itself, within its timeout).
  constexpr size_t kParallelFetches = 8;
  std::vector<std::future<StatusOr<std::string>>> fetches(refs.size());
  size_t next_fetch = 0;
  const auto start_fetches = [&](size_t upto) {
    for (; next_fetch < refs.size() && next_fetch < upto; ++next_fetch) {
      const MediaRef& r = refs[next_fetch];
      const bool video = r.kind != MediaKind::kImage;
      if (!IsHttpUrl(r.url) || (video && !takes_videos())) continue;  // refused unfetched
      auto done = std::make_shared<std::promise<StatusOr<std::string>>>();
      fetches[next_fetch] = done->get_future();
      std::thread([done, url = r.url, media = media_, part = video ? "video_url" : "image_url"] {
        done->set_value(FetchMediaBytes(url, media, part));
      }).detach();
    }
  };
  for (size_t i = 0; i < refs.size(); ++i) {
    start_fetches(i + kParallelFetches);
    std::optional<StatusOr<std::string>> bytes;
    if (fetches[i].valid()) bytes.emplace(fetches[i].get());
    CPM_ASSIGN_OR_RETURN(PreparedMedia m, Load(refs[i], &budget, bytes ? &*bytes : nullptr));
    media.push_back(std::move(m));
  }
  CPM_ASSIGN_OR_RETURN(std::string expanded, Expand(text, media));
  MultimodalPrompt p;
  p.ids = tokenizer.Encode(expanded, add_special_tokens);
  CPM_ASSIGN_OR_RETURN(p.inputs, Bind(p.ids, std::move(media)));
  return p;
}

}  // namespace cpm
