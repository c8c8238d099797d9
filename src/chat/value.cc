// Value construction, conversion from JSON, and the Python behaviours every other part of the
// interpreter leans on: truthiness, str()/repr(), ==, <.
#include "chat/value.h"

#include <charconv>
#include <cmath>

namespace cpm::jinja {

const Value* ValueDict::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k.IsString() && k.AsString() == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(size_t index, std::string_view name) const {
  if (index < positional.size()) return &positional[index];
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return nullptr;
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.data_ = Hint{std::move(hint)};
  return v;
}

const std::string& Value::undefined_hint() const {
  static const std::string kEmpty;
  const Hint* h = std::get_if<Hint>(&data_);
  return h ? h->text : kEmpty;
}
Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.data_ = b;
  return v;
}
Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.data_ = i;
  return v;
}
Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.data_ = d;
  return v;
}
Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.data_ = std::move(s);
  return v;
}
Value Value::List(ValueList items, bool is_tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.is_tuple_ = is_tuple;
  v.data_ = std::shared_ptr<const ValueList>(std::make_shared<ValueList>(std::move(items)));
  return v;
}
Value Value::GroupTuple(Value grouper, ValueList list) {
  Value v = List({std::move(grouper), List(std::move(list))}, true);
  v.is_group_ = true;
  return v;
}
Value Value::Dict(ValueDict dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.data_ = std::shared_ptr<const ValueDict>(std::make_shared<ValueDict>(std::move(dict)));
  return v;
}
Value Value::Namespace(ValueDict attrs) {
  Value v;
  v.kind_ = Kind::kNamespace;
  v.data_ = std::make_shared<ValueDict>(std::move(attrs));
  return v;
}
Value Value::Function(std::shared_ptr<const Callable> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(fn);
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Float(static_cast<double>(u));
      return Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      dict.items.reserve(j.size());
      // JSON object keys are unique after parsing, so append without the Set() scan.
      for (auto it = j.begin(); it != j.end(); ++it) {
        dict.items.emplace_back(String(it.key()), FromJson(it.value()));
      }
      return Dict(std::move(dict));
    }
    default:
      return None();
  }
}

int64_t Value::AsInt() const {
  // Total on purpose: callers check the kind first, and a wrong guess must not throw.
  if (kind_ == Kind::kBool) return AsBool() ? 1 : 0;
  if (kind_ == Kind::kFloat) return static_cast<int64_t>(std::get<double>(data_));
  if (kind_ == Kind::kInt) return std::get<int64_t>(data_);
  return 0;
}

double Value::AsDouble() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(AsInt());
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return AsBool();
    case Kind::kInt:
      return AsInt() != 0;
    case Kind::kFloat:
      return AsDouble() != 0.0;
    case Kind::kString:
      return !AsString().empty();
    case Kind::kList:
      return !AsList().empty();
    case Kind::kDict:
      return !AsDict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string FormatPythonFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then Python's repr layout: fixed notation when the decimal
  // exponent is in (-4, 16], scientific with a two-digit exponent otherwise.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = false;
  size_t pos = 0;
  if (sci[0] == '-') {
    negative = true;
    pos = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exp10 = std::stoi(sci.substr(e + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exp10 + 1;
  std::string out = negative ? "-" : "";
  if (digits == "0") return out + "0.0";
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits + std::string(decpt - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  int shown = decpt - 1;
  out += shown < 0 ? "e-" : "e+";
  std::string ex = std::to_string(shown < 0 ? -shown : shown);
  if (ex.size() < 2) ex = "0" + ex;
  return out + ex;
}

namespace {

std::string ReprString(const std::string& s) {
  // Python prefers single quotes and switches to double quotes only when that avoids escaping.
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::Repr() const {
  switch (kind_) {
    case Kind::kString:
      return ReprString(AsString());
    case Kind::kList: {
      const ValueList& items = AsList();
      std::string out = is_tuple_ ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += items[i].Repr();
      }
      if (is_tuple_ && items.size() == 1) out += ",";
      out += is_tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : AsDict().items) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + "}";
    }
    default:
      return ToStr();
  }
}

std::string Value::ToStr() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return AsBool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(AsInt());
    case Kind::kFloat:
      return FormatPythonFloat(AsDouble());
    case Kind::kString:
      return AsString();
    case Kind::kList:
    case Kind::kDict:
      return Repr();
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : NamespaceAttrs().items) {
        if (!first) out += ", ";
        first = false;
        out += k.Repr() + ": " + v.Repr();
      }
      return out + "}>";
    }
    case Kind::kCallable:
      return "<function " + AsCallable().Name() + ">";
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return is_tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

bool Equals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.AsDouble() == b.AsDouble();
    return a.AsInt() == b.AsInt();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.AsString() == b.AsString();
    case Value::Kind::kList: {
      if (a.IsTuple() != b.IsTuple()) return false;
      const ValueList& x = a.AsList();
      const ValueList& y = b.AsList();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const ValueDict& x = a.AsDict();
      const ValueDict& y = b.AsDict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (!other || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.NamespaceAttrs() == &b.NamespaceAttrs();
    case Value::Kind::kCallable:
      return &a.AsCallable() == &b.AsCallable();
    default:
      return false;
  }
}

StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) {
    if (a.IsFloat() || b.IsFloat()) return a.AsDouble() < b.AsDouble();
    return a.AsInt() < b.AsInt();
  }
  // UTF-8 byte order is code point order, which is how Python compares str.
  if (a.IsString() && b.IsString()) return a.AsString() < b.AsString();
  if (a.IsList() && b.IsList() && a.IsTuple() == b.IsTuple()) {
    const ValueList& x = a.AsList();
    const ValueList& y = b.AsList();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return InvalidArgument("'<' not supported between instances of '" + a.TypeName() + "' and '" +
                         b.TypeName() + "'");
}

}  // namespace cpm::jinja
