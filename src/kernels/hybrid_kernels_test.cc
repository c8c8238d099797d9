// Tests of the Qwen3.5 hybrid kernels (conv1d, gated delta rule, gated norm, L2 norm, sigmoid
// gate) against double-precision definitions written here, and against each other: state
// continuation == one shot, chunked == recurrent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_norm.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/test_util.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

double Silu(double x) { return x / (1.0 + std::exp(-x)); }

// ---------------------------------------------------------------------------------- conv1d

// y[i, c] = silu(Σ_j w[c, j] · xx[i + j, c]) with xx = zeros(K-1) ++ x, in double.
std::vector<double> ConvDefinition(const std::vector<float>& x, int64_t t, int64_t ch,
                                   const std::vector<float>& w, int64_t K) {
  std::vector<double> y(t * ch);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < ch; ++c) {
      double acc = 0;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t src = i + j - (K - 1);
        if (src >= 0) acc += static_cast<double>(w[c * K + j]) * x[src * ch + c];
      }
      y[i * ch + c] = Silu(acc);
    }
  }
  return y;
}

TEST(Conv1dTest, OneShotMatchesDefinition) {
  const int64_t t = 13, ch = 37, K = 4;
  const auto x = RandomVec(t * ch, 1, -2, 2), w = RandomVec(ch * K, 2);
  const auto wt = PackConvTaps(w, ch, K);  // the kernel's layout; the definition reads w
  std::vector<float> state((K - 1) * ch, 0.0f), y(t * ch);
  CausalConv1dSilu(x.data(), ch, t, ch, 0, ch, wt.data(), K, state.data(), y.data(), ch,
                   Round::kNone);
  const auto ref = ConvDefinition(x, t, ch, w, K);
  for (int64_t i = 0; i < t * ch; ++i) ASSERT_NEAR(y[i], ref[i], 1e-5) << i;
  // The state is the last K-1 input rows.
  for (int64_t r = 0; r < K - 1; ++r)
    for (int64_t c = 0; c < ch; ++c) EXPECT_EQ(state[r * ch + c], x[(t - (K - 1) + r) * ch + c]);
}

TEST(Conv1dTest, StateContinuationEqualsOneShot) {
  const int64_t t = 19, ch = 21, K = 4;
  const auto x = RandomVec(t * ch, 3, -2, 2), w = RandomVec(ch * K, 4);
  const auto wt = PackConvTaps(w, ch, K);
  std::vector<float> s1((K - 1) * ch, 0.0f), y1(t * ch);
  CausalConv1dSilu(x.data(), ch, t, ch, 0, ch, wt.data(), K, s1.data(), y1.data(), ch,
                   Round::kNone);
  // Pieces shorter and longer than K-1, channels split in two ranges.
  std::vector<float> s2((K - 1) * ch, 0.0f), y2(t * ch, -99.0f);
  int64_t r0 = 0;
  for (int64_t n : {1, 2, 1, 5, 3, 7}) {
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, 8}, {8, ch}}) {
      CausalConv1dSilu(x.data() + r0 * ch, ch, n, ch, c0, c1, wt.data(), K, s2.data(),
                       y2.data() + r0 * ch, ch, Round::kNone);
    }
    r0 += n;
  }
  ASSERT_EQ(r0, t);
  for (int64_t i = 0; i < t * ch; ++i) ASSERT_EQ(y1[i], y2[i]) << i;
  for (size_t i = 0; i < s1.size(); ++i) ASSERT_EQ(s1[i], s2[i]) << i;
}

// bf16: the convolution rounded before SiLU and the result after it, as torch's conv1d on bf16
// tensors and then SiLU (HF's Qwen3.5): y = bf(silu(bf(conv))). The scalar kernel, against the
// same sums taken here in its order.
TEST(Conv1dTest, Bf16RoundsTheConvolutionAndTheOutput) {
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
  const int64_t t = 5, ch = 9, K = 4;
  const auto x = RandomVec(t * ch, 5), w = RandomVec(ch * K, 6);
  const auto wt = PackConvTaps(w, ch, K);
  std::vector<float> s((K - 1) * ch, 0.0f), y(t * ch);
  CausalConv1dSilu(x.data(), ch, t, ch, 0, ch, wt.data(), K, s.data(), y.data(), ch, Round::kBf16);
  int64_t rounded_conv_mattered = 0;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t c = 0; c < ch; ++c) {
      float acc = 0.0f;
      for (int64_t j = 0; j < K; ++j) {
        const int64_t row = i - (K - 1) + j;  // the zero state before the first token
        acc += w[c * K + j] * (row >= 0 ? x[row * ch + c] : 0.0f);
      }
      const float a = RoundBf16(acc);
      const float want = RoundBf16(a / (1.0f + std::exp(-a)));
      EXPECT_EQ(y[i * ch + c], want) << i << "," << c;
      rounded_conv_mattered += want != RoundBf16(acc / (1.0f + std::exp(-acc)));
    }
  }
  EXPECT_GT(rounded_conv_mattered, 0);  // the test tells the two rounding points apart
}

