// Template lexer. Follows jinja2's lexer rules for the environment transformers uses:
// newlines normalised to "\n", one trailing newline dropped, `{%-`/`-%}` strip all whitespace,
// lstrip_blocks removes indentation before `{%` and `{#` on their own line, trim_blocks removes
// the newline after `%}` and `#}`, `+` disables both, `{% raw %}` passes text through.
#include "chat/lexer.h"

#include <cctype>

#include "chat/text_util.h"

namespace cpm::jinja {

Status SyntaxError(int line, int column, const std::string& message) {
  return InvalidArgument("chat template line " + std::to_string(line) + ", column " +
                         std::to_string(column) + ": " + message);
}

namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Python's str.rstrip() / regex \s* over Unicode whitespace.
size_t RStripEnd(const std::string& s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len;
    if (!IsPyWhitespace(DecodeAt(s, start, &len))) break;
    end = start;
  }
  return end;
}

size_t SkipWhitespace(const std::string& s, size_t pos) {
  while (pos < s.size()) {
    size_t len;
    if (!IsPyWhitespace(DecodeAt(s, pos, &len))) break;
    pos += len;
  }
  return pos;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  StatusOr<std::vector<Token>> Run();

 private:
  void Position(size_t offset, int* line, int* column) const;
  Token Make(TokenKind kind, std::string value, size_t offset) const {
    Token t{kind, std::move(value), 1, 1};
    Position(offset, &t.line, &t.column);
    return t;
  }
  Status ErrorAt(size_t offset, const std::string& message) const {
    int line, column;
    Position(offset, &line, &column);
    return SyntaxError(line, column, message);
  }
  // Lexes the inside of `{{ ... }}` or `{% ... %}` starting at pos_; leaves pos_ after the end
  // delimiter and any whitespace it consumes.
  Status LexTag(bool is_block, size_t open_offset);
  Status LexString(size_t* pos);
  // Recognises `{% raw %}` at `tag_start`; on success emits the raw text and returns true.
  StatusOr<bool> TryRaw(size_t tag_start, std::string* pending_text);
  void EmitText(std::string text) {
    if (!text.empty()) tokens_.push_back(Make(TokenKind::kText, std::move(text), text_start_));
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  // Memo for Position(): last line index, byte offset and 0-based column computed.
  mutable size_t last_line_ = SIZE_MAX;
  mutable size_t last_offset_ = 0;
  mutable size_t last_column_ = 0;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  size_t text_start_ = 0;
};

void Lexer::Position(size_t offset, int* line, int* column_out) const {
  size_t lo = 0, hi = line_starts_.size();
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (line_starts_[mid] <= offset) lo = mid; else hi = mid;
  }
  *line = static_cast<int>(lo) + 1;
  // Tokens arrive in source order, so continue counting from the previous position on the same
  // line instead of from the line start (which is quadratic on one-line templates).
  size_t from = line_starts_[lo];
  size_t column = 0;
  if (last_line_ == lo && last_offset_ <= offset) {
    from = last_offset_;
    column = last_column_;
  }
  column += CodePointCount(std::string_view(src_).substr(from, offset - from));
  last_line_ = lo;
  last_offset_ = offset;
  last_column_ = column;
  *column_out = static_cast<int>(column) + 1;
}

