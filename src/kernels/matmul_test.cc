// Matmul: every ISA level, packed and unpacked, against the scalar reference on odd shapes.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/activation.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512_emulated.h"
#include "kernels/ternary.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomBf16;
using testing::RandomVec;

struct TestWeight {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  LinearWeight w;
};

TestWeight MakeWeight(DType dt, int64_t n, int64_t k, uint32_t seed) {
  TestWeight t;
  t.w.dtype = dt;
  t.w.out_features = n;
  t.w.in_features = k;
  if (dt == DType::kBF16) {
    t.bf16 = RandomBf16(n * k, seed);
    t.w.data = t.bf16.data();
  } else {
    t.f32 = RandomVec(n * k, seed);
    t.w.data = t.f32.data();
  }
  return t;
}

// MatMulGroup over `ts` on m rows of x (row stride k): the outputs, one dense [m, n_i] each.
std::vector<std::vector<float>> GroupOutputs(const float* x, int64_t k, int64_t m,
                                             const std::vector<TestWeight>& ts, ThreadPool& pool,
                                             Round round = Round::kNone) {
  std::vector<std::vector<float>> ys;
  std::vector<const LinearWeight*> ws;
  std::vector<float*> yp;
  std::vector<int64_t> strides;
  for (const TestWeight& t : ts) {
    ys.emplace_back(m * t.w.out_features);
    ws.push_back(&t.w);
    strides.push_back(t.w.out_features);
  }
  for (auto& y : ys) yp.push_back(y.data());
  MatMulGroup(x, k, m, ws, yp, strides, pool, round);
  return ys;
}

// |y - ref| ≤ 1e-6·sqrt(k)·Σ_j|x_j·w_j|: f32 accumulation-order error only (the reference sees
// the same bf16 weights). A wrong element is off by O(Σ|x·w| / sqrt(k)), far above this.
void ExpectClose(const float* x, int64_t xs, int64_t m, const LinearWeight& w, const float* y,
                 int64_t ys, const std::string& what) {
  const int64_t n = w.out_features, k = w.in_features;
  std::vector<float> ref(m * n);
  MatMulRef(x, xs, m, w, 0, n, ref.data(), n);
  int bad = 0;
  for (int64_t i = 0; i < m && bad < 5; ++i) {
    for (int64_t r = 0; r < n && bad < 5; ++r) {
      double mag = 0;
      for (int64_t j = 0; j < k; ++j) {
        const float wv = w.dtype == DType::kBF16
                             ? Bf16ToF32(static_cast<const uint16_t*>(w.data)[r * k + j])
                             : static_cast<const float*>(w.data)[r * k + j];
        mag += std::fabs(double{x[i * xs + j]} * wv);
      }
      const double tol = 1e-6 * std::sqrt(double(k)) * mag + 1e-30;
      const double err = std::fabs(double{y[i * ys + r]} - ref[i * n + r]);
      if (!(err <= tol)) {
        ADD_FAILURE() << what << " row " << i << " col " << r << ": " << y[i * ys + r]
                      << " vs ref " << ref[i * n + r] << " (tol " << tol << ")";
        ++bad;
      }
    }
  }
}

// `bf16_x`: x of bf16 values, as the model's activations (AVX-512 BF16 then takes vdpbf16ps).
void CheckShape(Isa isa, DType dt, bool pack, int64_t m, int64_t n, int64_t k,
                bool bf16_x = false) {
  ThreadPool pool(2);
  TestWeight t = MakeWeight(dt, n, k, static_cast<uint32_t>(m * 131 + n * 7 + k));
  if (pack) PrepareLinear(&t.w);
  // Padded strides catch kernels that assume dense rows.
  const int64_t xs = k + 3, ys = n + 5;
  std::vector<float> x = RandomVec(m * xs, static_cast<uint32_t>(k + m));
  if (bf16_x) {
    for (float& v : x) v = Bf16ToF32(F32ToBf16(v));
  }
  std::vector<float> y(m * ys, -7.0f);
  MatMul(x.data(), xs, m, t.w, y.data(), ys, pool);
  ExpectClose(x.data(), xs, m, t.w, y.data(), ys,
              std::string(ToString(isa)) + " " + ToString(dt) + (pack ? " packed" : "") +
                  " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                  " k=" + std::to_string(k));
  // Columns past n belong to the caller.
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t r = n; r < ys; ++r) ASSERT_EQ(y[i * ys + r], -7.0f) << "wrote past n";
  }
}

TEST(MatMulTest, EveryIsaMatchesReferenceOnOddShapes) {
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (bool pack : {false, true}) {
        for (int64_t m : {1, 2, 3, 5, 16, 17, 64, 129}) {
          for (int64_t n : {1, 7, 33}) {
            for (int64_t k : {1, 7, 33, 259}) CheckShape(isa, dt, pack, m, n, k);
          }
        }
        // Decode-like and prefill-like shapes with k past one k-block and n past many panels.
        CheckShape(isa, dt, pack, 1, 4096 + 3, 515);
        CheckShape(isa, dt, pack, 16, 100, 4096 + 3);
        CheckShape(isa, dt, pack, 129, 67, 1027);
        // Past AVX-512's prefill k-block (2048), both x kinds; two decode tiles over k-blocks.
        for (bool bf16_x : {false, true}) {
          CheckShape(isa, dt, pack, 129, 67, 4096 + 3, bf16_x);
          CheckShape(isa, dt, pack, 12, 67, 1027, bf16_x);
        }
        // Short tiles that span several panels (tasks of ≥ 4 panels need n ≥ 128): 2 and 3
        // rows × 2 panels, 3 + 4 rows, the 4-row single-panel tile.
        for (int64_t m : {2, 3, 4, 7}) CheckShape(isa, dt, pack, m, 300, 259);
        if (HasFailure()) return;
      }
    }
  }
}

