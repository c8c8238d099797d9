// SentencePiece tokenizer.model backend (see sentencepiece_backend.h).
#include "tokenizer/sentencepiece_backend.h"

#include <sentencepiece_processor.h>

namespace cpm {

StatusOr<std::unique_ptr<SentencePieceBackend>> SentencePieceBackend::Load(
    const std::string& path) {
  std::unique_ptr<SentencePieceBackend> b(new SentencePieceBackend());
  b->sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto st = b->sp_->Load(path);
  if (!st.ok()) return DataLoss(path + ": " + st.ToString());
  // The proto's normalizer_spec is not exposed without protobuf headers; probe it instead.
  std::vector<std::string> pieces;
  if (b->sp_->Encode("a", &pieces).ok() && !pieces.empty()) {
    b->adds_dummy_prefix_ = pieces[0].rfind("\xE2\x96\x81", 0) == 0;
  }
  return b;
}

SentencePieceBackend::~SentencePieceBackend() = default;

void SentencePieceBackend::EncodeSegment(std::string_view text, bool, const AddedVocabulary&,
                                         std::vector<int32_t>* ids) const {
  std::vector<int> out;
  if (!sp_->Encode(text, &out).ok()) return;
  ids->insert(ids->end(), out.begin(), out.end());
}

int32_t SentencePieceBackend::vocab_size() const { return sp_->GetPieceSize(); }

std::optional<int32_t> SentencePieceBackend::PieceToId(std::string_view piece) const {
  const int id = sp_->PieceToId(piece);
  // Unknown pieces map to the unk id; tell them apart from the unk piece itself.
  if (id < 0 || sp_->IdToPiece(id) != piece) return std::nullopt;
  return id;
}

std::string SentencePieceBackend::IdToPiece(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return std::string();
  return sp_->IdToPiece(id);
}

}  // namespace cpm
