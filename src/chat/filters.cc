// jinja2's builtin filters with its argument names and defaults, plus transformers' tojson
// (json.dumps with ensure_ascii=False; positional order ensure_ascii, indent, separators,
// sort_keys). Unknown filters are rejected when the template is parsed, as jinja2 does, except
// inside an if or a conditional expression (see CheckFilterAndTestNames).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>
#include <utility>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

using FilterFn = StatusOr<Value> (*)(Interpreter&, const Value&, const CallArgs&);

Value Arg(const CallArgs& a, size_t i, std::string_view name, Value dflt) {
  const Value* v = a.Get(i, name);
  return v ? *v : dflt;
}

StatusOr<Value> Trim(Interpreter&, const Value& v, const CallArgs& a) {
  Value chars = Arg(a, 0, "chars", Value::None());
  std::optional<std::string> set;
  if (chars.IsString()) set = chars.AsString();
  return Value::String(PyStrip(v.ToStr(), set, true, true));
}

StatusOr<Value> Length(Interpreter&, const Value& v, const CallArgs&) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return Value::Int(0);
    case Value::Kind::kString: return Value::Int(static_cast<int64_t>(CodePointCount(v.AsString())));
    case Value::Kind::kList: return Value::Int(static_cast<int64_t>(v.AsList().size()));
    case Value::Kind::kDict: return Value::Int(static_cast<int64_t>(v.AsDict().items.size()));
    default: return InvalidArgument("object of type '" + v.TypeName() + "' has no len()");
  }
}

// Bytes the indentation adds to `compact` (a one-line dump with ", " and ": " separators) at
// `width` bytes per level: a line break and depth × width bytes after each opening bracket of a
// non-empty container, each item separator, and before each closing one (json.dumps' layout).
size_t IndentationBytes(const std::string& compact, size_t width) {
  size_t bytes = 0, depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    const bool empty = i + 1 < compact.size() && (compact[i + 1] == ']' || compact[i + 1] == '}');
    if (c == '"') in_string = true;
    else if ((c == '[' || c == '{') && !empty) bytes += 1 + ++depth * width;
    else if (c == '[' || c == '{') ++i;  // an empty container: no break
    else if (c == ']' || c == '}') bytes += 1 + --depth * width;
    else if (c == ',') bytes += 1 + depth * width;
  }
  return bytes;
}

StatusOr<Value> ToJson(Interpreter& in, const Value& v, const CallArgs& a) {
  JsonDumpOptions o;
  o.ensure_ascii = Arg(a, 0, "ensure_ascii", Value::Bool(false)).Truthy();
  Value indent = Arg(a, 1, "indent", Value::None());
  if (indent.IsString()) {
    o.indent = indent.AsString();
  } else if (indent.IsInt() || indent.IsBool()) {
    const size_t width = static_cast<size_t>(std::max<int64_t>(0, indent.AsInt()));
    CPM_RETURN_IF_ERROR(in.CheckSize(width));
    o.indent = std::string(width, ' ');
  } else if (!indent.IsNone()) {
    return InvalidArgument("tojson: indent must be an int or a string");
  }
  if (o.indent && !o.indent->empty()) {
    // The render's size limit before the indented text exists (a wide indent multiplies it).
    CPM_ASSIGN_OR_RETURN(const std::string compact, JsonDumps(v, JsonDumpOptions()));
    CPM_RETURN_IF_ERROR(in.CheckSize(compact.size() + IndentationBytes(compact, o.indent->size())));
  }
  if (o.indent) o.item_separator = ",";
  Value seps = Arg(a, 2, "separators", Value::None());
  if (seps.IsList() && seps.AsList().size() == 2 && seps.AsList()[0].IsString() &&
      seps.AsList()[1].IsString()) {
    o.item_separator = seps.AsList()[0].AsString();
    o.key_separator = seps.AsList()[1].AsString();
  } else if (!seps.IsNone()) {
    return InvalidArgument("tojson: separators must be a pair of strings");
  }
  o.sort_keys = Arg(a, 3, "sort_keys", Value::Bool(false)).Truthy();
  CPM_ASSIGN_OR_RETURN(std::string s, JsonDumps(v, o));
  return Value::String(std::move(s));
}

