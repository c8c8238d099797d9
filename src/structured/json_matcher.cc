#include "structured/json_matcher.h"

#include <cctype>
#include <cstring>
#include <set>
#include <unordered_set>
#include <utility>

#include "structured/utf8.h"

namespace cpm::structured {

enum class Matcher::Phase : uint8_t {
  kRoot,       // bottom frame, its value not yet complete
  kRootDone,   // bottom frame after the value: no byte more (xgrammar's root rule ends there)
  kValue,      // before a value of `node`: whitespace, then its first byte
  kObjOpen,    // after '{'
  kObjKey,     // in a declared key: `aux` bytes matched, `candidates` still possible
  kObjFreeKey, // an additional key's string is the child frame
  kObjColon,   // after a key (aux: its property, -1 for an additional one)
  kObjValue,   // a member value is the child frame
  kObjNext,    // after a member: ',' or '}'
  kObjComma,   // after ',': the next key's '"'
  kArrOpen,    // after '['
  kArrValue,   // an item is the child frame
  kArrNext,    // after an item: ',' or ']'
  kStr,        // in a string (count: characters so far)
  kStrEscape,  // after '\'
  kStrHex,     // in \uXXXX (aux: digits so far)
  kStrUtf8,    // in a UTF-8 character: aux bytes to come, the next in [candidates & 0xff,
               // candidates >> 8]
  kNumMinus,
  kNumZero,
  kNumInt,
  kNumDot,
  kNumFrac,
  kNumE,
  kNumESign,
  kNumExp,
  kLiteral,    // in `literal`, count bytes matched
  kRegex,      // raw text under node->pattern, `state` its automaton's
  kNumPattern, // a number under node->pattern (its range), `state` its automaton's
  kRule,       // raw text under rule `count` of node->grammar, `state` its automaton's; aux 1:
               // after a text byte 0xED (its next byte must continue a character, not a call)
};

namespace {

using Phase = Matcher::Phase;
using Frame = Matcher::Frame;
using Stack = Matcher::Stack;

// Bounds on what a schema can make the matcher track: readings alive at once, nesting depth,
// and anyOf expansions in a row (a $ref cycle without any bytes between).
constexpr size_t kMaxStacks = 256;
constexpr size_t kMaxDepth = 128;
constexpr int kMaxExpansions = 16;

const std::string kTrue = "true", kFalse = "false", kNull = "null";

// The shapes a value of kind kAny takes once its first byte is known.
struct AnyNodes {
  SchemaNode value, object, array, string, number;
  AnyNodes() {
    value.kind = Kind::kAny;
    object.kind = Kind::kObject;
    object.additional = &value;
    array.kind = Kind::kArray;
    string.kind = Kind::kString;
    number.kind = Kind::kNumber;
  }
};
const AnyNodes& Any() {
  static const AnyNodes nodes;
  return nodes;
}

// The schema of an array's item `index`: its prefixItems entry, else items (any value if none).
const SchemaNode* Item(const SchemaNode& array, int64_t index) {
  if (index < static_cast<int64_t>(array.prefix_items.size())) return array.prefix_items[index];
  return array.items ? array.items : &Any().value;
}

// xgrammar's JSON whitespace ([ \n\t]): no carriage returns.
bool IsWhitespace(uint8_t c) { return c == ' ' || c == '\n' || c == '\t'; }
bool IsDigit(uint8_t c) { return c >= '0' && c <= '9'; }

// A number that may end here.
bool Accepting(Phase p) {
  return p == Phase::kNumZero || p == Phase::kNumInt || p == Phase::kNumFrac ||
         p == Phase::kNumExp;
}

}  // namespace

Matcher::Matcher(std::shared_ptr<const Schema> schema) : schema_(std::move(schema)) {
  Stack root;
  root.push_back(Frame{nullptr, Phase::kRoot});
  PushValue(std::move(root), schema_->root(), &stacks_);
}

void Matcher::PushValue(Stack s, const SchemaNode* node, std::vector<Stack>* out) const {
  // anyOf: every option is a reading of its own; a chain of anyOf without bytes between (a
  // $ref cycle) ends after kMaxExpansions.
  std::vector<std::pair<const SchemaNode*, int>> todo = {{node, 0}};
  while (!todo.empty()) {
    auto [n, depth] = todo.back();
    todo.pop_back();
    if (n->kind == Kind::kAnyOf) {
      if (depth >= kMaxExpansions) continue;
      for (auto it = n->options.rbegin(); it != n->options.rend(); ++it) {
        todo.push_back({*it, depth + 1});
      }
      continue;
    }
    if (s.size() >= kMaxDepth || out->size() >= kMaxStacks) continue;
    Stack t = s;
    t.push_back(Frame{n, n->kind == Kind::kRegex     ? Phase::kRegex
                         : n->kind == Kind::kGrammar ? Phase::kRule
                                                     : Phase::kValue});
    t.back().state = Regex::kStart;
    out->push_back(std::move(t));
  }
}

// Compact JSON (no free whitespace) takes xgrammar's default separators without an indent,
// ", " and ": ": the readings from `first` on, just past one, owe a single space.
void Matcher::SpaceDue(std::vector<Stack>* out, size_t first) const {
  if (schema_->max_whitespace() != 0) return;
  for (size_t i = first; i < out->size(); ++i) (*out)[i].back().ws = kSpaceDue;
}

void Matcher::Pop(Stack& s) {
  s.pop_back();
  Frame& p = s.back();
  p.ws = 0;
  switch (p.phase) {
    case Phase::kRoot: p.phase = Phase::kRootDone; break;
    case Phase::kObjFreeKey: p.phase = Phase::kObjColon; break;
    case Phase::kObjValue: p.phase = Phase::kObjNext; break;
    case Phase::kArrValue:
      ++p.count;
      p.phase = Phase::kArrNext;
      break;
    default: break;  // not a frame that waits for a child
  }
}

// No required property is left at or after the next one.
bool Matcher::CanClose(const Frame& f) {
  const auto& props = f.node->properties;
  for (size_t j = static_cast<size_t>(f.count); j < props.size(); ++j) {
    if (props[j].required) return false;
  }
  return true;
}

// A string's pattern in state `s`, f.count characters counted (the one being read included):
// a match can still end within maxLength and at or past minLength.
bool Matcher::PatternViable(const Frame& f, int32_t s) {
  if (s == Regex::kDead) return false;
  const Regex& re = *f.node->pattern;
  const int64_t max = f.node->max_length;
  if (max >= 0 && f.count + int64_t{re.MinChars(s)} > max) return false;
  return f.count + int64_t{re.MaxChars(s)} >= f.node->min_length;
}

bool Matcher::FeedPattern(Frame& f, uint8_t byte) {
  if (f.node == nullptr || f.node->pattern == nullptr) return true;
  const int32_t s = f.node->pattern->Next(f.state, byte);
  if (!PatternViable(f, s)) return false;
  f.state = s;
  return true;
}

// In a patterned string, \u escapes are taken for U+0000-U+001F alone, which JSON must escape;
// other characters are written as themselves (or \" \\ \/). Each digit keeps some viable
// character in range.
bool Matcher::ControlCharViable(const Frame& f, uint32_t lo, uint32_t hi) {
  for (uint32_t cp = lo; cp <= hi && cp < 0x20; ++cp) {
    if (PatternViable(f, f.node->pattern->Next(f.state, static_cast<uint8_t>(cp)))) return true;
  }
  return false;
}

bool Matcher::EscapeViable(const Frame& f) {
  if (f.node == nullptr || f.node->pattern == nullptr) return true;
  for (char c : std::string_view("\"\\/")) {
    if (PatternViable(f, f.node->pattern->Next(f.state, static_cast<uint8_t>(c)))) return true;
  }
  return ControlCharViable(f, 0, 0x1F);
}

bool Matcher::StepStringByte(Frame& f, uint8_t c) {
  if (f.phase == Phase::kStrUtf8) {
    if (c < (f.candidates & 0xff) || c > (f.candidates >> 8) || !FeedPattern(f, c)) return false;
    f.candidates = 0x80 | uint64_t{0xbf} << 8;
    if (--f.aux == 0) f.phase = Phase::kStr;
    return true;
  }
  // A character: ASCII, or the lead byte of a well-formed UTF-8 sequence (RFC 3629: no
  // overlong forms, surrogates or code points past U+10FFFF), whose other bytes follow.
  const Utf8Lead lead = LeadByte(c);
  if (f.phase != Phase::kStr || !lead.valid) return false;
  if (f.node != nullptr && f.node->max_length >= 0 && f.count >= f.node->max_length) {
    return false;
  }
  ++f.count;
  if (!FeedPattern(f, c)) return false;
  if (lead.more > 0) {
    f.phase = Phase::kStrUtf8;
    f.aux = lead.more;
    f.candidates = lead.lo | uint64_t{lead.hi} << 8;
  }
  return true;
}

const Frame* Matcher::InString() const {
  if (stacks_.size() != 1) return nullptr;
  const Frame& top = stacks_[0].back();
  return top.phase == Phase::kStr || top.phase == Phase::kStrUtf8 ? &top : nullptr;
}

bool Matcher::MoreMembers(const Frame& f) {
  return static_cast<size_t>(f.count) < f.node->properties.size() || f.node->additional;
}

void Matcher::BeginKey(Stack s, std::vector<Stack>* out) const {
  const Frame& f = s.back();
  const auto& props = f.node->properties;
  // Declared keys from the next property up to the first required one (those before it are
  // optional and may be skipped; it may not).
  uint64_t candidates = 0;
  for (size_t j = static_cast<size_t>(f.count); j < props.size(); ++j) {
    candidates |= uint64_t{1} << j;
    if (props[j].required) break;
  }
  const bool other = f.node->additional != nullptr && CanClose(f);
  if (other && out->size() < kMaxStacks && s.size() < kMaxDepth) {
    Stack t = s;
    t.back().phase = Phase::kObjFreeKey;
    t.back().aux = -1;
    t.push_back(Frame{nullptr, Phase::kStr});
    out->push_back(std::move(t));
  }
  if (candidates != 0) {
    Frame& g = s.back();
    g.phase = Phase::kObjKey;
    g.candidates = candidates;
    g.aux = 0;
    out->push_back(std::move(s));
  }
}

void Matcher::StepStack(Stack s, uint8_t c, std::vector<Stack>* out) const {
  Frame& f = s.back();
  if (f.ws == kSpaceDue) {  // compact JSON's separators are ", " and ": "
    if (c != ' ') return;
    f.ws = 0;
    out->push_back(std::move(s));
    return;
  }
  const bool blank = IsWhitespace(c);
  // Whitespace where JSON allows it: the frame stays, one more blank in the run.
  const auto take_blank = [&] {
    if (f.ws < schema_->max_whitespace()) {
      ++f.ws;
      out->push_back(std::move(s));
    }
  };
  const auto keep = [&] {
    f.ws = 0;
    out->push_back(std::move(s));
  };
  // The number ends before c: its parent takes c.
  const auto end_number = [&] {
    Pop(s);
    StepStack(std::move(s), c, out);
  };
  switch (f.phase) {
    case Phase::kRoot:
      return;  // never on top: the root value's frame is above it until it is complete
    case Phase::kRootDone:
      return;  // the text ends with the root value, as xgrammar's root rule ends
    case Phase::kValue: {
      // No whitespace before the root value (xgrammar's root rule starts with it).
      if (blank) return s.size() == 2 ? void() : take_blank();
      const SchemaNode* n = f.node;
      if (n->kind == Kind::kAny) {
        if (c == '{') n = &Any().object;
        else if (c == '[') n = &Any().array;
        else if (c == '"') n = &Any().string;
        else if (c == '-' || IsDigit(c)) n = &Any().number;
        else if (c == 't' || c == 'f') n = &Any().value;  // a boolean below
        else if (c == 'n') n = &Any().value;              // null below
        else return;
      }
      f = Frame{n, Phase::kValue};
      const auto literal = [&](const std::string* lit) {
        f.phase = Phase::kLiteral;
        f.literal = lit;
        f.count = 1;
        out->push_back(std::move(s));
      };
      switch (n->kind) {
        case Kind::kGrammar:
          return;  // pushed as a rule frame (PushValue)
        case Kind::kAny:
          if (c == 't') return literal(&kTrue);
          if (c == 'f') return literal(&kFalse);
          return literal(&kNull);
        case Kind::kObject:
          if (c != '{') return;
          f.phase = Phase::kObjOpen;
          return keep();
        case Kind::kArray:
          if (c != '[') return;
          f.phase = Phase::kArrOpen;
          return keep();
        case Kind::kString:
          if (c != '"') return;
          f.phase = Phase::kStr;
          return keep();
        case Kind::kNumber:
        case Kind::kInteger:
          if (n->pattern != nullptr) {
            f.state = n->pattern->Next(Regex::kStart, c);
            if (f.state == Regex::kDead) return;
            f.phase = Phase::kNumPattern;
            return keep();
          }
          if (c == '-') f.phase = Phase::kNumMinus;
          else if (c == '0') f.phase = Phase::kNumZero;
          else if (IsDigit(c)) f.phase = Phase::kNumInt;
          else return;
          return keep();
        case Kind::kBoolean:
          if (c == 't') return literal(&kTrue);
          if (c == 'f') return literal(&kFalse);
          return;
        case Kind::kNull:
          if (c == 'n') return literal(&kNull);
          return;
        case Kind::kLiterals:
          for (const std::string& lit : n->literals) {
            if (lit.empty() || static_cast<uint8_t>(lit[0]) != c || out->size() >= kMaxStacks) {
              continue;
            }
            Stack t = s;
            Frame& g = t.back();
            g.phase = Phase::kLiteral;
            g.literal = &lit;
            g.count = 1;
            if (lit.size() == 1) Pop(t);
            out->push_back(std::move(t));
          }
          return;
        case Kind::kAnyOf:
        case Kind::kRegex:
          return;  // expanded by PushValue; read in its own phase
      }
      return;
    }
    case Phase::kObjOpen:
    case Phase::kObjComma:
      if (blank) return take_blank();
      if (c == '"') {
        f.ws = 0;
        return BeginKey(std::move(s), out);
      }
      if (c == '}' && f.phase == Phase::kObjOpen && CanClose(f)) {
        Pop(s);
        out->push_back(std::move(s));
      }
      return;
    case Phase::kObjKey: {
      // The names are matched in their escaped form, where a '"' inside a name follows a
      // backslash: a '"' that some candidate has next goes on with the name (no candidate can
      // end there, its escaped form would end in a lone backslash); otherwise it closes the key.
      const auto& props = f.node->properties;
      uint64_t still = 0;
      for (size_t j = 0; j < props.size(); ++j) {
        const std::string& key = props[j].key;
        if ((f.candidates >> j & 1) && key.size() > static_cast<size_t>(f.aux) &&
            static_cast<uint8_t>(key[f.aux]) == c) {
          still |= uint64_t{1} << j;
        }
      }
      if (still != 0) {
        f.candidates = still;
        ++f.aux;
        return keep();
      }
      if (c != '"') return;
      for (size_t j = 0; j < props.size(); ++j) {
        if ((f.candidates >> j & 1) && props[j].key.size() == static_cast<size_t>(f.aux)) {
          f.aux = static_cast<int32_t>(j);
          f.phase = Phase::kObjColon;
          return keep();
        }
      }
      return;
    }
    case Phase::kObjColon: {
      if (blank) return take_blank();
      if (c != ':') return;
      const SchemaNode* value =
          f.aux >= 0 ? f.node->properties[f.aux].value : f.node->additional;
      if (f.aux >= 0) f.count = f.aux + 1;
      f.phase = Phase::kObjValue;
      f.ws = 0;
      const size_t first = out->size();
      PushValue(std::move(s), value, out);
      return SpaceDue(out, first);
    }
    case Phase::kObjNext:
      if (blank) return take_blank();
      if (c == ',' && MoreMembers(f)) {
        f.phase = Phase::kObjComma;
        keep();
        return SpaceDue(out, out->size() - 1);
      }
      if (c == '}' && CanClose(f)) {
        Pop(s);
        out->push_back(std::move(s));
      }
      return;
    case Phase::kArrOpen: {
      if (blank) return take_blank();
      if (c == ']') {
        if (f.node->min_items == 0) {
          Pop(s);
          out->push_back(std::move(s));
        }
        return;
      }
      if (f.node->max_items == 0) return;
      const SchemaNode* item = Item(*f.node, 0);
      f.phase = Phase::kArrValue;
      f.ws = 0;
      std::vector<Stack> items;
      PushValue(std::move(s), item, &items);
      for (Stack& t : items) StepStack(std::move(t), c, out);
      return;
    }
    case Phase::kArrNext:
      if (blank) return take_blank();
      if (c == ',' && (f.node->max_items < 0 || f.count < f.node->max_items)) {
        const SchemaNode* item = Item(*f.node, f.count);
        f.phase = Phase::kArrValue;
        f.ws = 0;
        const size_t first = out->size();
        PushValue(std::move(s), item, out);
        return SpaceDue(out, first);
      }
      if (c == ']' && f.count >= f.node->min_items) {
        Pop(s);
        out->push_back(std::move(s));
      }
      return;
    case Phase::kStr: {
      const int64_t min = f.node ? f.node->min_length : 0;
      const int64_t max = f.node ? f.node->max_length : -1;
      if (c == '"') {
        if (f.count >= min && (f.node == nullptr || f.node->pattern == nullptr ||
                               f.node->pattern->Accepting(f.state))) {
          Pop(s);
          out->push_back(std::move(s));
        }
        return;
      }
      if (c < 0x20) return;
      if (c == '\\') {
        if (max >= 0 && f.count >= max) return;
        ++f.count;
        if (!EscapeViable(f)) return;
        f.phase = Phase::kStrEscape;  // its character goes to the pattern once decoded
        return keep();
      }
      if (StepStringByte(f, c)) keep();
      return;
    }
    case Phase::kStrUtf8:
      if (StepStringByte(f, c)) keep();
      return;
    case Phase::kStrEscape: {
      const bool patterned = f.node != nullptr && f.node->pattern != nullptr;
      if (c == 'u') {
        if (patterned && !ControlCharViable(f, 0, 0x1F)) return;
        f.phase = Phase::kStrHex;
        f.aux = 0;
        f.candidates = 0;
        return keep();
      }
      const char* escapes = "\"\\/bfnrt";
      const char* decoded = "\"\\/\b\f\n\r\t";
      const char* e = c != 0 ? std::strchr(escapes, c) : nullptr;
      if (e == nullptr || !FeedPattern(f, static_cast<uint8_t>(decoded[e - escapes]))) return;
      f.phase = Phase::kStr;
      return keep();
    }
    case Phase::kStrHex: {
      if (!std::isxdigit(c)) return;
      f.candidates = f.candidates << 4 | (IsDigit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
      ++f.aux;
      if (f.node != nullptr && f.node->pattern != nullptr) {
        // The code points the digits so far allow, [candidates · 16^rest, + 16^rest).
        const int rest = 4 - f.aux;
        const uint32_t lo = static_cast<uint32_t>(f.candidates) << (4 * rest);
        if (!ControlCharViable(f, lo, lo + (1u << (4 * rest)) - 1)) return;
        if (rest == 0) FeedPattern(f, static_cast<uint8_t>(lo));
      }
      if (f.aux == 4) f.phase = Phase::kStr;
      return keep();
    }
    case Phase::kNumMinus:
      if (c == '0') f.phase = Phase::kNumZero;
      else if (IsDigit(c)) f.phase = Phase::kNumInt;
      else return;
      return keep();
    case Phase::kNumZero:
    case Phase::kNumInt: {
      const bool integer = f.node->kind == Kind::kInteger;
      if (f.phase == Phase::kNumInt && IsDigit(c)) return keep();
      if (!integer && c == '.') {
        f.phase = Phase::kNumDot;
        return keep();
      }
      if (!integer && (c == 'e' || c == 'E')) {
        f.phase = Phase::kNumE;
        return keep();
      }
      if (IsDigit(c)) return;  // a leading zero takes no digits after it
      return end_number();
    }
    case Phase::kNumDot:
      if (!IsDigit(c)) return;
      f.phase = Phase::kNumFrac;
      return keep();
    case Phase::kNumFrac:
      if (IsDigit(c)) return keep();
      if (c == 'e' || c == 'E') {
        f.phase = Phase::kNumE;
        return keep();
      }
      return end_number();
    case Phase::kNumE:
      if (c == '+' || c == '-') f.phase = Phase::kNumESign;
      else if (IsDigit(c)) f.phase = Phase::kNumExp;
      else return;
      return keep();
    case Phase::kNumESign:
      if (!IsDigit(c)) return;
      f.phase = Phase::kNumExp;
      return keep();
    case Phase::kNumExp:
      if (IsDigit(c)) return keep();
      return end_number();
    case Phase::kRegex:
      f.state = f.node->pattern->Next(f.state, c);
      if (f.state == Regex::kDead) return;
      return keep();
    case Phase::kRule:
      return StepRule(std::move(s), c, out);
    case Phase::kNumPattern: {
      const Regex& re = *f.node->pattern;
      if (re.Accepting(f.state)) {  // the number may end before c
        Stack ended = s;
        Pop(ended);
        StepStack(std::move(ended), c, out);
      }
      f.state = re.Next(f.state, c);
      if (f.state == Regex::kDead) return;
      return keep();
    }
    case Phase::kLiteral:
      if (static_cast<uint8_t>((*f.literal)[f.count]) != c) return;
      if (static_cast<size_t>(++f.count) == f.literal->size()) Pop(s);
      out->push_back(std::move(s));
      return;
    case Phase::kObjFreeKey:
    case Phase::kObjValue:
    case Phase::kArrValue:
      return;  // never on top: their child frame is
  }
}

namespace {

// Every field of every frame: stacks with equal keys take the same bytes from here on.
std::string StackKey(const Stack& s) {
  std::string key;
  key.reserve(s.size() * 40);
  for (const Frame& f : s) {
    const uintptr_t ptrs[2] = {reinterpret_cast<uintptr_t>(f.node),
                               reinterpret_cast<uintptr_t>(f.literal)};
    const int32_t v[5] = {static_cast<int32_t>(f.phase), f.ws, f.count, f.aux, f.state};
    key.append(reinterpret_cast<const char*>(ptrs), sizeof ptrs);
    key.append(reinterpret_cast<const char*>(v), sizeof v);
    key.append(reinterpret_cast<const char*>(&f.candidates), sizeof f.candidates);
  }
  return key;
}

// A grammar stack's frames as bytes, to tell readings apart.
std::string RuleKey(const Stack& s) {
  std::string key;
  for (size_t i = 1; i < s.size(); ++i) {
    const int32_t v[3] = {s[i].count, s[i].state, s[i].aux};
    key.append(reinterpret_cast<const char*>(v), sizeof v);
  }
  return key;
}

}  // namespace

void Matcher::ExpandRule(Stack s, std::vector<Stack>* out, std::set<std::string>* seen) const {
  if (out->size() >= kMaxStacks || !seen->insert(RuleKey(s)).second) return;
  const Frame f = s.back();
  const RecursiveGrammar& g = *f.node->grammar;
  if (f.aux == 0) {  // between characters: the rule may call another, or end
    for (auto [callee, back] : g.calls[f.count][f.state]) {
      if (s.size() >= kMaxDepth) break;
      Stack t = s;
      t.back().state = back;
      Frame call{f.node, Phase::kRule};
      call.count = callee;
      call.state = Regex::kStart;
      t.push_back(call);
      ExpandRule(std::move(t), out, seen);
    }
    if (s.size() > 2 && g.rules[f.count]->Accepting(f.state)) {
      Stack t = s;
      t.pop_back();  // the caller resumes at the state its call returns to
      ExpandRule(std::move(t), out, seen);
    }
  }
  out->push_back(std::move(s));
}

void Matcher::StepRule(Stack s, uint8_t c, std::vector<Stack>* out) const {
  std::vector<Stack> ready;
  std::set<std::string> seen;
  ExpandRule(std::move(s), &ready, &seen);
  for (Stack& t : ready) {
    Frame& f = t.back();
    const Regex& re = *f.node->grammar->rules[f.count];
    if (f.aux != 0) {
      if (c < 0x80 || c > 0x9F) continue;
      f.aux = 0;
    }
    const int32_t q = re.Next(f.state, c);
    if (q == Regex::kDead) continue;
    if (c == 0xED) {
      // Text's 0xED starts U+D000-D7FF only (80-9F next); A0-BF next would be a call's path.
      bool character = false;
      for (int b = 0x80; b <= 0x9F && !character; ++b) {
        character = re.Next(q, static_cast<uint8_t>(b)) != Regex::kDead;
      }
      if (!character) continue;
      f.aux = 1;
    }
    f.state = q;
    out->push_back(std::move(t));
  }
}

bool Matcher::Step(uint8_t c) {
  std::vector<Stack> next;
  for (Stack& s : stacks_) StepStack(s, c, &next);
  if (next.size() > 1) {
    // Readings often meet again: a grammar's two ways to the same calls and states, or two
    // anyOf options that took the same bytes and were popped back to the same parent (each
    // array item would double them). Equal stacks read on alike: one each, before the bound,
    // which must only ever drop readings that differ.
    std::unordered_set<std::string> seen;
    std::vector<Stack> unique;
    for (Stack& s : next) {
      if (seen.insert(StackKey(s)).second) unique.push_back(std::move(s));
    }
    next = std::move(unique);
  }
  if (next.size() > kMaxStacks) next.resize(kMaxStacks);
  stacks_ = std::move(next);
  return !stacks_.empty();
}

bool Matcher::Advance(std::string_view bytes) {
  Matcher m = *this;
  for (char c : bytes) {
    if (!m.Step(static_cast<uint8_t>(c))) return false;
  }
  *this = std::move(m);
  return true;
}

bool Matcher::Accepts(std::string_view bytes) const {
  Matcher m = *this;
  for (char c : bytes) {
    if (!m.Step(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool Matcher::Complete() const {
  for (const Stack& s : stacks_) {
    const Frame& top = s.back();
    if (top.phase == Phase::kRule) {
      // Complete if the readings it stands for include root's rule at an end of its own.
      std::vector<Stack> ready;
      std::set<std::string> seen;
      ExpandRule(s, &ready, &seen);
      for (const Stack& t : ready) {
        const Frame& f = t.back();
        if (t.size() == 2 && f.aux == 0 && f.node->grammar->rules[f.count]->Accepting(f.state)) {
          return true;
        }
      }
      continue;
    }
    if (top.phase == Phase::kRootDone) return true;
    // A number at the root ends with the text; so does a regex's.
    if (s.size() == 2 && Accepting(top.phase)) return true;
    if ((top.phase == Phase::kRegex || (s.size() == 2 && top.phase == Phase::kNumPattern)) &&
        top.node->pattern->Accepting(top.state)) {
      return true;
    }
  }
  return false;
}

bool Matcher::InFreeString() const {
  if (stacks_.empty()) return false;
  for (const Stack& s : stacks_) {
    const Frame& top = s.back();
    if (top.phase != Phase::kStr ||
        (top.node != nullptr && (top.node->max_length >= 0 || top.node->pattern != nullptr))) {
      return false;
    }
  }
  return true;
}

const Regex* Matcher::RawRegex(int32_t* state) const {
  if (stacks_.size() != 1 || stacks_[0].back().phase != Phase::kRegex) return nullptr;
  *state = stacks_[0].back().state;
  return stacks_[0].back().node->pattern.get();
}

}  // namespace cpm::structured
