// Python str, dict and list methods that chat templates call (`content.split('</think>')`,
// `tool.items()`). jinja2's ImmutableSandboxedEnvironment forbids mutating methods
// (list.append, dict.update, ...), so those resolve to Undefined and fail when called.
#include <algorithm>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

using MethodFn = StatusOr<Value> (*)(Interpreter&, const Value& self, const CallArgs&);

class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name, MethodFn fn)
      : self_(std::move(self)), name_(std::move(name)), fn_(fn) {}
  StatusOr<Value> Call(Interpreter& interp, const CallArgs& args) const override {
    return fn_(interp, self_, args);
  }
  std::string Name() const override { return self_.TypeName() + "." + name_; }

 private:
  Value self_;
  std::string name_;
  MethodFn fn_;
};

StatusOr<std::string> StrArg(const CallArgs& a, size_t i, const char* name, const char* method) {
  const Value* v = a.Get(i, name);
  if (!v || !v->IsString()) {
    return InvalidArgument(std::string(method) + "() argument must be str");
  }
  return v->AsString();
}

std::optional<std::string> OptionalChars(const CallArgs& a) {
  const Value* v = a.Get(0, "chars");
  if (v && v->IsString()) return v->AsString();
  return std::nullopt;
}

StatusOr<Value> Strip(Interpreter&, const Value& s, const CallArgs& a) { return Value::String(PyStrip(s.AsString(), OptionalChars(a), true, true)); }
StatusOr<Value> LStrip(Interpreter&, const Value& s, const CallArgs& a) { return Value::String(PyStrip(s.AsString(), OptionalChars(a), true, false)); }
StatusOr<Value> RStrip(Interpreter&, const Value& s, const CallArgs& a) { return Value::String(PyStrip(s.AsString(), OptionalChars(a), false, true)); }
StatusOr<Value> Upper(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PyUpper(s.AsString())); }
StatusOr<Value> Lower(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PyLower(s.AsString())); }
StatusOr<Value> Title(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PyTitle(s.AsString())); }
StatusOr<Value> Capitalize(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PyCapitalize(s.AsString())); }

// The byte range of the code point slice s[start:end] that find/count/startswith search,
// with Python's clamping of negative, None and out-of-range bounds. `empty` is set when
// start > end, where even an empty substring is not found.
struct SearchRange {
  size_t begin = 0, end = 0;
  bool empty = false;
};

StatusOr<SearchRange> RangeArgs(const std::string& s, const CallArgs& a, size_t first_index) {
  int64_t n = static_cast<int64_t>(CodePointCount(s));
  int64_t bounds[2] = {0, n};
  for (size_t k = 0; k < 2; ++k) {
    const Value* v = a.Get(first_index + k, k == 0 ? "start" : "end");
    if (!v || v->IsNone()) continue;
    if (!v->IsInt() && !v->IsBool()) {
      return InvalidArgument("slice indices must be integers or None or have an __index__ method");
    }
    int64_t i = v->AsInt();
    if (i < 0) i = std::max<int64_t>(0, i + n);
    bounds[k] = k == 0 ? i : std::min(i, n);
  }
  SearchRange r;
  r.empty = bounds[0] > bounds[1];
  // Byte offsets of the two code point indices.
  int64_t cp = 0;
  size_t byte = 0;
  size_t offsets[2] = {s.size(), s.size()};
  for (; byte <= s.size(); ++cp) {
    if (cp == bounds[0]) offsets[0] = byte;
    if (cp == bounds[1]) offsets[1] = byte;
    if (byte == s.size()) break;
    size_t len;
    DecodeAt(s, byte, &len);
    byte += len;
  }
  r.begin = std::min(offsets[0], s.size());
  r.end = std::max(r.begin, offsets[1]);
  return r;
}

