// `cpmserve bench --profile`: where a test's best run spent its time, by forward section
// (model/forward_profile.h), per decode step (per prompt for a prefill test), with each matmul
// section's weight stream (GB/s, share of the read bandwidth probed in the same run) and its
// FLOP rate (GFLOP/s, share of the matmul's peak): a decode step's matmuls are judged by the
// first, a prefill's by the second.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/forward_profile.h"

namespace cpm {

// One test's profile, as measured.
struct TestProfile {
  std::string test;       // "tg128"
  int64_t batch = 1;
  int64_t steps = 1;      // forwards timed together: decode steps, or 1 for a whole prompt
  double seconds = 0;     // the run's wall time
  ForwardProfile sections;
};

// The limits a section's rates are shown against (0: not measured, the share left "-").
struct ProfileLimits {
  double read_gbps = 0;
  double matmul_gflops = 0;  // the matmul's peak: AMX, vdpbf16ps, FMAs or (Q8_0) int8 dots
};

// A Markdown table: each section's ms per step, share of the step, calls per step, and for
// matmul sections GB/s and GFLOP/s with their shares of `limits`; then the step's time outside
// every section.
void PrintProfile(const TestProfile& p, const ProfileLimits& limits);

// The same figures as JSON: [{"section", "ms_per_step", "share", "calls_per_step",
// "weight_gb_per_s", "gflop_per_s"}...] (the last two null for sections without matmuls).
nlohmann::json ProfileJson(const TestProfile& p);

}  // namespace cpm
