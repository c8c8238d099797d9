#include "structured/regex_parser.h"

#include <algorithm>
#include <string>

namespace cpm::structured::regex {

CharSet Normalize(CharSet ranges) {
  std::sort(ranges.begin(), ranges.end());
  CharSet merged;
  for (auto [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!merged.empty() && lo <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, hi);
    } else {
      merged.push_back({lo, hi});
    }
  }
  // UTF-8 text holds no surrogates: a set that names them can only match what it has besides.
  CharSet out;
  for (auto [lo, hi] : merged) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      out.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) out.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) out.push_back({0xE000, hi});
  }
  return out;
}

CharSet Complement(const CharSet& s) {
  CharSet out;
  uint32_t next = 0;
  for (auto [lo, hi] : s) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return Normalize(std::move(out));
}

int Ast::Add(Node n) {
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

int Ast::Op(Node::Op op, std::vector<int> children) {
  Node n;
  n.op = op;
  n.children = std::move(children);
  return Add(std::move(n));
}

int Ast::Chars(CharSet set) {
  Node n;
  n.op = Node::Op::kChars;
  n.chars = std::move(set);
  return Add(std::move(n));
}

int Ast::Sequence(std::vector<int> items) {
  if (items.empty()) return Op(Node::Op::kEmpty);
  return items.size() == 1 ? items[0] : Op(Node::Op::kConcat, std::move(items));
}

int Ast::Alternatives(std::vector<int> options) {
  return options.size() == 1 ? options[0] : Op(Node::Op::kAlt, std::move(options));
}

int Ast::Repeat(int child, int min, int max) {
  Node n;
  n.op = Node::Op::kRepeat;
  n.children = {child};
  n.min = min;
  n.max = max;
  return Add(std::move(n));
}

namespace {

const CharSet kDigit = {{'0', '9'}};
const CharSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CharSet kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}};  // \t \n \v \f \r

