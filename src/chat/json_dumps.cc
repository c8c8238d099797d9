// Python's json.dumps over Values, which transformers' tojson filter calls with
// ensure_ascii=False: ", "/": " separators on one line, ","/": " with indent, floats as repr,
// NaN/Infinity literals, dict order as inserted unless sort_keys.
#include <algorithm>
#include <cmath>

#include "chat/builtins.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

void AppendHex4(std::string* out, unsigned v) {
  static const char* kHex = "0123456789abcdef";
  *out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) *out += kHex[(v >> shift) & 15];
}

void DumpString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '\b': *out += "\\b"; break;
        case '\f': *out += "\\f"; break;
        default:
          if (c < 0x20) AppendHex4(out, c); else *out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    size_t len;
    char32_t cp = DecodeAt(s, i, &len);
    if (!ensure_ascii) {
      out->append(s, i, len);
    } else if (cp >= 0x10000) {
      unsigned v = static_cast<unsigned>(cp) - 0x10000;
      AppendHex4(out, 0xD800 + (v >> 10));
      AppendHex4(out, 0xDC00 + (v & 0x3FF));
    } else {
      AppendHex4(out, static_cast<unsigned>(cp));
    }
    i += len;
  }
  *out += '"';
}

std::string DumpFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FormatPythonFloat(d);
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& o) : o_(o) {}

  Status Dump(const Value& v, int level, std::string* out) {
    if (level > 200) return InvalidArgument("tojson: value nested too deeply");
    switch (v.kind()) {
      case Value::Kind::kNone: *out += "null"; return OkStatus();
      case Value::Kind::kBool: *out += v.AsBool() ? "true" : "false"; return OkStatus();
      case Value::Kind::kInt: *out += std::to_string(v.AsInt()); return OkStatus();
      case Value::Kind::kFloat: *out += DumpFloat(v.AsDouble()); return OkStatus();
      case Value::Kind::kString: DumpString(v.AsString(), o_.ensure_ascii, out); return OkStatus();
      case Value::Kind::kList: {
        const ValueList& items = v.AsList();
        if (items.empty()) {
          *out += "[]";
          return OkStatus();
        }
        *out += '[';
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) *out += o_.item_separator;
          Newline(level + 1, out);
          CPM_RETURN_IF_ERROR(Dump(items[i], level + 1, out));
        }
        Newline(level, out);
        *out += ']';
        return OkStatus();
      }
      case Value::Kind::kDict: {
        std::vector<const std::pair<Value, Value>*> items;
        for (const auto& kv : v.AsDict().items) items.push_back(&kv);
        if (items.empty()) {
          *out += "{}";
          return OkStatus();
        }
        if (o_.sort_keys) {
          Status error;
          std::stable_sort(items.begin(), items.end(), [&](const auto* a, const auto* b) {
            StatusOr<bool> lt = LessThan(a->first, b->first);
            if (!lt.ok()) {
              error = lt.status();
              return false;
            }
            return *lt;
          });
          CPM_RETURN_IF_ERROR(error);
        }
        *out += '{';
        bool first = true;
        for (const auto* kv : items) {
          if (!first) *out += o_.item_separator;
          first = false;
          Newline(level + 1, out);
          CPM_ASSIGN_OR_RETURN(std::string key, KeyString(kv->first));
          DumpString(key, o_.ensure_ascii, out);
          *out += o_.key_separator;
          CPM_RETURN_IF_ERROR(Dump(kv->second, level + 1, out));
        }
        Newline(level, out);
        *out += '}';
        return OkStatus();
      }
      default:
        return InvalidArgument("Object of type " + v.TypeName() + " is not JSON serializable");
    }
  }

 private:
  void Newline(int level, std::string* out) const {
    if (!o_.indent) return;
    *out += '\n';
    for (int i = 0; i < level; ++i) *out += *o_.indent;
  }

  static StatusOr<std::string> KeyString(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::kString: return k.AsString();
      case Value::Kind::kNone: return std::string("null");
      case Value::Kind::kBool: return std::string(k.AsBool() ? "true" : "false");
      case Value::Kind::kInt: return std::to_string(k.AsInt());
      case Value::Kind::kFloat: return DumpFloat(k.AsDouble());
      default:
        return InvalidArgument("keys must be str, int, float, bool or None, not " + k.TypeName());
    }
  }

  const JsonDumpOptions& o_;
};

}  // namespace

StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  Dumper dumper(options);
  CPM_RETURN_IF_ERROR(dumper.Dump(value, 0, &out));
  return out;
}

}  // namespace cpm::jinja
