// Lark → EBNF, as vLLM rewrites a Lark grammar before its backends compile it.
#include "structured/lark.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace cpm::structured {
namespace {

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The end (one past the closing delimiter) of the quoted string, /regex/ or [class] that starts
// at `i`, a backslash escaping the next character; npos if it is not closed on the line.
size_t LiteralEnd(std::string_view line, size_t i) {
  const char close = line[i] == '[' ? ']' : line[i];
  for (size_t j = i + 1; j < line.size(); ++j) {
    if (line[j] == '\\') {
      ++j;
    } else if (line[j] == close) {
      return j + 1;
    }
  }
  return std::string_view::npos;
}

// Whether a '/' at `i` opens a regex rather than a "//" comment.
bool OpensRegex(std::string_view line, size_t i) {
  return line[i] == '/' && !(i + 1 < line.size() && line[i + 1] == '/');
}

// The line without its comment (# or // to the end, outside strings and regexes) and the
// blanks around it.
std::string_view CleanLine(std::string_view line) {
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '#' || (c == '/' && !OpensRegex(line, i))) return Trim(line.substr(0, i));
    if (c == '"' || c == '\'' || c == '/') {
      const size_t end = LiteralEnd(line, i);
      if (end == std::string_view::npos) break;  // unterminated: reported by the conversion
      i = end - 1;
    }
  }
  return Trim(line);
}

// The characters of a quoted Lark string (between its quotes, escapes kept) as the body of an
// EBNF "..." string: a '"' inside a single-quoted string escaped, "\'" unescaped.
std::string DoubleQuotedBody(std::string_view body, char quote) {
  if (quote == '"') return std::string(body);
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] == '\\' && i + 1 < body.size()) {
      if (body[i + 1] != '\'') out += '\\';
      out += body[++i];
    } else {
      if (body[i] == '"') out += '\\';
      out += body[i];
    }
  }
  return out;
}

// The one character a Lark range end ("a" in "a".."z") stands for, if it is one character.
std::optional<uint32_t> SingleCharacter(std::string_view body) {
  if (body.size() == 2 && body[0] == '\\') {
    const std::string from = "nrt\\\"'", to = "\n\r\t\\\"'";
    const size_t k = from.find(body[1]);
    if (k != std::string::npos) return static_cast<unsigned char>(to[k]);
    return std::nullopt;
  }
  const auto b = reinterpret_cast<const unsigned char*>(body.data());
  const size_t n = body.size();
  if (n == 1 && b[0] < 0x80) return b[0];
  if (n == 2 && (b[0] & 0xE0) == 0xC0) return (b[0] & 0x1Fu) << 6 | (b[1] & 0x3Fu);
  if (n == 3 && (b[0] & 0xF0) == 0xE0) {
    return (b[0] & 0x0Fu) << 12 | (b[1] & 0x3Fu) << 6 | (b[2] & 0x3Fu);
  }
  if (n == 4 && (b[0] & 0xF8) == 0xF0) {
    return (b[0] & 0x07u) << 18 | (b[1] & 0x3Fu) << 12 | (b[2] & 0x3Fu) << 6 | (b[3] & 0x3Fu);
  }
  return std::nullopt;
}

std::string CodePointEscape(uint32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  return buf;
}

// The quoted string at expr[i], or the range it opens ("a".."z", blanks around the dots
// allowed), appended to `out` in EBNF: a double-quoted string, or the range as a class. The
// index after it.
StatusOr<size_t> ConvertQuoted(std::string_view expr, size_t i, std::string* out) {
  const size_t end = LiteralEnd(expr, i);
  if (end == std::string_view::npos) return InvalidArgument("mismatched quotes");
  const std::string_view body = expr.substr(i + 1, end - i - 2);
  if (end < expr.size() && (expr[end] == 'i' || expr[end] == 's')) {
    return InvalidArgument("Lark string flags ('" + std::string(1, expr[end]) +
                           "') are not supported");
  }
  size_t dots = end;
  while (dots < expr.size() && (expr[dots] == ' ' || expr[dots] == '\t')) ++dots;
  size_t second = dots + 2;
  while (second < expr.size() && (expr[second] == ' ' || expr[second] == '\t')) ++second;
  if (expr.substr(dots, 2) != ".." || second >= expr.size() ||
      (expr[second] != '"' && expr[second] != '\'')) {
    *out += '"' + DoubleQuotedBody(body, expr[i]) + '"';
    return end;
  }
  const size_t end2 = LiteralEnd(expr, second);
  if (end2 == std::string_view::npos) return InvalidArgument("mismatched quotes");
  const auto from = SingleCharacter(body);
  const auto to = SingleCharacter(expr.substr(second + 1, end2 - second - 2));
  if (!from || !to || *from > *to) {
    return InvalidArgument("a Lark range \"a\"..\"z\" needs one character at each end, the "
                           "first not above the second");
  }
  *out += "[" + CodePointEscape(*from) + "-" + CodePointEscape(*to) + "]";
  return end2;
}

