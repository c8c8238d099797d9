#include "sampling/thinking_budget.h"

#include <gtest/gtest.h>

#include <vector>

namespace cpm {
namespace {

constexpr int32_t kStart = 90, kEnd = 91;

ThinkingBudget Budget(int64_t n, std::vector<int32_t> end = {kEnd}) {
  return ThinkingBudget{n, {kStart}, std::move(end)};
}

// Generates with the state's forced tokens, taking `free` for every free draw; returns the
// output after `steps` draws.
std::vector<int32_t> Generate(const ThinkingBudget& b, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& free, int steps) {
  ThinkingBudgetState s(b, prompt);
  std::vector<int32_t> out;
  size_t next_free = 0;
  for (int i = 0; i < steps; ++i) {
    const int32_t forced = s.Next(b, out);
    out.push_back(forced >= 0 ? forced : free[next_free++ % free.size()]);
  }
  return out;
}

TEST(ThinkingBudget, APromptOpenSectionGetsBudgetTokensThenTheEndMarker) {
  // The prompt ends inside <think> with one token after it (the template's "\n"): that one
  // does not count, the output's do.
  const std::vector<int32_t> prompt = {1, 2, kStart, 5};
  EXPECT_EQ(Generate(Budget(3), prompt, {7}, 6), (std::vector<int32_t>{7, 7, 7, kEnd, 7, 7}));
}

TEST(ThinkingBudget, ZeroBudgetClosesTheSectionAtOnce) {
  EXPECT_EQ(Generate(Budget(0), {kStart}, {7}, 3), (std::vector<int32_t>{kEnd, 7, 7}));
}

TEST(ThinkingBudget, AClosedOrAbsentSectionIsNeverCapped) {
  EXPECT_EQ(Generate(Budget(1), {kStart, 4, kEnd, 6}, {7}, 4), (std::vector<int32_t>(4, 7)));
  EXPECT_EQ(Generate(Budget(1), {3, 4}, {7}, 4), (std::vector<int32_t>(4, 7)));
}

TEST(ThinkingBudget, SectionsTheOutputOpensGetAFreshBudgetEach) {
  // Free draws: think, 3 tokens (capped at 2), then the answer opens another section.
  const std::vector<int32_t> free = {kStart, 5, 5, 6, kStart, 8, 8, 8};
  EXPECT_EQ(Generate(Budget(2), {1}, free, 10),
            (std::vector<int32_t>{kStart, 5, 5, kEnd, 6, kStart, 8, 8, kEnd, 8}));
}

TEST(ThinkingBudget, AnEndMarkerTheModelGeneratesClosesTheSection) {
  // It closes within budget: nothing forced, later tokens are answer.
  EXPECT_EQ(Generate(Budget(3), {kStart}, {5, kEnd, 6, 6, 6}, 5),
            (std::vector<int32_t>{5, kEnd, 6, 6, 6}));
}

TEST(ThinkingBudget, AMultiTokenEndMarkerIsForcedTokenByToken) {
  const ThinkingBudget b = Budget(1, {91, 92, 93});
  EXPECT_EQ(Generate(b, {kStart}, {5}, 6), (std::vector<int32_t>{5, 91, 92, 93, 5, 5}));
}

TEST(ThinkingBudget, ReadsOnlyTheTokensItHasNotSeen) {
  // Next() may be asked again for the same output (a preempted step redone): same answer.
  const ThinkingBudget b = Budget(1);
  ThinkingBudgetState s(b, std::vector<int32_t>{kStart});
  const std::vector<int32_t> out = {5};
  EXPECT_EQ(s.Next(b, out), kEnd);
  EXPECT_EQ(s.Next(b, out), kEnd);
  EXPECT_EQ(s.count(), 0);
  EXPECT_FALSE(s.in_section());
}

}  // namespace
}  // namespace cpm
