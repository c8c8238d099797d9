// Greedy-decode agreement arithmetic (prefix matching, rates).
#include "eval/greedy_metrics.h"

#include <algorithm>
#include <fmt/format.h>

namespace cpm {

GreedyComparison CompareGreedy(std::span<const int32_t> ref, std::span<const int32_t> eng) {
  GreedyComparison c;
  const size_t common = std::min(ref.size(), eng.size());
  size_t i = 0;
  while (i < common && ref[i] == eng[i]) ++i;
  c.matched = static_cast<int64_t>(i);
  c.length = static_cast<int64_t>(std::max(ref.size(), eng.size()));
  c.exact = ref.size() == eng.size() && i == ref.size();
  if (!c.exact) c.first_divergence = c.matched;
  c.token_accuracy = c.length == 0 ? 1.0 : static_cast<double>(c.matched) / c.length;
  return c;
}

GreedySummary SummarizeGreedy(std::span<const GreedyComparison> rows) {
  GreedySummary s;
  s.prompts = static_cast<int64_t>(rows.size());
  if (rows.empty()) return s;
  double acc = 0;
  for (const GreedyComparison& c : rows) {
    s.exact += c.exact ? 1 : 0;
    acc += c.token_accuracy;
  }
  s.exact_rate = static_cast<double>(s.exact) / s.prompts;
  s.mean_token_accuracy = acc / s.prompts;
  return s;
}

std::vector<std::string> CheckGreedyBounds(const GreedySummary& s, const GreedyBounds& b) {
  std::vector<std::string> fails;
  if (s.prompts == 0) {
    if (b.any()) fails.push_back("no prompts compared");
    return fails;
  }
  if (b.min_exact_rate && !(s.exact_rate >= *b.min_exact_rate))
    fails.push_back(fmt::format("exact-match rate {:.4f} < {}", s.exact_rate, *b.min_exact_rate));
  if (b.min_token_accuracy && !(s.mean_token_accuracy >= *b.min_token_accuracy))
    fails.push_back(fmt::format("mean token accuracy {:.4f} < {}", s.mean_token_accuracy,
                                *b.min_token_accuracy));
  return fails;
}

}  // namespace cpm
