// Statement execution and expression evaluation with jinja2's runtime semantics (default
// Undefined, sandboxed attribute lookup, loop scoping). Built-in filters, tests and operators
// live in their own files; this one is the tree walk.
#include "chat/interpreter.h"

#include "chat/builtins.h"
#include "chat/text_util.h"

namespace cpm::jinja {
namespace {

// A macro value: the definition plus the scope it was defined in. The scope holds the macro,
// so the macro only holds the scope weakly (no reference cycle); the Interpreter keeps defining
// scopes alive until the render ends.
class MacroFn : public Callable {
 public:
  MacroFn(const Stmt* def, std::weak_ptr<Frame> closure) : def_(def), closure_(std::move(closure)) {}
  StatusOr<Value> Call(Interpreter& interp, const CallArgs& args) const override {
    std::shared_ptr<Frame> closure = closure_.lock();
    if (!closure) return InvalidArgument("macro '" + Name() + "' called after its render ended");
    return interp.CallMacro(*def_, closure, args, nullptr);
  }
  std::string Name() const override { return def_->name.empty() ? "caller" : def_->name; }

 private:
  const Stmt* def_;
  std::weak_ptr<Frame> closure_;
};

// loop.cycle(a, b, ...): the argument at index0 modulo the count.
class CycleFn : public Callable {
 public:
  explicit CycleFn(int64_t index0) : index0_(index0) {}
  StatusOr<Value> Call(Interpreter&, const CallArgs& args) const override {
    if (args.positional.empty()) return InvalidArgument("no items for cycling given");
    return args.positional[static_cast<size_t>(index0_) % args.positional.size()];
  }
  std::string Name() const override { return "cycle"; }

 private:
  int64_t index0_;
};

// The parser lets an unknown filter through only inside an if or a conditional expression;
// jinja2 raises this TemplateRuntimeError when such a filter is reached.
Status CheckFilterExists(const std::string& name) {
  if (IsKnownFilter(name)) return OkStatus();
  return InvalidArgument("No filter named '" + name + "' found.");
}

}  // namespace

Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return InvalidArgument(hint.empty() ? "undefined value" : hint);
}

Interpreter::~Interpreter() {
  // Break the cycles a render can build: scopes that hold macros (which hold values that may
  // hold the scopes' namespaces), and namespaces that contain themselves.
  for (Value& ns : namespaces_) ns.NamespaceAttrs().items.clear();
  for (auto& frame : macro_scopes_) frame->vars.clear();
}

void Interpreter::TrackNamespace(const Value& ns) { namespaces_.push_back(ns); }

Status Interpreter::Raise(std::string message) {
  raised_ = true;
  return InvalidArgument(std::move(message));
}

