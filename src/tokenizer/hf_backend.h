// tokenizer.json's encoding pipeline below the added tokens: normalizer, then pre-tokenizer,
// then the BPE model, word by word.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_backend.h"

namespace cpm {

class HfBackend : public TokenizerBackend {
 public:
  // `root` is the whole tokenizer.json; `split_regex_override` replaces Split patterns.
  static StatusOr<std::unique_ptr<HfBackend>> FromJson(
      const nlohmann::json& root, const std::optional<std::string>& split_regex_override);

  void EncodeSegment(std::string_view text, bool at_start, const AddedVocabulary& added,
                     std::vector<int32_t>* ids) const override;
  int32_t vocab_size() const override { return model_->vocab_size(); }
  std::optional<int32_t> PieceToId(std::string_view piece) const override {
    return model_->TokenToId(piece);
  }
  std::string IdToPiece(int32_t id) const override { return model_->IdToToken(id); }

 private:
  void EncodeNormalized(std::string text, bool at_start, std::vector<int32_t>* ids) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
};

}  // namespace cpm