StatusOr<Value> AffixTest(const Value& s, const CallArgs& a, bool prefix, const char* method) {
  const Value* arg = a.Get(0, prefix ? "prefix" : "suffix");
  if (!arg) return InvalidArgument(std::string(method) + "() takes at least 1 argument (0 given)");
  std::vector<std::string> options;
  if (arg->IsString()) {
    options.push_back(arg->AsString());
  } else if (arg->IsTuple()) {
    for (const Value& v : arg->AsList()) {
      if (!v.IsString()) return InvalidArgument(std::string(method) + "() tuple items must be str");
      options.push_back(v.AsString());
    }
  } else {
    return InvalidArgument(std::string(method) + " first arg must be str or a tuple of str, not " + arg->TypeName());
  }
  CPM_ASSIGN_OR_RETURN(SearchRange r, RangeArgs(s.AsString(), a, 1));
  if (r.empty) return Value::Bool(false);
  std::string_view str = std::string_view(s.AsString()).substr(r.begin, r.end - r.begin);
  for (const std::string& o : options) {
    if (o.size() > str.size()) continue;
    if (prefix ? str.substr(0, o.size()) == o : str.substr(str.size() - o.size()) == o) {
      return Value::Bool(true);
    }
  }
  return Value::Bool(false);
}
StatusOr<Value> StartsWith(Interpreter&, const Value& s, const CallArgs& a) { return AffixTest(s, a, true, "startswith"); }
StatusOr<Value> EndsWith(Interpreter&, const Value& s, const CallArgs& a) { return AffixTest(s, a, false, "endswith"); }

// str.split / str.rsplit, both with Python's None-separator whitespace rules.
StatusOr<Value> SplitImpl(const Value& s, const CallArgs& a, bool from_right) {
  const Value* sep = a.Get(0, "sep");
  const Value* maxv = a.Get(1, "maxsplit");
  int64_t maxsplit = (maxv && (maxv->IsInt() || maxv->IsBool())) ? maxv->AsInt() : -1;
  const std::string& str = s.AsString();
  ValueList out;
  if (sep && !sep->IsNone()) {
    if (!sep->IsString()) return InvalidArgument("must be str or None, not " + sep->TypeName());
    const std::string& d = sep->AsString();
    if (d.empty()) return InvalidArgument("empty separator");
    std::vector<std::string> parts;
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = str.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(str.substr(pos, hit - pos));
        pos = hit + d.size();
      }
      parts.push_back(str.substr(pos));
    } else {
      size_t end = str.size();
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        if (end < d.size()) break;
        size_t hit = str.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        parts.push_back(str.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
      }
      parts.push_back(str.substr(0, end));
      std::reverse(parts.begin(), parts.end());
    }
    for (auto& p : parts) out.push_back(Value::String(std::move(p)));
    return Value::List(std::move(out));
  }
  std::vector<std::string> cps = SplitCodePoints(str);
  auto ws = [&](size_t i) {
    size_t len;
    return IsPyWhitespace(DecodeAt(cps[i], 0, &len));
  };
  std::vector<std::string> parts;
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (true) {
      while (i < n && ws(i)) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::string rest;
        for (size_t k = i; k < n; ++k) rest += cps[k];
        parts.push_back(rest);
        break;
      }
      std::string word;
      while (i < n && !ws(i)) word += cps[i++];
      parts.push_back(word);
    }
  } else {
    size_t i = n;
    while (true) {
      while (i > 0 && ws(i - 1)) --i;
      if (i == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        std::string rest;
        for (size_t k = 0; k < i; ++k) rest += cps[k];
        parts.push_back(rest);
        break;
      }
      size_t end = i;
      while (i > 0 && !ws(i - 1)) --i;
      std::string word;
      for (size_t k = i; k < end; ++k) word += cps[k];
      parts.push_back(word);
    }
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::String(std::move(p)));
  return Value::List(std::move(out));
}
StatusOr<Value> Split(Interpreter&, const Value& s, const CallArgs& a) { return SplitImpl(s, a, false); }
StatusOr<Value> RSplit(Interpreter&, const Value& s, const CallArgs& a) { return SplitImpl(s, a, true); }

StatusOr<Value> Replace(Interpreter& in, const Value& s, const CallArgs& a) {
  CallArgs forwarded = a;
  return ApplyFilter(in, "replace", s, forwarded);
}

// Code point index of a byte offset, for find()/rfind().
int64_t CodePointIndex(const std::string& s, size_t byte) {
  return static_cast<int64_t>(CodePointCount(std::string_view(s).substr(0, byte)));
}

