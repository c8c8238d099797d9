// Recursive-descent parser following jinja2's parser.py precedence: condexpr < or < and < not <
// compare < + - < ~ < * / // % < ** < unary < postfix/filters/tests.
#include "chat/parser.h"

#include <charconv>
#include <set>

#include "chat/builtins.h"
#include "chat/lexer.h"

namespace cpm::jinja {
namespace {

// Deeply nested input must fail cleanly instead of overflowing the stack.
constexpr int kMaxNesting = 200;

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
  StatusOr<ExprPtr> ParseFilter(ExprPtr node);
  StatusOr<ExprPtr> ParseTest(ExprPtr node);
  StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  Status ParseArgs(Arguments* args);
  bool IsTupleEnd() const;

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
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

std::string Parser::Describe() const {
  switch (Cur().kind) {
    case TokenKind::kEof: return ", got end of template";
    case TokenKind::kBlockEnd: return ", got '%}'";
    case TokenKind::kVarEnd: return ", got '}}'";
    case TokenKind::kBlockBegin: return ", got '{%'";
    case TokenKind::kVarBegin: return ", got '{{'";
    case TokenKind::kText: return ", got text";
    case TokenKind::kString: return ", got a string";
    default: return ", got '" + Cur().value + "'";
  }
}

Status Parser::Unexpected() const {
  return Error("unexpected " + Describe().substr(6));
}

Status Parser::ParseBody(const std::set<std::string>& end_names, Body* body, std::string* end) {
  DepthGuard guard(&depth_);
  if (guard.TooDeep()) return Error("blocks nested too deeply");
  while (true) {
    const Token& t = Cur();
    switch (t.kind) {
      case TokenKind::kEof:
        if (!end_names.empty()) {
          std::string names;
          for (const auto& n : end_names) names += (names.empty() ? "'" : " or '") + n + "'";
          return Error("unexpected end of template, expected " + names);
        }
        return OkStatus();
      case TokenKind::kText: {
        auto s = std::make_unique<Stmt>(Stmt::Kind::kText, t.line, t.column);
        s->text = t.value;
        body->push_back(std::move(s));
        Advance();
        break;
      }
      case TokenKind::kVarBegin: {
        auto s = std::make_unique<Stmt>(Stmt::Kind::kOutput, t.line, t.column);
        Advance();
        CPM_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
        if (Cur().kind != TokenKind::kVarEnd) return Error("expected '}}'" + Describe());
        Advance();
        body->push_back(std::move(s));
        break;
      }
      case TokenKind::kBlockBegin: {
        const Token& name = Peek();
        if (name.kind == TokenKind::kName && end_names.count(name.value)) {
          Advance();
          *end = name.value;
          Advance();
          return OkStatus();
        }
        if (name.kind == TokenKind::kName &&
            (name.value.rfind("end", 0) == 0 || name.value == "elif" || name.value == "else")) {
          std::string expected;
          for (const auto& n : end_names) expected += (expected.empty() ? "'" : " or '") + n + "'";
          return SyntaxError(name.line, name.column,
                             "unexpected '" + name.value + "'" +
                                 (expected.empty() ? std::string() : ", expected " + expected));
        }
        CPM_RETURN_IF_ERROR(ParseStatement(body));
        break;
      }
      default:
        return Unexpected();
    }
  }
}

Status Parser::ParseStatement(Body* body) {
  Advance();  // {%
  const Token at = Cur();
  if (at.kind != TokenKind::kName) return Error("expected a tag name" + Describe());
  const std::string& tag = at.value;
  Advance();
  if (tag == "if") return ParseIf(at, body);
  if (tag == "for") return ParseFor(at, body);
  if (tag == "set") return ParseSet(at, body);
  if (tag == "macro") return ParseMacro(at, body);
  if (tag == "call") return ParseCallBlock(at, body);
  if (tag == "filter") return ParseFilterBlock(at, body);
  if (tag == "break" || tag == "continue") {
    body->push_back(std::make_unique<Stmt>(
        tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, at.line, at.column));
    return ExpectBlockEnd();
  }
  if (tag == "generation") {
    // transformers' AssistantTracker tag: renders its body unchanged.
    CPM_RETURN_IF_ERROR(ExpectBlockEnd());
    auto s = std::make_unique<Stmt>(Stmt::Kind::kScope, at.line, at.column);
    std::string end;
    CPM_RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->body, &end));
    body->push_back(std::move(s));
    return ExpectBlockEnd();
  }
  static const std::set<std::string> kUnsupported = {
      "include", "import", "from", "extends", "block", "do", "with", "autoescape", "trans"};
  if (kUnsupported.count(tag)) {
    return SyntaxError(at.line, at.column, "unsupported tag '" + tag + "'");
  }
  return SyntaxError(at.line, at.column, "unknown tag '" + tag + "'");
}

