// Log-softmax, softmax, exps and top-k over vocabulary-sized rows: every ISA against references,
// the AVX-512 exps against the AVX2 ones.
#include "kernels/sampling_ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

// n values in [-20, 20), every third rounded to an integer, so that the largest ones tie.
std::vector<float> RandomWithTies(int64_t n, uint32_t seed) {
  std::vector<float> x = RandomVec(n, seed, -20, 20);
  for (int64_t i = 0; i < n; i += 3) x[i] = std::round(x[i]);
  return x;
}

TEST(SamplingOpsTest, LogSoftmaxMatchesDoubleReference) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 33, 73448}) {
      std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n), -30, 30);
      double mx = *std::max_element(x.begin(), x.end()), z = 0;
      for (float v : x) z += std::exp(double{v} - mx);
      const double log_z = mx + std::log(z);
      std::vector<float> out(n);
      const float got_log_z = LogSoftmax(x.data(), n, out.data());
      EXPECT_NEAR(got_log_z, log_z, 1e-6 * (1 + std::fabs(log_z))) << ToString(isa);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(out[i], x[i] - log_z, 1e-6 * (1 + std::fabs(x[i] - log_z)))
            << ToString(isa) << " n=" << n << " i=" << i;
      }
      std::vector<float> p(n);
      Softmax(x.data(), n, p.data());
      double total = 0;
      for (float v : p) total += v;
      EXPECT_NEAR(total, 1.0, 1e-4) << ToString(isa);
      // In place works too.
      LogSoftmax(x.data(), n, x.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], out[i]);
    }
  }
}

TEST(SamplingOpsTest, ExpScaledMatchesDoubleReference) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 33, 73448}) {
      std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n) + 5, -30, 30);
      const float mx = Max(x.data(), n), scale = 1.0f / 0.7f;
      EXPECT_EQ(mx, *std::max_element(x.begin(), x.end()));
      std::vector<float> out(n);
      const float sum = ExpScaled(x.data(), n, mx, scale, out.data());
      double want_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double arg = (double{x[i]} - mx) * scale, want = std::exp(arg);
        want_sum += want;
        // The f32 argument's two roundings (relative 6e-8 each, times |arg|) and exp's own.
        ASSERT_NEAR(out[i], want, want * (2.5e-7 * std::fabs(arg) + 5e-7))
            << ToString(isa) << " n=" << n << " i=" << i;
      }
      EXPECT_NEAR(sum, want_sum, 5e-5 * want_sum) << ToString(isa) << " n=" << n;  // f32 lanes
    }
  }
}

TEST(SamplingOpsTest, ArgMaxIsTheFirstLargestIgnoringNaN) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 33, 4099, 73448}) {
      std::vector<float> x = RandomWithTies(n, static_cast<uint32_t>(n + 3));
      const auto first_largest = [&] {
        int64_t best = -1;
        for (int64_t i = 0; i < n; ++i) {
          if (!std::isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
        }
        return best < 0 ? 0 : best;
      };
      EXPECT_EQ(ArgMax(x.data(), n), first_largest()) << ToString(isa) << " n=" << n;
      x[n - 1] = NAN;  // NaNs in the scalar tail and the last whole vector; the largest twice
      if (n >= 16) x[n / 16 * 16 - 1] = NAN;
      x[n / 2] = x[n / 3] = 25.0f;
      EXPECT_EQ(ArgMax(x.data(), n), n / 3) << ToString(isa) << " n=" << n;
      EXPECT_EQ(Max(x.data(), n), 25.0f) << ToString(isa) << " n=" << n;
      std::fill(x.begin(), x.end(), -INFINITY);  // nothing but -inf and a NaN
      x[n / 2] = NAN;
      EXPECT_EQ(ArgMax(x.data(), n), 0) << ToString(isa) << " n=" << n;  // the first -inf
    }
  }
}