// Every ISA level against the scalar reference: odd channel counts (partial vector groups),
// kernels of 2..6 taps, pieces shorter than the history, channel ranges split mid-vector.
TEST(Conv1dTest, EveryIsaMatchesScalarReference) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    for (int64_t K : {2, 3, 4, 6}) {
      for (int64_t ch : {1, 7, 9, 33, 515}) {
        for (Round round : {Round::kNone, Round::kBf16}) {
          const int64_t t = 11;
          const auto x = RandomVec(t * ch, static_cast<uint32_t>(K * ch), -3, 3);
          const auto wt = PackConvTaps(RandomVec(ch * K, static_cast<uint32_t>(ch)), ch, K);
          const auto s0 = RandomVec((K - 1) * ch, static_cast<uint32_t>(K), -1, 1);
          std::vector<float> s_ref = s0, y_ref(t * ch), s = s0, y(t * ch, -99.0f);
          ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
          CausalConv1dSilu(x.data(), ch, t, ch, 0, ch, wt.data(), K, s_ref.data(), y_ref.data(),
                           ch, round);
          ASSERT_TRUE(SetActiveIsa(isa));
          int64_t r0 = 0;
          for (int64_t n : {1, 4, 2, 4}) {
            const int64_t mid = ch / 2 + 1;
            for (auto [c0, c1] :
                 {std::pair<int64_t, int64_t>{0, std::min(ch, mid)}, {std::min(ch, mid), ch}}) {
              CausalConv1dSilu(x.data() + r0 * ch, ch, n, ch, c0, c1, wt.data(), K, s.data(),
                               y.data() + r0 * ch, ch, round);
            }
            r0 += n;
          }
          ASSERT_EQ(r0, t);
          const std::string what = std::string(ToString(isa)) + " K=" + std::to_string(K) +
                                   " ch=" + std::to_string(ch);
          for (int64_t i = 0; i < t * ch; ++i) {
            // Vector exp (≤ 2 ulp) and FMA contraction against the scalar's expf and products;
            // bf16 outputs may then round to neighbours.
            const float tol = (round == Round::kBf16 ? 8e-3f : 2e-6f) * (1 + std::fabs(y_ref[i]));
            ASSERT_NEAR(y[i], y_ref[i], tol) << what << " at " << i;
          }
          for (size_t i = 0; i < s.size(); ++i) ASSERT_EQ(s[i], s_ref[i]) << what << " state " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------- delta rule

struct GdnData {
  int64_t t, dk, dv;
  std::vector<float> q, k, v, g, beta, state;
};

// Realistic inputs: unit-norm k, q scaled by dk^-1/2, β in (0, 1), g in (-1.5, 0).
GdnData MakeGdn(int64_t t, int64_t dk, int64_t dv, uint32_t seed) {
  GdnData d{t, dk, dv};
  d.q = RandomVec(t * dk, seed);
  d.k = RandomVec(t * dk, seed + 1);
  L2NormHeads(d.q.data(), dk, t, 1, dk, 1e-6f, 1.0f / std::sqrt(static_cast<float>(dk)));
  L2NormHeads(d.k.data(), dk, t, 1, dk, 1e-6f, 1.0f);
  d.v = RandomVec(t * dv, seed + 2, -2, 2);
  d.g = RandomVec(t, seed + 3, -1.5f, 0.0f);
  d.beta = RandomVec(t, seed + 4, 0.0f, 1.0f);
  d.state = RandomVec(dk * dv, seed + 5, -0.5f, 0.5f);  // continuing from a non-zero state
  return d;
}

GdnHead HeadOf(GdnData& d, int64_t r0, std::vector<float>& o, std::vector<float>& state) {
  return {d.q.data() + r0 * d.dk, d.k.data() + r0 * d.dk, d.dk, d.v.data() + r0 * d.dv, d.dv,
          d.g.data() + r0, d.beta.data() + r0, 1, o.data() + r0 * d.dv, d.dv, state.data()};
}

// The AVX-512 form, native where the CPU has it and over SIMDe's emulation everywhere, is
// bitwise the AVX2 one (checked against the scalar reference above): outputs and states, in
// pieces of 1 to 40 tokens (shorter and longer than the history), with the channels split
// inside a vector (and, for 2100, inside a block).
TEST(Conv1dTest, Avx512IsBitwiseTheAvx2Form) {
  IsaGuard guard;
  if (!SetActiveIsa(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  using Conv = std::function<void(const float* x, int64_t t, int64_t c0, int64_t c1,
                                  float* state, float* y)>;
  for (int64_t K : {2, 3, 4, 6}) {
    for (int64_t ch : {1, 7, 9, 17, 33, 515, 2100}) {  // 2100: three blocks of channels
      for (Round round : {Round::kNone, Round::kBf16}) {
        const int64_t t = 48;
        const auto x = RandomVec(t * ch, static_cast<uint32_t>(K * ch), -6, 6);
        const auto wt = PackConvTaps(RandomVec(ch * K, static_cast<uint32_t>(ch)), ch, K);
        const auto s0 = RandomVec((K - 1) * ch, static_cast<uint32_t>(K), -1, 1);
        // Output and state of `conv` over the pieces.
        const auto run = [&](const Conv& conv) {
          std::pair<std::vector<float>, std::vector<float>> r{std::vector<float>(t * ch), s0};
          int64_t r0 = 0;
          for (int64_t n : {1, 2, 40, 5}) {
            const int64_t mid = std::min(ch, ch / 3 + 5);
            for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, mid}, {mid, ch}}) {
              conv(x.data() + r0 * ch, n, c0, c1, r.second.data(), r.first.data() + r0 * ch);
            }
            r0 += n;
          }
          return r;
        };
        const Conv dispatched = [&](const float* xi, int64_t n, int64_t c0, int64_t c1,
                                    float* state, float* y) {
          CausalConv1dSilu(xi, ch, n, ch, c0, c1, wt.data(), K, state, y, ch, round);
        };
        ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));
        const auto want = run(dispatched);
        std::vector<std::pair<std::string, decltype(want)>> got;
        if (SetActiveIsa(Isa::kAvx512)) got.emplace_back("avx512", run(dispatched));
        got.emplace_back("avx512 (emulated)", run([&](const float* xi, int64_t n, int64_t c0,
                                                      int64_t c1, float* state, float* y) {
          ASSERT_TRUE(emulated::CausalConv1dSiluAvx512(xi, ch, n, ch, c0, c1, wt.data(), K,
                                                       state, y, ch, round));
        }));
        for (const auto& [form, r] : got) {
          const std::string what = form + " K=" + std::to_string(K) + " ch=" + std::to_string(ch);
          for (size_t i = 0; i < want.first.size(); ++i) {
            ASSERT_EQ(r.first[i], want.first[i]) << what << " y " << i;
          }
          for (size_t i = 0; i < want.second.size(); ++i) {
            ASSERT_EQ(r.second[i], want.second[i]) << what << " state " << i;
          }
        }
      }
    }
  }
}

