// Expression parsing with jinja2's precedence: condexpr < or < and < not < compare < + - < ~ <
// * / // % < ** < unary < postfix (attribute, subscript, call) / filters / tests.
#include <charconv>

#include "chat/builtins.h"
#include "chat/parser_internal.h"

namespace cpm::jinja::parser_internal {

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
    CPM_RETURN_IF_ERROR(Link());
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

// `operand (word operand)*`, folded to the left into `kind` nodes ("or" and "and" alike).
StatusOr<ExprPtr> Parser::ParseLeftAssoc(const char* word, Expr::Kind kind,
                                         StatusOr<ExprPtr> (Parser::*operand)()) {
  CPM_ASSIGN_OR_RETURN(ExprPtr left, (this->*operand)());
  while (IsName(word)) {
    CPM_RETURN_IF_ERROR(Link());
    auto node = NewExpr(kind, Cur());
    Advance();
    CPM_ASSIGN_OR_RETURN(ExprPtr right, (this->*operand)());
    node->items.push_back(std::move(left));
    node->items.push_back(std::move(right));
    left = std::move(node);
  }
  return left;
}

StatusOr<ExprPtr> Parser::ParseOr() {
  return ParseLeftAssoc("or", Expr::Kind::kOr, &Parser::ParseAnd);
}

StatusOr<ExprPtr> Parser::ParseAnd() {
  return ParseLeftAssoc("and", Expr::Kind::kAnd, &Parser::ParseNot);
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
    CPM_RETURN_IF_ERROR(Link());
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
    CPM_RETURN_IF_ERROR(Link());
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
    CPM_RETURN_IF_ERROR(Link());
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
    CPM_RETURN_IF_ERROR(Link());
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
    if (IsOp(".") || IsOp("[") || IsOp("(")) CPM_RETURN_IF_ERROR(Link());
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

StatusOr<std::string> Parser::ExpectDottedName() {
  CPM_ASSIGN_OR_RETURN(std::string name, ExpectName());
  while (IsOp(".")) {
    Advance();
    CPM_ASSIGN_OR_RETURN(std::string more, ExpectName());
    name += "." + more;
  }
  return name;
}

StatusOr<ExprPtr> Parser::ParseOneFilter(ExprPtr node) {
  Advance();  // |
  const Token at = Cur();
  CPM_ASSIGN_OR_RETURN(std::string name, ExpectDottedName());
  auto f = NewExpr(Expr::Kind::kFilter, at);
  f->name = std::move(name);
  f->operand = std::move(node);
  if (IsOp("(")) CPM_RETURN_IF_ERROR(ParseArgs(&f->args));
  return f;
}

StatusOr<ExprPtr> Parser::ParseFilter(ExprPtr node) {
  // One or more `| name(args)`; `node` may be null for filter blocks.
  while (IsOp("|")) {
    CPM_RETURN_IF_ERROR(Link());
    CPM_ASSIGN_OR_RETURN(node, ParseOneFilter(std::move(node)));
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
  CPM_ASSIGN_OR_RETURN(t->name, ExpectDottedName());
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
    if (IsOp("|") || IsName("is") || IsOp("(")) CPM_RETURN_IF_ERROR(Link());
    if (IsOp("|")) {
      CPM_ASSIGN_OR_RETURN(node, ParseOneFilter(std::move(node)));
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

}  // namespace cpm::jinja::parser_internal
