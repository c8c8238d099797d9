// Statement parsing (if, for, set, macro, call, filter, break/continue, generation) and the
// ParseTemplate entry point. Expressions are in parser_expr.cc; both follow jinja2's parser.py.
#include "chat/parser.h"

#include "chat/builtins.h"
#include "chat/parser_internal.h"

namespace cpm::jinja {
namespace parser_internal {

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
        links_ = 0;  // each tag's expressions share one budget of links
        auto s = std::make_unique<Stmt>(Stmt::Kind::kOutput, t.line, t.column);
        Advance();
        CPM_ASSIGN_OR_RETURN(s->expr, ParseTuple(true, false));
        if (Cur().kind != TokenKind::kVarEnd) return Error("expected '}}'" + Describe());
        Advance();
        body->push_back(std::move(s));
        break;
      }
      case TokenKind::kBlockBegin: {
        links_ = 0;  // an end tag's too: elif's condition is parsed by the caller
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

Status CheckFilterAndTestNames(const Expr* e, bool soft) {
  if (!e) return OkStatus();
  if (!soft && e->kind == Expr::Kind::kFilter && !IsKnownFilter(e->name)) {
    return SyntaxError(e->line, e->column, "No filter named '" + e->name + "'.");
  }
  if (!soft && e->kind == Expr::Kind::kTest && !IsKnownTest(e->name)) {
    return SyntaxError(e->line, e->column, "No test named '" + e->name + "'.");
  }
  soft = soft || e->kind == Expr::Kind::kCondition;
  CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(e->operand.get(), soft));
  for (const ExprPtr& i : e->items) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(i.get(), soft));
  for (const ExprPtr& i : e->slice) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(i.get(), soft));
  for (const ExprPtr& i : e->args.positional) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(i.get(), soft));
  for (const auto& [k, v] : e->args.keyword) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(v.get(), soft));
  return OkStatus();
}

Status CheckFilterAndTestNames(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    // Only an if statement keeps (or makes) the frame soft; the for loop's iterable and a
    // set's or output's expression are compiled in the enclosing frame.
    bool inner_soft = s->kind == Stmt::Kind::kIf;
    bool expr_soft = s->kind == Stmt::Kind::kFor || s->kind == Stmt::Kind::kSet ||
                             s->kind == Stmt::Kind::kOutput
                         ? soft
                         : inner_soft;
    CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(s->expr.get(), expr_soft));
    CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(s->filter.get(), inner_soft));
    for (const ExprPtr& c : s->conditions) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(c.get(), true));
    for (const Body& b : s->bodies) CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(b, true));
    for (const MacroParam& p : s->params) {
      CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(p.default_value.get(), false));
    }
    CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(s->body, inner_soft));
    CPM_RETURN_IF_ERROR(CheckFilterAndTestNames(s->else_body, inner_soft));
  }
  return OkStatus();
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

}  // namespace parser_internal

StatusOr<Body> ParseTemplate(const std::string& source) {
  CPM_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(source));
  parser_internal::Parser parser(std::move(tokens));
  CPM_ASSIGN_OR_RETURN(Body body, parser.ParseAll());
  CPM_RETURN_IF_ERROR(parser_internal::CheckFilterAndTestNames(body, false));
  return body;
}

}  // namespace cpm::jinja
