// Agreement of a greedy continuation with the reference's: exact match, the first divergence,
// and the seed document's "Token 准确率" (the matching prefix over the continuation length).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cpm {

struct GreedyComparison {
  bool exact = false;  // identical id sequences
  // 0-based index of the first differing token (also the length of the common prefix); unset
  // when the sequences are identical. A sequence that ends early (EOS) diverges where it ends.
  std::optional<int64_t> first_divergence;
  int64_t matched = 0;  // common prefix length
  int64_t length = 0;   // max(len(ref), len(eng)): the denominator
  // matched / length: the seed's 62.50% is a divergence at index 20 of 32 tokens (20/32).
  // Everything after the first divergence counts as wrong, even tokens that happen to agree
  // again, because they are conditioned on different histories. 1.0 when both are empty.
  double token_accuracy = 1.0;
};

GreedyComparison CompareGreedy(std::span<const int32_t> ref, std::span<const int32_t> eng);

struct GreedySummary {
  int64_t prompts = 0;
  int64_t exact = 0;
  double exact_rate = 0;          // exact / prompts
  double mean_token_accuracy = 0;  // mean over prompts (the seed's "平均 Token 准确率")
};

GreedySummary SummarizeGreedy(std::span<const GreedyComparison> rows);

struct GreedyBounds {
  std::optional<double> min_exact_rate;
  std::optional<double> min_token_accuracy;  // against the mean
  bool any() const { return min_exact_rate || min_token_accuracy; }
};

std::vector<std::string> CheckGreedyBounds(const GreedySummary& s, const GreedyBounds& b);

}  // namespace cpm