StatusOr<Value> Items(Interpreter&, const Value& v, const CallArgs&) {
  if (v.IsUndefined()) return Value::List({});
  if (!v.IsDict()) return InvalidArgument("Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.AsDict().items) out.push_back(Value::List({k, val}, true));
  return Value::List(std::move(out));
}

// Applies `attribute` (dotted path) when given, for join/map/sort/unique/min/max/sum.
StatusOr<Value> Attr(Interpreter& in, const Value& item, const Value& attribute) {
  if (attribute.IsNone() || attribute.IsUndefined()) return item;
  if (attribute.IsInt()) return in.GetItem(item, attribute);
  return in.GetAttrPath(item, attribute.ToStr());
}

StatusOr<Value> Join(Interpreter& in, const Value& v, const CallArgs& a) {
  std::string sep = Arg(a, 0, "d", Value::String("")).ToStr();
  Value attribute = Arg(a, 1, "attribute", Value::None());
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    CPM_ASSIGN_OR_RETURN(Value x, Attr(in, items[i], attribute));
    out += x.ToStr();
    CPM_RETURN_IF_ERROR(in.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

StatusOr<Value> Default(Interpreter&, const Value& v, const CallArgs& a) {
  Value d = Arg(a, 0, "default_value", Value::String(""));
  bool boolean = Arg(a, 1, "boolean", Value::Bool(false)).Truthy();
  if (v.IsUndefined() || (boolean && !v.Truthy())) return d;
  return v;
}

StatusOr<Value> Upper(Interpreter&, const Value& v, const CallArgs&) { return Value::String(PyUpper(v.ToStr())); }
StatusOr<Value> Lower(Interpreter&, const Value& v, const CallArgs&) { return Value::String(PyLower(v.ToStr())); }
StatusOr<Value> Capitalize(Interpreter&, const Value& v, const CallArgs&) { return Value::String(PyCapitalize(v.ToStr())); }

StatusOr<Value> Title(Interpreter&, const Value& v, const CallArgs&) {
  // jinja2 splits before runs of [-\s({\[<] and upper-cases each piece's first character.
  std::vector<std::string> cps = SplitCodePoints(v.ToStr());
  auto is_sep = [](const std::string& cp) {
    size_t len;
    return (cp.size() == 1 && std::string("-({[<").find(cp[0]) != std::string::npos) ||
           IsPyWhitespace(DecodeAt(cp, 0, &len));
  };
  std::string out;
  bool word_start = true;
  for (const std::string& cp : cps) {
    if (is_sep(cp)) {
      out += cp;
      word_start = true;
    } else {
      out += word_start ? PyUpper(cp) : PyLower(cp);
      word_start = false;
    }
  }
  return Value::String(std::move(out));
}

StatusOr<Value> Replace(Interpreter& in, const Value& v, const CallArgs& a) {
  std::string s = v.ToStr();
  std::string old_s = Arg(a, 0, "old", Value::String("")).ToStr();
  std::string new_s = Arg(a, 1, "new", Value::String("")).ToStr();
  Value count = Arg(a, 2, "count", Value::None());
  int64_t max = count.IsNone() ? -1 : count.AsInt();
  std::string out;
  if (old_s.empty()) {
    // Python inserts `new` between code points (and at both ends).
    std::vector<std::string> cps = SplitCodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (max < 0 || done < max) {
        out += new_s;
        ++done;
      }
      if (i < cps.size()) out += cps[i];
    }
  } else {
    size_t pos = 0;
    int64_t done = 0;
    while (max < 0 || done < max) {
      size_t hit = s.find(old_s, pos);
      if (hit == std::string::npos) break;
      out.append(s, pos, hit - pos);
      out += new_s;
      pos = hit + old_s.size();
      ++done;
      CPM_RETURN_IF_ERROR(in.CheckSize(out.size()));
    }
    out.append(s, pos, std::string::npos);
  }
  return Value::String(std::move(out));
}

StatusOr<Value> First(Interpreter& in, const Value& v, const CallArgs&) {
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

StatusOr<Value> Last(Interpreter& in, const Value& v, const CallArgs&) {
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

StatusOr<Value> ToList(Interpreter& in, const Value& v, const CallArgs&) {
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  return Value::List(std::move(items));
}

StatusOr<Value> ToString(Interpreter&, const Value& v, const CallArgs&) { return Value::String(v.ToStr()); }

// Python's int(s, base) for a stripped string: sign, a 0x/0o/0b prefix when base is 0 or
// matches it, single underscores between digits; base 0 rejects other leading zeros.
std::optional<int64_t> PyIntFromString(const std::string& s, int64_t base) {
  if (base != 0 && (base < 2 || base > 36)) return std::nullopt;
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  bool prefixed = false;
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[i + 1])));
    int64_t prefix_base = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefix_base && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      i += 2;
      prefixed = true;
    }
  }
  bool decimal_base0 = base == 0;
  if (base == 0) base = 10;
  uint64_t value = 0;
  bool any = false, leading_nonzero = false, last_underscore = prefixed;  // "0x_1" is allowed
  if (prefixed && i < s.size() && s[i] == '_') ++i, last_underscore = true;
  for (; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (!any || last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    int d = std::isdigit(static_cast<unsigned char>(s[i])) ? s[i] - '0'
            : std::isalpha(static_cast<unsigned char>(s[i])) ? std::tolower(static_cast<unsigned char>(s[i])) - 'a' + 10
                                                             : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, static_cast<uint64_t>(base), &value) ||
        __builtin_add_overflow(value, static_cast<uint64_t>(d), &value)) {
      return std::nullopt;
    }
    leading_nonzero = leading_nonzero || (!any && d != 0);
    any = true;
    last_underscore = false;
  }
  if (!any || last_underscore) return std::nullopt;
  if (decimal_base0 && !prefixed && !leading_nonzero && value != 0) return std::nullopt;  // "010"
  if (value > static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0)) return std::nullopt;
  return negative ? static_cast<int64_t>(0 - value) : static_cast<int64_t>(value);
}

