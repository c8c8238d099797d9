// The vision tower's element-wise ops against float64 definitions written here, on odd sizes,
// at every ISA level the CPU has.
#include "kernels/vision_ops.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <utility>

#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/test_util.h"

namespace cpm::kernels {

namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

double GeluTanh64(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }
double GeluErf64(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

TEST(VisionOpsTest, GeluTanhMatchesItsDefinitionAtEveryIsa) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    for (int64_t n : {1, 7, 33, 4096 + 3, 100000}) {
      std::vector<float> x = RandomVec(n, 11 + n, -12.0f, 12.0f);
      x[0] = n > 1 ? -100.0f : 0.0f;  // saturation: gelu(−100) = −0, gelu(+large) = x
      if (n > 2) x[1] = 95.0f;
      std::vector<float> y = x;
      GeluTanh(y.data(), n, Round::kNone, pool);
      for (int64_t i = 0; i < n; ++i) {
        const double want = GeluTanh64(x[i]);
        ASSERT_NEAR(y[i], want, 4e-7 * std::fabs(want) + 1e-7) << ToString(isa) << " n=" << n << " x=" << x[i];
      }
      std::vector<float> r = x;
      GeluTanh(r.data(), n, Round::kBf16, pool);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(r[i], RoundBf16(r[i]));  // stored rounded
        ASSERT_NEAR(r[i], GeluTanh64(x[i]), std::fabs(GeluTanh64(x[i])) / 128 + 1e-7) << x[i];
      }
    }
  }
}

// The fused bias + GELU pass is bitwise the two passes, at every ISA, rounded or not: widths that
// are whole vectors (fused; the towers' 4304 and 4608) and ones that are not (two passes).
TEST(VisionOpsTest, AddBiasGeluTanhIsBitwiseTheTwoPasses) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    for (auto [rows, dim] : {std::pair<int64_t, int64_t>{1, 7}, {5, 33}, {9, 8}, {40, 4304},
                             {13, 4608}}) {
      for (Round round : {Round::kNone, Round::kBf16}) {
        const std::vector<float> y0 = RandomVec(rows * dim, 3 + dim, -6.0f, 6.0f);
        const std::vector<float> bias = RandomVec(dim, 4 + dim, -1.0f, 1.0f);
        std::vector<float> want = y0, got = y0;
        AddBias(want.data(), rows, dim, bias.data(), round, pool);
        GeluTanh(want.data(), rows * dim, round, pool);
        AddBiasGeluTanh(got.data(), rows, dim, bias.data(), round, pool);
        ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
            << ToString(isa) << " " << rows << "x" << dim;
      }
    }
  }
}

TEST(VisionOpsTest, GeluErfMatchesItsDefinition) {
  ThreadPool pool(2);
  std::vector<float> x = RandomVec(4099, 3, -9.0f, 9.0f), y = x;
  GeluErf(y.data(), static_cast<int64_t>(y.size()), Round::kNone, pool);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], GeluErf64(x[i]), 1e-6 * std::fabs(x[i]) + 1e-7);
}

// The AVX-512 tanh-GELU is bitwise the AVX2 one, natively where the CPU has AVX-512 and over
// SIMDe's emulation everywhere: whole vectors of 16, a trailing 8, and a scalar tail; saturating
// and NaN inputs; rounded or not.
TEST(VisionOpsTest, GeluTanhAvx512IsBitwiseTheAvx2Form) {
  if (BestIsa() < Isa::kAvx2) GTEST_SKIP() << "needs AVX2 (the reference form)";
  for (int64_t n : {1, 7, 8, 15, 16, 17, 24, 31, 33, 4096 + 5}) {
    std::vector<float> x = RandomVec(n, 40 + n, -12.0f, 12.0f);
    x[0] = -100.0f;
    if (n > 1) x[1] = 95.0f;
    if (n > 2) x[2] = NAN;
    for (Round round : {Round::kNone, Round::kBf16}) {
      std::vector<float> want = x;
      GeluTanhAvx2(want.data(), n, round);
      std::vector<std::pair<const char*, std::vector<float>>> got;
      got.push_back({"emulated", x});
      emulated::GeluTanhAvx512(got.back().second.data(), n, round);
      if (BestIsa() >= Isa::kAvx512) {
        got.push_back({"native", x});
        GeluTanhAvx512(got.back().second.data(), n, round);
      }
      for (const auto& [what, g] : got) {
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(g[i]), std::bit_cast<uint32_t>(want[i]))
              << what << " n=" << n << " i=" << i << " x=" << x[i];
        }
      }
    }
  }
}

TEST(VisionOpsTest, LayerNormAndBiasAtEveryIsa) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    SetActiveIsa(isa);
    for (int64_t dim : {1, 7, 33, 1152, 4608 + 3}) {
      const int64_t rows = 5;
      std::vector<float> x = RandomVec(rows * dim, 5, -3.0f, 5.0f), w = RandomVec(dim, 6),
                         b = RandomVec(dim, 7);
      std::vector<float> y(x.size());
      LayerNorm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, y.data(), Round::kNone, pool);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * dim;
        double mean = 0, var = 0;
        for (int64_t j = 0; j < dim; ++j) mean += xr[j];
        mean /= dim;
        for (int64_t j = 0; j < dim; ++j) var += (xr[j] - mean) * (xr[j] - mean);
        var /= dim;
        for (int64_t j = 0; j < dim; ++j) {
          const double want = (xr[j] - mean) / std::sqrt(var + 1e-6) * w[j] + b[j];
          ASSERT_NEAR(y[r * dim + j], want, 2e-5) << ToString(isa) << " dim=" << dim;
        }
      }
      std::vector<float> z = x;  // in place
      LayerNorm(z.data(), rows, dim, w.data(), b.data(), 1e-6f, z.data(), Round::kNone, pool);
      EXPECT_EQ(z, y);
      std::vector<float> u = z;
      AddBias(u.data(), rows, dim, b.data(), Round::kNone, pool);
      for (int64_t i = 0; i < rows * dim; ++i) ASSERT_EQ(u[i], y[i] + b[i % dim]);
      AddBias(z.data(), rows, dim, b.data(), Round::kBf16, pool);
      for (int64_t i = 0; i < rows * dim; ++i) ASSERT_EQ(z[i], RoundBf16(y[i] + b[i % dim]));
      std::vector<float> r(x.size());  // rounded once, as stored
      LayerNorm(x.data(), rows, dim, w.data(), b.data(), 1e-6f, r.data(), Round::kBf16, pool);
      for (int64_t i = 0; i < rows * dim; ++i) ASSERT_EQ(r[i], RoundBf16(y[i]));
    }
  }
}

}  // namespace
}  // namespace cpm::kernels
