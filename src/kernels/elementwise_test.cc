// RMSNorm, RoPE, SiLU-mul, residual, scale and bf16 rounding: every ISA against the scalar
// reference (ActiveIsa = scalar) on odd sizes. Elementwise ops must match bit for bit; ops with
// a reduction or exp may differ by f32 rounding, i.e. by at most one bf16 step after rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "kernels/activation.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

const int64_t kDims[] = {1, 7, 33, 64, 4096 + 3};

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// `got` against `ref`: `tol_rel` 0 means bit-exact; otherwise each element must be within
// tol_rel·(1 + |ref|), or (rounded outputs) within one bf16 step for a few elements.
void ExpectMatches(const std::vector<float>& got, const std::vector<float>& ref, double tol_rel,
                   bool bf16_out, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size());
  int64_t off_by_one_step = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (Bits(got[i]) == Bits(ref[i])) continue;
    if (tol_rel == 0) {
      FAIL() << what << " elem " << i << ": " << got[i] << " vs " << ref[i]
             << " (must be bit-exact)";
    }
    const double diff = std::fabs(double{got[i]} - ref[i]);
    if (bf16_out) {
      // One bf16 step at |ref| is 2^-7 relative (at most): a rounding boundary was crossed.
      ASSERT_LE(diff, std::fabs(double{ref[i]}) * (1.0 / 128) + 1e-30) << what << " elem " << i;
      ++off_by_one_step;
    } else {
      ASSERT_LE(diff, tol_rel * (1 + std::fabs(double{ref[i]})))
          << what << " elem " << i << ": " << got[i] << " vs " << ref[i];
    }
  }
  // Crossing a bf16 rounding boundary needs an f32 difference right at the boundary: rare.
  EXPECT_LE(off_by_one_step, static_cast<int64_t>(ref.size() / 100 + 2)) << what;
}

// Runs `op` (which writes its result into the vector it gets) under the scalar level and under
// every other level, and compares (ExpectMatches).
void Compare(const std::function<void(std::vector<float>&)>& op, double tol_rel, bool bf16_out,
             const std::string& what) {
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
  std::vector<float> ref;
  op(ref);
  for (Isa isa : IsasToTest()) {
    if (isa == Isa::kScalar) continue;
    ASSERT_TRUE(SetActiveIsa(isa));
    std::vector<float> got;
    op(got);
    ExpectMatches(got, ref, tol_rel, bf16_out, what + " " + ToString(isa));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(ElementwiseTest, RmsNorm) {
  for (int64_t dim : kDims) {
    for (int mode = 0; mode < 3; ++mode) {
      const int64_t rows = 3, xs = dim + 5;
      const std::vector<float> x = RandomVec(rows * xs, 1, -3, 3);
      const std::vector<float> w = RandomVec(dim, 2, 0.5, 1.5);
      RmsNormParams p;
      p.eps = 1e-5f;
      if (mode == 1) {  // MiniCPM: two roundings
        p.round_normalized = true;
        p.round = Round::kBf16;
      } else if (mode == 2) {  // Qwen3.5: 1 + w, one rounding
        p.weight_offset = 1.0f;
        p.round = Round::kBf16;
      }
      Compare([&](std::vector<float>& y) {
        y.assign(rows * dim, 0);
        RmsNorm(x.data(), xs, w.data(), y.data(), dim, rows, dim, p);
      }, 1e-5, mode != 0, "rmsnorm dim=" + std::to_string(dim) + " mode=" + std::to_string(mode));
    }
  }
}

// The AVX-512 form over SIMDe (rmsnorm_avx512_emulated.cc) is the AVX2 form to the bit: the same
// sum of squares, then elementwise ops. Rows are written with a gap (y_stride > dim) that must
// stay untouched, and y aliases x in the last case, as the model's head runs it.
TEST(ElementwiseTest, RmsNormAvx512EmulatedIsAvx2BitForBit) {
  IsaGuard guard;
  if (!SetActiveIsa(Isa::kAvx2)) GTEST_SKIP() << "no AVX2";
  for (int64_t dim : kDims) {
    for (int mode = 0; mode < 4; ++mode) {
      const int64_t rows = 3, xs = dim + 5, ys = dim + 3;
      const std::vector<float> x = RandomVec(rows * xs, 11, -3, 3);
      const std::vector<float> w = RandomVec(dim, 12, 0.5, 1.5);
      RmsNormParams p;
      p.eps = 1e-5f;
      p.round_normalized = mode == 1 || mode == 3;
      p.round = mode >= 1 ? Round::kBf16 : Round::kNone;
      p.weight_offset = mode == 2 ? 1.0f : 0.0f;
      std::vector<float> want(rows * ys, -7.0f), got(rows * ys, -7.0f);
      RmsNorm(x.data(), xs, w.data(), want.data(), ys, rows, dim, p);
      emulated::RmsNormAvx512(x.data(), xs, w.data(), got.data(), ys, rows, dim, p);
      const std::string what = "rmsnorm avx512(emulated) dim=" + std::to_string(dim);
      ExpectMatches(got, want, 0, false, what + " mode=" + std::to_string(mode));
      std::vector<float> in_place = x;
      emulated::RmsNormAvx512(in_place.data(), xs, w.data(), in_place.data(), xs, rows, dim, p);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < xs; ++j) {
          const float expect = j < dim ? want[r * ys + j] : x[r * xs + j];
          ASSERT_EQ(Bits(in_place[r * xs + j]), Bits(expect))
              << what << " in place " << r << "," << j;
        }
      }
    }
  }
}

