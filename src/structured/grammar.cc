#include "structured/grammar.h"

#include <cctype>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "structured/regex_parser.h"

namespace cpm::structured {
namespace {

using regex::Ast;
using regex::Node;

bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9') || c == '-'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
  return -1;
}

// Recursive descent over the grammar's bytes into one syntax tree: each rule's body is a
// subtree; a reference to a rule is a placeholder node (kEmpty) noted in `refs_` until Inline.
class GrammarParser {
 public:
  explicit GrammarParser(std::string_view text) : text_(text) {}

  StatusOr<CompiledGrammar> Run() {
    Skip();
    while (i_ < text_.size()) {
      const size_t at = i_;
      const std::string name = Name();
      if (name.empty()) return Error(std::string("unexpected '") + text_[at] + "'", at);
      Skip();
      if (text_.substr(i_, 3) != "::=") return Error("'::=' expected after '" + name + "'", i_);
      i_ += 3;
      if (rules_.count(name)) return Error("rule '" + name + "' defined twice", at);
      CPM_ASSIGN_OR_RETURN(rules_[name], Alternation(0));
    }
    if (!rules_.count("root")) return InvalidArgument("grammar: no 'root' rule");
    for (const auto& [node, ref] : refs_) {
      if (!rules_.count(ref.name)) return Error("undefined rule '" + ref.name + "'", ref.at);
    }
    FindCycles();
    CompiledGrammar out;
    if (calls_.empty()) {
      Ast ast;
      std::vector<std::string> path = {"root"};
      CPM_ASSIGN_OR_RETURN(ast.root, Inline(rules_.at("root"), &ast, &path));
      auto re = Regex::FromAst(ast);
      if (!re.ok()) return InvalidArgument("grammar: " + re.status().message());
      out.regex = std::move(*re);
      return out;
    }
    CPM_ASSIGN_OR_RETURN(out.recursive, BuildRecursive());
    return out;
  }

 private:
  struct Ref {
    std::string name;
    size_t at;
  };

  Status Error(const std::string& what, size_t at) const {
    return InvalidArgument("grammar: " + what + " at offset " + std::to_string(at));
  }

