// Regex: a regular expression (syntax: regex_parser.h) compiled to a deterministic automaton
// over UTF-8 bytes, for constrained decoding: structured_outputs regex (the whole output) and
// JSON Schema "pattern" (a string's value). The whole text must match — xgrammar, vLLM's
// default backend, and llguidance both anchor patterns so.
//
// Each state knows whether some continuation can still match: a byte after which none can is
// refused (Next gives kDead), so a token mask never lets generation into a dead end. Only
// well-formed UTF-8 (no overlong forms or surrogates) is ever accepted; a token may end inside
// a character.
#pragma once

#include <array>
#include <climits>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cpm::structured {

namespace regex {
struct Ast;
}  // namespace regex

class Regex {
 public:
  // Errors: the pattern's syntax, or an automaton beyond the bounds below ("regex: ...").
  // A pattern compiled recently is served from a cache (kRegexCacheBytes), the same automaton,
  // unless `cached` is false.
  static StatusOr<std::shared_ptr<const Regex>> Compile(std::string_view pattern,
                                                        bool cached = true);
  // The automaton of a syntax tree (regex_parser.h; grammar.h builds them too).
  static StatusOr<std::shared_ptr<const Regex>> FromAst(const regex::Ast& ast);

  static constexpr int32_t kStart = 0;
  static constexpr int32_t kDead = -1;

  // The state after `byte`, or kDead if no text that continues so can match.
  int32_t Next(int32_t state, uint8_t byte) const {
    return next_[static_cast<size_t>(state) * num_classes_ + class_of_[byte]];
  }
  // The text read so far matches.
  bool Accepting(int32_t state) const { return accepting_[state] != 0; }
  // The whole of `text` matches.
  bool Matches(std::string_view text) const;
  // Fewest and most characters (UTF-8 lead bytes) that can still come before a match ends,
  // from a live state; kUnbounded when a loop allows any number. JSON Schema strings check
  // minLength / maxLength against them, so that a pattern never leads into a dead end.
  static constexpr int32_t kUnbounded = INT32_MAX;
  int32_t MinChars(int32_t state) const { return min_chars_[state]; }
  int32_t MaxChars(int32_t state) const { return max_chars_[state]; }
  int32_t num_states() const { return static_cast<int32_t>(accepting_.size()); }
  // Unique to this compiled automaton in the process (a key for caches that outlive it).
  uint64_t id() const { return id_; }

 private:
  std::array<uint8_t, 256> class_of_{};  // bytes that every state treats alike share a class
  int32_t num_classes_ = 0;
  std::vector<int32_t> next_;            // [state][class]
  std::vector<uint8_t> accepting_;       // [state]
  std::vector<int32_t> min_chars_, max_chars_;  // [state]
  uint64_t id_ = 0;
};

// Bounds on a request's automata (patterns such as (a{1000}){1000} are refused, not built):
// states, table entries (states × byte classes; 16 MiB), and the NFA states that the DFA's
// states stand for, summed: the subset construction's memory and time. (.{0,50}){0,50} has
// 47.5k states that stand for 58M (~470 MB and 6 s to build); it is refused after ~0.4 s, and
// (.{0,20}){0,20} (7.6k states) builds in ~0.1 s. ".{1000}" (19k states, tens of ms) is well
// within them all.
constexpr int32_t kMaxRegexNfaStates = 200000;
constexpr int32_t kMaxRegexDfaStates = 50000;
constexpr int64_t kMaxRegexTableEntries = int64_t{4} << 20;
constexpr int64_t kMaxRegexSubsetElements = int64_t{4} << 20;
constexpr size_t kRegexCacheBytes = size_t{64} << 20;

}  // namespace cpm::structured
