// The prompts of `cpmserve eval dump`: a file of plain-text lines or JSON objects, turned into
// token ids with the model's tokenizer (optionally through its chat template) exactly as the
// transformers dump script does, so both producers feed the model the same ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

class Tokenizer;

struct PromptSpec {
  std::string id;
  std::optional<std::string> text;
  std::optional<std::vector<int32_t>> ids;  // given ids win over text
  std::optional<bool> chat;                 // per-line override of --chat
};

// Each non-blank line is either a JSON object ({"id"?, "prompt"?, "prompt_ids"?, "chat"?}; a
// reference dump is therefore a valid prompts file) or, when it does not start with '{', the
// prompt text itself. Lines without an id get "p<index>".
StatusOr<std::vector<PromptSpec>> ReadPromptsFile(const std::string& path);

struct PreparedPrompt {
  std::string id;
  std::optional<std::string> text;
  std::vector<int32_t> ids;
  bool chat = false;
};

// Text prompts: with chat, render [{"role": "user", "content": text}] with the tokenizer's chat
// template and add_generation_prompt, then encode without special tokens (the template carries
// them, as apply_chat_template(tokenize=True)); without chat, encode with special tokens (BOS),
// as tokenizer(text). `tokenizer` may be null when every prompt gives ids.
StatusOr<std::vector<PreparedPrompt>> PreparePrompts(const std::vector<PromptSpec>& specs,
                                                     const Tokenizer* tokenizer, bool chat);

}  // namespace cpm