Status Parser::ParseIf(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kIf, at.line, at.column);
  while (true) {
    CPM_ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, false));
    CPM_RETURN_IF_ERROR(ExpectBlockEnd());
    s->conditions.push_back(std::move(cond));
    s->bodies.emplace_back();
    std::string end;
    CPM_RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &s->bodies.back(), &end));
    if (end == "elif") continue;
    if (end == "else") {
      CPM_RETURN_IF_ERROR(ExpectBlockEnd());
      CPM_RETURN_IF_ERROR(ParseBody({"endif"}, &s->else_body, &end));
    }
    break;
  }
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

Status Parser::ParseTarget(Target* target, bool allow_attr) {
  bool parens = IsOp("(");
  if (parens) Advance();
  CPM_ASSIGN_OR_RETURN(std::string first, ExpectName());
  target->names.push_back(first);
  if (allow_attr && !parens && IsOp(".")) {
    Advance();
    CPM_ASSIGN_OR_RETURN(target->attr, ExpectName());
    return OkStatus();
  }
  while (IsOp(",")) {
    target->is_tuple = true;
    Advance();
    if (Cur().kind != TokenKind::kName || IsName("in")) break;
    CPM_ASSIGN_OR_RETURN(std::string next, ExpectName());
    target->names.push_back(next);
  }
  if (parens) {
    target->is_tuple = true;
    CPM_RETURN_IF_ERROR(ExpectOp(")"));
  }
  return OkStatus();
}

bool MentionsName(const Expr* e, const std::string& name);

bool MentionsName(const Body& body, const std::string& name) {
  for (const StmtPtr& s : body) {
    if (MentionsName(s->expr.get(), name) || MentionsName(s->filter.get(), name)) return true;
    for (const ExprPtr& c : s->conditions) {
      if (MentionsName(c.get(), name)) return true;
    }
    for (const Body& b : s->bodies) {
      if (MentionsName(b, name)) return true;
    }
    for (const MacroParam& p : s->params) {
      if (MentionsName(p.default_value.get(), name)) return true;
    }
    if (MentionsName(s->body, name) || MentionsName(s->else_body, name)) return true;
  }
  return false;
}

bool MentionsName(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::kName && e->name == name) return true;
  if (MentionsName(e->operand.get(), name)) return true;
  for (const ExprPtr& i : e->items) {
    if (MentionsName(i.get(), name)) return true;
  }
  for (const ExprPtr& i : e->slice) {
    if (MentionsName(i.get(), name)) return true;
  }
  for (const ExprPtr& i : e->args.positional) {
    if (MentionsName(i.get(), name)) return true;
  }
  for (const auto& [k, v] : e->args.keyword) {
    if (MentionsName(v.get(), name)) return true;
  }
  return false;
}

Status Parser::ParseFor(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kFor, at.line, at.column);
  CPM_RETURN_IF_ERROR(ParseTarget(&s->target, false));
  if (!IsName("in")) return Error("expected 'in'" + Describe());
  Advance();
  CPM_ASSIGN_OR_RETURN(s->expr, ParseTuple(false, false));
  if (IsName("if")) {
    Advance();
    CPM_ASSIGN_OR_RETURN(s->filter, ParseExpression(true));
  }
  if (IsName("recursive")) return Error("recursive loops are not supported");
  CPM_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  CPM_RETURN_IF_ERROR(ParseBody({"endfor", "else"}, &s->body, &end));
  if (end == "else") {
    CPM_RETURN_IF_ERROR(ExpectBlockEnd());
    CPM_RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
  }
  s->uses_loop = MentionsName(s->body, "loop") || MentionsName(s->filter.get(), "loop");
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