TEST(MatMulTest, GroupMatchesSeparateMatMuls) {
  IsaGuard guard;
  ThreadPool pool(3);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    const int64_t k = 200;
    std::vector<TestWeight> ts;
    for (int64_t n : {96, 17, 17}) ts.push_back(MakeWeight(DType::kBF16, n, k, 5 + n));
    PrepareLinear(&ts[0].w);  // mixed: one packed, two unpacked
    for (int64_t m : {1, 7, 40}) {
      std::vector<float> x = RandomVec(m * k, 99);
      const auto ys = GroupOutputs(x.data(), k, m, ts, pool);
      for (size_t i = 0; i < ts.size(); ++i) {
        ExpectClose(x.data(), k, m, ts[i].w, ys[i].data(), ts[i].w.out_features,
                    std::string("group ") + ToString(isa) + " weight " + std::to_string(i));
      }
    }
  }
}

// Batch invariance (matmul_impl.h): a row's result must not depend on the other rows of the
// call, on where the row sits in the batch, or on the thread count, down to the last bit. The
// engine relies on it for greedy outputs that are the same alone and batched.
void ExpectBitwiseEqual(const float* a, const float* b, int64_t n, const std::string& what) {
  if (std::memcmp(a, b, n * sizeof(float)) == 0) return;
  for (int64_t j = 0; j < n; ++j) {
    if (std::memcmp(a + j, b + j, sizeof(float)) != 0) {
      ADD_FAILURE() << what << " col " << j << ": " << a[j] << " vs " << b[j];
      return;
    }
  }
}

TEST(MatMulTest, RowsAreBitwiseIndependentOfBatchAndThreads) {
  IsaGuard guard;
  ThreadPool pool1(1), pool2(2);
  constexpr int64_t kRows = 129;
  const int64_t sub_batches[] = {1, 2, 3, 5, 6, 7, 12, 13, 16, 17, 33, 64, 129};
  // (n, k): odd widths (partial last panel), k past one k-block and past 512, k = 1.
  const std::pair<int64_t, int64_t> shapes[] = {{33, 7}, {100, 515}, {67, 1027}, {17, 1},
                                                {160, 2051}};
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (DType dt : {DType::kF32, DType::kBF16}) {
      for (bool pack : {false, true}) {
        for (auto [n, k] : shapes) {
          TestWeight t = MakeWeight(dt, n, k, static_cast<uint32_t>(n * 31 + k));
          if (pack) PrepareLinear(&t.w);
          const int64_t xs = k + 1;
          const std::vector<float> x = RandomVec(kRows * xs, static_cast<uint32_t>(k));
          const std::string base = std::string(ToString(isa)) + " " + ToString(dt) +
                                   (pack ? " packed" : "") + " n=" + std::to_string(n) +
                                   " k=" + std::to_string(k);
          // The whole batch on one thread is the reference every other call must reproduce.
          std::vector<float> full(kRows * n);
          MatMul(x.data(), xs, kRows, t.w, full.data(), n, pool1);
          for (ThreadPool* pool : {&pool1, &pool2}) {
            const std::string what = base + " threads=" + std::to_string(pool->num_threads());
            for (int64_t m : sub_batches) {
              // A prefix x[0:m) and a window starting mid-tile, so that a row's position in
              // its register tile changes too.
              for (int64_t first : {int64_t{0}, (kRows - m) / 2}) {
                std::vector<float> y(m * n);
                MatMul(x.data() + first * xs, xs, m, t.w, y.data(), n, *pool);
                for (int64_t i = 0; i < m; ++i) {
                  ExpectBitwiseEqual(y.data() + i * n, full.data() + (first + i) * n, n,
                                     what + " m=" + std::to_string(m) + " row " +
                                         std::to_string(first + i));
                }
              }
            }
            for (int64_t i = 0; i < kRows; ++i) {
              std::vector<float> y(n);
              MatMul(x.data() + i * xs, xs, 1, t.w, y.data(), n, *pool);
              ExpectBitwiseEqual(y.data(), full.data() + i * n, n,
                                 what + " alone, row " + std::to_string(i));
            }
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// A group splits the columns into tasks differently from a lone MatMul; results must not move.
TEST(MatMulTest, GroupIsBitwiseEqualToSeparateMatMuls) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    const int64_t k = 777, m = 19;
    std::vector<TestWeight> ts;
    for (int64_t n : {1000, 33, 130}) ts.push_back(MakeWeight(DType::kBF16, n, k, 9 + n));
    PrepareLinear(&ts[0].w);
    PrepareLinear(&ts[1].w);  // the third stays unpacked
    const std::vector<float> x = RandomVec(m * k, 5);
    const auto grouped = GroupOutputs(x.data(), k, m, ts, pool);
    std::vector<std::vector<float>> alone;
    for (auto& t : ts) {
      alone.emplace_back(m * t.w.out_features);
      MatMul(x.data(), k, m, t.w, alone.back().data(), t.w.out_features, pool);
    }
    for (size_t i = 0; i < ts.size(); ++i) {
      ExpectBitwiseEqual(grouped[i].data(), alone[i].data(), m * ts[i].w.out_features,
                         std::string("group ") + ToString(isa) + " weight " + std::to_string(i));
    }
  }
}

// MatMulSiluMul is bitwise MatMulGroup of gate and up followed by SiluMul, at every ISA, for
// f32, bf16 and ternary (BitCPM4) weights, packed, unpacked and mixed, on decode and prefill
// heights, odd widths (a partial last panel and a SiluMul tail), rounded or not, with 2 and 3
// threads; and it writes nothing past column n of `out`.
TEST(MatMulTest, SiluMulFusedIsBitwiseGroupThenSiluMul) {
  IsaGuard guard;
  struct Shape {
    int64_t m, n, k;
  };
  const Shape shapes[] = {{1, 4100, 64}, {1, 33, 65}, {2, 100, 64}, {5, 1000, 77}, {4, 4100, 32},
                          {16, 259, 128}, {19, 130, 96}, {130, 70, 96}};
  enum class Kind { kF32, kBf16, kTernary };
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      for (const Shape& sh : shapes) {
        for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kTernary}) {
          for (int packed : {0, 1, 2}) {  // neither, both, gate only
            const DType dt = kind == Kind::kF32 ? DType::kF32 : DType::kBF16;
            const uint32_t seed = static_cast<uint32_t>(sh.m * 7 + sh.n + sh.k);
            TestWeight gate = MakeWeight(dt, sh.n, sh.k, seed);
            TestWeight up = MakeWeight(dt, sh.n, sh.k, seed + 1);
            if (kind == Kind::kTernary) {
              FakeQuantizeTernary(gate.bf16.data(), sh.n, sh.k, 32, false);
              FakeQuantizeTernary(up.bf16.data(), sh.n, sh.k, sh.k, false);
            }
            if (packed >= 1) PrepareLinear(&gate.w);
            if (packed == 1) PrepareLinear(&up.w);
            const int64_t xs = sh.k + 3, os = sh.n + 5;
            std::vector<float> x = RandomVec(sh.m * xs, seed + 2);
            if (kind != Kind::kF32) {
              for (float& v : x) v = RoundBf16(v);  // the bf16 dot-product kernels' input
            }
            for (Round round : {Round::kNone, Round::kBf16}) {
              const std::string what =
                  std::string(ToString(isa)) + " threads=" + std::to_string(threads) +
                  " kind=" + std::to_string(static_cast<int>(kind)) + " packed=" +
                  std::to_string(packed) + " m=" + std::to_string(sh.m) + " n=" +
                  std::to_string(sh.n) + " k=" + std::to_string(sh.k) +
                  (round == Round::kBf16 ? " bf16-rounded" : "");
              std::vector<float> g(sh.m * sh.n), u(sh.m * sh.n), want(sh.m * sh.n);
              const LinearWeight* ws[] = {&gate.w, &up.w};
              float* ys[] = {g.data(), u.data()};
              const int64_t strides[] = {sh.n, sh.n};
              MatMulGroup(x.data(), xs, sh.m, ws, ys, strides, pool, round);
              SiluMul(g.data(), sh.n, u.data(), sh.n, want.data(), sh.n, sh.m, sh.n, round);
              std::vector<float> out(sh.m * os, -7.0f);
              MatMulSiluMul(x.data(), xs, sh.m, gate.w, up.w, out.data(), os, pool, round);
              for (int64_t i = 0; i < sh.m; ++i) {
                ExpectBitwiseEqual(out.data() + i * os, want.data() + i * sh.n, sh.n,
                                   what + " row " + std::to_string(i));
                for (int64_t c = sh.n; c < os; ++c) {
                  ASSERT_EQ(out[i * os + c], -7.0f) << what << ": wrote past n";
                }
              }
            }
          }
        }
      }
    }
  }
}

