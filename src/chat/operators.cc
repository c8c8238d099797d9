// Arithmetic, concatenation and membership with Python semantics: bool counts as int, `/` is
// true division, `//` and `%` floor toward negative infinity, str/list repeat and concatenate.
#include <cmath>

#include "chat/builtins.h"
#include "chat/interpreter.h"

namespace cpm::jinja {
namespace {

Status Unsupported(const std::string& op, const Value& l, const Value& r) {
  return InvalidArgument("unsupported operand type(s) for " + op + ": '" + l.TypeName() +
                         "' and '" + r.TypeName() + "'");
}

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t FloorMod(int64_t a, int64_t b) {
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

StatusOr<Value> Repeat(const Interpreter& interp, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.IsString()) {
    CPM_RETURN_IF_ERROR(interp.CheckSize(seq.AsString().size() * static_cast<size_t>(times)));
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.AsString();
    return Value::String(std::move(out));
  }
  const ValueList& items = seq.AsList();
  CPM_RETURN_IF_ERROR(interp.CheckSize(items.size() * static_cast<size_t>(times)));
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.IsTuple());
}

StatusOr<Value> Arithmetic(const std::string& op, const Value& l, const Value& r) {
  bool use_float = l.IsFloat() || r.IsFloat();
  if (op == "/") {
    if (r.AsDouble() == 0.0) return InvalidArgument("division by zero");
    return Value::Float(l.AsDouble() / r.AsDouble());
  }
  if (op == "**") {
    if (!use_float && r.AsInt() >= 0) {
      int64_t base = l.AsInt(), exp = r.AsInt(), result = 1;
      for (int64_t i = 0; i < exp; ++i) {
        if (__builtin_mul_overflow(result, base, &result)) {
          return Value::Float(std::pow(l.AsDouble(), r.AsDouble()));
        }
        if (result == 0 || result == 1) break;
      }
      return Value::Int(result);
    }
    return Value::Float(std::pow(l.AsDouble(), r.AsDouble()));
  }
  if (use_float) {
    double a = l.AsDouble(), b = r.AsDouble();
    if (op == "+") return Value::Float(a + b);
    if (op == "-") return Value::Float(a - b);
    if (op == "*") return Value::Float(a * b);
    if (b == 0.0) return InvalidArgument(op == "//" ? "float floor division by zero" : "float modulo");
    if (op == "//") return Value::Float(std::floor(a / b));
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return Value::Float(m);
  }
  int64_t a = l.AsInt(), b = r.AsInt(), out;
  bool overflow = false;
  if (op == "+") overflow = __builtin_add_overflow(a, b, &out);
  else if (op == "-") overflow = __builtin_sub_overflow(a, b, &out);
  else if (op == "*") overflow = __builtin_mul_overflow(a, b, &out);
  else if (b == 0) return InvalidArgument(op == "//" ? "integer division or modulo by zero" : "integer modulo by zero");
  else if (b == -1) {
    // a / -1 traps (SIGFPE) for the one quotient int64 cannot hold: -a, checked; a % -1 is 0.
    if (op == "//") overflow = __builtin_sub_overflow(int64_t{0}, a, &out);
    else out = 0;
  } else if (op == "//") out = FloorDiv(a, b);
  else out = FloorMod(a, b);
  if (overflow) return InvalidArgument("integer overflow");
  return Value::Int(out);
}

}  // namespace

StatusOr<Value> BinaryOp(const Interpreter& interp, const std::string& op, const Value& l,
                         const Value& r) {
  if (op == "~") {
    // jinja2 concatenates str() of both sides; Undefined is "" here, not an error.
    std::string out = l.ToStr() + r.ToStr();
    CPM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  if (op == "%" && l.IsString()) {
    // str.__mod__ runs first and takes str() of an Undefined argument, so no error for it.
    CPM_ASSIGN_OR_RETURN(std::string out, PercentFormat(l.AsString(), r));
    CPM_RETURN_IF_ERROR(interp.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  if (l.IsUndefined()) return UndefinedError(l);
  if (r.IsUndefined()) return UndefinedError(r);
  if (l.IsNumber() && r.IsNumber()) return Arithmetic(op, l, r);
  if (op == "+") {
    if (l.IsString() && r.IsString()) {
      CPM_RETURN_IF_ERROR(interp.CheckSize(l.AsString().size() + r.AsString().size()));
      return Value::String(l.AsString() + r.AsString());
    }
    if (l.IsList() && r.IsList() && l.IsTuple() == r.IsTuple()) {
      ValueList out = l.AsList();
      CPM_RETURN_IF_ERROR(interp.CheckSize(out.size() + r.AsList().size()));
      out.insert(out.end(), r.AsList().begin(), r.AsList().end());
      return Value::List(std::move(out), l.IsTuple());
    }
    if (l.IsString() || r.IsString()) {
      const Value& other = l.IsString() ? r : l;
      if (l.IsString()) {
        return InvalidArgument("can only concatenate str (not \"" + other.TypeName() + "\") to str");
      }
    }
    return Unsupported("+", l, r);
  }
  if (op == "*") {
    if ((l.IsString() || l.IsList()) && (r.IsInt() || r.IsBool())) return Repeat(interp, l, r.AsInt());
    if ((r.IsString() || r.IsList()) && (l.IsInt() || l.IsBool())) return Repeat(interp, r, l.AsInt());
  }
  return Unsupported(op, l, r);
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.IsString()) {
        return InvalidArgument("'in <string>' requires string as left operand, not " + item.TypeName());
      }
      return container.AsString().find(item.AsString()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.AsList()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return container.AsDict().Find(item) != nullptr;
    default:
      return InvalidArgument("argument of type '" + container.TypeName() + "' is not iterable");
  }
}

}  // namespace cpm::jinja
