// Helpers shared by the kernel tests: deterministic random data and the ISA levels to check.
// Test-only; nothing in the library includes it.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "tensor/dtype.h"

namespace cpm::kernels::testing {

inline std::vector<float> RandomVec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline std::vector<uint16_t> RandomBf16(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::vector<float> f = RandomVec(n, seed, lo, hi);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = F32ToBf16(f[i]);
  return v;
}

// Every level the CPU has, in order; the levels it lacks are reported once per test program.
inline std::vector<Isa> IsasToTest() {
  static bool reported = false;
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(BestIsa())) {
      out.push_back(isa);
    } else if (!reported) {
      std::printf("[ SKIPPED  ] ISA %s variants: this CPU lacks them\n", ToString(isa));
    }
  }
  reported = true;
  return out;
}

// Restores the start-up ISA level when a test ends, so tests do not leak their choice.
class IsaGuard {
 public:
  IsaGuard() : saved_(ActiveIsa()) {}
  ~IsaGuard() { SetActiveIsa(saved_); }

 private:
  Isa saved_;
};

}  // namespace cpm::kernels::testing