// The AVX-512 ExpScaled is bitwise the AVX2 one (its outputs and their sum), natively where the
// CPU has AVX-512 and over SIMDe's emulation everywhere: steps of four vectors, single vectors
// after them, a scalar tail; underflowing and -inf inputs.
TEST(SamplingOpsTest, ExpScaledAvx512IsBitwiseTheAvx2Form) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "needs AVX2 (the reference form)";
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 64 + 16 + 5, 4099, 73448}) {
    std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n + 7), -40, 10);
    x[0] = -INFINITY;
    if (n > 1) x[n / 2] = -200.0f;
    const float mx = Max(x.data(), n);
    std::vector<float> want(n), got(n);
    const float want_sum = ExpScaledAvx2(x.data(), n, mx, 1.25f, want.data());
    std::vector<std::pair<std::string, float>> sums;
    sums.emplace_back("emulated", emulated::ExpScaledAvx512(x.data(), n, mx, 1.25f, got.data()));
    std::vector<std::vector<float>> outs{got};
    if (BestIsa() >= Isa::kAvx512) {
      sums.emplace_back("native", ExpScaledAvx512(x.data(), n, mx, 1.25f, got.data()));
      outs.push_back(got);
    }
    for (size_t v = 0; v < sums.size(); ++v) {
      const std::string what = sums[v].first + " n=" + std::to_string(n);
      ASSERT_EQ(std::bit_cast<uint32_t>(sums[v].second), std::bit_cast<uint32_t>(want_sum))
          << what;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(outs[v][i]), std::bit_cast<uint32_t>(want[i]))
            << what << " i=" << i;
      }
    }
  }
}

// The AVX-512 sum of exps (LogSoftmax's) is bitwise the AVX2 one, natively and over SIMDe:
// steps of four vectors of 16, single vectors of 8 after them, a scalar tail; -inf and
// underflowing inputs.
TEST(SamplingOpsTest, SumExpAvx512IsBitwiseTheAvx2Form) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "needs AVX2 (the reference form)";
  for (int64_t n : {1, 7, 8, 9, 15, 16, 17, 63, 64, 65, 64 + 24 + 5, 4099, 73448}) {
    std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n + 11), -40, 10);
    x[0] = -INFINITY;
    if (n > 1) x[n / 2] = -200.0f;
    const float mx = Max(x.data(), n);
    const double want = SumExpAvx2(x.data(), n, mx);
    std::vector<std::pair<std::string, double>> sums;
    sums.emplace_back("emulated", emulated::SumExpAvx512(x.data(), n, mx));
    if (BestIsa() >= Isa::kAvx512) sums.emplace_back("native", SumExpAvx512(x.data(), n, mx));
    for (const auto& [what, sum] : sums) {
      EXPECT_EQ(std::bit_cast<uint64_t>(sum), std::bit_cast<uint64_t>(want))
          << what << " n=" << n << ": " << sum << " vs " << want;
    }
  }
}

// CountAtLeast at every ISA against the plain count: ties at the threshold counted, NaNs never,
// infinities by their sign, in whole vectors and in the tail.
TEST(SamplingOpsTest, CountAtLeastMatchesThePlainCount) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 15, 16, 17, 33, 4099, 73448}) {
      std::vector<float> x = RandomWithTies(n, static_cast<uint32_t>(n + 9));
      for (int64_t i = 0; i < n; i += 13) x[i] = NAN;
      if (n > 5) x[5] = INFINITY;
      if (n > 6) x[6] = -INFINITY;
      for (float t : {-INFINITY, -3.0f, 0.0f, 7.0f, 20.0f, INFINITY}) {
        int64_t want = 0;
        for (float v : x) want += v >= t;
        EXPECT_EQ(CountAtLeast(x.data(), n, t), want) << ToString(isa) << " n=" << n << " t=" << t;
      }
    }
  }
}

// MassSlices at every ISA against its definition, trunc((x − lo)·scale) held to [0, count − 1]
// in f32: values below lo and past the top, NaNs and infinities in whole vectors and the tail;
// a scale of 0 (no finite largest logit) and of +inf (a NaN product at lo, which counts as 0).
// FindEqual then finds each slice's tokens in order.
TEST(SamplingOpsTest, MassSlicesMatchTheirDefinition) {
  IsaGuard guard;
  constexpr int kCount = 4096;
  const auto want_slice = [](float v, float lo, float scale) -> int16_t {
    if (std::isnan(v)) return kNanSlice;
    if (std::isinf(v)) return v < 0.0f ? -1 : kCount;
    const float f = (v - lo) * scale;
    if (!(f > 0.0f)) return 0;
    return static_cast<int16_t>(std::min(f, static_cast<float>(kCount - 1)));
  };
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 15, 16, 17, 33, 4099, 73448}) {
      std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n + 3), -20, 20);
      for (int64_t i = 0; i < n; ++i) {
        if (i % 7 == 2) x[i] = NAN;
        if (i % 11 == 3) x[i] = -INFINITY;
        if (i % 13 == 4) x[i] = INFINITY;
        if (i % 17 == 5) x[i] = -5.0f;  // lo itself
        if (i % 19 == 6) x[i] = 15.0f;  // the top of the range: slice count − 1
      }
      x[n - 1] = 3.0f;
      for (const float scale : {kCount / 20.0f, 0.0f, INFINITY}) {
        std::vector<int16_t> got(n, 99);
        MassSlices(x.data(), n, -5.0f, scale, kCount, got.data());
        const std::string what = std::string(ToString(isa)) + " n=" + std::to_string(n) +
                                 " scale=" + std::to_string(scale);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(got[i], want_slice(x[i], -5.0f, scale)) << what << " i=" << i << " x=" << x[i];
        }
        for (const int16_t b : {int16_t{kNanSlice}, int16_t{-1}, int16_t{0}, got[n - 1]}) {
          std::vector<int64_t> found;
          for (int64_t i = FindEqual(got.data(), 0, n, b); i < n;
               i = FindEqual(got.data(), i + 1, n, b)) {
            found.push_back(i);
          }
          std::vector<int64_t> want;
          for (int64_t i = 0; i < n; ++i) {
            if (got[i] == b) want.push_back(i);
          }
          ASSERT_EQ(found, want) << what << " slice " << b;
        }
      }
    }
  }
}

