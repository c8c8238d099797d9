#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>
#include <vector>

namespace cpm {
namespace {

TEST(SamplerTest, LogSoftmaxNormalises) {
  const float logits[] = {1.0f, 2.0f, 3.0f};
  float out[3];
  LogSoftmax(logits, 3, out);
  double s = 0;
  for (float v : out) s += std::exp(v);
  EXPECT_NEAR(s, 1.0, 1e-6);
  EXPECT_NEAR(out[2] - out[1], 1.0f, 1e-6);
}

TEST(SamplerTest, GreedyPicksArgmaxLowestOnTies) {
  const float logits[] = {0.5f, 2.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
}

TEST(SamplerTest, TopKOneIsGreedyAndTopPRestricts) {
  const float logits[] = {0.0f, 3.0f, 2.9f, -5.0f};
  SamplingParams p;
  p.top_k = 1;
  Rng rng(7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
  p.top_k = 0;
  p.top_p = 0.4f;  // token 1 alone has ~0.5 of the mass
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
}

// vLLM's top-k keeps every token tied with the k-th logit (it masks those below it); top_k 1
// stays the argmax.
TEST(SamplerTest, TopKKeepsTheTokensTiedWithTheKth) {
  std::vector<float> logits(100, -10.0f);
  logits[3] = 2.0f;
  logits[40] = 1.0f;  // tied at k = 2
  logits[70] = 1.0f;
  logits[90] = 2.0f;
  SamplingParams p;
  p.top_k = 2;
  Rng rng(3);
  std::map<int, int> counts;
  for (int i = 0; i < 3000; ++i) counts[SampleToken(logits.data(), 100, p, rng)]++;
  EXPECT_EQ(counts.size(), 2u);  // 3 and 90 (k = 2: the tie lies below)
  p.top_k = 3;
  counts.clear();
  for (int i = 0; i < 6000; ++i) counts[SampleToken(logits.data(), 100, p, rng)]++;
  EXPECT_EQ(counts.size(), 4u);  // 40 and 70 both, as vLLM's mask leaves them
  EXPECT_GT(counts[70], 300);
  EXPECT_NEAR(static_cast<double>(counts[40]) / counts[70], 1.0, 0.3);
  p.top_k = 1;
  for (int i = 0; i < 100; ++i) EXPECT_EQ(SampleToken(logits.data(), 100, p, rng), 3);
  // Fewer finite logits than k (a grammar's or allowed_token_ids' mask): the -inf ones tie at
  // the k-th but weigh nothing; a NaN is no candidate.
  std::vector<float> masked(100, -INFINITY);
  masked[10] = 0.0f;
  masked[20] = 0.0f;
  masked[30] = NAN;
  p.top_k = 5;
  counts.clear();
  for (int i = 0; i < 400; ++i) counts[SampleToken(masked.data(), 100, p, rng)]++;
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_GT(counts[10], 100);
  EXPECT_GT(counts[20], 100);
}

TEST(SamplerTest, SeededDrawsRepeatAndFollowTheDistribution) {
  const float logits[] = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  SamplingParams p;
  Rng a(42), b(42);
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) {
    int x = SampleToken(logits, 2, p, a);
    EXPECT_EQ(x, SampleToken(logits, 2, p, b));
    counts[x]++;
  }
  EXPECT_NEAR(counts[1] / 4000.0, 0.75, 0.03);
}

// A vocabulary of MiniCPM4's size with `n_top` tokens at logit 0 and the rest at `rest`.
std::vector<float> FlatTop(int64_t n_top, float rest) {
  std::vector<float> logits(73448, rest);
  for (int64_t i = 0; i < n_top; ++i) logits[i * 7] = 0.0f;  // spread: not a prefix of ids
  return logits;
}

// 400 draws, each of which must be a token at logit 0 with an id ≤ max_id; returns how many
// lie past the first 256 of those (ids ≥ 256·7), which only a candidate prefix grown past 256
// reaches.
int64_t DrawsPastFirst256(const std::vector<float>& logits, const SamplingParams& p, Rng& rng,
                          int32_t max_id) {
  int64_t high = 0;
  for (int i = 0; i < 400; ++i) {
    const int32_t t = SampleToken(logits.data(), static_cast<int64_t>(logits.size()), p, rng);
    EXPECT_EQ(logits[t], 0.0f);
    EXPECT_LE(t, max_id);
    high += t >= 256 * 7;
  }
  return high;
}

TEST(SamplerTest, FullVocabularyDrawFollowsTheDistribution) {
  std::vector<float> logits(73448, -30.0f);
  logits[100] = std::log(3.0f);  // p ≈ 0.75 and 0.25 (the rest ≈ 73448·e^-30 ≈ 7e-9)
  logits[70000] = 0.0f;
  SamplingParams p;
  Rng rng(3);
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) counts[SampleToken(logits.data(), 73448, p, rng)]++;
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_NEAR(counts[100] / 4000.0, 0.75, 0.03);
  p.temperature = 0.5f;  // p ∝ 9 : 1
  counts.clear();
  for (int i = 0; i < 4000; ++i) counts[SampleToken(logits.data(), 73448, p, rng)]++;
  EXPECT_NEAR(counts[100] / 4000.0, 0.9, 0.03);
}

// Temperature alone over MiniCPM-V-4.6's vocabulary (248320: hundreds of the draw's blocks),
// each token at one of eight levels 0.25·l (l random, so that blocks differ), with whole blocks
// and the last ones at -inf: each level's share of the draws is its share of the mass; no -inf
// token is drawn; the top level's draws spread over the ids; a NaN or +inf logit gives the +inf
// (no mass to draw by).
TEST(SamplerTest, TemperatureAloneDrawsEachLevelByItsMass) {
  constexpr int64_t kN = 248320;
  std::mt19937 g(5);
  std::vector<int> level(kN);
  std::vector<float> logits(kN);
  for (int64_t i = 0; i < kN; ++i) {
    level[i] = static_cast<int>(g() % 8);
    logits[i] = 0.25f * static_cast<float>(level[i]);
  }
  for (int64_t i = 5000; i < 9000; ++i) logits[i] = -INFINITY;
  for (int64_t i = kN - 3000; i < kN; ++i) logits[i] = -INFINITY;
  SamplingParams p;
  p.temperature = 0.7f;
  std::vector<double> want(8, 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < kN; ++i) {
    if (logits[i] == -INFINITY) continue;
    const double w = std::exp((static_cast<double>(logits[i]) - 1.75) / 0.7);
    want[level[i]] += w;
    total += w;
  }
  Rng rng(31);
  constexpr int kDraws = 4000;
  std::vector<int> count(8, 0);
  int top_low_ids = 0;
  for (int i = 0; i < kDraws; ++i) {
    const int32_t t = SampleToken(logits.data(), kN, p, rng);
    ASSERT_GE(t, 0);
    ASSERT_NE(logits[t], -INFINITY) << t;
    ++count[level[t]];
    if (level[t] == 7) top_low_ids += t < kN / 2;
  }
  for (int l = 0; l < 8; ++l) {
    EXPECT_NEAR(count[l] / static_cast<double>(kDraws), want[l] / total, 0.03) << l;
  }
  EXPECT_NEAR(top_low_ids / static_cast<double>(count[7]), 0.5, 0.06);
  logits[100] = NAN;
  logits[200000] = INFINITY;
  EXPECT_EQ(SampleToken(logits.data(), kN, p, rng), 200000);
}

// top-p and min-p without top-k keep a sorted prefix of the vocabulary that can be longer than
// the first candidates sorted (256): 1500 and 1000 of equal tokens here.
TEST(SamplerTest, TopPAndMinPKeepLongPrefixes) {
  SamplingParams p;
  Rng rng(5);
  p.top_p = 0.5f;  // half of the 3000: the 1500 (or 1501, rounding) of lowest ids
  EXPECT_GT(DrawsPastFirst256(FlatTop(3000, -40.0f), p, rng, 1501 * 7), 300);  // ~83%
  p.top_p = 1.0f;
  p.min_p = 0.01f;  // e^-10 < 0.01: exactly the 1000 tokens at 0
  EXPECT_GT(DrawsPastFirst256(FlatTop(1000, -10.0f), p, rng, 999 * 7), 250);  // ~74%
}

// min-p, then top-p over what it kept (vLLM renormalises in between): with probabilities .5,
// .3 and 100 × .002, min_p 0.5 keeps the first two (mass .8) and top_p 0.6 of that (.48) the
// first alone; measured against the whole vocabulary, .6 would have taken the second too.
TEST(SamplerTest, TopPIsAShareOfWhatMinPKept) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f)};
  for (int i = 0; i < 100; ++i) logits.push_back(std::log(0.002f));
  SamplingParams p;
  p.min_p = 0.5f;
  p.top_p = 0.6f;
  Rng rng(3);
  for (int i = 0; i < 2000; ++i) ASSERT_EQ(SampleToken(logits.data(), 102, p, rng), 0);
  // A vocabulary too wide for the candidates (the selection path): 2500 tokens at 0 and
  // 100000 at log(0.005), under min_p 0.01's floor. top_p 0.5 of the 2500 kept is 1250 of
  // them, the lowest ids (of the 3000 of all mass it would have been 1500).
  std::vector<float> wide(2500, 0.0f);
  wide.resize(102500, std::log(0.005f));
  p.min_p = 0.01f;
  p.top_p = 0.5f;
  int32_t highest = 0;
  for (int i = 0; i < 3000; ++i) {
    highest = std::max(highest, SampleToken(wide.data(), static_cast<int64_t>(wide.size()), p, rng));
  }
  EXPECT_LE(highest, 1250);
  EXPECT_GE(highest, 1150);  // the draws do reach the set's end
}