bool IsHex(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
uint32_t HexValue(uint32_t c) {
  return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}
bool IsAsciiAlnum(uint32_t c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool IsSurrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

// A class escape's set (\d \w \s and their complements), or null for another letter.
const CharSet* ClassEscape(uint32_t c, CharSet* storage) {
  switch (c) {
    case 'd': return &kDigit;
    case 'w': return &kWord;
    case 's': return &kSpace;
    case 'D': *storage = Complement(kDigit); return storage;
    case 'W': *storage = Complement(kWord); return storage;
    case 'S': *storage = Complement(kSpace); return storage;
    default: return nullptr;
  }
}

// Recursive descent over the pattern's code points: alternation > sequence > quantified atom.
class Parser {
 public:
  explicit Parser(std::string_view pattern) : pattern_(pattern) {}

  StatusOr<Ast> Run() {
    CPM_RETURN_IF_ERROR(Decode());
    CPM_ASSIGN_OR_RETURN(ast_.root, Alternation(0));
    if (More()) return Error("unbalanced parenthesis ')'", i_);
    return std::move(ast_);
  }

 private:
  // The pattern as code points, each with its byte offset (for error messages).
  Status Decode() {
    for (size_t b = 0; b < pattern_.size();) {
      const auto bad = [&] {
        return InvalidArgument("regex: the pattern is not valid UTF-8 at offset " +
                               std::to_string(b));
      };
      const uint8_t c = static_cast<uint8_t>(pattern_[b]);
      const int more = c < 0x80 ? 0 : c >= 0xc2 && c <= 0xdf ? 1 : c >= 0xe0 && c <= 0xef ? 2
                                                           : c >= 0xf0 && c <= 0xf4 ? 3 : -1;
      if (more < 0 || b + more >= pattern_.size()) return bad();
      uint32_t cp = more == 0 ? c : c & (0x3f >> more);
      for (int k = 1; k <= more; ++k) {
        const uint8_t t = static_cast<uint8_t>(pattern_[b + k]);
        if ((t & 0xc0) != 0x80) return bad();
        cp = cp << 6 | (t & 0x3f);
      }
      const uint32_t least[] = {0, 0x80, 0x800, 0x10000};
      if (cp < least[more] || cp > kMaxCodePoint || IsSurrogate(cp)) return bad();
      cps_.push_back(cp);
      offsets_.push_back(b);
      b += more + 1;
    }
    offsets_.push_back(pattern_.size());
    return OkStatus();
  }

  bool More() const { return i_ < cps_.size(); }
  uint32_t Peek(size_t ahead = 0) const {
    return i_ + ahead < cps_.size() ? cps_[i_ + ahead] : 0xFFFFFFFF;
  }
  Status Error(const std::string& what, size_t at) const {
    return InvalidArgument("regex: " + what + " at offset " + std::to_string(offsets_[at]));
  }

  StatusOr<int> Alternation(int depth) {
    std::vector<int> options;
    for (;;) {
      CPM_ASSIGN_OR_RETURN(int option, Sequence(depth));
      options.push_back(option);
      if (!More() || Peek() != '|') break;
      ++i_;
    }
    return ast_.Alternatives(std::move(options));
  }

  StatusOr<int> Sequence(int depth) {
    std::vector<int> items;
    while (More() && Peek() != '|' && Peek() != ')') {
      CPM_ASSIGN_OR_RETURN(int atom, Atom(depth));
      CPM_ASSIGN_OR_RETURN(atom, Quantified(atom));
      items.push_back(atom);
    }
    return ast_.Sequence(std::move(items));
  }

  // `atom` under the quantifiers that follow it (one, and a lazy '?' after it).
  StatusOr<int> Quantified(int atom) {
    bool quantified = false;
    while (More()) {
      const size_t at = i_;
      int min = 0, max = -1;
      const uint32_t c = Peek();
      if (c == '*' || c == '+' || c == '?') {
        min = c == '+' ? 1 : 0;
        max = c == '?' ? 1 : -1;
        ++i_;
      } else if (c == '{') {
        CPM_ASSIGN_OR_RETURN(const bool braces, Braces(&min, &max));
        if (!braces) break;  // a literal '{'
      } else {
        break;
      }
      const Node::Op op = ast_.nodes[atom].op;
      if (quantified) return Error("multiple repeat", at);
      if (op == Node::Op::kBegin || op == Node::Op::kEnd) return Error("nothing to repeat", at);
      quantified = true;
      if (More() && Peek() == '?') {
        ++i_;  // lazy: the same texts match
      } else if (More() && Peek() == '+') {
        return Error("possessive quantifiers are not supported", i_);
      }
      atom = ast_.Repeat(atom, min, max);
    }
    return atom;
  }

  // {n} {n,} {n,m} {,m} at i_: true and past it, or false (i_ unmoved) if it is not one.
  StatusOr<bool> Braces(int* min, int* max) {
    const size_t start = i_;
    size_t j = i_ + 1;
    const auto number = [&](int64_t* v) {
      const size_t from = j;
      *v = 0;
      while (j < cps_.size() && cps_[j] >= '0' && cps_[j] <= '9') {
        *v = std::min<int64_t>(*v * 10 + (cps_[j] - '0'), int64_t{1} << 40);
        ++j;
      }
      return j > from;
    };
    int64_t lo = 0, hi = -1;
    const bool has_lo = number(&lo);
    bool has_hi = false;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      has_hi = number(&hi);
      if (!has_hi) hi = -1;
    } else {
      hi = lo;
      has_hi = has_lo;
    }
    if (j >= cps_.size() || cps_[j] != '}' || (!has_lo && !has_hi)) return false;
    if (lo > kMaxRepeat || hi > kMaxRepeat) {
      return Error("repeat count above " + std::to_string(kMaxRepeat), start);
    }
    if (hi >= 0 && hi < lo) return Error("min repeat greater than max repeat", start);
    *min = static_cast<int>(lo);
    *max = static_cast<int>(hi);
    i_ = j + 1;
    return true;
  }

  StatusOr<int> Atom(int depth) {
    const size_t at = i_;
    const uint32_t c = cps_[i_++];
    switch (c) {
      case '(': return Group(depth, at);
      case '[': return Class(at);
      case '.': return ast_.Chars(Normalize({{0, kMaxCodePoint}}));
      case '^': return ast_.Op(Node::Op::kBegin);
      case '$': return ast_.Op(Node::Op::kEnd);
      case '\\': return Escape(at);
      case '*':
      case '+':
      case '?': return Error("nothing to repeat", at);
      default: return ast_.Chars({{c, c}});
    }
  }

  StatusOr<int> Group(int depth, size_t at) {
    if (depth + 1 > kMaxGroupDepth) {
      return Error("groups nested deeper than " + std::to_string(kMaxGroupDepth), at);
    }
    if (More() && Peek() == '?') {
      ++i_;
      const uint32_t c = Peek();
      if (c == ':') {
        ++i_;
      } else if (c == '=' || c == '!') {
        return Error("lookahead is not supported", at);
      } else if (c == '<' && (Peek(1) == '=' || Peek(1) == '!')) {
        return Error("lookbehind is not supported", at);
      } else if (c == 'P' && Peek(1) == '=') {
        return Error("backreferences are not supported", at);
      } else if (c == '<' || (c == 'P' && Peek(1) == '<')) {
        i_ += c == 'P' ? 2 : 1;
        CPM_RETURN_IF_ERROR(GroupName(at));
      } else {
        return Error("inline flags and (?" + std::string(1, static_cast<char>(c & 0x7f)) +
                         "...) groups are not supported",
                     at);
      }
    }
    CPM_ASSIGN_OR_RETURN(int inner, Alternation(depth + 1));
    if (!More() || Peek() != ')') return Error("missing ), unterminated subpattern", at);
    ++i_;
    return inner;
  }

  // A group's name up to '>' (letters, digits, '_'; not starting with a digit), skipped.
  Status GroupName(size_t at) {
    const size_t from = i_;
    while (More() && (IsAsciiAlnum(Peek()) || Peek() == '_')) ++i_;
    if (i_ == from || !More() || Peek() != '>' || (cps_[from] >= '0' && cps_[from] <= '9')) {
      return Error("bad group name", at);
    }
    ++i_;
    return OkStatus();
  }

  StatusOr<int> Escape(size_t at) {
    if (!More()) return Error("bad escape (end of pattern)", at);
    const uint32_t c = cps_[i_++];
    CharSet storage;
    if (const CharSet* set = ClassEscape(c, &storage)) return ast_.Chars(*set);
    switch (c) {
      case 'b':
      case 'B': return Error("word boundaries (\\b, \\B) are not supported", at);
      case 'A': return ast_.Op(Node::Op::kBegin);
      case 'z':
      case 'Z': return ast_.Op(Node::Op::kEnd);
      case 'k': return Error("backreferences are not supported", at);
      case 'p':
      case 'P': return Error("Unicode property classes (\\p, \\P) are not supported", at);
      default: break;
    }
    if (c >= '1' && c <= '9') return Error("backreferences are not supported", at);
    CPM_ASSIGN_OR_RETURN(const uint32_t cp, CharEscape(c, at));
    return ast_.Chars({{cp, cp}});
  }

  // The character of escape `\c` (c already read): control escapes, \0, hex and Unicode
  // escapes, or c itself for punctuation and non-ASCII.
  StatusOr<uint32_t> CharEscape(uint32_t c, size_t at) {
    switch (c) {
      case 'n': return 0x0A;
      case 'r': return 0x0D;
      case 't': return 0x09;
      case 'f': return 0x0C;
      case 'v': return 0x0B;
      case 'a': return 0x07;
      case '0':
        if (More() && Peek() >= '0' && Peek() <= '9') {
          return Error("octal escapes are not supported", at);
        }
        return 0;
      case 'x': return Hex(2, at);
      case 'U': return Hex(8, at);
      case 'u': {
        if (More() && Peek() == '{') {  // \u{H...}
          ++i_;
          uint32_t cp = 0;
          size_t digits = 0;
          while (More() && IsHex(Peek()) && digits < 8) {
            cp = cp << 4 | HexValue(cps_[i_++]);
            ++digits;
          }
          if (digits == 0 || !More() || Peek() != '}') return Error("bad \\u{...} escape", at);
          ++i_;
          if (cp > kMaxCodePoint || IsSurrogate(cp)) return Error("bad code point", at);
          return cp;
        }
        CPM_ASSIGN_OR_RETURN(uint32_t cp, Hex(4, at));
        // A surrogate pair written as two escapes is one character.
        if (cp >= 0xD800 && cp <= 0xDBFF && Peek() == '\\' && Peek(1) == 'u') {
          const size_t save = i_;
          i_ += 2;
          auto low = Hex(4, at);
          if (low.ok() && *low >= 0xDC00 && *low <= 0xDFFF) {
            return 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
          }
          i_ = save;
        }
        if (IsSurrogate(cp)) return Error("a lone surrogate matches no UTF-8 text", at);
        return cp;
      }
      case 'c':
        if (More() && ((Peek() | 0x20) >= 'a' && (Peek() | 0x20) <= 'z')) return cps_[i_++] % 32;
        return Error("bad control escape \\c", at);
      default: break;
    }
    if (IsAsciiAlnum(c)) {
      return Error("bad escape \\" + std::string(1, static_cast<char>(c)), at);
    }
    return c;
  }

  // `digits` hex digits at i_, at most U+10FFFF (\uHHHH may be half a surrogate pair: the
  // caller decides).
  StatusOr<uint32_t> Hex(int digits, size_t at) {
    uint32_t cp = 0;
    for (int d = 0; d < digits; ++d) {
      if (!More() || !IsHex(Peek())) return Error("incomplete hex escape", at);
      cp = cp << 4 | HexValue(cps_[i_++]);
    }
    if (cp > kMaxCodePoint || (digits == 8 && IsSurrogate(cp))) {
      return Error("bad code point", at);
    }
    return cp;
  }

  // One item of a class: a class escape's set, or one character (which may start a range).
  struct ClassItem {
    bool is_set = false;
    CharSet set;
    uint32_t cp = 0;
  };
  StatusOr<ClassItem> ClassAtom(size_t at) {
    ClassItem item;
    const uint32_t c = cps_[i_++];
    if (c != '\\') {
      item.cp = c;
      return item;
    }
    if (!More()) return Error("unterminated character set", at);
    const uint32_t e = cps_[i_++];
    if (const CharSet* set = ClassEscape(e, &item.set)) {
      item.is_set = true;
      if (set != &item.set) item.set = *set;
      return item;
    }
    if (e == 'b') {
      item.cp = 0x08;  // backspace, inside a class
      return item;
    }
    CPM_ASSIGN_OR_RETURN(item.cp, CharEscape(e, i_ - 2));
    return item;
  }

  // [...] or [^...], '[' read. A ']' first is a literal; so is '-' first or last.
  StatusOr<int> Class(size_t at) {
    bool negate = false;
    if (More() && Peek() == '^') {
      negate = true;
      ++i_;
    }
    CharSet set;
    for (bool first = true;; first = false) {
      if (!More()) return Error("unterminated character set", at);
      if (Peek() == ']' && !first) {
        ++i_;
        break;
      }
      const size_t item_at = i_;
      CPM_ASSIGN_OR_RETURN(ClassItem lo, ClassAtom(at));
      if (!lo.is_set && More() && Peek() == '-' && Peek(1) != ']' && i_ + 1 < cps_.size()) {
        ++i_;
        CPM_ASSIGN_OR_RETURN(ClassItem hi, ClassAtom(at));
        if (hi.is_set || hi.cp < lo.cp) return Error("bad character range", item_at);
        set.push_back({lo.cp, hi.cp});
      } else if (lo.is_set) {
        set.insert(set.end(), lo.set.begin(), lo.set.end());
      } else {
        set.push_back({lo.cp, lo.cp});
      }
    }
    set = Normalize(std::move(set));
    return ast_.Chars(negate ? Complement(set) : std::move(set));
  }

  std::string_view pattern_;
  std::vector<uint32_t> cps_;
  std::vector<size_t> offsets_;
  size_t i_ = 0;
  Ast ast_;
};

}  // namespace

StatusOr<Ast> Parse(std::string_view pattern) { return Parser(pattern).Run(); }

}  // namespace cpm::structured::regex