StatusOr<Value> ToInt(Interpreter&, const Value& v, const CallArgs& a) {
  Value dflt = Arg(a, 0, "default", Value::Int(0));
  if (v.IsInt() || v.IsBool()) return Value::Int(v.AsInt());
  if (v.IsFloat()) {
    if (!std::isfinite(v.AsDouble())) return dflt;
    return Value::Int(static_cast<int64_t>(v.AsDouble()));
  }
  if (v.IsString()) {
    std::string s = PyStrip(v.AsString(), std::nullopt, true, true);
    int64_t base = Arg(a, 1, "base", Value::Int(10)).AsInt();
    if (std::optional<int64_t> i = PyIntFromString(s, base)) return Value::Int(*i);
    // float() accepts the same single underscores between digits.
    std::string no_underscores;
    for (size_t k = 0; k < s.size(); ++k) {
      bool between_digits = k > 0 && k + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[k - 1])) &&
                            std::isdigit(static_cast<unsigned char>(s[k + 1]));
      if (s[k] == '_' && !between_digits) return dflt;
      if (s[k] != '_') no_underscores += s[k];
    }
    s = no_underscores;
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value::Int(static_cast<int64_t>(d));
    } catch (...) {
    }
  }
  return dflt;
}

StatusOr<Value> ToFloat(Interpreter&, const Value& v, const CallArgs& a) {
  Value dflt = Arg(a, 0, "default", Value::Float(0.0));
  if (v.IsNumber()) return Value::Float(v.AsDouble());
  if (v.IsString()) {
    std::string s = PyStrip(v.AsString(), std::nullopt, true, true);
    try {
      size_t used = 0;
      double d = std::stod(s, &used);
      if (used == s.size()) return Value::Float(d);
    } catch (...) {
    }
  }
  return dflt;
}

StatusOr<Value> Abs(Interpreter&, const Value& v, const CallArgs&) {
  if (v.IsFloat()) return Value::Float(std::fabs(v.AsDouble()));
  if (v.IsNumber()) return Value::Int(std::llabs(v.AsInt()));
  return InvalidArgument("bad operand type for abs(): '" + v.TypeName() + "'");
}

