// Writes small but realistic tokenizer files for tiny test checkpoints: the two tokenizer
// families of the mission models, with their real special tokens, configs and chat templates.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace cpm {

enum class TinyTokenizerFamily {
  // MiniCPM4-like: BPE with byte fallback and "▁" for spaces (no dummy prefix), <unk> <s> </s>,
  // <0x00>..<0xFF>, learned merges, then MiniCPM4's added tokens; add_bos_token true.
  kSentencePieceBpe,
  // MiniCPM-V-4.6 / Qwen3.5-like: byte-level BPE with the Qwen3.5 split regex and NFC, learned
  // merges, then the model's special tokens (<think> and <tool_call> pairs non-special).
  kByteLevelBpe,
  kCount,
};

const char* ToString(TinyTokenizerFamily family);

// Writes tokenizer.json, tokenizer_config.json and generation_config.json (plus
// chat_template.jinja for kByteLevelBpe) into `dir`, which must exist. The output is identical
// on every run. `vocab_size_out` (optional) receives max id + 1 (under 1000).
Status WriteTinyTokenizer(const std::string& dir, TinyTokenizerFamily family,
                          int32_t* vocab_size_out);

}  // namespace cpm