// One Lark expression (a rule's body, or an alternative's line) in EBNF: strings
// double-quoted, "a".."z" ranges as classes, /regex/ terminals and [...] kept, an alias
// (-> name) dropped; the rule names it refers to are added to `refs`.
StatusOr<std::string> ConvertExpression(std::string_view expr, std::set<std::string>* refs) {
  std::string out;
  for (size_t i = 0; i < expr.size();) {
    const char c = expr[i];
    if (c == '"' || c == '\'') {
      CPM_ASSIGN_OR_RETURN(i, ConvertQuoted(expr, i, &out));
    } else if (c == '/' || c == '[') {
      const size_t end = LiteralEnd(expr, i);
      if (end == std::string_view::npos) {
        return InvalidArgument(c == '/' ? "unterminated /regex/" : "unterminated '['");
      }
      if (c == '/' && end < expr.size() && std::isalpha(static_cast<unsigned char>(expr[end]))) {
        return InvalidArgument("regex flags are not supported ('" + std::string(1, expr[end]) +
                               "' after a /regex/)");
      }
      out += expr.substr(i, end - i);
      i = end;
    } else if (c == '-' && i + 1 < expr.size() && expr[i + 1] == '>') {
      // An alias names the tree node a match builds; the texts are the same without it.
      i += 2;
      while (i < expr.size() && (expr[i] == ' ' || expr[i] == '\t')) ++i;
      while (i < expr.size() && IsNameChar(expr[i])) ++i;
    } else if (IsNameStart(c) && (i == 0 || !IsNameChar(expr[i - 1]))) {
      size_t j = i;
      while (j < expr.size() && IsNameChar(expr[j])) ++j;
      refs->emplace(expr.substr(i, j - i));
      out += expr.substr(i, j - i);
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return std::string(Trim(out));
}

// Lark's common library (common.lark), each terminal written out in full.
const std::map<std::string, std::string>& CommonTerminals() {
  static const std::map<std::string, std::string> kCommon = [] {
    const std::string digits = "[0-9]+";
    const std::string exp = "[eE] [+-]? " + digits;
    const std::string decimal = "(" + digits + " \".\" [0-9]* | \".\" " + digits + ")";
    const std::string flt = "(" + digits + " " + exp + " | " + decimal + " (" + exp + ")?)";
    const std::string number = "(" + flt + " | " + digits + ")";
    return std::map<std::string, std::string>{
        {"DIGIT", "[0-9]"},
        {"HEXDIGIT", "[a-fA-F0-9]"},
        {"INT", digits},
        {"SIGNED_INT", "[+-]? " + digits},
        {"DECIMAL", decimal},
        {"_EXP", exp},
        {"FLOAT", flt},
        {"SIGNED_FLOAT", "[+-]? " + flt},
        {"NUMBER", number},
        {"SIGNED_NUMBER", "[+-]? " + number},
        {"ESCAPED_STRING", "\"\\\"\" ([^\"\\\\\\n] | \"\\\\\" [^\\n])* \"\\\"\""},
        {"LCASE_LETTER", "[a-z]"},
        {"UCASE_LETTER", "[A-Z]"},
        {"LETTER", "[a-zA-Z]"},
        {"WORD", "[a-zA-Z]+"},
        {"CNAME", "[_a-zA-Z] [_a-zA-Z0-9]*"},
        {"WS_INLINE", "[ \\t]+"},
        {"WS", "[ \\t\\f\\r\\n]+"},
        {"CR", "\"\\r\""},
        {"LF", "\"\\n\""},
        {"NEWLINE", "(\"\\r\"? \"\\n\")+"},
        {"SH_COMMENT", "\"#\" [^\\n]*"},
        {"CPP_COMMENT", "\"//\" [^\\n]*"},
        {"C_COMMENT", "\"/*\" ([^*] | \"*\"+ [^*/])* \"*\"+ \"/\""},
        {"SQL_COMMENT", "\"--\" [^\\n]*"},
    };
  }();
  return kCommon;
}

// A %-directive: `%import common.NAME`, `%import common.NAME -> ALIAS` or `%import common (A,
// B)` add Lark's common terminals to `imported` (name → definition); every other directive
// (%ignore among them, whose skipping between tokens a character grammar does not have) is an
// error that names it.
Status Directive(std::string_view line, std::map<std::string, std::string>* imported) {
  const auto unsupported = [&] {
    return InvalidArgument("the Lark directive '" +
                           std::string(line.substr(0, line.find_first_of(" \t"))) +
                           "' is not supported (only %import of Lark's common terminals is)");
  };
  if (!line.starts_with("%import")) return unsupported();
  std::string_view rest = Trim(line.substr(7));
  if (!rest.starts_with("common")) {
    return InvalidArgument("only Lark's common library can be imported: " + std::string(line));
  }
  rest = Trim(rest.substr(6));
  std::vector<std::pair<std::string, std::string>> names;  // (terminal, name it is given)
  if (rest.starts_with(".")) {
    rest.remove_prefix(1);
    size_t j = 0;
    while (j < rest.size() && IsNameChar(rest[j])) ++j;
    std::string name(rest.substr(0, j)), as = name;
    const std::string_view tail = Trim(rest.substr(j));
    if (tail.starts_with("->")) as = std::string(Trim(tail.substr(2)));
    else if (!tail.empty()) return InvalidArgument("malformed %import: " + std::string(line));
    names.emplace_back(name, as);
  } else if (rest.starts_with("(") && rest.ends_with(")")) {
    std::string_view list = rest.substr(1, rest.size() - 2);
    while (!Trim(list).empty()) {
      const size_t comma = list.find(',');
      const std::string name(Trim(list.substr(0, comma)));
      names.emplace_back(name, name);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
    }
  } else {
    return InvalidArgument("malformed %import: " + std::string(line));
  }
  for (const auto& [name, as] : names) {
    const auto found = CommonTerminals().find(name);
    if (found == CommonTerminals().end()) {
      return InvalidArgument("Lark's common library has no terminal '" + name + "'");
    }
    if (as.empty() || !IsNameStart(as[0]) ||
        !std::all_of(as.begin(), as.end(), IsNameChar)) {
      return InvalidArgument("malformed %import: " + std::string(line));
    }
    (*imported)[as] = found->second;
  }
  return OkStatus();
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
  std::map<std::string, std::string> imported;
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
    const auto converted = [&](std::string_view expr) -> StatusOr<std::string> {
      auto ebnf = ConvertExpression(expr, &referenced);
      if (!ebnf.ok()) return InvalidArgument(ebnf.status().message() + where);
      return ebnf;
    };
    if (line[0] == '%') {
      if (Status s = Directive(line, &imported); !s.ok()) {
        return InvalidArgument(s.message() + where);
      }
      continue;
    }
    if (line[0] == '|') {
      if (rules.empty()) return InvalidArgument("an alternative before any rule" + where);
      CPM_ASSIGN_OR_RETURN(std::string alt, converted(Trim(line.substr(1))));
      rules.back().definition += " | " + alt;
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
    CPM_ASSIGN_OR_RETURN(std::string definition, converted(Trim(line.substr(colon + 1))));
    rules.push_back({std::string(name), std::move(definition)});
  }
  if (rules.empty()) return InvalidArgument("the Lark grammar defines no rule");
  std::set<std::string> defined;
  std::string root = rules.front().name;
  for (const Rule& r : rules) {
    defined.insert(r.name);
    if (r.name == "start") root = "start";
  }
  for (const auto& [name, definition] : imported) {
    if (defined.count(name)) {
      return InvalidArgument("the Lark grammar defines '" + name + "', which it also imports");
    }
    defined.insert(name);
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
  for (const auto& [name, definition] : imported) ebnf += name + " ::= " + definition + "\n";
  return ebnf;
}

}  // namespace cpm::structured
