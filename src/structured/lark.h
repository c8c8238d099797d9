// Lark grammars as vLLM takes them: a grammar with no `::=` rule is Lark's notation (`name:
// expr`, alternatives on `|` lines, `start` or else the first rule as the root), which vLLM
// rewrites into the EBNF its backends read before compiling it. The same rewriting here, so
// that such a grammar constrains the same texts: rule names and expressions are kept (Lark's
// single-quoted strings become double-quoted), a `?` or `!` before a rule name is dropped, and
// a rule referred to but never defined is an error.
//
// Where xgrammar cannot read the rewritten text, vLLM's auto backend gives the grammar to
// llguidance, which reads Lark itself; the parts of Lark that then work there are taken here
// too: /regex/ terminals (no flags), "a".."z" ranges, `-> alias` (dropped: the texts are the
// same), quotes of the other kind inside a string, and `%import common.NAME` (also `-> ALIAS`
// and `common (A, B)`) of Lark's common terminals. `%ignore` and the other directives, string
// and regex flags are errors that name them.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace cpm::structured {

// No line (comments, `#` or `//` to the end, aside) defines a rule with `::=`.
bool GrammarIsLikelyLark(std::string_view grammar);

// The EBNF text of a Lark grammar: `root ::= <start rule>` first, then each rule.
StatusOr<std::string> LarkToEbnf(std::string_view grammar);

}  // namespace cpm::structured
