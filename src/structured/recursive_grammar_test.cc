// Recursive grammars through the pushdown matcher, against recognizers written independently
// here (a depth counter, a recursive-descent parser, nlohmann's JSON parser): every text up to a
// length over each grammar's alphabet, for whole matches and, prefix by prefix, for whether the
// matcher keeps exactly the prefixes that can still be completed (no dead end, nothing valid cut).
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/json_matcher.h"
#include "structured/json_schema.h"
#include "structured/token_table.h"

namespace cpm::structured {
namespace {

std::shared_ptr<const Schema> GrammarSchema(const std::string& text) {
  auto s = Schema::FromGrammar(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? *s : nullptr;
}

// Every text over `alphabet` of at most `max_len` characters, in length order.
std::vector<std::string> AllTexts(const std::string& alphabet, int max_len) {
  std::vector<std::string> out = {""};
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(out[i].size()) == max_len) continue;
    for (char c : alphabet) out.push_back(out[i] + c);
  }
  return out;
}

// Some text of at most `depth` more characters of `alphabet` after `text` that the matcher (at
// `text`) leads to and `matches` accepts: a completion, found by following the matcher.
bool FindCompletion(const Matcher& m, const std::string& text, const std::string& alphabet,
                    int depth, const std::function<bool(const std::string&)>& matches) {
  if (m.Complete() && matches(text)) return true;
  if (depth == 0) return false;
  for (char c : alphabet) {
    Matcher next = m;
    if (next.Step(static_cast<uint8_t>(c)) &&
        FindCompletion(next, text + c, alphabet, depth - 1, matches)) {
      return true;
    }
  }
  return false;
}

// Every text over `alphabet` up to `max_len` characters: a text `matches` accepts is taken
// whole by the matcher and complete (nothing valid is cut); a text the matcher keeps but
// `matches` refuses is not complete and has a completion within `slack` characters (no dead
// end).
void CheckAgainst(const std::string& grammar, const std::string& alphabet, int max_len, int slack,
                  const std::function<bool(const std::string&)>& matches) {
  const auto schema = GrammarSchema(grammar);
  ASSERT_NE(schema, nullptr);
  int valid = 0, kept = 0;
  for (const std::string& text : AllTexts(alphabet, max_len)) {
    Matcher m(schema);
    const bool alive = m.Advance(text);
    if (matches(text)) {
      ++valid;
      ASSERT_TRUE(alive && m.Complete()) << grammar << "\n'" << text << "'";
    } else if (alive) {
      ++kept;
      ASSERT_FALSE(m.Complete()) << grammar << "\n'" << text << "'";
      ASSERT_TRUE(FindCompletion(m, text, alphabet, slack, matches))
          << grammar << "\n'" << text << "' has no completion";
    }
  }
  EXPECT_GT(valid, 5);
  EXPECT_GT(kept, 5);
}

TEST(RecursiveGrammar, BalancedParentheses) {
  const auto balanced = [](const std::string& t) {
    int depth = 0;
    for (char c : t) {
      if (c == 'x') return false;
      depth += c == '(' ? 1 : -1;
      if (depth < 0) return false;
    }
    return depth == 0;
  };
  // Any prefix with depth d needs d more bytes: slack covers the deepest prefix kept.
  CheckAgainst(R"g(root ::= "(" root ")" root | "")g", "()x", 10, 10, balanced);
}

// expr ::= term (("+" | "-") term)*, term ::= factor ("*" factor)*,
// factor ::= [0-9] | "(" expr ")" | "-" factor — as a recursive-descent parser.
class Arithmetic {
 public:
  static bool Matches(const std::string& t) {
    Arithmetic p(t);
    return p.Expr() && p.i_ == t.size();
  }

