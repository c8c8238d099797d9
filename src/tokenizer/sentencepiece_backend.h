// A SentencePiece tokenizer.model as the model half of a tokenizer (used when a model dir has
// no tokenizer.json), through Debian's libsentencepiece, which defines its behaviour.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "tokenizer/tokenizer_backend.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace cpm {

class SentencePieceBackend : public TokenizerBackend {
 public:
  static StatusOr<std::unique_ptr<SentencePieceBackend>> Load(const std::string& path);
  ~SentencePieceBackend() override;

  void EncodeSegment(std::string_view text, bool at_start, const AddedVocabulary& added,
                     std::vector<int32_t>* ids) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> PieceToId(std::string_view piece) const override;
  std::string IdToPiece(int32_t id) const override;
  // Whether the model prepends "▁" to the input (normalizer_spec.add_dummy_prefix); decoding
  // then strips one leading space.
  bool adds_dummy_prefix() const { return adds_dummy_prefix_; }

 private:
  SentencePieceBackend() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  bool adds_dummy_prefix_ = false;
};

}  // namespace cpm