Status Interpreter::CheckSize(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return ResourceExhausted("chat template output exceeds " +
                             std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return OkStatus();
}

Status Interpreter::Tick() {
  if (++steps_ > limits_.max_steps) {
    return ResourceExhausted("chat template exceeded " + std::to_string(limits_.max_steps) +
                             " steps");
  }
  return OkStatus();
}

Status Interpreter::Append(std::string* out, const std::string& text) {
  CPM_RETURN_IF_ERROR(CheckSize(out->size() + text.size()));
  out->append(text);
  return OkStatus();
}

Status Interpreter::Located(const Status& s, int line) const {
  if (s.ok() || raised_) return s;
  if (s.message().rfind("chat template line", 0) == 0) return s;
  return Status(s.code(), "chat template line " + std::to_string(line) + ": " + s.message());
}

StatusOr<std::string> Interpreter::Render(const Body& body, const ValueDict& context) {
  globals_ = MakeGlobals();
  auto frame = std::make_shared<Frame>();
  for (const auto& [k, v] : context.items) {
    if (k.IsString()) frame->vars[k.AsString()] = v;
  }
  std::string out;
  CPM_ASSIGN_OR_RETURN(Flow flow, Exec(body, frame, &out));
  (void)flow;
  return out;
}

Value Interpreter::Lookup(const std::string& name, const Frame& frame) const {
  for (const Frame* f = &frame; f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  auto it = globals_.find(name);
  if (it != globals_.end()) return it->second;
  return Value::Undefined("'" + name + "' is undefined");
}

StatusOr<Interpreter::Flow> Interpreter::Exec(const Body& body, const std::shared_ptr<Frame>& frame,
                                              std::string* out) {
  for (const StmtPtr& s : body) {
    CPM_RETURN_IF_ERROR(Tick());
    StatusOr<Flow> flow = ExecStmt(*s, frame, out);
    if (!flow.ok()) return Located(flow.status(), s->line);
    if (*flow != Flow::kNormal) return *flow;
  }
  return Flow::kNormal;
}

StatusOr<Interpreter::Flow> Interpreter::ExecStmt(const Stmt& s, const std::shared_ptr<Frame>& frame,
                                                  std::string* out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      CPM_RETURN_IF_ERROR(Append(out, s.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, frame));
      CPM_RETURN_IF_ERROR(Append(out, v.ToStr()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (size_t i = 0; i < s.conditions.size(); ++i) {
        CPM_ASSIGN_OR_RETURN(Value c, Eval(*s.conditions[i], frame));
        if (c.Truthy()) return Exec(s.bodies[i], frame, out);
      }
      return Exec(s.else_body, frame, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, frame, out);
    case Stmt::Kind::kSet: {
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*s.expr, frame));
      CPM_RETURN_IF_ERROR(Assign(s.target, std::move(v), *frame, s));
      return Flow::kNormal;
    }
    case Stmt::Kind::kSetBlock: {
      std::string captured;
      auto inner = std::make_shared<Frame>();
      inner->parent = frame;
      CPM_ASSIGN_OR_RETURN(Flow flow, Exec(s.body, inner, &captured));
      (void)flow;
      Value v = Value::String(std::move(captured));
      if (s.filter) {
        CPM_ASSIGN_OR_RETURN(v, ApplyFilterChain(*s.filter, std::move(v), frame));
      }
      CPM_RETURN_IF_ERROR(Assign(s.target, std::move(v), *frame, s));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      macro_scopes_.push_back(frame);
      frame->vars[s.name] = Value::Function(std::make_shared<MacroFn>(&s, frame));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      // The body becomes `caller`, a macro with the block's parameters.
      macro_scopes_.push_back(frame);
      Value caller = Value::Function(std::make_shared<MacroFn>(&s, frame));
      const Expr& call = *s.expr;
      CPM_ASSIGN_OR_RETURN(Value callee, Eval(*call.operand, frame));
      CPM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call.args, frame));
      if (!callee.IsCallable()) {
        if (callee.IsUndefined()) return UndefinedError(callee);
        return InvalidArgument("'" + callee.TypeName() + "' object is not callable");
      }
      args.keyword.emplace_back("caller", caller);
      CPM_ASSIGN_OR_RETURN(Value result, callee.AsCallable().Call(*this, args));
      CPM_RETURN_IF_ERROR(Append(out, result.ToStr()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      std::string captured;
      CPM_ASSIGN_OR_RETURN(Flow flow, Exec(s.body, frame, &captured));
      (void)flow;
      CPM_ASSIGN_OR_RETURN(Value v, ApplyFilterChain(*s.filter, Value::String(std::move(captured)), frame));
      CPM_RETURN_IF_ERROR(Append(out, v.ToStr()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
    case Stmt::Kind::kScope:
      return Exec(s.body, frame, out);
  }
  return Flow::kNormal;
}

Status Interpreter::Assign(const Target& target, Value value, Frame& frame, const Stmt& at) {
  if (!target.attr.empty()) {
    Value ns = Lookup(target.names[0], frame);
    if (!ns.IsNamespace()) {
      return InvalidArgument("cannot assign attribute on non-namespace object");
    }
    Value key = Value::String(target.attr);
    ns.NamespaceAttrs().Set(std::move(key), std::move(value));
    return OkStatus();
  }
  if (!target.is_tuple) {
    frame.vars[target.names[0]] = std::move(value);
    return OkStatus();
  }
  CPM_ASSIGN_OR_RETURN(ValueList items, Iterate(value));
  if (items.size() != target.names.size()) {
    return InvalidArgument(items.size() < target.names.size()
                               ? "not enough values to unpack (expected " +
                                     std::to_string(target.names.size()) + ", got " +
                                     std::to_string(items.size()) + ")"
                               : "too many values to unpack (expected " +
                                     std::to_string(target.names.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) frame.vars[target.names[i]] = std::move(items[i]);
  return OkStatus();
}

StatusOr<ValueList> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return ValueList{};  // jinja2's default Undefined iterates as empty
    case Value::Kind::kList:
      return v.AsList();
    case Value::Kind::kDict: {
      ValueList keys;
      for (const auto& [k, val] : v.AsDict().items) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (auto& cp : SplitCodePoints(v.AsString())) chars.push_back(Value::String(std::move(cp)));
      return chars;
    }
    default:
      return InvalidArgument("'" + v.TypeName() + "' object is not iterable");
  }
}

StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame,
                                                 std::string* out) {
  CPM_ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr, frame));
  CPM_ASSIGN_OR_RETURN(ValueList items, Iterate(iterable));
  if (s.filter) {
    // `for x in xs if cond`: the filter sees only the loop target, and loop.* counts survivors.
    ValueList kept;
    for (Value& item : items) {
      CPM_RETURN_IF_ERROR(Tick());
      auto scope = std::make_shared<Frame>();
      scope->parent = frame;
      CPM_RETURN_IF_ERROR(Assign(s.target, item, *scope, s));
      CPM_ASSIGN_OR_RETURN(Value keep, Eval(*s.filter, scope));
      if (keep.Truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  // jinja2 clears its "run the else" flag at the end of the loop body, so the else branch
  // also runs when no iteration got there: a break in the first iteration, or a continue in
  // every one.
  bool body_completed = false;
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    CPM_RETURN_IF_ERROR(Tick());
    auto scope = std::make_shared<Frame>();
    scope->parent = frame;
    if (s.uses_loop) scope->vars["loop"] = MakeLoop(items, i);
    CPM_RETURN_IF_ERROR(Assign(s.target, items[i], *scope, s));
    CPM_ASSIGN_OR_RETURN(Flow flow, Exec(s.body, scope, out));
    if (flow == Flow::kNormal) body_completed = true;
    if (flow == Flow::kBreak) break;
  }
  if (!body_completed && !s.else_body.empty()) {
    auto scope = std::make_shared<Frame>();
    scope->parent = frame;
    CPM_ASSIGN_OR_RETURN(Flow flow, Exec(s.else_body, scope, out));
    (void)flow;
  }
  return Flow::kNormal;
}

Value Interpreter::MakeLoop(const ValueList& items, int64_t i) {
  const int64_t n = static_cast<int64_t>(items.size());
  ValueDict loop;
  auto put = [&loop](const char* key, Value v) { loop.items.emplace_back(Value::String(key), std::move(v)); };
  put("index", Value::Int(i + 1));
  put("index0", Value::Int(i));
  put("revindex", Value::Int(n - i));
  put("revindex0", Value::Int(n - i - 1));
  put("first", Value::Bool(i == 0));
  put("last", Value::Bool(i == n - 1));
  put("length", Value::Int(n));
  put("depth", Value::Int(1));
  put("depth0", Value::Int(0));
  if (i > 0) put("previtem", items[i - 1]);
  if (i + 1 < n) put("nextitem", items[i + 1]);
  put("cycle", Value::Function(std::make_shared<CycleFn>(i)));
  return Value::Dict(std::move(loop));
}

StatusOr<Value> Interpreter::CallMacro(const Stmt& macro, const std::shared_ptr<Frame>& closure,
                                       const CallArgs& args, const Value* caller) {
  if (call_depth_ >= limits_.max_call_depth) {
    return ResourceExhausted("chat template macro recursion deeper than " +
                             std::to_string(limits_.max_call_depth));
  }
  auto scope = std::make_shared<Frame>();
  scope->parent = closure;
  const auto& params = macro.params;
  if (args.positional.size() > params.size()) {
    return InvalidArgument("macro '" + macro.name + "' takes not more than " +
                           std::to_string(params.size()) + " argument(s)");
  }
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    scope->vars[params[i].name] = args.positional[i];
    bound[i] = true;
  }
  for (const auto& [key, value] : args.keyword) {
    bool found = false;
    for (size_t i = 0; i < params.size(); ++i) {
      if (params[i].name == key) {
        scope->vars[key] = value;
        bound[i] = found = true;
      }
    }
    if (!found && key == "caller") {
      scope->vars["caller"] = value;
      found = true;
    }
    if (!found) return InvalidArgument("macro '" + macro.name + "' takes no keyword argument '" + key + "'");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    if (params[i].default_value) {
      CPM_ASSIGN_OR_RETURN(Value d, Eval(*params[i].default_value, scope));
      scope->vars[params[i].name] = std::move(d);
    } else {
      scope->vars[params[i].name] =
          Value::Undefined("parameter '" + params[i].name + "' was not provided");
    }
  }
  if (caller) scope->vars["caller"] = *caller;
  ++call_depth_;
  std::string out;
  StatusOr<Flow> flow = Exec(macro.body, scope, &out);
  --call_depth_;
  if (!flow.ok()) return flow.status();
  return Value::String(std::move(out));
}

StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  // jinja2: getattr(obj, name) first, then obj[name]; the sandbox hides "_" names.
  if (obj.IsUndefined()) return UndefinedError(obj);
  if (!name.empty() && name[0] == '_') return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
  Value method = GetMethod(obj, name);
  if (!method.IsUndefined()) return method;
  if (obj.IsDict()) {
    if (const Value* v = obj.AsDict().Find(name)) return *v;
  } else if (obj.IsNamespace()) {
    if (const Value* v = obj.NamespaceAttrs().Find(name)) return *v;
  } else if (obj.IsGroupTuple() && (name == "grouper" || name == "list")) {
    return obj.AsList()[name == "grouper" ? 0 : 1];
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute '" + name + "'");
}

StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  // jinja2: obj[key] first, then getattr(obj, key) for string keys.
  if (obj.IsUndefined()) return UndefinedError(obj);
  if (obj.IsDict()) {
    if (const Value* v = obj.AsDict().Find(key)) return *v;
  } else if (obj.IsNamespace()) {
    if (key.IsString()) {
      if (const Value* v = obj.NamespaceAttrs().Find(key.AsString())) return *v;
    }
  } else if ((obj.IsList() || obj.IsString()) && (key.IsInt() || key.IsBool())) {
    int64_t i = key.AsInt();
    if (obj.IsList()) {
      const ValueList& items = obj.AsList();
      int64_t n = static_cast<int64_t>(items.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
    } else {
      std::vector<std::string> cps = SplitCodePoints(obj.AsString());
      int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return Value::String(cps[static_cast<size_t>(i)]);
    }
    return Value::Undefined("'" + obj.TypeName() + " object' has no element " + key.ToStr());
  }
  if (key.IsString()) {
    Value method = GetMethod(obj, key.AsString());
    if (!method.IsUndefined()) return method;
  }
  return Value::Undefined("'" + obj.TypeName() + " object' has no attribute " + key.Repr());
}

StatusOr<Value> Interpreter::GetAttrPath(const Value& obj, const std::string& path) {
  // jinja2's make_attrgetter: dotted parts, digits index as integers, via getitem.
  Value cur = obj;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    Value key = digits ? Value::Int(std::stoll(part)) : Value::String(part);
    CPM_ASSIGN_OR_RETURN(cur, GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

StatusOr<CallArgs> Interpreter::EvalArgs(const Arguments& args, const std::shared_ptr<Frame>& frame) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) {
    CPM_ASSIGN_OR_RETURN(Value v, Eval(*e, frame));
    out.positional.push_back(std::move(v));
  }
  for (const auto& [k, e] : args.keyword) {
    CPM_ASSIGN_OR_RETURN(Value v, Eval(*e, frame));
    out.keyword.emplace_back(k, std::move(v));
  }
  return out;
}

StatusOr<Value> Interpreter::ApplyFilterChain(const Expr& f, Value input,
                                              const std::shared_ptr<Frame>& frame) {
  if (f.operand) {
    CPM_ASSIGN_OR_RETURN(input, ApplyFilterChain(*f.operand, std::move(input), frame));
  }
  CPM_RETURN_IF_ERROR(CheckFilterExists(f.name));
  CPM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(f.args, frame));
  return ApplyFilter(*this, f.name, input, args);
}

StatusOr<Value> Interpreter::EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame) {
  CPM_ASSIGN_OR_RETURN(Value callee, Eval(*e.operand, frame));
  CPM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, frame));
  if (!callee.IsCallable()) {
    if (callee.IsUndefined()) return UndefinedError(callee);
    return InvalidArgument("'" + callee.TypeName() + "' object is not callable");
  }
  return callee.AsCallable().Call(*this, args);
}

