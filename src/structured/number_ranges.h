// JSON Schema minimum / maximum / exclusiveMinimum / exclusiveMaximum as patterns (regex.h)
// over a number's JSON text, so that the matcher holds generated numbers to their range digit
// by digit. The texts are canonical: no leading zeros, no "-0", no exponent; a number's
// fraction is any digits (1.50 is 1.5).
#pragma once

#include <cstdint>
#include <string>

namespace cpm::structured {

// Largest bound magnitude taken (beyond it doubles no longer hold every integer).
constexpr int64_t kMaxRangeBound = 1'000'000'000'000'000;  // 1e15

struct NumberBound {
  bool set = false;
  int64_t value = 0;
  bool exclusive = false;
};

// Integers n with lo <= n <= hi (unset: unbounded); lo <= hi when both are set.
std::string IntegerRangePattern(NumberBound lo, NumberBound hi);

// Numbers x within the bounds (each inclusive or exclusive, integer-valued), written as
// -?digits(.digits)?. Empty if no number is within them.
std::string NumberRangePattern(NumberBound lo, NumberBound hi);

}  // namespace cpm::structured
