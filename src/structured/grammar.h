// EBNF grammars for structured_outputs.grammar, in the notation xgrammar (vLLM's default
// backend) and llama.cpp's GBNF share:
//
//   root ::= "SELECT " column " FROM " table (" WHERE " cond)?
//   column ::= [a-z_]+ | "*"      # a comment
//
// Rules `name ::= body`; in a body: "strings" (escapes \n \r \t \\ \" \' \xHH \uHHHH
// \UHHHHHHHH), [character classes] as in regex_parser.h, `.` (any character), rule names,
// ( groups ), `|`, and the quantifiers * + ? {n} {n,} {n,m}. The text must derive from `root`.
//
// Rules are inlined into one expression and compiled to the same byte automaton as a regex
// (regex.h), so the output is held to the grammar token by token without a dead end. That
// covers every grammar without recursion; a rule that refers to itself, directly or through
// others (the nesting of a JSON or an arithmetic grammar), is a 400 that names the cycle.
#pragma once

#include <memory>
#include <string_view>

#include "base/status.h"
#include "structured/regex.h"

namespace cpm::structured {

// Errors say what and where ("grammar: ... at offset N", or the rules of a cycle).
StatusOr<std::shared_ptr<const Regex>> CompileGrammar(std::string_view text);

// Bound on the inlined grammar's size (syntax tree nodes), against rules that reuse one another
// exponentially often.
constexpr size_t kMaxGrammarNodes = 200000;

}  // namespace cpm::structured
