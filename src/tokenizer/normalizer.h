// tokenizer.json normalizers (Sequence, Prepend, Replace, NFC/NFD/NFKC/NFKD, Lowercase, Strip,
// empty Precompiled): rewrite one text segment in place before pre-tokenization.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cpm {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string* text) const = 0;
};

// Builds the normalizer described by a tokenizer.json "normalizer" object. A null JSON value
// gives nullptr (no normalization).
StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j);

}  // namespace cpm
