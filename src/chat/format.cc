// Python's two string-formatting languages: printf-style `fmt % args` (also the `format`
// filter, jinja2's do_format) and the format-spec mini-language of str.format. Both reduce to
// one FormatSpec and the same number formatting, as CPython's formatter does.
#include <cinttypes>
#include <cmath>
#include <cstdio>

#include "chat/builtins.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

struct FormatSpec {
  std::string fill = " ";
  char align = 0;  // '<' '>' '^' '=', or 0 for the type's default
  char sign = '-';
  bool alternate = false;
  int64_t width = -1;
  char grouping = 0;  // ',' or '_'
  int64_t precision = -1;
  char type = 0;
};

// Widths past the interpreter's output limit would only build a string the render rejects.
constexpr int64_t kMaxWidth = 16 << 20;

Status CheckWidth(const FormatSpec& spec) {
  if (spec.width > kMaxWidth || spec.precision > kMaxWidth) return ResourceExhausted("format width or precision too large");
  return OkStatus();
}

std::string Pad(std::string body, const FormatSpec& spec, char default_align, size_t sign_len) {
  int64_t len = static_cast<int64_t>(CodePointCount(body));
  if (spec.width <= len) return body;
  size_t missing = static_cast<size_t>(spec.width - len);
  std::string pad;
  for (size_t i = 0; i < missing; ++i) pad += spec.fill;
  char align = spec.align ? spec.align : default_align;
  if (align == '<') return body + pad;
  if (align == '=') return body.substr(0, sign_len) + pad + body.substr(sign_len);
  if (align == '^') {
    std::string left, right;
    for (size_t i = 0; i < missing / 2; ++i) left += spec.fill;
    for (size_t i = missing / 2; i < missing; ++i) right += spec.fill;
    return left + body + right;
  }
  return pad + body;
}

// Inserts `sep` every `every` digits from the right of the leading run of digits.
std::string Group(const std::string& digits, char sep, size_t every) {
  size_t end = digits.find_first_not_of("0123456789abcdefABCDEF");
  if (end == std::string::npos) end = digits.size();
  std::string out;
  for (size_t i = 0; i < end; ++i) {
    if (i && (end - i) % every == 0) out += sep;
    out += digits[i];
  }
  return out + digits.substr(end);
}

std::string CFormat(const char* conv, bool alternate, int64_t precision, double x) {
  char fmt[8] = "%";
  size_t n = 1;
  if (alternate) fmt[n++] = '#';
  fmt[n++] = '.';
  fmt[n++] = '*';
  fmt[n++] = conv[0];
  fmt[n] = 0;
  char buf[512];
  std::snprintf(buf, sizeof(buf), fmt, static_cast<int>(std::min<int64_t>(precision, 300)), x);
  return buf;
}

// The format spec's no-type float: 'g' with at least one digit after the point, switching to
// exponent notation at exp >= precision - 1 (CPython's 'r' mode when no precision is given).
std::string GeneralNoType(double x, int64_t precision) {
  if (precision < 0) return FormatPythonFloat(x);
  if (precision == 0) precision = 1;
  std::string e = CFormat("e", false, precision - 1, x);
  int exp = std::atoi(e.c_str() + e.find('e') + 1);
  if (exp >= -4 && exp < precision - 1) {
    std::string f = CFormat("f", false, precision - 1 - exp, x);
    if (f.find('.') != std::string::npos) {
      while (f.back() == '0') f.pop_back();
      if (f.back() == '.') f += '0';
    } else {
      f += ".0";
    }
    return f;
  }
  std::string mant = e.substr(0, e.find('e'));
  if (mant.find('.') != std::string::npos) {
    while (mant.back() == '0') mant.pop_back();
    if (mant.back() == '.') mant.pop_back();
  }
  return mant + e.substr(e.find('e'));
}

