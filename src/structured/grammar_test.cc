// EBNF grammars: hand cases for the notation and its errors, and random grammars against the
// regex each one spells out (the same language written without rules), compared on random
// texts and on texts the grammar's automaton generates.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/regex.h"

namespace cpm::structured {
namespace {

std::shared_ptr<const Regex> Grammar(const std::string& text) {
  auto g = CompileGrammar(text);
  EXPECT_TRUE(g.ok()) << text << ": " << g.status().message();
  EXPECT_TRUE(!g.ok() || g->regex != nullptr) << text << ": compiled as recursive";
  return g.ok() ? g->regex : nullptr;
}

std::string Error(const std::string& text) {
  auto g = CompileGrammar(text);
  EXPECT_FALSE(g.ok()) << text;
  return g.ok() ? std::string() : g.status().message();
}

TEST(Grammar, VllmBenchmarkSqlGrammar) {
  // The grammar of vLLM's structured-output serving benchmark.
  const auto g = Grammar(R"(
    root ::= select_statement
    select_statement ::= "SELECT " column " from " table " where " condition
    column ::= "col_1 " | "col_2 "
    table ::= "table_1 " | "table_2 "
    condition ::= column "= " number
    number ::= "1 " | "2 "
  )");
  EXPECT_TRUE(g->Matches("SELECT col_1  from table_2  where col_2 = 1 "));
  EXPECT_FALSE(g->Matches("SELECT col_3  from table_2  where col_2 = 1 "));
  EXPECT_FALSE(g->Matches("SELECT col_1  from table_2  where col_2 = 1"));
}

TEST(Grammar, Notation) {
  const auto g = Grammar(
      "# a comment line\n"
      "root ::= greeting (\", \" name)? punct{1,3}  # trailing comment\n"
      "greeting ::= 'hello' | \"h\\u00e9llo\" | \"\\x48i\"\n"
      "name ::= [A-Z] [a-z]*\n"
      "punct ::= [!?.]\n");
  for (const char* yes : {"hello!", "héllo, Ada?!", "Hi...", "hello, X!"}) {
    EXPECT_TRUE(g->Matches(yes)) << yes;
  }
  for (const char* no : {"hello", "hello!!!!", "hello, ada!", "HELLO!"}) {
    EXPECT_FALSE(g->Matches(no)) << no;
  }
  // Rules may span lines; '.' is any character; escapes in strings.
  const auto any = Grammar("root ::= \"<\"\n  . . \">\" \"\\n\\t\\\\\"\n");
  EXPECT_TRUE(any->Matches("<中\n>\n\t\\"));
  EXPECT_TRUE(Grammar("root ::= item+\nitem ::= [^\\]\\n]")->Matches("ab"));
  EXPECT_FALSE(Grammar("root ::= item+\nitem ::= [^\\]\\n]")->Matches("a]"));
  EXPECT_TRUE(Grammar("root ::= \"\"")->Matches(""));
  // A literal is literal, whatever a regex would make of it.
  const auto meta = Grammar(R"(root ::= "a.b*(c)?[d]{2}|^$\\")");
  EXPECT_TRUE(meta->Matches(R"(a.b*(c)?[d]{2}|^$\)"));
  EXPECT_FALSE(meta->Matches("axbbc"));
}

TEST(Grammar, ExplainsWhatItRefuses) {
  const auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  has(Error("root ::= expr\nexpr ::= expr \"+\" term | term\nterm ::= [0-9]+"),
      "rule 'expr' is left-recursive");
  has(Error("root ::= a\na ::= b \"x\"\nb ::= \"\" a \"y\" | \"z\""), "is left-recursive");
  has(Error("root ::= a\na ::= \"(\" a \")\""), "rule 'a' can never end");
  has(Error("root ::= missing"), "undefined rule 'missing' at offset 9");
  has(Error("start ::= \"x\""), "no 'root' rule");
  has(Error("root ::= \"a\"\nroot ::= \"b\""), "rule 'root' defined twice");
  has(Error("root ::= \"a"), "unterminated string at offset 9");
  has(Error("root ::= [a-"), "unterminated character class");
  has(Error("root ::= \"\\q\""), "bad escape \\q");
  has(Error("root ::= \"a\" )"), "unexpected ')'");
  has(Error("root = \"a\""), "'::=' expected after 'root'");
  has(Error("root ::= [z-a]"), "bad character range");
  has(Error("root ::= \"a\"{3,1}"), "bad repetition '{3,1}'");
  // An empty rule or alternative is a typo (xgrammar wants an element); "()" is the empty one.
  has(Error("root ::= "), "expected an element");
  has(Error("root ::= \"a\" |"), "expected an element");
  has(Error("root ::= ( | \"a\")"), "expected an element");
  EXPECT_TRUE(Grammar("root ::= \"a\" ( ) \"b\"")->Matches("ab"));
  EXPECT_TRUE(Grammar("root ::= \"a\" | ()")->Matches(""));
}

// ---- Random grammars against the regexes they spell out ----

struct Spelled {
  std::string grammar, regex;  // the same language twice
};

class GrammarGen {
 public:
  explicit GrammarGen(uint32_t seed) : rng_(seed) {}

