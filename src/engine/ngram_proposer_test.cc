#include "engine/ngram_proposer.h"

#include <gtest/gtest.h>

#include <vector>

namespace cpm {
namespace {

SpeculativeConfig Config(int64_t k, int64_t min_n, int64_t max_n) {
  SpeculativeConfig c;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = min_n;
  c.prompt_lookup_max = max_n;
  return c;
}

using Ids = std::vector<int32_t>;

TEST(NgramProposer, ProposesWhatFollowedTheSuffixBefore) {
  // Suffix "1 2" occurred at the start, followed by 3 4 5.
  EXPECT_EQ(ProposeNgramDraft(Ids{1, 2, 3, 4, 5, 9, 1, 2}, Config(3, 2, 2), 8), (Ids{3, 4, 5}));
  // The draft stops at the end of the known tokens, and at max_draft.
  EXPECT_EQ(ProposeNgramDraft(Ids{7, 1, 2, 3, 1, 2}, Config(5, 2, 2), 8), (Ids{3, 1, 2}));
  EXPECT_EQ(ProposeNgramDraft(Ids{1, 2, 3, 4, 5, 9, 1, 2}, Config(3, 2, 2), 2), (Ids{3, 4}));
}

TEST(NgramProposer, TheLongestMatchWinsThenTheEarliest) {
  // "5 1 2" (3 tokens) matches at 4..6, "1 2" alone first at 0..1: the longer match decides.
  const Ids tokens = {1, 2, 8, 0, 5, 1, 2, 6, 5, 1, 2};
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(1, 1, 3), 4), Ids{6});
  // With the window capped at 2 the earliest "1 2" decides.
  EXPECT_EQ(ProposeNgramDraft(tokens, Config(1, 1, 2), 4), Ids{8});
}

TEST(NgramProposer, NothingBelowTheMinimumOrWithoutAMatch) {
  EXPECT_TRUE(ProposeNgramDraft(Ids{1, 2, 3, 9, 2, 3}, Config(2, 3, 4), 8).empty());
  EXPECT_TRUE(ProposeNgramDraft(Ids{1, 2, 3, 4}, Config(2, 1, 3), 8).empty());
  EXPECT_TRUE(ProposeNgramDraft(Ids{4}, Config(2, 1, 3), 8).empty());
  EXPECT_TRUE(ProposeNgramDraft(Ids{1, 1, 1}, Config(0, 1, 3), 8).empty());
  EXPECT_TRUE(ProposeNgramDraft(Ids{1, 1, 1}, Config(2, 1, 3), 0).empty());
}

TEST(NgramProposer, ARepeatedTokenProposesItsRun) {
  // A run of one token matches itself shifted (the occurrence overlaps the suffix); the
  // earliest occurrence leaves as many tokens after it as the run is longer than the match.
  EXPECT_EQ(ProposeNgramDraft(Ids{3, 7, 7, 7, 7}, Config(4, 2, 3), 8), Ids{7});
  EXPECT_EQ(ProposeNgramDraft(Ids{3, 7, 7, 7, 7}, Config(4, 2, 2), 8), (Ids{7, 7}));
}

}  // namespace
}  // namespace cpm