// Formats a float's magnitude (no sign) for the types e E f F g G % and none.
std::string FloatBody(double x, const FormatSpec& spec) {
  char t = spec.type;
  bool upper = t == 'E' || t == 'F' || t == 'G';
  if (std::isinf(x)) return upper ? "INF" : "inf";
  if (std::isnan(x)) return upper ? "NAN" : "nan";
  int64_t p = spec.precision < 0 ? 6 : spec.precision;
  if (t == 0) return GeneralNoType(x, spec.precision);
  if (t == '%') return CFormat("f", spec.alternate, p, x * 100) + "%";
  if (t == 'n') t = 'g';
  std::string conv(1, t);
  return CFormat(conv.c_str(), spec.alternate, p, x);
}

std::string IntBody(uint64_t magnitude, const FormatSpec& spec) {
  char buf[80];
  switch (spec.type) {
    case 'x': std::snprintf(buf, sizeof(buf), "%" PRIx64, magnitude); return (spec.alternate ? "0x" : "") + std::string(buf);
    case 'X': std::snprintf(buf, sizeof(buf), "%" PRIX64, magnitude); return (spec.alternate ? "0X" : "") + std::string(buf);
    case 'o': std::snprintf(buf, sizeof(buf), "%" PRIo64, magnitude); return (spec.alternate ? "0o" : "") + std::string(buf);
    case 'b': {
      std::string bits;
      for (uint64_t m = magnitude; m; m >>= 1) bits.insert(bits.begin(), static_cast<char>('0' + (m & 1)));
      return (spec.alternate ? "0b" : "") + (bits.empty() ? "0" : bits);
    }
    default: std::snprintf(buf, sizeof(buf), "%" PRIu64, magnitude); return buf;
  }
}

// Sign, digits, grouping and padding of a number already known to fit `spec.type`.
std::string FormatNumber(const Value& v, const FormatSpec& spec) {
  bool as_float = v.IsFloat() || (spec.type && std::string("eEfFgG%").find(spec.type) != std::string::npos);
  bool negative;
  std::string body;
  if (as_float) {
    double x = v.AsDouble();
    negative = std::signbit(x) && !std::isnan(x);
    body = FloatBody(std::fabs(x), spec);
  } else {
    int64_t i = v.AsInt();
    negative = i < 0;
    body = IntBody(negative ? 0 - static_cast<uint64_t>(i) : static_cast<uint64_t>(i), spec);
  }
  if (spec.grouping) {
    size_t prefix = (body.size() > 1 && body[0] == '0' && std::isalpha(static_cast<unsigned char>(body[1]))) ? 2 : 0;
    bool hex_like = spec.type == 'x' || spec.type == 'X' || spec.type == 'o' || spec.type == 'b';
    body = body.substr(0, prefix) + Group(body.substr(prefix), spec.grouping, hex_like ? 4 : 3);
  }
  std::string sign = negative ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
  return Pad(sign + body, spec, '>', sign.size());
}

Status TypeMismatch(char type, const Value& v) {
  return InvalidArgument(std::string("Unknown format code '") + type + "' for object of type '" + v.TypeName() + "'");
}

std::string Truncate(const std::string& s, int64_t precision) {
  if (precision < 0) return s;
  std::vector<std::string> cps = SplitCodePoints(s);
  std::string out;
  for (size_t i = 0; i < cps.size() && static_cast<int64_t>(i) < precision; ++i) out += cps[i];
  return out;
}

