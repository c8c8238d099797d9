// Abstract syntax tree of a parsed template: expressions and statements. Immutable after
// parsing, so one tree serves concurrent renders.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace cpm::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  enum class Kind {
    kLiteral,    // value
    kName,       // name
    kList,       // items
    kTuple,      // items
    kDict,       // items as key, value pairs (even/odd)
    kGetAttr,    // operand . name
    kGetItem,    // operand [ items[0] ]
    kSlice,      // operand [ slice[0] : slice[1] : slice[2] ] (null = omitted)
    kCall,       // operand ( args )
    kFilter,     // operand | name ( args ); operand is null inside {% filter %}
    kTest,       // operand is [not] name ( args )
    kNot,        // not operand
    kNeg,        // -operand
    kPos,        // +operand
    kBinary,     // op: + - * / // % ** ~
    kAnd,        // items[0] and items[1]
    kOr,         // items[0] or items[1]
    kCompare,    // operand (ops[i] items[i])...
    kCondition,  // items[0] if items[1] else items[2] (items[2] may be null)
  };

  Expr(Kind k, int l, int c) : kind(k), line(l), column(c) {}

  Kind kind;
  int line;
  int column;
  Value value;
  std::string name;  // name, attribute, filter or test; the operator for kBinary
  bool negated = false;
  ExprPtr operand;
  std::vector<ExprPtr> items;
  std::vector<std::string> ops;  // kCompare: ==, !=, <, <=, >, >=, in, notin
  ExprPtr slice[3];
  Arguments args;
};

// Where a `set` or `for` stores its value: one name, a tuple of names, or `ns.attr`.
struct Target {
  std::vector<std::string> names;  // several for tuple unpacking
  bool is_tuple = false;
  std::string attr;  // non-empty: names[0].attr (namespace assignment)
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,       // text
    kOutput,     // {{ expr }}
    kIf,         // conditions[i] -> bodies[i]; else_body
    kFor,        // target in expr [if filter] body [else else_body]
    kSet,        // target = expr
    kSetBlock,   // {% set target %}body{% endset %}, filter applied when present
    kMacro,      // name(params) body
    kCallBlock,  // {% call(params) expr %}body{% endcall %}
    kFilterBlock,  // {% filter f %}body{% endfilter %}; filter chain in expr (operand null)
    kBreak,
    kContinue,
    kScope,      // body rendered in place (transformers' {% generation %})
  };

  Stmt(Kind k, int l, int c) : kind(k), line(l), column(c) {}

  Kind kind;
  int line;
  int column;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // kFor: loop filter; kSetBlock: filter chain
  Target target;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::string name;
  std::vector<MacroParam> params;
  bool uses_loop = false;  // kFor: the body or filter mentions `loop`, so build it per iteration
};

}  // namespace cpm::jinja
