// From image URLs to encoder jobs (see image_processor.h).
#include "multimodal/image_processor.h"

#include <filesystem>
#include <mutex>

#include <nlohmann/json.hpp>

#include "io/mmap_file.h"
#include "multimodal/image.h"

namespace cpm {
namespace {

// Encodes a request's images once, one piece (about one encoder layer) per call, whichever of
// its choices' requests the engine calls it for; every choice gets the whole result.
class SharedEncoding {
 public:
  SharedEncoding(std::shared_ptr<VisionEncoder> encoder, std::vector<PreparedImage> images)
      : encoder_(std::move(encoder)), images_(std::move(images)), done_(images_.empty()) {}

  StatusOr<bool> Next(ThreadPool& pool, std::vector<float>* embeds) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok() && !done_) {
      status_ = EncodeOneSlice(pool);
      done_ = image_ == images_.size();
      if (done_) images_.clear();  // the pixels are not needed any more
    }
    CPM_RETURN_IF_ERROR(status_);
    if (!done_) return false;
    *embeds = embeds_;
    return true;
  }

 private:
  // One piece of the next slice in prompt order (image by image, thumbnail first); its rows
  // are appended to embeds_ when the slice is done.
  Status EncodeOneSlice(ThreadPool& pool) {
    const PixelSlice& s = images_[image_].slices[slice_];
    if (progress_.stage == 0) {
      const int64_t rows = encoder_->OutputRows(s.size.height, s.size.width);
      slice_out_.assign(static_cast<size_t>(rows * encoder_->output_dim()), 0.0f);
    }
    CPM_ASSIGN_OR_RETURN(bool done, encoder_->EncodeSlicePiece(s.pixels.data(), s.size.height, s.size.width,
                                                                slice_out_.data(), &progress_, pool));
    if (!done) return OkStatus();
    embeds_.insert(embeds_.end(), slice_out_.begin(), slice_out_.end());
    progress_ = VisionProgress();
    if (++slice_ == images_[image_].slices.size()) slice_ = 0, ++image_;
    return OkStatus();
  }

  std::mutex mu_;
  std::shared_ptr<VisionEncoder> encoder_;
  std::vector<PreparedImage> images_;
  size_t image_ = 0, slice_ = 0;  // the slice being encoded
  VisionProgress progress_;       // ... how far it is
  std::vector<float> slice_out_;  // ... its rows
  bool done_;
  Status status_;
  std::vector<float> embeds_;
};

StatusOr<int32_t> ReadImageTokenId(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto it = j.is_object() ? j.find("image_token_id") : j.end();
  if (it == j.end() || !it->is_number_integer())
    return InvalidArgument(path + ": field 'image_token_id' must be an integer");
  return it->get<int32_t>();
}

}  // namespace

StatusOr<std::unique_ptr<ImageProcessor>> ImageProcessor::Create(const std::string& model_dir,
                                                                 std::shared_ptr<VisionEncoder> encoder,
                                                                 MediaOptions media,
                                                                 const std::string& mm_processor_kwargs) {
  auto p = std::make_unique<ImageProcessor>();
  const std::filesystem::path pre = std::filesystem::path(model_dir) / "preprocessor_config.json";
  if (std::filesystem::exists(pre)) {
    CPM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(pre.string()));
    CPM_ASSIGN_OR_RETURN(p->slices_, ParseSliceConfig(text, pre.string()));
  }
  CPM_RETURN_IF_ERROR(ApplySliceOverrides(mm_processor_kwargs, "--mm-processor-kwargs", &p->slices_));
  CPM_ASSIGN_OR_RETURN(p->image_token_id_, ReadImageTokenId(model_dir));
  // The placeholder count per slice must be what the encoder gives for it.
  const int64_t unit = 4 * p->slices_.patch_size;
  if (encoder->OutputRows(unit, unit) != SliceTokens({unit, unit}, p->slices_))
    return InvalidArgument(pre.string() + ": patch_size / downsample_mode disagree with config.json's vision_config");
  p->encoder_ = std::move(encoder);
  p->media_ = std::move(media);
  return p;
}

StatusOr<PreparedImage> ImageProcessor::Load(const std::string& url) const {
  CPM_ASSIGN_OR_RETURN(std::string bytes, FetchImageBytes(url, media_));
  // As vLLM loads request images: an RGBA image is pasted over white, other modes drop alpha.
  CPM_ASSIGN_OR_RETURN(RgbImage image, DecodeImage(bytes, AlphaPolicy::kVllmWhiteBackground));
  PreparedImage p;
  p.plan = PlanSlices({image.height, image.width}, slices_);
  CPM_RETURN_IF_ERROR(CheckPlan(p.plan, {image.height, image.width}, slices_));
  p.slices = MakeSlices(image, p.plan, slices_);
  return p;
}

StatusOr<std::string> ImageProcessor::Expand(const std::string& prompt,
                                             const std::vector<PreparedImage>& images) const {
  const std::string pad = kPadText;
  std::string out;
  size_t from = 0, k = 0;
  for (size_t at; (at = prompt.find(pad, from)) != std::string::npos; from = at + pad.size(), ++k) {
    if (k >= images.size()) break;
    out.append(prompt, from, at - from);
    out += PlaceholderText(images[k].plan, static_cast<int64_t>(k), slices_, pad);
  }
  if (k != images.size() || prompt.find(pad, from) != std::string::npos)
    return InvalidArgument("the prompt has a different number of " + pad + " placeholders than the " +
                           std::to_string(images.size()) + " image(s) of the request");
  out.append(prompt, from, std::string::npos);
  return out;
}

StatusOr<MultimodalInputs> ImageProcessor::Bind(const std::vector<int32_t>& prompt_ids,
                                                std::vector<PreparedImage> images) const {
  int64_t expected = 0;
  for (const PreparedImage& image : images) expected += ImageTokens(image.plan, slices_);
  MultimodalInputs in;
  for (size_t i = 0; i < prompt_ids.size(); ++i) {
    if (prompt_ids[i] == image_token_id_) in.embed_rows.push_back(static_cast<int64_t>(i));
  }
  if (static_cast<int64_t>(in.embed_rows.size()) != expected)
    return InvalidArgument("the prompt holds " + std::to_string(in.embed_rows.size()) +
                           " image placeholder tokens, but its images need " + std::to_string(expected));
  auto shared = std::make_shared<SharedEncoding>(encoder_, std::move(images));
  in.encode = [shared](ThreadPool& pool, std::vector<float>* embeds) { return shared->Next(pool, embeds); };
  return in;
}

StatusOr<MultimodalPrompt> ImageProcessor::Tokenize(const Tokenizer& tokenizer, const std::string& text,
                                                    const std::vector<std::string>& urls,
                                                    bool add_special_tokens) const {
  std::vector<PreparedImage> images;
  for (const std::string& url : urls) {
    CPM_ASSIGN_OR_RETURN(PreparedImage image, Load(url));
    images.push_back(std::move(image));
  }
  CPM_ASSIGN_OR_RETURN(std::string expanded, Expand(text, images));
  MultimodalPrompt p;
  p.ids = tokenizer.Encode(expanded, add_special_tokens);
  CPM_ASSIGN_OR_RETURN(p.inputs, Bind(p.ids, std::move(images)));
  return p;
}

}  // namespace cpm