 private:
  explicit Arithmetic(const std::string& t) : t_(t) {}
  bool Expr() {
    if (!Term()) return false;
    while (i_ < t_.size() && (t_[i_] == '+' || t_[i_] == '-')) {
      ++i_;
      if (!Term()) return false;
    }
    return true;
  }
  bool Term() {
    if (!Factor()) return false;
    while (i_ < t_.size() && t_[i_] == '*') {
      ++i_;
      if (!Factor()) return false;
    }
    return true;
  }
  bool Factor() {
    if (i_ >= t_.size()) return false;
    const char c = t_[i_];
    if (c >= '0' && c <= '9') return ++i_, true;
    if (c == '-') return ++i_, Factor();
    if (c != '(') return false;
    ++i_;
    if (!Expr() || i_ >= t_.size() || t_[i_] != ')') return false;
    return ++i_, true;
  }
  const std::string& t_;
  size_t i_ = 0;
};

TEST(RecursiveGrammar, Arithmetic) {
  const std::string grammar = R"g(
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= factor ("*" factor)*
    factor ::= [0-9] | "(" expr ")" | "-" factor
  )g";
  CheckAgainst(grammar, "1+-*()", 6, 7, Arithmetic::Matches);
}

TEST(RecursiveGrammar, NestedArraysAgainstAJsonParser) {
  // Arrays of digits and arrays, no whitespace: what nlohmann parses as such.
  const auto matches = [](const std::string& t) {
    const auto j = nlohmann::json::parse(t, nullptr, false);
    if (j.is_discarded() || !j.is_array()) return false;
    std::function<bool(const nlohmann::json&)> ok = [&](const nlohmann::json& v) {
      if (v.is_number_unsigned()) return v.get<unsigned>() <= 9;
      if (!v.is_array()) return false;
      for (const auto& e : v) {
        if (!ok(e)) return false;
      }
      return true;
    };
    return ok(j) && j.dump() == t;  // no other spelling of the same value
  };
  CheckAgainst(R"g(
    root ::= array
    array ::= "[" (value ("," value)*)? "]"
    value ::= [0-9] | array
  )g", "[],7", 8, 8, matches);
}

TEST(RecursiveGrammar, TextBytesNeverTakeACallsPath) {
  // A call is the UTF-8 path of a surrogate; U+D000-D7FF share its lead byte 0xED. Text may hold
  // those characters, never a surrogate, wherever a call could go.
  const auto schema = GrammarSchema(R"g(root ::= "(" root ")" | [\uD000-\uD7FF] | "")g");
  ASSERT_NE(schema, nullptr);
  Matcher m(schema);
  EXPECT_TRUE(m.Accepts("(\xED\x9F\xBF)"));
  EXPECT_TRUE(m.Accepts("((\xED\x80\x80))"));
  EXPECT_FALSE(m.Accepts("(\xED\xA0"));  // D800, a surrogate: a call's path, not text
  EXPECT_FALSE(m.Accepts("(\xED\xBF\xBF)"));
  // Where a call and a character both may come next, 0xED goes on as the character only.
  const auto both = GrammarSchema(R"g(root ::= "(" (root | [\uD000-\uD7FF]) ")" | "x")g");
  ASSERT_NE(both, nullptr);
  EXPECT_TRUE(Matcher(both).Accepts("(\xED\x80\x80)"));
  EXPECT_TRUE(Matcher(both).Accepts("((x))"));
  EXPECT_FALSE(Matcher(both).Accepts("(\xED\xA0"));
  EXPECT_FALSE(Matcher(both).Accepts("(\xED\xBF"));
  // Where no character could start with 0xED, the byte itself is refused (no dead end).
  const auto parens = GrammarSchema(R"g(root ::= "(" root ")" | "")g");
  EXPECT_FALSE(Matcher(parens).Accepts("(\xED"));
}

