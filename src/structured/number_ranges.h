// JSON Schema minimum / maximum / exclusiveMinimum / exclusiveMaximum as patterns (regex.h)
// over a number's JSON text, so that the matcher holds generated numbers to their range digit
// by digit. The texts are canonical: no leading zeros, no "-0", no exponent; a number's
// fraction is any digits (1.50 is 1.5).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

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

// A number's bound as its decimal digits: 0.1 is whole 0, fraction "1" (the shortest text that
// reads back as the double the schema held).
struct DecimalBound {
  bool set = false;
  bool negative = false;
  int64_t whole = 0;         // |value|'s integer part
  std::string fraction;      // |value|'s fraction digits, no trailing zeros
  bool exclusive = false;

  // Errors: beyond ±kMaxRangeBound, or more than kMaxFractionDigits fraction digits.
  static StatusOr<DecimalBound> FromDouble(double v, bool exclusive);
};
constexpr size_t kMaxFractionDigits = 32;

// Numbers x within the bounds (each inclusive or exclusive), written as -?digits(.digits)?.
// Empty if no number is within them.
std::string NumberRangePattern(const DecimalBound& lo, const DecimalBound& hi);

}  // namespace cpm::structured
