// Lark → EBNF, as vLLM rewrites a Lark grammar before its backends compile it.
#include "structured/lark.h"

#include <cctype>
#include <set>
#include <vector>

namespace cpm::structured {
namespace {

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The line without its comment and the blanks around it.
std::string_view CleanLine(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '#' || (line[i] == '/' && i + 1 < line.size() && line[i + 1] == '/')) {
      line = line.substr(0, i);
      break;
    }
  }
  return Trim(line);
}

// Lark's 'text' literals as EBNF's "text".
std::string DoubleQuoted(std::string_view expr) {
  std::string out(expr);
  for (char& c : out) {
    if (c == '\'') c = '"';
  }
  return out;
}

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The rule names an expression refers to (outside its string literals).
void References(std::string_view expr, std::set<std::string>* out) {
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (c == '"' || c == '\'') {
      const size_t end = expr.find(c, i + 1);
      i = end == std::string_view::npos ? expr.size() : end + 1;
    } else if (c == '[') {  // a character class
      const size_t end = expr.find(']', i + 1);
      i = end == std::string_view::npos ? expr.size() : end + 1;
    } else if (IsNameStart(c) && (i == 0 || !IsNameChar(expr[i - 1]))) {
      size_t j = i;
      while (j < expr.size() && IsNameChar(expr[j])) ++j;
      out->emplace(expr.substr(i, j - i));
      i = j;
    } else {
      ++i;
    }
  }
}

bool Balanced(std::string_view text) {
  size_t single = 0, dbl = 0;
  for (char c : text) {
    single += c == '\'';
    dbl += c == '"';
  }
  return single % 2 == 0 && dbl % 2 == 0;
}

}  // namespace

bool GrammarIsLikelyLark(std::string_view grammar) {
  if (Trim(grammar).empty()) return false;
  size_t pos = 0;
  while (pos <= grammar.size()) {
    size_t end = grammar.find('\n', pos);
    if (end == std::string_view::npos) end = grammar.size();
    if (CleanLine(grammar.substr(pos, end - pos)).find("::=") != std::string_view::npos) {
      return false;
    }
    pos = end + 1;
  }
  return true;
}

StatusOr<std::string> LarkToEbnf(std::string_view grammar) {
  struct Rule {
    std::string name, definition;
  };
  std::vector<Rule> rules;
  std::set<std::string> referenced;
  size_t pos = 0;
  int line_number = 0;
  while (pos <= grammar.size()) {
    size_t end = grammar.find('\n', pos);
    if (end == std::string_view::npos) end = grammar.size();
    const std::string_view line = CleanLine(grammar.substr(pos, end - pos));
    pos = end + 1;
    ++line_number;
    if (line.empty()) continue;
    const std::string where = " (Lark grammar line " + std::to_string(line_number) + ")";
    if (line[0] == '|') {
      if (rules.empty()) return InvalidArgument("an alternative before any rule" + where);
      const std::string_view alt = Trim(line.substr(1));
      if (!Balanced(alt)) return InvalidArgument("mismatched quotes" + where);
      References(alt, &referenced);
      rules.back().definition += " | " + DoubleQuoted(alt);
      continue;
    }
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("a rule needs 'name: expression'" + where);
    }
    std::string_view name = Trim(line.substr(0, colon));
    while (!name.empty() && (name[0] == '?' || name[0] == '!')) name.remove_prefix(1);
    if (name.empty() || !IsNameStart(name[0])) {
      return InvalidArgument("a rule needs a name" + where);
    }
    for (char c : name) {
      if (!IsNameChar(c)) {
        return InvalidArgument("invalid rule name '" + std::string(name) + "'" + where);
      }
    }
    const std::string_view definition = Trim(line.substr(colon + 1));
    if (!Balanced(definition)) return InvalidArgument("mismatched quotes" + where);
    References(definition, &referenced);
    rules.push_back({std::string(name), DoubleQuoted(definition)});
  }
  if (rules.empty()) return InvalidArgument("the Lark grammar defines no rule");
  std::set<std::string> defined;
  std::string root = rules.front().name;
  for (const Rule& r : rules) {
    defined.insert(r.name);
    if (r.name == "start") root = "start";
  }
  std::string undefined;
  for (const std::string& name : referenced) {
    if (!defined.count(name)) undefined += (undefined.empty() ? "" : ", ") + name;
  }
  if (!undefined.empty()) {
    return InvalidArgument("the Lark grammar refers to rules it does not define: " + undefined);
  }
  std::string ebnf = "root ::= " + root + "\n";
  for (const Rule& r : rules) ebnf += r.name + " ::= " + r.definition + "\n";
  return ebnf;
}

}  // namespace cpm::structured
