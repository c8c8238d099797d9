// The model half of a tokenizer: encodes text that holds no added token and knows the base
// vocabulary. Two implementations: tokenizer.json's pipeline (hf_backend) and a
// SentencePiece tokenizer.model (sentencepiece_backend).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cpm {

// Token ids index dense tables, so a tokenizer file's ids must lie in [0, kMaxTokenId): above
// any real vocabulary (MiniCPM-V-4.6 has 248k ids; HF's are u32), below an allocation that hurts.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

class AddedVocabulary;

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Appends the ids of `text` (valid UTF-8, no raw-text added token in it). `at_start`: the
  // segment begins the whole input. `added` supplies tokens matched after normalization.
  // Thread-safe.
  virtual void EncodeSegment(std::string_view text, bool at_start, const AddedVocabulary& added,
                             std::vector<int32_t>* ids) const = 0;
  // One past the largest id of the base vocabulary.
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> PieceToId(std::string_view piece) const = 0;
  // The vocabulary string of `id`; empty when the id is unknown.
  virtual std::string IdToPiece(int32_t id) const = 0;
};

}  // namespace cpm
