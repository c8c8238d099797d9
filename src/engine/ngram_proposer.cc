#include "engine/ngram_proposer.h"

#include <algorithm>

namespace cpm {

int64_t SpeculativeStateSnapshots(const SpeculativeConfig& c, int64_t max_num_seqs) {
  if (!c.enabled()) return 0;
  return std::min(max_num_seqs, c.disable_by_batch_size > 0 ? c.disable_by_batch_size : 4);
}

std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> tokens, const SpeculativeConfig& c,
                                       int64_t max_draft) {
  const int64_t total = static_cast<int64_t>(tokens.size());
  const int64_t k = std::min(c.num_speculative_tokens, max_draft);
  if (k <= 0) return {};
  for (int64_t n = std::min(c.prompt_lookup_max, total - 1); n >= c.prompt_lookup_min; --n) {
    const auto suffix = tokens.last(static_cast<size_t>(n));
    // Occurrences ending before the last token, earliest first (they may overlap the suffix).
    for (int64_t s = 0; s + n < total; ++s) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + s)) continue;
      const int64_t start = s + n, len = std::min(k, total - start);
      return std::vector<int32_t>(tokens.begin() + start, tokens.begin() + start + len);
    }
  }
  return {};
}

}  // namespace cpm