// str.find/rfind/index/rindex(sub[, start[, end]]): the code point index of the first (last)
// match inside s[start:end], or -1.
StatusOr<int64_t> FindIn(const Value& s, const CallArgs& a, bool from_right, const char* method) {
  CPM_ASSIGN_OR_RETURN(std::string sub, StrArg(a, 0, "sub", method));
  const std::string& str = s.AsString();
  CPM_ASSIGN_OR_RETURN(SearchRange r, RangeArgs(str, a, 1));
  if (r.empty || sub.size() > r.end - r.begin) return -1;
  size_t hit = from_right ? str.rfind(sub, r.end - sub.size()) : str.find(sub, r.begin);
  if (hit == std::string::npos || hit < r.begin || hit + sub.size() > r.end) return -1;
  return CodePointIndex(str, hit);
}
StatusOr<Value> Find(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(int64_t i, FindIn(s, a, false, "find"));
  return Value::Int(i);
}
StatusOr<Value> RFind(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(int64_t i, FindIn(s, a, true, "rfind"));
  return Value::Int(i);
}
StatusOr<Value> Index(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(int64_t i, FindIn(s, a, false, "index"));
  if (i < 0) return InvalidArgument("substring not found");
  return Value::Int(i);
}
StatusOr<Value> RIndex(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(int64_t i, FindIn(s, a, true, "rindex"));
  if (i < 0) return InvalidArgument("substring not found");
  return Value::Int(i);
}
StatusOr<Value> Count(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(std::string sub, StrArg(a, 0, "sub", "count"));
  CPM_ASSIGN_OR_RETURN(SearchRange r, RangeArgs(s.AsString(), a, 1));
  if (r.empty) return Value::Int(0);
  std::string_view str = std::string_view(s.AsString()).substr(r.begin, r.end - r.begin);
  if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(str)) + 1);
  int64_t n = 0;
  for (size_t pos = str.find(sub); pos != std::string::npos; pos = str.find(sub, pos + sub.size())) ++n;
  return Value::Int(n);
}

StatusOr<Value> Join(Interpreter& in, const Value& s, const CallArgs& a) {
  const Value* it = a.Get(0, "iterable");
  if (!it) return InvalidArgument("join() takes exactly one argument (0 given)");
  CPM_ASSIGN_OR_RETURN(ValueList items, in.Iterate(*it));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].IsString()) {
      return InvalidArgument("sequence item " + std::to_string(i) + ": expected str instance, " +
                             items[i].TypeName() + " found");
    }
    if (i) out += s.AsString();
    out += items[i].AsString();
    CPM_RETURN_IF_ERROR(in.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

StatusOr<Value> SplitLines(Interpreter&, const Value& s, const CallArgs& a) {
  // Python's line boundaries: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029.
  bool keepends = a.Get(0, "keepends") && a.Get(0, "keepends")->Truthy();
  const std::string& str = s.AsString();
  ValueList out;
  size_t line_start = 0;
  for (size_t i = 0; i < str.size();) {
    size_t len;
    char32_t cp = DecodeAt(str, i, &len);
    bool boundary = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || (cp >= 0x1c && cp <= 0x1e) ||
                    cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!boundary) {
      i += len;
      continue;
    }
    size_t end = i + len;
    if (cp == '\r' && end < str.size() && str[end] == '\n') ++end;
    out.push_back(Value::String(str.substr(line_start, (keepends ? end : i) - line_start)));
    line_start = i = end;
  }
  if (line_start < str.size()) out.push_back(Value::String(str.substr(line_start)));
  return Value::List(std::move(out));
}

StatusOr<Value> RemovePrefix(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(std::string p, StrArg(a, 0, "prefix", "removeprefix"));
  const std::string& str = s.AsString();
  return Value::String(str.compare(0, p.size(), p) == 0 ? str.substr(p.size()) : str);
}
StatusOr<Value> RemoveSuffix(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(std::string p, StrArg(a, 0, "suffix", "removesuffix"));
  const std::string& str = s.AsString();
  bool has = !p.empty() && p.size() <= str.size() && str.compare(str.size() - p.size(), p.size(), p) == 0;
  return Value::String(has ? str.substr(0, str.size() - p.size()) : str);
}

StatusOr<Value> PartitionImpl(const Value& s, const CallArgs& a, bool from_right) {
  CPM_ASSIGN_OR_RETURN(std::string sep, StrArg(a, 0, "sep", from_right ? "rpartition" : "partition"));
  if (sep.empty()) return InvalidArgument("empty separator");
  const std::string& str = s.AsString();
  size_t hit = from_right ? str.rfind(sep) : str.find(sep);
  if (hit == std::string::npos) {
    Value none = Value::String("");
    return from_right ? Value::List({none, none, s}, true) : Value::List({s, none, none}, true);
  }
  return Value::List({Value::String(str.substr(0, hit)), Value::String(sep), Value::String(str.substr(hit + sep.size()))}, true);
}
StatusOr<Value> Partition(Interpreter&, const Value& s, const CallArgs& a) { return PartitionImpl(s, a, false); }
StatusOr<Value> RPartition(Interpreter&, const Value& s, const CallArgs& a) { return PartitionImpl(s, a, true); }