StatusOr<Value> Interpreter::EvalSlice(const Expr& e, const std::shared_ptr<Frame>& frame) {
  CPM_ASSIGN_OR_RETURN(Value obj, Eval(*e.operand, frame));
  std::optional<int64_t> parts[3];
  for (int i = 0; i < 3; ++i) {
    if (!e.slice[i]) continue;
    CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.slice[i], frame));
    if (v.IsNone()) continue;
    if (!v.IsInt() && !v.IsBool()) {
      return InvalidArgument("slice indices must be integers or None");
    }
    parts[i] = v.AsInt();
  }
  int64_t step = parts[2].value_or(1);
  if (step == 0) return InvalidArgument("slice step cannot be zero");
  if (obj.IsUndefined()) return UndefinedError(obj);
  if (obj.IsList()) {
    const ValueList& items = obj.AsList();
    ValueList out;
    for (size_t i : SliceIndices(static_cast<int64_t>(items.size()), parts[0], parts[1], step)) {
      out.push_back(items[i]);
    }
    return Value::List(std::move(out), obj.IsTuple());
  }
  if (obj.IsString()) {
    std::vector<std::string> cps = SplitCodePoints(obj.AsString());
    std::string out;
    for (size_t i : SliceIndices(static_cast<int64_t>(cps.size()), parts[0], parts[1], step)) {
      out += cps[i];
    }
    return Value::String(std::move(out));
  }
  return InvalidArgument("'" + obj.TypeName() + "' object is not subscriptable");
}