// RmsNormToPairs holds RmsNorm's bf16 outputs as pairs (element 2i low), an odd dim's last
// partner zero, and writes nothing past a row's (dim + 1) / 2 pairs: at every ISA against RmsNorm
// there, and over SIMDe's AVX-512 (rmsnorm_avx512_emulated.cc) against AVX2's (whose sum of
// squares it shares; the scalar sum's order differs), MiniCPM's two roundings and Qwen3.5's one.
TEST(ElementwiseTest, RmsNormToPairsHoldsRmsNormsBits) {
  IsaGuard guard;
  using ToPairs = std::function<void(const float*, int64_t, const float*, uint32_t*, int64_t,
                                     int64_t, int64_t, const RmsNormParams&)>;
  struct Form {
    std::string name;
    Isa reference;  // where RmsNorm gives the values it must hold
    ToPairs to_pairs;
  };
  std::vector<Form> forms;
  for (Isa isa : IsasToTest()) {
    forms.push_back({ToString(isa), isa, [](auto... a) { RmsNormToPairs(a...); }});
  }
  if (SetActiveIsa(Isa::kAvx2)) {
    forms.push_back({"avx512(emulated)", Isa::kAvx2,
                     [](auto... a) { emulated::RmsNormToPairsAvx512(a...); }});
  }
  for (int64_t dim : kDims) {
    for (bool minicpm : {true, false}) {
      const int64_t rows = 3, xs = dim + 5, ps = (dim + 1) / 2 + 4;
      const std::vector<float> x = RandomVec(rows * xs, 13, -3, 3);
      const std::vector<float> w = RandomVec(dim, 14, 0.5, 1.5);
      RmsNormParams p;
      p.eps = 1e-5f;
      p.round_normalized = minicpm;
      p.weight_offset = minicpm ? 0.0f : 1.0f;
      p.round = Round::kBf16;
      for (const Form& form : forms) {
        ASSERT_TRUE(SetActiveIsa(form.reference));
        std::vector<float> want(rows * dim);
        RmsNorm(x.data(), xs, w.data(), want.data(), dim, rows, dim, p);
        std::vector<uint32_t> pairs(rows * ps, 0xdeadbeef);
        form.to_pairs(x.data(), xs, w.data(), pairs.data(), ps, rows, dim, p);
        const std::string what = form.name + " dim=" + std::to_string(dim) +
                                 (minicpm ? " minicpm" : " qwen3.5");
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t i = 0; i < ps; ++i) {
            const uint32_t got = pairs[r * ps + i];
            if (i >= (dim + 1) / 2) {
              ASSERT_EQ(got, 0xdeadbeefu) << what << ": wrote past row " << r;
              continue;
            }
            const float lo = want[r * dim + 2 * i];
            const float hi = 2 * i + 1 < dim ? want[r * dim + 2 * i + 1] : 0.0f;
            ASSERT_EQ(got, Bits(lo) >> 16 | (Bits(hi) & 0xffff0000u))
                << what << " row " << r << " pair " << i;
          }
        }
      }
    }
  }
}