Status Parser::ParseSet(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kSet, at.line, at.column);
  CPM_RETURN_IF_ERROR(ParseTarget(&s->target, true));
  if (IsOp("=")) {
    Advance();
    CPM_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
    body->push_back(std::move(s));
    return ExpectBlockEnd();
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (IsOp("|")) {
    CPM_ASSIGN_OR_RETURN(s->filter, ParseFilter(nullptr));
  }
  CPM_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  CPM_RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

Status Parser::ParseParams(std::vector<MacroParam>* params) {
  CPM_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!params->empty()) CPM_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    MacroParam p;
    CPM_ASSIGN_OR_RETURN(p.name, ExpectName());
    if (IsOp("=")) {
      Advance();
      CPM_ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
    } else if (!params->empty() && params->back().default_value) {
      return Error("non-default argument follows default argument");
    }
    params->push_back(std::move(p));
  }
  Advance();
  return OkStatus();
}

Status Parser::ParseMacro(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kMacro, at.line, at.column);
  CPM_ASSIGN_OR_RETURN(s->name, ExpectName());
  CPM_RETURN_IF_ERROR(ParseParams(&s->params));
  CPM_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  CPM_RETURN_IF_ERROR(ParseBody({"endmacro"}, &s->body, &end));
  if (Cur().kind == TokenKind::kName && Cur().value == s->name) Advance();
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

Status Parser::ParseCallBlock(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kCallBlock, at.line, at.column);
  if (IsOp("(")) CPM_RETURN_IF_ERROR(ParseParams(&s->params));
  CPM_ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
  if (s->expr->kind != Expr::Kind::kCall) {
    return SyntaxError(s->expr->line, s->expr->column, "expected a call in {% call %}");
  }
  CPM_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  CPM_RETURN_IF_ERROR(ParseBody({"endcall"}, &s->body, &end));
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

Status Parser::ParseFilterBlock(const Token& at, Body* body) {
  auto s = std::make_unique<Stmt>(Stmt::Kind::kFilterBlock, at.line, at.column);
  // `{% filter upper | trim %}`: the first filter has no leading pipe.
  const Token name_at = Cur();
  CPM_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (!IsKnownFilter(name)) return SyntaxError(name_at.line, name_at.column, "no filter named '" + name + "'");
  auto first = NewExpr(Expr::Kind::kFilter, name_at);
  first->name = std::move(name);
  if (IsOp("(")) CPM_RETURN_IF_ERROR(ParseArgs(&first->args));
  CPM_ASSIGN_OR_RETURN(s->filter, ParseFilter(std::move(first)));
  CPM_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  CPM_RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->body, &end));
  body->push_back(std::move(s));
  return ExpectBlockEnd();
}

bool Parser::IsTupleEnd() const {
  TokenKind k = Cur().kind;
  return k == TokenKind::kBlockEnd || k == TokenKind::kVarEnd || k == TokenKind::kEof ||
         IsOp(")") || IsOp("]") || IsOp("}") || IsName("in") || IsName("if") ||
         IsName("recursive");
}

StatusOr<ExprPtr> Parser::ParseTuple(bool with_condexpr, bool explicit_parens) {
  const Token at = Cur();
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) {
      if (!IsOp(",")) break;
      Advance();
      is_tuple = true;
    }
    if (IsTupleEnd()) break;
    CPM_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression(with_condexpr));
    items.push_back(std::move(e));
  }
  if (!is_tuple) {
    if (items.empty()) {
      if (explicit_parens) {  // `()` is the empty tuple
        auto t = NewExpr(Expr::Kind::kTuple, at);
        return t;
      }
      return Error("expected an expression" + Describe());
    }
    return std::move(items[0]);
  }
  auto t = NewExpr(Expr::Kind::kTuple, at);
  t->items = std::move(items);
  return t;
}

StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  DepthGuard guard(&depth_);
  if (guard.TooDeep()) return Error("expression nested too deeply");
  CPM_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  if (!with_condexpr) return expr;
  while (IsName("if")) {
    const Token at = Cur();
    Advance();
    auto cond = NewExpr(Expr::Kind::kCondition, at);
    CPM_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr else_expr;
    if (IsName("else")) {
      Advance();
      CPM_ASSIGN_OR_RETURN(else_expr, ParseExpression(true));
    }
    cond->items.push_back(std::move(expr));
    cond->items.push_back(std::move(test));
    cond->items.push_back(std::move(else_expr));
    expr = std::move(cond);
  }
  return expr;
}

StatusOr<ExprPtr> Parser::ParseOr() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (IsName("or")) {
    auto node = NewExpr(Expr::Kind::kOr, Cur());
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    node->items.push_back(std::move(left));
    node->items.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseAnd() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (IsName("and")) {
    auto node = NewExpr(Expr::Kind::kAnd, Cur());
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    node->items.push_back(std::move(left));
    node->items.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    DepthGuard guard(&depth_);
    if (guard.TooDeep()) return Error("expression nested too deeply");
    auto node = NewExpr(Expr::Kind::kNot, Cur());
    Advance();
    CPM_ASSIGN_OR_RETURN(node->operand, ParseNot());
    return node;
  }
  return ParseCompare();
}

StatusOr<ExprPtr> Parser::ParseCompare() {
  const Token at = Cur();
  CPM_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  ExprPtr node;
  while (true) {
    std::string op;
    if (Cur().kind == TokenKind::kOp &&
        (IsOp("==") || IsOp("!=") || IsOp("<") || IsOp("<=") || IsOp(">") || IsOp(">="))) {
      op = Cur().value;
      Advance();
    } else if (IsName("in")) {
      op = "in";
      Advance();
    } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().value == "in") {
      op = "notin";
      Advance();
      Advance();
    } else {
      break;
    }
    if (!node) {
      node = NewExpr(Expr::Kind::kCompare, at);
      node->operand = std::move(first);
    }
    node->ops.push_back(op);
    CPM_ASSIGN_OR_RETURN(ExprPtr rhs, ParseMath1());
    node->items.push_back(std::move(rhs));
  }
  return node ? std::move(node) : std::move(first);
}

namespace {
ExprPtr MakeBinary(const Token& at, std::string op, ExprPtr l, ExprPtr r) {
  auto node = std::make_unique<Expr>(Expr::Kind::kBinary, at.line, at.column);
  node->name = std::move(op);
  node->items.push_back(std::move(l));
  node->items.push_back(std::move(r));
  return node;
}
}  // namespace