StatusOr<Value> Interpreter::EvalCompare(const Expr& e, const std::shared_ptr<Frame>& frame) {
  CPM_ASSIGN_OR_RETURN(Value left, Eval(*e.operand, frame));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    CPM_ASSIGN_OR_RETURN(Value right, Eval(*e.items[i], frame));
    const std::string& op = e.ops[i];
    bool result;
    if (op == "==") {
      result = Equals(left, right);
    } else if (op == "!=") {
      result = !Equals(left, right);
    } else if (op == "in" || op == "notin") {
      CPM_ASSIGN_OR_RETURN(bool c, Contains(right, left));
      result = op == "in" ? c : !c;
    } else {
      if (left.IsUndefined()) return UndefinedError(left);
      if (right.IsUndefined()) return UndefinedError(right);
      if (op == "<") {
        CPM_ASSIGN_OR_RETURN(result, LessThan(left, right));
      } else if (op == ">") {
        CPM_ASSIGN_OR_RETURN(result, LessThan(right, left));
      } else if (op == "<=") {
        CPM_ASSIGN_OR_RETURN(bool gt, LessThan(right, left));
        result = !gt;
      } else {
        CPM_ASSIGN_OR_RETURN(bool lt, LessThan(left, right));
        result = !lt;
      }
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

StatusOr<Value> Interpreter::Eval(const Expr& e, const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName:
      return Lookup(e.name, *frame);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      for (const ExprPtr& item : e.items) {
        CPM_ASSIGN_OR_RETURN(Value v, Eval(*item, frame));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      ValueDict dict;
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        CPM_ASSIGN_OR_RETURN(Value k, Eval(*e.items[i], frame));
        CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.items[i + 1], frame));
        dict.Set(std::move(k), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    case Expr::Kind::kGetAttr: {
      CPM_ASSIGN_OR_RETURN(Value obj, Eval(*e.operand, frame));
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      CPM_ASSIGN_OR_RETURN(Value obj, Eval(*e.operand, frame));
      CPM_ASSIGN_OR_RETURN(Value key, Eval(*e.items[0], frame));
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(e, frame);
    case Expr::Kind::kCall:
      return EvalCall(e, frame);
    case Expr::Kind::kFilter: {
      CPM_RETURN_IF_ERROR(CheckFilterExists(e.name));
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.operand, frame));
      CPM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, frame));
      return ApplyFilter(*this, e.name, v, args);
    }
    case Expr::Kind::kTest: {
      if (!IsKnownTest(e.name)) return InvalidArgument("No test named '" + e.name + "' found.");
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.operand, frame));
      CPM_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e.args, frame));
      CPM_ASSIGN_OR_RETURN(bool r, ApplyTest(*this, e.name, v, args));
      return Value::Bool(e.negated ? !r : r);
    }
    case Expr::Kind::kNot: {
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.operand, frame));
      return Value::Bool(!v.Truthy());
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      CPM_ASSIGN_OR_RETURN(Value v, Eval(*e.operand, frame));
      if (v.IsUndefined()) return UndefinedError(v);
      if (!v.IsNumber()) {
        return InvalidArgument("bad operand type for unary " +
                               std::string(e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" +
                               v.TypeName() + "'");
      }
      if (e.kind == Expr::Kind::kPos) return v.IsBool() ? Value::Int(v.AsInt()) : v;
      if (v.IsFloat()) return Value::Float(-v.AsDouble());
      return Value::Int(-v.AsInt());
    }
    case Expr::Kind::kBinary: {
      CPM_ASSIGN_OR_RETURN(Value l, Eval(*e.items[0], frame));
      CPM_ASSIGN_OR_RETURN(Value r, Eval(*e.items[1], frame));
      return BinaryOp(*this, e.name, l, r);
    }
    case Expr::Kind::kAnd: {
      CPM_ASSIGN_OR_RETURN(Value l, Eval(*e.items[0], frame));
      if (!l.Truthy()) return l;
      return Eval(*e.items[1], frame);
    }
    case Expr::Kind::kOr: {
      CPM_ASSIGN_OR_RETURN(Value l, Eval(*e.items[0], frame));
      if (l.Truthy()) return l;
      return Eval(*e.items[1], frame);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, frame);
    case Expr::Kind::kCondition: {
      CPM_ASSIGN_OR_RETURN(Value c, Eval(*e.items[1], frame));
      if (c.Truthy()) return Eval(*e.items[0], frame);
      if (e.items[2]) return Eval(*e.items[2], frame);
      return Value::Undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace cpm::jinja
