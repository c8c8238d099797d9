// DenseAttention against its scalar reference, and the reference against a float64 definition
// written here: odd token counts (a partial row block, a partial key tile, an odd last key
// pair), head dims with and without a partial value tile, padded row strides, at every ISA
// level the CPU has and over SIMDe's emulation of the AVX-512 BF16 kernel.
#include "kernels/dense_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/ops_avx512.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/test_util.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

struct Shape {
  int64_t n, heads, d;
};
// n: 1 token, a partial key tile, one whole row block (32), one past it, odd pair counts, and
// several blocks, up to a 448² slice's 1024; d: SigLIP's 72 (9 value tiles), 64, a partial value
// tile (6, 38), the least (2).
const Shape kShapes[] = {{1, 1, 8},  {7, 2, 6},   {32, 1, 72}, {33, 3, 72},  {9, 2, 2},
                         {100, 2, 38}, {257, 1, 64}, {64, 2, 72}, {300, 16, 72},
                         {1024, 1, 72}};
// Each shape, and two with negative scores only (MakeInputs).
const auto kCases = [] {
  std::vector<std::pair<Shape, bool>> cases;
  for (const Shape& s : kShapes) cases.push_back({s, false});
  cases.push_back({{33, 2, 72}, true});
  cases.push_back({{7, 1, 8}, true});
  return cases;
}();

// q, k, v of one call: [n, heads·d] rows `ld` = heads·d + 5 floats apart, values in [−2, 2]
// (bf16 values with `bf16`), each row's padding and a row past the last NaN, so that a read
// past a row or past the last token shows. With `negative`, q in [1, 2] and k in [−2, −1]:
// every score is negative, so a max that took a zero (a padding key's) would move the
// probabilities' rounding.
struct Inputs {
  int64_t ld;
  std::vector<float> q, k, v;
};
Inputs MakeInputs(const Shape& s, bool bf16, uint32_t seed, bool negative = false) {
  Inputs in;
  in.ld = s.heads * s.d + 5;
  for (auto [vec, salt] : {std::pair{&in.q, 1u}, {&in.k, 2u}, {&in.v, 3u}}) {
    const bool q = vec == &in.q, k = vec == &in.k;
    const float lo = negative && q ? 1.0f : -2.0f, hi = negative && k ? -1.0f : 2.0f;
    *vec = RandomVec((s.n + 1) * in.ld, seed * 7 + salt, lo, hi);
    for (int64_t t = 0; t <= s.n; ++t) {
      for (int64_t i = t < s.n ? s.heads * s.d : 0; i < in.ld; ++i) (*vec)[t * in.ld + i] = NAN;
    }
    if (bf16) {
      for (float& x : *vec) x = std::isnan(x) ? x : RoundBf16(x);
    }
  }
  return in;
}

// One bf16 step at |x|'s binade: where an output's rounding can flip to a neighbour.
double Bf16Step(double x) { return std::ldexp(1.0, std::ilogb(std::max(std::fabs(x), 1e-30)) - 7); }

// How far `got` is from `want` over [n, heads·d] rows `out_ld` apart: the largest difference
// beyond `steps` bf16 steps of want, and how many elements differ by more than `small`.
struct Diff {
  double max = 0;
  int64_t over_small = 0;
};
Diff Compare(const std::vector<float>& got, const std::vector<float>& want, const Shape& s,
             int64_t out_ld, int steps, double small) {
  Diff diff;
  for (int64_t t = 0; t < s.n; ++t) {
    for (int64_t i = 0; i < s.heads * s.d; ++i) {
      const double w = want[t * out_ld + i], e = std::fabs(got[t * out_ld + i] - w);
      const double beyond = std::max(0.0, e - steps * Bf16Step(w));
      if (!(beyond <= diff.max)) diff.max = std::isnan(e) ? e : beyond;  // a NaN sticks
      diff.over_small += !(e <= small);
    }
  }
  return diff;
}

using Run = std::function<void(const Inputs&, const Shape&, bool bf16, float* out, int64_t out_ld)>;

// `run` against the reference on every shape. With bf16 an output can differ by one bf16 step
// where its own rounding flips, and by a bf16 step of a probability whose rounding flips (its
// exp or score summed in another order: ≤ 2^-9 of that term's share); both rare, so few
// elements may differ at all. Without, only the f32 sums' order differs.
void ExpectMatchesReference(const std::string& what, const Run& run, bool bf16) {
  for (const auto& [s, negative] : kCases) {
    const Inputs in = MakeInputs(s, bf16, static_cast<uint32_t>(s.n * 131 + s.d), negative);
    const int64_t out_ld = s.heads * s.d + 3;
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
    std::vector<float> want(s.n * out_ld, -7.0f), got = want;
    DenseAttentionReference(in.q.data(), in.k.data(), in.v.data(), in.ld, s.n, s.heads, s.d,
                            scale, bf16, want.data(), out_ld);
    run(in, s, bf16, got.data(), out_ld);
    const Diff diff = Compare(got, want, s, out_ld, bf16 ? 1 : 0, 2e-6);
    const std::string where = what + (bf16 ? " bf16" : " f32") + " n=" + std::to_string(s.n) +
                              " heads=" + std::to_string(s.heads) + " d=" + std::to_string(s.d) +
                              (negative ? " negative scores" : "");
    EXPECT_LE(diff.max, bf16 ? 1e-3 : 2e-6) << where;
    EXPECT_LE(diff.over_small, bf16 ? s.n * s.heads * s.d / 200 : 0) << where;
    for (int64_t t = 0; bf16 && t < s.n; ++t) {  // stored rounded
      for (int64_t i = 0; i < s.heads * s.d; ++i) {
        ASSERT_EQ(got[t * out_ld + i], RoundBf16(got[t * out_ld + i])) << where;
      }
    }
    for (int64_t t = 0; t < s.n; ++t) {  // the output rows' padding is left alone
      for (int64_t i = s.heads * s.d; i < out_ld; ++i) {
        ASSERT_EQ(got[t * out_ld + i], -7.0f) << where;
      }
    }
  }
}