// Unequal probabilities over a kept set of thousands: every draw lies in the set a sort and a
// running sum find (the brute-force definition), and draws reach its far end.
TEST(SamplerTest, TopPOverThousandsMatchesTheSortedPrefix) {
  std::vector<float> logits(73448, -60.0f);
  for (int32_t i = 0; i < 20000; ++i) logits[(i * 3) % 73448] = -0.0004f * static_cast<float>(i);
  SamplingParams p;
  p.top_p = 0.9f;
  p.temperature = 0.8f;
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const float mx = logits[order[0]];
  double total = 0;
  for (int32_t t : order) total += std::exp(static_cast<double>((logits[t] - mx) / 0.8f));
  std::vector<int64_t> rank(logits.size(), -1);
  double cum = 0;
  int64_t size = 0;
  for (int32_t t : order) {
    rank[t] = size++;
    cum += std::exp(static_cast<double>((logits[t] - mx) / 0.8f)) / total;
    if (cum >= 0.9) break;
  }
  Rng rng(11);
  int64_t far = 0;
  for (int i = 0; i < 400; ++i) {
    const int32_t t = SampleToken(logits.data(), 73448, p, rng);
    ASSERT_GE(rank[t], 0) << "token " << t << " outside the top-p set of " << size;
    far += rank[t] >= size * 3 / 4;
  }
  EXPECT_GT(size, 4000);  // 4605
  EXPECT_GT(far, 15);     // the last quarter of the set holds ~8.6% of its mass: ~35 draws
}

