// Q8_0 weights (q8.h): the quantization's error bounds, the scalar kernel against a float64
// reference on the dequantized weights, and every ISA's kernel bitwise against the scalar one
// on odd shapes, through MatMul's task split, batched and alone.
#include "kernels/q8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/matmul_impl.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomBf16;
using testing::RandomVec;

struct Weight {
  std::vector<uint16_t> bf16;
  LinearWeight w;
};

Weight MakeBf16Weight(int64_t n, int64_t k, uint32_t seed, float scale = 1.0f) {
  Weight t;
  t.bf16 = RandomBf16(static_cast<size_t>(n * k), seed, -scale, scale);
  t.w.dtype = DType::kBF16;
  t.w.out_features = n;
  t.w.in_features = k;
  t.w.data = t.bf16.data();
  return t;
}

// Every block's dequantized values within half a step d/2 of the weight, and the block's
// largest |w| at ±127 steps (d = amax / 127 up to fp16's rounding).
void ExpectQuantizedWithinHalfStep(const Weight& t) {
  const int64_t n = t.w.out_features, k = t.w.in_features;
  std::shared_ptr<const void> packed = PackQ8(t.w);
  const auto& pw = *static_cast<const PackedWeight*>(packed.get());
  const std::vector<float> dq = DequantizeQ8(pw);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t b = 0; b < Q8Blocks(k); ++b) {
      float amax = 0;
      const int64_t c1 = std::min(k, (b + 1) * kQ8Block);
      for (int64_t c = b * kQ8Block; c < c1; ++c) {
        amax = std::max(amax, std::fabs(Bf16ToF32(t.bf16[r * k + c])));
      }
      const double d = amax / 127.0;
      for (int64_t c = b * kQ8Block; c < c1; ++c) {
        const double w = Bf16ToF32(t.bf16[r * k + c]);
        // Half a step, plus the fp16 scale's relative rounding (2^-11) times 127 steps.
        ASSERT_LE(std::fabs(dq[r * k + c] - w), d * (0.5 + 127.0 / 2048) + 1e-30)
            << "row " << r << " col " << c;
      }
    }
  }
}

TEST(Q8, QuantizationWithinHalfAStep) {
  ExpectQuantizedWithinHalfStep(MakeBf16Weight(33, 4096 + 3, 1));
  ExpectQuantizedWithinHalfStep(MakeBf16Weight(7, 33, 2));
  ExpectQuantizedWithinHalfStep(MakeBf16Weight(1, 1, 3));
}

// The per-tensor power of two keeps tiny weights (vLLM's dummy weights are ±1e-3, whose scales
// fp16 holds only as subnormals, 2^-24 apart) at fp16's full precision.
TEST(Q8, TinyWeightsKeepTheirPrecision) {
  ExpectQuantizedWithinHalfStep(MakeBf16Weight(16, 256, 4, 1e-6f));
  ExpectQuantizedWithinHalfStep(MakeBf16Weight(16, 256, 5, 1e4f));
}

TEST(Q8, ZeroWeightIsZero) {
  Weight t = MakeBf16Weight(20, 70, 6);
  std::fill(t.bf16.begin(), t.bf16.end(), 0);
  std::shared_ptr<const void> packed = PackQ8(t.w);
  for (float v : DequantizeQ8(*static_cast<const PackedWeight*>(packed.get()))) EXPECT_EQ(v, 0);
}

struct QuantizedX {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> corr;
  Q8X view(int64_t k) const { return {q.data(), d.data(), corr.data(), Q8XStride(k), Q8Blocks(k)}; }
};

QuantizedX Quantize(const std::vector<float>& x, int64_t m, int64_t k, bool vector) {
  QuantizedX out;
  out.q.assign(static_cast<size_t>(m * Q8XStride(k)), 0);
  out.d.assign(static_cast<size_t>(m * Q8Blocks(k)), 0);
  out.corr.assign(out.d.size(), 0);
  (vector ? QuantizeRowsQ8Avx512 : QuantizeRowsQ8Scalar)(x.data(), k, k, 0, m, out.q.data(),
                                                         out.d.data(), out.corr.data());
  return out;
}

