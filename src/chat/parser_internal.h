// Parser internals shared by parser.cc (statements) and parser_expr.cc (expressions): the
// recursive-descent Parser class over the lexer's tokens. Not part of the chat module's API.
#pragma once

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"
#include "chat/ast.h"
#include "chat/lexer.h"

namespace cpm::jinja::parser_internal {

// Deeply nested input must fail cleanly instead of overflowing the stack.
constexpr int kMaxNesting = 200;
// Operators, filters, tests, attributes, subscripts and calls of one tag: each folds the
// tree built so far under a new node, so a chain of them (`1 + 1 + ...`, `x|f|f...`) is as
// deep as it is long, and evaluating or freeing it recurses that deep. jinja2 fails such a
// template with a RecursionError.
constexpr int kMaxExpressionLinks = 2000;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  StatusOr<Body> ParseAll() {
    Body body;
    std::string end;
    CPM_RETURN_IF_ERROR(ParseBody({}, &body, &end));
    return body;
  }

 private:
  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Peek(size_t n = 1) const {
    return tokens_[std::min(pos_ + n, tokens_.size() - 1)];
  }
  void Advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(const char* op) const { return Cur().kind == TokenKind::kOp && Cur().value == op; }
  bool IsName(const char* name) const { return Cur().kind == TokenKind::kName && Cur().value == name; }
  // One more link of the current tag's expressions (kMaxExpressionLinks).
  Status Link() {
    if (++links_ > kMaxExpressionLinks) return Error("expression nested too deeply");
    return OkStatus();
  }
  Status Error(const std::string& message) const {
    return SyntaxError(Cur().line, Cur().column, message);
  }
  Status Unexpected() const;
  Status ExpectOp(const char* op) {
    if (!IsOp(op)) return Error(std::string("expected '") + op + "'" + Describe());
    Advance();
    return OkStatus();
  }
  Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Error("expected end of statement block" + Describe());
    Advance();
    return OkStatus();
  }
  StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Error("expected a name" + Describe());
    std::string name = Cur().value;
    Advance();
    return name;
  }
  std::string Describe() const;
  ExprPtr NewExpr(Expr::Kind kind, const Token& at) const {
    return std::make_unique<Expr>(kind, at.line, at.column);
  }

  // Parses statements until `{% <one of end_names>`; consumes that name and reports it.
  Status ParseBody(const std::set<std::string>& end_names, Body* body, std::string* end);
  Status ParseStatement(Body* body);
  Status ParseIf(const Token& at, Body* body);
  Status ParseFor(const Token& at, Body* body);
  Status ParseSet(const Token& at, Body* body);
  Status ParseMacro(const Token& at, Body* body);
  Status ParseCallBlock(const Token& at, Body* body);
  Status ParseFilterBlock(const Token& at, Body* body);
  Status ParseTarget(Target* target, bool allow_attr);
  Status ParseParams(std::vector<MacroParam>* params);

  StatusOr<ExprPtr> ParseTuple(bool with_condexpr, bool explicit_parens);
  StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  StatusOr<ExprPtr> ParseLeftAssoc(const char* word, Expr::Kind kind,
                                   StatusOr<ExprPtr> (Parser::*operand)());
  StatusOr<ExprPtr> ParseOr();
  StatusOr<ExprPtr> ParseAnd();
  StatusOr<ExprPtr> ParseNot();
  StatusOr<ExprPtr> ParseCompare();
  StatusOr<ExprPtr> ParseMath1();
  StatusOr<ExprPtr> ParseConcat();
  StatusOr<ExprPtr> ParseMath2();
  StatusOr<ExprPtr> ParsePow();
  StatusOr<ExprPtr> ParseUnary(bool with_filter);
  StatusOr<ExprPtr> ParsePrimary();
  StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  // `| name(args)`, the `|` current; a filter's or test's name may be dotted (`a.b`).
  StatusOr<ExprPtr> ParseOneFilter(ExprPtr node);
  StatusOr<std::string> ExpectDottedName();
  StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  Status ParseArgs(Arguments* args);
  bool IsTupleEnd() const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int links_ = 0;  // of the tag being parsed (ParseBody resets it at each tag)
};

// RAII nesting counter for recursive productions.
class DepthGuard {
 public:
  explicit DepthGuard(int* depth) : depth_(depth) { ++*depth_; }
  ~DepthGuard() { --*depth_; }
  bool TooDeep() const { return *depth_ > kMaxNesting; }

 private:
  int* depth_;
};

// True when `name` appears as a variable anywhere in the subtree (used to skip building
// `loop` objects for loops that never read them).
bool MentionsName(const Body& body, const std::string& name);
bool MentionsName(const Expr* e, const std::string& name);

// jinja2's compiler fails on an unknown filter or test, except inside an `if` statement or a
// conditional expression (its "soft" frames), where it is reported only if reached at render
// time. Loops, macros, call, set and filter blocks open a new frame, which is not soft.
Status CheckFilterAndTestNames(const Body& body, bool soft);

}  // namespace cpm::jinja::parser_internal