StatusOr<std::vector<Token>> Lexer::Run() {
  // jinja2 joins source.splitlines() with "\n": CRLF and CR become LF and the final newline
  // is lost (keep_trailing_newline=False).
  std::string norm;
  norm.reserve(src_.size());
  for (size_t i = 0; i < src_.size(); ++i) {
    if (src_[i] == '\r') {
      norm += '\n';
      if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
    } else {
      norm += src_[i];
    }
  }
  if (!norm.empty() && norm.back() == '\n') norm.pop_back();
  src_ = std::move(norm);
  line_starts_.push_back(0);
  for (size_t i = 0; i < src_.size(); ++i) {
    if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  while (pos_ < src_.size()) {
    text_start_ = pos_;
    size_t tag = std::string::npos;
    for (size_t i = pos_; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        tag = i;
        break;
      }
    }
    if (tag == std::string::npos) {
      EmitText(src_.substr(pos_));
      pos_ = src_.size();
      break;
    }
    std::string text = src_.substr(pos_, tag - pos_);
    char kind = src_[tag + 1];
    char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
    bool line_starting = pos_ == 0 || src_[pos_ - 1] == '\n';
    if (sign == '-') {
      text.resize(RStripEnd(text));
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: drop spaces/tabs between the line start and the tag.
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if (l_pos > 0 || line_starting) {
        if (RStripEnd(text) <= l_pos) text.resize(l_pos);
      }
    }
    if (kind == '%') {
      CPM_ASSIGN_OR_RETURN(bool raw, TryRaw(tag, &text));
      if (raw) continue;
    }
    EmitText(std::move(text));
    size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
    if (kind == '#') {
      size_t end = src_.find("#}", body);
      if (end == std::string::npos) return ErrorAt(tag, "unterminated comment");
      pos_ = end + 2;
      if (end > body && src_[end - 1] == '-') {
        pos_ = SkipWhitespace(src_, pos_);
      } else if (!(end > body && src_[end - 1] == '+') && pos_ < src_.size() && src_[pos_] == '\n') {
        ++pos_;  // trim_blocks
      }
      continue;
    }
    bool is_block = kind == '%';
    tokens_.push_back(Make(is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", tag));
    pos_ = body;
    CPM_RETURN_IF_ERROR(LexTag(is_block, tag));
  }
  tokens_.push_back(Make(TokenKind::kEof, "", src_.size()));
  return std::move(tokens_);
}

StatusOr<bool> Lexer::TryRaw(size_t tag_start, std::string* pending_text) {
  size_t p = tag_start + 2;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
  p = SkipWhitespace(src_, p);
  if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) return false;
  p = SkipWhitespace(src_, p + 3);
  bool strip_after_open = false;
  if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) strip_after_open = src_[p++] == '-';
  if (src_.compare(p, 2, "%}") != 0) return ErrorAt(p, "expected '%}' after 'raw'");
  p += 2;
  // Find {% endraw %} with optional whitespace control.
  for (size_t q = src_.find("{%", p); q != std::string::npos; q = src_.find("{%", q + 2)) {
    size_t r = q + 2;
    bool strip_before_close = r < src_.size() && src_[r] == '-';
    if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
    r = SkipWhitespace(src_, r);
    if (src_.compare(r, 6, "endraw") != 0) continue;
    r = SkipWhitespace(src_, r + 6);
    bool strip_after_close = false;
    if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) strip_after_close = src_[r++] == '-';
    if (src_.compare(r, 2, "%}") != 0) continue;
    EmitText(std::move(*pending_text));
    std::string raw = src_.substr(p, q - p);
    if (strip_after_open) raw.erase(0, SkipWhitespace(raw, 0));
    if (strip_before_close) {
      raw.resize(RStripEnd(raw));
    } else if (src_[q + 2] != '+') {
      // lstrip_blocks applies to {% endraw %} too: indentation on its own line goes.
      size_t l_pos = raw.rfind('\n');
      if (l_pos != std::string::npos && RStripEnd(raw) <= l_pos + 1) raw.resize(l_pos + 1);
    }
    text_start_ = p;
    EmitText(std::move(raw));
    pos_ = r + 2;
    if (strip_after_close) {
      pos_ = SkipWhitespace(src_, pos_);
    } else if (pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    return true;
  }
  return ErrorAt(tag_start, "missing {% endraw %}");
}