// The reference against attention in float64 from its definition; with bf16 the reference's
// probabilities, each rounded within 2^-9 of itself, put it within 2^-9 · max |v| (= 2^-8), and
// its output's rounding half a bf16 step further (≤ 2^-8 below |2|).
TEST(DenseAttentionTest, ReferenceMatchesTheFloat64Definition) {
  for (bool bf16 : {false, true}) {
    for (const Shape& s : kShapes) {
      const Inputs in = MakeInputs(s, bf16, 5);
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
      const int64_t D = s.heads * s.d;
      std::vector<float> got(s.n * D);
      DenseAttentionReference(in.q.data(), in.k.data(), in.v.data(), in.ld, s.n, s.heads, s.d,
                              scale, bf16, got.data(), D);
      for (int64_t h = 0; h < s.heads; ++h) {
        for (int64_t t = 0; t < s.n; ++t) {
          std::vector<double> p(s.n);
          const float* qt = in.q.data() + t * in.ld + h * s.d;
          for (int64_t j = 0; j < s.n; ++j) {
            const float* kj = in.k.data() + j * in.ld + h * s.d;
            double dot = 0;
            for (int64_t c = 0; c < s.d; ++c) dot += double(qt[c]) * kj[c];
            p[j] = dot * scale;
          }
          const double m = *std::max_element(p.begin(), p.end());
          double sum = 0;
          for (double& x : p) sum += (x = std::exp(x - m));
          for (int64_t c = 0; c < s.d; ++c) {
            double o = 0;
            for (int64_t j = 0; j < s.n; ++j) o += p[j] * in.v[j * in.ld + h * s.d + c];
            ASSERT_NEAR(got[t * D + h * s.d + c], o / sum, bf16 ? 2.0 / 256 + 1e-5 : 2e-6)
                << "n=" << s.n << " d=" << s.d << " t=" << t << " h=" << h << " c=" << c;
          }
        }
      }
    }
  }
}

// Whatever DenseAttention picks at each ISA level (the AVX-512 BF16 kernel for bf16 values at
// the AVX-512 level where the CPU has AVX512_BF16, the AVX2 kernel otherwise from AVX2 up, the
// reference itself at the scalar level), f32 and bf16.
TEST(DenseAttentionTest, MatchesTheReferenceAtEveryIsa) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    for (bool bf16 : {false, true}) {
      ExpectMatchesReference(
          ToString(isa),
          [&](const Inputs& in, const Shape& s, bool b, float* out, int64_t out_ld) {
            DenseAttention(in.q.data(), in.k.data(), in.v.data(), in.ld, s.n, s.heads, s.d,
                           1.0f / std::sqrt(static_cast<float>(s.d)), b, out, out_ld, pool);
          },
          bf16);
    }
  }
}

// The AVX-512 BF16 kernel over SIMDe's emulation, on any x86-64.
TEST(DenseAttentionTest, EmulatedAvx512Bf16MatchesTheReference) {
  ThreadPool pool(2);
  ExpectMatchesReference(
      "avx512 (emulated)",
      [&](const Inputs& in, const Shape& s, bool, float* out, int64_t out_ld) {
        emulated::DenseAttentionBf16Avx512(in.q.data(), in.k.data(), in.v.data(), in.ld, s.n,
                                           s.heads, s.d,
                                           1.0f / std::sqrt(static_cast<float>(s.d)), out,
                                           out_ld, pool);
      },
      true);
}

// The AMX kernel itself (what DenseAttention picks for bf16 where AmxChoice().on), where the CPU
// and the OS offer AMX (no CI machine does; checked on 2 vCPUs of a Xeon with AMX-BF16).
TEST(DenseAttentionTest, AmxMatchesTheReference) {
  if (!AmxUsable() || BestIsa() != Isa::kAvx512 || !GetCpuFeatures().avx512bf16) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  ThreadPool pool(2);
  ExpectMatchesReference(
      "amx",
      [&](const Inputs& in, const Shape& s, bool, float* out, int64_t out_ld) {
        DenseAttentionBf16Amx(in.q.data(), in.k.data(), in.v.data(), in.ld, s.n, s.heads, s.d,
                              1.0f / std::sqrt(static_cast<float>(s.d)), out, out_ld, pool);
      },
      true);
}

}  // namespace
}  // namespace cpm::kernels
