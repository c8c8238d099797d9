#include "sampling/logits_rules.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace cpm {
namespace {

constexpr float kBanned = -std::numeric_limits<float>::infinity();

void KeepAllowed(const std::vector<int32_t>& allowed, float* row, int64_t vocab) {
  thread_local std::vector<uint8_t> keep;
  keep.assign(static_cast<size_t>(vocab), 0);
  for (int32_t t : allowed) {
    if (t >= 0 && t < vocab) keep[static_cast<size_t>(t)] = 1;
  }
  for (int64_t t = 0; t < vocab; ++t) {
    if (!keep[static_cast<size_t>(t)]) row[t] = kBanned;
  }
}

// Bans each word's last token where the output ends with the rest of it.
void BanBadWords(const std::vector<std::vector<int32_t>>& words,
                 std::span<const int32_t> output, float* row, int64_t vocab) {
  for (const std::vector<int32_t>& word : words) {
    if (word.empty() || word.size() > output.size() + 1) continue;
    const size_t prefix = word.size() - 1;
    if (std::equal(word.begin(), word.end() - 1, output.end() - static_cast<ptrdiff_t>(prefix))) {
      const int32_t last = word.back();
      if (last >= 0 && last < vocab) row[last] = kBanned;
    }
  }
}

}  // namespace

void ApplyLogitsRules(const LogitsRules& rules, std::span<const int32_t> output, float* row,
                      int64_t vocab) {
  if (!rules.allowed_token_ids.empty()) KeepAllowed(rules.allowed_token_ids, row, vocab);
  BanBadWords(rules.bad_words, output, row, vocab);
  for (const auto& [token, bias] : rules.logit_bias) {
    if (token >= 0 && token < vocab) row[token] += bias;
  }
}

}  // namespace cpm
