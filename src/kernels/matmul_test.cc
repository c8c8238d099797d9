// Matmul: every ISA level, packed and unpacked, against the scalar reference on odd shapes.
#include "kernels/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

void CheckShape(Isa isa, DType dt, bool pack, int64_t m, int64_t n, int64_t k) {
  ThreadPool pool(2);
  TestWeight t = MakeWeight(dt, n, k, static_cast<uint32_t>(m * 131 + n * 7 + k));
  if (pack) PrepareLinear(&t.w);
  // Padded strides catch kernels that assume dense rows.
  const int64_t xs = k + 3, ys = n + 5;
  std::vector<float> x = RandomVec(m * xs, static_cast<uint32_t>(k + m));
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
      std::vector<std::vector<float>> ys;
      std::vector<const LinearWeight*> ws;
      std::vector<float*> yp;
      std::vector<int64_t> strides;
      for (auto& t : ts) {
        ys.emplace_back(m * t.w.out_features);
        ws.push_back(&t.w);
        strides.push_back(t.w.out_features);
      }
      for (auto& y : ys) yp.push_back(y.data());
      MatMulGroup(x.data(), k, m, ws, yp, strides, pool);
      for (size_t i = 0; i < ts.size(); ++i) {
        ExpectClose(x.data(), k, m, ts[i].w, ys[i].data(), ts[i].w.out_features,
                    std::string("group ") + ToString(isa) + " weight " + std::to_string(i));
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

}  // namespace
}  // namespace cpm::kernels