  // Rules r0 (root) .. rN; rule i refers only to rules after it, so there is no recursion.
  Spelled Make() {
    const int rules = Int(1, 4);
    std::vector<std::string> regex_of(rules);
    std::string grammar;
    for (int i = rules - 1; i >= 0; --i) {
      const Spelled body = Alternation(i, rules, regex_of, 0);
      grammar += (i == 0 ? "root" : "r" + std::to_string(i)) + " ::= " + body.grammar + "\n";
      regex_of[i] = "(?:" + body.regex + ")";
    }
    return {grammar, regex_of[0]};
  }
  std::mt19937& rng() { return rng_; }

 private:
  int Int(int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng_); }

  Spelled Alternation(int rule, int rules, const std::vector<std::string>& regex_of, int depth) {
    Spelled s = Sequence(rule, rules, regex_of, depth);
    while (Int(0, 3) == 0) {
      const Spelled t = Sequence(rule, rules, regex_of, depth);
      s = {s.grammar + " | " + t.grammar, s.regex + "|" + t.regex};
    }
    return s;
  }

  Spelled Sequence(int rule, int rules, const std::vector<std::string>& regex_of, int depth) {
    Spelled s{"", ""};
    for (int n = Int(1, 3); n > 0; --n) {
      Spelled item = Item(rule, rules, regex_of, depth);
      static const char* const kQuantifiers[] = {"", "", "", "*", "+", "?", "{2}", "{0,2}",
                                                 "{1,}"};
      const std::string q = kQuantifiers[Int(0, 8)];
      s.grammar += (s.grammar.empty() ? "" : " ") + item.grammar + q;
      s.regex += "(?:" + item.regex + ")" + q;
    }
    return s;
  }

  Spelled Item(int rule, int rules, const std::vector<std::string>& regex_of, int depth) {
    switch (Int(0, 5)) {
      case 0: return {"\"ab\"", "ab"};
      case 1: return {"\"é\\n\"", "é\\n"};
      case 2: return {"[a-c]", "[a-c]"};
      case 3: return {"[^a\\n]", "[^a\\n]"};
      case 4:
        if (depth < 2) {
          const Spelled inner = Alternation(rule, rules, regex_of, depth + 1);
          return {"(" + inner.grammar + ")", "(?:" + inner.regex + ")"};
        }
        return {"'x'", "x"};
      default:
        if (rule + 1 < rules) {
          const int target = Int(rule + 1, rules - 1);
          return {"r" + std::to_string(target), regex_of[target]};
        }
        return {"\"c\"", "c"};
    }
  }

  std::mt19937 rng_;
};

TEST(Grammar, AgreesWithTheRegexItSpellsOut) {
  GrammarGen gen(20261202);
  const std::vector<std::string> alphabet = {"a", "b", "c", "x", "é", "\n", "中"};
  int compared = 0, matches = 0;
  for (int i = 0; i < 300; ++i) {
    const Spelled s = gen.Make();
    auto compiled = CompileGrammar(s.grammar);
    auto r = Regex::Compile(s.regex, /*cached=*/false);
    ASSERT_EQ(compiled.ok(), r.ok()) << s.grammar << "\n" << s.regex;
    if (!compiled.ok()) continue;
    const std::shared_ptr<const Regex>* g = &compiled->regex;
    ASSERT_NE(*g, nullptr);
    std::vector<std::string> texts;
    for (int t = 0; t < 60; ++t) {
      std::string text;
      for (int n = std::uniform_int_distribution<>(0, 8)(gen.rng()); n > 0; --n) {
        text += alphabet[gen.rng()() % alphabet.size()];
      }
      texts.push_back(text);
    }
    // And walks of the grammar's automaton, so that matches are compared too.
    for (int t = 0; t < 20; ++t) {
      std::string text;
      int32_t state = Regex::kStart;
      for (int step = 0; step < 12 && !((*g)->Accepting(state) && gen.rng()() % 3 == 0);
           ++step) {
        std::vector<std::string> next;
        for (const std::string& c : alphabet) {
          int32_t t2 = state;
          for (char b : c) t2 = t2 == Regex::kDead ? t2 : (*g)->Next(t2, static_cast<uint8_t>(b));
          if (t2 != Regex::kDead) next.push_back(c);
        }
        if (next.empty()) break;
        const std::string& c = next[gen.rng()() % next.size()];
        for (char b : c) state = (*g)->Next(state, static_cast<uint8_t>(b));
        text += c;
      }
      texts.push_back(text);
    }
    for (const std::string& text : texts) {
      const bool want = (*r)->Matches(text);
      ASSERT_EQ((*g)->Matches(text), want) << s.grammar << "\n" << s.regex << "\n'" << text << "'";
      matches += want;
      ++compared;
    }
  }
  EXPECT_GT(matches, compared / 10);
}

}  // namespace
}  // namespace cpm::structured