// m rows of x (row stride xs, k values each, bf16-exact) as PairRows (matmul.h), by hand.
std::vector<uint32_t> PairRowsOf(const std::vector<float>& x, int64_t xs, int64_t m, int64_t k) {
  const int64_t ps = PairRowsStride(k);
  std::vector<uint32_t> pairs(m * ps, 0xdeadbeef);  // the gap past each row: never read
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; j += 2) {
      const uint32_t hi = j + 1 < k ? F32ToBf16(x[i * xs + j + 1]) : 0;
      pairs[i * ps + j / 2] = F32ToBf16(x[i * xs + j]) | hi << 16;
    }
  }
  return pairs;
}

// MatMulGroup on x as pair rows is bitwise MatMulGroup on the f32 rows they hold, wherever its
// weights take them (bf16 pairs, ternary codes at AVX-512 BF16); elsewhere (f32 weights, Q8_0,
// AVX2 panels) MatMulTakesPairRows says no. Decode and prefill heights, an odd k.
TEST(MatMulTest, PairRowsAreBitwiseTheF32Rows) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int64_t k : {64, 65, 1024}) {
      TestWeight f32 = MakeWeight(DType::kF32, 40, k, 3);
      TestWeight bf16 = MakeWeight(DType::kBF16, 70, k, 4);
      TestWeight ternary = MakeWeight(DType::kBF16, 96, k, 5);
      TestWeight q8 = MakeWeight(DType::kBF16, 32, k, 6);
      FakeQuantizeTernary(ternary.bf16.data(), 96, k, 32, false);
      for (TestWeight* t : {&f32, &bf16, &ternary}) PrepareLinear(&t->w);
      PrepareLinear(&q8.w, Source::kKeep, WeightQuant::kQ8_0);
      const LinearWeight* f32_ws[] = {&f32.w};
      const LinearWeight* q8_ws[] = {&bf16.w, &q8.w};
      EXPECT_FALSE(MatMulTakesPairRows(f32_ws));
      EXPECT_FALSE(MatMulTakesPairRows(q8_ws));
      const LinearWeight* ws[] = {&bf16.w, &ternary.w};
      ASSERT_EQ(MatMulTakesPairRows(ws), MatMulUsesBf16Dot()) << ToString(isa);
      if (!MatMulUsesBf16Dot()) continue;
      for (int64_t m : {1, 5, 16, 40, 300}) {
        const int64_t xs = k + 3;
        std::vector<float> x = RandomVec(m * xs, static_cast<uint32_t>(m + k));
        for (float& v : x) v = RoundBf16(v);
        for (Round round : {Round::kNone, Round::kBf16}) {
          const auto want = GroupOutputs(x.data(), xs, m, {bf16, ternary}, pool, round);
          const std::vector<uint32_t> pairs = PairRowsOf(x, xs, m, k);
          std::vector<float> y0(m * 70), y1(m * 96);
          float* ys[] = {y0.data(), y1.data()};
          const int64_t strides[] = {70, 96};
          MatMulGroup(PairRows{pairs.data(), PairRowsStride(k)}, m, ws, ys, strides, pool,
                      round);
          const std::string what = std::string(ToString(isa)) + " k=" + std::to_string(k) +
                                   " m=" + std::to_string(m);
          ExpectBitwiseEqual(y0.data(), want[0].data(), m * 70, what + " bf16");
          ExpectBitwiseEqual(y1.data(), want[1].data(), m * 96, what + " ternary");
          if (HasFailure()) return;
        }
      }
    }
  }
}

