// Ternary weights: detection of each granularity from the bits, lossless packing (both layouts),
// and the AVX2 and native AVX-512 kernels on 2-bit codes against the same weight's bf16 panels
// (bitwise; matmul_test.cc checks the AVX-512 ones under emulation too).
#include "kernels/ternary.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomBf16;
using testing::RandomVec;

struct Granularity {
  int64_t group;  // inputs per scale; ≥ k: per row
  bool per_tensor;
};

// A BitCPM-style weight: random bf16 values quantised by BitCPM's rule.
std::vector<uint16_t> TernaryWeight(int64_t n, int64_t k, Granularity g, uint32_t seed) {
  std::vector<uint16_t> w = RandomBf16(n * k, seed);
  FakeQuantizeTernary(w.data(), n, k, g.group, g.per_tensor);
  return w;
}

LinearWeight Bf16Linear(const std::vector<uint16_t>& w, int64_t n, int64_t k) {
  LinearWeight lw;
  lw.dtype = DType::kBF16;
  lw.out_features = n;
  lw.in_features = k;
  lw.data = w.data();
  return lw;
}

// What DetectTernary should report for a weight quantised with `g`.
int64_t ExpectedGroup(Granularity g, int64_t k) {
  return g.per_tensor || g.group >= k ? k : g.group;
}

const Granularity kGranularities[] = {{0, true},    {1 << 20, false}, {256, false},
                                      {128, false}, {64, false},      {32, false}};

TEST(TernaryTest, DetectsEachGranularity) {
  for (const Granularity g : kGranularities) {
    for (int64_t k : {int64_t{1027}, int64_t{512}}) {  // 1027: a partial last group
      const int64_t n = 37;
      const std::vector<uint16_t> w = TernaryWeight(n, k, g, static_cast<uint32_t>(k + g.group));
      const TernaryFormat f = DetectTernary(w.data(), n, k);
      const std::string what = "group " + std::to_string(g.group) + " k=" + std::to_string(k);
      ASSERT_TRUE(f.ternary()) << what;
      EXPECT_EQ(f.group, ExpectedGroup(g, k)) << what;
      EXPECT_EQ(f.per_tensor, g.per_tensor) << what;
      EXPECT_EQ(f.per_row, g.per_tensor || g.group >= k) << what;
      // Small negative values round to −0 · s, as torch's quantiser gives.
      EXPECT_TRUE(f.negative_zero) << what;
    }
  }
}

TEST(TernaryTest, RealValuedAndBrokenTensorsAreNotTernary) {
  const int64_t n = 20, k = 96;
  EXPECT_FALSE(DetectTernary(RandomBf16(n * k, 1).data(), n, k).ternary());
  std::vector<uint16_t> w = TernaryWeight(n, k, {32, false}, 2);
  ASSERT_TRUE(DetectTernary(w.data(), n, k).ternary());
  // One value of the last row with a second magnitude in its block.
  std::vector<uint16_t> two = w;
  two[n * k - 1] = F32ToBf16(0.123f);
  two[n * k - 2] = F32ToBf16(0.5f);
  EXPECT_FALSE(DetectTernary(two.data(), n, k).ternary());
  // A non-finite scale.
  std::vector<uint16_t> inf = w;
  for (int64_t c = 0; c < 32; ++c) inf[5 * k + c] = (c % 2) ? 0x7f80 : 0xff80;
  EXPECT_FALSE(DetectTernary(inf.data(), n, k).ternary());
  // No −0 anywhere: recorded as absent.
  std::vector<uint16_t> positive = w;
  for (uint16_t& v : positive) v = v == 0x8000 ? 0 : v;
  const TernaryFormat f = DetectTernary(positive.data(), n, k);
  EXPECT_TRUE(f.ternary());
  EXPECT_FALSE(f.negative_zero);
}

TEST(TernaryTest, PackingIsLossless) {
  for (const Granularity g : kGranularities) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{37, 1027}, {16, 64}, {5, 1}, {100, 300}}) {
      const std::vector<uint16_t> w = TernaryWeight(n, k, g, static_cast<uint32_t>(n * k));
      LinearWeight lw = Bf16Linear(w, n, k);
      const TernaryFormat f = DetectTernary(w.data(), n, k);
      ASSERT_TRUE(f.ternary());
      for (PackedLayout layout : {PackedLayout::kPanel16Ternary, PackedLayout::kPanel32Ternary}) {
        lw.packed = PackTernary(lw, f, layout);
        const std::vector<uint16_t> back = ExpandTernary(lw);
        ASSERT_EQ(back.size(), w.size());
        EXPECT_EQ(std::memcmp(back.data(), w.data(), w.size() * 2), 0)
            << "group " << g.group << " n=" << n << " k=" << k << " layout "
            << static_cast<int>(layout);
      }
    }
  }
}

