// vLLM's content-format detection (vllm/renderers/hf.py) over this interpreter's syntax tree.
#include "chat/content_format.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

namespace cpm::jinja {
namespace {

// Every `set` and `for` statement of the template, nested ones (macros, call and filter
// blocks, branches, loop bodies) included.
struct Statements {
  std::vector<const Stmt*> sets, loops;
};

void Collect(const Body& body, Statements* out) {
  for (const StmtPtr& s : body) {
    if (s->kind == Stmt::Kind::kSet) out->sets.push_back(s.get());
    if (s->kind == Stmt::Kind::kFor) out->loops.push_back(s.get());
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
      const Target& t = set->target;
      if (t.is_tuple || !t.attr.empty() || t.names.size() != 1) continue;
      if (!IsVarOrElems(set->expr.get(), related)) continue;
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
      if (!target.empty() && IsVarOrElems(loop->expr.get(), m)) {
        message_vars.push_back(target);
        break;
      }
    }
  }
  // A loop over a message's content, or over a variable named `content`.
  static const std::string kContent = "content";
  for (const Stmt* loop : all.loops) {
    if (IsVar(loop->expr.get(), kContent)) return ContentFormat::kOpenAi;
    for (const std::string& m : message_vars) {
      if (IsVarOrElems(loop->expr.get(), m, &kContent)) return ContentFormat::kOpenAi;
    }
  }
  return ContentFormat::kString;
}

}  // namespace cpm::jinja
