// Encode/decode of Tokenizer (see tokenizer.h); loading lives in tokenizer_loader.cc.
#include "tokenizer/tokenizer.h"

#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

// transformers' clean_up_tokenization: drop the space before punctuation and contractions.
void CleanUpTokenization(std::string* text) {
  static constexpr std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string f(from), t(to);
    for (size_t p = text->find(f); p != std::string::npos; p = text->find(f, p + t.size())) {
      text->replace(p, f.size(), t);
    }
  }
}

}  // namespace

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = Utf8Lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Segment> segments;
  added_.Split(text, /*normalized=*/false, &segments);
  for (const auto& s : segments) {
    if (s.id >= 0) {
      ids.push_back(s.id);
    } else {
      backend_->EncodeSegment(s.text, s.text.data() == text.data(), added_, &ids);
    }
  }
  if (add_special_tokens) post_processor_.Apply(&ids);
  return ids;
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* a = added_.FindById(id)) {
      if (!(skip_special_tokens && a->special)) tokens.push_back(a->content);
      continue;
    }
    std::string piece = backend_->IdToPiece(id);
    if (!piece.empty()) tokens.push_back(std::move(piece));
  }
  std::string text = RunDecoder(decoder_.get(), std::move(tokens));
  if (clean_up_tokenization_spaces_) CleanUpTokenization(&text);
  return text;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* a = added_.FindByContent(token)) return a->id;
  return backend_->PieceToId(token);
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (const AddedToken* a = added_.FindById(id)) return a->content;
  return backend_->IdToPiece(id);
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (const AddedToken* a = added_.FindById(id)) return a->content;
  std::string piece = backend_->IdToPiece(id);
  if (decoder_ != nullptr) decoder_->RawBytes(&piece);
  return piece;
}

bool Tokenizer::IsAdded(int32_t id) const { return added_.FindById(id) != nullptr; }

bool Tokenizer::IsSpecial(int32_t id) const {
  const AddedToken* a = added_.FindById(id);
  return a != nullptr && a->special;
}

}  // namespace cpm
