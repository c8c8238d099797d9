#include "structured/number_ranges.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>
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

// The digit strings ds (after a decimal point; "" for none) whose fraction 0.ds lies between
// lo and hi (digit strings without trailing zeros, "" for 0; no hi: below 1), digit by digit as
// SameLength goes. `empty`: "" is among them; `alts`: regexes of the non-empty ones.
struct Fractions {
  bool empty = false;
  std::vector<std::string> alts;
  bool none() const { return !empty && alts.empty(); }
  std::string Regex() const {  // all of them, "" included when it is one
    std::string r = Join(alts);
    return empty && !r.empty() ? r + "?" : r;
  }
};

Fractions Between(const std::string& lo, bool lo_exclusive, const std::string* hi,
                  bool hi_exclusive) {
  if (lo.empty() && hi == nullptr) {  // from 0: all, or all but the zeros
    return lo_exclusive ? Fractions{false, {"\\d*[1-9]\\d*"}} : Fractions{true, {"\\d+"}};
  }
  if (lo.empty() && hi->empty()) {  // exactly 0: zeros
    return lo_exclusive || hi_exclusive ? Fractions{} : Fractions{true, {"0+"}};
  }
  Fractions out;
  out.empty = lo.empty() && !lo_exclusive;  // 0 is below any non-empty hi
  const int l1 = lo.empty() ? 0 : lo[0] - '0';
  const int h1 = hi == nullptr ? 10 : hi->empty() ? 0 : (*hi)[0] - '0';
  const std::string lo_rest = lo.empty() ? "" : lo.substr(1);
  const std::string hi_rest = hi == nullptr || hi->empty() ? "" : hi->substr(1);
  const auto digit = [](int d) { return std::string(1, static_cast<char>('0' + d)); };
  const auto add = [&](int d, const Fractions& rest) {
    if (!rest.none()) out.alts.push_back(digit(d) + rest.Regex());
  };
  if (l1 == h1) {
    add(l1, Between(lo_rest, lo_exclusive, &hi_rest, hi_exclusive));
  } else if (l1 < h1) {
    add(l1, Between(lo_rest, lo_exclusive, nullptr, false));  // first digit l1: rest >= lo's
    if (l1 + 1 <= std::min(h1 - 1, 9)) {                       // digits between: any rest
      out.alts.push_back("[" + digit(l1 + 1) + "-" + digit(std::min(h1 - 1, 9)) + "]\\d*");
    }
    if (h1 <= 9) add(h1, Between("", false, &hi_rest, hi_exclusive));  // rest <= hi's
  }
  return out;
}

// A magnitude bound: whole.fraction (fraction digits without trailing zeros).
struct Magnitude {
  int64_t whole = 0;
  std::string fraction;
  bool exclusive = false;
};

// The text after the integer part (".digits" or nothing) for fractions `f`; none if f has none.
std::optional<std::string> FractionText(const Fractions& f) {
  if (f.none()) return std::nullopt;
  const std::string dotted = f.alts.empty() ? "" : "\\." + Join(f.alts);
  return f.empty && !dotted.empty() ? "(?:" + dotted + ")?" : dotted;
}

// Decimal magnitudes m = n.f from c to d (d null: no upper bound), c >= 0.
std::string DecimalMagnitudes(const Magnitude& c, const Magnitude* d) {
  std::vector<std::string> parts;
  const auto with = [&](int64_t n, const Fractions& f) {
    if (const auto text = FractionText(f)) parts.push_back(Magnitudes(n, n) + *text);
  };
  if (d != nullptr && c.whole == d->whole) {
    with(c.whole, Between(c.fraction, c.exclusive, &d->fraction, d->exclusive));
    return Join(parts);
  }
  if (d != nullptr && c.whole > d->whole) return "";
  with(c.whole, Between(c.fraction, c.exclusive, nullptr, false));  // n = c's: fraction >= c's
  // Integer parts strictly between: any fraction.
  const std::string between = Magnitudes(c.whole + 1, d == nullptr ? kNoLimit : d->whole - 1);
  if (!between.empty()) parts.push_back(between + "(?:\\.\\d+)?");
  if (d != nullptr) with(d->whole, Between("", false, &d->fraction, d->exclusive));
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

std::string NumberRangePattern(const DecimalBound& lo, const DecimalBound& hi) {
  const auto magnitude = [](const DecimalBound& b) {
    return Magnitude{b.whole, b.fraction, b.exclusive};
  };
  const auto zero = [](const DecimalBound& b) { return b.whole == 0 && b.fraction.empty(); };
  std::vector<std::string> parts;
  // x >= 0, written without a sign: from lo (or 0) to hi.
  if (!hi.set || !hi.negative || zero(hi)) {
    if (!(hi.set && zero(hi) && hi.exclusive)) {
      const Magnitude from = lo.set && !lo.negative ? magnitude(lo) : Magnitude{};
      const Magnitude to = magnitude(hi);
      parts.push_back(DecimalMagnitudes(from, hi.set ? &to : nullptr));
    }
  }
  // x < 0, written with '-' (never -0): magnitudes above -hi (or above 0) up to -lo.
  if (!lo.set || (lo.negative && !zero(lo))) {
    const Magnitude from = hi.set && hi.negative && !zero(hi) ? magnitude(hi)
                                                              : Magnitude{0, "", true};
    const Magnitude to = magnitude(lo);
    const std::string m = DecimalMagnitudes(from, lo.set ? &to : nullptr);
    if (!m.empty()) parts.push_back("-" + m);
  }
  return Join(parts);
}

StatusOr<DecimalBound> DecimalBound::FromDouble(double v, bool exclusive) {
  if (!(std::fabs(v) <= static_cast<double>(kMaxRangeBound))) {
    return InvalidArgument("a bound beyond ±1e15");
  }
  // The shortest fixed-point text that reads back as v: 0.1 is "0.1", not 0.1000000000000000055.
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, std::fabs(v),
                                       std::chars_format::fixed);
  if (ec != std::errc()) return InvalidArgument("a bound with too many digits");
  const std::string digits(text, end);
  const size_t dot = digits.find('.');
  DecimalBound b;
  b.set = true;
  b.negative = v < 0;
  b.whole = std::stoll(digits.substr(0, dot));
  b.fraction = dot == std::string::npos ? "" : digits.substr(dot + 1);
  while (!b.fraction.empty() && b.fraction.back() == '0') b.fraction.pop_back();
  if (b.fraction.size() > kMaxFractionDigits) {
    return InvalidArgument("a bound with more than " + std::to_string(kMaxFractionDigits) +
                           " fraction digits");
  }
  b.exclusive = exclusive;
  return b;
}

}  // namespace cpm::structured