StatusOr<ExprPtr> Parser::ParseMath1() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  while (IsOp("+") || IsOp("-")) {
    const Token at = Cur();
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = MakeBinary(at, at.value, std::move(left), std::move(right));
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseConcat() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
  while (IsOp("~")) {
    const Token at = Cur();
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
    left = MakeBinary(at, "~", std::move(left), std::move(right));
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseMath2() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
    const Token at = Cur();
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = MakeBinary(at, at.value, std::move(left), std::move(right));
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParsePow() {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (IsOp("**")) {
    const Token at = Cur();
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    left = MakeBinary(at, "**", std::move(left), std::move(right));
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  DepthGuard guard(&depth_);
  if (guard.TooDeep()) return Error("expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = NewExpr(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur());
    Advance();
    CPM_ASSIGN_OR_RETURN(node->operand, ParseUnary(false));
  } else {
    CPM_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  CPM_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    CPM_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token at = Cur();
  switch (at.kind) {
    case TokenKind::kName: {
      Advance();
      auto node = NewExpr(Expr::Kind::kLiteral, at);
      if (at.value == "true" || at.value == "True") {
        node->value = Value::Bool(true);
      } else if (at.value == "false" || at.value == "False") {
        node->value = Value::Bool(false);
      } else if (at.value == "none" || at.value == "None") {
        node->value = Value::None();
      } else {
        node->kind = Expr::Kind::kName;
        node->name = at.value;
      }
      return node;
    }
    case TokenKind::kString: {
      std::string s;
      while (Cur().kind == TokenKind::kString) {  // adjacent literals concatenate
        s += Cur().value;
        Advance();
      }
      auto node = NewExpr(Expr::Kind::kLiteral, at);
      node->value = Value::String(std::move(s));
      return node;
    }
    case TokenKind::kInt: {
      Advance();
      auto node = NewExpr(Expr::Kind::kLiteral, at);
      int64_t v = 0;
      auto res = std::from_chars(at.value.data(), at.value.data() + at.value.size(), v);
      if (res.ec != std::errc()) {
        node->value = Value::Float(std::stod(at.value));  // beyond int64: approximate
      } else {
        node->value = Value::Int(v);
      }
      return node;
    }
    case TokenKind::kFloat: {
      Advance();
      auto node = NewExpr(Expr::Kind::kLiteral, at);
      node->value = Value::Float(std::strtod(at.value.c_str(), nullptr));
      return node;
    }
    case TokenKind::kOp:
      if (at.value == "(") {
        Advance();
        CPM_ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true, true));
        CPM_RETURN_IF_ERROR(ExpectOp(")"));
        return inner;
      }
      if (at.value == "[") {
        Advance();
        auto node = NewExpr(Expr::Kind::kList, at);
        while (!IsOp("]")) {
          if (!node->items.empty()) CPM_RETURN_IF_ERROR(ExpectOp(","));
          if (IsOp("]")) break;
          CPM_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
          node->items.push_back(std::move(item));
        }
        Advance();
        return node;
      }
      if (at.value == "{") {
        Advance();
        auto node = NewExpr(Expr::Kind::kDict, at);
        while (!IsOp("}")) {
          if (!node->items.empty()) CPM_RETURN_IF_ERROR(ExpectOp(","));
          if (IsOp("}")) break;
          CPM_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
          CPM_RETURN_IF_ERROR(ExpectOp(":"));
          CPM_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
          node->items.push_back(std::move(key));
          node->items.push_back(std::move(value));
        }
        Advance();
        return node;
      }
      break;
    default:
      break;
  }
  return Error("expected an expression" + Describe());
}

StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const Token at = Cur();
  Advance();  // [
  ExprPtr parts[3];
  bool is_slice = false;
  int part = 0;
  while (!IsOp("]")) {
    if (IsOp(":")) {
      if (part == 2) return Error("too many ':' in slice");
      is_slice = true;
      ++part;
      Advance();
      continue;
    }
    if (parts[part]) return Error("expected ']'" + Describe());
    CPM_ASSIGN_OR_RETURN(parts[part], ParseTuple(true, true));
  }
  Advance();
  if (is_slice) {
    auto s = NewExpr(Expr::Kind::kSlice, at);
    s->operand = std::move(node);
    for (int i = 0; i < 3; ++i) s->slice[i] = std::move(parts[i]);
    return s;
  }
  if (!parts[0]) return SyntaxError(at.line, at.column, "expected an index");
  auto g = NewExpr(Expr::Kind::kGetItem, at);
  g->operand = std::move(node);
  g->items.push_back(std::move(parts[0]));
  return g;
}

StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    const Token at = Cur();
    if (IsOp(".")) {
      Advance();
      if (Cur().kind == TokenKind::kName) {
        auto g = NewExpr(Expr::Kind::kGetAttr, at);
        g->operand = std::move(node);
        g->name = Cur().value;
        Advance();
        node = std::move(g);
      } else if (Cur().kind == TokenKind::kInt) {  // x.0 is x[0]
        auto g = NewExpr(Expr::Kind::kGetItem, at);
        g->operand = std::move(node);
        auto idx = NewExpr(Expr::Kind::kLiteral, Cur());
        idx->value = Value::Int(std::stoll(Cur().value));
        g->items.push_back(std::move(idx));
        Advance();
        node = std::move(g);
      } else {
        return Error("expected an attribute name" + Describe());
      }
    } else if (IsOp("[")) {
      CPM_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      auto c = NewExpr(Expr::Kind::kCall, at);
      c->operand = std::move(node);
      CPM_RETURN_IF_ERROR(ParseArgs(&c->args));
      node = std::move(c);
    } else {
      return node;
    }
  }
}