// The closed form S_t = (I − β k kᵀ) e^g S_{t−1} + β k vᵀ, o_t = S_tᵀ q_t, in double.
void GdnDefinition(const GdnData& d, std::vector<double>* o, std::vector<double>* S) {
  S->assign(d.state.begin(), d.state.end());
  o->assign(d.t * d.dv, 0.0);
  std::vector<double> next(d.dk * d.dv);
  for (int64_t i = 0; i < d.t; ++i) {
    const double eg = std::exp(static_cast<double>(d.g[i])), b = d.beta[i];
    const float* k = &d.k[i * d.dk];
    for (int64_t a = 0; a < d.dk; ++a) {
      for (int64_t c = 0; c < d.dv; ++c) {
        double proj = 0;  // ((I − β k kᵀ) S)[a, c]
        for (int64_t e = 0; e < d.dk; ++e) proj += ((a == e) - b * k[a] * k[e]) * (*S)[e * d.dv + c];
        next[a * d.dv + c] = eg * proj + b * k[a] * d.v[i * d.dv + c];
      }
    }
    *S = next;
    for (int64_t c = 0; c < d.dv; ++c)
      for (int64_t a = 0; a < d.dk; ++a) (*o)[i * d.dv + c] += (*S)[a * d.dv + c] * d.q[i * d.dk + a];
  }
}