// Over a flat vocabulary in eight levels (token i at 0.25·(i mod 8)), top-p's set ends inside
// level 3: the draws' share of each level is its mass in the set a sort and a running sum find
// (the brute-force definition), over the levels' slices from the top and the boundary's part;
// within the top level, draws spread over its tokens' ids. Then min-p drops levels 0-4.
TEST(SamplerTest, TopPOverAFlatVocabularyDrawsEachLevelByItsMass) {
  constexpr int64_t kN = 73448;
  std::vector<float> logits(kN);
  for (int64_t i = 0; i < kN; ++i) logits[i] = 0.25f * static_cast<float>(i % 8);
  const auto expected_shares = [&](const SamplingParams& p) {
    std::vector<int32_t> order(kN);
    for (int64_t i = 0; i < kN; ++i) order[i] = static_cast<int32_t>(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    const auto weight = [&](int32_t t) {
      return std::exp(static_cast<double>(logits[t] - 1.75f) / p.temperature);
    };
    // min-p's floor first, then top-p's share of what it kept (vLLM's order).
    double total = 0;
    for (int32_t t : order) total += weight(t) >= p.min_p ? weight(t) : 0.0;
    std::vector<double> share(8, 0.0);
    double cum = 0, kept = 0;
    for (int32_t t : order) {
      if (weight(t) < p.min_p || cum >= p.top_p * total) break;
      cum += weight(t);
      share[t % 8] += weight(t);
      kept += weight(t);
    }
    for (double& q : share) q /= kept;
    return share;
  };
  const auto check = [&](const SamplingParams& p, uint64_t seed) {
    const std::vector<double> want = expected_shares(p);
    Rng rng(seed);
    constexpr int kDraws = 4000;
    std::vector<int> count(8, 0);
    int top_low_ids = 0, top = 0;  // draws in level 7, and of those with ids below kN / 2
    for (int i = 0; i < kDraws; ++i) {
      const int32_t t = SampleToken(logits.data(), kN, p, rng);
      ASSERT_GE(t, 0);
      ++count[t % 8];
      if (t % 8 == 7) {
        ++top;
        top_low_ids += t < kN / 2;
      }
    }
    for (int level = 0; level < 8; ++level) {
      EXPECT_NEAR(count[level] / static_cast<double>(kDraws), want[level], 0.03)
          << "level " << level << " top_p " << p.top_p << " min_p " << p.min_p;
    }
    EXPECT_NEAR(top_low_ids / static_cast<double>(top), 0.5, 0.06);
  };
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.85f;  // levels 7-4 hold ~79% of the mass: the set ends in level 3
  check(p, 21);
  // e^(-0.5/0.8) ≈ 0.54 keeps level 5, e^(-0.75/0.8) ≈ 0.39 drops level 4; top-p's 85% of
  // levels 7-5 then ends inside level 5 (measured over the whole vocabulary it would have kept
  // all three).
  p.min_p = 0.5f;
  check(p, 22);
}

// A nearly flat vocabulary (top-p's set spans most of it, past the first candidates) with NaN,
// -inf and +inf logits: draws never take a NaN or -inf token, and a +inf logit, which leaves
// no finite weight to draw by, is taken as the largest.
TEST(SamplerTest, TopPOverAFlatVocabularySkipsNaNAndInfinities) {
  std::vector<float> logits(73448);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 0.001f * static_cast<float>(i % 1000);
  for (size_t i = 3; i < logits.size(); i += 11) logits[i] = NAN;
  for (size_t i = 5; i < logits.size(); i += 13) logits[i] = -INFINITY;
  SamplingParams p;
  p.top_p = 0.5f;
  Rng rng(3);
  std::map<bool, int> high;  // draws among the upper half of the logits
  for (int i = 0; i < 300; ++i) {
    const int32_t t = SampleToken(logits.data(), static_cast<int64_t>(logits.size()), p, rng);
    ASSERT_GE(t, 0);
    ASSERT_TRUE(std::isfinite(logits[t])) << t;
    ++high[logits[t] >= 0.5f];
  }
  EXPECT_EQ(high[false], 0);  // top-p 0.5 of a flat distribution: only its upper half
  logits[40000] = INFINITY;
  EXPECT_EQ(SampleToken(logits.data(), static_cast<int64_t>(logits.size()), p, rng), 40000);
}

TEST(SamplerTest, LargeTopKKeepsTheLargest) {
  std::vector<float> logits = FlatTop(1000, -1.0f);  // 72448 tokens at e^-1 of the top ones
  SamplingParams p;
  p.top_k = 1000;
  Rng rng(9);
  for (int i = 0; i < 400; ++i) ASSERT_EQ(logits[SampleToken(logits.data(), 73448, p, rng)], 0.0f);
  // With top-p, over the top-k's probabilities: half of the 1000 (or 501, rounding).
  p.top_p = 0.5f;
  std::vector<float> graded = FlatTop(3000, -40.0f);
  for (int64_t i = 1000; i < 3000; ++i) graded[i * 7] = -1.0f;  // below the 1000th
  for (int i = 0; i < 400; ++i) {
    const int32_t t = SampleToken(graded.data(), 73448, p, rng);
    ASSERT_EQ(graded[t], 0.0f);
    ASSERT_LE(t, 501 * 7);
  }
  // 3000 tokens tied at the 1000th logit all stay (vLLM masks below the k-th only): top-p 0.5
  // takes half of the 3000.
  EXPECT_GT(DrawsPastFirst256(FlatTop(3000, -40.0f), p, rng, 1501 * 7), 300);  // ~83%
}

TEST(SamplerTest, TopKMatchesStableSortAndSkipsNaN) {
  std::vector<float> v(5000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 613);  // ties
  v[17] = std::nanf("");
  std::vector<int32_t> order(v.size());
  for (size_t i = 0; i < v.size(); ++i) order[i] = static_cast<int32_t>(i);
  order.erase(order.begin() + 17);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[a] > v[b]; });
  for (int64_t k : {1, 20, 256, 257, 3000, 4999, 5000}) {
    const auto top = TopK(v.data(), 5000, k);
    ASSERT_EQ(static_cast<int64_t>(top.size()), std::min<int64_t>(k, 4999)) << k;
    for (size_t i = 0; i < top.size(); ++i) {
      ASSERT_EQ(top[i].first, order[i]) << "k=" << k << " i=" << i;
      ASSERT_EQ(top[i].second, v[order[i]]);
    }
  }
}

