#include "server/beam_search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace cpm {
namespace {

constexpr int32_t kEos = 0, kA = 1, kB = 2, kC = 3;

// A toy model: the next-token distribution after each generated prefix (absent: uniform over
// A, B, C). Expansions are counted, and the k asked for is checked.
struct ToyModel {
  std::map<std::vector<int32_t>, std::map<int32_t, double>> next;
  int calls = 0;
  int width = 0;

  ExpandBeams Expand() {
    return [this](const std::vector<const std::vector<int32_t>*>& beams, int k) {
      EXPECT_EQ(k, 2 * width);
      ++calls;
      std::vector<TokenLogprobs> out;
      for (const std::vector<int32_t>* b : beams) {
        std::map<int32_t, double> dist = {{kA, 1.0 / 3}, {kB, 1.0 / 3}, {kC, 1.0 / 3}};
        if (auto it = next.find(*b); it != next.end()) dist = it->second;
        TokenLogprobs lp;
        for (const auto& [t, prob] : dist) lp.top.push_back({t, static_cast<float>(std::log(prob))});
        std::stable_sort(lp.top.begin(), lp.top.end(),
                         [](const auto& x, const auto& y) { return x.second > y.second; });
        if (lp.top.size() > static_cast<size_t>(k)) lp.top.resize(static_cast<size_t>(k));
        out.push_back(std::move(lp));
      }
      return StatusOr<std::vector<TokenLogprobs>>(std::move(out));
    };
  }
};

BeamSearchParams Params(int width, int64_t max_tokens) {
  BeamSearchParams p;
  p.width = width;
  p.max_tokens = max_tokens;
  p.prompt_len = 3;
  p.eos_ids = {kEos};
  return p;
}

TEST(BeamSearch, FindsTheLikelierSequenceGreedyMisses) {
  // Greedy takes A (0.6) and then any of three (1/3): 0.2. B (0.4) then C (0.9): 0.36.
  ToyModel m;
  m.width = 2;
  m.next[{}] = {{kA, 0.6}, {kB, 0.4}};
  m.next[{kB}] = {{kC, 0.9}, {kA, 0.1}};
  auto beams = RunBeamSearch(Params(2, 2), m.Expand());
  ASSERT_TRUE(beams.ok());
  ASSERT_EQ(beams->size(), 2u);
  EXPECT_EQ((*beams)[0].tokens, (std::vector<int32_t>{kB, kC}));
  EXPECT_NEAR((*beams)[0].cum_logprob, std::log(0.36), 1e-6);
  EXPECT_EQ((*beams)[1].tokens[0], kA);
  EXPECT_NEAR((*beams)[1].cum_logprob, std::log(0.2), 1e-6);
  EXPECT_EQ(m.calls, 2);
  // Each token's entry: its own log-prob, and the step's candidates.
  const TokenLogprobs& c = (*beams)[0].logprobs[1];
  EXPECT_EQ(c.token, kC);
  EXPECT_NEAR(c.logprob, std::log(0.9), 1e-6);
  ASSERT_EQ(c.top.size(), 2u);
  EXPECT_EQ(c.top[0].first, kC);
}

TEST(BeamSearch, EosCompletesABeamAndTheLengthPenaltyRanksThem) {
  // After A the model ends (EOS 0.5) or goes on with B at 0.5 and then C for sure.
  ToyModel m;
  m.width = 1;
  m.next[{}] = {{kA, 1.0}};
  m.next[{kA}] = {{kEos, 0.5}, {kB, 0.5}};
  m.next[{kA, kB}] = {{kC, 1.0}};
  BeamSearchParams p = Params(1, 3);
  auto beams = RunBeamSearch(p, m.Expand());
  ASSERT_TRUE(beams.ok());
  ASSERT_EQ(beams->size(), 1u);
  // Equal log-probs (log 0.5); the EOS one is shorter (4 tokens with the prompt against 6): a
  // positive penalty favours the longer one, a negative one the shorter.
  EXPECT_EQ((*beams)[0].tokens, (std::vector<int32_t>{kA, kB, kC}));
  EXPECT_FALSE((*beams)[0].ended_by_eos);
  p.length_penalty = -1.0f;
  beams = RunBeamSearch(p, m.Expand());
  ASSERT_TRUE(beams.ok());
  EXPECT_EQ((*beams)[0].tokens, (std::vector<int32_t>{kA, kEos}));
  EXPECT_TRUE((*beams)[0].ended_by_eos);
  // The score counts the prompt and not the EOS.
  EXPECT_NEAR(BeamScore((*beams)[0], 3, 1.0f), std::log(0.5) / 4, 1e-7);  // f32 log-probs
  EXPECT_NEAR(BeamScore((*beams)[0], 3, 0.0f), std::log(0.5), 1e-7);
}

TEST(BeamSearch, IgnoreEosKeepsEosAsAnyToken) {
  ToyModel m;
  m.width = 1;
  m.next[{}] = {{kEos, 0.9}, {kA, 0.1}};
  BeamSearchParams p = Params(1, 2);
  p.ignore_eos = true;
  auto beams = RunBeamSearch(p, m.Expand());
  ASSERT_TRUE(beams.ok());
  EXPECT_EQ((*beams)[0].tokens.size(), 2u);
  EXPECT_EQ((*beams)[0].tokens[0], kEos);
  EXPECT_FALSE((*beams)[0].ended_by_eos);
  // Without ignore_eos the search stops once every candidate ended (no live beam left).
  m.next[{}] = {{kEos, 1.0}};
  p.ignore_eos = false;
  m.calls = 0;
  beams = RunBeamSearch(p, m.Expand());
  ASSERT_TRUE(beams.ok());
  EXPECT_EQ((*beams)[0].tokens, std::vector<int32_t>{kEos});
  EXPECT_EQ(m.calls, 1);
}

TEST(BeamSearch, ReturnsAtMostWidthBeamsBestFirst) {
  ToyModel m;
  m.width = 3;
  auto beams = RunBeamSearch(Params(3, 2), m.Expand());
  ASSERT_TRUE(beams.ok());
  ASSERT_EQ(beams->size(), 3u);
  for (size_t i = 1; i < beams->size(); ++i) {
    EXPECT_GE(BeamScore((*beams)[i - 1], 3, 1.0f), BeamScore((*beams)[i], 3, 1.0f));
  }
}

TEST(BeamSearch, AnExpansionErrorEndsTheSearch) {
  const ExpandBeams failing = [](const std::vector<const std::vector<int32_t>*>&, int) {
    return StatusOr<std::vector<TokenLogprobs>>(Internal("engine stopped"));
  };
  auto beams = RunBeamSearch(Params(2, 4), failing);
  EXPECT_FALSE(beams.ok());
  EXPECT_EQ(beams.status().message(), "engine stopped");
}

}  // namespace
}  // namespace cpm