StatusOr<Value> IsLower(Interpreter&, const Value& s, const CallArgs&) { return Value::Bool(PyIsLower(s.AsString())); }
StatusOr<Value> IsUpper(Interpreter&, const Value& s, const CallArgs&) { return Value::Bool(PyIsUpper(s.AsString())); }
StatusOr<Value> SwapCase(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PySwapCase(s.AsString())); }
StatusOr<Value> Casefold(Interpreter&, const Value& s, const CallArgs&) { return Value::String(PyCasefold(s.AsString())); }

StatusOr<int64_t> WidthArg(const CallArgs& a, const char* method) {
  const Value* w = a.Get(0, "width");
  if (!w) return InvalidArgument(std::string(method) + "() takes at least 1 argument (0 given)");
  if (!w->IsInt() && !w->IsBool()) {
    return InvalidArgument("'" + w->TypeName() + "' object cannot be interpreted as an integer");
  }
  if (w->AsInt() > (16 << 20)) return InvalidArgument(std::string(method) + "(): width too large");
  return w->AsInt();
}

StatusOr<Value> Justify(const Value& s, const CallArgs& a, char align, const char* method) {
  CPM_ASSIGN_OR_RETURN(int64_t width, WidthArg(a, method));
  std::string fill = " ";
  if (const Value* f = a.Get(1, "fillchar")) {
    if (!f->IsString()) return InvalidArgument(std::string(method) + "() argument 2 must be str, not " + f->TypeName());
    if (CodePointCount(f->AsString()) != 1) {
      return InvalidArgument("The fill character must be exactly one character long");
    }
    fill = f->AsString();
  }
  return Value::String(PyJustify(s.AsString(), width, fill, align));
}
StatusOr<Value> LJust(Interpreter&, const Value& s, const CallArgs& a) { return Justify(s, a, '<', "ljust"); }
StatusOr<Value> RJust(Interpreter&, const Value& s, const CallArgs& a) { return Justify(s, a, '>', "rjust"); }
StatusOr<Value> CenterMethod(Interpreter&, const Value& s, const CallArgs& a) { return Justify(s, a, '^', "center"); }

StatusOr<Value> ZFill(Interpreter&, const Value& s, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(int64_t width, WidthArg(a, "zfill"));
  const std::string& str = s.AsString();
  int64_t len = static_cast<int64_t>(CodePointCount(str));
  if (width <= len) return s;
  // The zeros go after a leading sign.
  size_t sign = !str.empty() && (str[0] == '+' || str[0] == '-') ? 1 : 0;
  return Value::String(str.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + str.substr(sign));
}

template <bool (*Pred)(char32_t)>
StatusOr<Value> AllChars(Interpreter&, const Value& s, const CallArgs&) {
  const std::string& str = s.AsString();
  if (str.empty()) return Value::Bool(false);
  for (size_t i = 0; i < str.size();) {
    size_t len;
    if (!Pred(DecodeAt(str, i, &len))) return Value::Bool(false);
    i += len;
  }
  return Value::Bool(true);
}
bool IsDigitCp(char32_t c) { return c >= '0' && c <= '9'; }
bool IsAlphaCp(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0x80 && !IsPyWhitespace(c)); }
bool IsAlnumCp(char32_t c) { return IsDigitCp(c) || IsAlphaCp(c); }

