#include "structured/number_ranges.h"

#include <algorithm>
#include <vector>

namespace cpm::structured {
namespace {

constexpr int64_t kNoLimit = -1;

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    if (p.empty()) continue;
    out += out.empty() ? "(?:" : "|";
    out += p;
  }
  return out.empty() ? out : out + ")";
}

int64_t Pow10(int n) {
  int64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

int DigitCount(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

// The numbers from a to b, two digit strings of one length (a <= b), digit by digit: a's
// first digit followed by what completes a upwards, the digits between followed by anything,
// b's first digit followed by what completes b downwards.
std::string SameLength(const std::string& a, const std::string& b) {
  const size_t n = a.size();
  if (a == b) return a;
  if (a.find_first_not_of('0') == std::string::npos &&
      b.find_first_not_of('9') == std::string::npos) {
    return n == 1 ? "\\d" : "\\d{" + std::to_string(n) + "}";
  }
  if (n == 1) return std::string("[") + a + "-" + b + "]";
  if (a[0] == b[0]) return a.substr(0, 1) + "(?:" + SameLength(a.substr(1), b.substr(1)) + ")";
  std::vector<std::string> parts = {a.substr(0, 1) + "(?:" +
                                    SameLength(a.substr(1), std::string(n - 1, '9')) + ")"};
  if (a[0] + 1 <= b[0] - 1) {
    parts.push_back(std::string("[") + static_cast<char>(a[0] + 1) + "-" +
                    static_cast<char>(b[0] - 1) + "]\\d{" + std::to_string(n - 1) + "}");
  }
  parts.push_back(b.substr(0, 1) + "(?:" + SameLength(std::string(n - 1, '0'), b.substr(1)) +
                  ")");
  return Join(parts);
}

// Non-negative integers lo..hi (hi kNoLimit: no upper limit) as written without leading
// zeros; empty if there are none.
std::string Magnitudes(int64_t lo, int64_t hi) {
  if (hi != kNoLimit && lo > hi) return "";
  const int lo_len = DigitCount(lo), hi_len = hi == kNoLimit ? lo_len : DigitCount(hi);
  std::vector<std::string> parts;
  for (int len = lo_len; len <= hi_len; ++len) {
    const int64_t a = std::max(lo, len == 1 ? 0 : Pow10(len - 1));
    const int64_t b = hi == kNoLimit ? Pow10(len) - 1 : std::min(hi, Pow10(len) - 1);
    if (a <= b) parts.push_back(SameLength(std::to_string(a), std::to_string(b)));
  }
  if (hi == kNoLimit) parts.push_back("[1-9]\\d{" + std::to_string(lo_len) + ",}");
  return Join(parts);
}

// Decimal magnitudes m = n.f (f any digits) from c to d (integers; each bound inclusive or
// exclusive; d kNoLimit: none), c >= 0.
std::string DecimalMagnitudes(int64_t c, bool c_exclusive, int64_t d, bool d_exclusive) {
  std::vector<std::string> parts;
  // Integer parts whose every fraction lies inside: from c (c + 1 when exclusive) to d - 1.
  const int64_t first = c + (c_exclusive ? 1 : 0);
  if (d == kNoLimit || first <= d - 1) {
    const std::string whole = Magnitudes(first, d == kNoLimit ? kNoLimit : d - 1);
    if (!whole.empty()) parts.push_back(whole + "(?:\\.\\d+)?");
  }
  // c itself, excluded: only with a fraction that is not zero (and below d).
  if (c_exclusive && (d == kNoLimit || c < d)) {
    parts.push_back(Magnitudes(c, c) + "\\.\\d*[1-9]\\d*");
  }
  // d itself, included: only with a zero fraction.
  if (d != kNoLimit && !d_exclusive && (d > c || (d == c && !c_exclusive))) {
    parts.push_back(Magnitudes(d, d) + "(?:\\.0+)?");
  }
  return Join(parts);
}

}  // namespace

std::string IntegerRangePattern(NumberBound lo, NumberBound hi) {
  const int64_t a = lo.value + (lo.exclusive ? 1 : 0), b = hi.value - (hi.exclusive ? 1 : 0);
  std::vector<std::string> parts;
  if (!hi.set || b >= 0) {
    parts.push_back(Magnitudes(lo.set ? std::max<int64_t>(a, 0) : 0, hi.set ? b : kNoLimit));
  }
  if (!lo.set || a < 0) {  // negatives: magnitudes from max(1, -b) to -a
    const std::string m =
        Magnitudes(hi.set ? std::max<int64_t>(1, -b) : 1, lo.set ? -a : kNoLimit);
    if (!m.empty()) parts.push_back("-" + m);
  }
  return Join(parts);
}

std::string NumberRangePattern(NumberBound lo, NumberBound hi) {
  std::vector<std::string> parts;
  // x >= 0, written without a sign: from lo (or 0) to hi.
  if (!hi.set || hi.value > 0 || (hi.value == 0 && !hi.exclusive)) {
    const bool from_lo = lo.set && lo.value >= 0;
    parts.push_back(DecimalMagnitudes(from_lo ? lo.value : 0, from_lo && lo.exclusive,
                                      hi.set ? hi.value : kNoLimit, hi.exclusive));
  }
  // x < 0, written with '-' (never -0): magnitudes above -hi (or above 0) up to -lo.
  if (!lo.set || lo.value < 0) {
    const bool from_hi = hi.set && hi.value < 0;
    const std::string m = DecimalMagnitudes(from_hi ? -hi.value : 0, from_hi ? hi.exclusive : true,
                                            lo.set ? -lo.value : kNoLimit, lo.exclusive);
    if (!m.empty()) parts.push_back("-" + m);
  }
  return Join(parts);
}

}  // namespace cpm::structured