TEST(SamplerTest, PenaltiesFollowVllm) {
  float logits[] = {2.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const int32_t prompt[] = {1};
  const int32_t output[] = {0, 0};
  ApplyPenalties(logits, 3, p, prompt, output);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[1], -4.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

// Random prompts and outputs with repeats, over several calls on one thread (the per-thread
// tables must be clean again after each): every logit as a plain per-token definition gives it,
// bit for bit, for each mix of penalties.
TEST(SamplerTest, PenaltiesMatchThePerTokenDefinition) {
  constexpr int64_t kN = 5000;
  std::mt19937 g(17);
  for (int call = 0; call < 24; ++call) {
    SamplingParams p;
    p.repetition_penalty = call % 3 == 0 ? 1.0f : 1.3f;
    p.frequency_penalty = call % 4 == 1 ? 0.0f : 0.4f;
    p.presence_penalty = call % 2 == 0 ? 0.0f : -0.6f;
    std::vector<float> logits(kN);
    for (float& v : logits) v = static_cast<float>(static_cast<int>(g() % 2001) - 1000) / 100.0f;
    std::vector<int32_t> prompt(g() % 300), output(g() % 60);
    for (int32_t& t : prompt) t = static_cast<int32_t>(g() % 400);  // overlapping, repeated
    for (int32_t& t : output) t = static_cast<int32_t>(200 + g() % 400);
    std::vector<float> want = logits;
    for (int64_t t = 0; t < kN; ++t) {
      const auto in = [t](const std::vector<int32_t>& v) {
        return std::count(v.begin(), v.end(), static_cast<int32_t>(t));
      };
      const int64_t in_prompt = in(prompt), in_output = in(output);
      if (p.repetition_penalty != 1.0f && in_prompt + in_output > 0) {
        want[t] = want[t] > 0 ? want[t] / p.repetition_penalty : want[t] * p.repetition_penalty;
      }
      if (in_output > 0) {
        want[t] -= p.frequency_penalty * static_cast<float>(in_output) + p.presence_penalty;
      }
    }
    ApplyPenalties(logits.data(), kN, p, prompt, output);
    for (int64_t t = 0; t < kN; ++t) {
      ASSERT_EQ(std::bit_cast<uint32_t>(logits[t]), std::bit_cast<uint32_t>(want[t]))
          << "call " << call << " token " << t;
    }
  }
}

}  // namespace
}  // namespace cpm
