// Interpreter: renders a parsed template against a context. One Interpreter per render call;
// it owns the scopes, the output limits and the step budget, so parsed templates stay shared
// and immutable.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "chat/ast.h"
#include "chat/value.h"

namespace cpm::jinja {

// Bounds that keep a hostile template from running forever or exhausting memory.
struct RenderLimits {
  size_t max_output_bytes = 16u << 20;  // also bounds any one string or list built
  int max_call_depth = 100;             // macro recursion
  uint64_t max_steps = 2'000'000;       // statements + loop iterations (~40 per message)
};

// A variable scope. Loops and macro calls open child scopes, as jinja2's do, so `set` inside
// them does not leak out (that is what namespace() is for).
struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};

class Interpreter {
 public:
  explicit Interpreter(RenderLimits limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  StatusOr<std::string> Render(const Body& body, const ValueDict& context);

  // Hooks for filters, tests, methods and callables.
  StatusOr<Value> CallMacro(const Stmt& macro, const std::shared_ptr<Frame>& closure,
                            const CallArgs& args, const Value* caller);
  StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // jinja2 sandbox's undefined-aware attribute path for selectattr/map/sort ("a.b" or "a.0").
  StatusOr<Value> GetAttrPath(const Value& obj, const std::string& path);
  // Items of any iterable, as Python's iter() would yield them.
  StatusOr<ValueList> Iterate(const Value& v);
  // namespace() registers what it creates so the render can break self-references at the end.
  void TrackNamespace(const Value& ns);
  // Called by raise_exception(): its message must reach the caller verbatim.
  Status Raise(std::string message);
  const RenderLimits& limits() const { return limits_; }
  // Fails once a string or list would grow past the output limit.
  Status CheckSize(size_t bytes) const;

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  StatusOr<Flow> Exec(const Body& body, const std::shared_ptr<Frame>& frame, std::string* out);
  StatusOr<Flow> ExecStmt(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  StatusOr<Flow> ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame, std::string* out);
  // The `loop` object of iteration `i` (index, first, previtem, cycle, ...).
  static Value MakeLoop(const ValueList& items, int64_t i);
  Status Assign(const Target& target, Value value, Frame& frame, const Stmt& at);
  StatusOr<Value> Eval(const Expr& e, const std::shared_ptr<Frame>& frame);
  StatusOr<Value> EvalCall(const Expr& e, const std::shared_ptr<Frame>& frame);
  StatusOr<Value> EvalSlice(const Expr& e, const std::shared_ptr<Frame>& frame);
  StatusOr<Value> EvalCompare(const Expr& e, const std::shared_ptr<Frame>& frame);
  StatusOr<CallArgs> EvalArgs(const Arguments& args, const std::shared_ptr<Frame>& frame);
  // Applies the filter chain `f` (operand slot empty) to `input`.
  StatusOr<Value> ApplyFilterChain(const Expr& f, Value input, const std::shared_ptr<Frame>& frame);
  Value Lookup(const std::string& name, const Frame& frame) const;
  Status Tick();
  Status Append(std::string* out, const std::string& text);
  // Adds "chat template line L: " to errors from the evaluator, but never to raise_exception.
  Status Located(const Status& s, int line) const;

  RenderLimits limits_;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  bool raised_ = false;
  std::unordered_map<std::string, Value> globals_;
  std::vector<std::shared_ptr<Frame>> macro_scopes_;  // scopes that defined macros
  std::vector<Value> namespaces_;
};

}  // namespace cpm::jinja
