// Which matmul kernels an AVX-512 CPU runs. The AVX-512 kernels have only been run under SIMDe's
// emulation (no machine this project is built on has AVX-512), so rather than trusting them
// blindly, or leaving them unused on the CPUs they were written for, the first use on such a CPU
// runs both kernel families on one small bf16 problem: the AVX-512 kernels are chosen if they
// give the reference's results and are clearly faster. CPM_AVX512_MATMUL=1 / =0 overrides.
// Where the CPU has AMX (and the OS grants it), the bf16 rows of those kernels run on its tiles
// unless CPM_AMX=0.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"

namespace cpm::kernels {
namespace {

// The problem: a decode-sized batch of bf16-exact rows (the model's activations) against a bf16
// weight small enough to stay in L2 (kOut × kIn for the start-up choice), so that the timing
// compares the kernels, not memory.
constexpr int64_t kRows = 24, kOut = 128, kIn = 512;
constexpr int kRounds = 3, kCallsPerRound = 16;

LinearWeight RandomBf16Weight(std::vector<uint16_t>* storage, std::mt19937* rng) {
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  storage->resize(kOut * kIn);
  for (uint16_t& v : *storage) v = F32ToBf16(d(*rng));
  LinearWeight w;
  w.dtype = DType::kBF16;
  w.out_features = kOut;
  w.in_features = kIn;
  w.data = storage->data();
  return w;
}

// Largest |y - ref| over the scale of its terms (Σ|x·w|): ~1e-6 for a correct reordering of the
// sum, O(1) for a wrong product or element.
double MaxErrorRatio(const float* x, int64_t m, const LinearWeight& w, const float* y,
                     const float* ref) {
  const int64_t n = w.out_features, k = w.in_features;
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < n; ++c) {
      double scale = 1e-30;
      for (int64_t j = 0; j < k; ++j) scale += std::fabs(x[i * k + j] * Bf16ToF32(wd[c * k + j]));
      const double err = std::fabs(static_cast<double>(y[i * n + c]) - ref[i * n + c]);
      worst = std::max(worst, std::isfinite(err) ? err / scale : INFINITY);
    }
  }
  return worst;
}

// Best GFLOP/s of each kernel on m rows over the rounds, the two alternating so that a noisy
// neighbour affects both alike.
void TimeBoth(const LinearWeight& w, const CheckKernel& a, const CheckKernel& b, const float* x,
              int64_t m, double* a_gflops, double* b_gflops) {
  std::vector<float> y(m * w.out_features);
  const double flops = 2.0 * m * w.out_features * w.in_features * kCallsPerRound;
  *a_gflops = *b_gflops = 0;
  for (int r = 0; r < kRounds; ++r) {
    for (auto [kernel, best] : {std::pair{&a, a_gflops}, std::pair{&b, b_gflops}}) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int c = 0; c < kCallsPerRound; ++c) (*kernel)(x, m, y.data());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      *best = std::max(*best, flops / s / 1e9);
    }
  }
}

// `w` packed as `layout` and multiplied through MatMul, exactly as the model runs it (x prepared
// once per call, tasks), on one thread.
CheckKernel PackedKernel(const LinearWeight& w, PackedLayout layout) {
  auto packed = std::make_shared<LinearWeight>(w);
  packed->packed = PackLinear(w, layout);
  auto pool = std::make_shared<ThreadPool>(1);
  return [packed, pool](const float* x, int64_t m, float* y) {
    MatMul(x, packed->in_features, m, *packed, y, packed->out_features, *pool);
  };
}

KernelChoice Decide() {
  if (const char* s = std::getenv("CPM_AVX512_MATMUL"); s != nullptr && *s != '\0') {
    const bool on = std::strcmp(s, "1") == 0;
    return {on, std::string("CPM_AVX512_MATMUL=") + s};
  }
  std::vector<uint16_t> storage;
  std::mt19937 rng(20261130);
  const LinearWeight w = RandomBf16Weight(&storage, &rng);
  const MatmulCheck c = CompareMatmulKernels(w, PackedKernel(w, PackedLayout::kPanel32Bf16Pairs),
                                             Avx2CheckKernel(w));
  char why[256];
  std::snprintf(why, sizeof why,
                "self-check on a %lld×%lld×%lld bf16 problem: avx512 %.1f GFLOP/s vs avx2 %.1f, "
                "error %.1e of the terms' scale",
                static_cast<long long>(kRows), static_cast<long long>(kOut),
                static_cast<long long>(kIn), c.candidate_gflops, c.baseline_gflops,
                c.max_error_ratio);
  return {PrefersCandidate(c), why};
}

}  // namespace

MatmulCheck CompareMatmulKernels(const LinearWeight& w, const CheckKernel& candidate,
                                 const CheckKernel& baseline) {
  const int64_t n = w.out_features, k = w.in_features;
  MatmulCheck out;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(kRows * k);
  for (float& v : x) v = Bf16ToF32(F32ToBf16(d(rng)));
  // Correctness on a single row (decode's tiles) and on the whole batch (the tall tiles).
  for (int64_t m : {int64_t{1}, kRows}) {
    std::vector<float> ref(m * n), y(m * n, NAN);
    MatMulRef(x.data(), k, m, w, 0, n, ref.data(), n);
    candidate(x.data(), m, y.data());
    out.max_error_ratio =
        std::max(out.max_error_ratio, MaxErrorRatio(x.data(), m, w, y.data(), ref.data()));
  }
  out.correct = out.max_error_ratio <= kMatmulCheckTolerance;
  TimeBoth(w, candidate, baseline, x.data(), kRows, &out.candidate_gflops, &out.baseline_gflops);
  return out;
}

CheckKernel Avx2CheckKernel(const LinearWeight& w) {
  return PackedKernel(w, PackedLayout::kPanel16Bf16);
}

bool PrefersCandidate(const MatmulCheck& c) {
  return c.correct && c.candidate_gflops >= kMatmulCheckMargin * c.baseline_gflops;
}

const KernelChoice& AmxChoice() {
  // No self-check of its own: on an AMX CPU the AVX-512 self-check (Decide) runs its candidate
  // through MatMul, which then takes this kernel, so a wrong AMX result would turn the whole
  // AVX-512 family off. Nothing here may ask Avx512Choice(): Decide's MatMul asks this.
  static const KernelChoice choice = [] {
    if (!AmxUsable()) return KernelChoice{false, "no AMX"};
    if (const char* s = std::getenv("CPM_AMX"); s != nullptr && std::strcmp(s, "0") == 0) {
      return KernelChoice{false, "off (CPM_AMX=0)"};
    }
    return KernelChoice{true, "on"};
  }();
  return choice;
}

const KernelChoice& Avx512Choice() {
  static const KernelChoice choice = [] {
    if (BestIsa() != Isa::kAvx512) return KernelChoice{false, "no AVX-512"};
    return Decide();
  }();
  return choice;
}

}  // namespace cpm::kernels
