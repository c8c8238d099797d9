// Matcher: which byte strings may extend the text generated so far under a Schema — the
// recognizer behind constrained decoding. A pushdown automaton over bytes: each stack of frames
// is one way of reading the text (an object inside an array inside the root...); a schema with
// alternatives (anyOf, enum, a declared key or an additional one) may keep several stacks alive
// until the bytes tell them apart, as an NFA. Copyable, so that a token's bytes can be tried on
// a copy (token_table.h).
//
// JSON text: whitespace (space, newline, tab: at most Schema::max_whitespace() bytes in a row)
// may come around ':' and ',' and inside brackets, not before or after the root value (as in
// xgrammar's grammars); compact JSON (max_whitespace 0) has xgrammar's separators ", " and
// ": " and no other whitespace; strings are JSON strings (escapes checked, no raw
// control bytes) of well-formed UTF-8 (a token may end inside a character: the next goes on
// with it); numbers are JSON numbers (integers: no fraction or exponent).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "structured/json_schema.h"

namespace cpm::structured {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Schema> schema);

  // Feeds one byte; false if no reading of the text takes it (the matcher is then dead).
  bool Step(uint8_t c);
  // Feeds `bytes` if every prefix is accepted, else returns false and leaves the state as it
  // was.
  bool Advance(std::string_view bytes);
  bool Accepts(std::string_view bytes) const;
  // The text is a whole value: the end of generation may come now.
  bool Complete() const;
  bool Dead() const { return stacks_.empty(); }
  // Every reading is inside a string of unbounded length, between characters (not in an
  // escape or a UTF-8 sequence): any whole UTF-8 text without '"', '\' or control bytes keeps
  // every reading alive.
  bool InFreeString() const;
  // The text is raw text under a regex (Schema::FromRegex): its automaton and state, which is
  // all there is to the matcher's state then. Null otherwise.
  const Regex* RawRegex(int32_t* state) const;

  enum class Phase : uint8_t;
  struct Frame {
    const SchemaNode* node = nullptr;
    Phase phase{};
    uint8_t ws = 0;                  // whitespace bytes in a row before this byte, or
                                     // kSpaceDue
    int32_t count = 0;               // object: next property; array: items; string: chars;
                                     // literal: bytes matched; grammar rule: its index
    int32_t aux = 0;                 // \u hex digits; UTF-8 bytes still to come; declared
                                     // key: its bytes matched; object: the chosen property
                                     // (-1: other); grammar rule: 1 after a text byte 0xED
    int32_t state = 0;               // regex, or a string or number with a pattern: the
                                     // automaton's state
    uint64_t candidates = 0;         // declared key: properties whose name it may still be;
                                     // \u escape: the code point so far; UTF-8: next byte's
                                     // range
    const std::string* literal = nullptr;
  };
  using Stack = std::vector<Frame>;

  // The text's one reading is inside a string, between or inside characters (not in an escape):
  // its frame, which StepStringByte advances on any byte but '"', '\\' and control bytes as
  // the matcher would. Null otherwise.
  const Frame* InString() const;
  // Frame `f` of InString() after byte c (not '"', '\\' or below 0x20); false if refused.
  static bool StepStringByte(Frame& f, uint8_t c);

 private:
  // Appends to `out` what `s` becomes on byte c (nothing if it cannot take it).
  void StepStack(Stack s, uint8_t c, std::vector<Stack>* out) const;
  // Appends `s` with a value of `node` pushed, one stack per alternative of an anyOf.
  void PushValue(Stack s, const SchemaNode* node, std::vector<Stack>* out) const;
  // The top frame's value is complete: pops it and tells its parent.
  static void Pop(Stack& s);
  // Frame::ws of a reading whose next byte must be the space of a compact separator.
  static constexpr uint8_t kSpaceDue = 0xFF;
  void SpaceDue(std::vector<Stack>* out, size_t first) const;
  // Starting a key at object frame `f` (its opening quote just read).
  void BeginKey(Stack s, std::vector<Stack>* out) const;
  static bool CanClose(const Frame& f);
  static bool MoreMembers(const Frame& f);
  // Feeds one byte of a string's value to its pattern, if it has one; false if refused.
  static bool FeedPattern(Frame& f, uint8_t byte);
  static bool PatternViable(const Frame& f, int32_t state);
  static bool ControlCharViable(const Frame& f, uint32_t lo, uint32_t hi);
  static bool EscapeViable(const Frame& f);
  // A grammar's stack `s` (top: a rule frame) as the readings it stands for before its next
  // byte: itself, with the calls its top may make pushed, and with its top popped where that
  // rule may end (its caller resumes); each reading once (`seen`).
  void ExpandRule(Stack s, std::vector<Stack>* out, std::set<std::string>* seen) const;
  // Appends what grammar stack `s` becomes on byte c.
  void StepRule(Stack s, uint8_t c, std::vector<Stack>* out) const;

  std::shared_ptr<const Schema> schema_;
  std::vector<Stack> stacks_;
};

}  // namespace cpm::structured