TEST(RecursiveGrammar, TokenMasksMatchTheMatcher) {
  const std::vector<std::string> vocab = {"(", ")", "()", "((", "))", ")(", "1", "+", "1+",
                                          "(1", "1)", "*(", "-", "x", "", "((1+1)*"};
  std::vector<bool> excluded(vocab.size(), false);
  excluded[14] = true;  // the empty token
  TokenTable table(vocab, excluded);
  const auto schema = GrammarSchema(R"g(
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= factor ("*" factor)*
    factor ::= [0-9] | "(" expr ")" | "-" factor
  )g");
  ASSERT_NE(schema, nullptr);
  for (const char* prefix : {"", "(", "((1", "1+", "-(1*(", "(1+1)"}) {
    Matcher m(schema);
    ASSERT_TRUE(m.Advance(prefix)) << prefix;
    std::vector<uint8_t> allowed;
    table.Allowed(m, &allowed);
    for (size_t id = 0; id < vocab.size(); ++id) {
      const bool want = !excluded[id] && m.Accepts(vocab[id]);
      EXPECT_EQ(allowed[id] != 0, want) << "'" << prefix << "' + '" << vocab[id] << "'";
    }
  }
}

TEST(RecursiveGrammar, DeepNestingUpToTheMatchersDepth) {
  const auto schema = GrammarSchema(R"g(root ::= "[" root "]" | "0")g");
  ASSERT_NE(schema, nullptr);
  Matcher m(schema);
  const std::string deep = std::string(100, '[') + "0" + std::string(100, ']');
  EXPECT_TRUE(m.Advance(deep));
  EXPECT_TRUE(m.Complete());
}

// Random grammars whose rules call one another in any direction: each compiles or is refused
// with a grammar error (left recursion, a rule that cannot end), and under every one that
// compiles, random walks of the matcher never reach a dead end: every state it keeps has a
// completion within a few bytes that it accepts as complete.
TEST(RecursiveGrammar, RandomGrammarsHaveNoDeadEnds) {
  std::mt19937 rng(20261202);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint32_t>(n)); };
  const std::string alphabet = "ab()[],x";
  int compiled = 0, refused = 0, steps = 0;
  for (int g = 0; g < 300; ++g) {
    const int rules = 1 + pick(3);
    std::string grammar;
    for (int r = 0; r < rules; ++r) {
      grammar += (r == 0 ? std::string("root") : "r" + std::to_string(r)) + " ::= ";
      for (int alt = 0, alts = 1 + pick(3); alt < alts; ++alt) {
        if (alt > 0) grammar += " | ";
        const int items = pick(4);
        if (items == 0) grammar += "() ";  // the empty alternative, as xgrammar spells it
        for (int item = 0; item < items; ++item) {
          static const char* const kItems[] = {"\"a\"", "\"(\"", "\")\"", "[xb]", "\",\"",
                                               "\"[\" ", "\"]\""};
          if (pick(3) == 0) {
            const int target = pick(rules);
            grammar += (target == 0 ? std::string("root") : "r" + std::to_string(target)) + " ";
          } else {
            grammar += std::string(kItems[pick(7)]) + " ";
          }
          static const char* const kQuantifiers[] = {"", "", "", "*", "+", "?"};
          grammar.insert(grammar.size() - 1, kQuantifiers[pick(6)]);
        }
      }
      grammar += "\n";
    }
    auto schema = Schema::FromGrammar(grammar);
    if (!schema.ok()) {
      ++refused;
      EXPECT_NE(schema.status().message().find("structured_outputs.grammar"), std::string::npos)
          << grammar << schema.status().message();
      continue;
    }
    ++compiled;
    for (int walk = 0; walk < 10; ++walk) {
      Matcher m(*schema);
      std::string text;
      for (int len = 0; len < 12; ++len) {
        std::vector<char> next;
        for (char c : alphabet) {
          if (m.Accepts(std::string(1, c))) next.push_back(c);
        }
        ASSERT_TRUE(!next.empty() || m.Complete()) << grammar << "dead end after '" << text << "'";
        ASSERT_TRUE(FindCompletion(m, text, alphabet, 6, [](const std::string&) { return true; }) ||
                    m.Complete())
            << grammar << "no completion after '" << text << "'";
        if (next.empty()) break;
        const char c = next[pick(static_cast<int>(next.size()))];
        ASSERT_TRUE(m.Step(static_cast<uint8_t>(c)));
        text += c;
        ++steps;
      }
    }
  }
  EXPECT_GT(compiled, 50);
  EXPECT_GT(refused, 5);
  EXPECT_GT(steps, 1000);
}

}  // namespace
}  // namespace cpm::structured