// One replacement field's value: `arg_name` then any `.attr` / `[key]` (jinja2's
// SandboxedFormatter looks both up through the sandbox, like `x.attr` in a template).
StatusOr<Value> FormatField(Interpreter& in, const std::string& field, const CallArgs& a, size_t* auto_index,
                            int* numbering) {
  size_t end = field.find_first_of(".[");
  std::string arg_name = field.substr(0, end);
  Value v;
  bool is_index = arg_name.empty() || arg_name.find_first_not_of("0123456789") == std::string::npos;
  if (is_index) {
    int mode = arg_name.empty() ? 1 : 2;  // 1: automatic numbering, 2: manual
    if (*numbering && *numbering != mode) {
      // string.Formatter (which jinja2's sandbox uses) words both directions this way.
      return InvalidArgument("cannot switch from manual field specification to automatic field numbering");
    }
    *numbering = mode;
    size_t idx = arg_name.empty() ? (*auto_index)++ : std::stoul(arg_name.substr(0, 9));
    if (idx >= a.positional.size()) {
      return InvalidArgument("tuple index out of range");  // jinja2's SandboxedFormatter indexes args
    }
    v = a.positional[idx];
  } else {
    const Value* kw = a.Get(static_cast<size_t>(-1), arg_name);
    if (!kw) return InvalidArgument("'" + arg_name + "'");
    v = *kw;
  }
  for (size_t i = end; i < field.size();) {
    if (field[i] == '.') {
      size_t next = field.find_first_of(".[", i + 1);
      CPM_ASSIGN_OR_RETURN(v, in.GetAttr(v, field.substr(i + 1, next - i - 1)));
      i = next;
    } else {
      size_t close = field.find(']', i);
      if (close == std::string::npos) return InvalidArgument("Missing ']' in format string");
      std::string key = field.substr(i + 1, close - i - 1);
      bool digits = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos;
      CPM_ASSIGN_OR_RETURN(v, in.GetItem(v, digits ? Value::Int(std::stoll(key.substr(0, 18))) : Value::String(key)));
      i = close + 1;
    }
  }
  return v;
}

// str.format: `{field!conversion:spec}`, where the spec may itself hold `{field}`s.
StatusOr<std::string> FormatString(Interpreter& in, const std::string& f, const CallArgs& a, size_t* auto_index,
                                   int* numbering, int depth) {
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 >= f.size() || f[i + 1] != '}') return InvalidArgument("Single '}' encountered in format string");
      out += '}';
      ++i;
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // The field ends at the '}' that balances its '{' (specs may nest one level).
    size_t close = i + 1;
    for (int open = 1; close < f.size(); ++close) {
      if (f[close] == '{') ++open;
      if (f[close] == '}' && --open == 0) break;
    }
    if (close >= f.size()) return InvalidArgument("expected '}' before end of string");
    std::string field = f.substr(i + 1, close - i - 1);
    std::string spec, conversion;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field.resize(colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conversion = field.substr(bang + 1);
      field.resize(bang);
      if (conversion != "r" && conversion != "s" && conversion != "a") {
        return InvalidArgument("Unknown conversion specifier " + conversion);
      }
    }
    if (depth > 0 && spec.find('{') != std::string::npos) return InvalidArgument("Max string recursion exceeded");
    // The field takes its automatic number before the fields nested in its spec (CPython).
    CPM_ASSIGN_OR_RETURN(Value v, FormatField(in, field, a, auto_index, numbering));
    CPM_ASSIGN_OR_RETURN(spec, FormatString(in, spec, a, auto_index, numbering, depth + 1));
    if (!conversion.empty()) v = Value::String(conversion == "s" ? v.ToStr() : v.Repr());
    CPM_ASSIGN_OR_RETURN(std::string piece, FormatWithSpec(v, spec));
    out += piece;
    CPM_RETURN_IF_ERROR(in.CheckSize(out.size()));
    i = close;
  }
  return out;
}

StatusOr<Value> Format(Interpreter& in, const Value& s, const CallArgs& a) {
  size_t auto_index = 0;
  int numbering = 0;
  CPM_ASSIGN_OR_RETURN(std::string out, FormatString(in, s.AsString(), a, &auto_index, &numbering, 0));
  return Value::String(std::move(out));
}

StatusOr<Value> DictItems(Interpreter& in, const Value& d, const CallArgs& a) {
  return ApplyFilter(in, "items", d, a);
}
StatusOr<Value> DictKeys(Interpreter&, const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& [k, v] : d.AsDict().items) out.push_back(k);
  return Value::List(std::move(out));
}
StatusOr<Value> DictValues(Interpreter&, const Value& d, const CallArgs&) {
  ValueList out;
  for (const auto& [k, v] : d.AsDict().items) out.push_back(v);
  return Value::List(std::move(out));
}
StatusOr<Value> DictGet(Interpreter&, const Value& d, const CallArgs& a) {
  const Value* key = a.Get(0, "key");
  if (!key) return InvalidArgument("get expected at least 1 argument, got 0");
  if (const Value* v = d.AsDict().Find(*key)) return *v;
  const Value* dflt = a.Get(1, "default");
  return dflt ? *dflt : Value::None();
}