TEST(TernaryTest, PrepareLinearPacksOnlyTernaryWeights) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "packing needs AVX2";
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));  // where the AVX2 kernels are the matmul
  const int64_t n = 40, k = 64;
  const std::vector<uint16_t> ternary = TernaryWeight(n, k, {32, false}, 4);
  const std::vector<uint16_t> real = RandomBf16(n * k, 5);
  LinearWeight t = Bf16Linear(ternary, n, k), r = Bf16Linear(real, n, k);
  PrepareLinear(&t);
  PrepareLinear(&r);
  EXPECT_EQ(PackedTernaryFormat(t).group, 32);
  EXPECT_FALSE(PackedTernaryFormat(r).ternary());
  const void* packed = t.packed.get();
  PrepareLinear(&t);
  EXPECT_EQ(t.packed.get(), packed);
  EXPECT_EQ(t.data,
            ternary.data());  // the checkpoint's bytes stay for the scalar path
}

// The bytes a load reports (and the KV cache budget subtracts) count the codes, the scales and
// the bf16 panels a ternary weight keeps for larger calls, less the source when it is dropped.
TEST(TernaryTest, HeldBytesCountTheCodesBesideThePanels) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "packing needs AVX2";
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));
  const int64_t n = 40, k = 64;
  const std::vector<uint16_t> ternary = TernaryWeight(n, k, {32, false}, 4);
  LinearWeight kept = Bf16Linear(ternary, n, k), dropped = Bf16Linear(ternary, n, k);
  PrepareLinear(&kept);
  ASSERT_TRUE(PackedTernaryFormat(kept).ternary());
  const PackedWeight& pw = *Packed(kept);
  ASSERT_NE(pw.panels, nullptr);
  const int64_t packed = static_cast<int64_t>(pw.data.size() + pw.scales.size() +
                                              pw.panels->data.size());
  EXPECT_EQ(PackedHeldBytesDelta({&kept}), packed);
  PrepareLinear(&dropped, Source::kDrop);
  EXPECT_EQ(dropped.data, nullptr);
  EXPECT_EQ(PackedHeldBytesDelta({&dropped}), packed - n * k * 2);
  EXPECT_GT(packed - n * k * 2, 0);  // the codes and scales beside the bf16 panels
}

// The policy: the AVX2 codes where the AVX2 kernels are the matmul, the AVX-512 codes where the
// AVX-512 matmul runs vdpbf16ps and the CPU has VBMI and BMI2, the bf16 pairs where it runs
// without them, never at the scalar level.
TEST(TernaryTest, CodesLayoutFollowsTheMatmul) {
  if (TernaryPackingOverride().has_value()) GTEST_SKIP() << "CPM_TERNARY is set";
  IsaGuard guard;
  const int64_t n = 40, k = 64;
  const std::vector<uint16_t> ternary = TernaryWeight(n, k, {32, false}, 4);
  const CpuFeatures& cpu = GetCpuFeatures();
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    LinearWeight t = Bf16Linear(ternary, n, k);
    PrepareLinear(&t);
    const bool avx512_matmul = isa == Isa::kAvx512 && Avx512Choice().on;
    const bool avx512_codes = avx512_matmul && cpu.avx512bf16 && cpu.avx512vbmi && cpu.bmi2;
    const bool codes = isa != Isa::kScalar && (!avx512_matmul || avx512_codes);
    EXPECT_EQ(TernaryPackingEnabled(), codes) << ToString(isa);
    EXPECT_EQ(PackedTernaryFormat(t).ternary(), codes) << ToString(isa);
    if (isa == Isa::kScalar) continue;
    ASSERT_NE(Packed(t), nullptr);
    const PackedLayout want = !avx512_matmul ? PackedLayout::kPanel16Ternary
                              : avx512_codes ? PackedLayout::kPanel32Ternary
                                             : PackedLayout::kPanel32Bf16Pairs;
    EXPECT_EQ(Packed(t)->layout, want) << ToString(isa);
  }
}

void ExpectBitwiseEqual(const std::vector<float>& a, const std::vector<float>& b,
                        const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i];
      return;
    }
  }
}

// A ternary weight computes the bf16 panels' bits: on its codes (1..6 rows: 4-, 2- and 1-panel
// tiles; k with partial groups; n with a partial last panel) and on its bf16 copy for more rows
// (batched decode, prefill row blocks); bf16 output rounding; one and two threads. The bf16 panels
// themselves are checked against MatMulRef in matmul_test.
//
// At the AVX-512 level (where the CPU has the codes' kernel) x holds bf16 values, as the model's
// activations do, so that rows run vdpbf16ps, runs of up to 32 on the codes (tiles of at most 8),
// except row 1 of three or more, which is not bf16 (f32 FMAs on the pairs copy): the runs of rows
// either side of it take the codes or the copy by their own length.
// y = x · Wᵀ on the AVX-512 tiles over kPanel32Bf16Pairs, x prepared as MatMul prepares it.
void PairsOnAvx512Tiles(const float* x, int64_t k, int64_t m, const LinearWeight& w, float* y,
                        Round round) {
  const PackedWeight& pw = *Packed(w);
  std::vector<uint8_t> dot(m);
  std::vector<uint32_t> pairs(m * PairsStride(k));
  PrepareXAvx512(x, k, k, 0, m, dot.data(), pairs.data());
  MatMulPanelsAvx512({x, k, dot.data(), pairs.data()}, m, pw, 0, pw.num_panels, y,
                     w.out_features, round);
}

