// Global functions a chat template can call: jinja2's range, dict, namespace, and the two
// transformers adds, raise_exception (message returned verbatim) and strftime_now.
#include <ctime>

#include "chat/builtins.h"
#include "chat/interpreter.h"

namespace cpm::jinja {
namespace {

using GlobalFn = StatusOr<Value> (*)(Interpreter&, const CallArgs&);

class Global : public Callable {
 public:
  Global(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(fn) {}
  StatusOr<Value> Call(Interpreter& interp, const CallArgs& args) const override {
    return fn_(interp, args);
  }
  std::string Name() const override { return name_; }

 private:
  std::string name_;
  GlobalFn fn_;
};

StatusOr<Value> Range(Interpreter& interp, const CallArgs& a) {
  std::vector<int64_t> n;
  for (const Value& v : a.positional) {
    if (!v.IsInt() && !v.IsBool()) {
      return InvalidArgument("'" + v.TypeName() + "' object cannot be interpreted as an integer");
    }
    n.push_back(v.AsInt());
  }
  if (n.empty() || n.size() > 3) return InvalidArgument("range expected 1 to 3 arguments");
  int64_t start = n.size() == 1 ? 0 : n[0];
  int64_t stop = n.size() == 1 ? n[0] : n[1];
  int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
  // jinja2's sandbox caps range() at MAX_RANGE = 100000 items. Counted in 128 bits: the span
  // of two int64 values (and a step of INT64_MIN) does not fit in 64.
  const __int128 span = static_cast<__int128>(stop) - start, st = step;
  const __int128 count = st > 0 ? (span > 0 ? (span + st - 1) / st : 0)
                                : (span < 0 ? (-span - st - 1) / -st : 0);
  if (count > 100000) {
    return InvalidArgument("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  }
  ValueList out;
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(Value::Int(static_cast<int64_t>(start + static_cast<__int128>(i) * step)));
  }
  (void)interp;
  return Value::List(std::move(out));
}

StatusOr<Value> Dict(Interpreter&, const CallArgs& a) {
  ValueDict d;
  for (const Value& v : a.positional) {
    if (!v.IsDict()) return InvalidArgument("dict() positional argument must be a mapping");
    for (const auto& [k, x] : v.AsDict().items) d.Set(k, x);
  }
  for (const auto& [k, v] : a.keyword) d.Set(Value::String(k), v);
  return Value::Dict(std::move(d));
}

StatusOr<Value> MakeNamespace(Interpreter& interp, const CallArgs& a) {
  ValueDict d;
  for (const Value& v : a.positional) {
    if (!v.IsDict()) return InvalidArgument("namespace() positional argument must be a mapping");
    for (const auto& [k, x] : v.AsDict().items) d.Set(k, x);
  }
  for (const auto& [k, v] : a.keyword) d.Set(Value::String(k), v);
  Value ns = Value::Namespace(std::move(d));
  interp.TrackNamespace(ns);
  return ns;
}

StatusOr<Value> RaiseException(Interpreter& interp, const CallArgs& a) {
  const Value* msg = a.Get(0, "message");
  return interp.Raise(msg ? msg->ToStr() : std::string());
}

StatusOr<Value> StrftimeNow(Interpreter&, const CallArgs& a) {
  const Value* fmt = a.Get(0, "format");
  if (!fmt || !fmt->IsString()) return InvalidArgument("strftime_now() needs a format string");
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), fmt->AsString().c_str(), &local);
  return Value::String(std::string(buf, n));
}

}  // namespace

std::unordered_map<std::string, Value> MakeGlobals() {
  std::unordered_map<std::string, Value> g;
  auto add = [&g](const char* name, GlobalFn fn) {
    g[name] = Value::Function(std::make_shared<Global>(name, fn));
  };
  add("range", Range);
  add("dict", Dict);
  add("namespace", MakeNamespace);
  add("raise_exception", RaiseException);
  add("strftime_now", StrftimeNow);
  return g;
}

}  // namespace cpm::jinja
