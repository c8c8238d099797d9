// UTF-8 code point helpers with Python str semantics (see text_util.h).
#include "chat/text_util.h"

#include <algorithm>
#include <cstdlib>

#include <utf8proc.h>

namespace cpm::jinja {

char32_t DecodeAt(std::string_view s, size_t i, size_t* len) {
  utf8proc_int32_t cp = -1;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0 || cp < 0) {
    *len = 1;
    return static_cast<unsigned char>(s[i]);
  }
  *len = static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

void AppendUtf8(std::string* out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out->append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::vector<std::string> SplitCodePoints(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    DecodeAt(s, i, &len);
    out.emplace_back(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    DecodeAt(s, i, &len);
    i += len;
    ++n;
  }
  return n;
}

bool IsPyWhitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0x1c: case 0x1d: case 0x1e:
    case 0x1f: case 0x20: case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202f: case 0x205f: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right) {
  std::vector<std::string> cps = SplitCodePoints(s);
  std::vector<std::string> set;
  if (chars) set = SplitCodePoints(*chars);
  auto strip_this = [&](const std::string& cp) {
    if (!chars) {
      size_t len;
      return IsPyWhitespace(DecodeAt(cp, 0, &len));
    }
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip_this(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_this(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}

namespace {

template <typename Fn>
std::string MapCodePoints(std::string_view s, Fn fn) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t cp = DecodeAt(s, i, &len);
    AppendUtf8(&out, fn(cp));
    i += len;
  }
  return out;
}

bool IsCased(char32_t cp) {
  utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t Up(char32_t cp) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
char32_t Low(char32_t cp) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
char32_t Title(char32_t cp) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

}  // namespace

std::string PyUpper(std::string_view s) { return MapCodePoints(s, Up); }
std::string PyLower(std::string_view s) { return MapCodePoints(s, Low); }

std::string PyTitle(std::string_view s) {
  // Python: a cased character after a cased character is lowered, otherwise title-cased.
  bool prev_cased = false;
  return MapCodePoints(s, [&](char32_t cp) {
    char32_t out = prev_cased ? Low(cp) : Title(cp);
    prev_cased = IsCased(cp);
    return out;
  });
}

std::string PyCapitalize(std::string_view s) {
  bool first = true;
  return MapCodePoints(s, [&](char32_t cp) {
    char32_t out = first ? Title(cp) : Low(cp);
    first = false;
    return out;
  });
}

std::string PySwapCase(std::string_view s) {
  return MapCodePoints(s, [](char32_t cp) {
    utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    if (cat == UTF8PROC_CATEGORY_LU) return Low(cp);
    if (cat == UTF8PROC_CATEGORY_LL) return Up(cp);
    return cp;
  });
}

std::string PyCasefold(std::string_view s) {
  utf8proc_uint8_t* folded = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &folded, UTF8PROC_CASEFOLD);
  if (n < 0) return PyLower(s);  // invalid UTF-8: fall back to the simple mapping
  std::string out(reinterpret_cast<char*>(folded), static_cast<size_t>(n));
  std::free(folded);
  return out;
}

namespace {

// Counts the cased code points of `s` by category: [0] lower, [1] upper, [2] title.
void CountCases(std::string_view s, int counts[3]) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(DecodeAt(s, i, &len)));
    if (cat == UTF8PROC_CATEGORY_LL) ++counts[0];
    if (cat == UTF8PROC_CATEGORY_LU) ++counts[1];
    if (cat == UTF8PROC_CATEGORY_LT) ++counts[2];
    i += len;
  }
}

}  // namespace

bool PyIsLower(std::string_view s) {
  int c[3] = {0, 0, 0};
  CountCases(s, c);
  return c[0] > 0 && c[1] == 0 && c[2] == 0;
}

bool PyIsUpper(std::string_view s) {
  int c[3] = {0, 0, 0};
  CountCases(s, c);
  return c[1] > 0 && c[0] == 0 && c[2] == 0;
}

std::string PyJustify(std::string_view s, int64_t width, std::string_view fill, char align) {
  int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  int64_t pad = width - len;
  int64_t left = align == '<' ? 0 : align == '>' ? pad : pad / 2 + (pad & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = left; i < pad; ++i) out += fill;
  return out;
}

std::vector<size_t> SliceIndices(int64_t len, std::optional<int64_t> start,
                                 std::optional<int64_t> stop, int64_t step) {
  // CPython's PySlice_AdjustIndices.
  std::vector<size_t> out;
  if (step == 0) return out;
  int64_t lo, hi;
  if (step > 0) {
    lo = start.value_or(0);
    hi = stop.value_or(len);
    if (lo < 0) lo = std::max<int64_t>(0, lo + len);
    if (hi < 0) hi = std::max<int64_t>(0, hi + len);
    lo = std::min(lo, len);
    hi = std::min(hi, len);
    for (int64_t i = lo; i < hi; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    lo = start.value_or(len - 1);
    hi = stop.has_value() ? *stop : -1 - len;  // "before the first element"
    if (start && lo < 0) lo += len;
    if (stop && hi < 0) hi = std::max<int64_t>(-1, hi + len);
    if (!stop) hi = -1;
    lo = std::min(lo, len - 1);
    for (int64_t i = lo; i > hi && i >= 0; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace cpm::jinja
