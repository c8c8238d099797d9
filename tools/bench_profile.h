// `cpmserve bench --profile`: where a test's best run spent its time, by forward section
// (model/forward_profile.h), per decode step (per prompt for a prefill test), with each matmul
// section's weight stream as GB/s and as a share of the read bandwidth probed in the same run.
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

// A Markdown table: each section's ms per step, share of the step, calls per step, and for
// matmul sections GB/s and the share of `read_gbps` (0: not measured, column left "-"); then
// the step's time outside every section.
void PrintProfile(const TestProfile& p, double read_gbps);

// The same figures as JSON: [{"section", "ms_per_step", "share", "calls_per_step",
// "weight_gb_per_s"}...] (weight_gb_per_s null for sections without weights).
nlohmann::json ProfileJson(const TestProfile& p);

}  // namespace cpm
