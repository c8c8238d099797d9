// Lexer: turns template source into text and tag tokens with jinja2's whitespace rules as
// transformers configures them (trim_blocks, lstrip_blocks, no trailing newline kept).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace cpm::jinja {

enum class TokenKind {
  kText,        // literal output
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // value already unescaped
  kInt,
  kFloat,
  kOp,          // operators and punctuation: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < <= > >=
  kEof,
};

struct Token {
  TokenKind kind;
  std::string value;
  int line = 1;
  int column = 1;
};

// Errors are kInvalidArgument "chat template line L, column C: ...".
StatusOr<std::vector<Token>> Tokenize(const std::string& source);

// Formats the location prefix shared by lexer and parser errors.
Status SyntaxError(int line, int column, const std::string& message);

}  // namespace cpm::jinja