TEST(Q8, ActivationQuantizationVectorMatchesScalar) {
  if (BestIsa() < Isa::kAvx512) GTEST_SKIP() << "no AVX-512";
  for (int64_t k : {1, 7, 16, 31, 32, 33, 100, 1024, 4096 + 3}) {
    std::vector<float> x = RandomVec(static_cast<size_t>(3 * k), 10 + k, -3, 3);
    x[0] = 0;  // and a zero block below
    if (k >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
    const QuantizedX s = Quantize(x, 3, k, false), v = Quantize(x, 3, k, true);
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t c = 0; c < Q8Blocks(k) * kQ8Block; ++c) {
        ASSERT_EQ(s.q[i * Q8XStride(k) + c], v.q[i * Q8XStride(k) + c]) << k << " " << c;
      }
    }
    EXPECT_EQ(std::memcmp(s.d.data(), v.d.data(), s.d.size() * 4), 0) << k;
    EXPECT_EQ(s.corr, v.corr) << k;
  }
}

TEST(Q8, ActivationQuantizationWithinHalfAStep) {
  const int64_t k = 100;
  const std::vector<float> x = RandomVec(k, 11, -5, 5);
  const QuantizedX s = Quantize(x, 1, k, false);
  for (int64_t c = 0; c < k; ++c) {
    const float d = s.d[c / kQ8Block];
    EXPECT_LE(std::fabs(d * s.q[c] - x[c]), d * 0.5f * (1 + 1e-5f));
  }
  int32_t sum = 0;
  for (int64_t c = 0; c < kQ8Block; ++c) sum += s.q[c];
  EXPECT_EQ(s.corr[0], -128 * sum);
}

// y through MatMul (packed once, at the active ISA's kernel) on `pool`.
std::vector<float> MatMulOf(const std::vector<float>& x, int64_t m, const LinearWeight& w,
                       ThreadPool& pool, Round round = Round::kNone) {
  std::vector<float> y(static_cast<size_t>(m * w.out_features), -1.0f);
  MatMul(x.data(), w.in_features, m, w, y.data(), w.out_features, pool, round);
  return y;
}

LinearWeight PreparedQ8(const Weight& t) {
  LinearWeight w = t.w;
  PrepareLinear(&w, Source::kKeep, WeightQuant::kQ8_0);
  EXPECT_TRUE(Packed(w) != nullptr && IsQ8Layout(Packed(w)->layout));
  return w;
}

// The scalar kernel against float64 sums of dequantized weights times x: off by at most what
// quantizing x moves, Σ |d_w·q_w| · d_x / 2 per block, plus f32 rounding.
TEST(Q8, ScalarKernelMatchesDequantizedReference) {
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
  ThreadPool pool(2);
  for (auto [m, n, k] : {std::tuple{1, 17, 33}, {3, 40, 100}, {2, 16, 4096 + 3}}) {
    const Weight t = MakeBf16Weight(n, k, 20 + k);
    const LinearWeight w = PreparedQ8(t);
    const std::vector<float> dq = DequantizeQ8(*Packed(w));
    const std::vector<float> x = RandomVec(static_cast<size_t>(m * k), 30 + k, -2, 2);
    const QuantizedX xq = Quantize(x, m, k, false);
    const std::vector<float> y = MatMulOf(x, m, w, pool);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < n; ++c) {
        double ref = 0, bound = 0;
        for (int64_t j = 0; j < k; ++j) {
          ref += double(dq[c * k + j]) * x[i * k + j];
          bound += std::fabs(double(dq[c * k + j])) * (xq.d[i * Q8Blocks(k) + j / kQ8Block] / 2);
        }
        bound += 1e-5 * (std::fabs(ref) + 1);
        ASSERT_NEAR(y[i * n + c], ref, bound) << m << "x" << n << "x" << k << " at " << i << "," << c;
      }
    }
  }
}