// GatedMlp is bitwise MatMulSiluMul then MatMul, also where it hands the down projection the
// activation as bf16 pairs (AVX-512 BF16, rounded): every ISA, f32 / bf16 / ternary weights,
// down packed or not, decode and prefill heights, odd ffn widths (an odd last pair, a partial
// panel), rounded or not, 2 and 3 threads; nothing written past column `hidden` of `out`.
// n bf16 values widened to f32.
std::vector<float> Widened(const uint16_t* v, int64_t n) {
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToF32(v[i]);
  return out;
}

TEST(MatMulTest, GatedMlpIsBitwiseSiluMulThenDown) {
  IsaGuard guard;
  struct Shape {
    int64_t m, ffn, hidden;
  };
  const Shape shapes[] = {{1, 4100, 64}, {3, 33, 65}, {16, 259, 128}, {19, 130, 96},
                          {130, 71, 96}};
  enum class Kind { kF32, kBf16, kTernary };
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      for (const Shape& sh : shapes) {
        for (Kind kind : {Kind::kF32, Kind::kBf16, Kind::kTernary}) {
          for (bool packed : {false, true}) {
            const DType dt = kind == Kind::kF32 ? DType::kF32 : DType::kBF16;
            const uint32_t seed = static_cast<uint32_t>(sh.m * 5 + sh.ffn + sh.hidden);
            TestWeight gate = MakeWeight(dt, sh.ffn, sh.hidden, seed);
            TestWeight up = MakeWeight(dt, sh.ffn, sh.hidden, seed + 1);
            TestWeight down = MakeWeight(dt, sh.hidden, sh.ffn, seed + 2);
            if (kind == Kind::kTernary) {
              FakeQuantizeTernary(down.bf16.data(), sh.hidden, sh.ffn, 32, false);
            }
            PrepareLinear(&gate.w);
            PrepareLinear(&up.w);
            if (packed) PrepareLinear(&down.w);
            const int64_t xs = sh.hidden + 3, as = sh.ffn + 2, os = sh.hidden + 5;
            std::vector<float> x = RandomVec(sh.m * xs, seed + 3);
            if (kind != Kind::kF32) {
              for (float& v : x) v = RoundBf16(v);
            }
            for (Round round : {Round::kNone, Round::kBf16}) {
              const std::string what =
                  std::string(ToString(isa)) + " threads=" + std::to_string(threads) +
                  " kind=" + std::to_string(static_cast<int>(kind)) +
                  (packed ? " packed" : "") + " m=" + std::to_string(sh.m) +
                  " ffn=" + std::to_string(sh.ffn) + (round == Round::kBf16 ? " rounded" : "");
              std::vector<float> act(sh.m * as), want(sh.m * sh.hidden);
              MatMulSiluMul(x.data(), xs, sh.m, gate.w, up.w, act.data(), as, pool, round);
              MatMul(act.data(), as, sh.m, down.w, want.data(), sh.hidden, pool, round);
              std::vector<float> scratch(sh.m * as), out(sh.m * os, -7.0f);
              GatedMlp(x.data(), xs, sh.m, gate.w, up.w, down.w, scratch.data(), as, out.data(),
                       os, pool, round);
              const LinearWeight* all[] = {&gate.w, &up.w, &down.w};
              const bool pairs_too = round == Round::kBf16 && MatMulTakesPairRows(all);
              std::vector<float> from_pairs(sh.m * os, -7.0f);
              std::vector<uint16_t> to_bf16(sh.m * os, 0xbeef);
              if (pairs_too) {  // x as pair rows (matmul.h's GatedMlp on PairRows)
                const std::vector<uint32_t> pairs = PairRowsOf(x, xs, sh.m, sh.hidden);
                const PairRows rows{pairs.data(), PairRowsStride(sh.hidden)};
                GatedMlp(rows, sh.m, gate.w, up.w, down.w, from_pairs.data(), os, pool, round);
                GatedMlp(rows, sh.m, gate.w, up.w, down.w, Bf16Rows{to_bf16.data(), os}, pool);
              }
              for (int64_t i = 0; i < sh.m; ++i) {
                ExpectBitwiseEqual(out.data() + i * os, want.data() + i * sh.hidden, sh.hidden,
                                   what + " row " + std::to_string(i));
                if (pairs_too) {
                  ExpectBitwiseEqual(from_pairs.data() + i * os, want.data() + i * sh.hidden,
                                     sh.hidden, what + " from pair rows, row " + std::to_string(i));
                  const std::vector<float> wide = Widened(to_bf16.data() + i * os, sh.hidden);
                  ExpectBitwiseEqual(wide.data(), want.data() + i * sh.hidden, sh.hidden,
                                     what + " to bf16 rows, row " + std::to_string(i));
                  for (int64_t c = sh.hidden; c < os; ++c) {
                    ASSERT_EQ(to_bf16[i * os + c], 0xbeef) << what << ": wrote past hidden";
                  }
                }
                for (int64_t c = sh.hidden; c < os; ++c) {
                  ASSERT_EQ(out[i * os + c], -7.0f) << what << ": wrote past hidden";
                  ASSERT_EQ(from_pairs[i * os + c], -7.0f) << what << ": wrote past hidden";
                }
              }
              if (HasFailure()) return;
            }
          }
        }
      }
    }
  }
}

// Long prefill steps run their rows in spans of ≤ 600 (each over all of k): every row is still
// bitwise what a short batch gives it, in each ISA, for 2 and 3 spans and a ragged last tile.
TEST(MatMulTest, LongPrefillSpansMatchShortBatches) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    TestWeight t = MakeWeight(DType::kBF16, 67, 515, 5);
    PrepareLinear(&t.w);
    for (int64_t m : {650, 1301}) {
      const std::vector<float> x = RandomVec(m * 515, static_cast<uint32_t>(m));
      std::vector<float> y(m * 67), part(129 * 67);
      MatMul(x.data(), 515, m, t.w, y.data(), 67, pool);
      for (int64_t r0 = 0; r0 < m; r0 += 129) {
        const int64_t rows = std::min<int64_t>(129, m - r0);
        MatMul(x.data() + r0 * 515, 515, rows, t.w, part.data(), 67, pool);
        for (int64_t i = 0; i < rows; ++i) {
          ExpectBitwiseEqual(part.data() + i * 67, y.data() + (r0 + i) * 67, 67,
                             std::string(ToString(isa)) + " m=" + std::to_string(m) + " row " +
                                 std::to_string(r0 + i));
        }
      }
    }
  }
}

