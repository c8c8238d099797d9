// tokenizer.json decoders (Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel, Sequence):
// turn token strings back into text exactly as HF's decode_chain does, and give the raw bytes a
// single token contributes (for logprob `bytes` fields).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cpm {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF's decode_chain: rewrites the token strings (may merge them).
  virtual void DecodeChain(std::vector<std::string>* tokens) const = 0;
  // The bytes one token stands for, ignoring position effects (Strip, first-token space) and
  // without UTF-8 repair, so a byte token yields its single raw byte.
  virtual void RawBytes(std::string* token) const = 0;
};

// Builds the decoder of a tokenizer.json "decoder" object (null gives nullptr: tokens are
// joined as they are).
StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j);

// The SentencePiece decoder HF derives for a tokenizer.model: Replace("▁", " "), ByteFallback,
// Fuse, and Strip(" ", 1, 0) only when the model adds a dummy prefix.
std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space);

// Runs `decoder` (or a join with spaces when null, as HF) over `tokens` and returns the text.
std::string RunDecoder(const Decoder* decoder, std::vector<std::string> tokens);

}  // namespace cpm
