// The tokenizer of a Hugging Face model directory: text <-> token ids exactly as transformers'
// `tokenizer(text)` / `tokenizer.decode(ids)` do, plus the settings the server needs (special
// ids, chat template). All const methods are thread-safe (HTTP threads tokenize in parallel).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/tokenizer_backend.h"

namespace cpm {

class Tokenizer {
 public:
  // Loads `model_dir`: tokenizer.json when present, else tokenizer.model (SentencePiece) with
  // tokenizer_config.json's added_tokens_decoder on top; then tokenizer_config.json,
  // chat_template.jinja (wins over the config's template) and generation_config.json. Errors
  // name the file and field.
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_dir);

  // Token ids of `text`. Added and special token strings in the text become single tokens.
  // With `add_special_tokens` the post-processor adds BOS/EOS as the tokenizer says. Input
  // that is not valid UTF-8 is repaired first (each bad sequence becomes U+FFFD).
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = true) const;
  // Text of `ids` (unknown ids are skipped), like HF decode.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // Max id + 1 over the base vocabulary and the added tokens.
  int32_t vocab_size() const { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The raw vocabulary string ("▁world", "Ġworld", "<|im_end|>"); empty for unknown ids.
  std::string IdToToken(int32_t id) const;
  // The bytes this token adds to decoded text (may be part of a UTF-8 sequence).
  std::string TokenBytes(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // An added token (tokenizer.json's added_tokens, special or not: <think>, <|im_end|>, ...).
  bool IsAdded(int32_t id) const;

  std::optional<int32_t> bos_id() const { return bos_id_; }
  // Tokenizer eos plus generation_config.json's eos_token_id(s), without duplicates.
  std::vector<int32_t> eos_ids() const { return eos_ids_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  const std::string& chat_template() const { return chat_template_; }
  std::string bos_token() const { return bos_token_; }
  std::string eos_token() const { return eos_token_; }

 private:
  friend class TokenizerLoader;
  Tokenizer() = default;

  std::unique_ptr<TokenizerBackend> backend_;
  AddedVocabulary added_;
  PostProcessor post_processor_{{}, {}};
  std::unique_ptr<Decoder> decoder_;
  bool clean_up_tokenization_spaces_ = false;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> pad_id_;
  std::vector<int32_t> eos_ids_;
  std::string bos_token_;
  std::string eos_token_;
  std::string chat_template_;
};

}  // namespace cpm