Status Lexer::LexString(size_t* pos) {
  size_t start = *pos;
  char quote = src_[start];
  std::string out;
  size_t i = start + 1;
  while (true) {
    if (i >= src_.size()) return ErrorAt(start, "unterminated string literal");
    char c = src_[i];
    if (c == quote) break;
    if (c != '\\') {
      out += c;
      ++i;
      continue;
    }
    if (i + 1 >= src_.size()) return ErrorAt(start, "unterminated string literal");
    char e = src_[i + 1];
    i += 2;
    // Python's unicode-escape decoding, which jinja2 applies to string literals.
    switch (e) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // line continuation
      case 'x': case 'u': case 'U': {
        size_t digits = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
        if (i + digits > src_.size()) return ErrorAt(i - 2, "truncated \\" + std::string(1, e) + " escape");
        uint32_t cp = 0;
        for (size_t k = 0; k < digits; ++k) {
          char h = src_[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) {
            return ErrorAt(i - 2, "truncated \\" + std::string(1, e) + " escape");
          }
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (cp > 0x10FFFF) return ErrorAt(i - 2, "illegal Unicode character");
        AppendUtf8(&out, cp);
        i += digits;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
            cp = cp * 8 + static_cast<uint32_t>(src_[i] - '0');
          }
          AppendUtf8(&out, cp);
        } else {
          // Unknown escapes keep their backslash, as in Python.
          out += '\\';
          out += e;
        }
    }
  }
  tokens_.push_back(Make(TokenKind::kString, std::move(out), start));
  *pos = i + 1;
  return OkStatus();
}

Status Lexer::LexTag(bool is_block, size_t open_offset) {
  const char close = is_block ? '%' : '}';
  int depth = 0;  // open (, [, { inside the tag: a '}}' there closes a dict, not the tag
  size_t& p = pos_;
  while (true) {
    p = SkipWhitespace(src_, p);
    if (p >= src_.size()) {
      return ErrorAt(open_offset, is_block ? "unexpected end of template, expected '%}'"
                                           : "unexpected end of template, expected '}}'");
    }
    char c = src_[p];
    // End delimiters: `-%}` strips following whitespace, `+%}` keeps the newline, `%}` eats one.
    if (depth == 0) {
      bool minus = c == '-' && src_.compare(p + 1, 2, std::string{close, '}'}) == 0;
      bool plus = is_block && c == '+' && src_.compare(p + 1, 2, "%}") == 0;
      bool plain = src_.compare(p, 2, std::string{close, '}'}) == 0;
      if (minus || plus || plain) {
        tokens_.push_back(Make(is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p));
        p += plain ? 2 : 3;
        if (minus) {
          p = SkipWhitespace(src_, p);
        } else if (is_block && plain && p < src_.size() && src_[p] == '\n') {
          ++p;  // trim_blocks
        }
        return OkStatus();
      }
    }
    if (c == '\'' || c == '"') {
      CPM_RETURN_IF_ERROR(LexString(&p));
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = p;
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
      bool is_float = false;
      if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        is_float = true;
        ++p;
        while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) ++p;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
          is_float = true;
          p = q;
          while (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) ++p;
        }
      }
      std::string num;
      for (size_t k = start; k < p; ++k) {
        if (src_[k] != '_') num += src_[k];
      }
      tokens_.push_back(Make(is_float ? TokenKind::kFloat : TokenKind::kInt, num, start));
      continue;
    }
    if (IsNameStart(c)) {
      size_t start = p;
      while (p < src_.size() && IsNameChar(src_[p])) ++p;
      tokens_.push_back(Make(TokenKind::kName, src_.substr(start, p - start), start));
      continue;
    }
    static const char* kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
    std::string op;
    for (const char* two : kTwoChar) {
      if (src_.compare(p, 2, two) == 0) {
        op = two;
        break;
      }
    }
    if (op.empty()) {
      if (std::string("+-*/%~()[]{},.:|=<>").find(c) == std::string::npos) {
        return ErrorAt(p, std::string("unexpected character '") + c + "'");
      }
      op = std::string(1, c);
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') {
        if (depth == 0) return ErrorAt(p, std::string("unexpected '") + c + "'");
        --depth;
      }
    }
    tokens_.push_back(Make(TokenKind::kOp, op, p));
    p += op.size();
  }
}

}  // namespace

StatusOr<std::vector<Token>> Tokenize(const std::string& source) {
  Lexer lexer(source);
  return lexer.Run();
}

}  // namespace cpm::jinja