Status Parser::ParseArgs(Arguments* args) {
  CPM_RETURN_IF_ERROR(ExpectOp("("));
  bool first = true;
  while (!IsOp(")")) {
    if (!first) CPM_RETURN_IF_ERROR(ExpectOp(","));
    first = false;
    if (IsOp(")")) break;
    if (IsOp("*") || IsOp("**")) return Error("*args and **kwargs are not supported");
    if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().value == "=") {
      std::string key = Cur().value;
      Advance();
      Advance();
      CPM_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
      args->keyword.emplace_back(std::move(key), std::move(v));
    } else {
      if (!args->keyword.empty()) return Error("positional argument follows keyword argument");
      CPM_ASSIGN_OR_RETURN(ExprPtr v, ParseExpression(true));
      args->positional.push_back(std::move(v));
    }
  }
  Advance();
  return OkStatus();
}

StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node) {
  // One or more `| name(args)`; `node` may be null for filter blocks.
  while (IsOp("|")) {
    Advance();
    const Token at = Cur();
    CPM_ASSIGN_OR_RETURN(std::string name, ExpectName());
    while (IsOp(".")) {
      Advance();
      CPM_ASSIGN_OR_RETURN(std::string more, ExpectName());
      name += "." + more;
    }
    if (!IsKnownFilter(name)) return SyntaxError(at.line, at.column, "no filter named '" + name + "'");
    auto f = NewExpr(Expr::Kind::kFilter, at);
    f->name = std::move(name);
    f->operand = std::move(node);
    if (IsOp("(")) CPM_RETURN_IF_ERROR(ParseArgs(&f->args));
    node = std::move(f);
  }
  return node;
}

StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  Advance();  // is
  const Token at = Cur();
  auto t = NewExpr(Expr::Kind::kTest, at);
  if (IsName("not")) {
    t->negated = true;
    Advance();
  }
  const Token name_at = Cur();
  CPM_ASSIGN_OR_RETURN(t->name, ExpectName());
  while (IsOp(".")) {
    Advance();
    CPM_ASSIGN_OR_RETURN(std::string more, ExpectName());
    t->name += "." + more;
  }
  if (!IsKnownTest(t->name)) {
    return SyntaxError(name_at.line, name_at.column, "no test named '" + t->name + "'");
  }
  t->line = name_at.line;
  t->column = name_at.column;
  t->operand = std::move(node);
  if (IsOp("(")) {
    CPM_RETURN_IF_ERROR(ParseArgs(&t->args));
  } else {
    // jinja2 accepts one argument without parentheses: `x is divisibleby 3`.
    TokenKind k = Cur().kind;
    bool starts_arg = k == TokenKind::kName || k == TokenKind::kString || k == TokenKind::kInt ||
                      k == TokenKind::kFloat || IsOp("(") || IsOp("[") || IsOp("{");
    if (starts_arg && !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Error("you cannot chain multiple tests with 'is'");
      CPM_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      CPM_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      t->args.positional.push_back(std::move(arg));
    }
  }
  return t;
}

StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      Advance();
      const Token at = Cur();
      CPM_ASSIGN_OR_RETURN(std::string name, ExpectName());
      while (IsOp(".")) {
        Advance();
        CPM_ASSIGN_OR_RETURN(std::string more, ExpectName());
        name += "." + more;
      }
      if (!IsKnownFilter(name)) return SyntaxError(at.line, at.column, "no filter named '" + name + "'");
      auto f = NewExpr(Expr::Kind::kFilter, at);
      f->name = std::move(name);
      f->operand = std::move(node);
      if (IsOp("(")) CPM_RETURN_IF_ERROR(ParseArgs(&f->args));
      node = std::move(f);
    } else if (IsName("is")) {
      CPM_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      auto c = NewExpr(Expr::Kind::kCall, Cur());
      c->operand = std::move(node);
      CPM_RETURN_IF_ERROR(ParseArgs(&c->args));
      node = std::move(c);
    } else {
      return node;
    }
  }
}

}  // namespace

StatusOr<Body> ParseTemplate(const std::string& source) {
  CPM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  Parser parser(std::move(tokens));
  return parser.ParseAll();
}

}  // namespace cpm::jinja