// Python's round(x, -digits): to a multiple of 10**digits, ties to even; an int stays an int.
Value RoundToTens(const Value& v, int64_t digits) {
  if (v.IsFloat()) {
    // Beyond a double's range every finite value rounds to a signed zero (Python's round).
    if (digits > 308) return Value::Float(std::copysign(0.0, v.AsDouble()));
    double scale = std::pow(10.0, static_cast<double>(digits));
    return Value::Float(std::nearbyint(v.AsDouble() / scale) * scale);
  }
  if (digits > 18) return Value::Int(0);
  int64_t m = 1;
  for (int64_t i = 0; i < digits; ++i) m *= 10;
  int64_t a = v.AsInt();
  int64_t r = ((a % m) + m) % m;  // floor modulo
  int64_t down = a - r;
  bool up = r > m - r || (r == m - r && ((down / m) % 2 != 0));
  return Value::Int(up ? down + m : down);
}

StatusOr<Value> Round(Interpreter&, const Value& v, const CallArgs& a) {
  int64_t precision = Arg(a, 0, "precision", Value::Int(0)).AsInt();
  std::string method = Arg(a, 1, "method", Value::String("common")).ToStr();
  if (!v.IsNumber()) return InvalidArgument("round: expected a number, got " + v.TypeName());
  if (method != "common" && method != "ceil" && method != "floor") {
    return InvalidArgument("method must be common, ceil or floor");
  }
  if (method == "common" && precision < 0) return RoundToTens(v, -precision);
  if (method == "common") {
    if (!v.IsFloat()) return Value::Int(v.AsInt());
    // Python rounds the exact binary value half-to-even, which is what printf does too.
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)), v.AsDouble());
    return Value::Float(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.AsDouble() * scale;
  x = method == "ceil" ? std::ceil(x) : std::floor(x);
  const double r = x / scale;
  // 10 ** precision beyond a double's range: Python's ZeroDivisionError or OverflowError.
  if (!std::isfinite(r) && std::isfinite(v.AsDouble())) {
    return InvalidArgument("round: precision " + std::to_string(precision) + " out of range");
  }
  return Value::Float(r);
}

// Sort/unique key: attribute first, then lower-cased strings unless case_sensitive.
StatusOr<Value> SortKey(Interpreter& in, const Value& item, const Value& attribute, bool case_sensitive) {
  CPM_ASSIGN_OR_RETURN(Value k, Attr(in, item, attribute));
  if (!case_sensitive && k.IsString()) return Value::String(PyLower(k.AsString()));
  return k;
}

// Python's sorted(key=..., reverse=...): stable, and reverse keeps equal items in order.
Status StableSortByKey(std::vector<std::pair<Value, Value>>* keyed, bool reverse) {
  Status error;
  std::stable_sort(keyed->begin(), keyed->end(), [&](const auto& x, const auto& y) {
    StatusOr<bool> lt = reverse ? LessThan(y.first, x.first) : LessThan(x.first, y.first);
    if (!lt.ok()) {
      error = lt.status();
      return false;
    }
    return *lt;
  });
  return error;
}

StatusOr<Value> Sort(Interpreter& in, const Value& v, const CallArgs& a) {
  bool reverse = Arg(a, 0, "reverse", Value::Bool(false)).Truthy();
  bool case_sensitive = Arg(a, 1, "case_sensitive", Value::Bool(false)).Truthy();
  Value attribute = Arg(a, 2, "attribute", Value::None());
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    CPM_ASSIGN_OR_RETURN(Value k, SortKey(in, item, attribute, case_sensitive));
    keyed.emplace_back(std::move(k), std::move(item));
  }
  CPM_RETURN_IF_ERROR(StableSortByKey(&keyed, reverse));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