// x rounded to bf16 (the model's activations are bf16 values): the rows vdpbf16ps takes.
std::vector<float> RoundedToBf16(std::vector<float> v) {
  for (float& f : v) f = Bf16ToF32(F32ToBf16(f));
  return v;
}

// Round::kBf16 rounds each output once its sum is complete: bitwise what rounding afterwards
// gives, for every task split (packed panels, unpacked rows, a group) and ISA.
TEST(MatMulTest, Bf16OutputEqualsRoundingAfterwards) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (bool pack : {false, true}) {
      // 9, 16: two row tiles (AVX-512); 130: the prefill path, two row blocks. x of bf16 values
      // (AVX-512 BF16's vdpbf16ps) and not, each with a NaN (a NaN's rounding keeps its sign).
      for (auto [m, bf16_x] : {std::pair<int64_t, bool>{1, false}, {5, false}, {9, true},
                               {16, true}, {17, false}, {130, true}, {130, false}}) {
        const int64_t k = 259;
        std::vector<TestWeight> ts;
        for (int64_t n : {300, 33}) ts.push_back(MakeWeight(DType::kBF16, n, k, 7 + n));
        if (pack) {
          for (auto& t : ts) PrepareLinear(&t.w);
        }
        std::vector<float> x = RandomVec(m * k, 11);
        if (bf16_x) x = RoundedToBf16(std::move(x));
        x[(m - 1) * k + 3] = -NAN;
        const auto rounded = GroupOutputs(x.data(), k, m, ts, pool, Round::kBf16);
        std::vector<std::vector<float>> plain;
        for (auto& t : ts) {
          plain.emplace_back(m * t.w.out_features);
          MatMul(x.data(), k, m, t.w, plain.back().data(), t.w.out_features, pool);
          for (float& v : plain.back()) v = Bf16ToF32(F32ToBf16(v));
        }
        for (size_t i = 0; i < ts.size(); ++i) {
          ExpectBitwiseEqual(rounded[i].data(), plain[i].data(), m * ts[i].w.out_features,
                             std::string(ToString(isa)) + (pack ? " packed" : "") +
                                 " m=" + std::to_string(m) + " weight " + std::to_string(i));
        }
      }
    }
  }
}