// Every ISA's kernel is bitwise the scalar one's, for any rows, column range and task split.
TEST(Q8, EveryIsaBitwiseTheScalarKernel) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (auto [n, k] : {std::pair{2, 3}, {7, 32}, {16, 33}, {33, 100}, {100, 4096 + 3}, {64, 256}}) {
    const Weight t = MakeBf16Weight(n, k, 40 + n + k);
    const LinearWeight w = PreparedQ8(t);
    for (int64_t m : {1, 2, 3, 5, 8, 9, 17}) {
      const std::vector<float> x = RandomVec(static_cast<size_t>(m * k), 50 + m, -1, 1);
      ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
      const std::vector<float> ref = MatMulOf(x, m, w, pool, Round::kBf16);
      const std::vector<float> ref_f32 = MatMulOf(x, m, w, pool);
      for (Isa isa : IsasToTest()) {
        ASSERT_TRUE(SetActiveIsa(isa));
        const std::vector<float> y = MatMulOf(x, m, w, pool, Round::kBf16);
        ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
            << ToString(isa) << " " << m << "x" << n << "x" << k;
        const std::vector<float> y32 = MatMulOf(x, m, w, pool);
        ASSERT_EQ(std::memcmp(y32.data(), ref_f32.data(), y32.size() * 4), 0)
            << ToString(isa) << " " << m << "x" << n << "x" << k;
        for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], RoundBf16(y32[i]));
      }
    }
  }
}

// A row's result is the same alone and in a batch of any size (batch invariance).
TEST(Q8, RowsAreBatchInvariant) {
  ThreadPool pool(2);
  const int64_t n = 48, k = 160, m = 13;
  const Weight t = MakeBf16Weight(n, k, 60);
  const LinearWeight w = PreparedQ8(t);
  const std::vector<float> x = RandomVec(static_cast<size_t>(m * k), 61);
  const std::vector<float> all = MatMulOf(x, m, w, pool);
  for (int64_t i = 0; i < m; ++i) {
    const std::vector<float> row(x.begin() + i * k, x.begin() + (i + 1) * k);
    const std::vector<float> one = MatMulOf(row, 1, w, pool);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + i * n, n * 4), 0) << "row " << i;
  }
}

// Q8_0 beside bf16 on the same weight: close (a relative error of a few 1e-3), not equal.
TEST(Q8, CloseToTheBf16Matmul) {
  ThreadPool pool(2);
  const int64_t n = 64, k = 1024, m = 4;
  const Weight t = MakeBf16Weight(n, k, 70);
  const LinearWeight q8 = PreparedQ8(t);
  LinearWeight bf16 = t.w;
  PrepareLinear(&bf16);
  const std::vector<float> x = RandomVec(static_cast<size_t>(m * k), 71);
  const std::vector<float> a = MatMulOf(x, m, q8, pool), b = MatMulOf(x, m, bf16, pool);
  double err = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * double(a[i] - b[i]);
    norm += double(b[i]) * b[i];
  }
  EXPECT_GT(err, 0);
  EXPECT_LT(std::sqrt(err / norm), 0.01);
}

// Q8Bytes (what the bench counts a decode step as streaming) is what packing holds.
TEST(Q8, BytesCountWhatIsPacked) {
  for (auto [n, k] : {std::pair<int64_t, int64_t>{2, 3}, {17, 33}, {64, 4099}}) {
    const Weight t = MakeBf16Weight(n, k, 81);
    const LinearWeight w = PreparedQ8(t);
    const PackedWeight& pw = *Packed(w);
    EXPECT_EQ(static_cast<int64_t>(pw.data.size() + pw.scales.size()), Q8Bytes(n, k)) << n << "x" << k;
  }
}

// A ternary weight (BitCPM4) stays 2-bit codes under Q8_0 where codes are packed: lossless.
TEST(Q8, KeepsTernaryCodes) {
  Weight t = MakeBf16Weight(32, 64, 80);
  for (uint16_t& v : t.bf16) v = (v & 0x8000) | F32ToBf16(0.25f);
  LinearWeight w = t.w;
  PrepareLinear(&w, Source::kKeep, WeightQuant::kQ8_0);
  ASSERT_NE(Packed(w), nullptr);
  EXPECT_EQ(IsTernaryLayout(Packed(w)->layout), TernaryPackingEnabled());
}

}  // namespace
}  // namespace cpm::kernels
