// tokenizer.json encoding pipeline (see hf_backend.h).
#include "tokenizer/hf_backend.h"

#include <nlohmann/json.hpp>

#include "tokenizer/added_vocabulary.h"

namespace cpm {

StatusOr<std::unique_ptr<HfBackend>> HfBackend::FromJson(
    const nlohmann::json& root, const std::optional<std::string>& split_regex_override) {
  std::unique_ptr<HfBackend> b(new HfBackend());
  auto field = [&](const char* key) { return root.contains(key) ? root[key] : nlohmann::json(); };
  CPM_ASSIGN_OR_RETURN(b->normalizer_, ParseNormalizer(field("normalizer")));
  CPM_ASSIGN_OR_RETURN(b->pre_tokenizer_, ParsePreTokenizer(field("pre_tokenizer"),
                                                            split_regex_override));
  if (!root.contains("model")) return InvalidArgument("missing field 'model'");
  CPM_ASSIGN_OR_RETURN(b->model_, BpeModel::FromJson(root["model"]));
  return b;
}

void HfBackend::EncodeSegment(std::string_view text, bool at_start, const AddedVocabulary& added,
                              std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) normalizer_->Normalize(&normalized);
  if (!added.has_normalized()) {
    EncodeNormalized(std::move(normalized), at_start, ids);
    return;
  }
  std::vector<AddedVocabulary::Segment> segments;
  added.Split(normalized, /*normalized=*/true, &segments);
  for (const auto& s : segments) {
    if (s.id >= 0) {
      ids->push_back(s.id);
    } else {
      EncodeNormalized(std::string(s.text), at_start && s.text.data() == normalized.data(), ids);
    }
  }
}

void HfBackend::EncodeNormalized(std::string text, bool at_start,
                                 std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (pre_tokenizer_ == nullptr) {
    model_->Encode(text, ids);
    return;
  }
  std::vector<std::string> pieces;
  pieces.push_back(std::move(text));
  pre_tokenizer_->PreTokenize(&pieces, at_start);
  for (const auto& p : pieces) model_->Encode(p, ids);
}

}  // namespace cpm