  // Whitespace (newlines included) and # comments.
  void Skip() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else if (c == '#') {
        while (i_ < text_.size() && text_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }

  std::string Name() {
    const size_t from = i_;
    if (i_ < text_.size() && IsNameStart(text_[i_])) {
      while (i_ < text_.size() && IsNameChar(text_[i_])) ++i_;
    }
    return std::string(text_.substr(from, i_ - from));
  }

  // The next rule begins here: a name, then "::=".
  bool AtRuleStart() const {
    size_t j = i_;
    if (j >= text_.size() || !IsNameStart(text_[j])) return false;
    while (j < text_.size() && IsNameChar(text_[j])) ++j;
    while (j < text_.size() && (text_[j] == ' ' || text_[j] == '\t')) ++j;
    return text_.substr(j, 3) == "::=";
  }

  StatusOr<int> Alternation(int depth) {
    if (depth > regex::kMaxGroupDepth) return Error("groups nested too deep", i_);
    std::vector<int> options;
    for (;;) {
      CPM_ASSIGN_OR_RETURN(int option, Sequence(depth));
      options.push_back(option);
      Skip();
      if (i_ >= text_.size() || text_[i_] != '|') break;
      ++i_;
    }
    return ast_.Alternatives(std::move(options));
  }

  StatusOr<int> Sequence(int depth) {
    std::vector<int> items;
    for (;;) {
      Skip();
      if (i_ >= text_.size() || text_[i_] == '|' || text_[i_] == ')' || AtRuleStart()) break;
      CPM_ASSIGN_OR_RETURN(int item, Primary(depth));
      CPM_ASSIGN_OR_RETURN(item, Quantified(item));
      items.push_back(item);
    }
    // xgrammar's sequences hold at least one element ("()" is the empty one): an empty rule or
    // alternative is a typo, refused rather than matching the empty text.
    if (items.empty()) return Error("expected an element (write () for the empty sequence)", i_);
    return ast_.Sequence(std::move(items));
  }

  StatusOr<int> Quantified(int item) {
    if (i_ >= text_.size()) return item;
    const char c = text_[i_];
    int min = 0, max = -1;
    if (c == '*' || c == '+' || c == '?') {
      min = c == '+' ? 1 : 0;
      max = c == '?' ? 1 : -1;
      ++i_;
    } else if (c == '{') {
      const size_t at = i_;
      const size_t close = text_.find('}', i_);
      if (close == std::string_view::npos) return Error("unterminated '{'", at);
      // {n}, {n,}, {n,m}: read by the regex parser on a stand-in atom.
      auto probe = regex::Parse("a" + std::string(text_.substr(i_, close + 1 - i_)));
      if (!probe.ok() || probe->nodes[probe->root].op != Node::Op::kRepeat) {
        return Error("bad repetition '" + std::string(text_.substr(i_, close + 1 - i_)) + "'",
                     at);
      }
      min = probe->nodes[probe->root].min;
      max = probe->nodes[probe->root].max;
      i_ = close + 1;
    } else {
      return item;
    }
    return ast_.Repeat(item, min, max);
  }

  StatusOr<int> Primary(int depth) {
    const size_t at = i_;
    const char c = text_[i_];
    if (c == '"' || c == '\'') return String(c);
    if (c == '[') return Class();
    if (c == '/') return SlashRegex();
    if (c == '.') {
      ++i_;
      return ast_.Chars(regex::Normalize({{0, regex::kMaxCodePoint}}));
    }
    if (c == '(') {
      ++i_;
      Skip();
      if (i_ < text_.size() && text_[i_] == ')') {  // "()": the empty sequence
        ++i_;
        return ast_.Sequence({});
      }
      CPM_ASSIGN_OR_RETURN(int inner, Alternation(depth + 1));
      Skip();
      if (i_ >= text_.size() || text_[i_] != ')') return Error("missing ')'", at);
      ++i_;
      return inner;
    }
    const std::string name = Name();
    if (name.empty()) return Error(std::string("unexpected '") + c + "'", at);
    const int placeholder = ast_.Op(Node::Op::kEmpty);
    refs_[placeholder] = {name, at};
    return placeholder;
  }

  // A quoted literal, written as the regex of its characters (each escaped, so that it stands
  // for itself; raw non-ASCII characters as they are) for the regex parser to read.
  StatusOr<int> String(char quote) {
    const size_t at = i_++;
    std::string pattern;
    const auto literal = [&](uint32_t cp) {
      char escaped[16];
      std::snprintf(escaped, sizeof escaped, "\\U%08X", cp);
      pattern += escaped;
    };
    for (;;) {
      if (i_ >= text_.size()) return Error("unterminated string", at);
      const char c = text_[i_++];
      if (c == quote) break;
      if (c != '\\') {
        if (static_cast<unsigned char>(c) < 0x80) literal(static_cast<unsigned char>(c));
        else pattern += c;
        continue;
      }
      if (i_ >= text_.size()) return Error("unterminated string", at);
      const char e = text_[i_++];
      const int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
      if (digits == 0) {
        const std::string from = "nrt\\\"'", to = "\n\r\t\\\"'";
        const size_t k = from.find(e);
        if (k == std::string::npos) return Error(std::string("bad escape \\") + e, i_ - 2);
        literal(static_cast<unsigned char>(to[k]));
        continue;
      }
      uint32_t cp = 0;
      for (int d = 0; d < digits; ++d) {
        const int v = i_ < text_.size() ? HexValue(text_[i_]) : -1;
        if (v < 0) return Error("bad hex escape", i_);
        cp = cp << 4 | static_cast<uint32_t>(v);
        ++i_;
      }
      if (cp > regex::kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return Error("bad code point", i_);
      }
      literal(cp);
    }
    return Graft(pattern, at);
  }

  // /pattern/, a regex terminal (Lark's, and llguidance's grammars'): the pattern as the regex
  // parser reads one, a "\/" standing for '/'. No flags follow it.
  StatusOr<int> SlashRegex() {
    const size_t at = i_;
    size_t j = i_ + 1;
    while (j < text_.size() && text_[j] != '/' && text_[j] != '\n') j += text_[j] == '\\' ? 2 : 1;
    if (j >= text_.size() || text_[j] != '/') return Error("unterminated /regex/", at);
    i_ = j + 1;
    if (i_ < text_.size() && std::isalpha(static_cast<unsigned char>(text_[i_]))) {
      return Error("regex flags are not supported", i_);
    }
    if (j == at + 1) return Error("empty /regex/", at);
    return Graft(std::string(text_.substr(at + 1, j - at - 1)), at);
  }

  // [...] as the regex parser reads a class.
  StatusOr<int> Class() {
    const size_t at = i_;
    size_t j = i_ + 1;
    if (j < text_.size() && text_[j] == '^') ++j;
    if (j < text_.size() && text_[j] == ']') ++j;  // a leading ']' is a literal
    while (j < text_.size() && text_[j] != ']') j += text_[j] == '\\' ? 2 : 1;
    if (j >= text_.size()) return Error("unterminated character class", at);
    i_ = j + 1;
    return Graft(std::string(text_.substr(at, j + 1 - at)), at);
  }

  // The rules each rule's body names (directly, not through others).
  std::map<std::string, std::vector<std::string>> References() const {
    std::map<std::string, std::vector<std::string>> out;
    for (const auto& [name, root] : rules_) {
      std::vector<int> todo = {root};
      std::vector<std::string>& names = out[name];
      while (!todo.empty()) {
        const int node = todo.back();
        todo.pop_back();
        if (auto ref = refs_.find(node); ref != refs_.end()) {
          names.push_back(ref->second.name);
          continue;
        }
        for (int c : ast_.nodes[node].children) todo.push_back(c);
      }
    }
    return out;
  }

  // calls_ and called_: root and the rules that can reach themselves, if any can.
  void FindCycles() {
    const auto refs = References();
    std::vector<std::string> cyclic;
    for (const auto& [name, _] : rules_) {
      std::set<std::string> seen;
      std::vector<std::string> todo = refs.at(name);
      bool cycle = false;
      while (!todo.empty() && !cycle) {
        const std::string next = todo.back();
        todo.pop_back();
        if (next == name) cycle = true;
        if (!seen.insert(next).second) continue;
        for (const std::string& n : refs.at(next)) todo.push_back(n);
      }
      if (cycle) cyclic.push_back(name);
    }
    if (cyclic.empty()) return;
    called_ = {"root"};
    for (const std::string& name : cyclic) {
      if (name != "root") called_.push_back(name);
    }
    for (size_t i = 0; i < called_.size(); ++i) calls_[called_[i]] = static_cast<int32_t>(i);
  }

  StatusOr<std::shared_ptr<const RecursiveGrammar>> BuildRecursive() {
    if (called_.size() > static_cast<size_t>(RecursiveGrammar::kMaxRules)) {
      return InvalidArgument("grammar: more than " + std::to_string(RecursiveGrammar::kMaxRules) +
                             " recursive rules");
    }
    auto g = std::make_shared<RecursiveGrammar>();
    g->names = called_;
    for (const std::string& name : called_) {
      Ast ast;
      std::vector<std::string> path = {name};
      CPM_ASSIGN_OR_RETURN(ast.root, Inline(rules_.at(name), &ast, &path));
      auto re = Regex::FromAst(ast);
      if (!re.ok()) return InvalidArgument("grammar: rule '" + name + "': " + re.status().message());
      g->rules.push_back(std::move(*re));
    }
    for (const auto& re : g->rules) g->calls.push_back(CallTable(*re));
    CPM_RETURN_IF_ERROR(CheckRecursion(*g));
    return std::shared_ptr<const RecursiveGrammar>(std::move(g));
  }

  // Every state's calls: the paths ED, A0+(i>>6), 80+(i&63) that lead somewhere.
  static std::vector<std::vector<std::pair<int32_t, int32_t>>> CallTable(const Regex& re) {
    std::vector<std::vector<std::pair<int32_t, int32_t>>> calls(re.num_states());
    for (int32_t q = 0; q < re.num_states(); ++q) {
      const int32_t s1 = re.Next(q, 0xED);
      if (s1 == Regex::kDead) continue;
      for (int b2 = 0xA0; b2 <= 0xBF; ++b2) {
        const int32_t s2 = re.Next(s1, static_cast<uint8_t>(b2));
        if (s2 == Regex::kDead) continue;
        for (int b3 = 0x80; b3 <= 0xBF; ++b3) {
          const int32_t s3 = re.Next(s2, static_cast<uint8_t>(b3));
          if (s3 != Regex::kDead) calls[q].push_back({(b2 - 0xA0) << 6 | (b3 - 0x80), s3});
        }
      }
    }
    return calls;
  }

  // Whether rule r can reach an accepting state from its start, by text (`bytes`) or not, through
  // calls of the rules `ok` marks.
  static bool CanEnd(const RecursiveGrammar& g, size_t r, const std::vector<bool>& ok, bool bytes) {
    const Regex& re = *g.rules[r];
    std::vector<bool> seen(static_cast<size_t>(re.num_states()));
    std::vector<int32_t> todo = {Regex::kStart};
    seen[Regex::kStart] = true;
    const auto visit = [&](int32_t q) {
      if (q != Regex::kDead && !seen[q]) seen[q] = true, todo.push_back(q);
    };
    while (!todo.empty()) {
      const int32_t q = todo.back();
      todo.pop_back();
      if (re.Accepting(q)) return true;
      for (auto [callee, back] : g.calls[r][q]) {
        if (ok[callee]) visit(back);
      }
      for (int b = 0; bytes && b < 256; ++b) {
        // A real 0xED: only the continuations of a character (80-9F), not of a call.
        const int32_t q1 = re.Next(q, static_cast<uint8_t>(b));
        if (b != 0xED || q1 == Regex::kDead) {
          visit(q1);
          continue;
        }
        for (int c = 0x80; c <= 0x9F; ++c) visit(re.Next(q1, static_cast<uint8_t>(c)));
      }
    }
    return false;
  }

  // Every rule can end (else generation could enter it and never finish), and none reaches itself
  // before reading a byte (left recursion: the pushdown matcher would call forever).
  Status CheckRecursion(const RecursiveGrammar& g) const {
    const size_t n = g.rules.size();
    std::vector<bool> productive(n, false), nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (!productive[r] && CanEnd(g, r, productive, true)) productive[r] = changed = true;
        if (!nullable[r] && CanEnd(g, r, nullable, false)) nullable[r] = changed = true;
      }
    }
    for (size_t k = 1; k <= n; ++k) {  // root last: a rule it calls is the cause, if one is
      const size_t r = k % n;
      if (!productive[r]) {
        return InvalidArgument("grammar: rule '" + g.names[r] +
                               "' can never end (every way through it calls itself again)");
      }
    }
    // Left calls: those made before any byte (from states reached by calls of nullable rules).
    std::vector<std::vector<int32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      const Regex& re = *g.rules[r];
      std::vector<bool> seen(static_cast<size_t>(re.num_states()));
      std::vector<int32_t> todo = {Regex::kStart};
      seen[Regex::kStart] = true;
      while (!todo.empty()) {
        const int32_t q = todo.back();
        todo.pop_back();
        for (auto [callee, back] : g.calls[r][q]) {
          left[r].push_back(callee);
          if (nullable[callee] && !seen[back]) seen[back] = true, todo.push_back(back);
        }
      }
    }
    for (size_t r = 0; r < n; ++r) {
      std::vector<bool> seen(n, false);
      std::vector<int32_t> todo(left[r].begin(), left[r].end());
      while (!todo.empty()) {
        const int32_t c = todo.back();
        todo.pop_back();
        if (c == static_cast<int32_t>(r)) {
          return InvalidArgument("grammar: rule '" + g.names[r] +
                                 "' is left-recursive (it can reach itself before reading any "
                                 "text), which is not supported; write the repetition with * or +");
        }
        if (seen[c]) continue;
        seen[c] = true;
        for (int32_t next : left[c]) todo.push_back(next);
      }
    }
    return OkStatus();
  }

  // `pattern` parsed by the regex parser, its nodes appended to ours; the subtree's root.
  StatusOr<int> Graft(const std::string& pattern, size_t at) {
    auto parsed = regex::Parse(pattern);
    if (!parsed.ok()) return Error(parsed.status().message(), at);
    const int offset = static_cast<int>(ast_.nodes.size());
    for (Node n : parsed->nodes) {
      for (int& c : n.children) c += offset;
      ast_.Add(std::move(n));
    }
    return parsed->root + offset;
  }

  // A copy of subtree `node` into `out` with every rule reference replaced by the rule's body,
  // or by a call where the rule is compiled on its own (calls_); `path`: the rules being
  // inlined, outermost first.
  StatusOr<int> Inline(int node, Ast* out, std::vector<std::string>* path) {
    if (out->nodes.size() > kMaxGrammarNodes) {
      return InvalidArgument("grammar: too large once its rules are inlined (more than " +
                             std::to_string(kMaxGrammarNodes) + " nodes)");
    }
    if (auto ref = refs_.find(node); ref != refs_.end()) {
      const std::string& name = ref->second.name;
      if (auto call = calls_.find(name); call != calls_.end()) {
        const uint32_t cp = RecursiveGrammar::kCallBase + static_cast<uint32_t>(call->second);
        regex::Node n;
        n.op = Node::Op::kChars;
        n.chars = {{cp, cp}};  // a surrogate: not through Normalize, which drops them
        return out->Add(std::move(n));
      }
      for (size_t k = 0; k < path->size(); ++k) {
        if ((*path)[k] != name) continue;
        std::string cycle;
        for (size_t m = k; m < path->size(); ++m) cycle += (*path)[m] + " -> ";
        // Unreachable: FindCycles makes every rule on a cycle a call. Kept against a bug that
        // would otherwise recurse without end.
        return Internal("grammar: rules (" + cycle + name + ") reached the inliner");
      }
      path->push_back(name);
      auto inlined = Inline(rules_.at(name), out, path);
      path->pop_back();
      return inlined;
    }
    Node copy = ast_.nodes[node];
    for (int& c : copy.children) {
      CPM_ASSIGN_OR_RETURN(c, Inline(c, out, path));
    }
    return out->Add(std::move(copy));
  }

  std::string_view text_;
  size_t i_ = 0;
  Ast ast_;
  std::map<std::string, int> rules_;
  std::map<int, Ref> refs_;  // placeholder node -> the rule it names
  // Rules compiled as automata of their own, called by the others: root and every rule on a
  // cycle of references (empty: no recursion); their indices in RecursiveGrammar.
  std::map<std::string, int32_t> calls_;
  std::vector<std::string> called_;  // by index
};

}  // namespace

StatusOr<CompiledGrammar> CompileGrammar(std::string_view text) {
  return GrammarParser(text).Run();
}

}  // namespace cpm::structured