StatusOr<Value> Unique(Interpreter& in, const Value& v, const CallArgs& a) {
  bool case_sensitive = Arg(a, 0, "case_sensitive", Value::Bool(false)).Truthy();
  Value attribute = Arg(a, 1, "attribute", Value::None());
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  ValueList seen, out;
  for (Value& item : items) {
    CPM_ASSIGN_OR_RETURN(Value k, SortKey(in, item, attribute, case_sensitive));
    bool dup = false;
    for (const Value& s : seen) dup = dup || Equals(s, k);
    if (dup) continue;
    seen.push_back(std::move(k));
    out.push_back(std::move(item));
  }
  return Value::List(std::move(out));
}

StatusOr<Value> MinMax(Interpreter& in, const Value& v, const CallArgs& a, bool want_max) {
  bool case_sensitive = Arg(a, 0, "case_sensitive", Value::Bool(false)).Truthy();
  Value attribute = Arg(a, 1, "attribute", Value::None());
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  CPM_ASSIGN_OR_RETURN(Value best_key, SortKey(in, items[0], attribute, case_sensitive));
  for (size_t i = 1; i < items.size(); ++i) {
    CPM_ASSIGN_OR_RETURN(Value k, SortKey(in, items[i], attribute, case_sensitive));
    CPM_ASSIGN_OR_RETURN(bool better, want_max ? LessThan(best_key, k) : LessThan(k, best_key));
    if (better) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}
StatusOr<Value> Min(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, false); }
StatusOr<Value> Max(Interpreter& in, const Value& v, const CallArgs& a) { return MinMax(in, v, a, true); }

StatusOr<Value> Sum(Interpreter& in, const Value& v, const CallArgs& a) {
  Value attribute = Arg(a, 0, "attribute", Value::None());
  Value total = Arg(a, 1, "start", Value::Int(0));
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  for (const Value& item : items) {
    CPM_ASSIGN_OR_RETURN(Value x, Attr(in, item, attribute));
    CPM_ASSIGN_OR_RETURN(total, BinaryOp(in, "+", total, x));
  }
  return total;
}

StatusOr<Value> Reverse(Interpreter& in, const Value& v, const CallArgs&) {
  if (v.IsString()) {
    std::vector<std::string> cps = SplitCodePoints(v.AsString());
    std::string out;
    for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
    return Value::String(std::move(out));
  }
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

StatusOr<Value> Safe(Interpreter&, const Value& v, const CallArgs&) {
  // Markup(value) is a str subclass; with autoescape off only the str conversion shows.
  return Value::String(v.ToStr());
}

StatusOr<Value> Indent(Interpreter& in, const Value& v, const CallArgs& a) {
  Value width = Arg(a, 0, "width", Value::Int(4));
  bool first = Arg(a, 1, "first", Value::Bool(false)).Truthy();
  bool blank = Arg(a, 2, "blank", Value::Bool(false)).Truthy();
  const size_t spaces = width.IsString() ? 0 : static_cast<size_t>(std::max<int64_t>(0, width.AsInt()));
  CPM_RETURN_IF_ERROR(in.CheckSize(spaces));
  std::string indention = width.IsString() ? width.AsString() : std::string(spaces, ' ');
  std::string s = v.ToStr() + "\n";
  // Every line may take the indentation: the render's size limit before the text exists.
  CPM_RETURN_IF_ERROR(in.CheckSize(
      s.size() + indention.size() * static_cast<size_t>(std::count_if(s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }) + 1)));
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < s.size();) {
    size_t nl = s.find_first_of("\r\n", pos);
    lines.push_back(s.substr(pos, nl - pos));
    pos = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
  }
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + indention : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : indention + lines[i]);
  }
  if (first) rv = indention + rv;
  return Value::String(std::move(rv));
}

StatusOr<Value> AttrFilter(Interpreter& in, const Value& v, const CallArgs& a) {
  return in.GetAttr(v, Arg(a, 0, "name", Value::String("")).ToStr());
}