TEST(GatedDeltaRuleTest, RecurrentMatchesClosedForm) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    // AVX2: 40 is a 32-column block and an 8-column block. AVX-512: 48 is one block of 3
    // vectors, 144 one of 8 and one of 1 (12 and 40 run the AVX2 form).
    for (int64_t dv : {12, 40, 48, 144}) {
      GdnData d = MakeGdn(9, 8, dv, 10);
      std::vector<float> o(d.t * d.dv), S = d.state;
      GatedDeltaRuleRecurrent(HeadOf(d, 0, o, S), d.t, d.dk, d.dv);
      std::vector<double> ro, rs;
      GdnDefinition(d, &ro, &rs);
      for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], ro[i], 1e-5) << ToString(isa) << " " << i;
      for (size_t i = 0; i < S.size(); ++i) ASSERT_NEAR(S[i], rs[i], 1e-5) << ToString(isa) << " " << i;
    }
  }
}

// `run(head)` on d's tokens under AVX2, then under AVX-512 when the CPU has it, and
// `emulated(head)` (the AVX-512 form over SIMDe): o and S of both must be the AVX2 ones to the
// bit.
void ExpectAvx512FormsBitwiseAvx2(GdnData& d, const std::string& what,
                                  const std::function<void(const GdnHead&)>& run,
                                  const std::function<void(const GdnHead&)>& emulated) {
  struct Result {
    std::string form;
    std::vector<float> o, S;
  };
  const auto with = [&](const std::string& form, const std::function<void(const GdnHead&)>& f) {
    Result r{form, std::vector<float>(d.t * d.dv), d.state};
    f(HeadOf(d, 0, r.o, r.S));
    return r;
  };
  ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));
  const Result want = with("avx2", run);
  std::vector<Result> got;
  if (SetActiveIsa(Isa::kAvx512)) got.push_back(with("avx512", run));
  got.push_back(with("avx512 (emulated)", emulated));
  for (const Result& r : got) {
    for (size_t i = 0; i < want.o.size(); ++i) {
      ASSERT_EQ(r.o[i], want.o[i]) << r.form << " " << what << " o " << i;
    }
    for (size_t i = 0; i < want.S.size(); ++i) {
      ASSERT_EQ(r.S[i], want.S[i]) << r.form << " " << what << " S " << i;
    }
  }
}