TEST(ElementwiseTest, RopeIsBitExact) {
  for (int64_t head_dim : {8, 40, 64, 80, 128}) {
    for (int64_t rot_dim : {head_dim, head_dim / 2}) {
      for (Round r : {Round::kNone, Round::kBf16}) {
        for (RopeRounding where : {RopeRounding::kResults, RopeRounding::kEveryOp}) {
          const int64_t n_tokens = 5, n_heads = 3, xs = n_heads * head_dim + 2;
          const std::vector<float> x0 = RandomVec(n_tokens * xs, 3, -4, 4);
          const std::vector<float> c = RandomVec(n_tokens * rot_dim / 2, 4);
          const std::vector<float> s = RandomVec(n_tokens * rot_dim / 2, 5);
          Compare([&](std::vector<float>& x) {
            x = x0;
            RopeNeox(x.data(), xs, n_tokens, n_heads, head_dim, rot_dim, c.data(), s.data(), r,
                     where);
          }, 0, false, "rope d=" + std::to_string(head_dim) + " rot=" + std::to_string(rot_dim));
          // The AVX-512 form over SIMDe (rope_avx512_emulated.cc), too.
          IsaGuard guard;
          ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
          std::vector<float> want = x0, got = x0;
          RopeNeox(want.data(), xs, n_tokens, n_heads, head_dim, rot_dim, c.data(), s.data(), r,
                   where);
          emulated::RopeNeoxAvx512(got.data(), xs, n_tokens, n_heads, head_dim, rot_dim, c.data(),
                                   s.data(), r,
                                   r == Round::kBf16 && where == RopeRounding::kEveryOp);
          ExpectMatches(got, want, 0, false, "rope avx512(emulated) d=" + std::to_string(head_dim));
        }
      }
    }
  }
}

TEST(ElementwiseTest, RopeHasNoFmaContraction) {
  // a·c − b·s with products rounded first differs from fma(a, c, −b·s) for these values; the
  // expected numbers are computed in double from the f32-rounded products.
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    std::vector<float> x(16);
    for (int i = 0; i < 16; ++i) x[i] = 1.0f + std::ldexp(1.0f, -12) * (i + 1);
    std::vector<float> c(8, 1.0f + std::ldexp(1.0f, -13)), s(8, 1.0f - std::ldexp(1.0f, -14));
    std::vector<float> want(16);
    for (int i = 0; i < 8; ++i) {
      const float ac = x[i] * c[i], bs = x[i + 8] * s[i], bc = x[i + 8] * c[i], as = x[i] * s[i];
      want[i] = ac - bs;
      want[i + 8] = bc + as;
    }
    RopeNeox(x.data(), 16, 1, 1, 16, 16, c.data(), s.data(), Round::kNone);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(Bits(x[i]), Bits(want[i])) << ToString(isa) << " " << i;
  }
}

// bf16 RoPE as HF's apply_rotary_pos_emb on bf16 tensors (RopeRounding::kEveryOp): each product
// rounded to bf16, then the sum; against the results-only rounding, which differs here.
TEST(ElementwiseTest, RopeRoundsEveryOpWhereAsked) {
  IsaGuard guard;
  const std::vector<float> x0 = RandomVec(16, 11, -4, 4), c = RandomVec(8, 12), s = RandomVec(8, 13);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    std::vector<float> x = x0, once = x0;
    RopeNeox(x.data(), 16, 1, 1, 16, 16, c.data(), s.data(), Round::kBf16, RopeRounding::kEveryOp);
    RopeNeox(once.data(), 16, 1, 1, 16, 16, c.data(), s.data(), Round::kBf16);
    int differ = 0;
    for (int i = 0; i < 8; ++i) {
      const float a = x0[i], b = x0[i + 8];
      const float ac = RoundBf16(a * c[i]), bs = RoundBf16(b * s[i]);
      const float bc = RoundBf16(b * c[i]), as = RoundBf16(a * s[i]);
      EXPECT_EQ(Bits(x[i]), Bits(RoundBf16(ac - bs))) << ToString(isa) << " " << i;
      EXPECT_EQ(Bits(x[i + 8]), Bits(RoundBf16(bc + as))) << ToString(isa) << " " << i;
      differ += (x[i] != once[i]) + (x[i + 8] != once[i + 8]);
    }
    EXPECT_GT(differ, 0) << ToString(isa);
  }
}

