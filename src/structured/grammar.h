// EBNF grammars for structured_outputs.grammar, in the notation xgrammar (vLLM's default
// backend) and llama.cpp's GBNF share:
//
//   root ::= "SELECT " column " FROM " table (" WHERE " cond)?
//   column ::= [a-z_]+ | "*"      # a comment
//
// Rules `name ::= body`; in a body: "strings" (escapes \n \r \t \\ \" \' \xHH \uHHHH
// \UHHHHHHHH), [character classes] as in regex_parser.h, `.` (any character), /regex/ terminals
// (Lark's and llguidance's notation, regex_parser.h's syntax, no flags), rule names, ( groups ),
// `|`, and the quantifiers * + ? {n} {n,} {n,m}. The text must derive from `root`.
//
// A grammar without recursion is inlined into one expression and compiled to the same byte
// automaton as a regex (regex.h). A grammar whose rules refer to themselves, directly or through
// others (the nesting of a JSON or an arithmetic grammar), becomes a RecursiveGrammar: one
// automaton per rule on a cycle (and root), every other rule inlined into them, and a pushdown
// matcher (json_matcher.h) that calls and returns between them. Either way the output is held to
// the grammar token by token without a dead end. Left recursion (a rule that can reach itself
// before reading a byte: expr ::= expr "+" term) is a 400 that names the cycle, as is a rule that
// can never end; write such rules with repetition (expr ::= term ("+" term)*).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "structured/regex.h"

namespace cpm::structured {

// Rules as automata over bytes in which a call of rule i is the UTF-8 encoding of the surrogate
// code point kCallBase + i: no text holds one (the automata take well-formed UTF-8 only), so the
// regex compiler builds the calls as paths of their own, and a state's calls are read off them.
struct RecursiveGrammar {
  static constexpr uint32_t kCallBase = 0xD800;
  static constexpr int32_t kMaxRules = 0x800;  // the surrogates

  std::vector<std::string> names;                  // rules[0] is root
  std::vector<std::shared_ptr<const Regex>> rules;
  // calls[r][state]: the rules that state of rule r may call, each with the state to return to.
  std::vector<std::vector<std::vector<std::pair<int32_t, int32_t>>>> calls;
};

// A compiled grammar: `regex` without recursion, else `recursive`.
struct CompiledGrammar {
  std::shared_ptr<const Regex> regex;
  std::shared_ptr<const RecursiveGrammar> recursive;
};

// Errors say what and where ("grammar: ... at offset N", or the rules of a cycle).
StatusOr<CompiledGrammar> CompileGrammar(std::string_view text);

// Bound on the inlined grammar's size (syntax tree nodes), against rules that reuse one another
// exponentially often.
constexpr size_t kMaxGrammarNodes = 200000;

}  // namespace cpm::structured