// The AVX-512 recurrent form (128-column blocks, rows in memory order) does per element what the
// AVX2 one does (32-column blocks): the same results to the bit, native and over SIMDe's
// emulation, at head sizes that exercise every block width, for one token (decode) and several.
TEST(GatedDeltaRuleTest, RecurrentAvx512IsBitwiseTheAvx2Form) {
  IsaGuard guard;
  if (!SetActiveIsa(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  for (int64_t dv : {16, 48, 112, 128, 144, 256}) {
    for (int64_t dk : {128, 7}) {
      for (int64_t t : {1, 4}) {
        GdnData d = MakeGdn(t, dk, dv, static_cast<uint32_t>(dv * 7 + dk + t));
        ExpectAvx512FormsBitwiseAvx2(
            d, "dv " + std::to_string(dv) + " dk " + std::to_string(dk) + " t " + std::to_string(t),
            [&](const GdnHead& h) { GatedDeltaRuleRecurrent(h, t, dk, dv); },
            [&](const GdnHead& h) { emulated::GatedDeltaRuleRecurrentAvx512(h, t, dk, dv); });
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The AVX-512 chunked form (its products in 6 × 64 tiles, 32- and 16-column ones, and a masked
// last vector) is bitwise the AVX2 one, native and emulated: head sizes with every tile width
// and partial vectors, chunk sizes with partial last chunks.
TEST(GatedDeltaRuleTest, ChunkedAvx512IsBitwiseTheAvx2Form) {
  IsaGuard guard;
  if (!SetActiveIsa(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  for (auto [dk, dv] : {std::pair<int64_t, int64_t>{128, 128}, {32, 24}, {13, 20}, {7, 112}}) {
    for (int64_t chunk : {64, 16}) {
      for (int64_t t : {1, 17, 64, 130}) {
        GdnData d = MakeGdn(t, dk, dv, static_cast<uint32_t>(dk * 5 + dv + t + chunk));
        std::vector<float> scratch(GatedDeltaRuleChunkedScratch(chunk, dk, dv));
        ExpectAvx512FormsBitwiseAvx2(
            d,
            "dk " + std::to_string(dk) + " dv " + std::to_string(dv) + " chunk " +
                std::to_string(chunk) + " t " + std::to_string(t),
            [&](const GdnHead& h) { GatedDeltaRuleChunked(h, t, dk, dv, chunk, scratch.data()); },
            [&](const GdnHead& h) {
              emulated::GatedDeltaRuleChunkedAvx512(h, t, dk, dv, chunk, scratch.data());
            });
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Chunked == recurrent for lengths around chunk multiples, from a non-zero state; head sizes
// that are multiples of 8 and not (the AVX2 transposes' and products' edges).
TEST(GatedDeltaRuleTest, ChunkedEqualsRecurrent) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    for (auto [dk, dv] : {std::pair<int64_t, int64_t>{32, 24}, {13, 20}}) {
      for (int64_t chunk : {64, 16}) {
        for (int64_t t : {1, 7, 15, 16, 17, 63, 64, 65, 130, 201}) {
          GdnData d = MakeGdn(t, dk, dv, static_cast<uint32_t>(100 + t));
          std::vector<float> o1(t * d.dv), S1 = d.state, o2(t * d.dv), S2 = d.state;
          GatedDeltaRuleRecurrent(HeadOf(d, 0, o1, S1), t, d.dk, d.dv);
          std::vector<float> scratch(GatedDeltaRuleChunkedScratch(chunk, d.dk, d.dv));
          GatedDeltaRuleChunked(HeadOf(d, 0, o2, S2), t, d.dk, d.dv, chunk, scratch.data());
          double max_o = 0, max_s = 0;
          for (size_t i = 0; i < o1.size(); ++i) {
            max_o = std::max(max_o, std::abs(double(o1[i]) - o2[i]));
          }
          for (size_t i = 0; i < S1.size(); ++i) {
            max_s = std::max(max_s, std::abs(double(S1[i]) - S2[i]));
          }
          const std::string what = std::string(ToString(isa)) + " dk " + std::to_string(dk) +
                                   " chunk " + std::to_string(chunk) + " t " + std::to_string(t);
          EXPECT_LT(max_o, 2e-5) << what;
          EXPECT_LT(max_s, 2e-5) << what;
        }
      }
    }
  }
}

TEST(GatedDeltaRuleTest, SplitRunsContinueTheState) {
  IsaGuard guard;
  SetActiveIsa(BestIsa());
  const int64_t t = 150, chunk = 64;
  GdnData d = MakeGdn(t, 16, 16, 7);
  std::vector<float> o1(t * d.dv), S1 = d.state, o2(t * d.dv, -99.0f), S2 = d.state;
  GatedDeltaRuleRecurrent(HeadOf(d, 0, o1, S1), t, d.dk, d.dv);
  std::vector<float> scratch(GatedDeltaRuleChunkedScratch(chunk, d.dk, d.dv));
  int64_t r0 = 0, piece = 0;
  for (int64_t n : {1, 70, 3, 65, 11}) {
    if (piece++ % 2 == 0) GatedDeltaRuleRecurrent(HeadOf(d, r0, o2, S2), n, d.dk, d.dv);
    else GatedDeltaRuleChunked(HeadOf(d, r0, o2, S2), n, d.dk, d.dv, chunk, scratch.data());
    r0 += n;
  }
  ASSERT_EQ(r0, t);
  for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 2e-5) << i;
  for (size_t i = 0; i < S1.size(); ++i) ASSERT_NEAR(S1[i], S2[i], 2e-5) << i;
}

// Strong decay (g down to −30) must not overflow or lose the state in the chunked form.
TEST(GatedDeltaRuleTest, ChunkedStableUnderStrongDecay) {
  IsaGuard guard;
  SetActiveIsa(BestIsa());
  const int64_t t = 100;
  GdnData d = MakeGdn(t, 16, 8, 3);
  d.g = RandomVec(t, 9, -30.0f, 0.0f);
  std::vector<float> o1(t * d.dv), S1 = d.state, o2(t * d.dv), S2 = d.state;
  GatedDeltaRuleRecurrent(HeadOf(d, 0, o1, S1), t, d.dk, d.dv);
  std::vector<float> scratch(GatedDeltaRuleChunkedScratch(64, d.dk, d.dv));
  GatedDeltaRuleChunked(HeadOf(d, 0, o2, S2), t, d.dk, d.dv, 64, scratch.data());
  for (size_t i = 0; i < o1.size(); ++i) ASSERT_NEAR(o1[i], o2[i], 2e-5) << i;
  for (size_t i = 0; i < S1.size(); ++i) ASSERT_NEAR(S1[i], S2[i], 2e-5) << i;
}

// ------------------------------------------------------------------------- norms and gates

TEST(GatedNormTest, GatedRmsNormMatchesDefinition) {
  const int64_t rows = 5, dim = 24;
  const auto x = RandomVec(rows * dim, 20, -3, 3), z = RandomVec(rows * dim, 21, -3, 3),
             w = RandomVec(dim, 22, 0.5f, 1.5f);
  std::vector<float> y(rows * dim);
  GatedRmsNorm(x.data(), dim, z.data(), dim, w.data(), y.data(), dim, rows, dim, 1e-6f, Round::kNone);
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < dim; ++j) ss += double(x[r * dim + j]) * x[r * dim + j];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (int64_t j = 0; j < dim; ++j) {
      const double ref = x[r * dim + j] * inv * w[j] * Silu(z[r * dim + j]);
      ASSERT_NEAR(y[r * dim + j], ref, 1e-5 * (1 + std::abs(ref)));
    }
  }
  // bf16: every output is a bf16 value near the f32 result.
  std::vector<float> yb(rows * dim);
  GatedRmsNorm(x.data(), dim, z.data(), dim, w.data(), yb.data(), dim, rows, dim, 1e-6f, Round::kBf16);
  for (int64_t i = 0; i < rows * dim; ++i) {
    EXPECT_EQ(yb[i], RoundBf16(yb[i]));
    EXPECT_NEAR(yb[i], y[i], 2e-2 * (1 + std::abs(y[i])));
  }
}

TEST(GatedNormTest, L2NormHeadsPerHead) {
  const int64_t rows = 3, heads = 4, dim = 8, stride = 40;  // padding after the heads
  auto x = RandomVec(rows * stride, 30, -2, 2);
  const auto x0 = x;
  L2NormHeads(x.data(), stride, rows, heads, dim, 1e-6f, 0.5f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      double ss = 0;
      for (int64_t j = 0; j < dim; ++j) ss += double(x0[r * stride + h * dim + j]) * x0[r * stride + h * dim + j];
      for (int64_t j = 0; j < dim; ++j) {
        const int64_t i = r * stride + h * dim + j;
        ASSERT_NEAR(x[i], x0[i] / std::sqrt(ss + 1e-6) * 0.5, 1e-6);
      }
    }
    for (int64_t j = heads * dim; j < stride; ++j) EXPECT_EQ(x[r * stride + j], x0[r * stride + j]);
  }
}

TEST(GatedNormTest, SigmoidMulMatchesDefinition) {
  const int64_t rows = 4, dim = 10;
  auto x = RandomVec(rows * dim, 40, -3, 3);
  const auto x0 = x, g = RandomVec(rows * 2 * dim, 41, -5, 5);
  SigmoidMul(x.data(), dim, g.data() + dim, 2 * dim, rows, dim, Round::kNone);  // gate half
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < dim; ++j)
      ASSERT_NEAR(x[r * dim + j], x0[r * dim + j] / (1 + std::exp(-double(g[r * 2 * dim + dim + j]))), 1e-6);
}

// Every ISA level against the scalar references: odd widths (partial vectors, scalar tails), the
// real head sizes, both output roundings, the gated norm in place (y = x) as the layer runs it.
// Tolerances: sums of squares in another order and the vector exp (≤ 2 ulp) against expf; bf16
// outputs may then round to a neighbour (≤ 2⁻⁸ relative).
float IsaTolerance(Round round, float ref) {
  return (round == Round::kBf16 ? 8e-3f : 4e-6f) * (1 + std::fabs(ref));
}

TEST(GatedNormTest, EveryIsaMatchesScalarReference) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    for (int64_t dim : {1, 7, 8, 33, 128, 4099}) {
      for (Round round : {Round::kNone, Round::kBf16}) {
        const int64_t rows = 3, stride = dim + 5;
        const std::string what = std::string(ToString(isa)) + " dim=" + std::to_string(dim);
        const auto x = RandomVec(rows * stride, 50, -3, 3), z = RandomVec(rows * stride, 51, -6, 6),
                   w = RandomVec(dim, 52, 0.5f, 1.5f), g = RandomVec(rows * 2 * dim, 53, -9, 9);
        // GatedRmsNorm, y = x.
        std::vector<float> ref = x, out = x;
        ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
        GatedRmsNorm(ref.data(), stride, z.data(), stride, w.data(), ref.data(), stride, rows, dim,
                     1e-6f, round);
        ASSERT_TRUE(SetActiveIsa(isa));
        GatedRmsNorm(out.data(), stride, z.data(), stride, w.data(), out.data(), stride, rows, dim,
                     1e-6f, round);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], ref[i], IsaTolerance(round, ref[i])) << what << " gated norm " << i;
        }
        // L2NormHeads: heads of `dim` in rows of stride 2·dim + 5 (two heads, padding untouched).
        const int64_t l2_stride = 2 * dim + 5;
        const auto l2x = RandomVec(rows * l2_stride, 54, -2, 2);
        ref = l2x, out = l2x;
        ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
        L2NormHeads(ref.data(), l2_stride, rows, 2, dim, 1e-6f, 0.25f);
        ASSERT_TRUE(SetActiveIsa(isa));
        L2NormHeads(out.data(), l2_stride, rows, 2, dim, 1e-6f, 0.25f);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], ref[i], IsaTolerance(Round::kNone, ref[i])) << what << " l2 " << i;
        }
        // SigmoidMul with the gate in the second half of rows twice as wide.
        ref = x, out = x;
        ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
        SigmoidMul(ref.data(), stride, g.data() + dim, 2 * dim, rows, dim, round);
        ASSERT_TRUE(SetActiveIsa(isa));
        SigmoidMul(out.data(), stride, g.data() + dim, 2 * dim, rows, dim, round);
        for (size_t i = 0; i < out.size(); ++i) {
          ASSERT_NEAR(out[i], ref[i], IsaTolerance(round, ref[i])) << what << " sigmoid " << i;
        }
      }
    }
  }
}