// Inputs for TopK: random values with ties, a NaN and an -inf ("random"); ascending, where
// every element beats the ones before it ("ascending"); all -inf but every 97th and a NaN, as a
// vocabulary masked for a constraint ("masked"), where the -infs fill up to k; and the elements
// at multiples of n / 1024, where TopK samples its first threshold, above all others but tied
// ("decoy"), so that nothing lies above that guess and the scan must start again from -inf.
std::vector<float> TopKInput(const std::string& kind, int64_t n) {
  std::vector<float> x = RandomWithTies(n, static_cast<uint32_t>(n + 1));
  if (kind == "ascending") {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i / 2);  // pairs of ties
  } else if (kind == "masked") {
    for (int64_t i = 0; i < n; ++i) x[i] = i % 97 == 5 ? x[i] : -INFINITY;
  } else if (kind == "decoy") {
    for (int64_t i = 0; i < 1024 && i * (n / 1024) < n; ++i) x[i * (n / 1024)] = 30.0f;
  }
  if (n > 5) {
    x[2] = NAN;
    if (kind == "random") x[4] = -INFINITY;
  }
  return x;
}

// The smallest finite value at every ISA: NaNs and infinities in whole vectors and in the
// tail ignored, +inf when nothing is finite.
TEST(SamplingOpsTest, MinFiniteSkipsNaNAndInfinities) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t n : {1, 7, 16, 33, 73448}) {
      std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n + 5), -20, 20);
      float want = INFINITY;
      for (int64_t i = 0; i < n; ++i) {
        if (i % 5 == 1) x[i] = -INFINITY;
        if (i % 7 == 2) x[i] = NAN;
        if (i % 11 == 3) x[i] = INFINITY;
        if (std::isfinite(x[i])) want = std::min(want, x[i]);
      }
      const std::string what = std::string(ToString(isa)) + " n=" + std::to_string(n);
      EXPECT_EQ(MinFinite(x.data(), n), want) << what;
      x[n - 1] = -30.0f;  // the smallest in the tail (or the last whole vector)
      EXPECT_EQ(MinFinite(x.data(), n), -30.0f) << what;
      std::fill(x.begin(), x.end(), -INFINITY);
      x[0] = NAN;
      EXPECT_EQ(MinFinite(x.data(), n), INFINITY) << what;
    }
  }
}

TEST(SamplingOpsTest, TopKMatchesStableSort) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (const std::string kind : {"random", "ascending", "masked", "decoy"}) {
      for (int64_t n : {1, 7, 33, 4099, 73448}) {
        const std::vector<float> x = TopKInput(kind, n);
        std::vector<int32_t> order(n);
        std::iota(order.begin(), order.end(), 0);
        order.erase(std::remove_if(order.begin(), order.end(),
                                   [&](int32_t i) { return std::isnan(x[i]); }),
                    order.end());
        std::stable_sort(order.begin(), order.end(),
                         [&](int32_t a, int32_t b) { return x[a] > x[b]; });
        for (int64_t k : {1, 5, 20, 64, 256, 1000}) {
          std::vector<int32_t> idx(k, -1);
          std::vector<float> val(k);
          const int64_t got = TopK(x.data(), n, k, idx.data(), val.data());
          const std::string what = std::string(ToString(isa)) + " " + kind +
                                   " n=" + std::to_string(n) + " k=" + std::to_string(k);
          ASSERT_EQ(got, std::min<int64_t>(k, static_cast<int64_t>(order.size()))) << what;
          for (int64_t j = 0; j < got; ++j) {
            ASSERT_EQ(idx[j], order[j]) << what << " j=" << j;
            ASSERT_EQ(std::bit_cast<uint32_t>(val[j]), std::bit_cast<uint32_t>(x[order[j]]));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpm::kernels
