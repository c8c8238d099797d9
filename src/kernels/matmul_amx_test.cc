// The AMX matmul (matmul_amx.cc) against the scalar reference on odd shapes, and its batch
// invariance. Skipped where the CPU or the OS offers no AMX (no CI machine does; run on an
// Intel Xeon of the Emerald Rapids generation, 2026-12-04).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::RandomBf16;
using testing::RandomVec;

// x rounded to bf16 (as the model's activations are), its pairs and a bf16 weight packed as
// kPanel32Bf16Pairs.
struct Problem {
  int64_t m, n, k;
  std::vector<float> x;
  std::vector<uint16_t> wbits;
  LinearWeight w;
  std::shared_ptr<const void> packed;
  std::vector<uint8_t> dot;
  std::vector<uint32_t> pairs;

  Problem(int64_t m_, int64_t n_, int64_t k_, uint32_t seed) : m(m_), n(n_), k(k_) {
    x = RandomVec(m * k, seed);
    for (float& v : x) v = RoundBf16(v);
    wbits = RandomBf16(n * k, seed + 1);
    w.dtype = DType::kBF16;
    w.out_features = n;
    w.in_features = k;
    w.data = wbits.data();
    packed = PackLinear(w, PackedLayout::kPanel32Bf16Pairs);
    dot.assign(m, 0);
    pairs.assign(m * PairsStride(k), 0);
    PrepareXAvx512(x.data(), k, k, 0, m, dot.data(), pairs.data());
  }
  const PackedWeight& pw() const { return *static_cast<const PackedWeight*>(packed.get()); }

  std::vector<float> Amx(Round round = Round::kNone,
                         const AmxBlocking* blocking = nullptr) const {
    std::vector<float> y(m * n, NAN);
    MatMulPanelsAmx(pairs.data(), PairsStride(k), m, pw(), 0, pw().num_panels, y.data(), n, round,
                    blocking);
    return y;
  }
  // The sums rounded into bf16 rows (a stride of n + 3, whose padding must stay untouched),
  // widened back to f32.
  std::vector<float> AmxBf16(const AmxBlocking* blocking = nullptr) const {
    const int64_t ys = n + 3;
    std::vector<uint16_t> y(m * ys, 0xbeef);
    MatMulPanelsAmx(pairs.data(), PairsStride(k), m, pw(), 0, pw().num_panels, y.data(), ys,
                    blocking);
    std::vector<float> out(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t c = 0; c < n; ++c) out[i * n + c] = Bf16ToF32(y[i * ys + c]);
      for (int64_t c = n; c < ys; ++c) EXPECT_EQ(y[i * ys + c], 0xbeef) << "wrote past n";
    }
    return out;
  }
};

bool Skip() { return !AmxUsable() || BestIsa() != Isa::kAvx512; }

int64_t Mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return bad;
}

TEST(MatMulAmx, MatchesReferenceOnOddShapes) {
  if (Skip()) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  ASSERT_TRUE(GetCpuFeatures().avx512bf16);  // every AMX CPU has it; the pairs need it
  for (int64_t m : {1, 7, 16, 17, 31, 32, 33, 70}) {
    for (int64_t n : {1, 31, 32, 33, 97}) {
      for (int64_t k : {1, 2, 31, 32, 33, 64, 100, 1027}) {
        Problem p(m, n, k, static_cast<uint32_t>(m * 131 + n * 17 + k));
        ASSERT_TRUE(std::all_of(p.dot.begin(), p.dot.end(), [](uint8_t d) { return d != 0; }));
        const std::vector<float> y = p.Amx();
        std::vector<float> ref(m * n);
        MatMulRef(p.x.data(), k, m, p.w, 0, n, ref.data(), n);
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t c = 0; c < n; ++c) {
            double scale = 1e-30;
            for (int64_t j = 0; j < k; ++j) {
              scale += std::fabs(p.x[i * k + j] * Bf16ToF32(p.wbits[c * k + j]));
            }
            ASSERT_LE(std::fabs(y[i * n + c] - ref[i * n + c]), 1e-6 * std::sqrt(k) * scale)
                << "m=" << m << " n=" << n << " k=" << k << " at (" << i << ", " << c << ")";
          }
        }
        const std::vector<float> rounded = p.Amx(Round::kBf16);
        for (size_t e = 0; e < y.size(); ++e) {
          ASSERT_EQ(rounded[e], RoundBf16(y[e])) << "m=" << m << " n=" << n << " k=" << k;
        }
        ASSERT_EQ(Mismatches(p.AmxBf16(), rounded), 0) << "m=" << m << " n=" << n << " k=" << k;
      }
    }
  }
}

// A row's sums are the same bits alone, in any block of a call of any height, and through
// MatMul's tasks on several threads (the property the engine's batching tests rely on).
TEST(MatMulAmx, BatchInvariant) {
  if (Skip()) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  for (int64_t k : {64, 1000, 1024}) {
    Problem p(75, 160, k, 99);
    const std::vector<float> all = p.Amx();
    for (int64_t i : {0, 15, 16, 31, 32, 47, 74}) {
      std::vector<float> one(p.n);
      MatMulPanelsAmx(p.pairs.data() + i * PairsStride(k), PairsStride(k), 1, p.pw(), 0,
                      p.pw().num_panels, one.data(), p.n, Round::kNone);
      ASSERT_EQ(std::memcmp(one.data(), all.data() + i * p.n, p.n * sizeof(float)), 0)
          << "row " << i << " k=" << k;
    }
    LinearWeight w = p.w;
    w.packed = p.packed;
    ThreadPool pool(3);
    std::vector<float> y(p.m * p.n);
    MatMul(p.x.data(), k, p.m, w, y.data(), p.n, pool);
    if (AmxChoice().on) {
      EXPECT_EQ(Mismatches(y, all), 0) << "k=" << k;
    }
  }
}