// format(value, spec) for one value, after the spec has been parsed.
StatusOr<std::string> ApplySpec(const Value& v, const FormatSpec& spec, bool spec_empty) {
  if (spec_empty) return v.ToStr();
  if (v.IsString()) {
    if (spec.type && spec.type != 's') return TypeMismatch(spec.type, v);
    if (spec.align == '=') return InvalidArgument("'=' alignment not allowed in string format specifier");
    if (spec.sign != '-') return InvalidArgument("Sign not allowed in string format specifier");
    return Pad(Truncate(v.AsString(), spec.precision), spec, '<', 0);
  }
  if (!v.IsNumber()) {
    return InvalidArgument("unsupported format string passed to " + v.TypeName() + ".__format__");
  }
  const std::string kFloatTypes = "eEfFgGn%", kIntTypes = "bcdoxXn";
  char t = spec.type;
  bool ok = t == 0 || kFloatTypes.find(t) != std::string::npos ||
            (!v.IsFloat() && kIntTypes.find(t) != std::string::npos);
  if (!ok) return TypeMismatch(t, v);
  if (t == 'c') {
    std::string c;
    AppendUtf8(&c, static_cast<char32_t>(v.AsInt()));
    return Pad(c, spec, '>', 0);
  }
  return FormatNumber(v, spec);
}

StatusOr<FormatSpec> ParseSpec(const std::string& s) {
  FormatSpec spec;
  size_t i = 0;
  size_t first_len = 0;
  if (!s.empty()) DecodeAt(s, 0, &first_len);
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (first_len && first_len < s.size() && is_align(s[first_len])) {
    spec.fill = s.substr(0, first_len);
    spec.align = s[first_len];
    i = first_len + 1;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = s[0];
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = s[i++];
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (!spec.align) {
      spec.fill = "0";
      spec.align = '=';
    }
    ++i;
  }
  auto digits = [&](int64_t* out) {
    size_t start = i;
    int64_t n = 0;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && n < 100000000) n = n * 10 + (s[i++] - '0');
    if (i > start) *out = n;
    return i > start;
  };
  digits(&spec.width);
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = s[i++];
  if (i < s.size() && s[i] == '.') {
    ++i;
    if (!digits(&spec.precision)) return InvalidArgument("Format specifier missing precision");
  }
  if (i < s.size()) spec.type = s[i++];
  if (i < s.size()) return InvalidArgument("Invalid format specifier '" + s + "'");
  return spec;
}

// printf-style: the value of one conversion.
StatusOr<std::string> Convert(const Value& v, FormatSpec spec, char conv) {
  switch (conv) {
    case 's': case 'r': case 'a': {
      std::string s = Truncate(conv == 's' ? v.ToStr() : v.Repr(), spec.precision);
      spec.fill = " ";
      if (spec.align == '=') spec.align = 0;
      return Pad(s, spec, '>', 0);
    }
    case 'c': {
      std::string c;
      if (v.IsString() && CodePointCount(v.AsString()) == 1) {
        c = v.AsString();
      } else if (v.IsInt() || v.IsBool()) {
        if (v.AsInt() < 0 || v.AsInt() > 0x10FFFF) {
          return InvalidArgument("%c arg not in range(0x110000)");  // Python's OverflowError
        }
        AppendUtf8(&c, static_cast<char32_t>(v.AsInt()));
      } else {
        return InvalidArgument("%c requires int or char");
      }
      spec.fill = " ";
      if (spec.align == '=') spec.align = 0;
      return Pad(c, spec, '>', 0);
    }
    case 'd': case 'i': case 'u':
      if (!v.IsNumber()) return InvalidArgument(std::string("%") + conv + " format: a real number is required, not " + v.TypeName());
      spec.type = 'd';
      if (v.IsFloat()) {
        double x = v.AsDouble();
        if (!std::isfinite(x)) return InvalidArgument(std::string("cannot convert float ") + (std::isnan(x) ? "NaN" : "infinity") + " to integer");
        return FormatNumber(Value::Int(static_cast<int64_t>(x)), spec);
      }
      return FormatNumber(v, spec);
    case 'x': case 'X': case 'o':
      if (!v.IsInt() && !v.IsBool()) return InvalidArgument(std::string("%") + conv + " format: an integer is required, not " + v.TypeName());
      spec.type = conv;
      return FormatNumber(v, spec);
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      if (!v.IsNumber()) return InvalidArgument("must be real number, not " + v.TypeName());
      spec.type = conv;
      return FormatNumber(Value::Float(v.AsDouble()), spec);
    default:
      return InvalidArgument("unsupported format character");
  }
}

}  // namespace

