// jinja2's builtin tests (`x is defined`, `x is divisibleby 3`, ...), with Python's type
// rules: bool is a number but not an integer, Undefined is iterable and even a sequence.
#include <cmath>

#include "chat/builtins.h"
#include "chat/interpreter.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

using TestFn = StatusOr<bool> (*)(Interpreter&, const Value&, const CallArgs&);

StatusOr<Value> Need(const CallArgs& a, const char* test) {
  if (a.positional.empty()) return InvalidArgument(std::string("test '") + test + "' needs an argument");
  return a.positional[0];
}

StatusOr<bool> Defined(Interpreter&, const Value& v, const CallArgs&) { return !v.IsUndefined(); }
StatusOr<bool> IsUndef(Interpreter&, const Value& v, const CallArgs&) { return v.IsUndefined(); }
StatusOr<bool> IsNone(Interpreter&, const Value& v, const CallArgs&) { return v.IsNone(); }
StatusOr<bool> IsBoolean(Interpreter&, const Value& v, const CallArgs&) { return v.IsBool(); }
StatusOr<bool> IsFalse(Interpreter&, const Value& v, const CallArgs&) { return v.IsBool() && !v.AsBool(); }
StatusOr<bool> IsTrue(Interpreter&, const Value& v, const CallArgs&) { return v.IsBool() && v.AsBool(); }
StatusOr<bool> IsInteger(Interpreter&, const Value& v, const CallArgs&) { return v.IsInt(); }
StatusOr<bool> IsFloat(Interpreter&, const Value& v, const CallArgs&) { return v.IsFloat(); }
StatusOr<bool> IsNumber(Interpreter&, const Value& v, const CallArgs&) { return v.IsNumber(); }
StatusOr<bool> IsString(Interpreter&, const Value& v, const CallArgs&) { return v.IsString(); }
StatusOr<bool> IsMapping(Interpreter&, const Value& v, const CallArgs&) { return v.IsDict(); }
StatusOr<bool> IsIterable(Interpreter&, const Value& v, const CallArgs&) {
  return v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict();
}
StatusOr<bool> IsSequence(Interpreter&, const Value& v, const CallArgs&) {
  // jinja2's Undefined has __len__ and __getitem__, so it passes test_sequence.
  return v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict();
}
StatusOr<bool> IsCallable(Interpreter&, const Value& v, const CallArgs&) { return v.IsCallable(); }
StatusOr<bool> IsEscaped(Interpreter&, const Value&, const CallArgs&) { return false; }

StatusOr<bool> IsOdd(Interpreter&, const Value& v, const CallArgs&) {
  if (!v.IsInt() && !v.IsBool()) return InvalidArgument("test 'odd' needs an integer, got " + v.TypeName());
  return (v.AsInt() % 2) != 0;
}
StatusOr<bool> IsEven(Interpreter&, const Value& v, const CallArgs&) {
  if (!v.IsInt() && !v.IsBool()) return InvalidArgument("test 'even' needs an integer, got " + v.TypeName());
  return (v.AsInt() % 2) == 0;
}
StatusOr<bool> DivisibleBy(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value n, Need(a, "divisibleby"));
  if (!v.IsNumber() || !n.IsNumber()) return InvalidArgument("test 'divisibleby' needs numbers");
  if (v.IsFloat() || n.IsFloat()) {
    if (n.AsDouble() == 0) return InvalidArgument("float modulo");
    return std::fmod(v.AsDouble(), n.AsDouble()) == 0;
  }
  if (n.AsInt() == 0) return InvalidArgument("integer modulo by zero");
  return v.AsInt() % n.AsInt() == 0;
}
StatusOr<bool> IsLower(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = v.ToStr();
  return PyLower(s) == s && PyUpper(s) != s;
}
StatusOr<bool> IsUpper(Interpreter&, const Value& v, const CallArgs&) {
  std::string s = v.ToStr();
  return PyUpper(s) == s && PyLower(s) != s;
}
StatusOr<bool> Eq(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "eq"));
  return Equals(v, o);
}
StatusOr<bool> Ne(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "ne"));
  return !Equals(v, o);
}
StatusOr<bool> Lt(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "lt"));
  return LessThan(v, o);
}
StatusOr<bool> Gt(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "gt"));
  return LessThan(o, v);
}
StatusOr<bool> Le(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "le"));
  CPM_ASSIGN_OR_RETURN(bool gt, LessThan(o, v));
  return !gt;
}
StatusOr<bool> Ge(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "ge"));
  CPM_ASSIGN_OR_RETURN(bool lt, LessThan(v, o));
  return !lt;
}
StatusOr<bool> In(Interpreter&, const Value& v, const CallArgs& a) {
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "in"));
  return Contains(o, v);
}
StatusOr<bool> SameAs(Interpreter&, const Value& v, const CallArgs& a) {
  // Python identity: only meaningful for the singletons templates compare with.
  CPM_ASSIGN_OR_RETURN(Value o, Need(a, "sameas"));
  if (v.kind() != o.kind()) return false;
  if (v.IsNone() || v.IsUndefined()) return true;
  if (v.IsBool()) return v.AsBool() == o.AsBool();
  return Equals(v, o) && (v.IsInt() || v.IsString());
}

const std::vector<std::pair<std::string_view, TestFn>>& TestTable() {
  static const std::vector<std::pair<std::string_view, TestFn>> kTable = {
      {"defined", Defined},   {"undefined", IsUndef}, {"none", IsNone},         {"boolean", IsBoolean},
      {"false", IsFalse},     {"true", IsTrue},       {"integer", IsInteger},   {"float", IsFloat},
      {"number", IsNumber},   {"string", IsString},   {"mapping", IsMapping},   {"iterable", IsIterable},
      {"sequence", IsSequence}, {"callable", IsCallable}, {"escaped", IsEscaped}, {"odd", IsOdd},
      {"even", IsEven},       {"divisibleby", DivisibleBy}, {"lower", IsLower}, {"upper", IsUpper},
      {"eq", Eq},             {"equalto", Eq},        {"==", Eq},               {"ne", Ne},
      {"!=", Ne},             {"lt", Lt},             {"lessthan", Lt},         {"<", Lt},
      {"le", Le},             {"<=", Le},             {"gt", Gt},               {"greaterthan", Gt},
      {">", Gt},              {"ge", Ge},             {">=", Ge},               {"in", In},
      {"sameas", SameAs},
  };
  return kTable;
}

}  // namespace

bool IsKnownTest(std::string_view name) {
  for (const auto& [n, fn] : TestTable()) {
    if (n == name) return true;
  }
  return false;
}

StatusOr<bool> ApplyTest(Interpreter& interp, const std::string& name, const Value& value,
                         const CallArgs& args) {
  for (const auto& [n, fn] : TestTable()) {
    if (n == name) return fn(interp, value, args);
  }
  return InvalidArgument("No test named '" + name + "'.");
}

}  // namespace cpm::jinja
