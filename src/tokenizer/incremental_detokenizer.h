// Streaming detokenization for one sequence: turns generated ids into text deltas that never
// end inside a UTF-8 code point (incomplete byte-fallback / byte-level sequences are held back).
// Not thread-safe: one instance per request, owned by whoever streams it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace cpm {

// Decodes a sliding window of ids, as vLLM's detokenizer does with prefix/read offsets: the
// text of ids[prefix, read) was already emitted; a new id is emitted as the part of
// Decode(ids[prefix, end)) beyond Decode(ids[prefix, read)) once it does not end in U+FFFD.
// Decoding both windows from the same first token cancels the decoders' first-token effects
// (Strip, Metaspace's leading space). Without prompt ids the concatenated output equals
// Decode(generated ids) for ids that end on a whole character; with them it equals the text
// the generated ids add after the prompt (so a SentencePiece "▁world" keeps its space, and a
// character begun in the prompt is emitted whole). As in vLLM, bytes still held back when
// generation ends (an unfinished character) are never emitted, and ill-formed byte sequences
// come out as U+FFFD, though not necessarily as many as a one-shot Decode would print.
class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `prompt_ids` (optional) gives decoding context.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const int32_t> prompt_ids = {});

  // Adds one generated id; returns the text that became complete (often empty).
  std::string Push(int32_t id);

 private:
  std::string Advance();

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the prompt's priming suffix, then the generated ids
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
};

}  // namespace cpm