void ExpectCodesBitwiseThePanels(Isa isa, PackedLayout panels_layout) {
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(isa));
  const bool bf16_x = isa == Isa::kAvx512;
  ThreadPool pool1(1), pool2(2);
  const std::pair<int64_t, int64_t> shapes[] = {{37, 31}, {160, 259}, {17, 1027}, {300, 64}};
  for (const Granularity g : {Granularity{0, true}, Granularity{1 << 20, false},
                              Granularity{64, false}, Granularity{32, false}}) {
    for (auto [n, k] : shapes) {
      const std::vector<uint16_t> w = TernaryWeight(n, k, g, static_cast<uint32_t>(n + k));
      LinearWeight codes = Bf16Linear(w, n, k), panels = Bf16Linear(w, n, k);
      PrepareLinear(&codes);
      ASSERT_TRUE(PackedTernaryFormat(codes).ternary());
      panels.packed = PackLinear(panels, panels_layout);
      for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 16, 33, 130, 257}) {
        std::vector<float> x = RandomVec(m * k, static_cast<uint32_t>(m));
        for (int64_t i = 0; bf16_x && i < m * k; ++i) {
          if (m < 3 || i / k != 1) x[i] = RoundBf16(x[i]);
        }
        for (Round round : {Round::kNone, Round::kBf16}) {
          for (ThreadPool* pool : {&pool1, &pool2}) {
            std::vector<float> a(m * n), b(m * n);
            MatMul(x.data(), k, m, codes, a.data(), n, *pool, round);
            if (panels_layout == PackedLayout::kPanel32Bf16Pairs && AmxChoice().on) {
              // MatMul takes bf16 pairs to AMX there, whose sums are not vdpbf16ps's: the
              // codes' reference is the AVX-512 tiles themselves.
              PairsOnAvx512Tiles(x.data(), k, m, panels, b.data(), round);
            } else {
              MatMul(x.data(), k, m, panels, b.data(), n, *pool, round);
            }
            ExpectBitwiseEqual(a, b,
                               std::string(ToString(isa)) + " group " + std::to_string(g.group) +
                                   " n=" + std::to_string(n) +
                                   " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                                   (round == Round::kBf16 ? " rounded" : "") +
                                   " threads=" + std::to_string(pool->num_threads()));
            if (::testing::Test::HasFailure()) return;
          }
        }
      }
    }
  }
}

TEST(TernaryTest, Avx2KernelsAreBitwiseTheBf16Panels) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "the ternary kernels need AVX2";
  ExpectCodesBitwiseThePanels(Isa::kAvx2, PackedLayout::kPanel16Bf16);
}

TEST(TernaryTest, Avx512KernelsAreBitwiseTheBf16Pairs) {
  if (BestIsa() != Isa::kAvx512) GTEST_SKIP() << "no AVX-512 here (matmul_test emulates it)";
  {
    IsaGuard guard;
    ASSERT_TRUE(SetActiveIsa(Isa::kAvx512));
    if (TernaryCodesLayout(Isa::kAvx512) != PackedLayout::kPanel32Ternary) {
      GTEST_SKIP() << "the AVX-512 matmul here lacks vdpbf16ps, VBMI or BMI2";
    }
  }
  ExpectCodesBitwiseThePanels(Isa::kAvx512, PackedLayout::kPanel32Bf16Pairs);
}

// A lower ISA level ignores the codes and reads the checkpoint's bf16 values.
TEST(TernaryTest, ScalarLevelUsesTheBf16Values) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "packing needs AVX2";
  IsaGuard guard;
  ASSERT_TRUE(SetActiveIsa(Isa::kAvx2));
  const int64_t n = 33, k = 70, m = 3;
  const std::vector<uint16_t> w = TernaryWeight(n, k, {32, false}, 9);
  LinearWeight lw = Bf16Linear(w, n, k);
  PrepareLinear(&lw);
  ASSERT_TRUE(PackedTernaryFormat(lw).ternary());
  ASSERT_TRUE(SetActiveIsa(Isa::kScalar));
  ThreadPool pool(2);
  const std::vector<float> x = RandomVec(m * k, 3);
  std::vector<float> y(m * n), ref(m * n);
  MatMul(x.data(), k, m, lw, y.data(), n, pool);
  MatMulRef(x.data(), k, m, lw, 0, n, ref.data(), n);
  ExpectBitwiseEqual(y, ref, "scalar");
}

}  // namespace
}  // namespace cpm::kernels