// MatMul into bf16 rows: bitwise its Round::kBf16 f32 rows, at every level (AMX's tiles write
// them; elsewhere, and for rows off the dot products, f32 rows narrowed), for unpacked and packed
// weights, partial panels, rows of bf16 values and not side by side, and a call split into row
// blocks; columns past n untouched.
TEST(MatMulTest, Bf16RowsAreTheRoundedF32Rows) {
  IsaGuard guard;
  ThreadPool pool(2);
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    for (bool pack : {false, true}) {
      for (int64_t m : {1, 5, 16, 33, 130}) {
        for (int64_t n : {33, 300}) {
          const int64_t k = 259, ys = n + 7;
          TestWeight t = MakeWeight(DType::kBF16, n, k, static_cast<uint32_t>(m + n));
          if (pack) PrepareLinear(&t.w);
          std::vector<float> x = RandomVec(m * k, static_cast<uint32_t>(3 * m + n));
          for (int64_t i = 0; i < m; ++i) {  // every third row off bf16 values
            if (i % 3 != 2) {
              for (int64_t j = 0; j < k; ++j) x[i * k + j] = RoundBf16(x[i * k + j]);
            }
          }
          std::vector<float> want(m * n);
          MatMul(x.data(), k, m, t.w, want.data(), n, pool, Round::kBf16);
          std::vector<uint16_t> got(m * ys, 0xbeef);
          MatMul(x.data(), k, m, t.w, Bf16Rows{got.data(), ys}, pool);
          const std::string what = std::string(ToString(isa)) + (pack ? " packed" : "") +
                                   " m=" + std::to_string(m) + " n=" + std::to_string(n);
          for (int64_t i = 0; i < m; ++i) {
            ExpectBitwiseEqual(Widened(got.data() + i * ys, n).data(), want.data() + i * n, n,
                               what + " row " + std::to_string(i));
            for (int64_t c = n; c < ys; ++c) {
              ASSERT_EQ(got[i * ys + c], 0xbeef) << what << ": wrote past n";
            }
          }
          const LinearWeight* ws[] = {&t.w};
          EXPECT_EQ(MatMulWritesBf16Rows(ws), pack && MatMulUsesAmx()) << what;
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST(MatMulTest, PrepareIsIdempotentAndKeepsData) {
  IsaGuard guard;
  TestWeight t = MakeWeight(DType::kBF16, 40, 24, 3);
  const void* data = t.w.data;
  PrepareLinear(&t.w);
  const void* packed = t.w.packed.get();
  PrepareLinear(&t.w);
  EXPECT_EQ(t.w.packed.get(), packed);
  EXPECT_EQ(t.w.data, data);
  if (BestIsa() != Isa::kScalar) {
    EXPECT_NE(packed, nullptr);
  }
}


// Source::kDrop: once packed, a private source is freed and a shared one (a checkpoint's
// mapping) left to its other owners; the product is bitwise the kept weight's.
TEST(MatMulTest, DroppedSourceFreesItAndKeepsTheProduct) {
  IsaGuard guard;
  ThreadPool pool(2);
  const int64_t n = 40, k = 24, m = 3;
  const std::vector<float> x = RandomVec(m * k, 9);
  const TestWeight t = MakeWeight(DType::kBF16, n, k, 3);
  for (Isa isa : IsasToTest()) {
    if (isa == Isa::kScalar) continue;  // nothing is packed there, so nothing is dropped
    ASSERT_TRUE(SetActiveIsa(isa));
    LinearWeight kept = t.w;
    PrepareLinear(&kept);
    std::vector<float> want(m * n), got(m * n);
    MatMul(x.data(), k, m, kept, want.data(), n, pool);
    for (bool shared : {false, true}) {
      auto source = std::make_shared<std::vector<uint16_t>>(t.bf16);
      LinearWeight w = t.w;
      w.data = source->data();
      w.owner = source;
      w.mapped = shared;  // as a checkpoint's mapping (smaller than a page: nothing released)
      const std::weak_ptr<std::vector<uint16_t>> alive = source;
      if (!shared) source.reset();
      PrepareLinear(&w, Source::kDrop);
      const std::string what = std::string(ToString(isa)) + (shared ? " shared" : " private");
      EXPECT_EQ(w.data, nullptr) << what;
      EXPECT_EQ(w.owner, nullptr) << what;
      EXPECT_EQ(alive.expired(), !shared) << what;
      MatMul(x.data(), k, m, w, got.data(), n, pool);
      ExpectBitwiseEqual(want.data(), got.data(), m * n, what);
    }
  }
}

// A heap buffer another holder still reads is only let go of, never handed back to the OS page
// by page as a mapped checkpoint's pages are (which would zero it under its sharer).
TEST(MatMulTest, DroppingASharedHeapSourceLeavesItIntact) {
  IsaGuard guard;
  const int64_t n = 64, k = 4096;  // 512 KiB: whole pages inside
  const TestWeight t = MakeWeight(DType::kBF16, n, k, 5);
  for (Isa isa : IsasToTest()) {
    if (isa == Isa::kScalar) continue;
    ASSERT_TRUE(SetActiveIsa(isa));
    auto source = std::make_shared<std::vector<uint16_t>>(t.bf16);
    LinearWeight w = t.w;
    w.data = source->data();
    w.owner = source;
    PrepareLinear(&w, Source::kDrop);
    EXPECT_TRUE(*source == t.bf16) << ToString(isa);
  }
}

// ---- AVX-512 kernels, run over SIMDe's emulation so that they are checked on any CPU. ----

// y = x · Wᵀ through the emulated AVX-512 kernel as MatMulGroup runs it: x prepared once (in
// pieces of `prep_rows` rows, as the pool's tasks do), columns split into tasks of `per_task`
// panels.
std::vector<float> EmulatedAvx512(const std::vector<float>& x, int64_t xs, int64_t m,
                                  const PackedWeight& pw, int64_t ys, int64_t per_task,
                                  int64_t prep_rows = 16, Round round = Round::kNone) {
  std::vector<uint8_t> dot(m, 2);
  std::vector<uint32_t> pairs(m * PairsStride(pw.k), 0xdeadbeef);
  for (int64_t i = 0; i < m; i += prep_rows) {
    emulated::PrepareXAvx512(x.data(), xs, pw.k, i, std::min(m, i + prep_rows), dot.data(),
                             pairs.data());
  }
  const Avx512X x512{x.data(), xs, dot.data(), pairs.data()};
  std::vector<float> y(m * ys, -7.0f);
  for (int64_t p = 0; p < pw.num_panels; p += per_task) {
    emulated::MatMulPanelsAvx512(x512, m, pw, p, std::min(pw.num_panels, p + per_task),
                                 y.data() + p * 32, ys, round);
  }
  return y;
}

struct Avx512Case {
  DType dt;
  bool have_bf16;  // the emulated CPU has AVX512_BF16
  bool bf16_x;     // x holds bf16 values (vdpbf16ps path when have_bf16)
};

class EmulatedAvx512Test : public ::testing::TestWithParam<Avx512Case> {
 protected:
  void SetUp() override { emulated::g_have_avx512bf16 = GetParam().have_bf16; }
  void TearDown() override { emulated::g_have_avx512bf16 = true; }
  static std::string Name(int64_t m, int64_t n, int64_t k) {
    const Avx512Case& c = GetParam();
    return std::string("avx512(emulated) ") + ToString(c.dt) + (c.have_bf16 ? " bf16-cpu" : "") +
           (c.bf16_x ? " bf16-x" : "") + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
           " k=" + std::to_string(k);
  }
};

TEST_P(EmulatedAvx512Test, MatchesReferenceOnOddShapes) {
  const Avx512Case c = GetParam();
  const PackedLayout layout =
      c.dt == DType::kBF16 ? PackedLayout::kPanel32Bf16Pairs : PackedLayout::kPanel32F32;
  // m past one row block (128) and one tile (8); k odd, past one k-block (256) and past 512.
  for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 130}) {
    for (int64_t n : {1, 31, 33, 70, 200, 256}) {
      for (int64_t k : {1, 2, 7, 33, 259, 515}) {
        TestWeight t = MakeWeight(c.dt, n, k, static_cast<uint32_t>(m * 131 + n * 7 + k));
        const auto packed = PackLinear(t.w, layout);
        const auto& pw = *static_cast<const PackedWeight*>(packed.get());
        const int64_t xs = k + 3, ys = n + 5;
        std::vector<float> x = RandomVec(m * xs, static_cast<uint32_t>(k + m));
        if (c.bf16_x) x = RoundedToBf16(std::move(x));
        // One panel per task, and tasks of several panels (short tiles then span 2-4).
        for (int64_t per_task : {int64_t{1}, int64_t{5}}) {
          const std::vector<float> y = EmulatedAvx512(x, xs, m, pw, ys, per_task);
          ExpectClose(x.data(), xs, m, t.w, y.data(), ys,
                      Name(m, n, k) + " panels/task=" + std::to_string(per_task));
          for (int64_t i = 0; i < m; ++i) {
            for (int64_t r = n; r < ys; ++r) ASSERT_EQ(y[i * ys + r], -7.0f) << "wrote past n";
          }
          // Rounding to bf16 as the tiles store y: bitwise rounding afterwards.
          if (per_task > 1) {
            std::vector<float> rounded = RoundedToBf16(y);
            const std::vector<float> yr =
                EmulatedAvx512(x, xs, m, pw, ys, per_task, 16, Round::kBf16);
            for (int64_t i = 0; i < m; ++i) {
              std::fill_n(rounded.begin() + i * ys + n, ys - n, -7.0f);  // past n: untouched
            }
            ExpectBitwiseEqual(yr.data(), rounded.data(), m * ys, Name(m, n, k) + " rounded");
          }
        }
        if (HasFailure()) return;
      }
    }
  }
}

// The prefill path past its k-block (2048 elements): rows resume from y at each block.
TEST_P(EmulatedAvx512Test, TallRowBlocksSpanSeveralKBlocks) {
  const Avx512Case c = GetParam();
  const PackedLayout layout =
      c.dt == DType::kBF16 ? PackedLayout::kPanel32Bf16Pairs : PackedLayout::kPanel32F32;
  const int64_t m = 40, n = 33, k = 4096 + 3, xs = k + 3, ys = n + 5;
  TestWeight t = MakeWeight(c.dt, n, k, 5);
  const auto packed = PackLinear(t.w, layout);
  const auto& pw = *static_cast<const PackedWeight*>(packed.get());
  std::vector<float> x = RandomVec(m * xs, 6);
  if (c.bf16_x) x = RoundedToBf16(std::move(x));
  const std::vector<float> y = EmulatedAvx512(x, xs, m, pw, ys, 1);
  ExpectClose(x.data(), xs, m, t.w, y.data(), ys, Name(m, n, k));
}

// Batch invariance as for the other ISAs: a row alone, in any batch and under any split of the
// columns into tasks gives the same bits.
TEST_P(EmulatedAvx512Test, RowsAreBitwiseIndependentOfBatchAndTasks) {
  const Avx512Case c = GetParam();
  const PackedLayout layout =
      c.dt == DType::kBF16 ? PackedLayout::kPanel32Bf16Pairs : PackedLayout::kPanel32F32;
  constexpr int64_t kRows = 37;
  for (auto [n, k] : {std::pair<int64_t, int64_t>{70, 515}, {33, 7}, {200, 259}}) {
    TestWeight t = MakeWeight(c.dt, n, k, static_cast<uint32_t>(n + k));
    const auto packed = PackLinear(t.w, layout);
    const auto& pw = *static_cast<const PackedWeight*>(packed.get());
    std::vector<float> x = RandomVec(kRows * k, static_cast<uint32_t>(k));
    if (c.bf16_x) x = RoundedToBf16(std::move(x));
    const std::vector<float> full = EmulatedAvx512(x, k, kRows, pw, n, 1);
    for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 16}) {
      const int64_t first = (kRows - m) / 2;
      const std::vector<float> sub(x.begin() + first * k, x.begin() + (first + m) * k);
      // All panels in one task: tiles of ≤ 4 rows span several panels.
      const std::vector<float> y = EmulatedAvx512(sub, k, m, pw, n, pw.num_panels);
      for (int64_t i = 0; i < m; ++i) {
        ExpectBitwiseEqual(y.data() + i * n, full.data() + (first + i) * n, n,
                           Name(m, n, k) + " row " + std::to_string(first + i));
      }
    }
  }
}