// list.index(x[, start[, end]]) and list.count(x), the two list methods the immutable
// sandbox allows.
StatusOr<Value> ListIndex(Interpreter&, const Value& l, const CallArgs& a) {
  const Value* x = a.Get(0, "value");
  if (!x) return InvalidArgument("index expected at least 1 argument, got 0");
  const ValueList& items = l.AsList();
  int64_t n = static_cast<int64_t>(items.size());
  int64_t bounds[2] = {0, n};
  for (size_t k = 0; k < 2; ++k) {
    const Value* v = a.Get(1 + k, k == 0 ? "start" : "stop");
    if (!v) continue;
    if (!v->IsInt() && !v->IsBool()) {
      return InvalidArgument("slice indices must be integers or have an __index__ method");
    }
    int64_t i = v->AsInt();
    bounds[k] = i < 0 ? std::max<int64_t>(0, i + n) : std::min(i, n);
  }
  for (int64_t i = bounds[0]; i < bounds[1]; ++i) {
    if (Equals(items[static_cast<size_t>(i)], *x)) return Value::Int(i);
  }
  return InvalidArgument(x->Repr() + " is not in " + (l.IsTuple() ? "tuple" : "list"));
}
StatusOr<Value> ListCount(Interpreter&, const Value& l, const CallArgs& a) {
  const Value* x = a.Get(0, "value");
  if (!x) return InvalidArgument("count() takes exactly one argument (0 given)");
  int64_t n = 0;
  for (const Value& v : l.AsList()) n += Equals(v, *x) ? 1 : 0;
  return Value::Int(n);
}

const std::vector<std::pair<std::string_view, MethodFn>>& ListMethods() {
  static const std::vector<std::pair<std::string_view, MethodFn>> kTable = {
      {"index", ListIndex}, {"count", ListCount},
  };
  return kTable;
}

const std::vector<std::pair<std::string_view, MethodFn>>& StrMethods() {
  static const std::vector<std::pair<std::string_view, MethodFn>> kTable = {
      {"strip", Strip},     {"lstrip", LStrip},       {"rstrip", RStrip},   {"upper", Upper},
      {"lower", Lower},     {"title", Title},         {"capitalize", Capitalize},
      {"startswith", StartsWith}, {"endswith", EndsWith}, {"split", Split}, {"rsplit", RSplit},
      {"replace", Replace}, {"find", Find},           {"rfind", RFind},     {"count", Count},
      {"index", Index},     {"rindex", RIndex},       {"join", Join},       {"format", Format},
      {"isdigit", AllChars<IsDigitCp>}, {"isalpha", AllChars<IsAlphaCp>},
      {"isalnum", AllChars<IsAlnumCp>}, {"isspace", AllChars<IsPyWhitespace>},
      {"islower", IsLower}, {"isupper", IsUpper},     {"splitlines", SplitLines},
      {"removeprefix", RemovePrefix}, {"removesuffix", RemoveSuffix},
      {"partition", Partition}, {"rpartition", RPartition}, {"zfill", ZFill},
      {"ljust", LJust},     {"rjust", RJust},         {"center", CenterMethod},
      {"swapcase", SwapCase}, {"casefold", Casefold},
  };
  return kTable;
}

const std::vector<std::pair<std::string_view, MethodFn>>& DictMethods() {
  static const std::vector<std::pair<std::string_view, MethodFn>> kTable = {
      {"items", DictItems}, {"keys", DictKeys}, {"values", DictValues}, {"get", DictGet},
  };
  return kTable;
}

}  // namespace

Value GetMethod(const Value& obj, const std::string& name) {
  const std::vector<std::pair<std::string_view, MethodFn>>* table = nullptr;
  if (obj.IsString()) table = &StrMethods();
  if (obj.IsDict()) table = &DictMethods();
  if (obj.IsList()) table = &ListMethods();
  if (!table) return Value::Undefined();
  for (const auto& [n, fn] : *table) {
    if (n == name) return Value::Function(std::make_shared<BoundMethod>(obj, name, fn));
  }
  return Value::Undefined();
}

}  // namespace cpm::jinja
