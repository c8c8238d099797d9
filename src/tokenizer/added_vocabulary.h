// Added tokens (special and not) of a tokenizer: matched in the text before the model runs, as
// HF's AddedVocabulary does (leftmost-longest, honouring lstrip/rstrip/single_word and whether a
// token is matched on raw or normalized text).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace cpm {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched after normalization instead of on the raw text
  bool single_word = false;
};

class AddedVocabulary {
 public:
  // A piece of input: plain text to tokenize (`id` == -1) or one added token.
  struct Segment {
    std::string_view text;
    int32_t id = -1;
  };

  // Adds `token` unless a token with the same content exists (the first definition wins).
  // Returns false when it was already present.
  bool Add(const AddedToken& token);

  // Splits `text` on the tokens whose `normalized` flag equals `normalized`, appending segments.
  void Split(std::string_view text, bool normalized, std::vector<Segment>* out) const;

  const AddedToken* FindById(int32_t id) const;
  const AddedToken* FindByContent(std::string_view content) const;
  bool has_normalized() const { return has_normalized_; }
  int32_t max_id() const { return max_id_; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  // Candidates per first byte, longest first, so the first hit is the longest match.
  std::array<std::vector<size_t>, 256> by_first_byte_;
  bool has_normalized_ = false;
  int32_t max_id_ = -1;
};

}  // namespace cpm
