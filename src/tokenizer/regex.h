// A compiled PCRE2 pattern (UTF + Unicode properties, JIT when available) used by Split
// pre-tokenizers and Replace normalizers. Immutable after Compile, so one instance serves many
// threads; each search allocates its own match data.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace cpm {

class Regex {
 public:
  // Compiles `pattern` (Oniguruma-style syntax as written in tokenizer.json; the constructs
  // real tokenizers use are PCRE-compatible). Errors name the offset of the bad construct.
  static StatusOr<std::unique_ptr<Regex>> Compile(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Calls `on_match(begin, end)` for each non-overlapping match in `text`, left to right.
  // `text` must be valid UTF-8 (callers repair input once at the API boundary).
  void ForEachMatch(std::string_view text,
                    const std::function<void(size_t, size_t)>& on_match) const;

 private:
  Regex() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace cpm
