// tokenizer.json pre-tokenizers (Split, ByteLevel, Metaspace, Digits, WhitespaceSplit,
// Sequence): cut a normalized segment into the words the BPE model sees, rewriting bytes into
// the model's alphabet where the scheme asks for it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cpm {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenization. `at_start` says the first piece begins the
  // whole input (Metaspace's prepend_scheme "first" prepends only there).
  virtual void PreTokenize(std::vector<std::string>* pieces, bool at_start) const = 0;
};

// Builds the pre-tokenizer of a tokenizer.json "pre_tokenizer" object (null gives nullptr).
// `split_regex_override` (tokenizer_config.json's `pretokenize_regex`) replaces the pattern of
// every regex Split.
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(
    const nlohmann::json& j, const std::optional<std::string>& split_regex_override);

}  // namespace cpm