// Ternary weights' AVX-512 codes (kPanel32Ternary) under emulation: bitwise the bf16 pairs of
// the same weight for runs of 1-32 bf16 rows (decode tiles of at most 8 rows; the
// 7-8-row tiles decode through mask registers, the others by byte shuffles), and the
// pairs copy for longer runs and for a row that is not bf16 (row 1 from three rows on); partial
// last panels, odd k, per-row and 64- and 32-input scale groups, tasks of 1 and 3 panels, bf16
// output rounding. (ternary_test.cc runs the native kernels the same way.)
TEST(EmulatedAvx512TernaryTest, CodesAreBitwiseThePairs) {
  const std::pair<int64_t, int64_t> shapes[] = {{37, 31}, {160, 259}, {17, 1027}, {70, 64}};
  for (auto [n, k] : shapes) {
    for (int64_t group : {int64_t{1} << 20, int64_t{64}, int64_t{32}}) {
      std::vector<uint16_t> w = RandomBf16(n * k, static_cast<uint32_t>(n * k + group));
      FakeQuantizeTernary(w.data(), n, k, group, false);
      LinearWeight lw;
      lw.dtype = DType::kBF16;
      lw.out_features = n;
      lw.in_features = k;
      lw.data = w.data();
      const TernaryFormat f = DetectTernary(w.data(), n, k);
      ASSERT_TRUE(f.ternary());
      ASSERT_TRUE(f.negative_zero);  // code 3 (−0), which the 7-8-row tiles decode as +0
      const auto codes = PackTernary(lw, f, PackedLayout::kPanel32Ternary);
      const auto pairs = PackLinear(lw, PackedLayout::kPanel32Bf16Pairs);
      for (int64_t m : {1, 2, 3, 4, 5, 8, 9, 12, 16, 17, 32, 34, 35}) {
        std::vector<float> x = RandomVec(m * k, static_cast<uint32_t>(m));
        for (int64_t i = 0; i < m * k; ++i) {
          if (m < 3 || i / k != 1) x[i] = RoundBf16(x[i]);
        }
        for (int64_t per_task : {1, 3}) {
          for (Round round : {Round::kNone, Round::kBf16}) {
            const auto run = [&](const std::shared_ptr<const void>& packed) {
              return EmulatedAvx512(x, k, m, *static_cast<const PackedWeight*>(packed.get()), n,
                                    per_task, 16, round);
            };
            const std::vector<float> a = run(codes), b = run(pairs);
            ExpectBitwiseEqual(a.data(), b.data(), m * n,
                               "n=" + std::to_string(n) + " k=" + std::to_string(k) + " group " +
                                   std::to_string(group) + " m=" + std::to_string(m) +
                                   " per_task=" + std::to_string(per_task) +
                                   (round == Round::kBf16 ? " rounded" : ""));
            if (HasFailure()) return;
          }
        }
      }
    }
  }
}