StatusOr<Value> Map(Interpreter& in, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  ValueList out;
  const Value* attribute = a.Get(static_cast<size_t>(-1), "attribute");
  if (attribute) {
    const Value* dflt = a.Get(static_cast<size_t>(-1), "default");
    for (const Value& item : items) {
      CPM_ASSIGN_OR_RETURN(Value x, Attr(in, item, *attribute));
      if (x.IsUndefined() && dflt) x = *dflt;
      out.push_back(std::move(x));
    }
    return Value::List(std::move(out));
  }
  if (a.positional.empty()) return Value::List(std::move(items));
  std::string name = a.positional[0].ToStr();
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items) {
    CPM_ASSIGN_OR_RETURN(Value x, ApplyFilter(in, name, item, rest));
    out.push_back(std::move(x));
  }
  return Value::List(std::move(out));
}

// select/reject/selectattr/rejectattr share one loop: optional attribute, then a test.
StatusOr<Value> SelectImpl(Interpreter& in, const Value& v, const CallArgs& a, bool by_attr, bool keep) {
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  size_t next = 0;
  std::string attribute;
  if (by_attr) {
    if (a.positional.empty()) return InvalidArgument("Missing parameter for attribute name");
    attribute = a.positional[0].ToStr();
    next = 1;
  }
  std::string test;
  CallArgs test_args;
  if (next < a.positional.size()) {
    test = a.positional[next].ToStr();
    test_args.positional.assign(a.positional.begin() + static_cast<long>(next) + 1, a.positional.end());
    test_args.keyword = a.keyword;
  }
  ValueList out;
  for (const Value& item : items) {
    Value x = item;
    if (by_attr) {
      CPM_ASSIGN_OR_RETURN(x, in.GetAttrPath(item, attribute));
    }
    bool pass;
    if (test.empty()) {
      pass = x.Truthy();
    } else {
      CPM_ASSIGN_OR_RETURN(pass, ApplyTest(in, test, x, test_args));
    }
    if (pass == keep) out.push_back(item);
  }
  return Value::List(std::move(out));
}
StatusOr<Value> Select(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, false, true); }
StatusOr<Value> Reject(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, false, false); }
StatusOr<Value> SelectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, true, true); }
StatusOr<Value> RejectAttr(Interpreter& in, const Value& v, const CallArgs& a) { return SelectImpl(in, v, a, true, false); }

StatusOr<Value> WordCount(Interpreter&, const Value& v, const CallArgs&) {
  // len(re.findall(r"\w+", s)): runs of letters, digits and underscore.
  int64_t words = 0;
  bool in_word = false;
  std::string s = v.ToStr();
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t cp = DecodeAt(s, i, &len);
    bool w = cp == '_' || (cp < 128 ? std::isalnum(static_cast<int>(cp)) != 0 : !IsPyWhitespace(cp));
    if (w && !in_word) ++words;
    in_word = w;
    i += len;
  }
  return Value::Int(words);
}


StatusOr<Value> DictSort(Interpreter&, const Value& v, const CallArgs& a) {
  bool case_sensitive = Arg(a, 0, "case_sensitive", Value::Bool(false)).Truthy();
  std::string by = Arg(a, 1, "by", Value::String("key")).ToStr();
  bool reverse = Arg(a, 2, "reverse", Value::Bool(false)).Truthy();
  if (by != "key" && by != "value") return InvalidArgument("You can only sort by either \"key\" or \"value\"");
  if (!v.IsDict()) return InvalidArgument("'" + v.TypeName() + "' object has no attribute 'items'");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [k, val] : v.AsDict().items) {
    Value key = by == "key" ? k : val;
    if (!case_sensitive && key.IsString()) key = Value::String(PyLower(key.AsString()));
    keyed.emplace_back(std::move(key), Value::List({k, val}, true));
  }
  CPM_RETURN_IF_ERROR(StableSortByKey(&keyed, reverse));
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::List(std::move(out));
}

