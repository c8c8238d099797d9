// The regex automaton against PCRE2 (the reference for what a pattern matches): random
// patterns of the syntax both take, written for each, compared on random texts and on texts
// the automaton itself generates; which prefixes can still match, against PCRE2's partial
// matching; hand cases for the syntax, UTF-8 and the errors.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "structured/regex.h"

namespace cpm::structured {
namespace {

std::shared_ptr<const Regex> Compile(const std::string& pattern) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << pattern << ": " << re.status().message();
  return re.ok() ? *re : nullptr;
}

std::string Error(const std::string& pattern) {
  auto re = Regex::Compile(pattern);
  EXPECT_FALSE(re.ok()) << pattern;
  return re.ok() ? std::string() : re.status().message();
}

TEST(Regex, MatchesWholeTexts) {
  const auto re = Compile(R"(\d{3}-\d{4})");
  EXPECT_TRUE(re->Matches("555-1234"));
  EXPECT_FALSE(re->Matches("555-12345"));
  EXPECT_FALSE(re->Matches("x555-1234"));
  EXPECT_FALSE(re->Matches("555-123"));
  const auto words = Compile("(?:cat|dog)s?|(?P<n>bird){2,}");
  for (const char* yes : {"cat", "dogs", "birdbird", "birdbirdbird"}) {
    EXPECT_TRUE(words->Matches(yes)) << yes;
  }
  for (const char* no : {"", "cats!", "bird", "catdog"}) EXPECT_FALSE(words->Matches(no)) << no;
  EXPECT_TRUE(Compile("^a*$")->Matches(""));
  EXPECT_TRUE(Compile("a{,2}")->Matches("aa"));
  EXPECT_FALSE(Compile("a{,2}")->Matches("aaa"));
  EXPECT_TRUE(Compile("a{x")->Matches("a{x"));    // not a quantifier: literal, as Python
  EXPECT_TRUE(Compile("x{2}?")->Matches("xx"));   // lazy: the same texts
}

TEST(Regex, ReadsEscapesAndClasses) {
  EXPECT_TRUE(Compile(R"(\x41\u00e9\u{4e2d}\U0001F600\uD83D\uDE00)")->Matches("Aé中😀😀"));
  EXPECT_TRUE(Compile(R"([\]a-c\-]+)")->Matches("]b-a"));
  EXPECT_TRUE(Compile("[]a]")->Matches("]"));
  EXPECT_TRUE(Compile(R"(\n\t\cJ\0)")->Matches(std::string("\n\t\n\0", 4)));
  EXPECT_TRUE(Compile(R"(\s)")->Matches("\xc2\xa0"));  // U+00A0, as xgrammar's \s
  EXPECT_FALSE(Compile(R"(\w)")->Matches("é"));        // ASCII word characters only
  EXPECT_TRUE(Compile(R"([^a])")->Matches("\n"));
  EXPECT_TRUE(Compile(".")->Matches("\n"));            // any character, as xgrammar's '.'
  EXPECT_TRUE(Compile("[é-ê]")->Matches("ê"));
  EXPECT_FALSE(Compile("[é-ê]")->Matches("e"));
}

TEST(Regex, AcceptsOnlyWellFormedUtf8) {
  const auto any = Compile(".*");
  EXPECT_TRUE(any->Matches("aé中😀"));
  for (const char* bad : {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80", "\xe4\xb8"}) {
    EXPECT_FALSE(any->Matches(bad)) << bad;
  }
  // A character may be split across tokens: its first bytes lead to a live state.
  int32_t s = Regex::kStart;
  for (char c : std::string("中").substr(0, 2)) s = any->Next(s, static_cast<uint8_t>(c));
  EXPECT_NE(s, Regex::kDead);
  EXPECT_FALSE(any->Accepting(s));
}

TEST(Regex, RefusesDeadEnds) {
  // After "a", a 'b' can never lead to a match: refused at once, not at the end.
  const auto re = Compile("ab?c|ad");
  int32_t s = re->Next(Regex::kStart, 'a');
  ASSERT_NE(s, Regex::kDead);
  EXPECT_NE(re->Next(s, 'b'), Regex::kDead);
  EXPECT_EQ(re->Next(s, 'e'), Regex::kDead);
  EXPECT_EQ(Compile("a|x$y")->Next(Regex::kStart, 'x'), Regex::kDead);
}

TEST(Regex, RecentPatternsShareTheirAutomaton) {
  const auto a = Compile("[a-f]{3}\\d+");
  const auto b = Compile("[a-f]{3}\\d+");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->id(), b->id());
  EXPECT_NE(Compile("[a-f]{3}\\d*")->id(), a->id());
}

TEST(Regex, CountsCharactersToAMatch) {
  const auto alt = Compile("ab|cdefgh");
  EXPECT_EQ(alt->MinChars(Regex::kStart), 2);
  EXPECT_EQ(alt->MaxChars(Regex::kStart), 6);
  const auto c = alt->Next(Regex::kStart, 'c');
  EXPECT_EQ(alt->MinChars(c), 5);
  EXPECT_EQ(alt->MaxChars(c), 5);
  const auto star = Compile("xa*");
  EXPECT_EQ(star->MinChars(Regex::kStart), 1);
  EXPECT_EQ(star->MaxChars(Regex::kStart), Regex::kUnbounded);
  // A character's continuation bytes cost nothing: after é's first byte one more é is to come.
  const auto e2 = Compile("é{2}");
  EXPECT_EQ(e2->MinChars(Regex::kStart), 2);
  const auto lead = e2->Next(Regex::kStart, 0xC3);
  EXPECT_EQ(e2->MinChars(lead), 1);
  EXPECT_EQ(e2->MaxChars(lead), 1);
  EXPECT_EQ(Compile("(a|bc)?")->MinChars(Regex::kStart), 0);
}

TEST(Regex, ExplainsWhatItRefuses) {
  const auto has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  has(Error("(a"), "missing ), unterminated subpattern at offset 0");
  has(Error("a)"), "unbalanced parenthesis ')' at offset 1");
  has(Error("[ab"), "unterminated character set at offset 0");
  has(Error("*a"), "nothing to repeat at offset 0");
  has(Error("a**"), "multiple repeat at offset 2");
  has(Error("a*+"), "possessive quantifiers are not supported");
  has(Error(R"((a)\1)"), "backreferences are not supported at offset 3");
  has(Error("(?=a)"), "lookahead is not supported");
  has(Error("(?<!a)b"), "lookbehind is not supported");
  has(Error("(?i)a"), "inline flags");
  has(Error(R"(\bword)"), "word boundaries");
  has(Error(R"(\p{L})"), "Unicode property classes");
  has(Error(R"(\q)"), "bad escape \\q");
  has(Error("[z-a]"), "bad character range at offset 1");
  has(Error("a{3,2}"), "min repeat greater than max repeat");
  has(Error("a{1001}"), "repeat count above 1000");
  has(Error(R"(\uD800)"), "lone surrogate");
  has(Error("a^b"), "matches no text");
  has(Error("(?:(?:a{1000}){1000}){1000}"), "too complex");
  // Within the state bound, but its states stand for 58M NFA states (~470 MB, 6 s to build).
  has(Error("(.{0,50}){0,50}"), "stand for more than");
  const auto nested = Compile("(.{0,20}){0,20}");  // 7.6k states, within every bound
  if (nested != nullptr) {
    EXPECT_TRUE(nested->Matches(std::string(400, 'x')));
    EXPECT_FALSE(nested->Matches(std::string(401, 'x')));
  }
  has(Error("(" + std::string(200, '(') + ")" + std::string(200, ')')), "nested deeper");
}

// ---- Against PCRE2 ----

class Pcre2 {
 public:
  // Full matches: anchored at both ends, '.' matches newlines, '$' only the very end.
  explicit Pcre2(const std::string& pattern) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &err, &offset,
                          nullptr);
    const std::string tail = "(?:" + pattern + ")\\z";
    prefix_code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(tail.data()), tail.size(),
                                 PCRE2_UTF | PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &err, &offset,
                                 nullptr);
    data_ = pcre2_match_data_create(16, nullptr);
  }
  ~Pcre2() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
    pcre2_code_free(prefix_code_);
  }
  bool ok() const { return code_ != nullptr && prefix_code_ != nullptr; }
  bool Matches(const std::string& s) const {
    return pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                       PCRE2_ANCHORED | PCRE2_ENDANCHORED, data_, nullptr) >= 0;
  }
  // `s` (non-empty, whole characters) is a match or the start of one.
  bool CanContinue(const std::string& s) const {
    const int rc = pcre2_match(prefix_code_, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(),
                               0, PCRE2_ANCHORED | PCRE2_PARTIAL_HARD, data_, nullptr);
    return rc >= 0 || rc == PCRE2_ERROR_PARTIAL;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_code* prefix_code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// A random pattern written twice: in our syntax and in PCRE2's, the same language.
struct PatternPair {
  std::string ours, pcre;
  void Add(const std::string& both) {
    ours += both;
    pcre += both;
  }
  void Add(const PatternPair& p) {
    ours += p.ours;
    pcre += p.pcre;
  }
};

const std::vector<std::string> kChars = {"a", "b", "c", "x", "-", "é", "中", "😀", "\n", " "};

class PatternGen {
 public:
  explicit PatternGen(uint32_t seed) : rng_(seed) {}

  PatternPair Alternation(int depth) {
    PatternPair p = Sequence(depth);
    while (Coin(0.25)) {
      p.Add("|");
      p.Add(Sequence(depth));
    }
    return p;
  }
  std::mt19937& rng() { return rng_; }

 private:
  bool Coin(double p) { return std::uniform_real_distribution<>(0, 1)(rng_) < p; }
  int Int(int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(rng_); }

  PatternPair Sequence(int depth) {
    PatternPair p;
    for (int i = Int(0, 3); i > 0; --i) {
      p.Add(Atom(depth));
      p.Add(Quantifier());
    }
    return p;
  }

  std::string Quantifier() {
    std::string q;
    switch (Int(0, 9)) {
      case 0: q = "*"; break;
      case 1: q = "+"; break;
      case 2: q = "?"; break;
      case 3: q = "{" + std::to_string(Int(0, 3)) + "}"; break;
      case 4: q = "{" + std::to_string(Int(0, 2)) + ",}"; break;
      case 5: {
        const int lo = Int(0, 2);
        q = "{" + std::to_string(lo) + "," + std::to_string(lo + Int(0, 2)) + "}";
        break;
      }
      default: return q;
    }
    if (Coin(0.2)) q += "?";
    return q;
  }

  PatternPair Literal() {
    const std::string& c = kChars[Int(0, static_cast<int>(kChars.size()) - 1)];
    PatternPair p;
    if (c == "\n") {
      p.Add("\\n");
    } else if (c == "é" && Coin(0.5)) {
      p.ours = "\\u00e9";
      p.pcre = "\\x{e9}";
    } else {
      p.Add(c);
    }
    return p;
  }

  PatternPair Class() {
    PatternPair p;
    p.Add(Coin(0.3) ? "[^" : "[");
    for (int i = Int(1, 3); i > 0; --i) {
      switch (Int(0, 4)) {
        case 0: p.Add("a-c"); break;
        case 1: p.Add("\\d"); break;
        case 2:
          p.ours += "\\s";
          p.pcre += "\\t-\\r \\x{a0}";
          break;
        case 3: p.Add("é-中"); break;
        default: {
          const std::string& c = kChars[Int(0, static_cast<int>(kChars.size()) - 1)];
          p.Add(c == "-" ? "\\-" : c == "\n" ? "\\n" : c);
        }
      }
    }
    p.Add("]");
    return p;
  }

  PatternPair Atom(int depth) {
    PatternPair p;
    switch (Int(0, 9)) {
      case 0: p.Add("."); return p;
      case 1: return Class();
      case 2: p.Add(Coin(0.5) ? "\\d" : "\\W"); return p;
      case 3:
        p.ours = "\\s";
        p.pcre = "[\\t-\\r \\x{a0}]";
        return p;
      case 4:
      case 5:
        if (depth < 3) {
          p.Add(Coin(0.5) ? "(" : "(?:");
          p.Add(Alternation(depth + 1));
          p.Add(")");
          return p;
        }
        return Literal();
      default: return Literal();
    }
  }

  std::mt19937 rng_;
};

// Random texts over the patterns' characters and a few others.
std::string RandomText(std::mt19937& rng) {
  static const std::vector<std::string> alphabet = {"a", "b", "c", "x", "-", "é", "中", "😀",
                                                    "\n", " ", "0", "7", "\xc2\xa0", "Z", "_"};
  std::string s;
  for (int n = std::uniform_int_distribution<>(0, 7)(rng); n > 0; --n) {
    s += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
  }
  return s;
}

// A random walk of the automaton over whole characters of kChars and others, stopping at
// random once it accepts: never stuck, since states that cannot reach a match are cut.
std::string Walk(const Regex& re, std::mt19937& rng, bool* stuck) {
  static const std::vector<std::string> alphabet = {"a", "b", "c", "x", "-", "é", "中", "😀",
                                                    "\n", " ", "0", "7", "\xc2\xa0", "Z",
                                                    "_",  "ê", "\t"};
  std::string text;
  int32_t s = Regex::kStart;
  for (int steps = 0; steps < 24; ++steps) {
    if (re.Accepting(s) && std::uniform_int_distribution<>(0, 3)(rng) == 0) break;
    std::vector<std::pair<std::string, int32_t>> moves;
    for (const std::string& c : alphabet) {
      int32_t t = s;
      for (char b : c) {
        if (t != Regex::kDead) t = re.Next(t, static_cast<uint8_t>(b));
      }
      if (t != Regex::kDead) moves.push_back({c, t});
    }
    if (moves.empty()) break;
    const auto& [c, t] = moves[std::uniform_int_distribution<size_t>(0, moves.size() - 1)(rng)];
    text += c;
    s = t;
  }
  *stuck = !re.Accepting(s) && [&] {  // no byte at all leads on
    for (int b = 0; b < 256; ++b) {
      if (re.Next(s, static_cast<uint8_t>(b)) != Regex::kDead) return false;
    }
    return true;
  }();
  return text;
}

TEST(Regex, AgreesWithPcre2OnRandomPatterns) {
  PatternGen gen(20261202);
  int patterns = 0, compared = 0, positives = 0;
  for (int i = 0; i < 600; ++i) {
    const PatternPair p = gen.Alternation(0);
    auto ours = Regex::Compile(p.ours);
    Pcre2 ref(p.pcre);
    ASSERT_TRUE(ref.ok()) << p.pcre;
    if (!ours.ok()) {
      // Only a pattern that matches nothing may be refused (e.g. "[^\s\S]").
      ASSERT_NE(ours.status().message().find("matches no text"), std::string::npos)
          << p.ours << ": " << ours.status().message();
      continue;
    }
    ++patterns;
    const Regex& re = **ours;
    std::vector<std::string> texts;
    for (int t = 0; t < 40; ++t) texts.push_back(RandomText(gen.rng()));
    for (int t = 0; t < 20; ++t) {
      bool stuck = false;
      texts.push_back(Walk(re, gen.rng(), &stuck));
      ASSERT_FALSE(stuck) << p.ours << " after " << texts.back();
    }
    for (const std::string& text : texts) {
      const bool want = ref.Matches(text);
      ASSERT_EQ(re.Matches(text), want) << "pattern " << p.ours << " / " << p.pcre << " text '"
                                        << text << "'";
      positives += want;
      ++compared;
      if (want) {  // its length lies within what the start state counts
        int64_t chars = 0;
        for (char ch : text) chars += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
        ASSERT_GE(chars, re.MinChars(Regex::kStart)) << p.ours << " " << text;
        ASSERT_LE(chars, re.MaxChars(Regex::kStart)) << p.ours << " " << text;
      }
      // Every non-empty prefix of whole characters: alive exactly when PCRE2 says a match
      // can still begin so (once dead, at the end of that character).
      int32_t s = Regex::kStart;
      for (size_t b = 0; b < text.size(); ++b) {
        s = re.Next(s, static_cast<uint8_t>(text[b]));
        size_t end = b + 1;
        while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
        if (s != Regex::kDead && end != b + 1) continue;  // inside a character
        const std::string prefix = text.substr(0, end);
        ASSERT_EQ(s != Regex::kDead, ref.CanContinue(prefix))
            << "pattern [" << p.ours << "] pcre [" << p.pcre << "] prefix '" << prefix << "'";
        if (s == Regex::kDead) break;
      }
    }
  }
  EXPECT_GT(patterns, 500);
  EXPECT_GT(positives, compared / 5);  // the walks make the comparison about matches too
}

}  // namespace
}  // namespace cpm::structured