StatusOr<std::string> FormatWithSpec(const Value& value, const std::string& spec) {
  CPM_ASSIGN_OR_RETURN(FormatSpec parsed, ParseSpec(spec));
  CPM_RETURN_IF_ERROR(CheckWidth(parsed));
  return ApplySpec(value, parsed, spec.empty());
}

StatusOr<std::string> PercentFormat(const std::string& f, const Value& args) {
  // A tuple supplies the arguments in order; any other value is the single argument. A dict
  // (or list: anything with __getitem__ but str) also allows a format without conversions.
  ValueList single;
  const ValueList* positional = &single;
  if (args.IsTuple()) {
    positional = &args.AsList();
  } else {
    single.push_back(args);
  }
  bool mapping_ok = !args.IsTuple() && (args.IsDict() || args.IsList());
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    ++i;
    if (i >= f.size()) return InvalidArgument("incomplete format");
    const Value* value = nullptr;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string::npos) return InvalidArgument("incomplete format key");
      if (!args.IsDict()) return InvalidArgument("format requires a mapping");
      std::string key = f.substr(i + 1, close - i - 1);
      value = args.AsDict().Find(key);
      if (!value) return InvalidArgument("'" + key + "'");
      i = close + 1;
    }
    FormatSpec spec;
    bool zero = false;
    for (; i < f.size() && std::string("-+ #0").find(f[i]) != std::string::npos; ++i) {
      if (f[i] == '-') spec.align = '<';
      if (f[i] == '+') spec.sign = '+';
      if (f[i] == ' ' && spec.sign != '+') spec.sign = ' ';
      if (f[i] == '#') spec.alternate = true;
      if (f[i] == '0') zero = true;
    }
    if (zero && spec.align != '<') {
      spec.fill = "0";
      spec.align = '=';
    }
    auto number = [&](int64_t* out_n) -> Status {
      if (i < f.size() && f[i] == '*') {
        ++i;
        if (next >= positional->size()) return InvalidArgument("not enough arguments for format string");
        const Value& w = (*positional)[next++];
        if (!w.IsInt()) return InvalidArgument("* wants int");
        *out_n = w.AsInt();
        return OkStatus();
      }
      int64_t n = 0;
      size_t s = i;
      while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i])) && n < 100000000) n = n * 10 + (f[i++] - '0');
      if (i > s) *out_n = n;
      return OkStatus();
    };
    CPM_RETURN_IF_ERROR(number(&spec.width));
    if (spec.width < -1) {
      spec.align = '<';
      spec.width = -spec.width;
    }
    if (i < f.size() && f[i] == '.') {
      ++i;
      spec.precision = 0;
      CPM_RETURN_IF_ERROR(number(&spec.precision));
    }
    CPM_RETURN_IF_ERROR(CheckWidth(spec));
    while (i < f.size() && (f[i] == 'h' || f[i] == 'l' || f[i] == 'L')) ++i;
    if (i >= f.size()) return InvalidArgument("incomplete format");
    char conv = f[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (std::string("sracdiuxXoeEfFgG").find(conv) == std::string::npos) {
      size_t len;
      char32_t cp = DecodeAt(f, i, &len);
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%x", static_cast<unsigned>(cp));
      return InvalidArgument("unsupported format character '" + f.substr(i, len) + "' (0x" + hex +
                             ") at index " + std::to_string(CodePointCount(std::string_view(f).substr(0, i))));
    }
    if (!value) {
      if (next >= positional->size()) return InvalidArgument("not enough arguments for format string");
      value = &(*positional)[next++];
    }
    CPM_ASSIGN_OR_RETURN(std::string piece, Convert(*value, spec, conv));
    out += piece;
  }
  if (next < positional->size() && !mapping_ok) {
    return InvalidArgument("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace cpm::jinja