TEST(ElementwiseTest, SiluMul) {
  for (int64_t dim : kDims) {
    for (Round r : {Round::kNone, Round::kBf16}) {
      const int64_t rows = 2;
      const std::vector<float> g = RandomVec(rows * dim, 6, -12, 12);
      const std::vector<float> u = RandomVec(rows * dim, 7, -2, 2);
      // Output rows padded with a sentinel the reference leaves alone: a vector tail that
      // writes past `dim` differs there.
      Compare([&](std::vector<float>& o) {
        o.assign(rows * (dim + 5), -7.0f);
        SiluMul(g.data(), dim, u.data(), dim, o.data(), dim + 5, rows, dim, r);
      }, 1e-6, r == Round::kBf16, "silu dim=" + std::to_string(dim));
    }
  }
}

// The AVX-512 variant compiled over SIMDe (activation_avx512_emulated.cc), so that CPUs without
// AVX-512 check it too.
TEST(ElementwiseTest, SiluMulAvx512EmulatedMatchesScalar) {
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
  for (int64_t dim : kDims) {
    for (Round r : {Round::kNone, Round::kBf16}) {
      const int64_t rows = 2, os = dim + 5;
      const std::vector<float> g = RandomVec(rows * dim, 6, -12, 12);
      const std::vector<float> u = RandomVec(rows * dim, 7, -2, 2);
      std::vector<float> ref(rows * os, -7.0f), got(rows * os, -7.0f);
      SiluMul(g.data(), dim, u.data(), dim, ref.data(), os, rows, dim, r);
      emulated::SiluMulAvx512(g.data(), dim, u.data(), dim, got.data(), os, rows, dim, r);
      ExpectMatches(got, ref, 1e-6, r == Round::kBf16,
                    "silu avx512(emulated) dim=" + std::to_string(dim));
    }
  }
}

// The pairs epilogue compiled over SIMDe: the pairs PrepareX makes of SiluMul's rounded output.
// Its whole 32-column groups go four at a time over the rows: 3 rows of 128 make three full
// batches, of 32 or 64 a short last one, of 4099 whole groups and then a tail in every row.
TEST(ElementwiseTest, SiluMulToPairsAvx512EmulatedIsSiluMulPacked) {
  for (int64_t dim : {1, 2, 15, 16, 17, 31, 32, 33, 64, 95, 128, 4099}) {
    const int64_t rows = 3, ps = dim / 2 + 20;
    const std::vector<float> g = RandomVec(rows * dim, 11, -12, 12);
    const std::vector<float> u = RandomVec(rows * dim, 12, -2, 2);
    std::vector<float> v(rows * dim);
    emulated::SiluMulAvx512(g.data(), dim, u.data(), dim, v.data(), dim, rows, dim, Round::kBf16);
    std::vector<uint32_t> got(rows * ps, 0xdeadbeef);
    emulated::SiluMulToPairsAvx512(g.data(), dim, u.data(), dim, got.data(), ps, rows, dim);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t p = 0; p < ps; ++p) {
        uint32_t want = 0xdeadbeef;  // past the row's pairs: untouched
        if (p < (dim + 1) / 2) {
          uint32_t lo, hi = 0;
          std::memcpy(&lo, &v[r * dim + 2 * p], 4);
          if (2 * p + 1 < dim) std::memcpy(&hi, &v[r * dim + 2 * p + 1], 4);
          want = (lo >> 16) | (hi & 0xffff0000u);
        }
        ASSERT_EQ(got[r * ps + p], want) << "dim " << dim << " row " << r << " pair " << p;
      }
    }
  }
}