// x preparation: a row of bf16 values takes vdpbf16ps with its pairs packed (k in the low half);
// one value with low bits anywhere (vector part, odd tail) or a CPU without AVX512_BF16 sends
// the row to the f32 path.
TEST(EmulatedAvx512PrepareTest, PacksBf16RowsAndFlagsOthers) {
  for (int64_t k : {1, 2, 31, 32, 33, 64, 67, 515}) {
    const int64_t pairs_stride = (k + 1) / 2;
    const std::vector<float> x = RoundedToBf16(RandomVec(k, static_cast<uint32_t>(k)));
    for (bool have_bf16 : {true, false}) {
      emulated::g_have_avx512bf16 = have_bf16;
      uint8_t dot = 2;
      std::vector<uint32_t> pairs(pairs_stride, 0xdeadbeef);
      emulated::PrepareXAvx512(x.data(), k, k, 0, 1, &dot, pairs.data());
      ASSERT_EQ(dot, have_bf16 ? 1 : 0) << "k=" << k;
      for (int64_t j = 0; have_bf16 && j < pairs_stride; ++j) {
        const uint32_t lo = F32ToBf16(x[2 * j]), hi = 2 * j + 1 < k ? F32ToBf16(x[2 * j + 1]) : 0;
        ASSERT_EQ(pairs[j], lo | hi << 16) << "k=" << k << " pair " << j;
      }
    }
    emulated::g_have_avx512bf16 = true;
    for (int64_t at : {int64_t{0}, k / 2, k - 1}) {
      std::vector<float> inexact = x;
      uint32_t bits;
      std::memcpy(&bits, &inexact[at], 4);
      bits |= 1;
      std::memcpy(&inexact[at], &bits, 4);
      uint8_t dot = 2;
      std::vector<uint32_t> pairs(pairs_stride);
      emulated::PrepareXAvx512(inexact.data(), k, k, 0, 1, &dot, pairs.data());
      EXPECT_EQ(dot, 0) << "k=" << k << " low bits at " << at;
    }
  }
}

// ---- The start-up choice between the AVX-512 and AVX2 kernels (matmul_choice.cc). ----

// The emulated AVX-512 kernels as a CheckKernel (the native ones are what an AVX-512 CPU checks).
CheckKernel EmulatedAvx512Kernel(const LinearWeight& w) {
  auto packed = PackLinear(w, PackedLayout::kPanel32Bf16Pairs);
  return [packed](const float* x, int64_t m, float* y) {
    const auto& pw = *static_cast<const PackedWeight*>(packed.get());
    const std::vector<float> xv(x, x + m * pw.k);
    const std::vector<float> out = EmulatedAvx512(xv, pw.k, m, pw, pw.n, pw.num_panels);
    std::copy(out.begin(), out.end(), y);
  };
}

TEST(MatmulChoiceTest, CorrectKernelsPassTheCheckAndOnlyAClearlyFasterOneIsPreferred) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "needs AVX2";
  TestWeight t = MakeWeight(DType::kBF16, 64, 256, 5);
  const CheckKernel avx2 = Avx2CheckKernel(t.w);
  // The emulated AVX-512 kernels are correct and far slower than native AVX2.
  const MatmulCheck emulated = CompareMatmulKernels(t.w, EmulatedAvx512Kernel(t.w), avx2);
  EXPECT_TRUE(emulated.correct) << emulated.max_error_ratio;
  EXPECT_LT(emulated.max_error_ratio, 1e-5);
  EXPECT_FALSE(PrefersCandidate(emulated))
      << emulated.candidate_gflops << " vs " << emulated.baseline_gflops;
  // The same kernel against itself doing twice the work: correct and ~2x faster.
  const CheckKernel twice = [&](const float* x, int64_t m, float* y) {
    avx2(x, m, y);
    avx2(x, m, y);
  };
  const MatmulCheck faster = CompareMatmulKernels(t.w, avx2, twice);
  EXPECT_TRUE(PrefersCandidate(faster))
      << faster.candidate_gflops << " vs " << faster.baseline_gflops;
}

TEST(MatmulChoiceTest, AWrongKernelIsNotPreferredHoweverFast) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "needs AVX2";
  TestWeight t = MakeWeight(DType::kBF16, 64, 256, 6);
  const CheckKernel avx2 = Avx2CheckKernel(t.w);
  // Drops one k step of one output in the batch (a tile-edge bug): fast, slightly wrong.
  const CheckKernel wrong = [&](const float* x, int64_t m, float* y) {
    avx2(x, m, y);
    y[(m - 1) * 64 + 63] -= x[(m - 1) * 256 + 255] * Bf16ToF32(t.bf16[63 * 256 + 255]);
  };
  const MatmulCheck c = CompareMatmulKernels(t.w, wrong, [&](const float* x, int64_t m, float* y) {
    avx2(x, m, y);
    avx2(x, m, y);
  });
  EXPECT_FALSE(c.correct) << c.max_error_ratio;
  EXPECT_FALSE(PrefersCandidate(c));
  EXPECT_FALSE(PrefersCandidate({true, 0, 1.05, 1.0})) << "within the margin: keep the baseline";
  EXPECT_TRUE(PrefersCandidate({true, 0, 2.0, 1.0}));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, EmulatedAvx512Test,
    ::testing::Values(Avx512Case{DType::kF32, true, false}, Avx512Case{DType::kBF16, true, true},
                      Avx512Case{DType::kBF16, true, false},
                      Avx512Case{DType::kBF16, false, true}),
    [](const ::testing::TestParamInfo<Avx512Case>& info) {
      const Avx512Case& c = info.param;
      return std::string(c.dt == DType::kBF16 ? "Bf16" : "F32") +
             (c.have_bf16 ? "CpuBf16" : "NoCpuBf16") + (c.bf16_x ? "XBf16" : "XF32");
    });

}  // namespace
}  // namespace cpm::kernels