// The AVX-512 gated norm, L2 norm and sigmoid gate are bitwise the AVX2 forms (checked against
// the scalar references above), natively where the CPU has AVX-512 and over SIMDe everywhere:
// widths with whole 16-lane vectors, a last 8-lane piece and scalar tails, gates far enough out
// that e^-v overflows or underflows, the norm in place, two L2-normed heads a row.
TEST(GatedNormTest, Avx512IsBitwiseTheAvx2Form) {
  IsaGuard guard;
  if (!SetActiveIsa(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  constexpr int64_t kRows = 3;
  // Each op on [kRows] rows of `stride` in place; z: the norm's gate, g: the sigmoid's (rows of
  // 2·dim, the gate in their second half, as gated attention's q·gate projection).
  struct Ops {
    std::function<void(float* xy, const float* z, int64_t stride, int64_t dim, const float* w,
                       Round round)> norm;
    std::function<void(float* x, int64_t stride, int64_t dim)> l2;
    std::function<void(float* x, int64_t stride, const float* g, int64_t dim, Round round)> gate;
  };
  const Ops dispatched{
      [](float* xy, const float* z, int64_t stride, int64_t dim, const float* w, Round round) {
        GatedRmsNorm(xy, stride, z, stride, w, xy, stride, kRows, dim, 1e-6f, round);
      },
      [](float* x, int64_t stride, int64_t dim) {
        L2NormHeads(x, stride, kRows, 2, dim, 1e-6f, 0.25f);
      },
      [](float* x, int64_t stride, const float* g, int64_t dim, Round round) {
        SigmoidMul(x, stride, g, 2 * dim, kRows, dim, round);
      }};
  std::vector<std::pair<std::string, Ops>> forms;
  if (SetActiveIsa(Isa::kAvx512)) forms.emplace_back("avx512", dispatched);
  forms.emplace_back(
      "avx512 (emulated)",
      Ops{[](float* xy, const float* z, int64_t stride, int64_t dim, const float* w, Round round) {
            emulated::GatedRmsNormAvx512(xy, stride, z, stride, w, xy, stride, kRows, dim, 1e-6f,
                                         round);
          },
          [](float* x, int64_t stride, int64_t dim) {
            emulated::L2NormHeadsAvx512(x, stride, kRows, 2, dim, 1e-6f, 0.25f);
          },
          [](float* x, int64_t stride, const float* g, int64_t dim, Round round) {
            emulated::SigmoidMulAvx512(x, stride, g, 2 * dim, kRows, dim, round);
          }});
  // The three ops' outputs under `ops`, one after the other.
  const auto run = [](const Ops& ops, const std::vector<float>& x, const std::vector<float>& z,
                      const std::vector<float>& w, const std::vector<float>& g, int64_t dim,
                      Round round) {
    const int64_t stride = dim + 5, l2_stride = 2 * dim + 5;
    std::vector<float> norm = x, gate = x, l2(kRows * l2_stride);
    std::copy(x.begin(), x.begin() + std::min(x.size(), l2.size()), l2.begin());
    ops.norm(norm.data(), z.data(), stride, dim, w.data(), round);
    ops.l2(l2.data(), l2_stride, dim);
    ops.gate(gate.data(), stride, g.data() + dim, dim, round);
    norm.insert(norm.end(), l2.begin(), l2.end());
    norm.insert(norm.end(), gate.begin(), gate.end());
    return norm;
  };
  for (int64_t dim : {1, 7, 8, 9, 15, 16, 23, 24, 33, 128, 4099}) {
    for (Round round : {Round::kNone, Round::kBf16}) {
      const int64_t stride = dim + 5;
      const auto seed = static_cast<uint32_t>(dim);
      const auto x = RandomVec(kRows * (2 * dim + 5), seed, -3, 3),
                 z = RandomVec(kRows * stride, seed + 1, -95, 95),
                 w = RandomVec(dim, seed + 2, 0.5f, 1.5f),
                 g = RandomVec(kRows * 2 * dim, seed + 3, -95, 95);
      ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));
      const auto want = run(dispatched, x, z, w, g, dim, round);
      for (const auto& [form, ops] : forms) {
        const auto got = run(ops, x, z, w, g, dim, round);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_EQ(got[i], want[i]) << form << " dim=" << dim << " output " << i;
        }
      }
    }
  }
}