StatusOr<Value> GroupBy(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* attribute = a.Get(0, "attribute");
  if (!attribute) return InvalidArgument("groupby() missing 1 required positional argument: 'attribute'");
  Value dflt = Arg(a, 1, "default", Value::None());
  bool case_sensitive = Arg(a, 2, "case_sensitive", Value::Bool(false)).Truthy();
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  // Sorted by the (lower-cased) key, then runs of equal keys; the grouper is the first
  // item's key in its own case, as jinja2 reports it.
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    CPM_ASSIGN_OR_RETURN(Value k, Attr(in, item, *attribute));
    if (k.IsUndefined() && !dflt.IsNone()) k = dflt;
    keyed.emplace_back(std::move(k), std::move(item));
  }
  std::vector<std::pair<Value, Value>> sorted;
  for (const auto& [k, item] : keyed) {
    sorted.emplace_back(!case_sensitive && k.IsString() ? Value::String(PyLower(k.AsString())) : k,
                        Value::List({k, item}));
  }
  CPM_RETURN_IF_ERROR(StableSortByKey(&sorted, false));
  ValueList out;
  for (size_t i = 0; i < sorted.size();) {
    Value grouper = sorted[i].second.AsList()[0];
    ValueList group;
    size_t j = i;
    for (; j < sorted.size() && Equals(sorted[j].first, sorted[i].first); ++j) {
      group.push_back(sorted[j].second.AsList()[1]);
    }
    out.push_back(Value::GroupTuple(std::move(grouper), std::move(group)));
    i = j;
  }
  return Value::List(std::move(out));
}

StatusOr<Value> Format(Interpreter&, const Value& v, const CallArgs& a) {
  // jinja2's do_format: `value % (kwargs or args)`.
  if (!a.positional.empty() && !a.keyword.empty()) {
    return InvalidArgument("can't handle positional and keyword arguments at the same time");
  }
  Value args = Value::List(a.positional, true);
  if (!a.keyword.empty()) {
    ValueDict d;
    for (const auto& [k, val] : a.keyword) d.Set(Value::String(k), val);
    args = Value::Dict(std::move(d));
  }
  CPM_ASSIGN_OR_RETURN(std::string out, PercentFormat(v.ToStr(), args));
  return Value::String(std::move(out));
}

StatusOr<Value> Escape(Interpreter&, const Value& v, const CallArgs&) {
  // markupsafe.escape with autoescape off: the five HTML-special characters.
  std::string out;
  for (char c : v.ToStr()) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value::String(std::move(out));
}

StatusOr<Value> Center(Interpreter& in, const Value& v, const CallArgs& a) {
  Value width = Arg(a, 0, "width", Value::Int(80));
  if (!width.IsInt() && !width.IsBool()) {
    return InvalidArgument("'" + width.TypeName() + "' object cannot be interpreted as an integer");
  }
  CPM_RETURN_IF_ERROR(in.CheckSize(static_cast<size_t>(std::max<int64_t>(0, width.AsInt()))));
  return Value::String(PyJustify(v.ToStr(), width.AsInt(), " ", '^'));
}

StatusOr<Value> Truncate(Interpreter&, const Value& v, const CallArgs& a) {
  int64_t length = Arg(a, 0, "length", Value::Int(255)).AsInt();
  bool killwords = Arg(a, 1, "killwords", Value::Bool(false)).Truthy();
  std::string end = Arg(a, 2, "end", Value::String("...")).ToStr();
  Value leeway_v = Arg(a, 3, "leeway", Value::None());
  int64_t leeway = leeway_v.IsNone() ? 5 : leeway_v.AsInt();  // jinja2's truncate.leeway policy
  int64_t end_len = static_cast<int64_t>(CodePointCount(end));
  if (length < end_len) return InvalidArgument("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) return InvalidArgument("expected leeway >= 0, got " + std::to_string(leeway));
  std::vector<std::string> cps = SplitCodePoints(v.ToStr());
  if (static_cast<int64_t>(cps.size()) <= length + leeway) return Value::String(v.ToStr());
  std::string head;
  for (int64_t i = 0; i < length - end_len; ++i) head += cps[static_cast<size_t>(i)];
  if (!killwords) {
    size_t space = head.rfind(' ');
    if (space != std::string::npos) head.resize(space);
  }
  return Value::String(head + end);
}

StatusOr<Value> Batch(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* linecount_v = a.Get(0, "linecount");
  if (!linecount_v) return InvalidArgument("do_batch() missing 1 required positional argument: 'linecount'");
  int64_t linecount = linecount_v->AsInt();
  Value fill = Arg(a, 1, "fill_with", Value::None());
  if (!fill.IsNone()) CPM_RETURN_IF_ERROR(in.CheckSize(static_cast<size_t>(std::max<int64_t>(0, linecount))));
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(v));
  ValueList out, tmp;
  for (Value& item : items) {
    if (static_cast<int64_t>(tmp.size()) == linecount) out.push_back(Value::List(std::exchange(tmp, {})));
    tmp.push_back(std::move(item));
  }
  if (!tmp.empty()) {
    while (!fill.IsNone() && static_cast<int64_t>(tmp.size()) < linecount) tmp.push_back(fill);
    out.push_back(Value::List(std::move(tmp)));
  }
  return Value::List(std::move(out));
}

