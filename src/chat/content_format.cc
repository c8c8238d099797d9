// vLLM's content-format detection (vllm/renderers/hf.py) over this interpreter's syntax tree.
#include "chat/content_format.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace cpm::jinja {
namespace {

// Every `set`, `for` and `macro` statement of the template and every call expression, nested
// ones (macros, call and filter blocks, branches, loop bodies) included.
struct Statements {
  std::vector<const Stmt*> sets, loops, macros;
  std::vector<const Expr*> calls;
};

void CollectCalls(const Expr* e, std::vector<const Expr*>* calls) {
  if (e == nullptr) return;
  if (e->kind == Expr::Kind::kCall) calls->push_back(e);
  CollectCalls(e->operand.get(), calls);
  for (const ExprPtr& item : e->items) CollectCalls(item.get(), calls);
  for (const ExprPtr& part : e->slice) CollectCalls(part.get(), calls);
  for (const ExprPtr& arg : e->args.positional) CollectCalls(arg.get(), calls);
  for (const auto& [name, arg] : e->args.keyword) CollectCalls(arg.get(), calls);
}

void Collect(const Body& body, Statements* out) {
  for (const StmtPtr& s : body) {
    if (s->kind == Stmt::Kind::kSet) out->sets.push_back(s.get());
    if (s->kind == Stmt::Kind::kFor) out->loops.push_back(s.get());
    if (s->kind == Stmt::Kind::kMacro) out->macros.push_back(s.get());
    CollectCalls(s->expr.get(), &out->calls);
    CollectCalls(s->filter.get(), &out->calls);
    for (const ExprPtr& c : s->conditions) CollectCalls(c.get(), &out->calls);
    for (const Body& b : s->bodies) Collect(b, out);
    Collect(s->body, out);
    Collect(s->else_body, out);
  }
}

bool IsVar(const Expr* e, const std::string& name) {
  return e != nullptr && e->kind == Expr::Kind::kName && e->name == name;
}

// name['key'] or name.key.
bool IsAttr(const Expr* e, const std::string& name, const std::string& key) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kGetItem) {
    return IsVar(e->operand.get(), name) && !e->items.empty() &&
           e->items[0]->kind == Expr::Kind::kLiteral && e->items[0]->value.IsString() &&
           e->items[0]->value.AsString() == key;
  }
  return e->kind == Expr::Kind::kGetAttr && IsVar(e->operand.get(), name) && e->name == key;
}

// The variable (or its `key` item), possibly under filters, tests or a slice.
bool IsVarOrElems(const Expr* e, const std::string& name, const std::string* key = nullptr) {
  if (e == nullptr) return false;
  if (e->kind == Expr::Kind::kFilter || e->kind == Expr::Kind::kTest ||
      e->kind == Expr::Kind::kSlice) {
    return IsVarOrElems(e->operand.get(), name, key);
  }
  return key ? IsAttr(e, name, *key) : IsVar(e, name);
}

// A loop's single target name ("" for tuple or namespace targets).
std::string LoopName(const Stmt* loop) {
  const Target& t = loop->target;
  return !t.is_tuple && t.attr.empty() && t.names.size() == 1 ? t.names[0] : std::string();
}

}  // namespace

ContentFormat DetectContentFormat(const Body& template_body) {
  Statements all;
  Collect(template_body, &all);
  // `messages` and every variable assigned from it (or from one so assigned).
  std::vector<std::string> messages = {"messages"};
  std::deque<std::string> todo = {"messages"};
  while (!todo.empty()) {
    const std::string related = todo.front();
    todo.pop_front();
    for (const Stmt* set : all.sets) {
      if (!IsVarOrElems(set->expr.get(), related)) continue;
      const Target& t = set->target;
      // vLLM asserts a plain name there and falls back to "string" when it does not hold.
      if (t.is_tuple || !t.attr.empty() || t.names.size() != 1) return ContentFormat::kString;
      const std::string& lhs = t.names[0];
      if (std::find(messages.begin(), messages.end(), lhs) == messages.end()) {
        messages.push_back(lhs);
        todo.push_back(lhs);
      }
    }
  }
  // The loops over them give the message variables.
  std::vector<std::string> message_vars;
  for (const Stmt* loop : all.loops) {
    const std::string target = LoopName(loop);
    for (const std::string& m : messages) {
      if (!IsVarOrElems(loop->expr.get(), m)) continue;
      if (target.empty()) return ContentFormat::kString;  // vLLM's failed assertion, as above
      message_vars.push_back(target);
      break;
    }
  }
  // The variables holding a message's content: one named `content`, and each macro parameter
  // a call passes a message's content to (vLLM's rule for a `render_content(m.content)` macro
  // whatever its parameter's name).
  static const std::string kContent = "content";
  const auto is_content = [&](const Expr* e) {
    return std::any_of(message_vars.begin(), message_vars.end(),
                       [&](const std::string& m) { return IsVarOrElems(e, m, &kContent); });
  };
  std::vector<std::string> content_vars = {kContent};
  for (const Expr* call : all.calls) {
    if (call->operand == nullptr || call->operand->kind != Expr::Kind::kName) continue;
    for (const Stmt* macro : all.macros) {
      if (macro->name != call->operand->name) continue;
      for (size_t i = 0; i < call->args.positional.size() && i < macro->params.size(); ++i) {
        if (is_content(call->args.positional[i].get())) {
          content_vars.push_back(macro->params[i].name);
        }
      }
      for (const auto& [name, arg] : call->args.keyword) {
        if (is_content(arg.get())) content_vars.push_back(name);
      }
    }
  }
  // The first loop (in the template's order) over a message's content, or over one of those
  // variables: openai where its target is a name (vLLM asserts one).
  for (const Stmt* loop : all.loops) {
    const bool over_content =
        is_content(loop->expr.get()) ||
        std::any_of(content_vars.begin(), content_vars.end(),
                    [&](const std::string& v) { return IsVarOrElems(loop->expr.get(), v); });
    if (over_content) {
      return LoopName(loop).empty() ? ContentFormat::kString : ContentFormat::kOpenAi;
    }
  }
  return ContentFormat::kString;
}

}  // namespace cpm::jinja