// The AVX2 forms agree with the scalar ones at the real head size (dk = dv = 128).
TEST(GatedDeltaRuleTest, VariantsAgreeWithScalar) {
  IsaGuard guard;
  const int64_t t = 70, dk = 128, dv = 128;
  GdnData d = MakeGdn(t, dk, dv, 77);
  std::vector<float> o_ref(t * dv), s_ref = d.state, c_ref(t * dv), cs_ref = d.state;
  std::vector<float> scratch(GatedDeltaRuleChunkedScratch(64, dk, dv));
  SetActiveIsa(Isa::kScalar);
  GatedDeltaRuleRecurrent(HeadOf(d, 0, o_ref, s_ref), t, dk, dv);
  GatedDeltaRuleChunked(HeadOf(d, 0, c_ref, cs_ref), t, dk, dv, 64, scratch.data());
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    std::vector<float> o(t * dv), S = d.state, c(t * dv), cs = d.state;
    GatedDeltaRuleRecurrent(HeadOf(d, 0, o, S), t, dk, dv);
    GatedDeltaRuleChunked(HeadOf(d, 0, c, cs), t, dk, dv, 64, scratch.data());
    for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o_ref[i], 1e-5) << ToString(isa) << " " << i;
    for (size_t i = 0; i < S.size(); ++i) ASSERT_NEAR(S[i], s_ref[i], 1e-5) << ToString(isa) << " " << i;
    for (size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], c_ref[i], 1e-5) << ToString(isa) << " " << i;
    for (size_t i = 0; i < cs.size(); ++i) ASSERT_NEAR(cs[i], cs_ref[i], 1e-5) << ToString(isa) << " " << i;
  }
}

}  // namespace
}  // namespace cpm::kernels