// Tall calls whose x outgrows L2 walk it in row groups and k chunks, their partial sums parked
// in f32 in between: the same bits as one pass, for groups and chunks of any size (a tail step
// after the last chunk, partial groups and blocks, several batches of panels).
TEST(MatMulAmx, BlockingMovesNoBit) {
  const AmxBlocking plain512 = AmxBlockingFor(512, 1024);  // MiniCPM4's prefill: 1 MiB of x
  EXPECT_EQ(plain512.group_rows, 512);
  EXPECT_EQ(plain512.chunk_steps, 32);
  const AmxBlocking down = AmxBlockingFor(512, 4096);  // its down projection: 4 MiB
  EXPECT_EQ(down.group_rows, 128);
  EXPECT_EQ(down.chunk_steps, 64);
  EXPECT_EQ(AmxBlockingFor(16, 1 << 16).group_rows, 16);  // decode never blocks
  if (Skip()) {
    GTEST_SKIP() << "no AMX-BF16 here";
  }
  for (int64_t k : {1027, 1024}) {  // 32 full steps and a tail of 2 pairs; none
    Problem p(150, 300, k, 7);
    for (Round round : {Round::kNone, Round::kBf16}) {
      const AmxBlocking whole{p.m, 32};
      const std::vector<float> ref = p.Amx(round, &whole);
      for (const AmxBlocking b : {AmxBlocking{64, 1}, AmxBlocking{32, 5}, AmxBlocking{96, 7},
                                  AmxBlocking{128, 32}, AmxBlocking{256, 100}}) {
        EXPECT_EQ(Mismatches(p.Amx(round, &b), ref), 0)
            << "k=" << k << " groups of " << b.group_rows << " chunks of " << b.chunk_steps;
        if (round == Round::kBf16) {
          EXPECT_EQ(Mismatches(p.AmxBf16(&b), ref), 0)
              << "bf16 rows, k=" << k << " groups of " << b.group_rows << " chunks of "
              << b.chunk_steps;
        }
      }
      EXPECT_EQ(Mismatches(p.Amx(round), ref), 0) << "k=" << k;  // AmxBlockingFor's own
    }
  }
  // Past the threshold (1.4 MB of x), AmxBlockingFor's groups: every row as it is alone.
  Problem big(700, 64, 1000, 11);
  ASSERT_LT(AmxBlockingFor(big.m, big.k).group_rows, big.m);
  const std::vector<float> all = big.Amx();
  for (int64_t i : {0, 127, 128, 699}) {
    std::vector<float> one(big.n);
    MatMulPanelsAmx(big.pairs.data() + i * PairsStride(big.k), PairsStride(big.k), 1, big.pw(), 0,
                    big.pw().num_panels, one.data(), big.n, Round::kNone);
    ASSERT_EQ(std::memcmp(one.data(), all.data() + i * big.n, big.n * sizeof(float)), 0)
        << "row " << i;
  }
}

// UseTileConfig skips a load only while this thread's tiles still hold the same shapes:
// STTILECFG reads back what the tiles have. A stale record (a release it missed, or one shared
// between threads) would leave a kernel's tiles unconfigured and fault its first TDPBF16PS, or
// run it on another kernel's shapes.
AmxTileConfig StoredTileConfig() {
  AmxTileConfig c;
  __asm__ volatile("sttilecfg %0" : "=m"(c));
  return c;
}

bool SameConfig(const AmxTileConfig& a, const AmxTileConfig& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

TEST(AmxTiles, LoadedWhereTheShapesChangeAndAfterARelease) {
  if (!AmxUsable()) GTEST_SKIP() << "no AMX-BF16 here";
  const AmxTileConfig a = TilesOf64Bytes(16), b = TilesOf64Bytes(4);
  AmxTileConfig none;  // what STTILECFG stores for unconfigured tiles: all zero
  none.palette = 0;
  ReleaseTiles();
  EXPECT_TRUE(SameConfig(StoredTileConfig(), none));
  UseTileConfig(a);
  EXPECT_TRUE(SameConfig(StoredTileConfig(), a));
  UseTileConfig(b);
  EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
  UseTileConfig(b);
  EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
  ReleaseTiles();
  EXPECT_TRUE(SameConfig(StoredTileConfig(), none));
  UseTileConfig(b);  // the same shapes as before the release: loaded again
  EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
  // Another thread's tiles and record are its own. Linux starts a thread with a copy of its
  // creator's tiles, which the thread's empty record does not know of: ReleaseTiles still
  // releases them, and the first UseTileConfig loads.
  std::thread([&] {
    EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
    ReleaseTiles();
    EXPECT_TRUE(SameConfig(StoredTileConfig(), none));
    UseTileConfig(b);
    EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
    UseTileConfig(a);
    EXPECT_TRUE(SameConfig(StoredTileConfig(), a));
    ReleaseTiles();
    EXPECT_TRUE(SameConfig(StoredTileConfig(), none));
  }).join();
  EXPECT_TRUE(SameConfig(StoredTileConfig(), b));
  ReleaseTiles();
}

}  // namespace
}  // namespace cpm::kernels
