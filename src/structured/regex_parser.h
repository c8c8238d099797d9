// The syntax of the regular expressions that constrained decoding takes (structured_outputs
// regex, JSON Schema "pattern"): a pattern parsed into a tree over sets of Unicode code points,
// which regex.h compiles to a byte automaton.
//
// The syntax is the common core of Python's re and JavaScript's RegExp, read as xgrammar (vLLM's
// default backend) reads it: literals; '.' (any character, newline included); classes [a-z]
// [^...]; \d \w \s \D \W \S (ASCII digits and word characters; \s is \f \n \r \t \v, space and
// U+00A0); escapes \n \r \t \f \v \0 \xHH \uHHHH \u{H...} \UHHHHHHHH \cX, and a backslash before
// any punctuation; groups (...) (?:...) (?<name>...) (?P<name>...); '|'; quantifiers * + ? {n}
// {n,} {n,m} {,m} (a lazy '?' after one matches the same texts); ^ \A and $ \z \Z, the start and
// the end of the text. A '{' that starts no quantifier is a literal, as in Python. Each of the
// rest is an error that says what it is: backreferences, lookaround, \b \B, \p{...}, inline
// flags, possessive quantifiers, an unknown letter escape.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace cpm::structured::regex {

// Code points [first, second], sorted, disjoint, not adjacent, no surrogates (D800-DFFF).
using CharSet = std::vector<std::pair<uint32_t, uint32_t>>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// The well-formed set of `ranges` (any order, overlapping, surrogates dropped).
CharSet Normalize(CharSet ranges);
// Every character that is not in `s` (a normalized set).
CharSet Complement(const CharSet& s);

struct Node {
  enum class Op : uint8_t {
    kEmpty,   // the empty text
    kChars,   // one character of `chars`
    kConcat,  // `children` in order
    kAlt,     // one of `children`
    kRepeat,  // children[0], min to max times (max -1: unbounded)
    kBegin,   // the start of the text (^ \A)
    kEnd,     // the end of the text ($ \z \Z)
  };
  Op op = Op::kEmpty;
  CharSet chars;
  std::vector<int> children;  // indices into Ast::nodes
  int min = 0, max = -1;
};

struct Ast {
  std::vector<Node> nodes;
  int root = 0;

  // Appends a node; its index.
  int Add(Node n);
  int Op(Node::Op op, std::vector<int> children = {});
  int Chars(CharSet set);
  int Repeat(int child, int min, int max);
  // `items` in order (the empty text for none, the item itself for one).
  int Sequence(std::vector<int> items);
  // One of `options` (the option itself for one).
  int Alternatives(std::vector<int> options);
};

// Bounds that keep a request's pattern from costing unbounded time or memory.
constexpr int kMaxRepeat = 1000;      // largest n or m of {n,m}
constexpr int kMaxGroupDepth = 128;   // groups nested in one another

// Errors say what is wrong and where ("regex: ... at offset N" of the pattern's bytes).
StatusOr<Ast> Parse(std::string_view pattern);

}  // namespace cpm::structured::regex