TEST(ElementwiseTest, ResidualScaleAndRoundAreBitExact) {
  for (int64_t dim : kDims) {
    for (Round r : {Round::kNone, Round::kBf16}) {
      const int64_t rows = 3;
      const std::vector<float> h0 = RandomVec(rows * dim, 8, -10, 10);
      const std::vector<float> d = RandomVec(rows * dim, 9, -10, 10);
      Compare([&](std::vector<float>& h) {
        h = h0;
        AddScaled(h.data(), dim, d.data(), dim, rows, dim, 0.2857738137f, r);
      }, 0, false, "add_scaled dim=" + std::to_string(dim));
      // A bf16 delta (matmul.h's Bf16Rows): at every level bitwise the f32 delta it holds.
      std::vector<uint16_t> d16(d.size());
      std::vector<float> wide(d.size());
      for (size_t i = 0; i < d.size(); ++i) wide[i] = Bf16ToF32(d16[i] = F32ToBf16(d[i]));
      Compare([&](std::vector<float>& h) {
        h = h0;
        AddScaled(h.data(), dim, d16.data(), dim, rows, dim, 0.2857738137f, r);
        std::vector<float> want = h0;
        AddScaled(want.data(), dim, wide.data(), dim, rows, dim, 0.2857738137f, r);
        ExpectMatches(h, want, 0, false, "add_scaled bf16 delta dim=" + std::to_string(dim));
      }, 0, false, "add_scaled bf16 delta dim=" + std::to_string(dim));
      Compare([&](std::vector<float>& x) {
        x = h0;
        Scale(x.data(), static_cast<int64_t>(x.size()), 12.0f, r);
      }, 0, false, "scale dim=" + std::to_string(dim));
    }
  }
  // Rounding: ties to even, carries into the exponent, infinities, NaN, denormals.
  std::vector<float> special = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895313e38f, INFINITY,
                                -INFINITY, NAN, 1e-40f, -0.0f, 65504.0f};
  for (float& v : RandomVec(4099, 10, -100, 100)) special.push_back(v);
  Compare([&](std::vector<float>& x) {
    x = special;
    RoundBf16InPlace(x.data(), static_cast<int64_t>(x.size()));
  }, 0, false, "round_bf16");
  // The AVX-512 forms over SIMDe (residual_avx512_emulated.cc) against the scalar level.
  {
    IsaGuard guard;
    ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
    for (int64_t dim : kDims) {
      for (Round r : {Round::kNone, Round::kBf16}) {
        const int64_t rows = 3, hs = dim + 2;
        std::vector<float> h0 = RandomVec(rows * hs, 13, -10, 10);
        for (size_t i = 0; i < special.size() && i < h0.size(); i += 3) h0[i] = special[i];
        const std::vector<float> d = RandomVec(rows * dim, 14, -10, 10);
        std::vector<float> want = h0, got = h0;
        AddScaled(want.data(), hs, d.data(), dim, rows, dim, 0.2857738137f, r);
        emulated::AddScaledAvx512(got.data(), hs, d.data(), dim, rows, dim, 0.2857738137f, r);
        ExpectMatches(got, want, 0, false,
                      "add_scaled avx512(emulated) dim=" + std::to_string(dim));
        std::vector<uint16_t> d16(d.size());
        for (size_t i = 0; i < d.size(); ++i) d16[i] = F32ToBf16(d[i]);
        want = h0, got = h0;
        AddScaled(want.data(), hs, d16.data(), dim, rows, dim, 0.2857738137f, r);
        emulated::AddScaledAvx512(got.data(), hs, d16.data(), dim, rows, dim, 0.2857738137f, r);
        ExpectMatches(got, want, 0, false,
                      "add_scaled bf16 delta avx512(emulated) dim=" + std::to_string(dim));
        want = h0, got = h0;
        Scale(want.data(), dim, 12.0f, r);
        emulated::ScaleAvx512(got.data(), dim, 12.0f, r);
        ExpectMatches(got, want, 0, false, "scale avx512(emulated) dim=" + std::to_string(dim));
      }
    }
    std::vector<float> want = special, got = special;
    RoundBf16InPlace(want.data(), static_cast<int64_t>(want.size()));
    emulated::RoundBf16InPlaceAvx512(got.data(), static_cast<int64_t>(got.size()));
    ExpectMatches(got, want, 0, false, "round_bf16 avx512(emulated)");
  }
  // And the scalar level agrees with tensor/dtype.h's RoundBf16.
  std::vector<float> x = special;
  RoundBf16InPlace(x.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(Bits(x[i]), Bits(RoundBf16(special[i]))) << i;
  }
}

}  // namespace
}  // namespace cpm::kernels