StatusOr<Value> SliceFilter(Interpreter& in, const Value& v, const CallArgs& a) {
  const Value* slices_v = a.Get(0, "slices");
  if (!slices_v) return InvalidArgument("sync_do_slice() missing 1 required positional argument: 'slices'");
  int64_t slices = slices_v->AsInt();
  Value fill = Arg(a, 1, "fill_with", Value::None());
  CPM_ASSIGN_OR_RETURN(ValueList seq, in.Iterate(v));
  if (slices == 0) return InvalidArgument("integer division or modulo by zero");
  CPM_RETURN_IF_ERROR(in.CheckSize(static_cast<size_t>(std::max<int64_t>(slices, 0))));
  // jinja2's sync_do_slice: the first len % slices columns get one extra item.
  int64_t length = static_cast<int64_t>(seq.size());
  int64_t per = length / slices - ((length % slices != 0 && (length < 0) != (slices < 0)) ? 1 : 0);
  int64_t extra = length - per * slices;
  int64_t offset = 0;
  ValueList out;
  for (int64_t n = 0; n < slices; ++n) {
    int64_t start = offset + n * per;
    if (n < extra) ++offset;
    int64_t end = offset + (n + 1) * per;
    ValueList column;
    for (size_t i : SliceIndices(length, start, end, 1)) column.push_back(seq[i]);
    if (!fill.IsNone() && n >= extra) column.push_back(fill);
    out.push_back(Value::List(std::move(column)));
  }
  return Value::List(std::move(out));
}

const std::vector<std::pair<std::string_view, FilterFn>>& FilterTable() {
  static const std::vector<std::pair<std::string_view, FilterFn>> kTable = {
      {"abs", Abs},         {"attr", AttrFilter},   {"batch", Batch},           {"capitalize", Capitalize},
      {"center", Center},   {"count", Length},      {"d", Default},             {"default", Default},
      {"dictsort", DictSort}, {"e", Escape},        {"escape", Escape},         {"first", First},
      {"float", ToFloat},   {"forceescape", Escape}, {"format", Format},        {"groupby", GroupBy},
      {"indent", Indent},   {"int", ToInt},         {"items", Items},           {"join", Join},
      {"last", Last},       {"length", Length},     {"list", ToList},           {"lower", Lower},
      {"map", Map},         {"max", Max},           {"min", Min},               {"reject", Reject},
      {"rejectattr", RejectAttr}, {"replace", Replace}, {"reverse", Reverse},   {"round", Round},
      {"safe", Safe},       {"select", Select},     {"selectattr", SelectAttr}, {"slice", SliceFilter},
      {"sort", Sort},       {"string", ToString},   {"sum", Sum},               {"title", Title},
      {"tojson", ToJson},   {"trim", Trim},         {"truncate", Truncate},     {"unique", Unique},
      {"upper", Upper},     {"wordcount", WordCount},
  };
  return kTable;
}

}  // namespace

bool IsKnownFilter(std::string_view name) {
  for (const auto& [n, fn] : FilterTable()) {
    if (n == name) return true;
  }
  return false;
}

StatusOr<Value> ApplyFilter(Interpreter& interp, const std::string& name, const Value& value,
                            const CallArgs& args) {
  for (const auto& [n, fn] : FilterTable()) {
    if (n == name) return fn(interp, value, args);
  }
  return InvalidArgument("No filter named '" + name + "'.");
}

}  // namespace cpm::jinja
